#!/usr/bin/env python3
"""train.py: the example training loop in Python, standard library only.

It resumes from its checkpoint, asks at every step whether this is the step
every task checkpoints at before a preemption, and if so saves and exits.
Run it under preemptwatch:

    preemptwatch -t worker:0 -- python3 examples/train.py

The question costs a fraction of a microsecond through the muster_syncpoint
module (`make install` puts it where python3 finds it; from the source tree
this script finds it in ../python). Without the module it runs the
`syncpoint` program instead, a few milliseconds a step.

Environment: CKPT (checkpoint file, default ./ckpt.$MUSTER_TASK), STEPS
(steps to train, default 100), STEP_TIME (seconds per step, default 0.1),
IGNORE_SIGTERM (1: ignore SIGTERM; see main).
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
try:
    import muster_syncpoint
except ImportError:
    muster_syncpoint = None


def reached_sync_point(step):
    """True when step is the agreed checkpoint step, or the task is already
    past it: either way, save now and exit."""
    if muster_syncpoint is not None:
        return bool(muster_syncpoint.reached(step))
    rc = subprocess.run(["syncpoint", str(step)]).returncode
    if rc not in (0, 1):
        sys.exit("train.py: syncpoint failed with exit code %d" % rc)
    return rc == 0


def save(path, step, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "state": state}, f)
    os.replace(tmp, path)       # never a half-written checkpoint


def main():
    # Under a scheduler that signals every process (Slurm, systemd's
    # KillMode=control-group) the notice's SIGTERM must not kill the loop
    # before it saves: IGNORE_SIGTERM=1, with `preemptwatch --stop-signal
    # INT` so that preemptwatch can still stop it (INT ends Python).
    if os.environ.get("IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    task = os.environ.get("MUSTER_TASK", "local")
    ckpt = os.environ.get("CKPT", "./ckpt." + task)
    steps = int(os.environ.get("STEPS", "100"))
    step_time = float(os.environ.get("STEP_TIME", "0.1"))

    step, state = 0, 0.0
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            saved = json.load(f)
        step, state = saved["step"], saved["state"]
        print("%s: resuming from step %d" % (task, step), flush=True)

    while step < steps:
        time.sleep(step_time)           # the work of one step
        state += 1.0 / (step + 1)
        step += 1
        if reached_sync_point(step):
            save(ckpt, step, state)
            print("%s: preemption: checkpointed at step %d" % (task, step),
                  flush=True)
            # Exit at once: nothing after the save is worth the time.
            return 0
    save(ckpt, step, state)
    print("%s: finished %d steps" % (task, steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
