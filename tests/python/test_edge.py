"""Tests of the Python binding at the model's edge (issue 38): targets that
move under the subscriber (share_memory_, storage().resize_(0), set_),
targets given as iterables, lazily conjugated and negated views, the poll
interval, a subscriber built before its store exists, error hints that name
Python calls, HEAD's state digest from Python, tied (aliased) targets,
partial models, wrong shapes, a stale HEAD and a restarted chain.

Run by tests/python/test_python.sh after test_wsync.py; ends with "summary: N
passed, M failed". Whatever could crash the interpreter runs in a child
process, so that a crash is a failed test and not a lost run.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import wsync

try:
    import torch
except ImportError:
    torch = None
try:
    import numpy as np
except ImportError:
    np = None

need_torch = unittest.skipIf(torch is None, "torch is not installed for %s" % sys.executable)
need_numpy = unittest.skipIf(np is None, "numpy is not installed for %s" % sys.executable)

ENCODINGS = ("packed", "packed-max", "trl-v1", "trl-v3")


def bits(t):
    t = t.detach().to("cpu")
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b):
    return set(a) == set(b) and all(torch.equal(bits(a[k]), bits(b[k])) for k in a)


def torch_model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(300, 64, generator=g).to(torch.bfloat16),
        "layers.0.mlp.weight": torch.randn(128, 64, generator=g).to(torch.bfloat16),
        "layers.0.norm.weight": torch.ones(64).to(torch.bfloat16),
        "head.bias": torch.randn(300, generator=g).to(torch.bfloat16),
    }


def torch_step(sd, step, frac=50):
    """Moves about 1/frac of every tensor's elements (an optimizer step).
    Tensors given twice (tied) move once."""
    g = torch.Generator().manual_seed(1000 + step)
    seen = set()
    for t in sd.values():
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        flat = t.view(-1)
        k = max(1, flat.numel() // frac)
        idx = torch.randint(0, flat.numel(), (k,), generator=g)
        vals = flat.index_select(0, idx).float() + torch.randn(k, generator=g) * 0.01
        flat.index_copy_(0, idx, vals.to(flat.dtype))


def zeros_like(sd):
    return dict((k, torch.zeros_like(v)) for k, v in sd.items())


def run_child(code, timeout=120):
    """Runs code in a child interpreter (the same wsync, torch and numpy):
    (exit status, stdout + stderr). A crash is a status of -11 or -6 (or
    139 / 134 from a shell), never this process's."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout, env=dict(os.environ))
    return p.returncode, p.stdout


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-edge.")
        self.store = os.path.join(self.dir, "bucket")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def assertCode(self, code, fn, *args, **kw):
        with self.assertRaises(wsync.WsyncError) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.code, code, str(cm.exception))
        self.assertTrue(cm.exception.message)
        return cm.exception


# ---- targets that move: never a crash, an error that names the tensor ----

@need_torch
class TestMovedTargets(Base):
    """After the subscriber was built, a target's memory moves or is freed:
    every call that lets wsync write or read it raises a WsyncError naming
    the tensor and what changed, and the interpreter lives."""

    def child(self, how, call, mirror=False, numpy=False):
        store = os.path.join(self.dir, "%s-%s-%d-%d" % (how, call, mirror, numpy))
        code = """
            import sys, torch, wsync
            import numpy as np
            store = %r
            g = torch.Generator().manual_seed(5)
            sd = {"a.weight": torch.randn(256, 64, generator=g).to(torch.bfloat16),
                  "b.bias": torch.randn(1000, generator=g).to(torch.bfloat16)}
            pub = wsync.Publisher(store, fsync=False)
            pub.publish(1, sd)
            if %r:
                tg = {"a.weight": torch.zeros(256, 64, dtype=torch.bfloat16),
                      "b.bias": (np.zeros(1000, dtype=np.uint16), "BF16")}
            else:
                tg = {"a.weight": torch.zeros(256, 64, dtype=torch.bfloat16),
                      "b.bias": torch.zeros(1000, dtype=torch.bfloat16)}
            sub = wsync.Subscriber(store, tg, mirror=%r)
            sub.sync()
            sd["a.weight"].view(-1)[::7] += 1
            sd["b.bias"][::3] += 1
            pub.publish(2, sd)
            how, call = %r, %r
            if how == "share_memory_":
                tg["a.weight"].share_memory_()
            elif how == "resize0":
                tg["a.weight"].storage().resize_(0)
            elif how == "set_":
                tg["a.weight"].set_(torch.zeros(256, 64, dtype=torch.bfloat16))
            elif how == "set_strided":
                tg["a.weight"].set_(torch.zeros(64, 256, dtype=torch.bfloat16).t())
            elif how == "numpy_resize":
                tg["b.bias"][0].resize(4000, refcheck=False)
            try:
                if call == "sync":
                    sub.sync()
                elif call == "apply_ready":
                    sub.start(interval_ms=5)
                    import time
                    t0 = time.time()
                    while sub.ready() != 2 and time.time() < t0 + 20:
                        time.sleep(0.01)
                    sub.apply_ready()
                elif call == "set_step":
                    sub.set_step(2)
                elif call == "take":
                    sub.sync()
                elif call == "state_digest":
                    sub.state_digest()
            except wsync.WsyncError as e:
                print("RAISED %%s|%%s|%%s" %% (e.code, e.tensor, e.message))
                sys.exit(0)
            print("NOT RAISED")
            sys.exit(3)
        """ % (store, numpy, mirror, how, call)
        rc, out = run_child(code)
        self.assertEqual(rc, 0, "%s then %s (mirror=%s): exit %d\n%s" % (how, call, mirror, rc, out[-3000:]))
        line = [l for l in out.splitlines() if l.startswith("RAISED ")][-1]
        code, tensor, message = line[7:].split("|", 2)
        return code, tensor, message

    def check(self, how, call, mirror=False, numpy=False, name="a.weight", words=()):
        code, tensor, message = self.child(how, call, mirror, numpy)
        self.assertEqual(tensor, name, message)
        self.assertIn(name, message)
        for w in words:
            self.assertIn(w, message)
        return message

    def test_share_memory_then_sync(self):
        self.check("share_memory_", "sync", words=("moved",))

    def test_resize0_then_sync(self):
        self.check("resize0", "sync", words=("storage",))

    def test_set_then_sync(self):
        self.check("set_", "sync", words=("moved",))

    def test_set_strided_then_sync(self):
        self.check("set_strided", "sync", words=("contiguous",))

    def test_resize0_then_apply_ready(self):
        self.check("resize0", "apply_ready", words=("storage",))

    def test_share_memory_then_apply_ready(self):
        self.check("share_memory_", "apply_ready", words=("moved",))

    def test_resize0_then_set_step_and_digest(self):
        self.check("resize0", "set_step")
        self.check("resize0", "state_digest")

    def test_mirror_resize0_then_take(self):
        self.check("resize0", "take", mirror=True, words=("storage",))

    def test_mirror_share_memory_then_take(self):
        self.check("share_memory_", "take", mirror=True, words=("moved",))

    def test_mirror_set_then_take_and_set_step(self):
        self.check("set_", "take", mirror=True, words=("moved",))
        self.check("resize0", "set_step", mirror=True)

    @need_numpy
    def test_numpy_resized_in_place(self):
        self.check("numpy_resize", "sync", numpy=True, name="b.bias")
        self.check("numpy_resize", "take", mirror=True, numpy=True, name="b.bias")

    def test_freed_input_to_publisher_and_digest(self):
        rc, out = run_child("""
            import torch, wsync, sys
            t = torch.zeros(1000, dtype=torch.bfloat16)
            t.storage().resize_(0)
            n = 0
            for fn in (lambda: wsync.state_digest({"t": t}), lambda: wsync.digest(t),
                       lambda: wsync.Publisher(%r, fsync=False).publish(1, {"t": t}),
                       lambda: wsync.diff({"t": t}, {"t": t})):
                try:
                    fn()
                except wsync.WsyncError as e:
                    assert "storage" in e.message, e.message
                    n += 1
            print("RAISED", n)
        """ % self.store)
        self.assertEqual(rc, 0, out[-3000:])
        self.assertIn("RAISED 4", out)

    def test_unmoved_targets_still_sync(self):
        """share_memory_() before the subscriber is built is fine."""
        sd = torch_model(1)
        tg = zeros_like(sd)
        for v in tg.values():
            v.share_memory_()
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
            sub = wsync.Subscriber(self.store, tg)
            sub.sync()
            self.assertTrue(same(sd, tg))
            sub.close()


# ---- targets given as iterables ----

class Tiny(torch.nn.Module if torch is not None else object):
    def __init__(self, seed=0, tied=False):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.tok_emb = torch.nn.Embedding(96, 32)
        self.proj = torch.nn.Linear(32, 32)
        self.lm_head = torch.nn.Linear(32, 96, bias=False)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        if tied:
            self.lm_head.weight = self.tok_emb.weight
        self.to(torch.bfloat16)


@need_torch
class TestIterables(Base):
    def test_named_parameters_generator(self):
        src = Tiny(1)
        dst = Tiny(2)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, src.named_parameters())          # a generator, read once
            for mirror in (False, True):
                fresh = Tiny(3 + mirror)
                sub = wsync.Subscriber(self.store, fresh.named_parameters(), mirror=mirror)
                self.assertEqual(len(sub.tensors), 4)
                sub.sync()
                self.assertTrue(same(dict(src.named_parameters()), dict(fresh.named_parameters())))
                sub.close()
            sub = wsync.Subscriber(self.store, ((k, v) for k, v in dst.state_dict().items()))
            sub.sync()
            self.assertTrue(same(src.state_dict(), dst.state_dict()))
            self.assertEqual(wsync.state_digest(iter(list(dst.state_dict().items()))),
                             wsync.state_digest(src.state_dict()))
            sub.close()

    def test_no_targets_refused(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, torch_model(1))
        for empty in ({}, [], iter(()), (x for x in ())):
            e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store, empty)
            self.assertIn("no tensors", e.message)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store, {}, mirror=True)


# ---- lazily conjugated and negated views ----

@need_torch
class TestLazyViews(Base):
    def test_publisher_resolves_conj_and_neg(self):
        c = torch.randn(50, dtype=torch.complex64)
        f = torch.randn(40).to(torch.bfloat16)
        lazy = {"c": c.conj(), "f": torch._neg_view(f)}
        self.assertTrue(lazy["c"].is_conj() and lazy["f"].is_neg())
        want = {"c": c.conj().resolve_conj(), "f": -f}
        with wsync.Publisher(self.store, fsync=False) as pub:
            st = pub.publish(1, lazy)
        self.assertEqual(st.state, wsync.state_digest(want))
        self.assertEqual(wsync.state_digest(lazy), wsync.state_digest(want))
        self.assertEqual(wsync.digest(lazy["c"]), wsync.digest(want["c"]))
        tg = {"c": torch.zeros(50, dtype=torch.complex64), "f": torch.zeros(40, dtype=torch.bfloat16)}
        wsync.Subscriber(self.store, tg).sync()
        self.assertTrue(same(want, tg))
        # diff too
        d = wsync.diff(lazy, want)
        self.assertEqual(wsync.inspect(d).delta.changed, 0)

    def test_lazy_views_refused_as_targets(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"c": torch.zeros(50, dtype=torch.complex64), "f": torch.zeros(40)})
        c = torch.zeros(50, dtype=torch.complex64)
        f = torch.zeros(40, dtype=torch.bfloat16)
        for mirror in (False, True):
            e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store,
                                {"c": c.conj(), "f": f}, mirror=mirror)
            self.assertEqual(e.tensor, "c")
            self.assertIn("conj", e.message)
            e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store,
                                {"c": c, "f": torch._neg_view(f)}, mirror=mirror)
            self.assertEqual(e.tensor, "f")
            self.assertIn("neg", e.message)
        e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.apply, b"", {"c": c.conj()})
        self.assertIn("conj", e.message)


# ---- the poll interval ----

@need_torch
class TestInterval(Base):
    def polls(self, sub, seconds):
        p0 = sub.status().polls
        time.sleep(seconds)
        return sub.status().polls - p0

    def test_interval_honoured(self):
        sd = torch_model(2)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
        for mirror in (False, True):
            # the constructor's interval
            with wsync.Subscriber(self.store, zeros_like(sd), interval_ms=20, mirror=mirror) as sub:
                sub.sync()
                sub.start()
                self.assertEqual(sub.status().interval_ms, 20)
                n = self.polls(sub, 1.0)
                self.assertGreaterEqual(n, 20, "mirror=%s: %d polls in 1 s at 20 ms" % (mirror, n))
            # start's, over the constructor's
            with wsync.Subscriber(self.store, zeros_like(sd), mirror=mirror) as sub:
                sub.sync()
                sub.start(30)
                self.assertEqual(sub.status().interval_ms, 30)
                n = self.polls(sub, 1.0)
                self.assertGreaterEqual(n, 15, "mirror=%s: %d polls in 1 s at 30 ms" % (mirror, n))
                self.assertLessEqual(n, 40)
                # a new interval on a running background restarts it
                sub.start(400)
                self.assertEqual(sub.status().interval_ms, 400)
                n = self.polls(sub, 1.0)
                self.assertLessEqual(n, 4, "mirror=%s: %d polls in 1 s at 400 ms" % (mirror, n))
            with wsync.Subscriber(self.store, zeros_like(sd), interval_ms=500, mirror=mirror) as sub:
                sub.start()
                self.assertEqual(sub.status().interval_ms, 500)
                n = self.polls(sub, 1.0)
                self.assertLessEqual(n, 4, "mirror=%s: %d polls in 1 s at 500 ms" % (mirror, n))


# ---- start-up order ----

@need_torch
class TestStartupOrder(Base):
    def test_publisher_creates_parents(self):
        deep = os.path.join(self.dir, "a", "b", "c", "bucket")
        with wsync.Publisher(deep, fsync=False) as pub:
            pub.publish(1, torch_model(1))
        self.assertTrue(os.path.isfile(os.path.join(deep, "HEAD")))

    def test_subscriber_before_the_store(self):
        sd = torch_model(4)
        for mirror in (False, True):
            store = os.path.join(self.dir, "later-%d" % mirror, "bucket")
            tg = zeros_like(sd)
            sub = wsync.Subscriber(store, tg, mirror=mirror)
            self.assertFalse(os.path.exists(store))          # a reader creates nothing
            with self.assertRaises(wsync.WsyncNoStoreError) as cm:
                sub.sync()
            self.assertEqual(cm.exception.code, "WSYNC_ERR_NO_STORE")
            self.assertIsNone(sub.step)
            sub.start(10)
            time.sleep(0.1)
            self.assertTrue(sub.status().running)
            with wsync.Publisher(store, fsync=False) as pub:
                # the store exists, nothing published yet: an empty chain
                with self.assertRaises(wsync.WsyncNotFoundError):
                    sub.sync()
                pub.publish(1, sd)
            deadline = time.time() + 30
            while sub.ready() != 1 and time.time() < deadline:
                time.sleep(0.01)
            self.assertEqual(sub.ready(), 1)
            sub.apply_ready()
            self.assertEqual(sub.step, 1)
            self.assertTrue(same(sd, tg))
            sub.close()


# ---- error hints name Python ----

@need_torch
class TestHints(Base):
    def test_messages_name_python_calls(self):
        sd = torch_model(1)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(5, sd)
            e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, 3, sd)
            self.assertNotIn("wsync_", e.message)
            self.assertIn("pub.head", e.message)
        with open(os.path.join(self.store, "HEAD"), "r+b") as f:
            f.seek(3)
            f.write(b"#")
        e = self.assertCode("WSYNC_ERR_BAD_HEAD", wsync.Publisher, self.store, fsync=False)
        self.assertNotIn("WSYNC_CHAIN_", e.message)
        self.assertIn("new_chain=True", e.message)

    def test_translation_table(self):
        from wsync import _errors
        for c_text, py in (("(wsync_publisher_head, or wsync log, gives HEAD's step)", "pub.head"),
                           ("with WSYNC_CHAIN_NEW_CHAIN (wsync publish --new-chain): it keeps", "new_chain=True"),
                           ("give WSYNC_CHAIN_PARTIAL for a subset", "strict=False"),
                           ("or WSYNC_CHAIN_FOLLOW_RESTART to follow", "follow_restart=True"),
                           ("wsync_subscriber_set_step vouches", "sub.set_step"),
                           ("wsync_subscriber_open arguments", "Subscriber("),
                           ("(wsync_chain_options.spool_dir, else $TMPDIR or /tmp)", "$TMPDIR")):
            out = _errors.python_message(c_text)
            self.assertIn(py, out, c_text)
            self.assertNotIn("wsync_", out.replace("wsync log", ""))
            self.assertNotIn("WSYNC_CHAIN", out)


# ---- HEAD's digest from Python ----

@need_torch
class TestHead(Base):
    def test_head_and_state(self):
        sd = torch_model(7)
        f32 = dict((k, v.float()) for k, v in sd.items())
        with wsync.Publisher(self.store, fsync=False, anchor_every=3) as pub:
            self.assertIsNone(pub.head_state())
            for step in range(1, 6):
                if step > 1:
                    torch_step(sd, step)
                st = pub.publish(step, sd)
                h = wsync.head(self.store)
                self.assertEqual((h.step, h.state), (step, wsync.state_digest(sd)))
                self.assertEqual(h.state, st.state)
                self.assertEqual(h.anchor_step, 1 if step < 4 else 4)
                self.assertEqual(pub.head_state(), (step, st.state))
            self.assertEqual(pub.head, 5)
        # a resumed trainer checks itself against HEAD
        with wsync.Publisher(self.store, fsync=False) as pub:
            self.assertEqual(pub.head_state(), (5, wsync.state_digest(sd)))
        del f32
        self.assertEqual(tuple(wsync.head(self.store))[:3], (5, wsync.state_digest(sd), 4))
        with wsync.Publisher(self.store, prefix="other", fsync=False) as pub:
            pub.publish(9, {"x": torch.ones(4, dtype=torch.bfloat16)})
        self.assertEqual(wsync.head(self.store, prefix="other").step, 9)
        self.assertEqual(wsync.head(self.store).step, 5)

    def test_head_of_missing_and_empty(self):
        with self.assertRaises(wsync.WsyncNoStoreError) as cm:
            wsync.head(os.path.join(self.dir, "none"))
        self.assertEqual(cm.exception.code, "WSYNC_ERR_NO_STORE")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "none")))
        os.makedirs(self.store)
        with self.assertRaises(wsync.WsyncNotFoundError):
            wsync.head(self.store)


# ---- tied (aliased) targets ----

def params_step(m, step, frac=400):
    """A small optimizer-like step on a module's parameters (tied ones once)."""
    with torch.no_grad():
        torch_step(dict(m.named_parameters()), step, frac)


@need_torch
class TestTied(Base):
    """A model whose lm_head.weight is tok_emb.weight: two names, one
    tensor. Trainer and engine both tied; every encoding, plain and mirror,
    several small-change steps: bit-exact, and the state digest the
    trainer's, at every step."""

    def follow(self, enc, mirror):
        store = os.path.join(self.dir, "%s-%d" % (enc, mirror))
        tr = Tiny(11, tied=True)
        eng = Tiny(12, tied=True)
        sd_e = eng.state_dict()
        self.assertEqual(sd_e["tok_emb.weight"].data_ptr(), sd_e["lm_head.weight"].data_ptr())
        with wsync.Publisher(store, fsync=False, encoding=enc, anchor_every=5) as pub, \
                wsync.Subscriber(store, sd_e, mirror=mirror) as sub:
            for step in range(1, 9):
                if step > 1:
                    params_step(tr, step)
                st = pub.publish(step, tr.state_dict())
                self.assertEqual(st.state, wsync.state_digest(tr.state_dict()))
                if step > 1 and step != 6:
                    self.assertTrue(st.wrote_delta and not st.wrote_anchor, "%s step %d" % (enc, step))
                s = sub.sync()
                self.assertEqual((s.step, sub.step), (step, step))
                self.assertTrue(same(tr.state_dict(), eng.state_dict()), "%s mirror=%s step %d" % (enc, mirror, step))
                self.assertEqual(eng.lm_head.weight.data_ptr(), eng.tok_emb.weight.data_ptr())
                self.assertEqual(wsync.state_digest(eng.state_dict()), st.state)
                self.assertEqual(sub.state_digest(), st.state)

    def test_tied_plain_every_encoding(self):
        for enc in ENCODINGS:
            self.follow(enc, False)

    def test_tied_mirror_every_encoding(self):
        for enc in ENCODINGS:
            self.follow(enc, True)

    def test_tied_background(self):
        tr = Tiny(13, tied=True)
        for mirror in (False, True):
            store = os.path.join(self.dir, "bg-%d" % mirror)
            eng = Tiny(14, tied=True)
            with wsync.Publisher(store, fsync=False) as pub, \
                    wsync.Subscriber(store, eng.state_dict(), mirror=mirror, interval_ms=5) as sub:
                pub.publish(1, tr.state_dict())
                sub.sync()
                sub.start()
                for step in range(2, 6):
                    params_step(tr, 100 * mirror + step)
                    st = pub.publish(step, tr.state_dict())
                    deadline = time.time() + 20
                    while sub.ready() != step and time.time() < deadline:
                        time.sleep(0.005)
                    sub.apply_ready()
                    self.assertEqual(sub.step, step)
                    self.assertTrue(same(tr.state_dict(), eng.state_dict()))
                    self.assertEqual(sub.state_digest(), st.state)

    def test_partly_overlapping_targets_refused(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"a": torch.zeros(100, dtype=torch.bfloat16), "b": torch.zeros(60, dtype=torch.bfloat16)})
        buf = torch.zeros(160, dtype=torch.bfloat16)
        for mirror in (False, True):
            e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", lambda: wsync.Subscriber(
                self.store, {"a": buf[:100], "b": buf[60:120]}, mirror=mirror).sync())
            self.assertIn("'a'", e.message.replace('"', "'"))
            self.assertIn("'b'", e.message.replace('"', "'"))
            # side by side in one buffer: fine
            tg = {"a": buf[:100], "b": buf[100:160]}
            with wsync.Subscriber(self.store, tg, mirror=mirror) as sub:
                self.assertEqual(sub.sync().step, 1)


# ---- partial models ----

@need_torch
class TestPartial(Base):
    def test_strict_and_partial(self):
        sd = torch_model(21)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
            for mirror in (False, True):
                part = {"embed.weight": torch.zeros(300, 64, dtype=torch.bfloat16),
                        "head.bias": torch.zeros(300, dtype=torch.bfloat16)}
                sub = wsync.Subscriber(self.store, part, mirror=mirror)
                with self.assertRaises(wsync.WsyncLayoutError) as cm:
                    sub.sync()
                self.assertEqual(cm.exception.code, "WSYNC_ERR_LAYOUT")
                self.assertIn("layers.0", cm.exception.message)    # names a chain tensor not held
                self.assertIn("strict=False", cm.exception.message)  # the Python option, not the C flag
                self.assertNotIn("WSYNC_CHAIN", cm.exception.message)
                self.assertIsNone(sub.step)
                self.assertTrue(all(not v.any() for v in part.values()))   # no byte moved
                sub.close()
                with wsync.Subscriber(self.store, part, mirror=mirror, strict=False) as sub:
                    self.assertEqual(sub.sync().step, pub.head)
                    self.assertTrue(same(dict((k, sd[k]) for k in part), part))
                    torch_step(sd, 2 + mirror)
                    pub.publish(2 + mirror, sd)
                    self.assertEqual(sub.sync().step, 2 + mirror)
                    self.assertTrue(same(dict((k, sd[k]) for k in part), part))

    def test_wrong_shape_message(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, torch_model(22))
        for mirror in (False, True):
            tg = zeros_like(torch_model(22))
            tg["layers.0.mlp.weight"] = torch.zeros(128, 32, dtype=torch.bfloat16)
            sub = wsync.Subscriber(self.store, tg, mirror=mirror)
            with self.assertRaises(wsync.WsyncLayoutError) as cm:
                sub.sync()
            m = cm.exception.message
            self.assertEqual(cm.exception.tensor, "layers.0.mlp.weight")
            self.assertIn("[128, 64]", m)
            self.assertIn("[128, 32]", m)
            self.assertTrue(all(not v.any() for v in tg.values()))
            sub.close()


# ---- a stale HEAD and a restarted chain ----

@need_torch
class TestStaleHead(Base):
    def test_stale_head_refused_targets_stay(self):
        sd = torch_model(31)
        head = os.path.join(self.store, "HEAD")
        for mirror in (False, True):
            store = os.path.join(self.dir, "stale-%d" % mirror)
            head = os.path.join(store, "HEAD")
            with wsync.Publisher(store, fsync=False) as pub:
                tg = zeros_like(sd)
                sub = wsync.Subscriber(store, tg, mirror=mirror)
                pub.publish(1, sd)
                torch_step(sd, 2)
                pub.publish(2, sd)
                with open(head, "rb") as f:
                    old = f.read()
                torch_step(sd, 3)
                st = pub.publish(3, sd)
                self.assertEqual(sub.sync().step, 3)
                at3 = dict((k, v.clone()) for k, v in tg.items())
                with open(head, "wb") as f:       # a stale cached HEAD
                    f.write(old)
                with self.assertRaises(wsync.WsyncStaleHeadError) as cm:
                    sub.sync()
                self.assertEqual(cm.exception.code, "WSYNC_ERR_STALE_HEAD")
                self.assertIn("follow_restart=True", cm.exception.message)
                self.assertEqual(sub.step, 3)
                self.assertTrue(same(at3, tg))
                self.assertEqual(sub.state_digest(), st.state)
                sub.close()

    def test_follow_restart(self):
        for mirror in (False, True):
            store = os.path.join(self.dir, "restart-%d" % mirror)
            sd = torch_model(32)
            tg = zeros_like(sd)
            with wsync.Publisher(store, fsync=False) as pub:
                for step in range(1, 6):
                    if step > 1:
                        torch_step(sd, step)
                    pub.publish(step, sd)
            strict = wsync.Subscriber(store, zeros_like(sd), mirror=mirror)
            follow = wsync.Subscriber(store, tg, mirror=mirror, follow_restart=True)
            self.assertEqual((strict.sync().step, follow.sync().step), (5, 5))
            shutil.rmtree(store)                   # the trainer starts over
            sd2 = torch_model(33)
            with wsync.Publisher(store, fsync=False) as pub:
                pub.publish(1, sd2)
                torch_step(sd2, 2)
                st = pub.publish(2, sd2)
            self.assertRaises(wsync.WsyncStaleHeadError, strict.sync)
            self.assertEqual(strict.step, 5)
            self.assertEqual(follow.sync().step, 2)
            self.assertTrue(same(sd2, tg))
            self.assertEqual(follow.state_digest(), st.state)
            strict.close()
            follow.close()


# ---- what a mirror's take fetched ----

@need_torch
class TestMirrorFetched(Base):
    def test_mirror_stats_say_what_was_fetched(self):
        sd = torch_model(41)
        with wsync.Publisher(self.store, fsync=False) as pub, \
                wsync.Subscriber(self.store, zeros_like(sd), mirror=True, interval_ms=5) as sub:
            pub.publish(1, sd)
            s = sub.sync()
            self.assertEqual((s.take.anchors, s.take.deltas), (1, 0))
            self.assertGreater(s.take.bytes_fetched, 0)
            sub.start()
            for step in (2, 3, 4):
                torch_step(sd, step)
                pub.publish(step, sd)
            deadline = time.time() + 20
            while sub.ready() != 4 and time.time() < deadline:
                time.sleep(0.005)
            s = sub.apply_ready()
            self.assertEqual(s.step, 4)
            self.assertEqual((s.take.anchors, s.take.deltas), (0, 3))
            self.assertEqual((s.anchors, s.deltas), (0, 3))
            self.assertGreater(s.take.bytes_fetched, 0)
            self.assertEqual(s.bytes_fetched, s.take.bytes_fetched)


@need_torch
@unittest.skipIf(torch is None or not torch.cuda.is_available(),
                 "torch.cuda.is_available() is False: no GPU on this machine, the CUDA path has not run here")
class TestCuda(Base):
    """The mirror (the CUDA path) at the edge: tied weights on the GPU,
    overlapping device tensors, a device target moved or freed."""

    def test_tied_on_cuda(self):
        tr = Tiny(51, tied=True)
        eng = Tiny(52, tied=True).to("cuda")
        with wsync.Publisher(self.store, fsync=False) as pub, \
                wsync.Subscriber(self.store, eng.state_dict()) as sub:
            self.assertTrue(sub.mirror)
            for step in range(1, 6):
                if step > 1:
                    params_step(tr, step)
                st = pub.publish(step, tr.state_dict())
                sub.sync()
                self.assertTrue(same(tr.state_dict(), eng.state_dict()), "step %d" % step)
                self.assertEqual(sub.state_digest(), st.state)
                self.assertEqual(wsync.state_digest(eng.state_dict()), st.state)

    def test_overlap_and_moved_on_cuda(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"a": torch.ones(100, dtype=torch.bfloat16), "b": torch.ones(60, dtype=torch.bfloat16)})
        buf = torch.zeros(160, dtype=torch.bfloat16, device="cuda")
        e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store,
                            {"a": buf[:100], "b": buf[60:120]})
        self.assertIn("'b'", e.message)
        tg = {"a": torch.zeros(100, dtype=torch.bfloat16, device="cuda"),
              "b": torch.zeros(60, dtype=torch.bfloat16, device="cuda")}
        sub = wsync.Subscriber(self.store, tg)
        sub.sync()
        tg["a"].set_(torch.zeros(100, dtype=torch.bfloat16, device="cuda"))
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(2, {"a": torch.full((100,), 2.0, dtype=torch.bfloat16),
                            "b": torch.full((60,), 2.0, dtype=torch.bfloat16)})
        e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", sub.sync)
        self.assertEqual(e.tensor, "a")
        self.assertIn("moved", e.message)
        sub.close()
        rc, out = run_child("""
            import torch, wsync, sys
            store = %r
            tg = {"a": torch.zeros(100, dtype=torch.bfloat16, device="cuda"),
                  "b": torch.zeros(60, dtype=torch.bfloat16, device="cuda")}
            sub = wsync.Subscriber(store, tg)
            sub.sync(1)
            tg["a"].storage().resize_(0)
            try:
                sub.sync()
            except wsync.WsyncError as e:
                assert e.tensor == "a" and "storage" in e.message, e.message
                print("RAISED")
        """ % self.store)
        self.assertEqual(rc, 0, out[-3000:])
        self.assertIn("RAISED", out)


class TestErrorClasses(unittest.TestCase):
    def test_classes(self):
        import pickle
        for cls, code in ((wsync.WsyncNoStoreError, "WSYNC_ERR_NO_STORE"),
                          (wsync.WsyncNotFoundError, "WSYNC_ERR_NOT_FOUND"),
                          (wsync.WsyncLayoutError, "WSYNC_ERR_LAYOUT"),
                          (wsync.WsyncStaleHeadError, "WSYNC_ERR_STALE_HEAD")):
            self.assertTrue(issubclass(cls, wsync.WsyncError))
            e = wsync._errors.make(code, "m", "t", 3)
            self.assertIs(type(e), cls)
            e2 = pickle.loads(pickle.dumps(e))
            self.assertIs(type(e2), cls)
            self.assertEqual((e2.code, e2.message, e2.tensor, e2.offset), (code, "m", "t", 3))
        self.assertIs(wsync.WsyncEmptyChainError, wsync.WsyncNotFoundError)
        self.assertIs(type(wsync._errors.make("WSYNC_ERR_CORRUPT", "m")), wsync.WsyncError)


class Result(unittest.TextTestResult):
    pass


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    runner = unittest.TextTestRunner(verbosity=2 if os.environ.get("CHECK_VERBOSE") else 1, stream=sys.stdout)
    r = runner.run(suite)
    for test, why in r.skipped:
        print("skip %s: %s" % (test.id(), why))
    failed = len(r.failures) + len(r.errors)
    passed = r.testsRun - failed - len(r.skipped)
    for test, _ in r.failures + r.errors:
        print("FAIL %s" % test.id())
    print("summary: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
