"""Loading libwsync.so and declaring its flat C API (python/wsync/_capi.c).

Every prototype is declared here, once; the structs are the shim's own
(fixed-width fields only) and their sizes are checked against the library's
at load time, so a stale library is refused with a clear message instead of
reading garbage. The flags and limits the binding passes are read from the
library too (constant()), never copied here.

Where the library is: $WSYNC_LIB; else the package's own libwsync.so (what
`pip install ./python` builds into it); else the repository's
build/libwsync.so (`make python`, for PYTHONPATH=python).
"""
import ctypes
import os
import threading

ABI_VERSION = 7

c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_u32 = ctypes.c_uint32
c_i32 = ctypes.c_int32
c_dbl = ctypes.c_double
c_vp = ctypes.c_void_p
c_cp = ctypes.c_char_p
P = ctypes.POINTER


class Error(ctypes.Structure):
    _fields_ = [("code", c_i64), ("offset", c_u64),
                ("tensor", ctypes.c_char * 128), ("message", ctypes.c_char * 512)]


class PublishStats(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("step", "wrote_anchor", "wrote_delta", "base_step", "elements",
                                     "changed", "delta_bytes", "anchor_bytes", "deleted",
                                     "retention_failed", "state")] + \
               [("encode_seconds", c_dbl), ("put_seconds", c_dbl), ("seconds", c_dbl)]


class SyncStats(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("had_step", "from_step", "step", "head_step", "verified",
                                     "anchors", "deltas", "rejected", "bytes_fetched")] + \
               [("seconds", c_dbl), ("path", ctypes.c_char * 160)]


class DeltaStats(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("encoding", "has_steps", "base_step", "step", "has_base",
                                     "tensors", "changed_tensors", "elements", "changed",
                                     "bytes")] + [("seconds", c_dbl)]


class PrefetchStatus(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("running", "polls", "head_known", "head_step", "ready",
                                     "ready_step", "caught_up", "refused", "interval_ms")] + \
               [("last_error_time", c_dbl), ("last_error", Error)]


class MirrorStats(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("had_step", "from_step", "has_step", "step", "handed", "busy",
                                     "steps", "tensors", "whole_tensors", "positions", "bytes",
                                     "chunks", "record_bytes", "anchors", "deltas", "bytes_fetched")] + \
               [("pause_seconds", c_dbl), ("wait_seconds", c_dbl)]


class EngineStats(ctypes.Structure):
    _fields_ = [("mirror", MirrorStats)] + [(n, c_u64) for n in ("params", "positions", "bytes", "calls")]


class Head(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("has_head", "head_step", "head_state", "anchor_step")]


class DirStats(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("had_step", "from_step", "has_step", "step", "switched", "unchecked",
                                     "write_failed", "relayout", "relayout_step", "head_step", "verified",
                                     "anchors", "deltas", "rejected", "bytes_fetched")] + \
               [("seconds", c_dbl), ("write_seconds", c_dbl), ("version", ctypes.c_char * 256)]


class DirInfo(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("shards", "tensors", "files", "bytes", "has_step", "step",
                                     "skipped_step_file")]


# wspy_changes_fn: (user, tensor index, whole, count, positions, values, width, last) -> 0 or nonzero.
# The pointers arrive as plain ints (c_void_p), valid only during the call.
CHANGES_FN = ctypes.CFUNCTYPE(c_i32, c_vp, c_u64, c_i32, c_u64, c_vp, c_vp, c_u32, c_i32)

# wspy_param_fn: (user, parameter index, count, positions, values, width) -> 0 or nonzero.
PARAM_FN = ctypes.CFUNCTYPE(c_i32, c_vp, c_u64, c_u64, c_vp, c_vp, c_u32)


class Seg(ctypes.Structure):
    """wspy_seg: a staged parameter's changes in the staging buffer (byte offsets)."""
    _fields_ = [(n, c_u64) for n in ("index", "positions", "values", "count")]


# wspy_stage_fn: (user, segs, nseg, need, &buf, &cap, &used) -> 0 or nonzero.
STAGE_FN = ctypes.CFUNCTYPE(c_i32, c_vp, c_vp, c_u64, c_u64, P(c_vp), P(c_u64), P(c_u64))

# the tensor arrays: n, names, dtypes, ranks, shapes, datas
_TENSORS = [c_u64, P(c_cp), P(c_i32), P(c_u32), P(c_u64), P(c_vp)]

_PROTOS = {
    "wspy_abi_version": (c_i32, []),
    "wspy_version": (c_cp, []),
    "wspy_has_http": (c_i32, []),
    "wspy_sizeof": (c_u64, [c_i32]),
    "wspy_constant": (c_i32, [c_cp, P(c_u64)]),
    "wspy_result_name": (c_cp, [c_i64]),
    "wspy_result_str": (c_cp, [c_i64]),
    "wspy_dtype_name": (c_cp, [c_i32]),
    "wspy_dtype_from_name": (c_i32, [c_cp]),
    "wspy_dtype_bits": (c_u32, [c_i32]),
    "wspy_encoding_from_name": (c_i32, [c_cp]),
    "wspy_encoding_name": (c_cp, [c_i32]),
    "wspy_free": (None, [c_vp]),
    "wspy_digest": (c_u64, [c_vp, c_u64]),
    "wspy_diff_positions": (c_u64, [c_vp, c_vp, c_u64, c_u32, c_vp]),
    "wspy_state_digest": (c_i32, _TENSORS + [c_u32, P(c_u64), P(Error)]),
    "wspy_sign_key": (c_i32, [c_vp, c_u64, c_vp, P(Error)]),
    "wspy_public_key": (None, [c_vp, c_vp]),
    "wspy_keygen": (c_i32, [c_cp, P(Error)]),
    "wspy_key_read_secret": (c_i32, [c_cp, c_vp, P(Error)]),
    "wspy_key_read_public": (c_i32, [c_cp, c_vp, P(Error)]),
    "wspy_publisher_open": (c_i32, [c_cp, c_u32, c_cp, c_i32, c_u32, c_dbl, c_u32, c_u32, c_u32, c_vp,
                                    P(c_vp), P(Error)]),
    "wspy_publish": (c_i32, [c_vp, c_u64] + _TENSORS + [P(PublishStats), P(Error)]),
    "wspy_publisher_head": (c_i32, [c_vp, P(c_u64)]),
    "wspy_publisher_close": (None, [c_vp]),
    "wspy_publisher_head_state": (c_i32, [c_vp, P(Head), P(Error)]),
    "wspy_chain_head": (c_i32, [c_cp, c_u32, c_cp, c_vp, P(Head), P(Error)]),
    "wspy_subscriber_open": (c_i32, [c_cp, c_u32, c_cp, c_u32, c_u32, c_vp] + _TENSORS + [P(c_vp), P(Error)]),
    "wspy_subscriber_chain_id": (c_i32, [c_vp, c_vp]),
    "wspy_subscriber_set_chain_id": (c_i32, [c_vp, c_vp]),
    "wspy_subscriber_sync": (c_i32, [c_vp, c_u64, P(SyncStats), P(Error)]),
    "wspy_subscriber_step": (c_i32, [c_vp, P(c_u64)]),
    "wspy_subscriber_set_step": (c_i32, [c_vp, c_u64, P(Error)]),
    "wspy_subscriber_start": (c_i32, [c_vp, c_u32, P(Error)]),
    "wspy_subscriber_ready": (c_i32, [c_vp, P(c_u64)]),
    "wspy_subscriber_apply_ready": (c_i32, [c_vp, P(SyncStats), P(Error)]),
    "wspy_subscriber_status": (c_i32, [c_vp, P(PrefetchStatus), P(Error)]),
    "wspy_subscriber_stop": (None, [c_vp]),
    "wspy_subscriber_close": (None, [c_vp]),
    "wspy_mirror_open": (c_i32, [c_cp, c_u32, c_cp, c_u32, c_u32, c_vp, c_u32, c_u32, c_u64, P(c_cp),
                                 P(c_i32), P(c_u32), P(c_u64), P(c_vp), P(Error)]),
    "wspy_mirror_chain_id": (c_i32, [c_vp, c_vp]),
    "wspy_mirror_set_chain_id": (c_i32, [c_vp, c_vp]),
    "wspy_mirror_data": (c_i32, [c_vp, c_u64, P(c_vp), P(c_u64)]),
    "wspy_mirror_start": (c_i32, [c_vp, c_u32, P(Error)]),
    "wspy_mirror_stop": (None, [c_vp]),
    "wspy_mirror_sync": (c_i32, [c_vp, c_u64, P(SyncStats), P(Error)]),
    "wspy_mirror_set_step": (c_i32, [c_vp, c_u64, P(Error)]),
    "wspy_mirror_take": (c_i32, [c_vp, CHANGES_FN, c_vp, P(MirrorStats), P(Error)]),
    "wspy_mirror_step": (c_i32, [c_vp, c_i32, P(c_u64)]),
    "wspy_mirror_engine_step": (c_i32, [c_vp, P(c_u64)]),
    "wspy_mirror_state_digest": (c_i32, [c_vp, P(c_u64)]),
    "wspy_mirror_status": (c_i32, [c_vp, P(PrefetchStatus), P(Error)]),
    "wspy_mirror_close": (None, [c_vp]),
    "wspy_mirror_count": (c_u64, [c_vp]),
    "wspy_mirror_tensor": (c_i32, [c_vp, c_u64, P(c_cp), P(c_i32), P(c_u32), P(c_u64)]),
    "wspy_engine_open": (c_i32, [c_vp, c_u64, P(c_cp), P(c_i32), P(c_u32), P(c_u64), P(c_u32), P(c_u64),
                                 P(c_u64), P(c_cp), P(c_u64), P(c_u64), P(c_vp), c_u32, P(c_vp), P(Error)]),
    "wspy_engine_take": (c_i32, [c_vp, PARAM_FN, c_i32, c_vp, c_vp, STAGE_FN, c_vp, c_u64, P(EngineStats),
                                 P(Error)]),
    "wspy_engine_close": (None, [c_vp]),
    "wspy_delta_encode": (c_i32, [c_u64, P(c_cp), P(c_i32), P(c_u32), P(c_u64), P(c_vp), P(c_vp),
                                  c_i32, c_u64, c_u64, c_u32, c_u32, c_u32, P(c_vp), P(c_u64),
                                  P(DeltaStats), P(Error)]),
    "wspy_delta_apply": (c_i32, [c_vp, c_u64, c_cp] + _TENSORS + [c_u32, c_u32, P(DeltaStats), P(Error)]),
    "wspy_delta_info": (c_i32, [c_vp, c_u64, c_cp, P(DeltaStats), P(Error)]),
    "wspy_st_open": (c_i32, [c_vp, c_u64, c_cp, P(c_vp), P(Error)]),
    "wspy_st_count": (c_u64, [c_vp]),
    "wspy_st_meta_count": (c_u64, [c_vp]),
    "wspy_st_data_offset": (c_u64, [c_vp]),
    "wspy_st_tensor": (c_i32, [c_vp, c_u64, P(c_vp), P(c_u64), P(c_i32), P(c_u32), P(P(c_u64)),
                               P(c_u64), P(c_u64)]),
    "wspy_st_meta": (c_i32, [c_vp, c_u64, P(c_vp), P(c_u64), P(c_vp), P(c_u64)]),
    "wspy_st_close": (None, [c_vp]),
    "wspy_dir_name": (c_cp, [c_i32]),
    "wspy_publish_dir": (c_i32, [c_vp, c_u64, c_cp, c_u64, P(c_cp), P(ctypes.c_uint8), P(DirInfo),
                                 P(PublishStats), P(Error)]),
    "wspy_dir_follower_open": (c_i32, [c_cp, c_u32, c_cp, c_u32, c_u32, c_vp, c_cp, P(c_vp), P(Error)]),
    "wspy_dir_follower_sync": (c_i32, [c_vp, c_u64, P(DirStats), P(Error)]),
    "wspy_dir_follower_step": (c_i32, [c_vp, P(c_u64)]),
    "wspy_dir_follower_close": (None, [c_vp]),
    "wspy_dir_pull": (c_i32, [c_cp, c_u32, c_cp, c_u32, c_u32, c_vp, c_cp, c_u64, P(DirStats), P(Error)]),
}

_STRUCTS = [(0, Error), (1, PublishStats), (2, SyncStats), (3, DeltaStats), (4, PrefetchStatus),
            (5, MirrorStats), (6, Head), (7, EngineStats), (8, DirStats), (9, DirInfo), (10, Seg)]

_lock = threading.Lock()
_lib = None


LIBRARY = "libwsync.so"


def library_path():
    """Where the library is looked for: $WSYNC_LIB; else libwsync.so in this
    package (an installed package's); else ../../build/libwsync.so relative
    to it (the repository's build directory, for PYTHONPATH=python)."""
    env = os.environ.get("WSYNC_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    own = os.path.join(here, LIBRARY)
    if os.path.exists(own):
        return own
    return os.path.normpath(os.path.join(here, "..", "..", "build", LIBRARY))


def _how_to_build():
    if os.environ.get("WSYNC_LIB"):
        return "WSYNC_LIB names it: point WSYNC_LIB at a libwsync.so or unset it"
    return "run `make python` in the repository, `pip install ./python` from its root, " \
           "or set WSYNC_LIB to the library's path"


def constant(lib, name):
    """The library's value of a flag or limit (wspy_constant)."""
    v = c_u64()
    if not lib.wspy_constant(name.encode(), ctypes.byref(v)):
        raise ImportError("wsync: the library does not know %s: rebuild it" % name)
    return int(v.value)


def load():
    """The loaded library (once per process; read-only afterwards)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not os.path.exists(path):
            raise ImportError("wsync: %s not found: %s" % (path, _how_to_build()))
        lib = ctypes.CDLL(path)  # CDLL: the GIL is released during every call
        try:
            abi_fn = lib.wspy_abi_version
        except AttributeError:
            raise ImportError("wsync: %s is not wsync's library (no wspy_abi_version)" % path)
        abi_fn.restype = c_i32
        abi_fn.argtypes = []
        abi = abi_fn()
        if abi != ABI_VERSION:
            raise ImportError("wsync: %s has ABI %d, this package wants %d: rebuild it (make python, or "
                              "pip install ./python)" % (path, abi, ABI_VERSION))
        for name, (res, args) in _PROTOS.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise ImportError("wsync: %s lacks %s: rebuild it (make python, or pip install ./python)"
                                  % (path, name))
            fn.restype = res
            fn.argtypes = args
        for what, st in _STRUCTS:
            if lib.wspy_sizeof(what) != ctypes.sizeof(st):
                raise ImportError("wsync: %s: struct %s is %d bytes there, %d here: rebuild it"
                                  % (path, st.__name__, lib.wspy_sizeof(what), ctypes.sizeof(st)))
        _lib = lib
        return lib
