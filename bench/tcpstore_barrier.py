#!/usr/bin/python3
"""tcpstore_barrier.py: the barrier of bench-loadgen tasks, on PyTorch's TCPStore.

    tcpstore_barrier.py [-n N] [--fit] [--clients raw|threads]
                        [--pattern wait|poll] [--timeout SECONDS]

N participants (default 10000) meet at a barrier on a TCPStore server run
by a child process, over loopback. Two ways of building the barrier on the
store:

  wait  each participant does add("barrier", 1); the one that gets N sets
        "barrier_done"; all block in wait(["barrier_done"]), which the
        server answers when the key is set. O(N) requests, the server
        pushes the release: the best a TCPStore barrier does.
  poll  torch's own store-based barrier (_store_based_barrier in
        torch/distributed/distributed_c10d.py, 1.13): add(key, 1), then
        add(key, 0) every 10 ms until it reads N. Threads only.

and two kinds of participants:

  raw      (default) the N-1 first speak TCPStore's wire protocol (torch
           1.13: ADD is 0x03, WAIT 0x05, SET 0x00; keys get a "/" prefix)
           on plain sockets, one each, driven by one epoll loop that
           stamps each socket as it turns readable, as bench-loadgen does
           for coordd. The last arrival is a real TCPStore client; its
           add() returning N shows the raw ones were counted.
  threads  one Python thread and one real TCPStore client each. Each
           released thread must take the GIL back to say so, and at a few
           thousand threads that queue, not the store, is most of the
           figure: a real job has one process, one GIL, per participant.

N-1 arrive first and block; once they all have, the last arrival is sent,
and the figure is the time from sending it to the last participant
released. A real TCPStore client of torch 1.13 holds two connections and a
pipe: 4 open files in the client process and 2 in the server, measured at
start; a raw participant holds 1 on each side. With --fit, an N that does
not fit under RLIMIT_NOFILE (not raisable past its hard limit) falls back
to the largest multiple of 1000 that does; tcpstore_n prints the N used.
--timeout (default 120 s) bounds the whole run: past it the process and
its server exit, whatever is blocked. Prints "name value unit" lines, as
bench-loadgen does; exits 1 when the barrier did not complete, 2 when N
does not fit, 3 on the timeout.
"""
import argparse
import ctypes
import datetime
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

KEY = "barrier"
DONE = "barrier_done"
POLL_S = 0.01           # _store_based_barrier's sleep between polls
SERVER = [None]         # the server's Popen, killed on every way out
ALL_DONE = [False]      # no participant thread is left


def leave(rc, wait):
    """
    Kills the server and exits at once. Unless wait, without waiting for
    the server: threads still blocked on it wake up as it dies, and
    thousands of them fighting for the GIL would keep this thread from
    getting it back for a minute. pid 1 reaps the server.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if SERVER[0] is not None:
        try:
            os.kill(SERVER[0].pid, signal.SIGKILL)
            if wait:
                SERVER[0].wait()
        except OSError:
            pass
    os._exit(rc)


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


def query(op, *keys, value=None):
    """A TCPStore 1.13 request: op, then the keys, then an i64 if given."""
    out = bytes([op])
    if op == 5:                                 # WAIT: a count of keys
        out += struct.pack("<Q", len(keys))
    for k in keys:
        k = ("/" + k).encode()
        out += struct.pack("<Q", len(k)) + k
    if value is not None:
        out += struct.pack("<q", value)
    return out


def run_raw(n, port, last, control, server, deadline):
    """N-1 raw participants on one epoll loop; the last a real client."""
    first = query(3, KEY, value=1) + query(5, DONE)     # ADD, then WAIT
    ep = select.epoll()
    socks, got, stamp = {}, {}, {}
    t0 = time.monotonic()
    for _ in range(n - 1):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(first)
        s.setblocking(False)
        socks[s.fileno()] = s
        got[s.fileno()] = 0
        ep.register(s.fileno(), select.EPOLLIN)
    print(f"tcpstore_connect {(time.monotonic() - t0) * 1e3:.0f} ms for "
          f"{n - 1} raw participants")
    added = 0
    state = {"bad": 0, "stop": False}

    def pump(timeout):
        """Reads what came; a byte after the 8 of ADD's reply releases."""
        nonlocal added
        evs = ep.poll(timeout)
        t = time.monotonic()
        for fd, _ in evs:
            if got[fd] >= 8 and fd not in stamp:
                stamp[fd] = t
        for fd, _ in evs:
            try:
                data = socks[fd].recv(64)
            except BlockingIOError:
                continue
            if not data:
                state["bad"] += 1
                ep.unregister(fd)
                continue
            before = got[fd]
            got[fd] += len(data)
            if before < 8 <= got[fd]:
                added += 1
            if got[fd] >= 9:
                stamp.setdefault(fd, t)
                ep.unregister(fd)

    while added < n - 1:
        if state["bad"] or time.monotonic() > deadline:
            note(f"{added} of {n - 1} raw participants added; "
                 f"{state['bad']} connections closed")
            return 1
        pump(0.05)
    if control.add(KEY, 0) != n - 1:
        note("the counter does not read N-1")
        return 1
    print(f"tcpstore_parked {n - 1} arrived and waiting after "
          f"{(time.monotonic() - t0) * 1e3:.0f} ms")
    # The WAIT went out with the ADD; give the server the time to take it.
    time.sleep(max(0.5, n / 20000))
    result = {}

    def arrive():
        try:
            result["t"] = time.monotonic()
            result["count"] = last.add(KEY, 1)
            if result["count"] == n:
                last.set(DONE, "1")
            last.wait([DONE])
            result["released"] = time.monotonic()
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    c0 = cpu_us(server.pid)
    th = threading.Thread(target=arrive, daemon=True)
    th.start()
    while len(stamp) < n - 1 and not state["bad"]:
        if time.monotonic() > deadline:
            note(f"{len(stamp)} of {n - 1} released before --timeout")
            return 1
        pump(0.05)
    c1 = cpu_us(server.pid)
    th.join(max(0.0, deadline - time.monotonic()))
    if "error" in result or result.get("count") != n or state["bad"]:
        note(f"last arrival: {result}; {state['bad']} connections closed")
        return 1
    t_last = result["t"]
    done = sorted([v - t_last for v in stamp.values()] +
                  [result["released"] - t_last])
    ALL_DONE[0] = True
    report(done, n, c0, c1)
    return 0


def report(done, n, c0, c1):
    print(f"tcpstore_release {done[-1] * 1e3:.2f} ms from sending the last "
          f"arrival to the last participant released")
    print(f"tcpstore_release_p50 {done[len(done) // 2] * 1e3:.2f} ms, first "
          f"{done[0] * 1e3:.2f} ms")
    if c0 is not None and c1 is not None:
        print(f"tcpstore_server_cpu {(c1 - c0) / n:.2f} us of server CPU per "
              f"participant released ({(c1 - c0) / 1e3:.1f} ms in all, "
              f"utime+stime)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--fit", action="store_true",
                    help="fall back to the largest N the open files allow")
    ap.add_argument("--clients", choices=("raw", "threads"), default="raw")
    ap.add_argument("--pattern", choices=("wait", "poll"), default="wait")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.timeout)
    n = a.n
    if n < 2:
        ap.error("-n must be 2 or more")
    if a.pattern == "poll" and a.clients == "raw":
        ap.error("--pattern poll needs --clients threads")

    # Bounded in time: past --timeout everything stops, threads blocked
    # in the store included, and the server is killed.
    deadline = time.monotonic() + a.timeout

    def expire():
        note(f"--timeout of {a.timeout:.0f} s reached: stopping")
        leave(3, False)

    watchdog = threading.Timer(a.timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    # SIGTERM keeps its default action: it ends the process even while a
    # thread is blocked in the store, and PDEATHSIG ends the server.

    limit = raise_nofile()
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

    def nfds(pid):
        return len(os.listdir(f"/proc/{pid}/fd"))

    # What a client costs in open files, on either side.
    probe = 16
    c0, s0 = nfds(os.getpid()), nfds(server.pid)
    t0 = time.monotonic()
    stores = [client() for _ in range(probe)]
    time.sleep(0.1)
    per_c = (nfds(os.getpid()) - c0) / probe
    per_s = (nfds(server.pid) - s0) / probe
    if a.clients == "raw":
        stores = stores[:2]
        per_c = per_s = 1
        c0, s0 = nfds(os.getpid()), nfds(server.pid)
    fit = int(min((limit - c0 - 64) / per_c, (limit - s0 - 64) / per_s)) - 1
    if n > fit:
        why = (f"{n} participants need {n * per_c + c0:.0f} open files here "
               f"and {n * per_s + s0:.0f} in the server ({per_c:g} and "
               f"{per_s:g} per participant, {a.clients}); the limit is "
               f"{limit}")
        if not a.fit or fit < 1000:
            note(why)
            return 2
        n = fit // 1000 * 1000
        print(f"tcpstore_fallback {n} participants: {why}")
    kind = ("one thread and one TCPStore client each" if a.clients ==
            "threads" else "N-1 raw sockets on one epoll loop, the last a "
            "TCPStore client")
    print(f"tcpstore_n {n} participants, pattern {a.pattern}, torch "
          f"{torch.__version__}, {kind}")
    if a.clients == "raw":
        return run_raw(n, port, stores[0], stores[1], server, deadline)
    stores += [client() for _ in range(n - probe)]
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
    ALL_DONE[0] = not any(t.is_alive() for t in threads)
    done = sorted(r - t_last for r in released if r != 0.0)
    if errors or len(done) < n:
        note(f"{len(done)} of {n} released; {len(errors)} errors: "
             f"{errors[:3]}")
        return 1
    report(done, n, c0, c1)
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
    leave(rc, ALL_DONE[0])
