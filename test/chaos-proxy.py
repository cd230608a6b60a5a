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
  --cut-reply P     with probability P, the connection is closed once a
                    whole reply has been relayed to the client: the request
                    took effect and its reply arrived, and the client's next
                    request finds the connection gone
  --rewrite OLD=NEW in every reply's body, OLD becomes NEW (its
                    Content-Length set to fit): to hand one client another
                    address than the one a daemon tells (repeatable)
  --seed N          the random choices' seed (default 1)
  --lifetime SEC    exits after SEC seconds (default 120), so that nothing
                    outlives a test that forgot it

Every decision is appended to PORTFILE.log as "ACTION METHOD PATH"
(cut-reply names the request whose reply it was).

With --cut-reply or --rewrite, replies are relayed one at a time, each its
head and a body of Content-Length bytes; otherwise as they come.
"""
import argparse
import collections
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


def read_message(sock, buf):
    """One request or reply from sock: (head, body, rest of buf), or None
    when sock closes first. The body is Content-Length bytes (none when the
    head has no Content-Length)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or b"0")
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:length], rest[length:]


def read_request(sock, buf):
    """One request from sock: (bytes, method, path, rest of buf), or None."""
    got = read_message(sock, buf)
    if got is None:
        return None
    head, body, rest = got
    parts = head.split(b"\r\n")[0].split(b" ")
    method = parts[0].decode("latin-1")
    path = parts[1].decode("latin-1") if len(parts) > 1 else ""
    return head + b"\r\n\r\n" + body, method, path, rest


def shut(*socks):
    """Shuts each of socks both ways, closed already or not."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


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
    shut(src, dst)


def rewritten(head, body, pairs):
    """A reply with each OLD of pairs in its body made NEW, its
    Content-Length to fit."""
    if not pairs:
        return head + b"\r\n\r\n" + body
    for old, new in pairs:
        body = body.replace(old, new)
    lines = [line for line in head.split(b"\r\n")
             if line.partition(b":")[0].strip().lower() != b"content-length"]
    lines.insert(1, b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def relay_replies(src, dst, args, rnd, logpath, asked):
    """Replies one at a time, until either side closes: each rewritten,
    and after each the connection is cut with probability --cut-reply.
    asked holds the relayed requests' "METHOD PATH", oldest first."""
    buf = b""
    try:
        while True:
            got = read_message(src, buf)
            if got is None:
                break
            head, body, buf = got
            dst.sendall(rewritten(head, body, args.rewrite))
            what = asked.popleft() if asked else "? ?"
            with LOCK:
                cut = rnd.random() < args.cut_reply
            if cut:
                log(logpath, "cut-reply %s" % what)
                break
    except OSError:
        pass
    shut(src, dst)


def serve(client, args, rnd, logpath):
    try:
        host, port = args.upstream.rsplit(":", 1)
        up = socket.create_connection((host, int(port)), timeout=5)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    asked = collections.deque()
    if args.cut_reply > 0 or args.rewrite:
        threading.Thread(target=relay_replies,
                         args=(up, client, args, rnd, logpath, asked),
                         daemon=True).start()
    else:
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
            asked.append("%s %s" % (method, path))
            up.sendall(req)
            if cut:
                log(logpath, "cut %s %s" % (method, path))
                break
            log(logpath, "pass %s %s" % (method, path))
    except OSError:
        pass
    shut(client, up)
    client.close()
    up.close()


def pair(text):
    """OLD=NEW as (OLD, NEW) in bytes."""
    old, sep, new = text.partition("=")
    if not sep or not old:
        raise argparse.ArgumentTypeError("%s is not OLD=NEW" % text)
    return old.encode(), new.encode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("upstream")
    p.add_argument("portfile")
    p.add_argument("--drop-method", action="append", default=[])
    p.add_argument("--refuse", type=float, default=0.0)
    p.add_argument("--cut", type=float, default=0.0)
    p.add_argument("--cut-reply", type=float, default=0.0)
    p.add_argument("--rewrite", action="append", default=[], type=pair)
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
