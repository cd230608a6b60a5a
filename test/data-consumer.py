#!/usr/bin/env python3
"""data-consumer.py: a training loop's shape, fed a positioned stream.

    dispatchctl read --positions D | data-consumer.py DIR [DELAY]

It writes every element it takes to DIR/records, one per line, and every
so often (a random number of elements, 1 to 400) checkpoints: the records
are flushed and DIR/ckpt says, atomically, how many bytes of them count and
the stream's position after the last one. SIGTERM checkpoints and exits 0,
as a trainer does at a preemption; SIGKILL leaves the last checkpoint. Run
again, it first cuts DIR/records back to its checkpoint, so that DIR/records
holds exactly what the checkpoints say was consumed; DIR/ckpt's "data" is
then what `dispatchctl read --from-state` resumes from. At the end of the
data it checkpoints with "done": true. DELAY: seconds per element.
"""
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import muster_data  # noqa: E402

stop = False


def on_term(signum, frame):
    global stop
    stop = True


def main():
    d = sys.argv[1]
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    signal.signal(signal.SIGTERM, on_term)
    # Started: signals reach Python now, not the shell that started it.
    with open(os.path.join(d, "started"), "w") as f:
        f.write("%d\n" % os.getpid())
    ckpt_path = os.path.join(d, "ckpt")
    ckpt = {"len": 0, "data": None, "done": False}
    if os.path.exists(ckpt_path):
        with open(ckpt_path) as f:
            ckpt = json.load(f)
    out = open(os.path.join(d, "records"), "ab")
    out.truncate(ckpt["len"])
    out.seek(ckpt["len"])
    stream = muster_data.Stream(sys.stdin.buffer)

    def save(done=False):
        out.flush()
        state = {"len": out.tell(), "data": stream.position(), "done": done}
        tmp = ckpt_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, ckpt_path)

    every = random.randint(1, 400)
    n = 0
    for element in stream:
        out.write(element + b"\n")
        n += 1
        if delay:
            time.sleep(delay)
        if n % every == 0:
            save()
            every = random.randint(1, 400)
        if stop:
            save()
            return 0
    save(done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
