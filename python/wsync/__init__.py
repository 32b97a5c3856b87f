"""wsync for Python: keep inference weights in step with an RL trainer, bit-exact.

A binding over the C library (wsync.h, wsync_http.h) through the standard
library's ctypes and a small flat C API of its own (python/wsync/_capi.c,
built into the package as wsync/libwsync.so by `pip install ./python`, or as
build/libwsync.so by `make python` for PYTHONPATH=python; WSYNC_LIB
overrides where it is looked for). numpy and torch are optional: tensors are
read through long-stable calls only (data_ptr, contiguous, is_contiguous,
numel, element_size, device, dtype, shape), so Debian's PyTorch 1.13 and
current 2.x both work.

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

Signed chains: Publisher(..., sign_key=...) signs every HEAD (Ed25519; a
key file from wsync.keygen(name), or key bytes), Subscriber(...,
verify_key=...) refuses what that key did not sign (WsyncSignatureError).

Errors: every failure raises WsyncError with .code (the result code's name,
"WSYNC_ERR_CORRUPT"), .tensor, .offset and .message; WsyncNoStoreError (the
store does not exist yet) and WsyncNotFoundError (nothing published yet: a
serving loop waits on both), WsyncLayoutError (the model does not match the
chain: stop), WsyncStaleHeadError (HEAD is older than the step held),
WsyncSignatureError (a signed chain did not verify) and WsyncValueError (a
wrong value, also a ValueError) are its subclasses for those codes;
WsyncTypeError (also a TypeError) is raised for a wrong type. Options are
keyword-only. Bad input (a malformed delta, a wrong store, a tensor of the
wrong shape or dtype, a non-contiguous target, a target whose memory moved
or was freed after the Subscriber was built, a closed object, a wrong type)
raises; it never crashes the interpreter.

Threads: the GIL is released during every C call. Two threads may use two
objects at once. One object's calls are serialised (ready(), step and
status() may be called from any thread while the engine's thread syncs).
"""
import ctypes
import os
import threading
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from ._errors import (WsyncError, WsyncTypeError, WsyncValueError, WsyncUnsupportedError, WsyncNoStoreError,
                      WsyncNotFoundError, WsyncEmptyChainError, WsyncLayoutError, WsyncStaleHeadError,
                      WsyncSignatureError)
from . import _errors, _lib, _mirror, _tensors, _engine
from ._engine import EngineLayout, RULES_QWEN3, RULES_LLAMA

__all__ = ["Publisher", "Subscriber", "WsyncError", "WsyncTypeError", "WsyncValueError", "WsyncUnsupportedError",
           "WsyncNoStoreError", "WsyncNotFoundError", "WsyncEmptyChainError", "WsyncLayoutError",
           "WsyncStaleHeadError", "WsyncSignatureError",
           "PublishStats", "SyncStats", "MirrorStats", "DeltaStats", "PrefetchStatus", "FileInfo", "TensorInfo",
           "Head", "head", "diff", "apply", "inspect", "state_digest", "digest", "changed_positions",
           "keygen", "public_key", "has_http", "library_version", "ENCODINGS", "STEP_MAX",
           "EngineLayout", "EngineStats", "RULES_QWEN3", "RULES_LLAMA",
           "DirFollower", "DirPublishStats", "DirSyncStats", "pull_dir", "DIR_INDEX", "DIR_STEP_FILE"]

_L = _lib.load()

# The C types' ranges (the shim's parameters) ...
_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1


def _k(name):
    return _lib.constant(_L, name)


# ... and the library's flags and limits, read from it (never copied here).
STEP_MAX = _k("WSYNC_STEP_MAX")
_STEP_LATEST = _k("WSYNC_STEP_LATEST")
ENCODINGS = tuple(_L.wspy_encoding_name(e).decode()
                  for e in range(_k("WSYNC_ENCODING_PACKED"), _k("WSYNC_ENCODING_TRL_V3") + 1))
_CHAIN_VERIFY_STATE = _k("WSYNC_CHAIN_VERIFY_STATE")
_CHAIN_KEEP_F32 = _k("WSYNC_CHAIN_KEEP_F32")
_CHAIN_NEW_CHAIN = _k("WSYNC_CHAIN_NEW_CHAIN")
_CHAIN_PARTIAL = _k("WSYNC_CHAIN_PARTIAL")
_CHAIN_FOLLOW_RESTART = _k("WSYNC_CHAIN_FOLLOW_RESTART")
_DELTA_SKIP_BASE_DIGEST = _k("WSYNC_DELTA_SKIP_BASE_DIGEST")
_DELTA_SKIP_RESULT_DIGEST = _k("WSYNC_DELTA_SKIP_RESULT_DIGEST")
_DELTA_RANGE_CODER = _k("WSYNC_DELTA_RANGE_CODER")
_DELTA_MAX_BLOCK_LOG2 = _k("WSYNC_DELTA_MAX_BLOCK_LOG2")
_STORE_MUST_EXIST = _k("WSPY_STORE_MUST_EXIST")
_STORE_NO_FSYNC = _k("WSPY_STORE_NO_FSYNC")
_STORE_INSECURE = _k("WSPY_STORE_INSECURE")
_SEED_SIZE = _k("WSYNC_ED25519_SEED_SIZE")
_PUBLIC_SIZE = _k("WSYNC_ED25519_PUBLIC_SIZE")
_SECRET_SIZE = _k("WSYNC_ED25519_SECRET_SIZE")
_CHAIN_ID_SIZE = _k("WSYNC_CHAIN_ID_SIZE")

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


@dataclass
class EngineStats(MirrorStats):
    """A take through an EngineLayout: the mirror's take (positions, bytes:
    the checkpoint's changes handed to the map) and this rank's share."""
    params: int = 0            # engine parameters that received changes
    param_positions: int = 0   # positions handed to them (this rank's share)
    param_bytes: int = 0       # param_positions * (8 + width)
    calls: int = 0             # calls: one per parameter that received changes (on_changes', or the binding's)
    uploads: int = 0           # host-to-device copies of the batched scatter (parameters on a device): 1 a take
    #                            (more when a take's changes pass wsync._mirror.BATCH_BYTES, as a first, whole one's)
    scatters: int = 0          # index_copy_ calls of the batched scatter: one per such parameter that changed
    staged: int = 0            # bytes uploaded: positions (8 bytes) and values (padded to 8 bytes) of those


def _engine_open(mptr, targets, layout):
    """wspy_engine_open for the engine's targets through the layout."""
    names, dtypes, ranks, shapes, dims, pads, npcs, ptn, pst, plen = [], [], [], [], [], [], [], [], [], []
    datas = []
    for t in targets:
        datas.append(_engine.host_address(t))       # CPU parameters: written in C
        names.append(t.t.bname)
        dtypes.append(t.t.code)
        ranks.append(len(t.t.shape))
        shapes.extend(t.t.shape)
        dim, pieces, pad = layout.entry(t.t.name, t.t.shape) or (0, [], 0)
        dims.append(dim)
        pads.append(pad)
        npcs.append(len(pieces))
        for (cn, start, length) in pieces:
            ptn.append(cn.encode("utf-8"))
            pst.append(start)
            plen.append(length)
    unknown = sorted(set(layout.params) - set(layout.ties) - set(t.t.name for t in targets))   # a tie: optional
    if unknown:
        raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "layout: parameter %r is not among the engine's tensors"
                               % unknown[0], tensor=unknown[0])

    def arr(ct, xs):
        return (ct * max(len(xs), 1))(*xs)
    n = len(targets)
    out = ctypes.c_void_p()
    err = _lib.Error()
    rc = _L.wspy_engine_open(mptr, n, arr(ctypes.c_char_p, names), arr(ctypes.c_int32, dtypes),
                             arr(ctypes.c_uint32, ranks), arr(ctypes.c_uint64, shapes), arr(ctypes.c_uint32, dims),
                             arr(ctypes.c_uint64, pads), arr(ctypes.c_uint64, npcs), arr(ctypes.c_char_p, ptn),
                             arr(ctypes.c_uint64, pst), arr(ctypes.c_uint64, plen), arr(ctypes.c_void_p, datas),
                             1 if layout.shard else 0,
                             ctypes.byref(out), ctypes.byref(err))
    _check(rc, err)
    return out.value


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
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s %d out of range [%d, %d]" % (name, v, lo, hi))
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
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s holds a NUL character" % name)
    return v.encode("utf-8")


def _encoding(v):
    if isinstance(v, str) and v in ENCODINGS:
        return _L.wspy_encoding_from_name(v.encode())
    raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "encoding %r: one of %s" % (v, ", ".join(ENCODINGS)))


def _store(store):
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    if isinstance(store, bytes):
        store = os.fsdecode(store)
    if not isinstance(store, str):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "store must be a path or a URL, not %s"
                             % type(store).__name__)
    if not store:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "empty store")
    if "\x00" in store:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "store holds a NUL character")
    return os.fsencode(store) if "://" not in store else store.encode("utf-8")


def _path(name, v):
    """A path given as str or os.PathLike, for C."""
    p = os.fspath(v)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s: an empty path" % name)
    if "\x00" in p:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s: the path holds a NUL character" % name)
    return os.fsencode(p)


def _key_bytes(name, v, what):
    """A key given as bytes-like, copied into a ctypes buffer (wiped after use
    by the caller) and its length."""
    try:
        mv = memoryview(v)
    except TypeError:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s must be %s, not %s" % (name, what, type(v).__name__))
    if not mv.c_contiguous:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s: the buffer is not contiguous" % name)
    n = mv.nbytes
    buf = (ctypes.c_uint8 * max(n, 1)).from_buffer_copy(mv.cast("B")) if n else (ctypes.c_uint8 * 1)()
    return buf, n


def _sign_key(v):
    """sign_key as the 64-byte secret key C takes (a ctypes buffer; wipe it
    after the call that copies it), or None. v: a 64-byte secret key, a
    32-byte seed, or the path of a secret key file (NAME.key, keygen's)."""
    if v is None:
        return None
    sec = (ctypes.c_uint8 * _SECRET_SIZE)()
    err = _lib.Error()
    if isinstance(v, (str, os.PathLike)):
        rc = _L.wspy_key_read_secret(_path("sign_key", v), sec, ctypes.byref(err))
    else:
        buf, n = _key_bytes("sign_key", v, "bytes (a %d-byte secret key or a %d-byte seed) or a secret key "
                            "file's path" % (_SECRET_SIZE, _SEED_SIZE))
        rc = _L.wspy_sign_key(buf, n, sec, ctypes.byref(err))
        ctypes.memset(buf, 0, ctypes.sizeof(buf))
    if rc:
        ctypes.memset(sec, 0, ctypes.sizeof(sec))
    _check(rc, err)
    return sec


def _verify_key(v):
    """verify_key as the 32-byte public key C takes (a ctypes buffer), or
    None. v: 32 bytes, or the path of a public key file (NAME.pub)."""
    if v is None:
        return None
    pub = (ctypes.c_uint8 * _PUBLIC_SIZE)()
    if isinstance(v, (str, os.PathLike)):
        err = _lib.Error()
        _check(_L.wspy_key_read_public(_path("verify_key", v), pub, ctypes.byref(err)), err)
        return pub
    buf, n = _key_bytes("verify_key", v, "bytes (the %d-byte public key) or a public key file's path"
                        % _PUBLIC_SIZE)
    if n != _PUBLIC_SIZE:
        ctypes.memset(buf, 0, ctypes.sizeof(buf))
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "verify_key: %d bytes; the %d-byte public key "
                              "(wsync.public_key(sign_key) gives it%s)" % (n, _PUBLIC_SIZE,
                              "; never hand a follower the secret key" if n == _SECRET_SIZE else ""))
    ctypes.memmove(pub, buf, _PUBLIC_SIZE)
    return pub


def keygen(name):
    """Makes an Ed25519 key pair for a signed chain and writes NAME.key (the
    secret key, mode 0600: the trainer's sign_key) and NAME.pub (the public
    key: every follower's verify_key); an existing file is never replaced.
    Returns the two paths, (NAME.key, NAME.pub)."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if not isinstance(name, str):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "keygen: name must be a str or a path, not %s"
                             % type(name).__name__)
    err = _lib.Error()
    _check(_L.wspy_keygen(_path("keygen", name), ctypes.byref(err)), err)
    return name + ".key", name + ".pub"


def public_key(sign_key):
    """The 32-byte public key (a follower's verify_key) of a sign key: a
    64-byte secret key, a 32-byte seed, or a secret key file's path."""
    sec = _sign_key(sign_key)
    if sec is None:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "public_key: no key given")
    pub = (ctypes.c_uint8 * _PUBLIC_SIZE)()
    _L.wspy_public_key(sec, pub)
    ctypes.memset(sec, 0, ctypes.sizeof(sec))
    return bytes(pub)


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
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s is closed" % self.what)
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


class _Closeable(object):
    """The lifecycle every object over a C handle shares: close() (waits for
    the calls in flight, then frees; later calls raise WsyncValueError; a
    second close does nothing), `with`, `closed`, and __del__ closing what
    was not closed. Subclasses set self._h (a _Handle) and _what, and may
    override _before_close(ptr), run after new calls are refused and before
    waiting for those in flight (a subscriber stops its background there)."""

    _h = None               # (a class attribute: __del__ after a failed __init__ finds it)
    _what = "object"

    def _handle(self):
        if self._h is None:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s is closed" % self._what)
        return self._h

    def _before_close(self, ptr):
        pass

    def close(self):
        """Frees the C side, after the calls in flight return; later calls
        raise WsyncValueError. Closing twice is fine."""
        if self._h is not None:
            self._h.close(before=self._before_close)

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


# ---- publisher ----

class Publisher(_Closeable):
    """Publishes a trainer's tensors into a store, one step at a time.

    Options (keyword-only): prefix (objects under "<prefix>/"), encoding
    ("packed", "packed-max", "trl-v1", "trl-v3"), anchor_every (0: 20),
    anchor_fraction (0: 0.5), retain (0: 2 * anchor_every), threads,
    keep_f32 (publish F32 as F32 instead of BF16), new_chain (start a new
    chain over a damaged or foreign one), fsync (directory store: False
    skips fsync, for tests), insecure (https: skip certificate checks, for
    tests), sign_key (sign every HEAD with this Ed25519 key: a secret key
    file's path, NAME.key from wsync.keygen(NAME), or its 64 bytes, or a
    32-byte seed; followers verify with the public key).

    A publisher with sign_key continues only a chain signed by that key
    (an unsigned one, or another key's, raises WsyncSignatureError), and
    one without refuses a signed chain; new_chain=True starts a new chain
    there in either case.
    """

    _what = "publisher"

    def __init__(self, store, *, prefix=None, encoding="packed", anchor_every=0, anchor_fraction=0.0, retain=0,
                 threads=0, keep_f32=False, new_chain=False, fsync=True, insecure=False, sign_key=None):
        spec = _store(store)
        prefix = _str("prefix", prefix)
        enc = _encoding(encoding)
        every = _int("anchor_every", anchor_every, 0, _U32_MAX)
        frac = anchor_fraction
        if isinstance(frac, bool) or not isinstance(frac, (int, float)):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "anchor_fraction must be a number")
        frac = float(frac)
        if not (0.0 <= frac <= 1e9):
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "anchor_fraction %r out of range" % frac)
        retain = _int("retain", retain, 0, _U32_MAX)
        threads = _int("threads", threads, 0, 1024)
        flags = (_CHAIN_KEEP_F32 if _bool("keep_f32", keep_f32) else 0) | \
                (_CHAIN_NEW_CHAIN if _bool("new_chain", new_chain) else 0)
        sflags = (0 if _bool("fsync", fsync) else _STORE_NO_FSYNC) | \
                 (_STORE_INSECURE if _bool("insecure", insecure) else 0)
        sec = _sign_key(sign_key)
        err = _lib.Error()
        out = ctypes.c_void_p()
        try:
            rc = _L.wspy_publisher_open(spec, sflags, prefix, enc, every, frac, retain, threads, flags, sec,
                                        ctypes.byref(out), ctypes.byref(err))
        finally:
            if sec is not None:         # the library keeps its own copy
                ctypes.memset(sec, 0, ctypes.sizeof(sec))
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

    def publish_dir(self, step, path, include=None):
        """Publishes a checkpoint directory (what save_pretrained just wrote:
        model.safetensors, or the shards model.safetensors.index.json names,
        with config.json, generation_config.json and the tokenizer's files) as
        `step` (None: the step its shards' __metadata__ "step" claim). An anchor
        keeps the directory's layout (one object per shard and carried file,
        each shard's __metadata__ kept); other steps are deltas over all the
        tensors. include: fnmatch patterns (or one) of other file names to
        carry, e.g. ["*.txt"]; a pattern that matches no file warns, and
        wsync-step.json (each pulled version's own) is never published.
        Nothing is published from a directory that does not check (a missing
        shard, an index that does not name exactly the shards' tensors, a
        weight_map entry leaving the directory): WsyncError naming the file and
        the tensor or key. Returns DirPublishStats."""
        step = _STEP_LATEST if step is None else _int("step", step, 0, STEP_MAX)
        d = _path("path", path)
        pats = _patterns(include)
        arr = (ctypes.c_char_p * max(len(pats), 1))(*[p.encode("utf-8") for p in pats])
        unmatched = (ctypes.c_uint8 * max(len(pats), 1))()
        info = _lib.DirInfo()
        st = _lib.PublishStats()
        err = _lib.Error()
        with _Guard(self._handle(), self._lock) as ptr:
            rc = _L.wspy_publish_dir(ptr, step, d, len(pats), arr, unmatched, ctypes.byref(info), ctypes.byref(st),
                                     ctypes.byref(err))
        if info.shards or info.files:
            import warnings
            for k, p in enumerate(pats):
                if unmatched[k]:
                    warnings.warn("publish_dir: include pattern %r matches no file in %s" % (p, os.fsdecode(d)),
                                  stacklevel=2)
            if info.skipped_step_file:
                warnings.warn("publish_dir: %s/%s is not published: the name is wsync's own (each pulled version "
                              "holds one saying its step)" % (os.fsdecode(d), DIR_STEP_FILE), stacklevel=2)
        _check(rc, err)
        base = _pub_stats(st)
        return DirPublishStats(*[getattr(base, f) for f in base.__dataclass_fields__],
                               shards=int(info.shards), tensors=int(info.tensors), files=int(info.files),
                               tensor_bytes=int(info.bytes))

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


# ---- subscriber ----

class Subscriber(_Closeable):
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

    Options (keyword-only): prefix, threads, verify_state (digest the whole
    model after every sync; a mirror always does), insecure (https, tests), mirror
    (None: when a tensor is not on the CPU; True; False: never, a non-CPU
    tensor raises WsyncUnsupportedError), chunk (mirror: positions per
    take callback, 0: 65536), interval_ms (the background's HEAD poll, 100;
    start(interval_ms) overrides it), strict (True: the targets must be the
    chain's tensors exactly, else WsyncLayoutError before any byte moves;
    False: a subset is followed), follow_restart (False: a HEAD below the
    step held raises WsyncStaleHeadError and the targets stay; True: it is
    taken as a restarted chain and followed), verify_key (a signed chain:
    the publisher's Ed25519 public key, a public key file's path, NAME.pub
    from wsync.keygen(NAME), or its 32 bytes).

    With verify_key, HEAD must be signed by that key and every object must
    match the hash HEAD gives it: an unsigned chain, another key's, a HEAD
    whose bytes changed after signing, and (once a HEAD passed) another
    chain signed by the same key raise WsyncSignatureError, the tensors
    untouched (sub.chain_id, sub.set_chain_id(None) to follow a new one).

    The store may not exist yet: the Subscriber opens anyway (creating
    nothing), sync() raises WsyncNoStoreError until it does, and start()'s
    background keeps polling.

    layout (a wsync.EngineLayout): tensors are the engine's own parameters
    (fused, tensor-parallel shards, padded vocabularies), a mirror always.
    The host copy stays under the checkpoint's names, laid out from the
    chain's newest anchor (which must exist, in one object); the layout is
    checked against it before any byte moves (WsyncLayoutError naming the
    parameter and the piece). Each take hands each parameter only its share
    of the changes, in its own flat index space (take(on_changes=fn) for
    engines that scatter themselves). A parameter tied to another
    (layout.tie: an lm_head tied to the embedding) gets the same changes;
    absent from tensors (one tensor under two names), it is left out.
    set_step is refused (the parameters are not the checkpoint).
    """

    _what = "subscriber"

    def __init__(self, store, tensors, *, prefix=None, threads=0, verify_state=False, insecure=False, mirror=None,
                 chunk=0, interval_ms=100, strict=True, follow_restart=False, verify_key=None, layout=None):
        spec = _store(store)
        prefix = _str("prefix", prefix)
        threads = _int("threads", threads, 0, 1024)
        flags = (_CHAIN_VERIFY_STATE if _bool("verify_state", verify_state) else 0) | \
                (0 if _bool("strict", strict) else _CHAIN_PARTIAL) | \
                (_CHAIN_FOLLOW_RESTART if _bool("follow_restart", follow_restart) else 0)
        sflags = _STORE_MUST_EXIST | (_STORE_INSECURE if _bool("insecure", insecure) else 0)
        if mirror is not None:
            mirror = _bool("mirror", mirror)
        chunk = _int("chunk", chunk, 0, 1 << 26)
        interval = _int("interval_ms", interval_ms, 1, _U32_MAX)
        pub = _verify_key(verify_key)
        tensors = _tensors.pairs(tensors)     # an iterator (named_parameters()) is read once, here
        if not tensors:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "Subscriber: no tensors given (an empty dict, or "
                                  "an iterator already consumed): it would follow nothing")
        if layout is not None:
            if not isinstance(layout, EngineLayout):
                raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "Subscriber: layout must be a wsync.EngineLayout")
            if mirror is False:
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "Subscriber: a layout needs the mirror")
            mirror = True
        if mirror is None:
            mirror = any(_tensors.is_device_tensor(v) for _, v in tensors)
        self.mirror = mirror
        self.layout = layout
        self._interval = interval
        self._running = None              # the interval the background was started with
        self._lock = threading.Lock()     # the engine's calls, one at a time
        err = _lib.Error()
        out = ctypes.c_void_p()
        self._engine = None
        if mirror and layout is not None:
            targets = _tensors.describe_targets(tensors)
            ts = [t.t for t in targets]
            a = _tensors.Arrays([])     # the host copy under the checkpoint's names, from the newest anchor
            rc = _L.wspy_mirror_open(spec, sflags, prefix, threads, flags, pub, interval, chunk, 0, a.names,
                                     a.dtypes, a.ranks, a.shapes, ctypes.byref(out), ctypes.byref(err))
            _check(rc, err)
            try:
                self._engine = _engine_open(out.value, targets, layout)
            except BaseException:
                _L.wspy_mirror_close(out.value)
                raise
            self._sink = _engine.EngineSink(targets, _mirror.Sink(targets, chunk or 65536))
            self._targets = targets
            eng = self._engine

            def close(ptr):
                _L.wspy_engine_close(eng)
                _L.wspy_mirror_close(ptr)
            stop, what = _L.wspy_mirror_stop, "subscriber"
        elif mirror:
            targets = _tensors.describe_targets(tensors)
            ts = [t.t for t in targets]
            a = _tensors.Arrays(ts)
            rc = _L.wspy_mirror_open(spec, sflags, prefix, threads, flags, pub, interval, chunk, a.n, a.names,
                                     a.dtypes, a.ranks, a.shapes, ctypes.byref(out), ctypes.byref(err))
            _check(rc, err)
            self._sink = _mirror.Sink(targets, chunk or 65536)
            self._targets = targets
            close, stop, what = _L.wspy_mirror_close, _L.wspy_mirror_stop, "subscriber"
        else:
            ts = _tensors.describe_all(tensors, writable=True)
            a = _tensors.Arrays(ts)
            rc = _L.wspy_subscriber_open(spec, sflags, prefix, threads, flags, pub, a.n, a.names, a.dtypes,
                                         a.ranks, a.shapes, a.datas, ctypes.byref(out), ctypes.byref(err))
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

    def _before_close(self, ptr):
        self._stop(ptr)                   # the background, waited on before the handle is freed

    # -- the mirror's take --

    def _take(self, ptr, on_changes=None):
        """One take into the engine's tensors (under self._lock): MirrorStats;
        raises what the callback raised, else the take's error."""
        _tensors.check_unmoved(self._ts)
        if self._engine is not None:
            st = _lib.EngineStats()
            err = _lib.Error()
            k = self._sink
            k.on_changes = on_changes
            staged, stage_fn, buf, cap = k.take_args() if on_changes is None else (None, k.stage_fn, None, 0)
            try:
                rc = _L.wspy_engine_take(self._engine, k.fn, 1 if on_changes is None else 0, None, staged, stage_fn,
                                         buf, cap, ctypes.byref(st), ctypes.byref(err))
            finally:
                k.on_changes = None
            exc = k.end_take()
            if exc is not None:
                raise exc
            _check(rc, err)
            m = _mirror_stats(st.mirror)
            return EngineStats(**dict(m.__dict__, params=int(st.params), param_positions=int(st.positions),
                                      param_bytes=int(st.bytes), calls=int(st.calls), uploads=k.uploads,
                                      scatters=k.scatters, staged=k.staged))
        if on_changes is not None:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "take(on_changes=...): only with a layout "
                                  "(Subscriber(..., layout=wsync.EngineLayout()))")
        st = _lib.MirrorStats()
        err = _lib.Error()
        rc = _L.wspy_mirror_take(ptr, self._sink.fn, None, ctypes.byref(st), ctypes.byref(err))
        exc = self._sink.end_take()
        if exc is not None:
            raise exc
        _check(rc, err)
        return _mirror_stats(st)

    def take(self, on_changes=None):
        """(mirror) Hands the engine's tensors every change the mirror
        applied since the last take, merged, now, in this thread: the
        engine's pause. Nothing when the mirror holds no newer verified step.
        Returns MirrorStats (EngineStats with a layout). An exception raised
        while writing a tensor is raised here; the engine then has no step
        until the next take, which hands again everything not handed.

        With a layout: each parameter gets its share of the checkpoint's
        changes, translated into its flat index space. on_changes(param_name,
        positions, values): positions int32 where the parameter's elements
        fit (else int64), values in the parameter's dtype (torch tensors for
        torch parameters, numpy arrays for numpy ones), one call per
        parameter that changed, positions ascending; the engine scatters
        them itself. Without it the binding scatters: CPU parameters in C,
        those on a device batched (wsync writes every changed parameter's
        positions and values into one pinned host buffer, one upload, an
        index_copy_ per parameter: EngineStats.uploads, scatters, staged)."""
        self._need_mirror("take")
        with _Guard(self._handle(), self._lock) as ptr:
            return self._take(ptr, on_changes)

    def _need_mirror(self, what):
        if not self.mirror:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "%s: only a mirror subscriber (mirror=True)" % what)

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
        s = _STEP_LATEST if step is None else _int("step", step, 0, STEP_MAX)
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
            if self.mirror and self._engine is not None:
                raise WsyncUnsupportedError("WSYNC_ERR_UNSUPPORTED", "set_step: the engine's parameters are a "
                                            "layout's fused shards, not the checkpoint the mirror holds; take "
                                            "from the chain instead")
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
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "the mirror's copy of tensor %d" % i)
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

    @property
    def chain_id(self):
        """(verify_key) The identity of the signed chain followed (16 bytes):
        the first whose HEAD passed verification; None before one did, or
        without verify_key. A follower restarted that knows its chain pins it
        with set_chain_id(id)."""
        out = (ctypes.c_uint8 * _CHAIN_ID_SIZE)()
        with _Guard(self._handle()) as ptr:
            fn = _L.wspy_mirror_chain_id if self.mirror else _L.wspy_subscriber_chain_id
            return bytes(out) if fn(ptr, out) else None

    def set_chain_id(self, chain_id):
        """(verify_key) Pins the signed chain to follow (16 bytes, a chain_id
        read earlier), or with None forgets it: the next HEAD that passes is
        followed (a chain the same trainer started anew with new_chain=True,
        which is otherwise refused as another chain). The tensors keep their
        step."""
        buf = None
        if chain_id is not None:
            buf, n = _key_bytes("chain_id", chain_id, "bytes (a %d-byte chain_id) or None" % _CHAIN_ID_SIZE)
            if n != _CHAIN_ID_SIZE:
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "chain_id: %d bytes, not %d"
                                      % (n, _CHAIN_ID_SIZE))
        with _Guard(self._handle(), self._lock) as ptr:
            fn = _L.wspy_mirror_set_chain_id if self.mirror else _L.wspy_subscriber_set_chain_id
            fn(ptr, buf)


# ---- model directories (wsync.h >>dir) ----

DIR_INDEX = _L.wspy_dir_name(0).decode()       # "model.safetensors.index.json"
DIR_STEP_FILE = _L.wspy_dir_name(1).decode()   # "wsync-step.json": each pulled version's own


@dataclass
class DirPublishStats(PublishStats):
    """Publisher.publish_dir's: the publish (PublishStats), then what the
    directory held."""
    shards: int = 0            # safetensors files
    tensors: int = 0
    files: int = 0             # carried files (config, tokenizer, the index, include's)
    tensor_bytes: int = 0


@dataclass
class DirSyncStats:
    """One sync of a model directory (DirFollower.sync, wsync.pull_dir)."""
    from_step: Optional[int]   # the version PATH linked to before (None: none)
    step: Optional[int]        # the version PATH links to now
    switched: bool             # a new version was written and PATH switched to it
    version: Optional[str]     # the version's directory (beside PATH), None: none
    head_step: int
    verified: bool
    anchors: int
    deltas: int
    rejected: int
    bytes_fetched: int
    unchecked: bool            # switched with no HEAD to check the state digest against
    relayout_step: Optional[int]   # the chain's tensors changed: rebuilt from this anchor
    seconds: float             # the sync, writing included, timed in C
    write_seconds: float       # of which writing the version


def _dir_stats(s, path):
    v = s.version.decode("utf-8", "replace")
    return DirSyncStats(int(s.from_step) if s.had_step else None, int(s.step) if s.has_step else None,
                        bool(s.switched), os.path.join(os.path.dirname(os.path.abspath(path)), v) if v else None,
                        int(s.head_step), bool(s.verified), int(s.anchors), int(s.deltas), int(s.rejected),
                        int(s.bytes_fetched), bool(s.unchecked), int(s.relayout_step) if s.relayout else None,
                        s.seconds, s.write_seconds)


def _patterns(include):
    """include as a list of str: None, one pattern, or an iterable of them."""
    if include is None:
        return []
    if isinstance(include, (str, bytes)):
        include = [include]
    try:
        pats = list(include)
    except TypeError:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "include must be a pattern (str) or a list of them, "
                             "not %s" % type(include).__name__)
    for p in pats:
        if not isinstance(p, str):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "include: a pattern must be a str, not %s"
                                 % type(p).__name__)
        if not p or "\x00" in p or "/" in p:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "include: pattern %r: a file name pattern "
                                  "(fnmatch, no '/')" % p)
    return pats


def _dir_options(store, prefix, threads, insecure, verify_key, follow_restart, new_chain):
    spec = _store(store)
    pfx = _str("prefix", prefix)
    threads = _int("threads", threads, 0, 1024)
    sflags = _STORE_MUST_EXIST | (_STORE_INSECURE if _bool("insecure", insecure) else 0)
    flags = (_CHAIN_FOLLOW_RESTART if _bool("follow_restart", follow_restart) else 0) | \
            (_CHAIN_NEW_CHAIN if _bool("new_chain", new_chain) else 0)
    return spec, pfx, threads, sflags, flags, _verify_key(verify_key)


def pull_dir(store, path, step=None, *, prefix=None, threads=0, insecure=False, verify_key=None,
             follow_restart=False, new_chain=False):
    """One sync of a model directory: brings `path` to `step` (None: HEAD's)
    of a chain a Publisher.publish_dir (or `wsync publish DIR`) wrote, and
    returns the step it holds. `path` is a symbolic link wsync keeps (or
    nothing yet): each step is written complete beside it
    (PATH.step_NNNNNN: the shards byte for byte as the trainer wrote them,
    its config and tokenizer files, and wsync-step.json), checked against
    HEAD's state digest, then the link is switched by one rename; the
    previous version stays for readers still in it, older ones are
    removed. Runs on one path, in any process, take turns (a lock file
    beside it). A reader resolves the link once (os.path.realpath) and
    reads one whole step. On failure the link is as it was. A directory of
    the caller's at `path` is refused (WsyncError, code
    WSYNC_ERR_UNSUPPORTED), untouched; a step not in the chain is
    WSYNC_ERR_NO_PATH.
    Options as DirFollower's."""
    spec, pfx, threads, sflags, flags, vk = _dir_options(store, prefix, threads, insecure, verify_key,
                                                         follow_restart, new_chain)
    p = _path("path", path)
    s = _STEP_LATEST if step is None else _int("step", step, 0, STEP_MAX)
    st = _lib.DirStats()
    err = _lib.Error()
    rc = _L.wspy_dir_pull(spec, sflags, pfx, threads, flags, vk, p, s, ctypes.byref(st), ctypes.byref(err))
    _check(rc, err)
    return int(st.step) if st.has_step else None


def _dir_poll(ref, stop, interval):
    """DirFollower's background thread: syncs every interval seconds until
    stop is set or the follower is gone (it holds the follower weakly)."""
    wait = interval
    while not stop.is_set():
        f = ref()
        if f is None:
            return
        try:
            f._poll_once()
            wait = interval
        except WsyncValueError:
            if f.closed:
                return
            wait = min(wait * 2, max(interval, 30.0))
        except Exception:
            wait = min(wait * 2, max(interval, 30.0))
        del f
        stop.wait(wait)


class DirFollower(_Closeable):
    """Keeps a model directory at a chain's newest step, for a serving loop.

    `path` is a symbolic link wsync keeps (it must not exist yet, or be one
    a pull made); each sync that reaches a new step writes that step
    complete beside it and switches the link by one rename (see
    wsync.pull_dir). An engine loads from os.path.realpath(path), or from
    the version on_update is handed.

        f = wsync.DirFollower(store, "/models/policy", on_update=reload)
        f.sync()                 # a new step, or None; f.step, f.version
        f.start(interval_ms=500) # or: a background thread syncs

    on_update(step, version): called after each switch with the step and
    the version's directory, in the thread that synced (the caller's for
    sync(), the background's after start()). The previous version stays
    until the next switch: load it before then.

    Options (keyword-only): prefix, threads, insecure, verify_key (a signed
    chain: the publisher's public key; refusals raise WsyncSignatureError,
    the link kept), follow_restart (a HEAD below the version held: follow
    it down instead of WsyncStaleHeadError), new_chain (with verify_key:
    follow a chain the trainer restarted with new_chain=True),
    interval_ms (the background's poll, default 1000), on_update.

    Errors as the Subscriber's: WsyncNoStoreError and WsyncNotFoundError
    until the trainer has published (the background keeps polling),
    WsyncStaleHeadError for a HEAD below the version held (the link kept),
    WsyncLayoutError for a version of another model; a path wsync does not
    keep (a directory of the caller's) is WsyncError with code
    WSYNC_ERR_UNSUPPORTED, untouched."""

    _what = "directory follower"

    def __init__(self, store, path, *, prefix=None, threads=0, insecure=False, verify_key=None,
                 follow_restart=False, new_chain=False, on_update=None, interval_ms=1000):
        spec, pfx, threads, sflags, flags, vk = _dir_options(store, prefix, threads, insecure, verify_key,
                                                             follow_restart, new_chain)
        p = _path("path", path)
        if on_update is not None and not callable(on_update):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "on_update must be callable, not %s"
                                 % type(on_update).__name__)
        self._interval = _int("interval_ms", interval_ms, 1, _U32_MAX)
        err = _lib.Error()
        out = ctypes.c_void_p()
        rc = _L.wspy_dir_follower_open(spec, sflags, pfx, threads, flags, vk, p, ctypes.byref(out),
                                       ctypes.byref(err))
        _check(rc, err)
        self.store = store if isinstance(store, str) else os.fspath(store)
        self.path = os.fsdecode(p)
        self.on_update = on_update
        self.last_stats = None          # DirSyncStats of the last sync
        self.last_error = None          # the background's last failure (None after a sync that worked)
        self._lock = threading.Lock()
        self._thread = None
        self._stop_ev = None
        self._h = _Handle(out.value, _L.wspy_dir_follower_close, "directory follower")

    def sync(self, step=None):
        """One sync to `step` (None: HEAD's). Returns the new step when the
        link was switched to a new version (after on_update ran), else None
        (already there). Raises as pull_dir; the link then is as it was, or
        at the last step reached that checks, never a mixture."""
        s = _STEP_LATEST if step is None else _int("step", step, 0, STEP_MAX)
        st = _lib.DirStats()
        err = _lib.Error()
        with _Guard(self._handle(), self._lock) as ptr:
            rc = _L.wspy_dir_follower_sync(ptr, s, ctypes.byref(st), ctypes.byref(err))
            stats = self.last_stats = _dir_stats(st, self.path)
        if stats.switched and self.on_update is not None:
            self.on_update(stats.step, stats.version)
        _check(rc, err)
        return stats.step if stats.switched else None

    def _poll_once(self):
        try:
            self.sync()
            self.last_error = None
        except (WsyncNoStoreError, WsyncNotFoundError) as e:
            self.last_error = e         # nothing published yet: keep polling
        except Exception as e:
            self.last_error = e
            raise

    @property
    def step(self):
        """The step this follower holds (the version the link pointed at
        after its last sync, or when it was opened), or None. Waits for a
        sync in flight."""
        s = ctypes.c_uint64()
        with _Guard(self._handle(), self._lock) as ptr:
            has = _L.wspy_dir_follower_step(ptr, ctypes.byref(s))
        return int(s.value) if has else None

    @property
    def version(self):
        """The directory of the version the link points at (resolved once),
        or None before the first."""
        return os.path.realpath(self.path) if os.path.islink(self.path) and os.path.exists(self.path) else None

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def start(self, interval_ms=None):
        """Starts a background thread that syncs every interval_ms (None:
        the constructor's), calling on_update after each switch; failures
        are kept in last_error (None again after a sync that works) and the
        poll backs off (doubling, up to 30 s), except while the store does
        not exist or holds nothing yet (WsyncNoStoreError,
        WsyncNotFoundError: polled at the interval). Called again, it
        restarts with the new interval."""
        interval = self._interval if interval_ms is None else _int("interval_ms", interval_ms, 1, _U32_MAX)
        self._handle()
        self.stop()
        import weakref
        self._stop_ev = threading.Event()
        self._thread = threading.Thread(target=_dir_poll, args=(weakref.ref(self), self._stop_ev,
                                                                interval / 1000.0),
                                        name="wsync-dir-follower", daemon=True)
        self._thread.start()

    def stop(self):
        """Stops the background thread, waiting for a sync in flight (close
        does too)."""
        t, ev = self._thread, self._stop_ev
        self._thread = self._stop_ev = None
        if ev is not None:
            ev.set()
        if t is not None and t is not threading.current_thread():
            t.join()

    def _before_close(self, ptr):
        self.stop()


# ---- deltas and files ----

def _input(x):
    """(address, size, path, keep) for a path or a bytes-like object."""
    if isinstance(x, (str, os.PathLike)):
        p = os.fspath(x)
        if "\x00" in p:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "path holds a NUL character")
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
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "buffer is not contiguous")
    b = bytes(mv) if mv.readonly else (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    if isinstance(b, bytes):
        return (ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value if b else None), len(b), None, b
    return (ctypes.addressof(b) if mv.nbytes else None), mv.nbytes, None, b


def diff(base, new, *, encoding="packed", base_step=0, step=1, block_log2=0, threads=0,
         range_coder=False, out=None):
    """The delta base -> new (dicts name -> tensor with the same names,
    dtypes and shapes) as bytes, in `encoding`; written to the file `out`
    too when given."""
    enc = _encoding(encoding)
    base_step = _int("base_step", base_step, 0, STEP_MAX)
    step = _int("step", step, 0, STEP_MAX)
    block_log2 = _int("block_log2", block_log2, 0, _DELTA_MAX_BLOCK_LOG2)
    threads = _int("threads", threads, 0, 1024)
    flags = _DELTA_RANGE_CODER if _bool("range_coder", range_coder) else 0
    b = _tensors.describe_all(base, writable=False)
    n = _tensors.describe_all(new, writable=False)
    nd = dict((t.name, t) for t in n)
    if len(nd) != len(b) or any(t.name not in nd for t in b):
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "base and new must name the same tensors")
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


def apply(delta, tensors, *, threads=0, verify=True):
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
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "tensor %d" % i)
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
                    raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "metadata %d" % i)
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


def head(store, *, prefix=None, insecure=False, verify_key=None):
    """The HEAD of a store's chain, read now: Head(step, state, anchor_step).
    state is the state digest HEAD records for step: a resumed trainer or an
    engine compares it with wsync.state_digest(model.state_dict()).
    WsyncNoStoreError when the store does not exist, WsyncNotFoundError when
    nothing was published yet; with verify_key (as Subscriber's),
    WsyncSignatureError unless HEAD is signed by that key."""
    spec = _store(store)
    pfx = _str("prefix", prefix)
    sflags = _STORE_MUST_EXIST | (_STORE_INSECURE if _bool("insecure", insecure) else 0)
    pub = _verify_key(verify_key)
    h = _lib.Head()
    err = _lib.Error()
    rc = _L.wspy_chain_head(spec, sflags, pfx, pub, ctypes.byref(h), ctypes.byref(err))
    _check(rc, err)
    return _head(h)


def state_digest(tensors, *, threads=0):
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
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "out holds %d bytes, %d needed" % (o.nbytes, 4 * n))
    if n >= (1 << 32):
        raise WsyncError("WSYNC_ERR_LIMIT", "%d elements (at most 2^32)" % n)
    r = _L.wspy_diff_positions(x.ptr, y.ptr, n, width, o.ptr)
    if r == _U64_MAX:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "wsync_diff refused its arguments")
    return int(r)
