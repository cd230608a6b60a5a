#!/usr/bin/env python3
"""train_ddp.py: a data-parallel PyTorch job (gloo, CPU) under preemptwatch.

Run one per task, each under its own preemptwatch (run.sh does it for four
ranks on this machine):

    preemptwatch -t worker:I -- python3 examples/ddp/train_ddp.py

What it takes from preemptwatch's environment:
  MUSTER_RANK, MUSTER_WORLD_SIZE   its rank and the number of ranks;
  MUSTER_RUN_PREFIX                where this run's rendezvous key goes, so
                                   that a restarted job never reads the
                                   last run's address;
  MUSTER_SYNC_SOCKET               (through muster_syncpoint) the sync
                                   point, asked every step.

Rank 0 publishes the address of its TCPStore under the run's prefix; the
others wait for it with kvctl. Every rank resumes from its checkpoint,
trains, and at the step every task agreed on saves and exits 0 at once.

Environment: CKPT_DIR (default ./ckpt), STEPS (default 300), STEP_TIME
(seconds of simulated work per step, default 0.02).
"""
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import muster_syncpoint as sp  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def log(msg):
    print("rank %s: %s" % (os.environ.get("MUSTER_RANK", "?"), msg),
          flush=True)


def rendezvous(rank):
    """The address of rank 0's store, through coordd, scoped to this run."""
    key = os.environ["MUSTER_RUN_PREFIX"] + "/ddp/store"
    if rank == 0:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        addr = "127.0.0.1:%d" % port
        subprocess.run(["kvctl", "put", key, addr], check=True)
        return addr
    # The chief may be slow to start (importing torch): wait minutes.
    out = subprocess.run(["kvctl", "--timeout", "10m", "get", key],
                         check=True, capture_output=True, text=True)
    return out.stdout


def main():
    rank = int(os.environ["MUSTER_RANK"])
    world = int(os.environ["MUSTER_WORLD_SIZE"])
    ckpt_dir = os.environ.get("CKPT_DIR", "./ckpt")
    steps = int(os.environ.get("STEPS", "300"))
    step_time = float(os.environ.get("STEP_TIME", "0.02"))
    ckpt = os.path.join(ckpt_dir, "rank-%d.pt" % rank)
    os.makedirs(ckpt_dir, exist_ok=True)

    # Under a scheduler that signals every process, the notice must not
    # kill the rank before it saves: see preemptwatch(1), "Signals and
    # schedulers". run.sh gives preemptwatch --stop-signal INT.
    if os.environ.get("IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    addr = rendezvous(rank)
    dist.init_process_group("gloo", init_method="tcp://" + addr,
                            rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        log("resuming from step %d" % step)

    gen = torch.Generator().manual_seed(rank)
    while step < steps:
        x = torch.randn(32, 16, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()             # the gradients' all-reduce
        opt.step()
        time.sleep(step_time)       # the rest of a step's work
        step += 1
        if rank == 0 and step % 50 == 0:
            log("step %d (loss %.4f)" % (step, loss.item()))
        if sp.reached(step):
            torch.save({"model": model.module.state_dict(),
                        "opt": opt.state_dict(), "step": step}, ckpt)
            log("preemption: checkpointed at step %d (loss %.4f)" %
                (step, loss.item()))
            # Exit at once: tearing down the process group is time the
            # job no longer has.
            os._exit(0)
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                "step": step}, ckpt)
    log("finished %d steps (loss %.4f)" % (steps, loss.item()))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
