"""muster_kv: coordd's key-value store from Python.

    import muster_kv

    kv = muster_kv.KV()                  # MUSTER_COORD, or KV("A,B,C")
    kv.put("job/lr", "0.1")              # its revision
    lr = kv.get("job/lr")                # b"0.1"; waits until it is set
    kv.get("job/ready", timeout=30)      # muster_kv.Error past 30 s
    kv.tryget("job/missing")             # None: it is not set
    kv.add("job/arrived", 1)             # the new count
    kv.cas("job/owner", None, "w3")      # True: it was absent, now "w3"
    kv.cas("job/step", b"10", b"11")     # False: it held something else
    kv.ls("job/")                        # {"job/lr": b"0.1", ...}
    kv.delete("job/lr")                  # True if it was there
    for change in kv.watch("job/"):      # every change from now on
        print(change.type, change.key, change.value, change.revision)

Each call runs kvctl, the program a shell script uses, so that the
cluster's token (MUSTER_TOKEN_FILE), TLS (MUSTER_TLS_CA_FILE, ...), a
list of replicas that finds the leader, and what waits and retries do are
kvctl's own (kvctl(1)); a call costs a fork and exec (a few ms), which is
nothing beside what coordinates a training job. Values are bytes (a str
is sent as UTF-8); keys are str. A call that fails raises Error, with
kvctl's status name, exit code and message. Standard library only.
"""

import base64
import json
import subprocess
import tempfile

__all__ = ["KV", "Change", "Error"]


class Error(RuntimeError):
    """A call kvctl failed: status (a name: "UNAVAILABLE", ...), code
    (kvctl's exit status) and message."""

    def __init__(self, status, code, message):
        super().__init__("%s: %s" % (status, message))
        self.status = status
        self.code = code
        self.message = message


class Change:
    """One change a watch saw: type ("put" or "delete"), key, value
    (bytes; None for a delete) and revision."""

    __slots__ = ("type", "key", "value", "revision")

    def __init__(self, type, key, value, revision):
        self.type = type
        self.key = key
        self.value = value
        self.revision = revision

    def __repr__(self):
        return "Change(%r, %r, %r, %r)" % (self.type, self.key, self.value,
                                           self.revision)


def _bytes(v):
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise TypeError("a value is bytes or str, not %s" % type(v).__name__)


def _value(obj):
    if "value_base64" in obj:
        return base64.b64decode(obj["value_base64"])
    if "value" in obj:
        v = obj["value"]
        return v.encode() if isinstance(v, str) else str(v).encode()
    return None


def _error(prog, code, stderr):
    # kvctl says "kvctl: STATUS: message" as its last line.
    line = stderr.decode(errors="replace").strip().splitlines()
    line = line[-1] if line else ""
    head = prog + ": "
    if line.startswith(head):
        line = line[len(head):]
    status, _, message = line.partition(": ")
    if not status.isupper() or not message:
        status, message = "UNKNOWN", line or "exit status %d" % code
    return Error(status, code, message)


class KV:
    """coordd's store. coord: its address, or its replicas' ("A,B,C" or a
    list); by default MUSTER_COORD. timeout: how long a call may take at
    most (kvctl --timeout), None for kvctl's own. kvctl: the program."""

    def __init__(self, coord=None, timeout=None, kvctl="kvctl"):
        if coord is not None and not isinstance(coord, str):
            coord = ",".join(coord)
        self.coord = coord
        self.timeout = timeout
        self.kvctl = kvctl

    def _argv(self, timeout):
        argv = [self.kvctl]
        if self.coord:
            argv += ["-c", self.coord]
        timeout = self.timeout if timeout is None else timeout
        if timeout is not None:
            argv += ["--timeout", "%dms" % max(1, int(timeout * 1000))]
        return argv + ["--json"]

    def _run(self, args, stdin=None, timeout=None, ok=(0,)):
        extra = {"input": stdin} if stdin is not None else \
            {"stdin": subprocess.DEVNULL}
        p = subprocess.run(self._argv(timeout) + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, **extra)
        if p.returncode not in ok:
            raise _error(self.kvctl.rsplit("/", 1)[-1], p.returncode,
                         p.stderr)
        out = p.stdout.decode().strip()
        return p.returncode, json.loads(out) if out else None

    def put(self, key, value, timeout=None):
        """Sets key to value; its revision."""
        return self._run(["put", "--", key, "-"], _bytes(value),
                         timeout)[1]["revision"]

    def get(self, key, timeout=None):
        """key's value, once it is set: waits for it (up to timeout
        seconds, then Error DEADLINE_EXCEEDED)."""
        return _value(self._run(["get", "--", key], timeout=timeout)[1])

    def tryget(self, key, timeout=None):
        """key's value now, or None when it is not set."""
        code, obj = self._run(["tryget", "--", key], timeout=timeout,
                              ok=(0, 1))
        return None if code == 1 else _value(obj)

    def add(self, key, n=1, timeout=None):
        """Adds n to key's number (0 when not set); the new number."""
        return self._run(["add", "--", key, str(int(n))],
                         timeout=timeout)[1]["value"]

    def cas(self, key, old, new, timeout=None):
        """Sets key to new if it holds old (None: if it is not set);
        whether it did."""
        if old is None:
            args = ["cas", "--absent", "--", key, "-"]
            stdin = _bytes(new)
        else:
            # Both values through stdin would need two; old as an
            # argument must be text.
            try:
                args = ["cas", "--", key, _bytes(old).decode(), "-"]
            except UnicodeDecodeError:
                raise ValueError("cas: old must be text (UTF-8)")
            stdin = _bytes(new)
        code, _ = self._run(args, stdin, timeout, ok=(0, 6))
        return code == 0

    def delete(self, key, timeout=None):
        """Removes key; whether it was there."""
        return bool(self._run(["rm", "--", key], timeout=timeout)[1]
                    .get("deleted"))

    def ls(self, prefix="", timeout=None):
        """The keys under prefix and their values, as a dict."""
        obj = self._run(["ls", "--", prefix], timeout=timeout)[1]
        return {e["key"]: _value(e) for e in obj.get("entries", [])}

    def revision(self, timeout=None):
        """The store's revision now: watch(since=...) from it sees every
        change after this moment."""
        return self._run(["status"], timeout=timeout)[1]["revision"]

    def watch(self, prefix="", since=None, count=None):
        """The changes under prefix, as they come: an iterator of Change.
        since: a revision, to start with the changes after it (as kept:
        Error FAILED_PRECONDITION if they are not any more); None: from
        now. count: stop after that many. Closing the iterator (or
        leaving a for loop over it) stops kvctl; one that is dropped
        without either stops it once Python collects it."""
        args = self._argv(None) + ["watch"]
        if since is not None:
            args += ["--since", str(int(since))]
        if count is not None:
            args += ["--count", str(int(count))]
        args += ["--", prefix]
        # stderr to a file: read at the end, never a pipe that fills.
        err = tempfile.TemporaryFile()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err,
                             stdin=subprocess.DEVNULL)
        try:
            for line in p.stdout:
                obj = json.loads(line)
                yield Change(obj["type"], obj["key"], _value(obj),
                             obj["revision"])
            if p.wait() != 0:
                err.seek(0)
                raise _error(self.kvctl.rsplit("/", 1)[-1], p.returncode,
                             err.read())
        finally:
            if p.poll() is None:
                p.terminate()
                p.wait()
            p.stdout.close()
            err.close()
