#!/usr/bin/env python3
"""fake-metadata.py DIR PORTFILE [PORT]: a fake cloud metadata server on
127.0.0.1 for test/08-notices.bats.

It binds PORT (default 0: any free port), writes the port it got to PORTFILE
(atomically, once it listens) and serves until killed. What it answers is
switched by files in DIR, read on every request:

  DIR/status            a number: every request gets that HTTP status (a
                        broken metadata server); absent: normal answers
  DIR/preempted         GCE  /computeMetadata/v1/instance/preempted
                        (absent: FALSE)
  DIR/maintenance-event GCE  /computeMetadata/v1/instance/maintenance-event
                        (absent: NONE)
  DIR/instance-action   AWS  /latest/meta-data/spot/instance-action
                        (absent: 404, as IMDS answers when nothing is planned)
  DIR/scheduledevents   Azure /metadata/scheduledevents (absent: no events)

The headers the real services insist on are checked: Metadata-Flavor: Google
(GCE), Metadata: true and an api-version (Azure), an IMDSv2 session token
(AWS: PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds gives
one; a GET without a valid X-aws-ec2-metadata-token gets 401). A missing
header gets 400. Every request is appended to DIR/requests.log as
"METHOD PATH STATUS".
"""
import http.server
import os
import secrets
import sys
import threading
from urllib.parse import parse_qs, urlsplit

DIR, PORTFILE = sys.argv[1], sys.argv[2]
PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 0
TOKENS = set()
LOCK = threading.Lock()


def read(name, default=None):
    try:
        with open(os.path.join(DIR, name)) as f:
            return f.read()
    except FileNotFoundError:
        return default


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, body="", ctype="text/plain"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with LOCK, open(os.path.join(DIR, "requests.log"), "a") as f:
            f.write("%s %s %d\n" % (self.command, self.path, code))

    def answer(self):
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        forced = read("status")
        if forced is not None and forced.strip():
            return self.reply(int(forced), "broken on purpose\n")

        if path.startswith("/computeMetadata/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.reply(400, "Missing Metadata-Flavor:Google header.\n")
            if self.command != "GET":
                return self.reply(405)
            if path == "/computeMetadata/v1/instance/preempted":
                return self.reply(200, read("preempted", "FALSE"))
            if path == "/computeMetadata/v1/instance/maintenance-event":
                return self.reply(200, read("maintenance-event", "NONE"))
            return self.reply(404)

        if path == "/latest/api/token":
            if self.command != "PUT":
                return self.reply(405)
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.reply(400)
            tok = secrets.token_urlsafe(24)
            with LOCK:
                TOKENS.add(tok)
            return self.reply(200, tok)
        if path.startswith("/latest/"):
            with LOCK:
                ok = self.headers.get("X-aws-ec2-metadata-token") in TOKENS
            if not ok:
                return self.reply(401)
            if self.command != "GET":
                return self.reply(405)
            if path == "/latest/meta-data/spot/instance-action":
                body = read("instance-action")
                if body is None:
                    return self.reply(404, "Not Found")
                return self.reply(200, body, "application/json")
            return self.reply(404)

        if path == "/metadata/scheduledevents":
            if self.headers.get("Metadata") != "true":
                return self.reply(400, '{"error":"Bad request. Required '
                                  'metadata header not specified"}',
                                  "application/json")
            if not query.get("api-version"):
                return self.reply(400, '{"error":"Bad request. api-version '
                                  'was not specified"}', "application/json")
            body = read("scheduledevents",
                        '{"DocumentIncarnation":0,"Events":[]}')
            return self.reply(200, body, "application/json")

        return self.reply(404)

    def do_GET(self):
        self.answer()

    def do_PUT(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.answer()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", PORT), Handler)
tmp = PORTFILE + ".tmp"
with open(tmp, "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(tmp, PORTFILE)
srv.serve_forever()
