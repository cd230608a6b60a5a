#!/usr/bin/env python3
"""chaos-proxy.py UPSTREAM PORTFILE [OPTIONS]: an HTTP/1.1 proxy on
127.0.0.1 that breaks connections, for the chaos tests of the preemption
protocol.

It binds a free port, writes it to PORTFILE (atomically, once it listens)
and relays each client connection to UPSTREAM (HOST:PORT) on a connection
of its own, request by request (a request is its head and a body of
Content-Length bytes; replies go back as they come). For each request it
decides, in this order:

  --drop-method M   requests of method M (DELETE, say) are never sent: the
                    client's connection is closed instead (repeatable)
  --refuse P        with probability P, the same for any request
  --cut P           with probability P, the request is sent and the
                    connection closed at once: the request may take effect,
                    its reply is lost
  --seed N          the random choices' seed (default 1)
  --lifetime SEC    exits after SEC seconds (default 120), so that nothing
                    outlives a test that forgot it

Every decision is appended to PORTFILE.log as "ACTION METHOD PATH".
"""
import argparse
import os
import random
import socket
import sys
import threading
import time

LOCK = threading.Lock()


def log(path, line):
    with LOCK, open(path, "a") as f:
        f.write(line + "\n")


def read_request(sock, buf):
    """One request from sock: (bytes, method, path, rest of buf), or None."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    method = parts[0].decode("latin-1")
    path = parts[1].decode("latin-1") if len(parts) > 1 else ""
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or b"0")
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], method, path, rest[length:]


def pump(src, dst):
    """Replies, as they come, until either side closes."""
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client, args, rnd, logpath):
    try:
        host, port = args.upstream.rsplit(":", 1)
        up = socket.create_connection((host, int(port)), timeout=5)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(up, client), daemon=True).start()
    buf = b""
    try:
        while True:
            got = read_request(client, buf)
            if got is None:
                break
            req, method, path, buf = got
            with LOCK:
                refuse = rnd.random() < args.refuse
                cut = rnd.random() < args.cut
            if method in args.drop_method or refuse:
                log(logpath, "drop %s %s" % (method, path))
                break
            up.sendall(req)
            if cut:
                log(logpath, "cut %s %s" % (method, path))
                break
            log(logpath, "pass %s %s" % (method, path))
    except OSError:
        pass
    for s in (client, up):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("upstream")
    p.add_argument("portfile")
    p.add_argument("--drop-method", action="append", default=[])
    p.add_argument("--refuse", type=float, default=0.0)
    p.add_argument("--cut", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lifetime", type=float, default=120.0)
    args = p.parse_args()
    rnd = random.Random(args.seed)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(128)
    tmp = args.portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(tmp, args.portfile)
    end = time.monotonic() + args.lifetime
    ls.settimeout(0.5)
    while time.monotonic() < end:
        try:
            client, _ = ls.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(client, args, rnd,
                                             args.portfile + ".log"),
                         daemon=True).start()
    sys.exit(0)


if __name__ == "__main__":
    main()
