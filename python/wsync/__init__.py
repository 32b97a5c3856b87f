"""wsync for Python: keep inference weights in step with an RL trainer, bit-exact.

A binding over the C library (wsync.h, wsync_http.h) through the standard
library's ctypes and a small flat C API of its own (python/wsync/_capi.c,
built as build/libwsync.so by `make python`; WSYNC_LIB overrides where it is
looked for). numpy and torch are optional: tensors are read through
long-stable calls only (data_ptr, contiguous, is_contiguous, numel,
element_size, device, dtype, shape), so Debian's PyTorch 1.13 and current
2.x both work.

Trainer side::

    pub = wsync.Publisher("bucket")            # or http(s)://..., s3://bucket/prefix
    stats = pub.publish(step, model.state_dict())

Engine side::

    sub = wsync.Subscriber("bucket", model.state_dict())
    sub.sync()                                 # to HEAD's step; sub.step
    sub.start(); ...; if sub.ready(): sub.apply_ready()
    # CUDA tensors: the same calls (a mirror subscriber); st.take.pause_seconds

Tensors: torch tensors, numpy arrays, bytes-like objects, or a tuple
(data, "BF16"[, shape]) naming the dtype of raw bytes (numpy has no
bfloat16: (uint16_array, "BF16")). The publisher takes tensors on any
device (copied to the host when not there; a non-contiguous tensor is made
contiguous) and publishes F32 as BF16, rounded to nearest even, as the C
publisher does (keep_f32=True keeps F32). Subscriber and apply targets are
patched in place through their memory, with no copy: they must be CPU,
contiguous and writable.

CUDA (any non-CPU) tensors as subscriber targets go through the C
library's mirror subscriber (wsync_mirror): wsync keeps a host copy,
applies and verifies into it (in the background after start()), and a take
(sync(), apply_ready(), take()) hands the engine's tensors the merged
changes, uploaded and scattered with index_copy_ on their device.
mirror=True does the same for CPU torch tensors and numpy arrays (this is
how it is tested without a GPU). wsync.apply() patches CPU targets only; a
device tensor there raises WsyncUnsupportedError.

Stores by string: a directory; http://host[:port]/prefix or https://... (an
HTTP server such as nginx with WebDAV); s3://bucket/prefix with
AWS_ENDPOINT_URL, AWS_REGION (else AWS_DEFAULT_REGION, else us-east-1),
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from the
environment, as the CLI tool. URL stores need the library built with
libcurl's development files present.

Errors: every failure raises WsyncError with .code (the result code's name,
"WSYNC_ERR_CORRUPT"), .tensor, .offset and .message; WsyncNoStoreError (the
store does not exist yet) and WsyncNotFoundError (nothing published yet: a
serving loop waits on both), WsyncLayoutError (the model does not match the
chain: stop) and WsyncStaleHeadError (HEAD is older than the step held) are
its subclasses for those codes. Bad input (a malformed delta, a wrong store,
a tensor of the wrong shape or dtype, a non-contiguous target, a target whose
memory moved or was freed after the Subscriber was built, a closed object, a
wrong type) raises; it never crashes the interpreter.

Threads: the GIL is released during every C call. Two threads may use two
objects at once. One object's calls are serialised (ready(), step and
status() may be called from any thread while the engine's thread syncs).
"""
import ctypes
import os
import threading
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from ._errors import (WsyncError, WsyncTypeError, WsyncUnsupportedError, WsyncNoStoreError,
                      WsyncNotFoundError, WsyncEmptyChainError, WsyncLayoutError, WsyncStaleHeadError)
from . import _errors, _lib, _mirror, _tensors

__all__ = ["Publisher", "Subscriber", "WsyncError", "WsyncTypeError", "WsyncUnsupportedError",
           "WsyncNoStoreError", "WsyncNotFoundError", "WsyncEmptyChainError", "WsyncLayoutError",
           "WsyncStaleHeadError",
           "PublishStats", "SyncStats", "MirrorStats", "DeltaStats", "PrefetchStatus", "FileInfo", "TensorInfo",
           "Head", "head", "diff", "apply", "inspect", "state_digest", "digest", "changed_positions",
           "has_http", "library_version", "ENCODINGS", "STEP_MAX"]

STEP_MAX = 999999999999999
ENCODINGS = ("packed", "packed-max", "trl-v1", "trl-v3")
_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1

_CHAIN_VERIFY_STATE = 1
_CHAIN_KEEP_F32 = 2
_CHAIN_NEW_CHAIN = 4
_CHAIN_PARTIAL = 8
_CHAIN_FOLLOW_RESTART = 16
_DELTA_SKIP_BASE_DIGEST = 1
_DELTA_SKIP_RESULT_DIGEST = 2
_DELTA_RANGE_CODER = 8
_STORE_MUST_EXIST = 1
_STORE_NO_FSYNC = 2
_STORE_INSECURE = 4

_L = _lib.load()

__version__ = _L.wspy_version().decode()


def library_version():
    """The C library's version ("0.2.0")."""
    return __version__


def has_http():
    """True when the library was built with libcurl (http(s):// and s3:// stores)."""
    return bool(_L.wspy_has_http())


# ---- errors ----

def _error_from(err):
    """The exception for a wspy_error: WsyncError, or its subclass for the
    code (WsyncNoStoreError, WsyncNotFoundError, WsyncLayoutError,
    WsyncStaleHeadError); C names in the message become the Python call."""
    code = _L.wspy_result_name(err.code).decode()
    msg = err.message.decode("utf-8", "replace") or _L.wspy_result_str(err.code).decode()
    tensor = err.tensor.decode("utf-8", "replace") or None
    offset = None if err.offset == _U64_MAX else int(err.offset)
    return _errors.make(code, _errors.python_message(msg), tensor, offset)


def _check(rc, err):
    if rc:
        if not err.code:
            err.code = rc
        raise _error_from(err)


# ---- stats ----

@dataclass
class PublishStats:
    step: int
    wrote_anchor: bool
    wrote_delta: bool
    base_step: Optional[int]
    elements: int
    changed: int
    delta_bytes: int
    anchor_bytes: int
    deleted: int
    retention_failed: int
    state: int
    encode_seconds: float
    put_seconds: float
    seconds: float          # the C publish itself (wsync_publish), timed in C


@dataclass
class MirrorStats:
    """A mirror's take (wsync_mirror_take): what the engine was handed."""
    from_step: Optional[int]   # the engine's step before the take
    step: Optional[int]        # after it (None: a failed take left a mixture)
    handed: bool               # the engine was handed the mirror's step
    busy: bool                 # (no_wait) the mirror was applying: nothing handed
    steps: int                 # published objects merged into this take
    tensors: int               # tensors handed
    whole_tensors: int         # of which whole
    positions: int             # positions handed (each once, however many steps)
    bytes: int                 # positions * (8 + width) + whole tensors' bytes
    chunks: int                # callback calls
    record_bytes: int          # the mirror's change records (bitmaps)
    pause_seconds: float       # the engine's pause: time inside the take, callbacks included
    wait_seconds: float        # of which waiting for an apply in the background
    anchors: int = 0           # of the merged objects, anchors (a handed take)
    deltas: int = 0            # and deltas
    bytes_fetched: int = 0     # their bytes as fetched, and those of objects fetched and refused


@dataclass
class SyncStats:
    from_step: Optional[int]
    step: Optional[int]
    head_step: int
    verified: bool
    anchors: int
    deltas: int
    rejected: int
    bytes_fetched: int
    path: str
    seconds: float          # the C sync itself, timed in C
    take: Optional[MirrorStats] = None   # a mirror's take (None: a plain subscriber)


@dataclass
class DeltaStats:
    encoding: str
    base_step: Optional[int]
    step: Optional[int]
    has_base: bool
    tensors: int
    changed_tensors: int
    elements: int
    changed: int
    bytes: int
    seconds: float = 0.0


@dataclass
class PrefetchStatus:
    running: bool
    polls: int
    head_step: Optional[int]
    ready_step: Optional[int]
    caught_up: bool
    refused: int
    interval_ms: int
    last_error: Optional[WsyncError]
    last_error_time: Optional[float]


class Head(NamedTuple):
    """A chain's HEAD: its newest step, the state digest HEAD records for it
    (wsync.state_digest of the model at that step, as published; None when
    the store has no HEAD and the chain was read from a listing), and the
    newest anchor's step at or before it."""
    step: int
    state: Optional[int]
    anchor_step: int


def _head(h):
    return Head(int(h.head_step), int(h.head_state) if h.has_head else None, int(h.anchor_step))


@dataclass
class TensorInfo:
    name: str
    dtype: str
    shape: Tuple[int, ...]
    offset: int             # of its bytes in the file
    nbytes: int


@dataclass
class FileInfo:
    size: int
    metadata: Optional[Dict[str, str]]
    tensors: List[TensorInfo]
    delta: Optional[DeltaStats] = None              # when the file is a delta
    delta_error: Optional[WsyncError] = field(default=None, repr=False)


def _pub_stats(s):
    return PublishStats(int(s.step), bool(s.wrote_anchor), bool(s.wrote_delta),
                        int(s.base_step) if s.wrote_delta else None, int(s.elements), int(s.changed),
                        int(s.delta_bytes), int(s.anchor_bytes), int(s.deleted),
                        int(s.retention_failed), int(s.state), s.encode_seconds, s.put_seconds,
                        s.seconds)


def _sync_stats(s, step):
    return SyncStats(int(s.from_step) if s.had_step else None, step, int(s.head_step), bool(s.verified),
                     int(s.anchors), int(s.deltas), int(s.rejected), int(s.bytes_fetched),
                     s.path.decode("utf-8", "replace"), s.seconds)


def _mirror_stats(s):
    return MirrorStats(int(s.from_step) if s.had_step else None, int(s.step) if s.has_step else None,
                       bool(s.handed), bool(s.busy), int(s.steps), int(s.tensors), int(s.whole_tensors),
                       int(s.positions), int(s.bytes), int(s.chunks), int(s.record_bytes), s.pause_seconds,
                       s.wait_seconds, int(s.anchors), int(s.deltas), int(s.bytes_fetched))


def _delta_stats(s):
    return DeltaStats(_L.wspy_encoding_name(int(s.encoding)).decode(),
                      int(s.base_step) if s.has_steps else None, int(s.step) if s.has_steps else None,
                      bool(s.has_base), int(s.tensors), int(s.changed_tensors), int(s.elements),
                      int(s.changed), int(s.bytes), s.seconds)


# ---- argument checks ----

def _int(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import operator
            v2 = operator.index(v)
        except TypeError:
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s must be an int, not %s"
                                 % (name, type(v).__name__))
        if isinstance(v, bool):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s must be an int, not bool" % name)
        v = v2
    if v < lo or v > hi:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "%s %d out of range [%d, %d]" % (name, v, lo, hi))
    return v


def _bool(name, v):
    if not isinstance(v, bool):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s must be a bool" % name)
    return v


def _str(name, v, none_ok=True):
    if v is None and none_ok:
        return None
    if not isinstance(v, str):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s must be a str, not %s"
                             % (name, type(v).__name__))
    if "\x00" in v:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "%s holds a NUL character" % name)
    return v.encode("utf-8")


def _encoding(v):
    if isinstance(v, str) and v in ENCODINGS:
        return _L.wspy_encoding_from_name(v.encode())
    raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "encoding %r: one of %s" % (v, ", ".join(ENCODINGS)))


def _store(store):
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    if isinstance(store, bytes):
        store = os.fsdecode(store)
    if not isinstance(store, str):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "store must be a path or a URL, not %s"
                             % type(store).__name__)
    if not store:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "empty store")
    if "://" in store and not store.startswith(("http://", "https://", "s3://")):
        raise WsyncError("WSYNC_ERR_UNSUPPORTED", "store %r: a directory, http://, https:// or s3://" % store)
    if "\x00" in store:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "store holds a NUL character")
    return os.fsencode(store) if "://" not in store else store.encode("utf-8")


def _options(kind, options, defaults):
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s: unknown option %s (known: %s)"
                             % (kind, ", ".join(unknown), ", ".join(sorted(defaults))))
    out = dict(defaults)
    out.update(options)
    return out


# ---- handles: close waits for calls in flight, calls after close raise ----

class _Handle(object):
    def __init__(self, ptr, closer, what):
        self.ptr = ptr
        self.closer = closer
        self.what = what
        self.cv = threading.Condition()
        self.users = 0
        self.closed = False

    def enter(self):
        with self.cv:
            if self.closed:
                raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "%s is closed" % self.what)
            self.users += 1
            return self.ptr

    def leave(self):
        with self.cv:
            self.users -= 1
            if not self.users:
                self.cv.notify_all()

    def close(self, before=None):
        with self.cv:
            if self.closed:
                return
            self.closed = True
            ptr = self.ptr
        if before is not None:
            before(ptr)                # e.g. stop a prefetch thread, waited on below
        with self.cv:
            while self.users:
                self.cv.wait()
            self.ptr = None
        self.closer(ptr)


class _Guard(object):
    """with _Guard(handle[, lock]) as ptr: a call on a live handle."""
    __slots__ = ("h", "lock")

    def __init__(self, h, lock=None):
        self.h = h
        self.lock = lock

    def __enter__(self):
        if self.lock is not None:
            self.lock.acquire()
        try:
            return self.h.enter()
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise

    def __exit__(self, *exc):
        self.h.leave()
        if self.lock is not None:
            self.lock.release()
        return False


# ---- publisher ----

class Publisher(object):
    """Publishes a trainer's tensors into a store, one step at a time.

    Options: prefix (objects under "<prefix>/"), encoding ("packed",
    "packed-max", "trl-v1", "trl-v3"), anchor_every (0: 20), anchor_fraction
    (0: 0.5), retain (0: 2 * anchor_every), threads, keep_f32 (publish F32
    as F32 instead of BF16), new_chain (start a new chain over a damaged or
    foreign one), fsync (directory store: False skips fsync, for tests),
    insecure (https: skip certificate checks, for tests).
    """

    _DEFAULTS = dict(prefix=None, encoding="packed", anchor_every=0, anchor_fraction=0.0, retain=0,
                     threads=0, keep_f32=False, new_chain=False, fsync=True, insecure=False)

    def __init__(self, store, **options):
        self._h = None
        o = _options("Publisher", options, self._DEFAULTS)
        spec = _store(store)
        prefix = _str("prefix", o["prefix"])
        enc = _encoding(o["encoding"])
        every = _int("anchor_every", o["anchor_every"], 0, _U32_MAX)
        frac = o["anchor_fraction"]
        if isinstance(frac, bool) or not isinstance(frac, (int, float)):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "anchor_fraction must be a number")
        frac = float(frac)
        if not (0.0 <= frac <= 1e9):
            raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "anchor_fraction %r out of range" % frac)
        retain = _int("retain", o["retain"], 0, _U32_MAX)
        threads = _int("threads", o["threads"], 0, 1024)
        flags = (_CHAIN_KEEP_F32 if _bool("keep_f32", o["keep_f32"]) else 0) | \
                (_CHAIN_NEW_CHAIN if _bool("new_chain", o["new_chain"]) else 0)
        sflags = (0 if _bool("fsync", o["fsync"]) else _STORE_NO_FSYNC) | \
                 (_STORE_INSECURE if _bool("insecure", o["insecure"]) else 0)
        err = _lib.Error()
        out = ctypes.c_void_p()
        rc = _L.wspy_publisher_open(spec, sflags, prefix, enc, every, frac, retain, threads, flags,
                                    ctypes.byref(out), ctypes.byref(err))
        _check(rc, err)
        self.store = store if isinstance(store, str) else os.fspath(store)
        self._h = _Handle(out.value, _L.wspy_publisher_close, "publisher")
        self._lock = threading.Lock()

    def publish(self, step, tensors):
        """Publishes `tensors` (name -> tensor, e.g. a state_dict) as `step`,
        which must be above the chain's HEAD step. Returns PublishStats."""
        step = _int("step", step, 0, STEP_MAX)
        ts = _tensors.describe_all(tensors, writable=False)
        a = _tensors.Arrays(ts)
        st = _lib.PublishStats()
        err = _lib.Error()
        with _Guard(self._handle(), self._lock) as ptr:
            rc = _L.wspy_publish(ptr, step, a.n, a.names, a.dtypes, a.ranks, a.shapes, a.datas,
                                 ctypes.byref(st), ctypes.byref(err))
        _check(rc, err)
        return _pub_stats(st)

    @property
    def head(self):
        """The chain's HEAD step, or None before anything was published."""
        s = ctypes.c_uint64()
        with _Guard(self._handle(), self._lock) as ptr:
            has = _L.wspy_publisher_head(ptr, ctypes.byref(s))
        return int(s.value) if has else None

    def head_state(self):
        """(step, state digest) of the chain's HEAD, read from the store now,
        or None before anything was published: a resumed trainer checks its
        model with pub.head_state() == (pub.head, wsync.state_digest(
        model.state_dict())) (BF16 tensors; F32 ones are published as BF16).
        The state is None when the store has no HEAD (a chain read from a
        listing)."""
        h = _lib.Head()
        err = _lib.Error()
        with _Guard(self._handle(), self._lock) as ptr:
            if not _L.wspy_publisher_head(ptr, None):
                return None
            rc = _L.wspy_publisher_head_state(ptr, ctypes.byref(h), ctypes.byref(err))
        _check(rc, err)
        hd = _head(h)
        return (hd.step, hd.state)

    def _handle(self):
        if self._h is None:
            raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "publisher is closed")
        return self._h

    def close(self):
        if self._h is not None:
            self._h.close()

    @property
    def closed(self):
        return self._h is None or self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- subscriber ----

class Subscriber(object):
    """Follows a store's chain into the caller's tensors.

    tensors: name -> tensor (e.g. a model's state_dict), matched by name with
    the chain's tensors (dtype and shape must agree). The subscriber keeps
    references to them. Two ways, chosen at construction:

    - CPU tensors (contiguous, writable): patched in place through their
      memory, zero copy (a plain subscriber, wsync_subscriber).
    - Tensors on another device (CUDA), or any torch tensors or numpy arrays
      with mirror=True: a mirror subscriber (wsync_mirror). wsync keeps a
      host copy of the model (one model's bytes, allocated by the library),
      applies and verifies into it (in the background after start()), and
      the engine's tensors are written only by a take: the changes since the
      last take, merged over however many steps, uploaded and scattered with
      index_copy_ on the tensor's device (whole tensors with copy_). The
      first take hands every tensor whole.

    tensors may be any iterable of (name, tensor) pairs (read once, e.g.
    model.named_parameters()); tied weights (two names, one tensor) are
    fine, targets that overlap in part are refused. Each target's memory is
    checked before every call that lets wsync write or read it: a target
    moved or freed since (share_memory_(), storage().resize_(0), set_())
    raises a WsyncError naming it, and nothing is written.

    Options: prefix, threads, verify_state (digest the whole model after
    every sync; a mirror always does), insecure (https, tests), mirror
    (None: when a tensor is not on the CPU; True; False: never, a non-CPU
    tensor raises WsyncUnsupportedError), chunk (mirror: positions per
    take callback, 0: 65536), interval_ms (the background's HEAD poll, 100;
    start(interval_ms) overrides it), strict (True: the targets must be the
    chain's tensors exactly, else WsyncLayoutError before any byte moves;
    False: a subset is followed), follow_restart (False: a HEAD below the
    step held raises WsyncStaleHeadError and the targets stay; True: it is
    taken as a restarted chain and followed).

    The store may not exist yet: the Subscriber opens anyway (creating
    nothing), sync() raises WsyncNoStoreError until it does, and start()'s
    background keeps polling.
    """

    _DEFAULTS = dict(prefix=None, threads=0, verify_state=False, insecure=False, mirror=None, chunk=0,
                     interval_ms=100, strict=True, follow_restart=False)

    def __init__(self, store, tensors, **options):
        self._h = None
        o = _options("Subscriber", options, self._DEFAULTS)
        spec = _store(store)
        prefix = _str("prefix", o["prefix"])
        threads = _int("threads", o["threads"], 0, 1024)
        flags = (_CHAIN_VERIFY_STATE if _bool("verify_state", o["verify_state"]) else 0) | \
                (0 if _bool("strict", o["strict"]) else _CHAIN_PARTIAL) | \
                (_CHAIN_FOLLOW_RESTART if _bool("follow_restart", o["follow_restart"]) else 0)
        sflags = _STORE_MUST_EXIST | (_STORE_INSECURE if _bool("insecure", o["insecure"]) else 0)
        mirror = o["mirror"]
        if mirror is not None:
            mirror = _bool("mirror", mirror)
        chunk = _int("chunk", o["chunk"], 0, 1 << 26)
        interval = _int("interval_ms", o["interval_ms"], 1, _U32_MAX)
        tensors = _tensors.pairs(tensors)     # an iterator (named_parameters()) is read once, here
        if not tensors:
            raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "Subscriber: no tensors given (an empty dict, or an "
                             "iterator already consumed): it would follow nothing")
        if mirror is None:
            mirror = any(_tensors.is_device_tensor(v) for _, v in tensors)
        self.mirror = mirror
        self._interval = interval
        self._running = None              # the interval the background was started with
        self._lock = threading.Lock()     # the engine's calls, one at a time
        err = _lib.Error()
        out = ctypes.c_void_p()
        if mirror:
            targets = _tensors.describe_targets(tensors)
            ts = [t.t for t in targets]
            a = _tensors.Arrays(ts)
            rc = _L.wspy_mirror_open(spec, sflags, prefix, threads, flags, interval, chunk, a.n, a.names,
                                     a.dtypes, a.ranks, a.shapes, ctypes.byref(out), ctypes.byref(err))
            _check(rc, err)
            self._sink = _mirror.Sink(targets, chunk or 65536)
            self._targets = targets
            close, stop, what = _L.wspy_mirror_close, _L.wspy_mirror_stop, "subscriber"
        else:
            ts = _tensors.describe_all(tensors, writable=True)
            a = _tensors.Arrays(ts)
            rc = _L.wspy_subscriber_open(spec, sflags, prefix, threads, flags, a.n, a.names, a.dtypes, a.ranks,
                                         a.shapes, a.datas, ctypes.byref(out), ctypes.byref(err))
            _check(rc, err)
            self._sink = None
            close, stop, what = _L.wspy_subscriber_close, _L.wspy_subscriber_stop, "subscriber"
        self._ts = ts                     # their memory as given: checked before every call into C
        self.store = store if isinstance(store, str) else os.fspath(store)
        self.tensors = dict((t.name, t.obj) for t in ts)
        self._stop = stop
        keep = [ts]                       # every tensor (and buffer export) alive until closed

        def free(ptr):                    # no reference to self: no cycle, __del__ runs at once
            close(ptr)
            keep.clear()
        self._h = _Handle(out.value, free, what)

    def _handle(self):
        if self._h is None:
            raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "subscriber is closed")
        return self._h

    # -- the mirror's take --

    def _take(self, ptr):
        """One take into the engine's tensors (under self._lock): MirrorStats;
        raises what the callback raised, else the take's error."""
        _tensors.check_unmoved(self._ts)
        st = _lib.MirrorStats()
        err = _lib.Error()
        rc = _L.wspy_mirror_take(ptr, self._sink.fn, None, ctypes.byref(st), ctypes.byref(err))
        exc = self._sink.end_take()
        if exc is not None:
            raise exc
        _check(rc, err)
        return _mirror_stats(st)

    def take(self):
        """(mirror) Hands the engine's tensors every change the mirror
        applied since the last take, merged, now, in this thread: the
        engine's pause. Nothing when the mirror holds no newer verified step.
        Returns MirrorStats. An exception raised while writing a tensor is
        raised here; the engine then has no step until the next take, which
        hands again everything not handed."""
        self._need_mirror("take")
        with _Guard(self._handle(), self._lock) as ptr:
            return self._take(ptr)

    def _need_mirror(self, what):
        if not self.mirror:
            raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "%s: only a mirror subscriber (mirror=True)" % what)

    def _mirror_result(self, ptr, take, head=0):
        now = self._step(ptr)
        return SyncStats(take.from_step, now, head, take.handed, take.anchors, take.deltas, 0, take.bytes_fetched,
                         "mirror" if take.handed else "none", take.pause_seconds, take)

    # -- the engine's calls --

    def sync(self, step=None):
        """Brings the tensors to `step` (None: HEAD's). On failure they hold
        the last published step reached, never a mixture. Returns SyncStats.

        A mirror: the mirror is synced in this thread, then the engine takes
        what it applied (SyncStats.take); when the mirror's sync fails the
        engine still takes the last verified step the mirror reached, and the
        sync's error is raised after."""
        s = _U64_MAX if step is None else _int("step", step, 0, STEP_MAX)
        st = _lib.SyncStats()
        err = _lib.Error()
        if self.mirror:
            with _Guard(self._handle(), self._lock) as ptr:
                rc = _L.wspy_mirror_sync(ptr, s, ctypes.byref(st), ctypes.byref(err))
                take = self._take(ptr)
                now = self._step(ptr)
            _check(rc, err)
            out = _sync_stats(st, now)
            out.take = take
            return out
        with _Guard(self._handle(), self._lock) as ptr:
            _tensors.check_unmoved(self._ts)
            rc = _L.wspy_subscriber_sync(ptr, s, ctypes.byref(st), ctypes.byref(err))
            now = self._step(ptr)
        _check(rc, err)
        return _sync_stats(st, now)

    def _step(self, ptr):
        s = ctypes.c_uint64()
        if self.mirror:
            return int(s.value) if _L.wspy_mirror_engine_step(ptr, ctypes.byref(s)) else None
        return int(s.value) if _L.wspy_subscriber_step(ptr, ctypes.byref(s)) else None

    @property
    def step(self):
        """The step the tensors hold, or None before the first sync (a
        mirror: the engine's step, its last take's)."""
        with _Guard(self._handle()) as ptr:
            return self._step(ptr)

    @property
    def mirror_step(self):
        """(mirror) The verified step the host copy holds (the next take's),
        or None. A plain subscriber: its step."""
        with _Guard(self._handle()) as ptr:
            if not self.mirror:
                return self._step(ptr)
            s = ctypes.c_uint64()
            return int(s.value) if _L.wspy_mirror_step(ptr, 1, ctypes.byref(s)) else None

    def state_digest(self):
        """The state digest of what the tensors hold (HEAD's for that step;
        equal digests mean bit-identical models), or None without a step.
        A mirror: of what the engine was handed at its last take, checked on
        the host copy (an engine that reads its weights back can compare).
        A plain subscriber: computed from the tensors."""
        if self.mirror:
            d = ctypes.c_uint64()
            with _Guard(self._handle()) as ptr:
                return int(d.value) if _L.wspy_mirror_state_digest(ptr, ctypes.byref(d)) else None
        if self.step is None:
            return None
        _tensors.check_unmoved(self._ts)
        return state_digest(self.tensors)

    def set_step(self, step):
        """Vouches that the tensors already hold `step` (e.g. loaded from a
        file). A mirror copies the engine's tensors into its host copy first,
        so the mirror and the engine agree."""
        step = _int("step", step, 0, STEP_MAX)
        err = _lib.Error()
        with _Guard(self._handle(), self._lock) as ptr:
            _tensors.check_unmoved(self._ts)
            if self.mirror:
                self._load_host(ptr)
                rc = _L.wspy_mirror_set_step(ptr, step, ctypes.byref(err))
            else:
                rc = _L.wspy_subscriber_set_step(ptr, step, ctypes.byref(err))
        _check(rc, err)

    def _load_host(self, ptr):
        data, size = ctypes.c_void_p(), ctypes.c_uint64()
        for i, t in enumerate(self._targets):
            if _L.wspy_mirror_data(ptr, i, ctypes.byref(data), ctypes.byref(size)) or size.value != t.t.nbytes:
                raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "the mirror's copy of tensor %d" % i)
            if not size.value:
                continue
            if t.kind == "numpy":
                ctypes.memmove(data.value, t.obj.__array_interface__["data"][0], size.value)
            else:
                src = t.flat.to("cpu").contiguous()
                ctypes.memmove(data.value, src.data_ptr(), size.value)

    def start(self, interval_ms=None):
        """Starts the background, which polls HEAD every interval_ms (None:
        the interval_ms given to Subscriber(), 100 by default; a failing
        poll backs off, up to a cap). A plain subscriber: a C thread
        downloads and checks what leads to HEAD, touching nothing of the
        tensors until apply_ready(). A mirror: that, and a second thread
        that applies it to the host copy; the engine's tensors change only
        in apply_ready() (a take). Called again with another interval, the
        background restarts with it. Before the store exists (a subscriber
        started before its trainer) it keeps polling until it does."""
        interval = self._interval if interval_ms is None else _int("interval_ms", interval_ms, 1, _U32_MAX)
        err = _lib.Error()
        with _Guard(self._handle(), self._lock) as ptr:
            _tensors.check_unmoved(self._ts)
            if self._running is not None and self._running != interval:
                self._stop(ptr)
                self._running = None
            if self.mirror:
                rc = _L.wspy_mirror_start(ptr, interval, ctypes.byref(err))
            else:
                rc = _L.wspy_subscriber_start(ptr, interval, ctypes.byref(err))
            if not rc:
                self._running = interval
        _check(rc, err)

    def ready(self):
        """The step apply_ready() would bring the tensors to (newer than
        theirs), or None. A plain subscriber: what prefetched objects lead
        to; a mirror: the verified step its host copy holds."""
        s = ctypes.c_uint64()
        with _Guard(self._handle()) as ptr:
            if not self.mirror:
                has = _L.wspy_subscriber_ready(ptr, ctypes.byref(s))
                return int(s.value) if has else None
            if not _L.wspy_mirror_step(ptr, 1, ctypes.byref(s)):
                return None
            mine = self._step(ptr)
            return int(s.value) if mine is None or mine != s.value else None

    def apply_ready(self):
        """Applies what is ready, now, in this thread (path "none" when
        nothing is). Returns SyncStats. A mirror: a take (path "mirror",
        SyncStats.take; seconds: the engine's pause)."""
        st = _lib.SyncStats()
        err = _lib.Error()
        if self.mirror:
            with _Guard(self._handle(), self._lock) as ptr:
                take = self._take(ptr)
                ps = _lib.PrefetchStatus()
                head = int(ps.head_step) if (_L.wspy_mirror_status(ptr, ctypes.byref(ps), ctypes.byref(err)) == 0
                                             and ps.head_known) else 0
                return self._mirror_result(ptr, take, head)
        with _Guard(self._handle(), self._lock) as ptr:
            _tensors.check_unmoved(self._ts)
            rc = _L.wspy_subscriber_apply_ready(ptr, ctypes.byref(st), ctypes.byref(err))
            now = self._step(ptr)
        _check(rc, err)
        return _sync_stats(st, now)

    def status(self):
        """What the background prefetch is doing (PrefetchStatus; a mirror:
        its subscriber's, failed applies included)."""
        st = _lib.PrefetchStatus()
        err = _lib.Error()
        with _Guard(self._handle()) as ptr:
            fn = _L.wspy_mirror_status if self.mirror else _L.wspy_subscriber_status
            rc = fn(ptr, ctypes.byref(st), ctypes.byref(err))
        _check(rc, err)
        le = st.last_error
        return PrefetchStatus(bool(st.running), int(st.polls),
                              int(st.head_step) if st.head_known else None,
                              int(st.ready_step) if st.ready else None, bool(st.caught_up),
                              int(st.refused), int(st.interval_ms),
                              _error_from(le) if le.code else None,
                              st.last_error_time if st.last_error_time else None)

    def stop(self):
        """Stops the background (close does too)."""
        with _Guard(self._handle(), self._lock) as ptr:
            self._stop(ptr)
            self._running = None

    def close(self):
        if self._h is not None:
            self._h.close(before=self._stop)

    @property
    def closed(self):
        return self._h is None or self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- deltas and files ----

def _input(x):
    """(address, size, path, keep) for a path or a bytes-like object."""
    if isinstance(x, (str, os.PathLike)):
        p = os.fspath(x)
        if "\x00" in p:
            raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "path holds a NUL character")
        return None, 0, os.fsencode(p), None
    if isinstance(x, bytes):
        ptr = ctypes.cast(ctypes.c_char_p(x), ctypes.c_void_p).value if x else None
        return ptr, len(x), None, x
    try:
        mv = memoryview(x)
    except TypeError:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "expected a path or bytes, not %s"
                             % type(x).__name__)
    if not mv.c_contiguous:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "buffer is not contiguous")
    b = bytes(mv) if mv.readonly else (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    if isinstance(b, bytes):
        return (ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value if b else None), len(b), None, b
    return (ctypes.addressof(b) if mv.nbytes else None), mv.nbytes, None, b


def diff(base, new, encoding="packed", base_step=0, step=1, block_log2=0, threads=0,
         range_coder=False, out=None):
    """The delta base -> new (dicts name -> tensor with the same names,
    dtypes and shapes) as bytes, in `encoding`; written to the file `out`
    too when given."""
    enc = _encoding(encoding)
    base_step = _int("base_step", base_step, 0, STEP_MAX)
    step = _int("step", step, 0, STEP_MAX)
    block_log2 = _int("block_log2", block_log2, 0, 20)
    threads = _int("threads", threads, 0, 1024)
    flags = _DELTA_RANGE_CODER if _bool("range_coder", range_coder) else 0
    b = _tensors.describe_all(base, writable=False)
    n = _tensors.describe_all(new, writable=False)
    nd = dict((t.name, t) for t in n)
    if len(nd) != len(b) or any(t.name not in nd for t in b):
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "base and new must name the same tensors")
    n = [nd[t.name] for t in b]
    for x, y in zip(b, n):
        if x.dtype != y.dtype or x.shape != y.shape:
            raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "base is %s %s, new is %s %s"
                             % (x.dtype, list(x.shape), y.dtype, list(y.shape)), tensor=x.name)
    a = _tensors.Arrays(b)
    nexts = _tensors.pointers(n)
    buf = ctypes.c_void_p()
    size = ctypes.c_uint64()
    st = _lib.DeltaStats()
    err = _lib.Error()
    rc = _L.wspy_delta_encode(a.n, a.names, a.dtypes, a.ranks, a.shapes, a.datas, nexts, enc, base_step,
                              step, block_log2, threads, flags, ctypes.byref(buf), ctypes.byref(size),
                              ctypes.byref(st), ctypes.byref(err))
    _check(rc, err)
    try:
        data = ctypes.string_at(buf.value, size.value) if size.value else b""
    finally:
        _L.wspy_free(buf)
    if out is not None:
        with open(out, "wb") as f:
            f.write(data)
    return data


def apply(delta, tensors, threads=0, verify=True):
    """Applies a delta (a path or bytes) to `tensors` in place (CPU,
    contiguous, writable). Everything is checked first (digests included
    unless verify=False): on failure nothing was written. Returns DeltaStats."""
    threads = _int("threads", threads, 0, 1024)
    flags = 0 if _bool("verify", verify) else (_DELTA_SKIP_BASE_DIGEST | _DELTA_SKIP_RESULT_DIGEST)
    ts = _tensors.describe_all(tensors, writable=True)
    a = _tensors.Arrays(ts)
    ptr, size, path, keep = _input(delta)
    st = _lib.DeltaStats()
    err = _lib.Error()
    rc = _L.wspy_delta_apply(ptr, size, path, a.n, a.names, a.dtypes, a.ranks, a.shapes, a.datas, threads,
                             flags, ctypes.byref(st), ctypes.byref(err))
    del keep
    _check(rc, err)
    return _delta_stats(st)


def inspect(x):
    """What a safetensors file (a path or bytes) holds: FileInfo with its
    metadata and tensors, and DeltaStats when it is a delta."""
    ptr, size, path, keep = _input(x)
    h = ctypes.c_void_p()
    err = _lib.Error()
    rc = _L.wspy_st_open(ptr, size, path, ctypes.byref(h), ctypes.byref(err))
    _check(rc, err)
    try:
        base = int(_L.wspy_st_data_offset(h))
        tensors = []
        name, nlen = ctypes.c_void_p(), ctypes.c_uint64()
        dt, rank = ctypes.c_int32(), ctypes.c_uint32()
        shape = ctypes.POINTER(ctypes.c_uint64)()
        beg, end = ctypes.c_uint64(), ctypes.c_uint64()
        for i in range(_L.wspy_st_count(h)):
            if _L.wspy_st_tensor(h, i, ctypes.byref(name), ctypes.byref(nlen), ctypes.byref(dt),
                                 ctypes.byref(rank), ctypes.byref(shape), ctypes.byref(beg), ctypes.byref(end)):
                raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "tensor %d" % i)
            tensors.append(TensorInfo(ctypes.string_at(name.value, nlen.value).decode("utf-8", "replace"),
                                      _tensors.DTYPE_NAMES.get(dt.value, "INVALID"),
                                      tuple(int(shape[d]) for d in range(rank.value)),
                                      base + int(beg.value), int(end.value - beg.value)))
        meta = None
        nm = _L.wspy_st_meta_count(h)
        if nm:
            meta = {}
            k, kl, v, vl = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p(), ctypes.c_uint64()
            for i in range(nm):
                if _L.wspy_st_meta(h, i, ctypes.byref(k), ctypes.byref(kl), ctypes.byref(v), ctypes.byref(vl)):
                    raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "metadata %d" % i)
                meta[ctypes.string_at(k.value, kl.value).decode("utf-8", "replace")] = \
                    ctypes.string_at(v.value, vl.value).decode("utf-8", "replace") if vl.value else ""
    finally:
        _L.wspy_st_close(h)
    fsize = os.path.getsize(path) if path else size
    info = FileInfo(int(fsize), meta, tensors)
    st = _lib.DeltaStats()
    rc = _L.wspy_delta_info(ptr, size, path, ctypes.byref(st), ctypes.byref(err))
    if rc:
        if not err.code:
            err.code = rc
        info.delta_error = _error_from(err)
    else:
        info.delta = _delta_stats(st)
    del keep
    return info


def head(store, prefix=None, insecure=False):
    """The HEAD of a store's chain, read now: Head(step, state, anchor_step).
    state is the state digest HEAD records for step: a resumed trainer or an
    engine compares it with wsync.state_digest(model.state_dict()).
    WsyncNoStoreError when the store does not exist, WsyncNotFoundError when
    nothing was published yet."""
    spec = _store(store)
    pfx = _str("prefix", prefix)
    sflags = _STORE_MUST_EXIST | (_STORE_INSECURE if _bool("insecure", insecure) else 0)
    h = _lib.Head()
    err = _lib.Error()
    rc = _L.wspy_chain_head(spec, sflags, pfx, ctypes.byref(h), ctypes.byref(err))
    _check(rc, err)
    return _head(h)


def state_digest(tensors, threads=0):
    """wsync's state digest of a model (what HEAD records for each step):
    equal digests mean bit-identical tensors."""
    threads = _int("threads", threads, 0, 1024)
    ts = _tensors.describe_all(tensors, writable=False)
    a = _tensors.Arrays(ts)
    out = ctypes.c_uint64()
    err = _lib.Error()
    rc = _L.wspy_state_digest(a.n, a.names, a.dtypes, a.ranks, a.shapes, a.datas, threads, ctypes.byref(out),
                              ctypes.byref(err))
    _check(rc, err)
    return int(out.value)


def digest(x):
    """wsync64 of one tensor's (or buffer's) bytes."""
    t = _tensors.describe("x", x, writable=False)
    return int(_L.wspy_digest(t.ptr, t.nbytes))


def changed_positions(a, b, out):
    """wsync's SIMD bitwise diff: writes the ascending indices of the
    elements where tensors a and b (same dtype and shape, 1, 2, 4 or 8-byte
    elements) differ into `out` (a writable buffer of at least a's element
    count uint32s) and returns how many."""
    x = _tensors.describe("a", a, writable=False)
    y = _tensors.describe("b", b, writable=False)
    if x.dtype != y.dtype or x.shape != y.shape:
        raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "a is %s %s, b is %s %s"
                         % (x.dtype, list(x.shape), y.dtype, list(y.shape)))
    width = _tensors.BITS[x.dtype] // 8
    if width not in (1, 2, 4, 8) or _tensors.BITS[x.dtype] % 8:
        raise WsyncError("WSYNC_ERR_UNSUPPORTED", "elements of %s" % x.dtype)
    n = x.nbytes // width
    o = _tensors.describe("out", out, writable=True)
    if o.nbytes < 4 * n:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "out holds %d bytes, %d needed" % (o.nbytes, 4 * n))
    if n >= (1 << 32):
        raise WsyncError("WSYNC_ERR_LIMIT", "%d elements (at most 2^32)" % n)
    r = _L.wspy_diff_positions(x.ptr, y.ptr, n, width, o.ptr)
    if r == _U64_MAX:
        raise WsyncError("WSYNC_ERR_INVALID_ARGUMENT", "wsync_diff refused its arguments")
    return int(r)
