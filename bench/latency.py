"""Enqueue-to-start latency on an idle worker: POST one closure running
bench-stamp, which prints the wall clock as it starts; fetch it; the
difference from the moment the POST is sent, on a connection kept alive
as a client that schedules more than once keeps it (enqueue_start_*).
The same with a new connection for each POST, its setup counted
(enqueue_start_newconn_*), as a one-shot client pays it. Prints p50 and
p99 in ms."""
import base64
import http.client
import json
import sys
import time

addr, stamp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = addr.rsplit(":", 1)
body = json.dumps({"closures": [{"argv": [stamp]}]}).encode()
head = {"Content-Type": "application/json"}


def one(conn, fresh):
    if fresh:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
    t0 = time.time_ns()
    conn.request("POST", "/v1/queues/lat/closures", body, head)
    cid = json.loads(conn.getresponse().read())["ids"][0]
    conn.request("GET", "/v1/closures/%d?wait=30s" % cid)
    v = json.loads(conn.getresponse().read())
    if fresh:
        conn.close()
    return (int(base64.b64decode(v["stdout"])) - t0) / 1e6


kept = http.client.HTTPConnection(host, int(port), timeout=30)
lat = {False: [], True: []}
for i in range(n):
    for fresh in (False, True):
        lat[fresh].append(one(kept, fresh))
        time.sleep(0.01)
for fresh, name in ((False, "enqueue_start"), (True, "enqueue_start_newconn")):
    v = sorted(lat[fresh])
    print(f"{name}_p50_ms {v[len(v) // 2]:.3f}")
    print(f"{name}_p99_ms {v[min(len(v) - 1, len(v) * 99 // 100)]:.3f}")
