"""muster_closures: dispatchd's closures as a concurrent.futures.Executor.

    import muster_closures

    with muster_closures.Executor() as ex:           # MUSTER_DISPATCHER
        runs = {lr: ex.submit(["python3", "train.py", "--lr", lr])
                for lr in ["0.1", "0.01", "0.001"]}
        for lr, f in runs.items():
            try:
                print(lr, f.result().stdout.decode())  # a Result
            except muster_closures.ClosureError as e:  # it failed
                print(lr, "failed:", e.result.exit, e.result.stderr_tail)

    # The same command, one argument more for each item:
    scores = list(ex.map(["./evaluate.sh"], checkpoints))

A closure is a command line run by a workerloop somewhere: submit(cmd,
*args) takes a list (argv, args appended), a str (run by sh -c, args as
$1...) or a function that returns one of those from args. Its Future's
result() is a Result: stdout (bytes), exit (or signal), stderr_tail,
worker and attempts. A closure that failed (non-zero exit, a signal,
ABORTED) raises ClosureError from result(), with its Result; a cancelled
one raises concurrent.futures.CancelledError. Every closure is scheduled
--independent: one that fails is its own future's failure and stops
nothing else (dispatchd(8), Errors). Execution is at least once: a closure
whose worker dies runs again elsewhere (attempts > 1).

Each submit runs `dispatchctl schedule` and one thread waits for all of
them with `dispatchctl --json fetch`, so token, TLS and replicas are
dispatchctl's (dispatchctl(1)); a closure's value is forgotten in
dispatchd once its future has it. Standard library only.
"""

import base64
import concurrent.futures
import json
import os
import subprocess
import threading
import time
import uuid

__all__ = ["Executor", "Result", "ClosureError"]


class Result:
    """What a closure left: id, stdout (bytes), stdout_truncated (True
    when the worker's --max-output cut it), exit (its exit status, or None
    when a signal ended it), signal, stderr_tail (bytes), worker,
    attempts, state ("READY", "ABORTED", "CANCELLED") and message (why,
    for the last two)."""

    def __init__(self, obj):
        self.id = obj.get("id")
        self.state = obj.get("state")
        self.exit = obj.get("exit")
        self.signal = obj.get("signal")
        self.stdout = base64.b64decode(obj.get("stdout") or "")
        self.stdout_truncated = bool(obj.get("stdout_truncated"))
        self.stderr_tail = base64.b64decode(obj.get("stderr_tail") or "")
        self.worker = obj.get("worker")
        self.attempts = obj.get("attempts")
        self.message = obj.get("message")
        self.failed = bool(obj.get("failed")) or self.state != "READY"

    def __repr__(self):
        return "Result(id=%r, state=%r, exit=%r, signal=%r, worker=%r)" % (
            self.id, self.state, self.exit, self.signal, self.worker)


class ClosureError(RuntimeError):
    """A closure that failed; its Result in .result."""

    def __init__(self, result, what):
        super().__init__("closure %s %s" % (result.id, what))
        self.result = result


def _describe(r):
    if r.state == "ABORTED":
        return "was aborted: %s" % (r.message or "")
    if r.signal is not None:
        return "was killed by signal %d" % r.signal
    tail = r.stderr_tail.decode(errors="replace").strip().splitlines()
    return "exited with status %s%s" % (
        r.exit, ": " + tail[-1] if tail else "")


class Executor(concurrent.futures.Executor):
    """Closures on dispatchd. dispatcher: its address, or its replicas'
    ("A,B,C" or a list); by default MUSTER_DISPATCHER. queue: the queue
    they go to ("python" by default: a queue of their own, whose closures
    are all independent, so that no one else's error reaches a submit).
    unreachable: seconds without an answer from dispatchd after which the
    futures still waiting fail (RuntimeError, with dispatchctl's words).
    dispatchctl: the program."""

    # Ids fetched in one call, at most.
    _BATCH = 200

    def __init__(self, dispatcher=None, queue="python", unreachable=300,
                 dispatchctl="dispatchctl"):
        if dispatcher is not None and not isinstance(dispatcher, str):
            dispatcher = ",".join(dispatcher)
        self._base = [dispatchctl]
        if dispatcher:
            self._base += ["-d", dispatcher]
        if queue:
            self._base += ["-q", queue]
        self._prog = os.path.basename(dispatchctl)
        self._unreachable = unreachable
        self._pending = {}  # id -> (Future, key), in the order submitted
        self._mu = threading.Condition()
        self._closed = False
        self._submitting = 0  # submits under way, which shutdown awaits
        self._thread = None
        self._cursor = 0  # where the next fetch starts in _pending

    def _run(self, args, stdin=None):
        extra = {"input": stdin} if stdin is not None else \
            {"stdin": subprocess.DEVNULL}
        p = subprocess.run(self._base + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, **extra)
        return p.returncode, p.stdout, p.stderr.decode(errors="replace")

    def submit(self, fn, /, *args, stdin=None, env=None, timeout=None,
               retry_exit=(), max_retries=None, on=None, needs=()):
        """Schedules a closure; its Future. fn: argv (a list; args are
        appended), a shell command (a str; args are $1...), or a function
        of args that returns one. stdin: bytes; env: a dict; timeout:
        seconds; retry_exit, max_retries, on, needs: as dispatchctl
        schedule's options."""
        cmd = fn(*args) if callable(fn) else fn
        if callable(fn):
            args = ()
        if isinstance(cmd, str):
            argv = ["sh", "-c", cmd, "sh"] + [str(a) for a in args]
        else:
            argv = [str(a) for a in cmd] + [str(a) for a in args]
        if not argv:
            raise ValueError("submit: an empty command")
        # Each closure's own key: a result is taken only from the closure
        # that holds it (a dispatchd started again without its state
        # numbers others' closures from 1 again).
        key = "py-" + uuid.uuid4().hex
        opts = ["schedule", "--independent", "--key", key]
        for k, v in (env or {}).items():
            opts += ["--env", "%s=%s" % (k, v)]
        if stdin is not None:
            opts += ["--stdin", "-"]
        if timeout is not None:
            opts += ["--timeout", "%dms" % max(1, int(timeout * 1000))]
        for code in retry_exit:
            opts += ["--retry-exit", str(int(code))]
        if max_retries is not None:
            opts += ["--max-retries", str(int(max_retries))]
        if on is not None:
            opts += ["--on", on]
        for n in needs:
            opts += ["--needs", n]
        with self._mu:
            if self._closed:
                raise RuntimeError("cannot submit after shutdown")
            self._submitting += 1
        try:
            code, out, err = self._run(opts + ["--"] + argv, stdin)
            if code != 0:
                raise RuntimeError(err.strip() or "%s schedule: exit "
                                   "status %d" % (self._prog, code))
            cid = int(out.split()[0])
            f = concurrent.futures.Future()
            f.closure_id = cid
            f.set_running_or_notify_cancel()
            with self._mu:
                self._pending[cid] = (f, key)
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._watch, name="muster-closures",
                        daemon=True)
                    self._thread.start()
        finally:
            with self._mu:
                self._submitting -= 1
                self._mu.notify_all()
        return f

    def _watch(self):
        try:
            self._watch_loop()
        except BaseException as e:  # noqa: B902: no future left waiting
            self._fail_all(RuntimeError("the executor's watcher failed: %r"
                                        % (e,)))
            raise

    def _fail_all(self, exc):
        with self._mu:
            pending, self._pending = self._pending, {}
        for f, _ in pending.values():
            f.set_exception(exc)

    def _take(self, cid, exc=None, result=None):
        with self._mu:
            f, _ = self._pending.pop(cid, (None, None))
        if f is None:
            return
        if exc is not None:
            f.set_exception(exc)
        else:
            f.set_result(result)

    def _watch_loop(self):
        last_ok = time.monotonic()
        while True:
            with self._mu:
                while (not self._pending and
                       not (self._closed and self._submitting == 0)):
                    self._mu.wait()
                if not self._pending:
                    return
                # Round the pending list a batch at a time, so that every
                # closure is looked at, however many wait.
                ids = list(self._pending)
                if self._cursor >= len(ids):
                    self._cursor = 0
                batch = ids[self._cursor:self._cursor + self._BATCH]
                self._cursor += len(batch)
                keys = {cid: self._pending[cid][1] for cid in batch}
            code, out, err = self._run(
                ["--json", "fetch", "--timeout", "1s"] +
                [str(i) for i in batch])
            done, gone = {}, set()
            for line in out.splitlines():
                obj = json.loads(line)
                cid = obj.get("id")
                if cid not in keys:
                    continue
                if obj.get("key") != keys[cid]:
                    gone.add(cid)  # another closure of that number now
                elif obj.get("state") != "NOT_READY":
                    done[cid] = Result(obj)
            for line in err.splitlines():
                # "dispatchctl: NOT_FOUND: no closure N": forgotten.
                if ": NOT_FOUND: no closure " in line:
                    gone.add(int(line.rsplit(" ", 1)[1]))
            if out or gone:
                last_ok = time.monotonic()
            elif time.monotonic() - last_ok > self._unreachable:
                self._fail_all(RuntimeError(
                    "no answer from dispatchd for %ds: %s"
                    % (self._unreachable, err.strip())))
                last_ok = time.monotonic()
            else:
                time.sleep(0.5)  # dispatchd away: dispatchctl said why
            for cid, r in done.items():
                if r.state == "CANCELLED":
                    self._take(cid, concurrent.futures.CancelledError(
                        "closure %d was cancelled: %s" % (cid, r.message)))
                elif r.failed:
                    self._take(cid, ClosureError(r, _describe(r)))
                else:
                    self._take(cid, result=r)
            for cid in gone:
                self._take(cid, RuntimeError(
                    "closure %d is not in dispatchd any more (a dispatchd "
                    "started again without its --state-dir?)" % cid))
            if done:
                self._run(["forget"] + [str(i) for i in done])

    def shutdown(self, wait=True, *, cancel_futures=False):
        """No more submits; with cancel_futures, the closures not ended
        are cancelled in dispatchd; with wait, returns once every future
        is done."""
        with self._mu:
            self._closed = True
            while self._submitting > 0:
                self._mu.wait()
            ids = list(self._pending)
            self._mu.notify_all()
        if cancel_futures and ids:
            for i in range(0, len(ids), self._BATCH):
                self._run(["cancel"] + [str(c) for c in ids[i:i + self._BATCH]])
        if wait and self._thread is not None:
            self._thread.join()
