#!/usr/bin/python3
"""tcpstore_barrier.py: the barrier of bench-loadgen tasks, on PyTorch's TCPStore.

    tcpstore_barrier.py [-n N] [--pattern wait|poll] [--timeout SECONDS]

N participants (default 10000), one Python thread each with a TCPStore
client of its own, meet at a barrier on a TCPStore server run by a child
process (its own process, so that server and clients each fit their
sockets under RLIMIT_NOFILE). Two ways of building the barrier on the
store:

  wait  each participant does add("barrier", 1); the one that gets N sets
        "barrier_done"; all block in wait(["barrier_done"]), which the
        server answers when the key is set. O(N) requests, the server
        pushes the release: the best a TCPStore barrier does.
  poll  torch's own store-based barrier (_store_based_barrier in
        torch/distributed/distributed_c10d.py, 1.13): add(key, 1), then
        add(key, 0) every 10 ms until it reads N.

As in bench-loadgen, N-1 arrive first and block; once they all have, the
last arrival is sent, and the figure is the time from sending it to the
last participant released (its call returned in its thread). Only
loopback; --timeout (default 120 s) bounds the whole run: past it the
process and its server exit, whatever is blocked. Prints "name value unit"
lines, as bench-loadgen does; exits 1 when the barrier did not complete.
"""
import argparse
import ctypes
import datetime
import os
import resource
import signal
import subprocess
import sys
import threading
import time

KEY = "barrier"
DONE = "barrier_done"
POLL_S = 0.01           # _store_based_barrier's sleep between polls
SERVER = [None]         # the server's Popen, killed on every way out


def note(msg):
    print(f"tcpstore_barrier: {msg}", file=sys.stderr, flush=True)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_us(pid):
    """utime + stime of pid from /proc/PID/stat, in microseconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1e6 / os.sysconf(
            "SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def serve(timeout):
    """The server: a master TCPStore, until killed or the parent dies."""
    # PR_SET_PDEATHSIG: the server never outlives the benchmark.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(1)
    import torch.distributed as dist

    raise_nofile()
    store = dist.TCPStore("127.0.0.1", 0, None, True,
                          datetime.timedelta(seconds=timeout),
                          wait_for_workers=False)
    print(store.port, flush=True)
    sys.stdin.read()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--pattern", choices=("wait", "poll"), default="wait")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.timeout)
    n = a.n
    if n < 2:
        ap.error("-n must be 2 or more")

    # Bounded in time: past --timeout everything stops, threads blocked
    # in the store included, and the server is killed.
    deadline = time.monotonic() + a.timeout

    def expire():
        note(f"--timeout of {a.timeout:.0f} s reached: stopping")
        sys.stdout.flush()
        if SERVER[0] is not None:
            SERVER[0].kill()
            SERVER[0].wait()
        os._exit(3)

    watchdog = threading.Timer(a.timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    # SIGTERM keeps its default action: it ends the process even while a
    # thread is blocked in the store, and PDEATHSIG ends the server.

    limit = raise_nofile()
    if n + 64 > limit:
        note(f"{n} participants need {n + 64} open files; the limit is "
             f"{limit}")
        return 2
    import torch
    import torch.distributed as dist

    server = SERVER[0] = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve",
         "--timeout", str(a.timeout)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        port = int(server.stdout.readline())
    except ValueError:
        note("the TCPStore server did not start")
        return 2
    left = datetime.timedelta(seconds=max(1.0, deadline - time.monotonic()))

    def client():
        return dist.TCPStore("127.0.0.1", port, None, False, left)

    print(f"tcpstore_n {n} participants, pattern {a.pattern}, torch "
          f"{torch.__version__}, one thread and one TCPStore client each")
    t0 = time.monotonic()
    stores = [client() for _ in range(n)]
    control = client()
    print(f"tcpstore_connect {(time.monotonic() - t0) * 1e3:.0f} ms for {n} "
          f"clients")

    released = [0.0] * n
    errors = []
    waiting = [0]
    lock = threading.Lock()

    def participant(i):
        s = stores[i]
        try:
            if a.pattern == "wait":
                if s.add(KEY, 1) == n:
                    s.set(DONE, "1")
                with lock:
                    waiting[0] += 1
                s.wait([DONE])
            else:
                count = s.add(KEY, 1)
                with lock:
                    waiting[0] += 1
                while count != n:
                    time.sleep(POLL_S)
                    count = s.add(KEY, 0)
            released[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001: reported, counted
            with lock:
                errors.append(f"participant {i}: {e}")

    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=participant, args=(i,), daemon=True)
               for i in range(n)]
    t0 = time.monotonic()
    for t in threads[:-1]:
        t.start()
    # The N-1 first have all added and are about to block; then give their
    # wait (or first poll) the time to reach the server.
    while True:
        with lock:
            w = waiting[0]
        if w >= n - 1 and control.add(KEY, 0) == n - 1:
            break
        if errors or time.monotonic() > deadline:
            note(f"{w} of {n - 1} arrived; {len(errors)} errors: "
                 f"{errors[:3]}")
            return 1
        time.sleep(0.02)
    print(f"tcpstore_parked {n - 1} arrived and waiting after "
          f"{(time.monotonic() - t0) * 1e3:.0f} ms")
    time.sleep(max(1.0, n / 5000))
    c0 = cpu_us(server.pid)
    t_last = time.monotonic()
    threads[-1].start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    c1 = cpu_us(server.pid)
    done = sorted(r - t_last for r in released if r != 0.0)
    if errors or len(done) < n:
        note(f"{len(done)} of {n} released; {len(errors)} errors: "
             f"{errors[:3]}")
        return 1
    print(f"tcpstore_release {done[-1] * 1e3:.2f} ms from sending the last "
          f"arrival to the last participant released")
    print(f"tcpstore_release_p50 {done[len(done) // 2] * 1e3:.2f} ms, first "
          f"{done[0] * 1e3:.2f} ms")
    if c0 is not None and c1 is not None:
        print(f"tcpstore_server_cpu {(c1 - c0) / n:.2f} us of server CPU per "
              f"participant released ({(c1 - c0) / 1e3:.1f} ms in all, "
              f"utime+stime)")
    return 0


if __name__ == "__main__":
    # Ends with os._exit: the interpreter's own exit would finalize
    # thousands of threads and store clients, and can hang doing so, with
    # the watchdog thread already frozen.
    rc = 1
    try:
        rc = main()
    except Exception as e:  # noqa: BLE001
        note(f"{type(e).__name__}: {e}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if SERVER[0] is not None:
            SERVER[0].kill()
            SERVER[0].wait()
    os._exit(rc)
