#!/usr/bin/env python3
"""failover.py: the time from kill -9 of a leader replica to the first
write a replica acknowledges after it.

usage: failover.py coordd|dispatchd --pid PID --addrs HOST:PORT,... [--limit S]

Sends one write to every address in turn until one answers 2xx (so the
leader is up before the kill), kills PID with SIGKILL, then writes again
every 10 ms, each attempt to the next address, each on a new connection
with a 3 s timeout (a new leader's first write waits for etcd), until one
is acknowledged. Prints "failover_ms N" and the address that answered.
Exits 1 when no write went through before the kill (nothing was
killed), 3 when none did within --limit seconds (30) after it. A coordd write is a PUT of one key; a dispatchd write is a
closure scheduled without blocking (it stays queued: no worker runs).
"""
import argparse
import http.client
import os
import signal
import sys
import time

WRITES = {
    "coordd": ("PUT", "/v1/kv/bench-failover?mode=overwrite", b"x",
               "application/octet-stream"),
    "dispatchd": ("POST", "/v1/queues/bench-failover/closures?block=0",
                  b'{"closures":[{"argv":["true"]}]}', "application/json"),
}


def write(addr, kind):
    method, path, body, ctype = WRITES[kind]
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=3)
    try:
        conn.request(method, path, body, {"Content-Type": ctype})
        return 200 <= conn.getresponse().status < 300
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def until_written(addrs, kind, limit):
    end = time.monotonic() + limit
    i = 0
    while time.monotonic() < end:
        addr = addrs[i % len(addrs)]
        i += 1
        if write(addr, kind):
            return addr
        time.sleep(0.01)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=sorted(WRITES))
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--addrs", required=True)
    ap.add_argument("--limit", type=float, default=30)
    a = ap.parse_args()
    addrs = a.addrs.split(",")
    if until_written(addrs, a.kind, a.limit) is None:
        print("failover.py: no replica took a write before the kill",
              file=sys.stderr)
        return 1
    os.kill(a.pid, signal.SIGKILL)
    t0 = time.monotonic()
    who = until_written(addrs, a.kind, a.limit)
    if who is None:
        print("failover.py: no write acknowledged %g s after the kill"
              % a.limit, file=sys.stderr)
        return 3
    print("failover_ms %.0f %s" % ((time.monotonic() - t0) * 1000, who))
    return 0


if __name__ == "__main__":
    sys.exit(main())
