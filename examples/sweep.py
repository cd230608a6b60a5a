#!/usr/bin/env python3
"""sweep.py: a hyperparameter sweep from Python on a local cluster.

Starts `dispatchd --local-workers 3` (three supervised workers on this
machine), runs twelve stand-in trainings through muster_closures.Executor,
one learning rate and seed each, kills one worker with -9 half-way (its
supervisor starts it again, and its runs go again elsewhere), and prints
each run's loss and the best. One run is made to fail: it raises
ClosureError for its own future and stops nothing else.

    PATH=$PWD/build/bin:$PATH PYTHONPATH=$PWD/python python3 examples/sweep.py

On a cluster: workerloop on each machine, MUSTER_DISPATCHER set, and the
`with` block below.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import muster_closures

# A stand-in for a training run: a loss from the learning rate and the
# seed, after a little while; lr 0.3 diverges.
TRAIN = r"""
import sys, time
lr, seed = float(sys.argv[1]), int(sys.argv[2])
time.sleep(0.3)
if lr == 0.3:
    sys.exit("loss is nan at step 12")
print("%.4f" % (abs(lr - 0.01) * 10 + seed * 0.001))
"""


def main():
    for prog in ("dispatchd", "workerloop", "dispatchctl"):
        if shutil.which(prog) is None:
            sys.exit("sweep.py: %s: not found (PATH=$PWD/build/bin:$PATH "
                     "after make, or make install)" % prog)
    tmp = tempfile.mkdtemp(prefix="muster-sweep.")
    port_file = os.path.join(tmp, "dispatchd.port")
    log = open(os.path.join(tmp, "dispatchd.log"), "w")
    d = subprocess.Popen(["dispatchd", "-l", "127.0.0.1:0", "--port-file",
                          port_file, "--local-workers", "3"], stderr=log)
    try:
        for _ in range(200):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            os.environ["MUSTER_DISPATCHER"] = "127.0.0.1:" + f.read().strip()
        runs = [(lr, seed) for lr in (0.1, 0.01, 0.001, 0.3)
                for seed in (1, 2, 3)]
        with muster_closures.Executor() as ex:
            futures = {run: ex.submit([sys.executable, "-c", TRAIN,
                                       str(run[0]), str(run[1])])
                       for run in runs}
            print("%d runs scheduled on 3 local workers" % len(futures))
            time.sleep(0.5)
            victim = kill_a_worker(d.pid)
            print("killed worker pid %d with -9; its supervisor starts it "
                  "again" % victim)
            best = None
            for (lr, seed), f in futures.items():
                try:
                    r = f.result(timeout=120)
                except muster_closures.ClosureError as e:
                    print("lr %-6g seed %d  failed: %s" % (lr, seed, e))
                    continue
                loss = float(r.stdout)
                print("lr %-6g seed %d  loss %.4f  on %s, attempt %d"
                      % (lr, seed, loss, r.worker, r.attempts))
                if best is None or loss < best[0]:
                    best = (loss, lr, seed)
        print("best: lr %g seed %d, loss %.4f" % (best[1], best[2], best[0]))
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def kill_a_worker(dispatchd_pid):
    """kill -9 of a worker that runs a closure now: the child of the
    supervisor dispatchd started for it."""
    status = json.loads(subprocess.run(["dispatchctl", "--json", "status"],
                                       capture_output=True,
                                       text=True).stdout)
    busy = [w["name"] for w in status["workers"] if w["closures"]]
    ps = subprocess.run(["ps", "-o", "pid=,args=", "--ppid",
                         str(dispatchd_pid)], capture_output=True,
                        text=True).stdout.splitlines()
    for line in ps:
        pid, args = line.split(None, 1)
        if busy and args.split()[-1] == busy[0]:
            kids = subprocess.run(["ps", "-o", "pid=", "--ppid", pid],
                                  capture_output=True,
                                  text=True).stdout.split()
            if kids:
                os.kill(int(kids[0]), signal.SIGKILL)
                return int(kids[0])
    raise SystemExit("sweep.py: no busy worker to kill")


if __name__ == "__main__":
    main()
