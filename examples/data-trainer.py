#!/usr/bin/env python3
"""data-trainer.py: a training task fed by a shared dataset, preemptible.

Run one per task under preemptwatch, all in one directory DIR:

    preemptwatch -t worker:0 -- python3 examples/data-trainer.py DIR DATASET

Every task reads its share of DATASET through one job shared by name
(muster_data.read(job="train"): dispatchd deals the elements out among the
readers of this run of the job), takes a step every BATCH elements, and
asks muster_syncpoint.reached(step) after each. At the step preemptwatch
agreed on after a preemption notice it saves its checkpoint, the model and
the position of the last element it used, and exits; preemptwatch then
exits 42 ("preempted: run me again"). Run again, each task starts from its
checkpoint, and the job from every task's position together, so that the
elements read on are exactly those no task used: none lost, none twice.

Each element it uses is a line of DIR/used.TASK, cut back to the
checkpoint when the task starts again: the lines of all the tasks are then
the dataset, each once. Environment: BATCH (elements a step, default 10),
STEP_TIME (seconds a step, default 0.02). Standard library only.
"""
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import muster_data  # noqa: E402
import muster_syncpoint  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    d, dataset = sys.argv[1], sys.argv[2]
    task = os.environ["MUSTER_TASK"]
    batch = int(os.environ.get("BATCH", "10"))
    step_time = float(os.environ.get("STEP_TIME", "0.02"))
    ckpt_path = os.path.join(d, "ckpt.%s.json" % task)

    ckpt = {"step": 0, "model": 0.0, "used": 0, "data": None}
    states = None
    if os.path.exists(ckpt_path):
        ckpt = load(ckpt_path)
        # The job goes on from where all of its readers were.
        states = [load(p)["data"]
                  for p in sorted(glob.glob(os.path.join(d, "ckpt.*.json")))]
        print("%s: resuming from step %d" % (task, ckpt["step"]),
              flush=True)
    used = open(os.path.join(d, "used." + task), "ab")
    used.truncate(ckpt["used"])
    used.seek(ckpt["used"])
    step, model = ckpt["step"], ckpt["model"]

    reader = muster_data.read(dataset, job="train", from_state=states)
    def save():
        used.flush()
        tmp = ckpt_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step, "model": model, "used": used.tell(),
                       "data": reader.position()}, f)
        os.replace(tmp, ckpt_path)

    n = 0
    for element in reader:
        used.write(element.rstrip(b"\n") + b"\n")
        model += len(element) * 1e-3            # the work of one element
        n += 1
        if n % batch:
            continue
        time.sleep(step_time)                   # the rest of a step
        step += 1
        if muster_syncpoint.reached(step):
            save()
            print("%s: preemption: checkpointed at step %d" % (task, step),
                  flush=True)
            return 0
    save()  # the trained model, for what comes next
    print("%s: finished at step %d: the data has ended" % (task, step),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
