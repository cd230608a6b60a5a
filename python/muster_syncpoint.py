"""muster_syncpoint: the sync point from Python, without a process a step.

A training program running under preemptwatch asks, at every step, whether
this is the step every task checkpoints at before a preemption:

    import muster_syncpoint as sp

    for step in range(start, steps):
        train_one_step()
        if sp.reached(step + 1):        # YES or PAST: save, then exit
            save_checkpoint(step + 1)
            sys.exit(0)

reached() costs a fraction of a microsecond when no notice is pending: it
calls the C API (libmuster-syncpoint, through ctypes), which reads a page
of memory preemptwatch shares with its command. Standard library only.

reached(step) returns NO (0: go on), YES (1: this is the sync step) or
PAST (2: the sync step is already behind this one, because the task was
late to report its first step; save now all the same, knowing the
checkpoint is not at the step the others save at). NO is false, YES and
PAST are true, so `if reached(step):` does the right thing.
"""

import ctypes
import ctypes.util
import os

__all__ = ["NO", "YES", "PAST", "SyncpointError", "reached", "status",
           "wait_notice", "available"]

NO, YES, PAST = 0, 1, 2

# Set by `make install` to where it put the library; None in the source
# tree, where the build tree's copy is used.
LIBPATH = None

_STATES = ["idle", "notice", "syncing", "known", "failed"]


class SyncpointError(RuntimeError):
    """Not running under preemptwatch, or it cannot be reached."""


class _Status(ctypes.Structure):
    _fields_ = [("state", ctypes.c_int), ("death_ms", ctypes.c_int64),
                ("sync_step", ctypes.c_int64), ("step", ctypes.c_int64),
                ("answered", ctypes.c_int)]


def _find_library():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("MUSTER_SYNCPOINT_LIB"), LIBPATH,
                  os.path.join(here, "..", "build", "lib",
                               "libmuster-syncpoint.so.0"),
                  ctypes.util.find_library("muster-syncpoint")]
    for path in candidates:
        if path and (os.path.exists(path) or "/" not in path):
            return path
    raise SyncpointError("libmuster-syncpoint.so.0 not found: run "
                         "`make install`, or set MUSTER_SYNCPOINT_LIB")


_lib = None
_handle = None


def _open():
    global _lib, _handle
    if _handle is not None:
        return
    if _lib is None:
        lib = ctypes.CDLL(_find_library())
        lib.syncpoint_open.restype = ctypes.c_void_p
        lib.syncpoint_open.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.syncpoint_reached.restype = ctypes.c_int
        lib.syncpoint_reached.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.syncpoint_status.restype = None
        lib.syncpoint_status.argtypes = [ctypes.c_void_p,
                                         ctypes.POINTER(_Status)]
        lib.syncpoint_wait_notice.restype = ctypes.c_int
        lib.syncpoint_wait_notice.argtypes = [ctypes.c_void_p,
                                              ctypes.c_int64,
                                              ctypes.POINTER(_Status)]
        _lib = lib
    err = ctypes.create_string_buffer(512)
    handle = _lib.syncpoint_open(err, len(err))
    if not handle:
        raise SyncpointError(err.value.decode(errors="replace"))
    _handle = handle


def available():
    """True when running under preemptwatch (the page can be mapped)."""
    try:
        _open()
        return True
    except SyncpointError:
        return False


def reached(step):
    """NO, YES or PAST for step; raises SyncpointError outside preemptwatch."""
    if _handle is None:
        _open()
    return _lib.syncpoint_reached(_handle, step)


def _as_dict(st):
    return {
        "state": _STATES[st.state] if 0 <= st.state < len(_STATES)
        else str(st.state),
        "notice": st.state != 0,
        "death_time": st.death_ms / 1000.0 if st.death_ms else None,
        "sync_step": st.sync_step if st.sync_step >= 0 else None,
        "step": st.step if st.step >= 0 else None,
        "answered": {YES: "yes", PAST: "past"}.get(st.answered),
    }


def status():
    """The page as a dict: state, notice, death_time (Unix seconds),
    sync_step, step, answered (None, "yes" or "past")."""
    _open()
    st = _Status()
    _lib.syncpoint_status(_handle, ctypes.byref(st))
    return _as_dict(st)


def wait_notice(timeout=None):
    """Waits up to timeout seconds (None: for ever) for a notice; the
    status dict when one came, None when the time ran out."""
    _open()
    st = _Status()
    ms = -1 if timeout is None else int(timeout * 1000)
    if _lib.syncpoint_wait_notice(_handle, ms, ctypes.byref(st)) == 1:
        return _as_dict(st)
    return None
