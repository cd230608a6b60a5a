"""muster_data: a dispatchd job's elements in Python, and the position after each.

A training program reads its input and saves, with its model, the position
of the last element it used; started again from that position it reads on
from the element after it, whatever was in flight when it stopped (a pipe's
contents, a reply, a split half read), each element once:

    import muster_data

    saved = load_checkpoint()              # None the first time
    reader = muster_data.read("train", from_state=saved and saved["data"])
    for element in reader:                 # bytes, without the framing
        step(element)
        if time_to_checkpoint():
            save_checkpoint({"model": ..., "data": reader.position()})

read() runs `dispatchctl read --positions` and reads its stdout. A program
fed by the shell reads the same stream from its stdin:

    dispatchctl read --positions train | python3 train.py

    for element in muster_data.Stream(sys.stdin.buffer): ...

and is resumed with `dispatchctl read --positions --from-state FILE`,
FILE holding what position() returned (json.dump). The positions of the
consumers of one job shared by name (--job) are passed together, one
--from-state each (read(from_state=[...])): they make the job's position.

The stream is a run of records, each a 40-byte little-endian header (magic
"MCK1", type, seq, first, count, payload length, flags) and its payload:
first the start (JSON: the dataset's framing, and the position the read
began at), then chunks of whole elements of one split each, then an end
record. A stream that stops before its end record was cut short (the
reader died): iteration raises StreamError rather than end as if the data
had. Standard library only.

Jobs in the other processing modes (read(mode="off"), "file", "data",
...) have no positions: read gives a RawReader over their elements. With
torch installed, muster_data.IterableDataset(dataset, transform=...,
**read's options) is a torch.utils.data.IterableDataset over a job, for a
DataLoader.
"""

import json
import os
import struct
import subprocess
import tempfile

__all__ = ["Stream", "Reader", "RawReader", "StreamError", "read"]

_HDR = struct.Struct("<IIQQIIII")
_MAGIC = 0x314B434D
_DATA, _END, _ERROR, _STATE = 1, 2, 3, 4
_SPLIT_END = 1
# As lib/client/datapos.h: how far beyond next a stream may reach at once.
_OPEN_MAX = 1 << 20


class StreamError(RuntimeError):
    """The stream was cut short, is malformed, or the read failed."""


def _span_add(spans, a, b):
    """Adds [a, b) to a sorted list of disjoint [a, b] pairs."""
    if a >= b:
        return
    if spans and spans[-1][1] == a:
        spans[-1][1] = b
        return
    out, i = [], 0
    while i < len(spans) and spans[i][1] < a:
        out.append(spans[i])
        i += 1
    while i < len(spans) and spans[i][0] <= b:
        a, b = min(a, spans[i][0]), max(b, spans[i][1])
        i += 1
    out.append([a, b])
    out.extend(spans[i:])
    spans[:] = out


def _whole(total, spans):
    return total == 0 or (total > 0 and len(spans) == 1 and
                          spans[0][0] == 0 and spans[0][1] >= total)


class _Position:
    """A position of a dynamic job, as dispatchd's checkpoint writes it."""

    def __init__(self, start):
        try:
            self.dataset = start["dataset"]
            self.repeat = int(start["repeat"])
            self.seed = int(start["seed"])
            self.next = int(start["next"])
            self.open = {}
            for o in start.get("open") or []:
                spans = []
                for a, b in o.get("skip") or []:
                    _span_add(spans, int(a), int(b))
                total = o.get("total")
                total = -1 if total is None else int(total)
                if not _whole(total, spans):
                    self.open[int(o["seq"])] = [total, spans]
        except (KeyError, TypeError, ValueError) as e:
            raise StreamError("the start position is malformed: %r" % (e,))

    def add(self, seq, first, end, total):
        if seq >= self.next:
            if seq - self.next >= _OPEN_MAX:
                raise StreamError("seq %d is too far beyond %d"
                                  % (seq, self.next))
            if len(self.open) + (seq - self.next) >= _OPEN_MAX:
                raise StreamError("the position would hold more than %d "
                                  "splits open (each split shared with "
                                  "other consumers of the job stays open "
                                  "in this one's position)" % _OPEN_MAX)
            for s in range(self.next, seq + 1):
                self.open[s] = [-1, []]
            self.next = seq + 1
        entry = self.open.get(seq)
        if entry is None:
            return              # delivered whole before
        if total >= 0:
            entry[0] = total
        _span_add(entry[1], first, end)
        if _whole(entry[0], entry[1]):
            del self.open[seq]

    def json(self):
        open_ = []
        for seq in sorted(self.open):
            total, spans = self.open[seq]
            o = {"seq": seq, "skip": [list(s) for s in spans]}
            if total >= 0:
                o["total"] = total
            open_.append(o)
        return {"version": 1, "dataset": self.dataset, "mode": "dynamic",
                "repeat": self.repeat, "seed": self.seed, "next": self.next,
                "done": self.next - len(self.open), "open": open_}


class Stream:
    """The elements of a positioned stream read from a binary file f.

    Iterating gives each element as bytes, without its framing (a line
    without its newline, a len32 element without its length); position()
    is then the position just after the last element given.
    """

    def __init__(self, f):
        self._f = f
        self._pos = None
        self._elems = iter(())
        self._ended = False
        self.framing = None

    def __iter__(self):
        return self

    def _read(self, n):
        data = self._f.read(n)
        return data if data is not None else b""

    def _record(self):
        head = self._read(_HDR.size)
        if len(head) < _HDR.size:
            self._cut(head)
        magic, typ, seq, first, count, n, flags, _ = _HDR.unpack(head)
        if magic != _MAGIC:
            raise StreamError("not a positioned stream "
                              "(dispatchctl read --positions)")
        payload = self._read(n)
        if len(payload) < n:
            self._cut(payload or b"?")
        return typ, seq, first, count, flags, payload

    def _cut(self, got):
        if not got:
            raise StreamError("the stream ends before the end of the data: "
                              "the reader stopped early")
        raise StreamError("the stream ends inside a record")

    def _split(self, payload, count):
        if self.framing == "len32":
            out, off = [], 0
            for _ in range(count):
                if off + 4 > len(payload):
                    break
                n = struct.unpack_from(">I", payload, off)[0]
                out.append(payload[off + 4:off + 4 + n])
                off += 4 + n
            whole = off == len(payload) and len(out) == count
        else:
            sep = b"\n" if self.framing == "lines" else b"\0"
            out = payload.split(sep)
            whole = out[-1] == b"" and len(out) == count + 1
            out = out[:-1]
        if not whole:
            raise StreamError("a record's elements are not whole")
        return out

    def _chunk(self, seq, first, count, flags, payload):
        elems = self._split(payload, count)
        last = count - 1
        for k, e in enumerate(elems):
            total = first + count if k == last and flags & _SPLIT_END else -1
            self._pos.add(seq, first + k, first + k + 1, total)
            yield e
        if count == 0 and flags & _SPLIT_END:
            self._pos.add(seq, first, first, first)

    def __next__(self):
        while True:
            for e in self._elems:
                return e
            if self._ended:
                raise StopIteration
            typ, seq, first, count, flags, payload = self._record()
            if typ == _STATE:
                if self._pos is not None:
                    raise StreamError("a second start record")
                start = json.loads(payload)
                self.framing = start["framing"]
                self._pos = _Position(start["start"])
            elif self._pos is None:
                raise StreamError("the stream does not begin with its "
                                  "start record")
            elif typ == _DATA:
                self._elems = self._chunk(seq, first, count, flags, payload)
            elif typ == _END:
                self._ended = True
                self._end()
            elif typ == _ERROR:
                raise StreamError(payload.decode("utf-8", "replace") or
                                  "the read failed")
            else:
                raise StreamError("a record of unknown type %d" % typ)

    def _end(self):
        pass

    def position(self):
        """The position after the last element given: a dict to save
        (json.dump) and resume from (read(from_state=...), or dispatchctl
        read --from-state FILE). None before the stream's start."""
        return self._pos.json() if self._pos is not None else None


class Reader(Stream):
    """A `dispatchctl read --positions` of its own, and its elements."""

    def __init__(self, argv, tmpfiles=()):
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
        self._tmp = list(tmpfiles)
        Stream.__init__(self, self._proc.stdout)

    def _end(self):
        rc = self._proc.wait()
        self._cleanup()
        if rc != 0:
            raise StreamError("dispatchctl read exited with %d" % rc)

    def __next__(self):
        try:
            return Stream.__next__(self)
        except StreamError:
            rc = self._proc.poll()
            self.close()
            if rc not in (None, 0):
                raise StreamError("dispatchctl read exited with %d" % rc)
            raise

    def _cleanup(self):
        for path in self._tmp:
            try:
                os.unlink(path)
            except OSError:
                pass
        self._tmp = []

    def close(self):
        """Stops the read (dispatchctl reports what was written and lets
        the job go); what was not given out is read again on resume."""
        if self._proc.poll() is None:
            self._proc.terminate()
        self._proc.stdout.close()
        self._proc.wait()
        self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RawReader:
    """A `dispatchctl read` of a job in a mode other than dynamic, which
    has no positions: its elements, split by the dataset's framing.
    position() is None."""

    def __init__(self, argv, framing):
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
        self.framing = framing
        self._buf = bytearray()
        self._off = 0  # where the next element begins in _buf
        self._done = False

    def __iter__(self):
        return self

    def _take(self):
        b, o = self._buf, self._off
        if self.framing == "len32":
            if len(b) - o >= 4:
                n = struct.unpack_from(">I", b, o)[0]
                if len(b) - o >= 4 + n:
                    self._off = o + 4 + n
                    return bytes(b[o + 4:o + 4 + n])
            return None
        sep = b"\n" if self.framing == "lines" else b"\0"
        i = b.find(sep, o)
        if i < 0:
            return None
        self._off = i + 1
        return bytes(b[o:i])

    def __next__(self):
        while True:
            e = self._take()
            if e is not None:
                return e
            if self._done:
                raise StopIteration
            # What was taken goes, once it is most of the buffer: each
            # byte is moved a bounded number of times.
            if self._off > (1 << 20) and self._off * 2 > len(self._buf):
                del self._buf[:self._off]
                self._off = 0
            data = self._proc.stdout.read1(1 << 20)
            if not data:
                self._done = True
                rc = self._proc.wait()
                if rc != 0:
                    raise StreamError("dispatchctl read exited with %d" % rc)
                if len(self._buf) > self._off:
                    raise StreamError("the data ends inside an element")
            self._buf += data

    def position(self):
        return None

    def close(self):
        if self._proc.poll() is None:
            self._proc.terminate()
        self._proc.stdout.close()
        self._proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read(dataset, job=None, from_state=None, run=None, dispatcher=None,
         args=(), dispatchctl="dispatchctl", mode=None):
    """Reads a dataset's job: a Reader over its elements.

    job: a name shared with other readers (--job). from_state: a position
    (a dict from position(), or dispatchctl checkpoint's output), or a
    list of them (the positions of a job's consumers, merged), or None.
    run: the run of the training job this reader is part of (--run; under
    preemptwatch, MUSTER_EPOCH is taken by default): the readers of one
    run share the job, a new run starts it anew.
    dispatcher: dispatchd's address, or its replicas' (a list, or
    "A,B,C"): the read goes to the one that leads, and on to the next
    when it is lost; by default MUSTER_DISPATCHER.
    args: more options of dispatchctl read (["--repeat", "3"], say).
    mode: the processing mode, "dynamic" by default, the only one with
    positions; another ("off", "file", "data", ...) gives a RawReader,
    whose position() is None, and takes no from_state.
    """
    argv = [dispatchctl]
    if dispatcher:
        if not isinstance(dispatcher, str):
            dispatcher = ",".join(dispatcher)
        argv += ["-d", dispatcher]
    if mode not in (None, "dynamic"):
        if from_state:
            raise ValueError("read: only dynamic jobs have positions")
        show = subprocess.run(argv + ["--json", "dataset", "show",
                                      str(dataset)],
                              stdout=subprocess.PIPE)
        if show.returncode != 0:
            raise StreamError("dispatchctl dataset show %s exited with %d"
                              % (dataset, show.returncode))
        framing = json.loads(show.stdout)["framing"]
        argv += ["read", str(dataset), "--mode", mode]
        if job:
            argv += ["--job", job]
        if run is not None:
            argv += ["--run", str(run)]
        return RawReader(argv + list(args), framing)
    argv += ["read", "--positions", str(dataset)]
    if job:
        argv += ["--job", job]
    if run is not None:
        argv += ["--run", str(run)]
    states = from_state if isinstance(from_state, list) else \
        [from_state] if from_state else []
    tmp = []
    for st in states:
        fd, path = tempfile.mkstemp(prefix="muster-state-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(st, f)
        tmp.append(path)
        argv += ["--from-state", path]
    argv += list(args)
    return Reader(argv, tmp)



def _iterable_dataset():
    """muster_data.IterableDataset, made on first use: importing torch
    takes seconds, which a program that does not use it must not pay."""
    import torch.utils.data

    class IterableDataset(torch.utils.data.IterableDataset):
        """A dispatchd job as a torch.utils.data.IterableDataset: each
        iteration (each epoch of a DataLoader) is one read(dataset,
        **kwargs), its elements passed through transform (bytes -> what
        the model takes). With DataLoader workers, each reads on its own
        and dispatchd deals the elements out among them when kwargs name
        a shared job (job="train"). position() is the last iteration's
        position, to save with the model and give back as from_state.

            ds = muster_data.IterableDataset("train", job="train",
                                             transform=decode)
            for batch in torch.utils.data.DataLoader(ds, batch_size=32):
                ...
        """

        def __init__(self, dataset, transform=None, **kwargs):
            super().__init__()
            self.dataset = dataset
            self.transform = transform
            self.kwargs = kwargs
            self._reader = None

        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            if info is not None and info.num_workers > 1 and \
                    not self.kwargs.get("job"):
                # Each worker would read a job of its own: all of it.
                raise ValueError("muster_data.IterableDataset: with "
                                 "DataLoader workers, name a job (job=...) "
                                 "that they share")
            if self._reader is not None:
                self._reader.close()
            self._reader = read(self.dataset, **self.kwargs)
            try:
                for element in self._reader:
                    yield self.transform(element) if self.transform \
                        else element
            finally:
                # An epoch left early stops its read; what was not
                # taken is read again from the position.
                self._reader.close()

        def position(self):
            """The position after the last element this process took
            (with num_workers=0, the DataLoader's default: each worker
            of a DataLoader with workers has its own)."""
            return self._reader.position() if self._reader else None

    return IterableDataset


def __getattr__(name):
    # muster_data.IterableDataset: ImportError without torch.
    if name == "IterableDataset":
        cls = _iterable_dataset()
        globals()[name] = cls
        return cls
    raise AttributeError("module 'muster_data' has no attribute %r" % name)
