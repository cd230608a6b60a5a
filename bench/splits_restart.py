"""splits_restart.py ADDR SPLITS LEASED: fills a dispatchd for a restart
benchmark over its HTTP API, as a worker would: registers a data worker,
adds a dataset of SPLITS splits, opens a dynamic job, and leases LEASED of
its splits 256 at a time (left open: each lease with its delivered ranges
is state to restore). Prints "job JOB leased N in S s"."""
import json
import sys
import time
import urllib.request

addr, nsplits, nleased = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://%s%s" % (addr, path), data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"{}")


w = call("POST", "/v1/workers/bench:0", {"slots": 1, "address": "127.0.0.1:9"})
inc = w["incarnation"]
ds = call("POST", "/v1/datasets", {"splits": [str(i) for i in range(nsplits)],
                                   "reader": "true", "framing": "lines"})
job = call("POST", "/v1/jobs", {"dataset": str(ds["id"]), "mode": "dynamic",
                                "repeat": 1, "seed": 0, "name": "bench"})
beat = call("POST", "/v1/workers/bench:0/heartbeat?incarnation=%s&wait=0" % inc)
tasks = [t for t in beat.get("tasks", []) if t.get("job") == job["job"]]
if not tasks:
    sys.exit("no task for the job in the worker's heartbeat: %s" % json.dumps(beat)[:300])
task = tasks[0]["id"]
t0 = time.time()
got, lease = 0, 0
while got < nleased:
    lease += 1
    r = call("POST", "/v1/workers/bench:0/splits?incarnation=%s" % inc,
             {"task": task, "want": 256, "lease": lease})
    n = len(r.get("splits", []))
    if n == 0:
        break
    got += n
    # A heartbeat now and then keeps the worker and the job's client live.
    if lease % 200 == 0:
        call("POST", "/v1/workers/bench:0/heartbeat?incarnation=%s&wait=0" % inc)
        call("POST", "/v1/clients/%s/heartbeat" % job["client"], {})
print("job %s leased %d in %.1f s" % (job["job"], got, time.time() - t0))
