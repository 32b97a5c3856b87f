"""Turning torch tensors, numpy arrays and bytes-like objects into what the
shim takes (name, wsync dtype number, shape, address), validated in Python
before any pointer reaches C.

Neither torch nor numpy is imported here: objects are recognised by their
type's module and read through long-stable calls only (torch: data_ptr,
contiguous, numel, element_size, is_contiguous, device, dtype, shape, to;
numpy: __array_interface__, dtype, flags).
"""
import ctypes

from ._errors import WsyncError, WsyncTypeError, WsyncUnsupportedError, WsyncValueError
from . import _lib

# wsync_dtype numbers, names and element bits (wsync.h >>dtypes), read from
# the library: name -> number, number -> name, name -> bits.
_L = _lib.load()
DTYPES = dict((_L.wspy_dtype_name(code).decode(), code)
              for code in range(1, _lib.constant(_L, "WSYNC_DTYPE_COUNT")))
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
BITS = dict((name, int(_L.wspy_dtype_bits(code))) for name, code in DTYPES.items())

TORCH_DTYPES = {
    "torch.bool": "BOOL", "torch.uint8": "U8", "torch.int8": "I8",
    "torch.float8_e4m3fn": "F8_E4M3", "torch.float8_e5m2": "F8_E5M2",
    "torch.float8_e8m0fnu": "F8_E8M0", "torch.int16": "I16", "torch.uint16": "U16",
    "torch.float16": "F16", "torch.bfloat16": "BF16", "torch.int32": "I32",
    "torch.uint32": "U32", "torch.float32": "F32", "torch.float64": "F64",
    "torch.int64": "I64", "torch.uint64": "U64", "torch.complex64": "C64",
}

# numpy: by dtype name (covers ml_dtypes' bfloat16 and float8 types too)
NUMPY_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "int32": "I32", "uint32": "U32", "float32": "F32", "float64": "F64",
    "int64": "I64", "uint64": "U64", "complex64": "C64", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
}
# (only the dtypes this library has)
TORCH_DTYPES = dict((k, v) for k, v in TORCH_DTYPES.items() if v in DTYPES)
NUMPY_DTYPES = dict((k, v) for k, v in NUMPY_DTYPES.items() if v in DTYPES)


def _nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    bits = n * BITS[dtype]
    if bits % 8:
        raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%d elements of %s do not fill whole bytes"
                         % (n, dtype))
    return bits // 8


class Tensor(object):
    """One tensor as the shim sees it; `keep` holds whatever must stay alive
    while C uses the address (a host copy, a buffer export)."""
    __slots__ = ("name", "bname", "dtype", "code", "shape", "ptr", "nbytes", "keep", "obj", "sig", "key")

    def __init__(self, name, dtype, shape, ptr, nbytes, keep, obj, sig=None):
        self.name = name
        self.bname = name.encode("utf-8")
        self.dtype = dtype
        self.code = DTYPES[dtype]
        self.shape = shape
        self.ptr = ptr
        self.nbytes = nbytes
        self.keep = keep
        self.obj = obj
        self.sig = sig            # what obj's memory was when described (check_unmoved)
        self.key = None           # obj's identity (_identity) when check_unmoved last found it unmoved


def is_torch(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def is_numpy(x):
    return type(x).__module__.split(".")[0] == "numpy" and hasattr(x, "__array_interface__")


def check_name(name):
    if not isinstance(name, str):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT",
                             "tensor names must be str, not %s" % type(name).__name__)
    if not name or "\x00" in name:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "tensor name %r: empty or holds NUL" % name,
                              tensor=name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise WsyncError("WSYNC_ERR_INVALID_UTF8", "tensor name %r is not valid UTF-8" % name,
                         tensor=name)
    return name


def _shape(name, shape):
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "shape %r is not a tuple of ints" % (shape,),
                             tensor=name)
    if any(d < 0 for d in shape):
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "negative dimension in %r" % (shape,), tensor=name)
    if len(shape) > 64:
        raise WsyncError("WSYNC_ERR_RANK_TOO_LARGE", "rank %d (limit 64)" % len(shape), tensor=name)
    return shape


def _storage_nbytes(t):
    """The bytes of t's storage, or None when torch cannot say."""
    try:
        us = getattr(t, "untyped_storage", None)
        return int(us().nbytes()) if us is not None else int(t.storage().nbytes())
    except Exception:
        return None


def _needed_nbytes(t):
    """The bytes of storage t's elements reach (its offset included)."""
    n = 1
    for d in t.shape:
        n *= int(d)
    if not n:
        return 0
    last = int(t.storage_offset())
    for d, st in zip(t.shape, t.stride()):
        last += (int(d) - 1) * int(st)
    return (last + 1) * int(t.element_size())


def _lazy(t):
    """'conj' or 'neg' when t is a lazily conjugated or negated view (its
    memory holds the unconjugated or unnegated values), else None."""
    f = getattr(t, "is_conj", None)
    if f is not None and f():
        return "conj"
    f = getattr(t, "is_neg", None)
    if f is not None and f():
        return "neg"
    return None


_LAZY_WORDS = {"conj": "a lazily conjugated view (x.conj(); x.is_conj() is True): its memory holds the "
                       "unconjugated values",
               "neg": "a lazily negated view (x.is_neg() is True): its memory holds the unnegated values"}


def _freed(name, t):
    """Raises when t's storage does not hold its elements (storage().resize_(0),
    as FSDP does to a sharded parameter): reading it would crash."""
    if t.device.type == "meta":
        return
    need = _needed_nbytes(t)
    if not need:
        return
    have = _storage_nbytes(t)
    if have is not None and have < need:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                              "tensor %r: its storage holds %d bytes, its elements need %d (the storage was "
                              "freed or shrunk, e.g. storage().resize_(0) as FSDP does)" % (name, have, need),
                              tensor=name)


def _torch_sig(t):
    return (int(t.data_ptr()), int(t.numel()) * int(t.element_size()), str(t.dtype),
            tuple(int(d) for d in t.shape), str(t.device))


def _torch(name, t, writable):
    dt = TORCH_DTYPES.get(str(t.dtype))
    if dt is None:
        raise WsyncError("WSYNC_ERR_UNKNOWN_DTYPE", "torch dtype %s has no safetensors dtype" % t.dtype,
                         tensor=name)
    if str(getattr(t, "layout", "torch.strided")) != "torch.strided":
        raise WsyncError("WSYNC_ERR_UNSUPPORTED", "a %s tensor: only dense (strided) tensors"
                         % t.layout, tensor=name)
    _freed(name, t)
    lazy = _lazy(t)
    if lazy is not None:
        if writable:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                  "tensor %r is %s: wsync would write raw values under it; give the tensor "
                                  "itself (or x.resolve_%s(), a copy)" % (name, _LAZY_WORDS[lazy], lazy),
                                  tensor=name)
        t = t.detach()
        t = t.resolve_conj() if lazy == "conj" else t
        t = t.resolve_neg() if _lazy(t) == "neg" else t
    keep = t
    if t.device.type != "cpu":
        if writable:
            raise WsyncUnsupportedError(
                "WSYNC_ERR_UNSUPPORTED",
                "a %s tensor as a target: only CPU tensors are patched in place "
                "(a Subscriber writes device tensors through its mirror unless mirror=False)" % t.device,
                tensor=name)
        try:
            keep = t.detach().to("cpu")
        except Exception as e:  # meta tensors, a device gone
            raise WsyncError("WSYNC_ERR_UNSUPPORTED", "cannot copy the %s tensor to the host: %s"
                             % (t.device, e), tensor=name)
    if not keep.is_contiguous():
        if writable:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                  "tensor is not contiguous: it cannot be patched in place", tensor=name)
        keep = keep.contiguous()
    shape = _shape(name, keep.shape)
    nbytes = int(keep.numel()) * int(keep.element_size())
    ptr = int(keep.data_ptr()) if nbytes else None
    return Tensor(name, dt, shape, ptr, nbytes, keep, t, _torch_sig(t) if writable else None)


def _array(name, a, writable, dtype=None, shape=None):
    ai = a.__array_interface__
    dt = dtype
    if dt is None:
        dname = str(getattr(getattr(a, "dtype", None), "name", ""))
        dt = NUMPY_DTYPES.get(dname)
        if dt is None:
            raise WsyncError("WSYNC_ERR_UNKNOWN_DTYPE", "array dtype %s has no safetensors dtype "
                             "(give (array, 'BF16') for raw bits)" % (dname or ai.get("typestr")),
                             tensor=name)
    typestr = ai.get("typestr", "")
    if typestr[:1] == ">" and int(typestr[2:] or 1) > 1:
        raise WsyncError("WSYNC_ERR_UNSUPPORTED", "big-endian array: safetensors is little-endian",
                         tensor=name)
    ashape = tuple(int(d) for d in ai["shape"])
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    strides = ai.get("strides")
    if strides is not None:
        expect, acc = [], itemsize
        for d in reversed(ashape):
            expect.append(acc)
            acc *= d
        if tuple(reversed(expect)) != tuple(strides) and 0 not in ashape:
            if writable:
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                      "array is not C-contiguous: it cannot be patched in place", tensor=name)
            a = a.copy()
            ai = a.__array_interface__
    ptr, readonly = ai["data"]
    if writable and readonly:
        raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "array is read-only: it cannot be patched in place",
                              tensor=name)
    n = 1
    for d in ashape:
        n *= d
    have = n * itemsize
    if shape is None:
        shape = ashape if (dtype is None or BITS[dt] == itemsize * 8) else (have * 8 // BITS[dt],)
    shape = _shape(name, shape)
    nbytes = _nbytes(dt, shape)
    if nbytes != have:
        raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%s %s needs %d bytes, the array has %d"
                         % (dt, list(shape), nbytes, have), tensor=name)
    sig = _numpy_sig(a) if writable else None
    return Tensor(name, dt, shape, int(ptr) if nbytes else None, nbytes, a, a, sig)


def _numpy_sig(a):
    ai = a.__array_interface__
    return (int(ai["data"][0]), int(a.nbytes), str(ai.get("typestr")), tuple(int(d) for d in ai["shape"]))


def _buffer(name, b, writable, dtype=None, shape=None):
    dt = dtype or "U8"
    if isinstance(b, bytes):
        if writable:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "bytes are read-only: give a bytearray",
                                  tensor=name)
        have, keep = len(b), b
        ptr = ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value if have else None
    else:
        try:
            mv = memoryview(b)
        except TypeError:
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s is not a tensor, an array or a buffer"
                                 % type(b).__name__, tensor=name)
        if not mv.c_contiguous:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "buffer is not contiguous", tensor=name)
        mv = mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv
        have = mv.nbytes
        if mv.readonly:
            if writable:
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "buffer is read-only", tensor=name)
            keep = bytes(mv)
            ptr = ctypes.cast(ctypes.c_char_p(keep), ctypes.c_void_p).value if have else None
        else:
            keep = (ctypes.c_char * have).from_buffer(mv) if have else None
            ptr = ctypes.addressof(keep) if have else None
    if shape is None:
        if have * 8 % BITS[dt]:
            raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%d bytes are not whole %s elements" % (have, dt),
                             tensor=name)
        shape = (have * 8 // BITS[dt],)
    shape = _shape(name, shape)
    nbytes = _nbytes(dt, shape)
    if nbytes != have:
        raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%s %s needs %d bytes, the buffer has %d"
                         % (dt, list(shape), nbytes, have), tensor=name)
    return Tensor(name, dt, shape, ptr, nbytes, keep, b)


def describe(name, x, writable):
    """A Tensor for x: a torch tensor, a numpy array, a bytes-like object, or a
    tuple (x, "BF16") / (x, "BF16", shape) that gives the dtype (and shape)
    of x's raw bytes (numpy has no bfloat16: (uint16_array, "BF16"))."""
    check_name(name)
    dtype = shape = None
    if isinstance(x, tuple):
        if len(x) not in (2, 3) or not isinstance(x[1], str):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT",
                                 "a tuple must be (data, dtype) or (data, dtype, shape)", tensor=name)
        if x[1] not in DTYPES:
            raise WsyncError("WSYNC_ERR_UNKNOWN_DTYPE", "dtype %r (one of %s)"
                             % (x[1], ", ".join(sorted(DTYPES))), tensor=name)
        dtype = x[1]
        shape = x[2] if len(x) == 3 else None
        x = x[0]
    if is_torch(x):
        t = _torch(name, x, writable)
        if dtype is None:
            return t
        # raw bits of a torch tensor under another dtype: through its bytes
        if shape is None:
            shape = t.shape if BITS[dtype] == BITS[t.dtype] else (t.nbytes * 8 // BITS[dtype],)
        shape = _shape(name, shape)
        if _nbytes(dtype, shape) != t.nbytes:
            raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%s %s needs %d bytes, the tensor has %d"
                             % (dtype, list(shape), _nbytes(dtype, shape), t.nbytes), tensor=name)
        return Tensor(name, dtype, shape, t.ptr, t.nbytes, t.keep, t.obj, t.sig)
    if hasattr(x, "__array_interface__") and not isinstance(x, (bytes, bytearray, memoryview)):
        return _array(name, x, writable, dtype, shape)
    if x is None or isinstance(x, (int, float, str)):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "%s is not a tensor, an array or a buffer"
                             % type(x).__name__, tensor=name)
    return _buffer(name, x, writable, dtype, shape)


def pairs(tensors):
    """[(name, tensor)] from a mapping name -> tensor or an iterable of pairs
    (a generator such as model.named_parameters(): read once, here)."""
    if isinstance(tensors, list) and all(isinstance(it, tuple) and len(it) == 2 for it in tensors):
        return tensors
    if hasattr(tensors, "items"):
        return list(tensors.items())
    if isinstance(tensors, (str, bytes, bytearray, memoryview)) or is_torch(tensors) or is_numpy(tensors):
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT",
                             "tensors must be a dict of name -> tensor, not %s" % type(tensors).__name__)
    try:
        items = list(tensors)
    except TypeError:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT",
                             "tensors must be a dict of name -> tensor, not %s" % type(tensors).__name__)
    for it in items:
        if not (isinstance(it, tuple) and len(it) == 2):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT",
                                 "tensors must be a dict of name -> tensor or (name, tensor) pairs")
    return items


def describe_all(tensors, writable):
    """Tensors from a mapping name -> tensor (or pairs), in its order."""
    items = pairs(tensors)
    out, seen = [], set()
    for name, x in items:
        t = describe(name, x, writable)
        if name in seen:
            raise WsyncError("WSYNC_ERR_DUPLICATE_KEY", "tensor %r given twice" % name, tensor=name)
        seen.add(name)
        out.append(t)
    return out


def _changed(x, sig):
    """How x's memory differs from sig (what it was when described), in
    words, or None. torch: device, dtype, shape, lazy view, contiguity,
    storage size, address; numpy: address, shape, dtype, flags."""
    if is_torch(x):
        ptr, nbytes, dtype, shape, device = sig
        if str(x.device) != device:
            return "it is now on %s, it was on %s" % (x.device, device)
        if str(x.dtype) != dtype:
            return "its dtype is now %s, it was %s" % (x.dtype, dtype)
        now = tuple(int(d) for d in x.shape)
        if now != shape:
            return "its shape is now %s, it was %s" % (list(now), list(shape))
        lazy = _lazy(x)
        if lazy is not None:
            return "it is now %s" % _LAZY_WORDS[lazy]
        if not nbytes:
            return None
        if not x.is_contiguous():
            return "it is no longer contiguous (set_() to a strided tensor?)"
        if x.device.type != "meta":
            need = _needed_nbytes(x)
            have = _storage_nbytes(x)
            if have is not None and have < need:
                return ("its storage holds %d bytes now, its elements need %d (the storage was freed or "
                        "shrunk: storage().resize_(0), as FSDP does)" % (have, need))
        p = int(x.data_ptr())
        if p != ptr:
            return ("its memory moved from 0x%x to 0x%x (share_memory_(), set_(), `.data =` or a storage "
                    "resize)" % (ptr, p))
        return None
    if is_numpy(x):
        ptr, nbytes, typestr, shape = sig
        ai = x.__array_interface__
        now = tuple(int(d) for d in ai["shape"])
        if str(ai.get("typestr")) != typestr:
            return "its dtype is now %s, it was %s" % (ai.get("typestr"), typestr)
        if now != shape:
            return "its shape is now %s, it was %s" % (list(now), list(shape))
        if not nbytes:
            return None
        if int(ai["data"][0]) != ptr:
            return "its memory moved from 0x%x to 0x%x (resize(refcheck=False)?)" % (ptr, int(ai["data"][0]))
        if not x.flags["C_CONTIGUOUS"]:
            return "it is no longer C-contiguous"
        if not x.flags["WRITEABLE"]:
            return "it is read-only now"
        return None
    return None


def _storage_of(t):
    """t's storage object (untyped where torch has it), or None."""
    try:
        us = getattr(t, "untyped_storage", None)
        return us() if us is not None else t.storage()
    except Exception:
        return None


def _identity(x):
    """What check_unmoved compares at every call, cheaply (attribute reads,
    no formatting): torch: address, shape, strides, storage offset, dtype,
    device and the lazy conj/neg bits; numpy: the data (address, read-only),
    shape, typestr and strides (None: C-contiguous). With the storage's
    size (read from the storage object held since the full check: a storage
    freed and reallocated smaller at the same address, resize_(0) then
    resize_(n), keeps the rest), everything _changed reads is a function of
    these: equal to what x had when _changed last found it unmoved, x is
    still unmoved."""
    if is_torch(x):
        f = getattr(x, "is_neg", None)
        return (x.data_ptr(), x.shape, x.stride(), x.storage_offset(), x.dtype, x.device, x.is_conj(),
                f() if f is not None else False)
    if is_numpy(x):
        ai = x.__array_interface__
        return (ai["data"], ai["shape"], ai["typestr"], ai.get("strides"))
    return None


def _storage_nbytes_of(st):
    if st is None:
        return None
    try:
        return int(st.nbytes())
    except Exception:
        return None


def _moved(t, why):
    return WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                           "tensor %r changed after the Subscriber was built: %s. wsync writes only the memory it "
                           "was given, so nothing was written; build a new Subscriber for the tensors as they are "
                           "now (move a model's memory, e.g. model.share_memory(), before building it)"
                           % (t.name, why), tensor=t.name)


def check_unmoved(ts):
    """Raises a WsyncError naming the first Tensor in ts whose object's
    memory is not where it was when described (moved, freed, reshaped):
    called before every call that lets wsync write or read it. One pass of
    identity compares (_identity and the held storage's size: well under a
    microsecond a tensor); the full check (_changed, which words the error)
    runs only for a tensor whose identity is not the one it last passed
    with (the first call, or after a change), and records its identity (and
    its storage object: kept alive as long as that) when it passes."""
    for t in ts:
        if t.sig is None:
            continue
        x = t.obj
        key = t.key
        if key is not None and _identity(x) == key[0] and _storage_nbytes_of(key[1]) == key[2]:
            continue
        why = _changed(x, t.sig)
        if why is not None:
            t.key = None
            raise _moved(t, why)
        ident = _identity(x)
        st = _storage_of(x) if is_torch(x) and x.device.type != "meta" else None
        t.key = (ident, st, _storage_nbytes_of(st)) if ident is not None else None


def check_unmoved_full(ts):
    """check_unmoved without the recorded identities (every tensor through
    _changed, as before them): the reference bench/bench_engine.py measures
    check_unmoved against."""
    for t in ts:
        if t.sig is not None:
            why = _changed(t.obj, t.sig)
            if why is not None:
                raise _moved(t, why)


class Arrays(object):
    """The shim's parallel arrays for a list of Tensors (alive as long as this)."""
    __slots__ = ("n", "names", "dtypes", "ranks", "shapes", "datas", "tensors")

    def __init__(self, ts, datas=None):
        n = len(ts)
        self.n = n
        self.tensors = ts
        self.names = (ctypes.c_char_p * max(n, 1))(*[t.bname for t in ts])
        self.dtypes = (ctypes.c_int32 * max(n, 1))(*[t.code for t in ts])
        self.ranks = (ctypes.c_uint32 * max(n, 1))(*[len(t.shape) for t in ts])
        dims = [d for t in ts for d in t.shape]
        self.shapes = (ctypes.c_uint64 * max(len(dims), 1))(*dims)
        self.datas = pointers(ts) if datas is None else datas


def pointers(ts):
    return (ctypes.c_void_p * max(len(ts), 1))(*[t.ptr for t in ts])


# ---- the mirror's engine targets: any device, written only through the take ----

def is_device_tensor(x):
    """A torch tensor (or a (tensor, dtype[, shape]) tuple) not on the CPU."""
    if isinstance(x, tuple) and x:
        x = x[0]
    return is_torch(x) and getattr(getattr(x, "device", None), "type", "cpu") != "cpu"


class Target(object):
    """An engine tensor the mirror's take writes: `obj` the caller's tensor or
    array, `flat` a 1-D view of its elements as unsigned integers of `width`
    bytes (the raw bits: a scatter of raw values, whatever the dtype), and
    the wsync description (name, dtype, shape; no address: the host copy is
    the shim's)."""
    __slots__ = ("t", "obj", "kind", "width", "flat", "device")

    def __init__(self, t, obj, kind, width, flat, device):
        self.t = t
        self.obj = obj
        self.kind = kind
        self.width = width
        self.flat = flat
        self.device = device


_TORCH_RAW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def describe_target(name, x):
    """A Target for a mirror's engine tensor: a torch tensor on any device
    (contiguous, dense) or a numpy array (C-contiguous, writable,
    little-endian), optionally as (x, dtype[, shape]) naming the dtype of its
    raw bits (same element width)."""
    check_name(name)
    dtype = shape = None
    if isinstance(x, tuple):
        if len(x) not in (2, 3) or not isinstance(x[1], str):
            raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT",
                                 "a tuple must be (data, dtype) or (data, dtype, shape)", tensor=name)
        if x[1] not in DTYPES:
            raise WsyncError("WSYNC_ERR_UNKNOWN_DTYPE", "dtype %r (one of %s)"
                             % (x[1], ", ".join(sorted(DTYPES))), tensor=name)
        dtype = x[1]
        shape = x[2] if len(x) == 3 else None
        x = x[0]
    if is_torch(x):
        dt = TORCH_DTYPES.get(str(x.dtype))
        if dt is None:
            raise WsyncError("WSYNC_ERR_UNKNOWN_DTYPE", "torch dtype %s has no safetensors dtype" % x.dtype,
                             tensor=name)
        if str(getattr(x, "layout", "torch.strided")) != "torch.strided":
            raise WsyncError("WSYNC_ERR_UNSUPPORTED", "a %s tensor: only dense (strided) tensors"
                             % x.layout, tensor=name)
        if x.device.type == "meta":
            raise WsyncUnsupportedError("WSYNC_ERR_UNSUPPORTED", "a meta tensor holds no data", tensor=name)
        lazy = _lazy(x)
        if lazy is not None:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                  "tensor %r is %s: wsync would write raw values under it; give the tensor "
                                  "itself (or x.resolve_%s(), a copy)" % (name, _LAZY_WORDS[lazy], lazy),
                                  tensor=name)
        if not x.is_contiguous():
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                  "tensor is not contiguous: it cannot be patched in place", tensor=name)
        _freed(name, x)
        width_bits = int(x.element_size()) * 8
        ashape = tuple(int(d) for d in x.shape)
        kind = "torch"
        sig = _torch_sig(x)
    elif is_numpy(x):
        ai = x.__array_interface__
        typestr = ai.get("typestr", "")
        dname = str(getattr(getattr(x, "dtype", None), "name", ""))
        dt = NUMPY_DTYPES.get(dname)
        if dt is None and dtype is None:
            raise WsyncError("WSYNC_ERR_UNKNOWN_DTYPE", "array dtype %s has no safetensors dtype "
                             "(give (array, 'BF16') for raw bits)" % (dname or typestr), tensor=name)
        if typestr[:1] == ">" and int(typestr[2:] or 1) > 1:
            raise WsyncError("WSYNC_ERR_UNSUPPORTED", "big-endian array: safetensors is little-endian",
                             tensor=name)
        if not x.flags["C_CONTIGUOUS"]:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                  "array is not C-contiguous: it cannot be patched in place", tensor=name)
        if not x.flags["WRITEABLE"]:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "array is read-only: it cannot be patched in place",
                                  tensor=name)
        width_bits = int(x.dtype.itemsize) * 8
        ashape = tuple(int(d) for d in x.shape)
        kind = "numpy"
        sig = _numpy_sig(x)
    else:
        raise WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "a mirror's targets are torch tensors or numpy "
                             "arrays, not %s" % type(x).__name__, tensor=name)
    if dtype is not None:
        dt = dtype
    if BITS[dt] != width_bits:
        raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%s elements are %d bits, the %s's are %d"
                         % (dt, BITS[dt], kind, width_bits), tensor=name)
    shape = _shape(name, ashape if shape is None else shape)
    n = 1
    for d in ashape:
        n *= d
    nbytes = _nbytes(dt, shape)
    if nbytes != n * width_bits // 8:
        raise WsyncError("WSYNC_ERR_SIZE_MISMATCH", "%s %s needs %d bytes, the %s has %d"
                         % (dt, list(shape), nbytes, kind, n * width_bits // 8), tensor=name)
    width = width_bits // 8
    if kind == "torch":
        import torch
        flat = x.detach().view(-1)
        if width in _TORCH_RAW:
            flat = flat.view(getattr(torch, _TORCH_RAW[width]))
        device = x.device
    else:
        flat = x.reshape(-1)
        if width in (1, 2, 4, 8):
            flat = flat.view("<u%d" % width)
        device = "cpu"
    if width not in (1, 2, 4, 8):
        raise WsyncError("WSYNC_ERR_UNSUPPORTED", "%d-byte elements in a mirror's target" % width, tensor=name)
    return Target(Tensor(name, dt, shape, None, nbytes, None, x, sig), x, kind, width, flat, device)


def describe_targets(tensors):
    """Targets from a mapping name -> tensor (or pairs), in its order."""
    items = pairs(tensors)
    out, seen = [], set()
    for name, x in items:
        t = describe_target(name, x)
        if name in seen:
            raise WsyncError("WSYNC_ERR_DUPLICATE_KEY", "tensor %r given twice" % name, tensor=name)
        seen.add(name)
        out.append(t)
    check_overlaps(out)
    return out


def check_overlaps(targets):
    """Refuses engine tensors whose memory partly overlaps (a take would
    write one tensor's values into another's); exactly aliased ones (tied
    embeddings: the same address, bytes and dtype under two names) are
    fine, both are handed the same values."""
    spans = []
    for t in targets:
        if t.t.nbytes and t.t.sig is not None:
            dev = str(t.device) if t.kind == "torch" else "cpu"
            spans.append((dev, t.t.sig[0], t.t.sig[0] + t.t.nbytes, t))
    spans.sort(key=lambda s: (s[0], s[1], s[2]))
    reach = None                   # the span reaching furthest so far on this device
    for dev, beg, end, t in spans:
        if reach is not None and reach[0] == dev and reach[2] > beg:
            _, b0, e0, t0 = reach
            if not (b0 == beg and e0 == end and t0.t.dtype == t.t.dtype):
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT",
                                      "tensors %r and %r overlap in memory without being the same tensor "
                                      "(%r: %d bytes at 0x%x, %r: %d bytes at 0x%x): a take would write one "
                                      "into the other" % (t0.t.name, t.t.name, t0.t.name, e0 - b0, b0,
                                                     t.t.name, end - beg, beg), tensor=t.t.name)
        if reach is None or reach[0] != dev or end > reach[2]:
            reach = (dev, beg, end, t)
    return targets
