"""Engine layouts: the map from checkpoint tensors to an inference engine's
own parameters (wsync.h's engine map, wsync_engine_open), and the take's
callback that hands each parameter its share of the changes.

An engine parameter is the concatenation, along one dim, of slices of
checkpoint tensors taken along that same dim, then `pad` entries along
that dim that are never written. Parameters not in the layout are the
checkpoint tensor of their own name, whole.

    layout = wsync.EngineLayout()
    layout.add("model.layers.0.self_attn.qkv_proj.weight", 0,
               [("model.layers.0.self_attn.q_proj.weight", 0, 1024),
                ("model.layers.0.self_attn.k_proj.weight", 0, 512),
                ("model.layers.0.self_attn.v_proj.weight", 0, 512)])
    sub = wsync.Subscriber(store, engine_params, layout=layout)
    sub.take()                         # scattered into engine_params
    sub.take(on_changes=fn)            # fn(param_name, positions, values)

EngineLayout.tensor_parallel(names_and_shapes, rank, world, rules) builds
the layout of one tensor-parallel rank from a rule table (RULES_QWEN3,
RULES_LLAMA; see their comment), and checks every rank's layout together
(EngineLayout.check_ranks): the ranks split each checkpoint tensor exactly
once. layout.tie(param, source) ties a parameter to another (an lm_head tied
to the embedding, for a checkpoint without lm_head.weight).
"""
import ctypes
import time

from . import _lib, _mirror
from ._errors import WsyncLayoutError, WsyncValueError

# The rule table for Qwen3 and Llama (Llama 2/3, Mistral, Qwen2/2.5, Qwen3
# dense: vLLM's and SGLang's layout for tensor parallelism). Names are
# matched by suffix after the layer prefix ("model.layers.N.").
#
#   fuse     engine parameter  <- checkpoint tensors, concatenated along dim 0,
#                                  each split column-parallel first:
#            self_attn.qkv_proj.weight <- q_proj, k_proj, v_proj (.weight)
#            self_attn.qkv_proj.bias   <- q_proj, k_proj, v_proj (.bias; Qwen2)
#            mlp.gate_up_proj.weight   <- gate_proj, up_proj (.weight)
#   row      split along dim 1 (row-parallel): self_attn.o_proj.weight,
#            mlp.down_proj.weight
#   vocab    split along dim 0 after padding the rows to a multiple of
#            pad_to (64) * world; each rank's padding rows are never written:
#            model.embed_tokens.weight, lm_head.weight
#   (others) replicated, one to one: the norms (input_layernorm,
#            post_attention_layernorm, model.norm, and Qwen3's q_norm and
#            k_norm), row-parallel biases.
#   tie      tied embeddings (tie_word_embeddings: Qwen3-0.6B/1.7B/4B, Llama
#            3.2 1B/3B): a checkpoint without lm_head.weight gets an
#            lm_head.weight parameter tied to model.embed_tokens.weight (the
#            same vocabulary rows and padding). An engine whose lm_head is the
#            embedding's tensor (vLLM's tie_weights: named_parameters() lists
#            it once) leaves it out of engine_params; the tie is then unused.
#
# A column split needs the rows to divide by world (k_proj and v_proj with
# fewer KV heads than ranks, which vLLM replicates, are refused: give a rule
# of your own).
RULES_QWEN3 = {
    "fuse": {
        "self_attn.qkv_proj.weight": ["self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                      "self_attn.v_proj.weight"],
        "self_attn.qkv_proj.bias": ["self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"],
        "mlp.gate_up_proj.weight": ["mlp.gate_proj.weight", "mlp.up_proj.weight"],
    },
    "column": [],
    "row": ["self_attn.o_proj.weight", "mlp.down_proj.weight"],
    "vocab": ["embed_tokens.weight", "lm_head.weight"],
    "pad_to": 64,
    "tie": {"lm_head.weight": "model.embed_tokens.weight"},
}
RULES_LLAMA = RULES_QWEN3


def _suffix(name, suffix):
    """The prefix when name ends with "." + suffix (or is suffix), else None."""
    if name == suffix:
        return ""
    if name.endswith("." + suffix):
        return name[:len(name) - len(suffix)]
    return None


class EngineLayout(object):
    """The map from checkpoint tensors to an engine's parameters (see the
    module's doc). params: name -> (dim, [(checkpoint_name, start, length)],
    pad). shapes: name -> the parameter's shape, when known (tensor_parallel
    sets them, for allocating the engine's tensors). shard: True when the
    layout is one rank's share (the checkpoint tensors are covered only in
    part; tensor_parallel with world > 1)."""

    def __init__(self, shard=False):
        self.params = {}
        self.shapes = {}
        self.ties = {}
        self.shard = bool(shard)

    def add(self, param_name, dim, pieces, pad=0):
        """param_name: the engine's parameter; dim: the dim its pieces are
        concatenated along; pieces: a list of (checkpoint_name, start,
        length), each the checkpoint tensor's slice [start, start + length)
        along dim; pad: trailing entries along dim never written."""
        if not isinstance(param_name, str) or not param_name:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add: param_name must be a non-empty str")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0 or dim > 7:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add(%r): dim %r" % (param_name, dim))
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add(%r): pad %r" % (param_name, pad))
        out = []
        for k, p in enumerate(pieces):
            try:
                name, start, length = p
            except (TypeError, ValueError):
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add(%r): piece %d is not "
                                      "(checkpoint_name, start, length)" % (param_name, k))
            if not isinstance(name, str) or not name or any(
                    isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (start, length)):
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add(%r): piece %d %r"
                                      % (param_name, k, p))
            out.append((name, int(start), int(length)))
        if not out:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add(%r): no pieces (a parameter "
                                  "that is one checkpoint tensor whole needs no entry)" % param_name)
        if param_name in self.params:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.add: %r added twice" % param_name)
        self.params[param_name] = (dim, out, int(pad))
        return self

    def tie(self, param_name, source):
        """Ties param_name to the engine parameter `source` (lm_head.weight
        to model.embed_tokens.weight, with tie_word_embeddings): it gets
        source's pieces, dim and pad, so exactly the changes source gets
        (a source without an entry is the checkpoint tensor of its name,
        whole). The checkpoint need not hold param_name. When the engine's
        tensors lack param_name (one tensor under two names, listed once),
        the tie is left out."""
        for what, v in (("param_name", param_name), ("source", source)):
            if not isinstance(v, str) or not v:
                raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.tie: %s must be a non-empty str"
                                      % what)
        if param_name == source or param_name in self.params or param_name in self.ties:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "EngineLayout.tie(%r, %r): %r has an entry already"
                                  % (param_name, source, param_name))
        self.ties[param_name] = source
        if source in self.params:
            dim, pieces, pad = self.params[source]
            self.params[param_name] = (dim, list(pieces), pad)
        if source in self.shapes:
            self.shapes[param_name] = self.shapes[source]
        return self

    def entry(self, name, shape=None):
        """(dim, pieces, pad) of parameter `name`, or None when it is the
        checkpoint tensor of its name; a tie to a source without an entry
        is resolved with the parameter's shape."""
        if name in self.params:
            return self.params[name]
        src = self.ties.get(name)
        if src is None:
            return None
        e = self.entry(src, shape)
        if e is not None:
            return e
        if not shape:
            raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "layout: parameter %r is tied to %r, a tensor whole: a "
                                   "scalar cannot be tied" % (name, src), tensor=name)
        return (0, [(src, 0, int(shape[0]))], 0)

    def __contains__(self, name):
        return name in self.params

    def __len__(self):
        return len(self.params)

    @classmethod
    def tensor_parallel(cls, names_and_shapes, rank, world, rules=None):
        """One rank's layout for tensor parallelism over `world` ranks.
        names_and_shapes: the checkpoint's (name, shape) pairs (a dict, or a
        state_dict's items with tensors: their shapes are taken). rules: a
        table as RULES_QWEN3 (the default). Every engine parameter's shape
        is in layout.shapes, replicated ones included. Every rank's layout
        is built and checked together (check_ranks): the ranks split each
        checkpoint tensor exactly once, else WsyncLayoutError naming the
        rank, parameter and piece."""
        shapes = _shapes(names_and_shapes)
        if isinstance(world, bool) or not isinstance(world, int) or world < 1 or \
                isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise WsyncValueError("WSYNC_ERR_INVALID_ARGUMENT", "tensor_parallel: rank %r of world %r" % (rank, world))
        lays = [cls._tensor_parallel(shapes, r, world, rules) for r in range(world)]
        cls.check_ranks(lays, shapes)
        return lays[rank]

    @staticmethod
    def check_ranks(layouts, names_and_shapes):
        """Checks every rank's layout together against the checkpoint's
        (name, shape) pairs, as wsync_engine_map_check does in C: each piece
        inside its tensor, one dim per tensor, and the ranks split each
        tensor exactly once: every element held, and two slices either
        disjoint or the same slice (a replica: a norm every rank holds
        whole; two parameters of one rank only when tied). A checkpoint
        tensor that a rank's layout names in no piece and has no entry for
        is held whole by that rank (its parameter of the same name).
        Raises WsyncLayoutError naming the rank, parameter and piece."""
        shapes = _shapes(names_and_shapes)
        layouts = list(layouts)
        held = dict((t, []) for t in shapes)     # tensor -> [(start, length, dim, rank, param, piece)]

        def say(x):
            r, p, k = x[3], x[4], x[5]
            return "rank %d parameter %r %s" % (r, p, "(the whole tensor)" if k is None else "piece %d" % k)
        for r, lay in enumerate(layouts):
            named = set()
            for p in sorted(lay.params):
                dim, pieces, _ = lay.params[p]
                for k, (t, start, length) in enumerate(pieces):
                    s = shapes.get(t)
                    if s is None:
                        raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "rank %d parameter %r piece %d: no checkpoint "
                                               "tensor %r" % (r, p, k, t), tensor=p)
                    if dim >= len(s) or not length or start + length > s[dim]:
                        raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "rank %d parameter %r piece %d: [%d, +%d) along "
                                               "dim %d of tensor %r (shape %r)" % (r, p, k, start, length, dim, t, s),
                                               tensor=p)
                    held[t].append((start, length, dim, r, p, k))
                    named.add(t)
            for t, s in shapes.items():
                if t not in named and t not in lay.params:
                    held[t].append((0, s[0] if s else 1, None, r, t, None))
        for t in sorted(held):
            s = shapes[t]
            xs = held[t]
            dims = set(x[2] for x in xs if x[2] is not None)
            if len(dims) > 1:
                a = [x for x in xs if x[2] is not None]
                b = [x for x in a if x[2] != a[0][2]][0]
                raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "%s: tensor %r sliced along dim %d here and %d by %s"
                                       % (say(b), t, b[2], a[0][2], say(a[0])), tensor=b[4])
            dim = dims.pop() if dims else 0
            n = s[dim] if s else 1

            def span(x):       # a whole tensor is its dim's whole range
                return (0, n) if x[2] is None else (x[0], x[0] + x[1])
            xs = sorted(xs, key=lambda x: (span(x), x[3], x[4]))
            reach, last = 0, None
            for i, x in enumerate(xs):
                a0, a1 = span(x)
                for y in xs[i + 1:]:
                    b0, b1 = span(y)
                    if b0 >= a1:
                        break
                    same = (a0, a1) == (b0, b1)
                    tied = same and x[3] == y[3] and x[4] != y[4] and (
                        layouts[x[3]].ties.get(y[4]) == x[4] or layouts[x[3]].ties.get(x[4]) == y[4] or
                        layouts[x[3]].ties.get(x[4], 0) == layouts[x[3]].ties.get(y[4], 1))
                    if (same and x[3] != y[3]) or tied:
                        continue
                    raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "%s: [%d, %d) of tensor %r along dim %d overlaps %s's "
                                           "[%d, %d) (ranks split a tensor exactly once, or hold the same slice)"
                                           % (say(y), b0, b1, t, dim, say(x), a0, a1), tensor=y[4])
                if a0 > reach:
                    break
                if a1 > reach:
                    reach, last = a1, x
            if reach < n:
                nxt = [x for x in xs if span(x)[0] > reach]
                to = span(nxt[0])[0] if nxt else n
                if last is None and not xs:
                    raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "checkpoint tensor %r is held by no rank" % t, tensor=t)
                raise WsyncLayoutError("WSYNC_ERR_LAYOUT", "checkpoint tensor %r: [%d, %d) along dim %d is held by no "
                                       "rank (%s %s)" % (t, reach, to, dim, say(last if last else nxt[0]),
                                                          "ends there" if last else "starts after it"),
                                       tensor=(last if last else nxt[0])[4])

    @classmethod
    def _tensor_parallel(cls, shapes, rank, world, rules):
        rules = RULES_QWEN3 if rules is None else rules
        lay = cls(shard=world > 1)
        used = set()

        def split(name, dim):
            s = shapes[name]
            if dim >= len(s) or s[dim] % world:
                raise WsyncValueError("WSYNC_ERR_LAYOUT", "tensor_parallel: %r (shape %r) does not split in %d "
                                      "along dim %d" % (name, s, world, dim))
            n = s[dim] // world
            return (name, rank * n, n)

        for name in sorted(shapes):
            for fused, parts in rules.get("fuse", {}).items():
                pre = _suffix(name, parts[0])
                if pre is None or not all(pre + p in shapes for p in parts):
                    continue
                pieces = [split(pre + p, 0) for p in parts]
                shape = list(shapes[name])
                shape[0] = sum(p[2] for p in pieces)
                lay.add(pre + fused, 0, pieces)
                lay.shapes[pre + fused] = tuple(shape)
                used.update(pre + p for p in parts)
        for name in sorted(shapes):
            if name in used:
                continue
            s = shapes[name]
            dim = None
            if any(_suffix(name, x) is not None for x in rules.get("column", [])):
                dim = 0
            elif any(_suffix(name, x) is not None for x in rules.get("row", [])):
                dim = 1
            if dim is not None and world > 1:
                piece = split(name, dim)
                shape = list(s)
                shape[dim] = piece[2]
                lay.add(name, dim, [piece])
                lay.shapes[name] = tuple(shape)
            elif any(_suffix(name, x) is not None for x in rules.get("vocab", [])) and s:
                unit = int(rules.get("pad_to", 64)) * world
                per = -(-s[0] // unit) * unit // world
                start = rank * per
                length = max(0, min(per, s[0] - start))
                if not length:
                    raise WsyncValueError("WSYNC_ERR_LAYOUT", "tensor_parallel: rank %d holds no row of %r (%d rows "
                                          "over %d ranks)" % (rank, name, s[0], world))
                lay.add(name, 0, [(name, start, length)], pad=per - length)
                lay.shapes[name] = (per,) + tuple(s[1:])
            else:
                lay.shapes[name] = tuple(s)
        for target, source in sorted(rules.get("tie", {}).items()):
            if target not in shapes and source in shapes:
                lay.tie(target, source)
        return lay


def _shapes(names_and_shapes):
    """name -> shape tuple, from a dict or (name, shape or tensor) pairs."""
    if isinstance(names_and_shapes, dict):
        names_and_shapes = list(names_and_shapes.items())
    return dict((name, tuple(int(d) for d in getattr(shape, "shape", shape))) for name, shape in names_and_shapes)


def _np_dtype(code):
    """A numpy dtype for a wsync dtype code, or None (bf16, fp8: raw bits)."""
    import numpy as np
    name = _lib.load().wspy_dtype_name(code).decode()
    return {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
            "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32,
            "U64": np.uint64, "BOOL": np.bool_}.get(name)


# Test hook: True routes the CPU torch parameters of an engine map built
# after it through the binding's batched scatter (_mirror.Batch), the CUDA
# parameters' path, instead of wsync's scatter in C.
_BATCH_CPU = False

# wspy_param_fn's index at the take's end call (WSYNC_ENGINE_END_CALL).
_END_CALL = 2 ** 64 - 1


def host_address(t):
    """A CPU target's address (wsync writes it in C), else None (the
    binding's scatter: batched index_copy_ on the device)."""
    if not t.t.nbytes:
        return None
    if t.kind == "numpy":
        return t.flat.ctypes.data
    if t.kind == "torch" and t.device.type == "cpu" and not _BATCH_CPU:
        return t.flat.data_ptr()
    return None


class EngineSink(object):
    """wspy_engine_take's callbacks: each parameter's changes, one call per
    parameter per take (positions ascending: wsync.h's WSYNC_ENGINE_MERGE),
    either to the user's on_changes(param_name, positions, values) or,
    without it, into the engine's tensors. The torch parameters the binding
    scatters (on a device) go through their device's _mirror.Batch (one
    upload per take, flushed at the take's end call, inside
    wspy_engine_take before the engine's step is recorded: a flush that
    fails refuses the take, which wsync hands again, whole, at the next
    one). Those on the first such device are staged by wsync itself: the
    take writes each one's merged positions and values straight into that
    Batch's host buffer (pinned for CUDA) and hands the binding only the
    segments (_stage: upload and scatter when the buffer is full and at the
    end); parameters on other devices come through _call into their Batch.
    Anything else goes through the mirror's per-call scatter (`sink`, a
    _mirror.Sink over the engine's tensors).
    uploads, scatters, staged: the last take's host-to-device copies,
    index_copy_ calls (one per parameter) and bytes uploaded by the
    Batches; stage_s: its seconds staging in Python (parameters on other
    devices; 0 for wsync's own staging, which is inside the take's C time);
    flush_s: uploading and scattering (synchronized)."""

    def __init__(self, targets, sink, limit=None):
        self.targets = targets
        self.sink = sink
        self.on_changes = None
        self.exc = None
        self.batches = {}
        self.batch_of = []
        for t in targets:
            b = None
            if t.kind == "torch" and t.t.nbytes and host_address(t) is None:
                b = self.batches.get(str(t.device))
                if b is None:
                    b = self.batches[str(t.device)] = _mirror.Batch(t.device, limit)
            self.batch_of.append(b)
        # the first device's Batch: staged by wsync (wspy_engine_take's staged, stage_fn)
        self.primary = next(iter(self.batches.values())) if self.batches else None
        self.staged_flags = (ctypes.c_uint8 * max(len(targets), 1))(
            *[1 if b is not None and b is self.primary else 0 for b in self.batch_of])
        self.uploads = self.scatters = self.staged = 0
        self.stage_s = self.flush_s = self._flush_s = 0.0
        self.fn = _lib.PARAM_FN(self._call)
        self.stage_fn = _lib.STAGE_FN(self._stage)

    def take_args(self):
        """wspy_engine_take's staged, stage_fn, buf and cap for a take that
        scatters (no on_changes): NULL, a no-op, NULL, 0 without a primary
        Batch."""
        b = self.primary
        if b is None:
            return None, self.stage_fn, None, 0
        return (ctypes.cast(self.staged_flags, ctypes.c_void_p), self.stage_fn, b.ptr or None,
                min(b.cap, b.limit) if b.ptr else 0)

    def _stage(self, user, segs, nseg, need, buf, cap, used):
        """wspy_stage_fn: the primary Batch's segments (nseg at segs, in its
        host buffer's first used[0] bytes) uploaded and scattered (need 0: the
        take's end; or the next parameter's need bytes would pass the
        Batch's limit), else kept; then room for need bytes, the buffer
        grown (its first used[0] bytes copied), never past the Batch's
        limit: a parameter larger than that is staged in pieces (a segment
        and a scatter each: a first, whole take's largest parameters)."""
        b = self.primary
        try:
            n = int(nseg)
            b.used = int(used[0])
            if n and (not need or b.used + int(need) > b.limit):
                t0 = time.perf_counter()
                arr = (_lib.Seg * n).from_address(segs)
                b.segs = [(self.targets[x.index], int(x.positions), int(x.values), int(x.count)) for x in arr]
                try:
                    b.flush()             # the upload, the scatters, one synchronize; b.used 0
                finally:
                    self._flush_s += time.perf_counter() - t0
            if need:                      # room for need bytes; for more than the limit, the limit (in pieces)
                want = min(b.used + int(need), max(b.limit, b.used))
                if want > b.cap:
                    b._grow(want)
            used[0] = b.used
            buf[0] = b.ptr
            cap[0] = min(b.cap, max(b.limit, b.used))
            b.used = 0                    # the take keeps count of what is staged (b.segs: empty)
            return 0
        except BaseException as e:        # never through C: kept, raised after the take
            b.segs, b.used = [], 0
            if self.exc is None:
                self.exc = e
            return 1

    def _flush(self):
        """Every Batch uploaded and scattered: the first exception, or None."""
        exc = None
        for b in self.batches.values():
            t0 = time.perf_counter()
            try:
                b.flush()
            except BaseException as e:
                if exc is None:
                    exc = e
            self._flush_s += time.perf_counter() - t0
        return exc

    def _call(self, user, index, count, positions, values, width):
        if index == _END_CALL:        # the take's end call: what was staged written now, or the take refused
            exc = self._flush()
            if exc is None:
                return 0
            if self.exc is None:
                self.exc = exc
            return 1
        if self.on_changes is None:
            b = self.batch_of[index] if index < len(self.batch_of) else None
            if b is None:
                return self.sink._call(user, index, 0, count, positions, values, width, 0)
            try:
                t = self.targets[index]
                if width != t.width:
                    raise ValueError("take: parameter %r: %d-byte values for %d-byte elements"
                                     % (t.t.name, width, t.width))
                b.add(t, count, positions, values)
                return 0
            except BaseException as e:   # never through C: kept, raised after the take
                if self.exc is None:
                    self.exc = e
                return 1
        try:
            import numpy as np
            t = self.targets[index]
            n = int(count)
            if width != t.width:
                raise ValueError("take: parameter %r: %d-byte values for %d-byte elements"
                                 % (t.t.name, width, t.width))
            pos = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(positions)) if n else \
                np.zeros(0, np.uint64)
            elems = t.t.nbytes // t.width if t.width else 0
            pos = pos.astype(np.int32 if elems < 2 ** 31 else np.int64)
            raw = np.ctypeslib.as_array((ctypes.c_uint8 * (n * width)).from_address(values)).copy() if n else \
                np.zeros(0, np.uint8)
            if t.kind == "torch":
                import torch
                vals = torch.from_numpy(raw).view(t.obj.dtype if hasattr(t.obj, "dtype") else torch.uint8)
                positions_out = torch.from_numpy(pos)
            else:
                dt = t.flat.dtype if _np_dtype(t.t.code) is None else _np_dtype(t.t.code)
                vals = raw.view(dt)
                positions_out = pos
            self.on_changes(t.t.name, positions_out, vals)
            return 0
        except BaseException as e:   # never through C: kept, raised after the take
            if self.exc is None:
                self.exc = e
            return 1

    def end_take(self):
        """After wspy_engine_take, whatever it returned: the take's
        figures, and its first exception (a callback's, or the end call's
        flush), if any, returned. What a take refused part way had staged
        (no end call came) is written here; wsync hands it again anyway."""
        exc, self.exc = self.exc, None
        self.uploads = self.scatters = self.staged = 0
        self.stage_s = 0.0
        exc1 = self._flush()
        if exc is None:
            exc = exc1
        self.flush_s, self._flush_s = self._flush_s, 0.0
        for b in self.batches.values():
            self.uploads += b.uploads
            self.scatters += b.scatters
            self.staged += b.staged
            self.stage_s += b.stage_s
            b.uploads = b.scatters = b.staged = 0
            b.stage_s = 0.0
        exc2 = self.sink.end_take()
        return exc if exc is not None else exc2
