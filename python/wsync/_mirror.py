"""The engine's side of the mirror subscriber: the callback that wspy_mirror_take
(wsync_mirror_take) calls with each chunk of changes, writing them into the
engine's tensors on their own device.

Per chunk of positions: the positions (uint64, below 2^63) and the raw values
are copied with ctypes.memmove into preallocated CPU staging tensors (pinned
when the engine has CUDA tensors) of the chunk's size, then uploaded and
scattered with index_copy_ into a flat view of the target's raw bits (an
integer view of the element's width, so any dtype's bits travel unchanged):

    flat.index_copy_(0, pos[:n].to(device), vals[:n].to(device))

A whole tensor: its bytes into a CPU staging tensor, then flat.copy_(staging).

An engine map's take batches instead (Batch, for the torch parameters the
binding scatters: those on a device): each call's positions and values are
appended to one host buffer per device (pinned for CUDA, kept across takes),
and after the take (or when BATCH_BYTES are staged) one copy uploads it and
each call's positions and values are scattered from views of the device
buffer, then one synchronize: one upload per take instead of one blocking
upload per call.
Only long-stable torch calls (empty, view(dtype), data_ptr, index_copy_,
copy_, to, pin_memory): PyTorch 1.13 and 2.x. numpy targets: fancy-index
assignment and memmove.

An exception raised here must not unwind through C: it is kept, the callback
returns 1 (the take fails with WSYNC_ERR_SINK, and the next take hands again
everything not handed), and the binding raises it after the take returns.
"""
import ctypes
import time

from . import _lib

_RAW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


class Sink(object):
    """The take's callback for a list of _tensors.Target (by index)."""

    def __init__(self, targets, chunk):
        self.targets = targets
        self.chunk = chunk
        self.exc = None
        self.chunks = 0
        self._pos = None          # torch int64 staging, chunk positions
        self._vals = {}           # width -> torch staging, chunk values
        self._whole = None        # uint8 staging for whole tensors (freed after each take)
        self._pin = False
        for t in targets:
            if t.kind == "torch" and t.device.type == "cuda":
                self._pin = True
        self.fn = _lib.CHANGES_FN(self._call)   # kept alive as long as the Sink

    # -- staging --

    def _empty(self, n, dtype):
        import torch
        x = torch.empty(max(int(n), 1), dtype=dtype)
        if self._pin:
            try:
                x = x.pin_memory()
            except RuntimeError:   # no pinned memory available: pageable works too
                pass
        return x

    def _stage_pos(self):
        import torch
        if self._pos is None:
            self._pos = self._empty(self.chunk, torch.int64)
        return self._pos

    def _stage_vals(self, width):
        import torch
        v = self._vals.get(width)
        if v is None:
            v = self._vals[width] = self._empty(self.chunk, getattr(torch, _RAW[width]))
        return v

    def _stage_whole(self, nbytes):
        import torch
        if self._whole is None or self._whole.numel() < nbytes:
            self._whole = None
            self._whole = self._empty(nbytes, torch.uint8)
        return self._whole

    def end_take(self):
        """After a take: the whole-tensor staging is released (it can be as
        large as the largest tensor); the chunk staging is kept."""
        self._whole = None
        exc, self.exc = self.exc, None
        return exc

    # -- the callback --

    def _call(self, user, index, whole, count, positions, values, width, last):
        try:
            self.chunks += 1
            if index >= len(self.targets):
                raise IndexError("take: tensor index %d of %d" % (index, len(self.targets)))
            t = self.targets[index]
            if width != t.width:
                raise ValueError("take: tensor %r: %d-byte values for %d-byte elements"
                                 % (t.t.name, width, t.width))
            if whole:
                self._whole_tensor(t, count, values)
            elif count:
                if count > self.chunk:
                    raise ValueError("take: a chunk of %d positions (at most %d)" % (count, self.chunk))
                self._positions(t, count, positions, values)
            return 0
        except BaseException as e:  # never through C: kept, raised after the take
            if self.exc is None:
                self.exc = e
            return 1

    def _whole_tensor(self, t, count, values):
        nbytes = int(count) * t.width
        if nbytes != t.t.nbytes:
            raise ValueError("take: tensor %r handed whole with %d bytes, it has %d"
                             % (t.t.name, nbytes, t.t.nbytes))
        if not nbytes:
            return
        if t.kind == "numpy":
            ctypes.memmove(t.obj.__array_interface__["data"][0], values, nbytes)
            return
        import torch
        st = self._stage_whole(nbytes)
        ctypes.memmove(st.data_ptr(), values, nbytes)
        src = st[:nbytes].view(getattr(torch, _RAW[t.width]))
        t.flat.copy_(src.to(t.device))

    def _positions(self, t, count, positions, values):
        n = int(count)
        if t.kind == "numpy":
            import numpy as np
            pos = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(positions))
            vals = np.ctypeslib.as_array((ctypes.c_uint8 * (n * t.width)).from_address(values))
            t.flat[pos] = vals.view(t.flat.dtype)
            return
        pos = self._stage_pos()
        vals = self._stage_vals(t.width)
        ctypes.memmove(pos.data_ptr(), positions, n * 8)
        ctypes.memmove(vals.data_ptr(), values, n * t.width)
        t.flat.index_copy_(0, pos[:n].to(t.device), vals[:n].to(t.device))


# A Batch uploads and scatters when this many bytes are staged (a take's
# larger than this, such as the first, whole one, in several uploads): the
# most pinned host memory and device memory a Batch holds.
BATCH_BYTES = 64 << 20


def _up8(n):
    return (n + 7) & ~7


class Batch(object):
    """One device's share of an engine map's take, batched. add() appends a
    call's positions (int64) and raw values, each at an 8-byte boundary, to
    the host buffer; flush() uploads the buffer with one copy (non_blocking:
    pinned for CUDA), scatters each call with index_copy_ from views of the
    device buffer into its target's raw bits, and synchronizes the device's
    stream once (the host buffer is reused after). Both buffers grow by
    doubling up to `limit` bytes (or one call's size) and are kept across
    takes. A CPU device (_engine._BATCH_CPU, for tests) takes the same path,
    its "device" buffer a second CPU tensor. uploads, scatters, staged: this
    take's counts; stage_s: its seconds in add() (an upload made there when
    the buffer filled included) (all reset by EngineSink.end_take). A
    flush that fails drops what was staged (EngineSink refuses the take at
    its end call: wsync hands it all again)."""

    def __init__(self, device, limit=None):
        self.device = device
        self.limit = BATCH_BYTES if limit is None else int(limit)
        self.cuda = getattr(device, "type", "cpu") == "cuda"
        self.host = self.dev = None
        self.ptr = 0                  # self.host's address
        self.cap = self.used = 0
        self.segs = []                # (target, positions offset, values offset, count), in call order
        self.uploads = self.scatters = self.staged = 0
        self.stage_s = 0.0

    def _grow(self, need):
        import torch
        cap = max(need, min(self.limit, max(2 * self.cap, 1 << 20)))
        dev = torch.empty(cap, dtype=torch.uint8, device=self.device)
        host = None
        if self.cuda:
            try:
                host = torch.empty(cap, dtype=torch.uint8, pin_memory=True)
            except RuntimeError:      # no pinned memory available: pageable works too (a synchronous copy)
                host = None
        if host is None:
            host = torch.empty(cap, dtype=torch.uint8)
        if self.used:
            host[:self.used].copy_(self.host[:self.used])
        self.host, self.dev, self.cap, self.ptr = host, dev, cap, host.data_ptr()

    def add(self, t, count, positions, values):
        """Stages one call's count positions (uint64 below 2^63, at address
        positions) and values (count * t.width bytes) for t.flat."""
        n = int(count)
        if not n:
            return
        t0 = time.perf_counter()
        pb, vb = n * 8, n * t.width
        need = pb + _up8(vb)
        if self.segs and self.used + need > self.limit:
            self.flush()
        if self.used + need > self.cap:
            self._grow(self.used + need)
        at = self.used
        ctypes.memmove(self.ptr + at, positions, pb)
        ctypes.memmove(self.ptr + at + pb, values, vb)
        self.segs.append((t, at, at + pb, n))
        self.used = at + need
        self.stage_s += time.perf_counter() - t0

    def flush(self):
        """Uploads what is staged, scatters it, synchronizes."""
        if not self.segs:
            return
        import torch
        segs, used = self.segs, self.used
        self.segs, self.used = [], 0
        try:
            dev = self.dev[:used]
            dev.copy_(self.host[:used], non_blocking=self.cuda)   # (another device: a blocking copy)
            self.uploads += 1
            self.staged += used
            for t, po, vo, n in segs:
                pos = dev[po:po + n * 8].view(torch.int64)
                vals = dev[vo:vo + n * t.width].view(getattr(torch, _RAW[t.width]))
                t.flat.index_copy_(0, pos, vals)
                self.scatters += 1
        finally:                      # the host buffer is written again only once the copy is done
            if self.cuda:
                torch.cuda.current_stream(self.device).synchronize()
