"""Enqueue-to-start latency on an idle worker: POST one closure running
bench-stamp, which prints the wall clock as it starts; fetch it; the
difference from just before the POST. Prints p50 and p99 in ms."""
import base64
import json
import sys
import time
import urllib.request

addr, stamp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lat = []
for i in range(n):
    body = json.dumps({"closures": [{"argv": [stamp]}]}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/queues/lat/closures",
                                 data=body, method="POST")
    t0 = time.time_ns()
    with urllib.request.urlopen(req) as r:
        cid = json.load(r)["ids"][0]
    with urllib.request.urlopen(
            f"http://{addr}/v1/closures/{cid}?wait=30s") as r:
        v = json.load(r)
    start = int(base64.b64decode(v["stdout"]))
    lat.append((start - t0) / 1e6)
    time.sleep(0.01)
lat.sort()
print(f"enqueue_start_p50_ms {lat[len(lat) // 2]:.3f}")
print(f"enqueue_start_p99_ms {lat[min(len(lat) - 1, len(lat) * 99 // 100)]:.3f}")
