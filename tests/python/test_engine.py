"""The engine map in Python: wsync.EngineLayout, Subscriber(..., layout=),
take(on_changes=). A Qwen-like checkpoint published step by step; two
tensor-parallel ranks (EngineLayout.tensor_parallel, RULES_QWEN3) with fused
qkv_proj and gate_up_proj, row-parallel o_proj and down_proj and a padded
vocabulary; after every take each rank's parameters must equal the
trainer's tensors fused and sliced, bit for bit. numpy always, torch bf16
where torch is installed. Ends with "summary: N passed, M failed"."""
import os
import shutil
import sys
import tempfile
import unittest

import wsync

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
except ImportError:
    torch = None

need_numpy = unittest.skipIf(np is None, "numpy is not installed for %s" % sys.executable)
need_torch = unittest.skipIf(torch is None, "torch is not installed for %s" % sys.executable)

H, V, L = 16, 250, 2
PRE = "model.layers.%d."


def shapes():
    out = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = PRE % i
        out.update({p + "self_attn.q_proj.weight": (32, H), p + "self_attn.k_proj.weight": (16, H),
                    p + "self_attn.v_proj.weight": (16, H), p + "self_attn.o_proj.weight": (H, 32),
                    p + "self_attn.q_norm.weight": (8,), p + "self_attn.k_norm.weight": (8,),
                    p + "mlp.gate_proj.weight": (48, H), p + "mlp.up_proj.weight": (48, H),
                    p + "mlp.down_proj.weight": (H, 48), p + "input_layernorm.weight": (H,),
                    p + "post_attention_layernorm.weight": (H,)})
    return out


def checkpoint(step, seed=7):
    """The trainer's tensors at step: about 3% of elements change a step."""
    rng = np.random.default_rng(seed)
    sd = dict((k, rng.standard_normal(s).astype(np.float32)) for k, s in sorted(shapes().items()))
    for s in range(1, step + 1):
        r = np.random.default_rng(seed * 1000 + s)
        for k in sorted(sd):
            m = r.random(sd[k].shape) < 0.03
            sd[k] = np.where(m, sd[k] + np.float32(0.5), sd[k]).astype(np.float32)
    return sd


def expected(layout, sd, name):
    """The parameter as the engine should hold it: pieces concatenated, the
    padding zeros (never written)."""
    if name not in layout:
        return sd[name]
    dim, pieces, pad = layout.params[name]
    parts = [np.take(sd[t], range(a, a + n), axis=dim) for t, a, n in pieces]
    if pad:
        shape = list(parts[0].shape)
        shape[dim] = pad
        parts.append(np.zeros(shape, np.float32))
    return np.concatenate(parts, axis=dim)


@need_numpy
class TestEngineLayout(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-engine-")
        self.store = os.path.join(self.dir, "bucket")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_tensor_parallel_rules(self):
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 1, 2, wsync.RULES_QWEN3)
        p = PRE % 0
        self.assertEqual(lay.params[p + "self_attn.qkv_proj.weight"],
                         (0, [(p + "self_attn.q_proj.weight", 16, 16), (p + "self_attn.k_proj.weight", 8, 8),
                              (p + "self_attn.v_proj.weight", 8, 8)], 0))
        self.assertEqual(lay.shapes[p + "self_attn.qkv_proj.weight"], (32, H))
        self.assertEqual(lay.params[p + "mlp.gate_up_proj.weight"][1],
                         [(p + "mlp.gate_proj.weight", 24, 24), (p + "mlp.up_proj.weight", 24, 24)])
        self.assertEqual(lay.params[p + "self_attn.o_proj.weight"], (1, [(p + "self_attn.o_proj.weight", 16, 16)], 0))
        self.assertEqual(lay.params[p + "mlp.down_proj.weight"], (1, [(p + "mlp.down_proj.weight", 24, 24)], 0))
        # 250 rows padded to 256 over 2 ranks: rank 1 holds [128, 250) and 6 padding rows
        self.assertEqual(lay.params["model.embed_tokens.weight"], (0, [("model.embed_tokens.weight", 128, 122)], 6))
        self.assertEqual(lay.shapes["lm_head.weight"], (128, H))
        self.assertEqual(lay.shapes[p + "self_attn.q_norm.weight"], (8,))
        self.assertNotIn(p + "self_attn.q_norm.weight", lay)
        self.assertTrue(lay.shard)
        with self.assertRaises(wsync.WsyncError):
            wsync.EngineLayout.tensor_parallel(shapes(), 0, 3)   # 32 q rows do not split in 3

    def _ranks(self, world=2):
        lays = [wsync.EngineLayout.tensor_parallel(shapes(), r, world) for r in range(world)]
        engines = [dict((k, np.zeros(s, np.float32)) for k, s in sorted(l.shapes.items())) for l in lays]
        return lays, engines

    def test_two_ranks_exact_after_every_take(self):
        lays, engines = self._ranks()
        pub = wsync.Publisher(self.store, anchor_every=6, keep_f32=True)
        pub.publish(0, checkpoint(0))
        subs = [wsync.Subscriber(self.store, engines[r], layout=lays[r]) for r in range(2)]
        try:
            for step in range(0, 9):
                if step:
                    pub.publish(step, checkpoint(step))
                if step in (4, 5):
                    continue            # 6 merges three steps
                sd = checkpoint(step)
                for r in range(2):
                    st = subs[r].sync()     # the mirror to HEAD, then the take through the map
                    self.assertEqual(st.step, step)
                    self.assertGreater(st.take.param_positions, 0)
                    for name, x in engines[r].items():
                        self.assertTrue(np.array_equal(x.view(np.uint32), expected(lays[r], sd, name).view(np.uint32)),
                                        "rank %d step %d %s" % (r, step, name))
            # the same steps through on_changes: a fresh rank catching up in one take, then step by step
            eng1 = dict((k, np.zeros(s, np.float32)) for k, s in sorted(lays[1].shapes.items()))
            with wsync.Subscriber(self.store, eng1, layout=lays[1]) as sub:
                for step in (8, 9, 10):
                    if step > 8:
                        pub.publish(step, checkpoint(step))
                    names = set()

                    def fn(name, positions, values):
                        self.assertEqual(positions.dtype, np.int32)
                        self.assertTrue(np.all(np.diff(positions) > 0))
                        eng1[name].reshape(-1)[positions] = values
                        names.add(name)
                    s0 = sub.step
                    sub_sync_take(sub, fn)
                    sd = checkpoint(step)
                    for name, x in eng1.items():
                        self.assertTrue(np.array_equal(x, expected(lays[1], sd, name)), "%s at %d" % (name, step))
                    self.assertTrue(names)
                    self.assertNotEqual(s0, step)
        finally:
            for s in subs:
                s.close()

    def test_refusals(self):
        pub = wsync.Publisher(self.store, keep_f32=True)
        sd = checkpoint(0)
        pub.publish(0, sd)
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 0, 2)
        eng = dict((k, np.zeros(s, np.float32)) for k, s in sorted(lay.shapes.items()))
        # a rank's share given as a whole model: the part not covered is named
        whole = wsync.EngineLayout()
        whole.params = lay.params
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.Subscriber(self.store, eng, layout=whole)
        self.assertIn("covered by no parameter", str(cm.exception))
        # a parameter smaller than its pieces
        p = PRE % 1 + "self_attn.qkv_proj.weight"
        bad = dict(eng)
        bad[p] = np.zeros((24, H), np.float32)
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.Subscriber(self.store, bad, layout=lay)
        self.assertIn(p, str(cm.exception))
        self.assertIn("smaller than its pieces", str(cm.exception))
        # a dtype mismatch
        bad = dict(eng)
        bad["model.norm.weight"] = np.zeros((H,), np.float64)
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.Subscriber(self.store, bad, layout=lay)
        self.assertIn("model.norm.weight", str(cm.exception))
        # overlapping pieces
        o = wsync.EngineLayout(shard=True)
        o.params = dict(lay.params)
        q = PRE % 0 + "self_attn.q_proj.weight"
        o.params[PRE % 0 + "self_attn.qkv_proj.weight"] = (0, [(q, 0, 8), (q, 4, 8), (q.replace("q_", "k_"), 0, 8),
                                                               (q.replace("q_", "v_"), 0, 8)], 0)
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.Subscriber(self.store, eng, layout=o)
        self.assertIn("overlaps", str(cm.exception))
        self.assertIn("qkv_proj.weight", str(cm.exception))
        # a layout entry for a parameter the engine does not have
        u = wsync.EngineLayout(shard=True)
        u.params = dict(lay.params)
        u.add("nope.weight", 0, [(q, 0, 1)])
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.Subscriber(self.store, eng, layout=u)
        self.assertIn("nope.weight", str(cm.exception))
        # the engine is untouched by every refusal
        self.assertTrue(all(not x.any() for x in eng.values()))
        for bad_args in ((1, 0, [(q, 0, 1)]), ("x", 0, [("a", 0)]), ("x", -1, [(q, 0, 1)]), ("x", 0, [])):
            with self.assertRaises(wsync.WsyncError):
                wsync.EngineLayout().add(*bad_args)

    def test_on_changes_one_call_per_parameter(self):
        """take(on_changes=) calls each parameter that changed once per take,
        positions ascending, however many chunks (chunk=8), pieces and
        tensors fed it: qkv_proj's pieces in the reverse of the tensors'
        order (v, k, q), o_proj in two pieces along dim 1 (its rows
        interleave), a first take that catches up whole and a take merging
        three steps; EngineStats.calls == params == the calls counted."""
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 1, 2)
        p = PRE % 0
        q, o = p + "self_attn.qkv_proj.weight", p + "self_attn.o_proj.weight"
        dim, pieces, pad = lay.params[q]
        lay.params[q] = (dim, list(reversed(pieces)), pad)
        lay.params[o] = (1, [(o, 16, 8), (o, 24, 8)], 0)
        eng = dict((k, np.zeros(s, np.float32)) for k, s in sorted(lay.shapes.items()))
        pub = wsync.Publisher(self.store, keep_f32=True)
        pub.publish(0, checkpoint(0))
        with wsync.Subscriber(self.store, eng, layout=lay, chunk=8) as sub:
            for step in (0, 1, 2, 5):
                for s in range(sub.step + 1 if sub.step is not None else 1, step + 1):
                    pub.publish(s, checkpoint(s))
                calls = {}

                def fn(name, positions, values):
                    calls[name] = calls.get(name, 0) + 1
                    self.assertEqual(positions.dtype, np.int32)
                    self.assertTrue(np.all(np.diff(positions) > 0), name)
                    self.assertEqual(len(positions), len(values))
                    eng[name].reshape(-1)[positions] = values
                st = sub_sync_take(sub, fn)
                self.assertEqual(st.step, step)
                self.assertEqual(sorted(calls.values()), [1] * len(calls), calls)
                self.assertEqual(st.calls, len(calls))
                self.assertEqual(st.params, len(calls))
                self.assertIn(q, calls)
                self.assertIn(o, calls)
                if step == 0:
                    self.assertEqual(len(calls), len(eng))     # the first take: every parameter, whole
                else:
                    self.assertGreater(st.chunks, st.tensors)  # tensors came in several chunks
                sd = checkpoint(step)
                for name, x in eng.items():
                    self.assertTrue(np.array_equal(x.view(np.uint32), expected(lay, sd, name).view(np.uint32)),
                                    "%s at %d" % (name, step))

    def test_failing_on_changes_then_exact(self):
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 0, 2)
        eng = dict((k, np.zeros(s, np.float32)) for k, s in sorted(lay.shapes.items()))
        pub = wsync.Publisher(self.store, keep_f32=True)
        pub.publish(0, checkpoint(0))
        with wsync.Subscriber(self.store, eng, layout=lay) as sub:
            sub.sync()
            pub.publish(1, checkpoint(1))

            def boom(name, positions, values):
                raise RuntimeError("engine refused " + name)
            sub_mirror_sync(sub)
            with self.assertRaises(RuntimeError):
                sub.take(on_changes=boom)
            self.assertIsNone(sub.step)
            st = sub.take()
            self.assertEqual(st.step, 1)
            self.assertGreater(st.param_positions, 0)
            sd = checkpoint(1)
            for name, x in eng.items():
                self.assertTrue(np.array_equal(x, expected(lay, sd, name)), name)


@need_numpy
class TestEngineTiesAndRanks(unittest.TestCase):
    """Tied embeddings through the map, and the ranks' layouts checked
    together (EngineLayout.check_ranks, run by tensor_parallel)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-engine-")
        self.store = os.path.join(self.dir, "bucket")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_tied_embeddings_exact(self):
        """A checkpoint without lm_head.weight (tie_word_embeddings): the
        rules tie lm_head.weight to the embedding. Rank 0's engine has its
        own lm_head tensor, rank 1's has it as the embedding's tensor under
        two names, a third engine (rank 1 again) lacks it (named_parameters()
        lists a tied tensor once). Every take exact: lm_head equals the
        embedding's rows of the rank."""
        sh = dict(shapes())
        del sh["lm_head.weight"]
        lays = [wsync.EngineLayout.tensor_parallel(sh, r, 2) for r in range(2)]
        self.assertEqual(lays[1].ties, {"lm_head.weight": "model.embed_tokens.weight"})
        self.assertEqual(lays[1].params["lm_head.weight"], lays[1].params["model.embed_tokens.weight"])
        self.assertEqual(lays[1].shapes["lm_head.weight"], (128, H))

        def ckpt(step):
            sd = checkpoint(step)
            del sd["lm_head.weight"]
            return sd
        engines = [dict((k, np.zeros(s, np.float32)) for k, s in sorted(lays[r].shapes.items())) for r in range(2)]
        engines[1]["lm_head.weight"] = engines[1]["model.embed_tokens.weight"]     # one tensor, two names
        lone = dict((k, np.zeros(s, np.float32)) for k, s in sorted(lays[1].shapes.items()) if k != "lm_head.weight")
        pub = wsync.Publisher(self.store, anchor_every=5, keep_f32=True)
        pub.publish(0, ckpt(0))
        subs = [wsync.Subscriber(self.store, engines[r], layout=lays[r]) for r in range(2)]
        subs.append(wsync.Subscriber(self.store, lone, layout=lays[1]))
        try:
            for step in range(0, 7):
                if step:
                    pub.publish(step, ckpt(step))
                sd = ckpt(step)
                for i, (eng, lay) in enumerate(((engines[0], lays[0]), (engines[1], lays[1]), (lone, lays[1]))):
                    names = set()

                    def fn(name, positions, values, eng=eng):
                        eng[name].reshape(-1)[positions] = values
                        names.add(name)
                    if i == 0 and step % 2:
                        sub_sync_take(subs[i], fn)      # the engine scatters itself: both names handed
                        self.assertIn("lm_head.weight", names)
                        self.assertIn("model.embed_tokens.weight", names)
                    else:
                        subs[i].sync()
                    self.assertEqual(subs[i].step, step)
                    for name, x in eng.items():
                        self.assertTrue(np.array_equal(x, expected(lay, sd, name)), "%d %s step %d" % (i, name, step))
                self.assertTrue(np.array_equal(engines[0]["lm_head.weight"], engines[0]["model.embed_tokens.weight"]))
        finally:
            for s in subs:
                s.close()
        # a tie by hand to a parameter without an entry (one rank, the embedding whole by name)
        one = wsync.EngineLayout().tie("lm_head.weight", "model.embed_tokens.weight")
        eng = dict((k, np.zeros(s, np.float32)) for k, s in sh.items())
        eng["lm_head.weight"] = np.zeros((V, H), np.float32)
        with wsync.Subscriber(self.store, eng, layout=one) as sub:
            sub.sync()
            sd = ckpt(6)
            self.assertTrue(np.array_equal(eng["lm_head.weight"], sd["model.embed_tokens.weight"]))
            self.assertTrue(all(np.array_equal(eng[k], sd[k]) for k in sd))
        for bad in (("lm_head.weight", "lm_head.weight"), ("", "x"), ("model.embed_tokens.weight", "y")):
            with self.assertRaises(wsync.WsyncError):
                wsync.EngineLayout.tensor_parallel(sh, 0, 2).tie(*bad)

    def test_ranks_split_each_tensor_exactly_once(self):
        sh = shapes()
        lays = [wsync.EngineLayout.tensor_parallel(sh, r, 2) for r in range(2)]
        wsync.EngineLayout.check_ranks(lays, sh)
        wsync.EngineLayout.check_ranks(lays + [wsync.EngineLayout.tensor_parallel(sh, 0, 2)], sh)   # a replica
        qkv = PRE % 1 + "self_attn.qkv_proj.weight"
        q = PRE % 1 + "self_attn.q_proj.weight"
        # overlap: rank 1's q rows [8, 24) onto rank 0's [0, 16)
        dim, pieces, pad = lays[1].params[qkv]
        lays[1].params[qkv] = (dim, [(q, 8, 16)] + pieces[1:], pad)
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.EngineLayout.check_ranks(lays, sh)
        msg = str(cm.exception)
        self.assertIn("rank 1 parameter %r piece 0: [8, 24) of tensor %r along dim 0 overlaps rank 0 parameter %r "
                      "piece 0's [0, 16)" % (qkv, q, qkv), msg)
        lays[1].params[qkv] = (dim, pieces, pad)
        # a gap: rank 1's down_proj columns [0, 24) as rank 0's: [24, 48) is nobody's
        down = PRE % 0 + "mlp.down_proj.weight"
        lays[1].params[down] = (1, [(down, 0, 24)], 0)
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.EngineLayout.check_ranks(lays, sh)
        msg = str(cm.exception)
        self.assertIn("%r: [24, 48) along dim 1 is held by no rank" % down, msg)
        self.assertIn("parameter %r piece 0 ends there" % down, msg)
        lays[1].params[down] = (1, [(down, 24, 24)], 0)
        # a tensor split along another dim by one rank
        lays[1].params[down] = (0, [(down, 0, 8)], 0)
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.EngineLayout.check_ranks(lays, sh)
        self.assertIn("sliced along dim", str(cm.exception))
        lays[1].params[down] = (1, [(down, 24, 24)], 0)
        wsync.EngineLayout.check_ranks(lays, sh)
        # tensor_parallel checks its own output: a rule table fusing q twice
        rules = dict(wsync.RULES_QWEN3)
        rules["fuse"] = {"self_attn.qkv_proj.weight": ["self_attn.q_proj.weight", "self_attn.q_proj.weight",
                                                       "self_attn.k_proj.weight", "self_attn.v_proj.weight"]}
        with self.assertRaises(wsync.WsyncLayoutError) as cm:
            wsync.EngineLayout.tensor_parallel(sh, 0, 2, rules)
        self.assertIn("qkv_proj.weight' piece 1", str(cm.exception))
        self.assertIn("overlaps", str(cm.exception))


def sub_mirror_sync(sub):
    """The mirror to HEAD without a take (the background's part, here in the
    test's thread)."""
    import ctypes
    from wsync import _lib
    st, err = _lib.SyncStats(), _lib.Error()
    with wsync._Guard(sub._handle(), sub._lock) as ptr:
        rc = wsync._L.wspy_mirror_sync(ptr, wsync._STEP_LATEST, ctypes.byref(st), ctypes.byref(err))
    wsync._check(rc, err)


def sub_sync_take(sub, fn):
    sub_mirror_sync(sub)
    return sub.take(on_changes=fn)


@need_torch
class TestEngineTorch(unittest.TestCase):
    def test_bf16_ranks_on_changes_and_scatter(self):
        self._bf16_ranks("cpu")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no CUDA device")
    def test_bf16_ranks_cuda(self):
        """The take through the map into CUDA parameters (the binding's
        scatter: pinned staging, index_copy_ on the device) and on_changes
        scattering itself on the device."""
        self._bf16_ranks("cuda")

    def _bf16_ranks(self, dev):
        d = tempfile.mkdtemp(prefix="wsync-engine-")
        try:
            store = os.path.join(d, "b")
            pub = wsync.Publisher(store)
            lays = [wsync.EngineLayout.tensor_parallel(shapes(), r, 2) for r in range(2)]
            for step in range(4):
                sd = dict((k, torch.from_numpy(v).to(torch.bfloat16)) for k, v in checkpoint(step).items())
                pub.publish(step, sd)
                if step == 0:
                    engs = [dict((k, torch.zeros(s, dtype=torch.bfloat16, device=dev))
                                 for k, s in sorted(l.shapes.items())) for l in lays]
                    subs = [wsync.Subscriber(store, engs[r], layout=lays[r]) for r in range(2)]
                sub_mirror_sync(subs[0])
                sub_mirror_sync(subs[1])
                subs[0].take()

                def fn(name, positions, values, e=engs[1]):
                    assert values.dtype == torch.bfloat16 and positions.dtype == torch.int32
                    e[name].view(-1).index_copy_(0, positions.long().to(dev), values.to(dev))
                subs[1].take(on_changes=fn)
                for r in range(2):
                    ref = dict((k, v.view(torch.int16).numpy()) for k, v in sd.items())
                    for name, x in engs[r].items():
                        want = expected_raw(lays[r], ref, name)
                        self.assertTrue(np.array_equal(x.cpu().view(torch.int16).numpy(), want),
                                        "%s rank %d" % (name, r))
            for s in subs:
                s.close()
        finally:
            shutil.rmtree(d, ignore_errors=True)


class batched_cpu(object):
    """Routes the CPU torch parameters of the engine maps built inside it
    through the binding's batched scatter (the CUDA parameters' path:
    _mirror.Batch), optionally with a staging limit of `limit` bytes."""

    def __init__(self, limit=None):
        self.limit = limit

    def __enter__(self):
        from wsync import _engine, _mirror
        self.old = (_engine._BATCH_CPU, _mirror.BATCH_BYTES)
        _engine._BATCH_CPU = True
        if self.limit is not None:
            _mirror.BATCH_BYTES = self.limit
        return self

    def __exit__(self, *a):
        from wsync import _engine, _mirror
        _engine._BATCH_CPU, _mirror.BATCH_BYTES = self.old


@need_torch
class TestEngineBatched(unittest.TestCase):
    """The binding's batched scatter (CUDA parameters: one pinned host
    buffer, one upload, index_copy_ from views of the device buffer, one
    synchronize), on CPU parameters forced through it (and on CUDA ones
    where a GPU is): after every take each rank's parameters equal the
    trainer's tensors fused and sliced, bit for bit; a take's changes go
    up in one upload (several when the staging limit is reached, as the
    first, whole take does); a failure part way leaves the engine without
    a step and the next take exact."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-engine-")
        self.store = os.path.join(self.dir, "b")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def _steps(self, dev, steps=5, limit=None, tied=False, mixed=False):
        """Two ranks (bf16; mixed: the norms f32, other widths through the
        same buffer), published and taken step by step; checks every take
        and returns the takes' (EngineStats, uploads, scatters, bytes
        staged) per rank."""
        sh = dict(shapes())
        if tied:
            del sh["lm_head.weight"]

        def ckpt(step):
            out = {}
            for k, v in checkpoint(step).items():
                if k in sh:
                    keep32 = mixed and k.endswith("norm.weight")
                    out[k] = torch.from_numpy(v) if keep32 else torch.from_numpy(v).to(torch.bfloat16)
            return out
        lays = [wsync.EngineLayout.tensor_parallel(sh, r, 2) for r in range(2)]
        pub = wsync.Publisher(self.store, anchor_every=4, keep_f32=True)
        seen = [[], []]
        subs = []
        try:
            for step in range(steps):
                sd = ckpt(step)
                pub.publish(step, sd)
                if step == 0:
                    def dtype(lay, k):      # the parameter's pieces' dtype
                        e = lay.entry(k, lay.shapes[k])
                        return sd[e[1][0][0] if e else k].dtype
                    engs = [dict((k, torch.zeros(s, dtype=dtype(l, k), device=dev))
                                 for k, s in sorted(l.shapes.items())) for l in lays]
                    if tied:   # rank 1: lm_head is the embedding's tensor under two names
                        engs[1]["lm_head.weight"] = engs[1]["model.embed_tokens.weight"]
                    with batched_cpu(limit):
                        subs = [wsync.Subscriber(self.store, engs[r], layout=lays[r]) for r in range(2)]
                    for sub in subs:
                        self.assertTrue(sub._sink.batches, "no parameter goes through the batched scatter")
                for r in range(2):
                    st = subs[r].sync()
                    self.assertEqual(st.step, step)
                    k = subs[r]._sink
                    # EngineStats carries the batched scatter's figures
                    self.assertEqual((st.take.uploads, st.take.scatters, st.take.staged),
                                     (k.uploads, k.scatters, k.staged))
                    seen[r].append((st.take, k.uploads, k.scatters, k.staged))
                    if limit is not None:
                        self.assertLessEqual(k.primary.cap, limit)   # the staging never grows past the limit
                    ref = dict((n, v.view(torch.int16 if v.dtype == torch.bfloat16 else torch.int32).numpy())
                               for n, v in sd.items())
                    for name, x in engs[r].items():
                        raw = x.cpu()
                        raw = raw.view(torch.int16 if raw.dtype == torch.bfloat16 else torch.int32).numpy()
                        self.assertTrue(np.array_equal(raw, expected_raw(lays[r], ref, name)),
                                        "%s rank %d step %d" % (name, r, step))
                if tied:
                    self.assertEqual(engs[1]["lm_head.weight"].data_ptr(),
                                     engs[1]["model.embed_tokens.weight"].data_ptr())
        finally:
            for sub in subs:
                sub.close()
        return seen

    def _one_upload_per_take(self, dev):
        seen = self._steps(dev, mixed=True)
        for r in range(2):
            for i, (st, uploads, scatters, staged) in enumerate(seen[r]):
                self.assertGreater(st.param_positions, 0)
                # one index_copy_ per parameter that changed (CPU parameters forced: wsync's C scatter writes
                # none of them; each parameter one call, staged by wsync), all from the one upload
                self.assertEqual(scatters, st.calls, "rank %d take %d" % (r, i))
                self.assertEqual(scatters, st.params, "rank %d take %d" % (r, i))
                self.assertEqual(uploads, 1, "rank %d take %d" % (r, i))
                self.assertEqual((st.uploads, st.scatters, st.staged), (uploads, scatters, staged))
                # positions (8 bytes) and values, each call's values padded to 8 bytes
                self.assertTrue(st.param_bytes <= staged <= st.param_bytes + 7 * st.calls, (staged, st))

    def test_cpu_forced_one_upload_per_take_exact(self):
        self._one_upload_per_take("cpu")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no CUDA device")
    def test_cuda_one_upload_per_take_exact(self):
        """CUDA parameters (the default path there): one pinned upload a
        take, exact after every take (gpu_check.sh runs it)."""
        self._one_upload_per_take("cuda")

    def test_cpu_forced_staging_limit_tied(self):
        """A 512-byte staging limit: each take in several uploads, a
        parameter larger than the limit in pieces (the buffer never grows
        past it), still exact; a tied lm_head that is the embedding's tensor
        gets the same values twice."""
        self._staging_limit_tied("cpu")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no CUDA device")
    def test_cuda_staging_limit_tied(self):
        """The same on CUDA parameters: uploads made inside the take when
        the pinned buffer fills, parameters in pieces (gpu_check.sh runs it)."""
        self._staging_limit_tied("cuda")

    def _staging_limit_tied(self, dev):
        seen = self._steps(dev, limit=512, tied=True)
        for r in range(2):
            for i, (st, uploads, scatters, staged) in enumerate(seen[r]):
                # a parameter larger than the 512 bytes staged in pieces, a scatter each (the first, whole take)
                self.assertEqual(st.calls, st.params)
                self.assertGreaterEqual(scatters, st.params)
                if i == 0:
                    self.assertGreater(scatters, st.params)
                self.assertGreater(uploads, 1)
                self.assertLessEqual(uploads, scatters)
                self.assertTrue(st.param_bytes <= staged <= st.param_bytes + 7 * scatters, (staged, st))

    def test_cpu_forced_failure_mid_take_then_exact(self):
        """The batched scatter fails part way through a take (a 512-byte
        staging limit: the take's second upload, made inside the take when
        the buffer filled, raises): the take raises, the engine has no step,
        the first upload's parameters were written, and the next take makes
        every parameter exact."""
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 0, 2)
        pub = wsync.Publisher(self.store)

        def ckpt(step):
            return dict((k, torch.from_numpy(v).to(torch.bfloat16)) for k, v in checkpoint(step).items())
        pub.publish(0, ckpt(0))
        eng = dict((k, torch.zeros(s, dtype=torch.bfloat16)) for k, s in sorted(lay.shapes.items()))
        with batched_cpu(512):
            sub = wsync.Subscriber(self.store, eng, layout=lay)
        with sub:
            sub.sync()
            pub.publish(1, ckpt(1))
            sub_mirror_sync(sub)
            b = sub._sink.primary
            real, flushes = b.flush, []

            def flush():
                flushes.append([t.t.name for t, _, _, _ in b.segs])
                if len(flushes) == 2:
                    b.segs, b.used = [], 0
                    raise RuntimeError("upload refused at " + flushes[-1][0])
                return real()
            b.flush = flush
            with self.assertRaises(RuntimeError) as cm:
                sub.take()
            self.assertIn(flushes[1][0], str(cm.exception))
            self.assertIsNone(sub.step)
            self.assertEqual(sub._sink.uploads, 1)                   # the first upload, written
            self.assertEqual(sub._sink.scatters, len(flushes[0]))
            del b.flush
            st = sub.take()
            self.assertEqual(st.step, 1)
            self.assertGreater(st.whole_tensors, 0)                 # the refused take's tensors, whole
            ref = dict((k, v.view(torch.int16).numpy()) for k, v in ckpt(1).items())
            for name, x in eng.items():
                self.assertTrue(np.array_equal(x.view(torch.int16).numpy(), expected_raw(lay, ref, name)), name)

    def test_cpu_forced_flush_failure_at_end_then_exact(self):
        """Issue 42: the Batches' upload and scatter (flush) fails at the end
        of a take, after every change was staged: the take raises, the
        engine has not moved to the new step (no step: nothing staged was
        written), and the next take hands every tensor of the refused one
        again, so the parameters are exact (by digest and bit for bit)."""
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 0, 2)
        pub = wsync.Publisher(self.store)

        def ckpt(step):
            return dict((k, torch.from_numpy(v).to(torch.bfloat16)) for k, v in checkpoint(step).items())

        def expected(step):
            ref = dict((k, v.view(torch.int16).numpy()) for k, v in ckpt(step).items())
            return dict((n, torch.from_numpy(np.ascontiguousarray(expected_raw(lay, ref, n))).view(torch.bfloat16))
                        for n in eng)
        pub.publish(0, ckpt(0))
        eng = dict((k, torch.zeros(s, dtype=torch.bfloat16)) for k, s in sorted(lay.shapes.items()))
        with batched_cpu():
            sub = wsync.Subscriber(self.store, eng, layout=lay)
        with sub:
            sub.sync()
            self.assertEqual(sub.step, 0)
            before = wsync.state_digest(eng)
            self.assertEqual(before, wsync.state_digest(expected(0)))
            pub.publish(1, ckpt(1))
            sub_mirror_sync(sub)
            b = list(sub._sink.batches.values())[0]
            real, fails = b.flush, []

            def flush():
                if not fails:
                    fails.append(len(b.segs))
                    b.segs, b.used = [], 0        # what was staged is lost, as a failed upload loses it
                    raise RuntimeError("upload failed (injected)")
                return real()
            b.flush = flush
            with self.assertRaises(RuntimeError) as cm:
                sub.take()
            self.assertIn("injected", str(cm.exception))
            self.assertTrue(fails and fails[0] > 0, fails)    # the failure came with the take's changes staged
            self.assertNotEqual(sub.step, 1)                   # C did not record the step the engine lacks
            self.assertIsNone(sub.step)
            self.assertEqual(wsync.state_digest(eng), before)  # nothing written
            del b.flush
            st = sub.take()
            self.assertEqual(st.step, 1)
            self.assertEqual(sub.step, 1)
            self.assertGreater(st.whole_tensors, 0)
            self.assertEqual(wsync.state_digest(eng), wsync.state_digest(expected(1)))
            for name, x in expected(1).items():
                self.assertTrue(torch.equal(eng[name].view(torch.int16), x.view(torch.int16)), name)

    def test_moved_parameter_refused_cheaply(self):
        """check_unmoved before every take: a parameter that passed is
        compared by identity (no full check), and one moved (`.data =`),
        freed (storage().resize_(0)), freed and reallocated smaller (glibc
        hands a small one the same address: only the storage's size tells)
        or reshaped after that is refused, naming it, nothing written."""
        from wsync import _tensors
        lay = wsync.EngineLayout.tensor_parallel(shapes(), 1, 2)
        pub = wsync.Publisher(self.store)

        def ckpt(step):
            return dict((k, torch.from_numpy(v).to(torch.bfloat16)) for k, v in checkpoint(step).items())
        pub.publish(0, ckpt(0))
        qkv = PRE % 1 + "self_attn.qkv_proj.weight"
        for how in ("data", "resize0", "shrunk", "reshape"):
            eng = dict((k, torch.nn.Parameter(torch.zeros(s, dtype=torch.bfloat16), requires_grad=False))
                       for k, s in sorted(lay.shapes.items()))
            with wsync.Subscriber(self.store, eng, layout=lay) as sub:
                sub.sync()
                full = _tensors._changed
                n = []

                def counting(x, sig):
                    n.append(1)
                    return full(x, sig)
                _tensors._changed = counting
                try:
                    _tensors.check_unmoved(sub._ts)
                    self.assertEqual(n, [], "a parameter that passed went through the full check again")
                    if how == "data":
                        eng[qkv].data = torch.zeros_like(eng[qkv].data)
                        words = "moved"
                    elif how == "resize0":
                        eng[qkv].data.storage().resize_(0)
                        words = "storage"
                    elif how == "shrunk":     # freed, then reallocated smaller (at the same address or not)
                        eng[qkv].data.storage().resize_(0)
                        eng[qkv].data.storage().resize_(eng[qkv].numel() // 2)
                        words = "storage"
                    else:
                        eng[qkv].data = eng[qkv].data.view(-1)
                        words = "shape"
                    before = dict((k, v.detach().clone()) for k, v in eng.items() if k != qkv)
                    pub.publish(sub.step + 1, ckpt(sub.step + 1))
                    with self.assertRaises(wsync.WsyncError) as cm:
                        sub.sync()
                    self.assertEqual(n, [1], how)     # only the changed one, fully
                finally:
                    _tensors._changed = full
                self.assertEqual(cm.exception.tensor, qkv, how)
                self.assertIn(words, cm.exception.message, how)
                self.assertIn("changed after the Subscriber was built", cm.exception.message)
                for k, v in before.items():
                    self.assertTrue(torch.equal(eng[k].detach(), v), "%s written after %s" % (k, how))


def expected_raw(layout, sd, name):
    if name not in layout:
        return sd[name]
    dim, pieces, pad = layout.params[name]
    parts = [np.take(sd[t], range(a, a + n), axis=dim) for t, a, n in pieces]
    if pad:
        shape = list(parts[0].shape)
        shape[dim] = pad
        parts.append(np.zeros(shape, parts[0].dtype))
    return np.concatenate(parts, axis=dim)


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    runner = unittest.TextTestRunner(verbosity=2 if os.environ.get("CHECK_VERBOSE") else 1, stream=sys.stdout)
    res = runner.run(suite)
    failed = len(res.failures) + len(res.errors)
    passed = res.testsRun - failed - len(res.skipped)
    print("summary: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
