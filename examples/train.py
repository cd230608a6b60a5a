#!/usr/bin/env python3
"""train.py: the example training loop in Python, standard library only.

It resumes from its checkpoint, asks `syncpoint` at every step whether this
is the step every task checkpoints at before a preemption, and if so saves
and exits. Run it under preemptwatch:

    preemptwatch -t worker:0 -- python3 examples/train.py

Environment: CKPT (checkpoint file, default ./ckpt.$MUSTER_TASK), STEPS
(steps to train, default 100), STEP_TIME (seconds per step, default 0.1).
"""
import json
import os
import subprocess
import sys
import time


def reached_sync_point(step):
    """True when step is the agreed checkpoint step (syncpoint exits 0)."""
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
            return 0
    save(ckpt, step, state)
    print("%s: finished %d steps" % (task, steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
