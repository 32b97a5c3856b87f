"""Tests of the Python binding (python/wsync) over build/libwsync.so.

Run by tests/python/test_python.sh (which picks an interpreter with torch when
there is one); ends with "summary: N passed, M failed". Tests that need
torch or numpy are skipped (and say so) where they are missing; the HTTP
test runs when WSYNC_TEST_HTTP_URL names an nginx WebDAV bucket.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
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


def bits(t):
    """A torch tensor's raw bits, for bit-exact comparisons (NaNs included)."""
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def same(a, b):
    return all(torch.equal(bits(a[k]), bits(b[k])) for k in a) and set(a) == set(b)


def torch_model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(300, 64, generator=g).to(torch.bfloat16),
        "layers.0.mlp.weight": torch.randn(128, 64, generator=g).to(torch.bfloat16),
        "layers.0.norm.weight": torch.ones(64).to(torch.bfloat16),
        "head.bias": torch.randn(300, generator=g).to(torch.bfloat16),
    }


def torch_step(sd, step):
    """Moves about 2% of every tensor's elements, as an optimizer step does."""
    g = torch.Generator().manual_seed(1000 + step)
    for t in sd.values():
        flat = t.view(-1)
        k = max(1, flat.numel() // 50)
        idx = torch.randint(0, flat.numel(), (k,), generator=g)
        vals = flat.index_select(0, idx).float() + torch.randn(k, generator=g) * 0.01
        flat.index_copy_(0, idx, vals.to(torch.bfloat16))


def zeros_like(sd):
    return dict((k, torch.zeros_like(v)) for k, v in sd.items())


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-py.")
        self.store = os.path.join(self.dir, "bucket")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def assertCode(self, code, fn, *args, **kw):
        with self.assertRaises(wsync.WsyncError) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.code, code, str(cm.exception))
        self.assertTrue(cm.exception.message)
        return cm.exception


class TestLibrary(Base):
    def test_loaded(self):
        self.assertEqual(wsync.library_version().count("."), 2)
        self.assertIn(wsync.has_http(), (True, False))
        from wsync import _lib
        lib = _lib.load()
        # CDLL (not PyDLL): ctypes releases the GIL around every call
        self.assertIsInstance(lib, ctypes.CDLL)
        self.assertNotIsInstance(lib, ctypes.PyDLL)

    def test_error_fields(self):
        e = self.assertCode("WSYNC_ERR_TRUNCATED", wsync.inspect, b"\x01\x02")
        self.assertIsNotNone(e.offset)
        self.assertIn("WSYNC_ERR_TRUNCATED", str(e))

    def test_api_shape(self):
        # flags and limits come from the library
        from wsync import _lib
        lib = _lib.load()
        self.assertEqual(wsync.STEP_MAX, _lib.constant(lib, "WSYNC_STEP_MAX"))
        self.assertEqual(wsync.STEP_MAX, 999999999999999)
        self.assertEqual(wsync.ENCODINGS, ("packed", "packed-max", "trl-v1", "trl-v3"))
        self.assertRaises(ImportError, _lib.constant, lib, "WSYNC_NO_SUCH_FLAG")
        from wsync import _tensors
        self.assertEqual((_tensors.DTYPES["BF16"], _tensors.BITS["BF16"], _tensors.BITS["F4"]), (10, 16, 4))
        # WsyncValueError: a wrong value, the binding's check or the library's, is a ValueError
        for fn in (lambda: wsync.Publisher(self.store, anchor_every=-1),
                   lambda: wsync.Publisher(self.store, encoding="zip"),
                   lambda: wsync.Publisher(""),
                   lambda: wsync.diff({}, {}, block_log2=99)):
            with self.assertRaises(ValueError) as cm:
                fn()
            self.assertIsInstance(cm.exception, wsync.WsyncValueError)
            self.assertEqual(cm.exception.code, "WSYNC_ERR_INVALID_ARGUMENT")
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(5, plain(plain_model(0, 1)))
            self.assertRaises(wsync.WsyncValueError, pub.publish, 4, plain(plain_model(0, 1)))  # C's check
        self.assertRaises(ValueError, pub.publish, 6, plain(plain_model(0, 1)))                # closed
        self.assertNotIsInstance(wsync.WsyncTypeError("WSYNC_ERR_INVALID_ARGUMENT", "x"), ValueError)
        # options are keyword-only: a positional one, or a misspelt one, is Python's TypeError
        self.assertRaises(TypeError, wsync.Publisher, self.store, None)
        self.assertRaises(TypeError, wsync.Subscriber, self.store, {"w": bytearray(2)}, None)
        self.assertRaises(TypeError, wsync.Subscriber, self.store, {"w": bytearray(2)}, strcit=False)
        self.assertRaises(TypeError, wsync.diff, {}, {}, "packed")
        self.assertRaises(TypeError, wsync.head, self.store, "prefix")
        # one lifecycle: close twice, with, closed, __del__ after a failed __init__
        for cls, args in ((wsync.Publisher, (self.store,)), (wsync.Subscriber, (self.store, plain(plain_model(0, 1))))):
            o = cls(*args)
            self.assertFalse(o.closed)
            with o as same_o:
                self.assertIs(same_o, o)
            self.assertTrue(o.closed)
            o.close()
            self.assertIsInstance(o, wsync._Closeable)
        self.assertRaises(wsync.WsyncError, wsync.Publisher, "ftp://x/y")  # __del__ of the half-built one is quiet


def plain_model(seed, step):
    """bf16 bits in bytearrays (no torch, no numpy): a pure function of step."""
    import random
    out = {}
    for name, n in (("w", 4096), ("b", 130)):
        rnd = random.Random("%d-%s" % (seed, name))
        vals = [0x3C00 + rnd.randrange(0x300) for _ in range(n)]
        for s in range(2, step + 1):
            r2 = random.Random("%d-%s-%d" % (seed, name, s))
            for _ in range(n // 50 + 1):
                i = r2.randrange(n)
                vals[i] = (vals[i] + 1) & 0xFFFF
        out[name] = bytearray(b"".join(v.to_bytes(2, "little") for v in vals))
    return out


def plain(sd):
    return dict((k, (v, "BF16")) for k, v in sd.items())


class TestPlain(Base):
    """Without torch or numpy: bytearrays as (data, "BF16")."""

    def test_chain_round_trip_errors(self):
        tg = dict((k, bytearray(len(v))) for k, v in plain_model(0, 1).items())
        with wsync.Publisher(self.store, fsync=False, anchor_every=3) as pub:
            sub = wsync.Subscriber(self.store, plain(tg))
            self.assertIsNone(sub.step)
            for step in range(1, 7):
                sd = plain_model(0, step)
                st = pub.publish(step, plain(sd))
                self.assertEqual(sub.sync().step, step)
                self.assertEqual(tg, sd)
                self.assertEqual(wsync.state_digest(plain(tg)), st.state)
            sub.close()
        a, b = plain_model(1, 1), plain_model(1, 2)
        for enc in wsync.ENCODINGS:
            d = wsync.diff(plain(a), plain(b), encoding=enc)
            self.assertEqual(wsync.inspect(d).delta.encoding, enc)
            t = dict((k, bytearray(v)) for k, v in a.items())
            wsync.apply(d, plain(t))
            self.assertEqual(t, b)
        t = dict((k, bytearray(v)) for k, v in a.items())
        self.assertCode("WSYNC_ERR_OUT_OF_BOUNDS", wsync.apply, d[:-3], plain(t))
        self.assertCode("WSYNC_ERR_DIGEST_MISMATCH", wsync.apply, wsync.diff(plain(a), plain(b)),
                        plain(dict((k, bytearray(len(v))) for k, v in a.items())))
        self.assertEqual(t, a)
        self.assertCode("WSYNC_ERR_UNSUPPORTED", wsync.Publisher, "ftp://x/y")
        # a store not there yet: the subscriber opens and waits (WsyncNoStoreError), creating nothing
        missing = wsync.Subscriber(os.path.join(self.dir, "no"), plain(t))
        self.assertCode("WSYNC_ERR_NO_STORE", missing.sync)
        self.assertRaises(wsync.WsyncNoStoreError, missing.sync)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "no")))
        missing.close()
        wrong = {"w": (bytearray(8190), "BF16"), "b": (bytearray(260), "BF16")}
        e = self.assertCode("WSYNC_ERR_LAYOUT", wsync.Subscriber(self.store, wrong).sync)
        self.assertIsInstance(e, wsync.WsyncLayoutError)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store, {"w": bytes(8192)})
        self.assertRaises(wsync.WsyncTypeError, wsync.Subscriber, self.store, {"w": 5})
        self.assertRaises(wsync.WsyncTypeError, wsync.Publisher, None)
        p = wsync.Publisher(self.store, fsync=False)
        p.close()
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", p.publish, 9, plain(a))

    def test_two_threads(self):
        errors = []

        def worker(i):
            try:
                store = os.path.join(self.dir, "t%d" % i)
                tg = dict((k, bytearray(len(v))) for k, v in plain_model(i, 1).items())
                with wsync.Publisher(store, fsync=False) as pub, wsync.Subscriber(store, plain(tg)) as sub:
                    for step in range(1, 9):
                        sd = plain_model(i, step)
                        pub.publish(step, plain(sd))
                        sub.sync()
                        if tg != sd:
                            errors.append("thread %d step %d" % (i, step))
            except Exception as e:
                errors.append(repr(e))

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        self.assertEqual(errors, [])


def tamper_head(path):
    """Alters a signed HEAD as someone who can write the bucket would: an
    object's BLAKE2b-256 changed (pointing HEAD at other bytes) and the
    check (wsync64 of the bytes before it) fixed up to match; the
    signature cannot be."""
    with open(path, "rb") as f:
        t = f.read()
    at = t.index(b'"blake2b":"') + len(b'"blake2b":"')
    t = t[:at] + (b"0" if t[at:at + 1] != b"0" else b"1") + t[at + 1:]
    ck = t.rindex(b'"check":"')
    t = t[:ck] + b'"check":"%016x"}\n' % wsync.digest(t[:ck])
    with open(path, "wb") as f:
        f.write(t)


class TestSigned(Base):
    """Signed chains (issue 46): sign_key, verify_key, WsyncSignatureError;
    plain bytearrays, no torch needed."""

    def setUp(self):
        Base.setUp(self)
        self.key, self.pub = wsync.keygen(os.path.join(self.dir, "trainer"))
        self.other, self.other_pub = wsync.keygen(os.path.join(self.dir, "other"))

    def targets(self):
        return dict((k, bytearray(len(v))) for k, v in plain_model(0, 1).items())

    def publish(self, store, steps, **kw):
        with wsync.Publisher(store, fsync=False, anchor_every=3, **kw) as pub:
            for step in steps:
                pub.publish(step, plain(plain_model(0, step)))

    def test_signed_publish_verified_pull(self):
        self.assertEqual(os.stat(self.key).st_mode & 0o777, 0o600)
        self.assertEqual(len(wsync.public_key(self.key)), 32)
        with open(self.pub) as f:
            self.assertEqual(f.read().split()[-1], wsync.public_key(self.key).hex())
        self.publish(self.store, range(1, 6), sign_key=self.key)          # anchors and deltas
        tg = self.targets()
        with wsync.Subscriber(self.store, plain(tg), verify_key=self.pub) as sub:
            self.assertIsNone(sub.chain_id)
            st = sub.sync(3)
            self.assertEqual((st.step, tg), (3, plain_model(0, 3)))
            self.assertEqual(len(sub.chain_id), 16)
            self.assertEqual(sub.sync().step, 5)
            self.assertEqual(tg, plain_model(0, 5))
            self.assertEqual(wsync.state_digest(plain(tg)), wsync.head(self.store, verify_key=self.pub).state)
            # the trainer continues it, keys as bytes: a 32-byte seed's and a 64-byte secret key's
            with open(self.key) as f:
                seed = bytes.fromhex(f.read().split()[-1])
            self.assertEqual(wsync.public_key(seed), wsync.public_key(self.key))
            with wsync.Publisher(self.store, fsync=False, sign_key=seed) as pub:
                pub.publish(6, plain(plain_model(0, 6)))
            with wsync.Publisher(self.store, fsync=False, sign_key=seed + wsync.public_key(seed)) as pub:
                pub.publish(7, plain(plain_model(0, 7)))
            self.assertEqual(sub.sync().step, 7)
            self.assertEqual(tg, plain_model(0, 7))
        # the public key as bytes, the background prefetch
        tg = self.targets()
        with wsync.Subscriber(self.store, plain(tg), verify_key=wsync.public_key(seed), interval_ms=5) as sub:
            sub.start()
            deadline = time.time() + 20
            while sub.ready() != 7 and time.time() < deadline:
                time.sleep(0.01)
            self.assertEqual(sub.apply_ready().step, 7)
            self.assertEqual(tg, plain_model(0, 7))

    def assertRefused(self, sub, tg, want, step, why):
        e = self.assertCode("WSYNC_ERR_SIGNATURE", sub.sync)
        self.assertIsInstance(e, wsync.WsyncSignatureError)
        self.assertIn(why, e.message)
        self.assertEqual(tg, want)
        self.assertEqual(sub.step, step)
        return e

    def test_refused_targets_unchanged(self):
        unsigned, foreign = os.path.join(self.dir, "unsigned"), os.path.join(self.dir, "foreign")
        self.publish(unsigned, (1, 2))
        self.publish(foreign, (1, 2), sign_key=self.other)
        self.publish(self.store, (1, 2), sign_key=self.key)
        zero = self.targets()
        for store, why in ((unsigned, "not signed"), (foreign, "another key")):
            tg = self.targets()
            with wsync.Subscriber(store, plain(tg), verify_key=self.pub) as sub:
                self.assertRefused(sub, tg, zero, None, why)
            self.assertRaises(wsync.WsyncSignatureError, wsync.head, store, verify_key=self.pub)
        # a HEAD altered after signing, below targets that hold step 2
        tg = self.targets()
        with wsync.Subscriber(self.store, plain(tg), verify_key=self.pub) as sub:
            self.assertEqual(sub.sync().step, 2)
            self.publish(self.store, (3,), sign_key=self.key)
            with open(os.path.join(self.store, "HEAD"), "rb") as f:
                good = f.read()
            tamper_head(os.path.join(self.store, "HEAD"))
            self.assertRefused(sub, tg, plain_model(0, 2), 2, "changed after it was signed")
            sub.start(interval_ms=5)                          # the background refuses it too
            deadline = time.time() + 20
            while sub.status().refused == 0 and (sub.status().last_error is None) and time.time() < deadline:
                time.sleep(0.01)
            self.assertIsInstance(sub.status().last_error, wsync.WsyncSignatureError)
            self.assertIsNone(sub.ready())
            sub.stop()
            self.assertEqual(tg, plain_model(0, 2))
            # a publisher with the key refuses to continue the altered HEAD too
            e = self.assertCode("WSYNC_ERR_SIGNATURE", wsync.Publisher, self.store, fsync=False, sign_key=self.key)
            self.assertIn("new_chain=True", e.message)
            # HEAD restored: followed, then continued
            with open(os.path.join(self.store, "HEAD"), "wb") as f:
                f.write(good)
            self.assertEqual(sub.sync().step, 3)
            self.publish(self.store, (4,), sign_key=self.key)
            self.assertEqual(sub.sync().step, 4)
            self.assertEqual(tg, plain_model(0, 4))
        # publishers: a key on an unsigned chain, no key on a signed one, another key; new_chain=True starts over
        self.assertCode("WSYNC_ERR_SIGNATURE", wsync.Publisher, unsigned, fsync=False, sign_key=self.key)
        e = self.assertCode("WSYNC_ERR_SIGNATURE", wsync.Publisher, self.store, fsync=False)
        self.assertIn("sign_key", e.message)
        self.assertNotIn("wsync_chain_options", e.message)
        self.assertCode("WSYNC_ERR_SIGNATURE", wsync.Publisher, self.store, fsync=False, sign_key=self.other)
        wsync.Publisher(unsigned, fsync=False, sign_key=self.key, new_chain=True).close()

    def test_another_chain_of_the_same_key(self):
        self.publish(self.store, (1, 2), sign_key=self.key)
        tg = self.targets()
        with wsync.Subscriber(self.store, plain(tg), verify_key=self.pub) as sub:
            self.assertEqual(sub.sync().step, 2)
            first = sub.chain_id
            with wsync.Publisher(self.store, fsync=False, sign_key=self.key, new_chain=True) as pub:
                pub.publish(10, plain(plain_model(0, 10)))
            e = self.assertRefused(sub, tg, plain_model(0, 2), 2, "another chain")
            self.assertIn("sub.set_chain_id(None)", e.message)
            self.assertEqual(sub.chain_id, first)
            sub.set_chain_id(None)                            # follow the trainer's new chain
            self.assertEqual(sub.sync().step, 10)
            self.assertEqual(tg, plain_model(0, 10))
            self.assertNotEqual(sub.chain_id, first)
            sub.set_chain_id(first)                           # pinned to the old one: refused again
            self.assertRefused(sub, tg, plain_model(0, 10), 10, "another chain")
            self.assertRaises(wsync.WsyncValueError, sub.set_chain_id, b"short")
            self.assertRaises(wsync.WsyncTypeError, sub.set_chain_id, 5)

    @need_numpy
    def test_mirror_verifies(self):
        self.publish(os.path.join(self.dir, "unsigned"), (1, 2))
        self.publish(self.store, (1, 2), sign_key=self.key)
        for store, ok in ((self.store, True), (os.path.join(self.dir, "unsigned"), False)):
            eng = dict((k, np.zeros(len(v) // 2, dtype=np.uint16)) for k, v in plain_model(0, 1).items())
            with wsync.Subscriber(store, dict((k, (v, "BF16")) for k, v in eng.items()), mirror=True,
                                  verify_key=self.pub) as sub:
                self.assertTrue(sub.mirror)
                if ok:
                    self.assertEqual(sub.sync().step, 2)
                    self.assertEqual(dict((k, v.tobytes()) for k, v in eng.items()),
                                     dict((k, bytes(v)) for k, v in plain_model(0, 2).items()))
                    self.assertEqual(len(sub.chain_id), 16)
                else:
                    self.assertRaises(wsync.WsyncSignatureError, sub.sync)
                    self.assertTrue(all(not v.any() for v in eng.values()))
                    self.assertIsNone(sub.step)

    def test_key_errors(self):
        self.publish(self.store, (1,), sign_key=self.key)
        t = plain(self.targets())
        V, T = wsync.WsyncValueError, wsync.WsyncTypeError
        for bad in (b"", b"x" * 31, b"x" * 33, b"x" * 63, b"x" * 65):
            e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Publisher, self.store, sign_key=bad)
            self.assertIsInstance(e, V)
            self.assertIn("sign_key", e.message)
        seed = os.urandom(32)
        halves = seed + wsync.public_key(os.urandom(32))          # a secret key pasted from two
        e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Publisher, self.store, sign_key=halves)
        self.assertIn("public key of its first 32", e.message)
        self.assertRaises(T, wsync.Publisher, self.store, sign_key=12345)
        self.assertRaises(T, wsync.Subscriber, self.store, t, verify_key=1.5)
        for bad in (b"x" * 31, b"x" * 33):
            self.assertRaises(V, wsync.Subscriber, self.store, t, verify_key=bad)
        e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store, t,
                            verify_key=seed + wsync.public_key(seed))
        self.assertIn("secret key", e.message)
        # key files: each half where the other belongs, a missing file, one others may read
        os.chmod(self.pub, 0o600)         # (a .pub others may read is refused as a secret key first)
        for kw, path, words in (({"sign_key": self.pub}, self.pub, "public key file"),
                                ({"verify_key": self.key}, self.key, "secret key file")):
            fn = (lambda: wsync.Publisher(self.store, fsync=False, **kw)) if "sign_key" in kw else \
                (lambda: wsync.Subscriber(self.store, t, **kw))
            with self.assertRaises(wsync.WsyncError) as cm:
                fn()
            self.assertIn(words, cm.exception.message)
            self.assertIn(path, cm.exception.message)
        os.chmod(self.pub, 0o644)
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.Subscriber(self.store, t, verify_key=os.path.join(self.dir, "none.pub"))
        self.assertIn("none.pub", cm.exception.message)
        os.chmod(self.key, 0o644)
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.Publisher(self.store, fsync=False, sign_key=self.key)
        self.assertIn(self.key, cm.exception.message)
        os.chmod(self.key, 0o600)
        # keygen never replaces a key
        with open(self.key, "rb") as f:
            before = f.read()
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.keygen(os.path.join(self.dir, "trainer"))
        self.assertIn("already exists", cm.exception.message)
        with open(self.key, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertRaises(T, wsync.keygen, 5)
        self.assertRaises(V, wsync.keygen, "")
        self.assertRaises(T, wsync.public_key, None)
        # nothing above touched the chain: it still verifies
        tg = self.targets()
        with wsync.Subscriber(self.store, plain(tg), verify_key=self.pub) as sub:
            self.assertEqual(sub.sync().step, 1)


@need_torch
class TestTorchChain(Base):
    def test_publish_follow_bit_exact(self):
        sd = torch_model()
        targets = zeros_like(sd)
        with wsync.Publisher(self.store, fsync=False, anchor_every=4, retain=4) as pub, \
                wsync.Subscriber(self.store, targets) as sub:
            self.assertIsNone(sub.step)
            self.assertIsNone(pub.head)
            for step in range(1, 11):
                if step > 1:
                    torch_step(sd, step)
                st = pub.publish(step, sd)
                self.assertIsInstance(st, wsync.PublishStats)
                self.assertEqual(st.step, step)
                self.assertEqual(st.wrote_anchor, step == 1 or (step - 1) % 4 == 0)
                if st.wrote_delta:
                    self.assertEqual(st.base_step, step - 1)
                    self.assertGreater(st.changed, 0)
                s = sub.sync()
                self.assertIsInstance(s, wsync.SyncStats)
                self.assertEqual(s.step, step)
                self.assertEqual(sub.step, step)
                self.assertTrue(s.verified)
                self.assertTrue(same(sd, targets), "step %d" % step)
                self.assertEqual(wsync.state_digest(targets), st.state)
            self.assertEqual(pub.head, 10)
            # in place: the subscriber's tensors are the caller's
            self.assertIs(sub.tensors["head.bias"], targets["head.bias"])

    def test_sync_to_a_step_and_from_scratch(self):
        sd = torch_model(1)
        saved = {}
        with wsync.Publisher(self.store, fsync=False) as pub:
            for step in range(1, 6):
                if step > 1:
                    torch_step(sd, step)
                pub.publish(step, sd)
                saved[step] = dict((k, v.clone()) for k, v in sd.items())
        targets = zeros_like(sd)
        sub = wsync.Subscriber(self.store, targets)
        self.assertEqual(sub.sync(3).step, 3)
        self.assertTrue(same(saved[3], targets))
        s = sub.sync()
        self.assertEqual((s.from_step, s.step, s.head_step), (3, 5, 5))
        self.assertTrue(same(saved[5], targets))
        sub.close()
        self.assertTrue(sub.closed)
        # dropped without close: freed at once (no reference cycle), its thread stopped
        import weakref
        sub = wsync.Subscriber(self.store, targets)
        sub.start(interval_ms=5)
        ref = weakref.ref(sub)
        del sub
        self.assertIsNone(ref())

    def test_f32_published_as_bf16(self):
        g = torch.Generator().manual_seed(5)
        w = torch.randn(257, 3, generator=g) * 1e-3
        w[0, 0] = 1.0 + 2 ** -8       # a tie: rounds to even
        w[1, 1] = 1e-40               # a subnormal
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"w": w})
        target = {"w": torch.zeros(257, 3, dtype=torch.bfloat16)}
        wsync.Subscriber(self.store, target).sync()
        self.assertTrue(torch.equal(bits(target["w"]), bits(w.to(torch.bfloat16))))
        # keep_f32 keeps them F32
        other = os.path.join(self.dir, "f32")
        with wsync.Publisher(other, fsync=False, keep_f32=True) as pub:
            pub.publish(1, {"w": w})
        target = {"w": torch.zeros(257, 3)}
        wsync.Subscriber(other, target).sync()
        self.assertTrue(torch.equal(target["w"], w))

    def test_non_contiguous_and_parameters_published(self):
        base = torch.randn(64, 32).to(torch.bfloat16)
        p = torch.nn.Parameter(torch.randn(10).to(torch.bfloat16))
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"t": base.t(), "p": p})
        targets = {"t": torch.zeros(32, 64, dtype=torch.bfloat16), "p": torch.zeros(10, dtype=torch.bfloat16)}
        wsync.Subscriber(self.store, targets).sync()
        self.assertTrue(torch.equal(bits(targets["t"]), bits(base.t().contiguous())))
        self.assertTrue(torch.equal(bits(targets["p"]), bits(p.detach())))

    def test_background_prefetch(self):
        sd = torch_model(2)
        targets = zeros_like(sd)
        pub = wsync.Publisher(self.store, fsync=False)
        pub.publish(1, sd)
        sub = wsync.Subscriber(self.store, targets)
        sub.sync()
        sub.start(interval_ms=10)
        self.assertTrue(sub.status().running)
        for step in range(2, 6):
            torch_step(sd, step)
            pub.publish(step, sd)
            deadline = time.time() + 20
            while sub.ready() != step and time.time() < deadline:
                time.sleep(0.01)
            self.assertEqual(sub.ready(), step)
            self.assertEqual(sub.step, step - 1)   # nothing applied before apply_ready
            s = sub.apply_ready()
            self.assertEqual(s.step, step)
            self.assertTrue(same(sd, targets))
        s = sub.apply_ready()
        self.assertEqual(s.path, "none")
        st = sub.status()
        self.assertTrue(st.running)
        self.assertGreater(st.polls, 0)
        self.assertIsNone(st.last_error)
        sub.stop()
        self.assertFalse(sub.status().running)
        sub.close()
        pub.close()

    def test_round_trip_every_encoding(self):
        base = torch_model(3)
        new = dict((k, v.clone()) for k, v in base.items())
        torch_step(new, 7)
        for enc in wsync.ENCODINGS:
            delta = wsync.diff(base, new, encoding=enc, base_step=6, step=7)
            info = wsync.inspect(delta)
            self.assertEqual(info.size, len(delta))
            self.assertIsNotNone(info.delta, enc)
            self.assertEqual(info.delta.encoding, enc)
            self.assertEqual(info.delta.step, 7)
            self.assertEqual(info.delta.elements, sum(t.numel() for t in base.values()))
            target = dict((k, v.clone()) for k, v in base.items())
            st = wsync.apply(delta, target)
            self.assertEqual(st.changed, info.delta.changed)
            self.assertTrue(same(new, target), enc)
            # and from a file
            path = os.path.join(self.dir, "d." + enc)
            wsync.diff(base, new, encoding=enc, out=path)
            target = dict((k, v.clone()) for k, v in base.items())
            wsync.apply(path, target)
            self.assertTrue(same(new, target), enc)
            self.assertEqual(wsync.inspect(path).delta.encoding, enc)
        # a plain safetensors file: no delta, its tensors listed
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, base)
        anchor = os.path.join(self.store, "anchors", "step_000001.safetensors")
        info = wsync.inspect(anchor)
        self.assertIsNone(info.delta)
        self.assertEqual(sorted(t.name for t in info.tensors), sorted(base))
        for t in info.tensors:
            self.assertEqual(t.dtype, "BF16")
            self.assertEqual(t.shape, tuple(base[t.name].shape))
            with open(anchor, "rb") as f:
                f.seek(t.offset)
                raw = f.read(t.nbytes)
            self.assertEqual(raw, bytes(base[t.name].view(torch.int16).numpy().tobytes()))

    def test_against_the_cli(self):
        """Every encoding: the binding's delta is byte-identical to the C
        tool's for the same files, and each applies the other's."""
        tool = os.environ.get("WSYNC_TOOL")
        if not tool or not os.path.exists(tool):
            self.skipTest("WSYNC_TOOL (the wsync tool) not given")
        base = torch_model(4)
        new = dict((k, v.clone()) for k, v in base.items())
        torch_step(new, 2)
        files = []
        for i, sd in enumerate((base, new)):
            store = os.path.join(self.dir, "m%d" % i)
            with wsync.Publisher(store, fsync=False) as pub:
                pub.publish(1, sd)
            files.append(os.path.join(store, "anchors", "step_000001.safetensors"))
        run = lambda *a: subprocess.run([tool] + list(a), capture_output=True, text=True)
        for enc in wsync.ENCODINGS:
            cli = os.path.join(self.dir, "cli." + enc)
            r = run("diff", files[0], files[1], "-o", cli, "--encoding", enc, "--base-step", "1", "--step", "2")
            self.assertEqual(r.returncode, 0, r.stderr)
            mine = wsync.diff(base, new, encoding=enc, base_step=1, step=2)
            with open(cli, "rb") as f:
                self.assertEqual(f.read(), mine, enc)
            t = dict((k, v.clone()) for k, v in base.items())
            wsync.apply(cli, t)
            self.assertTrue(same(new, t), enc)
            py = os.path.join(self.dir, "py." + enc)
            with open(py, "wb") as f:
                f.write(mine)
            out = os.path.join(self.dir, "out." + enc)
            r = run("apply", files[0], py, "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run("verify", out, files[1])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


@need_torch
class TestTorchErrors(Base):
    def setUp(self):
        Base.setUp(self)
        self.sd = torch_model(6)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, self.sd)
            self.step1 = dict((k, v.clone()) for k, v in self.sd.items())
            torch_step(self.sd, 2)
            pub.publish(2, self.sd)

    def test_malformed_delta_leaves_targets_alone(self):
        base = dict((k, v.clone()) for k, v in self.sd.items())
        new = dict((k, v.clone()) for k, v in base.items())
        torch_step(new, 3)
        delta = bytearray(wsync.diff(base, new))
        before = dict((k, v.clone()) for k, v in base.items())
        self.assertCode("WSYNC_ERR_OUT_OF_BOUNDS", wsync.apply, bytes(delta[:-5]), base)
        self.assertCode("WSYNC_ERR_TRUNCATED", wsync.apply, bytes(delta[:5]), base)
        # a flipped byte inside the largest tensor's stream
        big = max(wsync.inspect(bytes(delta)).tensors, key=lambda t: t.nbytes)
        bad = bytearray(delta)
        bad[big.offset + big.nbytes - 3] ^= 0x5A
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.apply(bytes(bad), base)
        self.assertIn(cm.exception.code, ("WSYNC_ERR_CORRUPT", "WSYNC_ERR_DIGEST_MISMATCH", "WSYNC_ERR_OUT_OF_BOUNDS"))
        self.assertEqual(cm.exception.tensor, big.name)
        self.assertIsNotNone(cm.exception.tensor)
        self.assertCode("WSYNC_ERR_INVALID_JSON", wsync.apply, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all", base)
        # applied to the wrong base: the base digest refuses it
        self.assertCode("WSYNC_ERR_DIGEST_MISMATCH", wsync.apply, bytes(delta), zeros_like(base))
        self.assertTrue(same(before, base))
        self.assertCode("WSYNC_ERR_TRUNCATED", wsync.inspect, b"")
        self.assertCode("WSYNC_ERR_IO", wsync.inspect, os.path.join(self.dir, "missing"))

    def test_corrupt_object_in_store(self):
        p = os.path.join(self.store, "deltas", "step_000002.safetensors")
        with open(p, "r+b") as f:
            f.seek(-20, 2)
            b = f.read(1)
            f.seek(-20, 2)
            f.write(bytes([b[0] ^ 0xFF]))
        targets = zeros_like(self.sd)
        sub = wsync.Subscriber(self.store, targets)
        with self.assertRaises(wsync.WsyncError) as cm:
            sub.sync(2)
        self.assertTrue(cm.exception.code.startswith("WSYNC_ERR_"))
        self.assertEqual(sub.step, 1)   # the last published step reached, never a mixture
        self.assertTrue(same(self.step1, targets))

    def test_wrong_stores(self):
        t = {"head.bias": torch.zeros(300, dtype=torch.bfloat16)}
        self.assertCode("WSYNC_ERR_UNSUPPORTED", wsync.Subscriber, "ftp://host/x", t)
        self.assertCode("WSYNC_ERR_UNSUPPORTED", wsync.Publisher, "gopher://host/x")
        self.assertCode("WSYNC_ERR_NO_STORE", wsync.Subscriber(os.path.join(self.dir, "none"), t).sync)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Publisher, "")
        env = dict(os.environ)
        try:
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                os.environ.pop(k, None)
            code = "WSYNC_ERR_INVALID_ARGUMENT" if wsync.has_http() else "WSYNC_ERR_UNSUPPORTED"
            self.assertCode(code, wsync.Publisher, "s3://bucket/prefix")
        finally:
            os.environ.clear()
            os.environ.update(env)
        if wsync.has_http():
            sub = wsync.Subscriber("http://127.0.0.1:1/x", t)
            self.assertCode("WSYNC_ERR_IO", sub.sync)
        else:
            self.assertCode("WSYNC_ERR_UNSUPPORTED", wsync.Subscriber, "http://127.0.0.1:1/x", t)

    def test_wrong_targets(self):
        wrong_shape = zeros_like(self.sd)
        wrong_shape["embed.weight"] = torch.zeros(300, 63, dtype=torch.bfloat16)
        sub = wsync.Subscriber(self.store, wrong_shape)
        e = self.assertCode("WSYNC_ERR_LAYOUT", sub.sync)
        self.assertIn("embed.weight", e.message)
        self.assertIn("[300, 64]", e.message)      # expected and actual shapes
        self.assertIn("[300, 63]", e.message)
        self.assertTrue(all(float(v.float().abs().sum()) == 0 for v in wrong_shape.values()))
        wrong_dtype = zeros_like(self.sd)
        wrong_dtype["head.bias"] = torch.zeros(300, dtype=torch.float16)
        e = self.assertCode("WSYNC_ERR_LAYOUT", wsync.Subscriber(self.store, wrong_dtype).sync)
        self.assertIn("BF16", e.message)
        self.assertIn("F16", e.message.replace("BF16", ""))
        extra = zeros_like(self.sd)
        extra["more"] = torch.zeros(3, dtype=torch.bfloat16)
        e = self.assertCode("WSYNC_ERR_LAYOUT", wsync.Subscriber(self.store, extra).sync)
        self.assertEqual(e.tensor, "more")
        # refused before C sees them
        nc = zeros_like(self.sd)
        nc["embed.weight"] = torch.zeros(64, 300, dtype=torch.bfloat16).t()
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store, nc)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.apply, b"", nc)
        self.assertCode("WSYNC_ERR_UNKNOWN_DTYPE", wsync.Subscriber, self.store,
                        {"x": torch.zeros(3, dtype=torch.complex128)})
        with self.assertRaises(wsync.WsyncUnsupportedError) as cm:
            wsync.Subscriber(self.store, {"x": torch.zeros(3, dtype=torch.bfloat16, device="meta")})
        self.assertEqual(cm.exception.code, "WSYNC_ERR_UNSUPPORTED")
        self.assertIsInstance(cm.exception, NotImplementedError)
        if torch.cuda.is_available():   # mirror=False: a device tensor is not patched in place
            with self.assertRaises(wsync.WsyncUnsupportedError):
                wsync.Subscriber(self.store, {"x": torch.zeros(3, dtype=torch.bfloat16, device="cuda")},
                                 mirror=False)
        # diff's inputs must agree
        a = {"x": torch.zeros(4, dtype=torch.bfloat16)}
        self.assertCode("WSYNC_ERR_SIZE_MISMATCH", wsync.diff, a, {"x": torch.zeros(5, dtype=torch.bfloat16)})
        self.assertCode("WSYNC_ERR_SIZE_MISMATCH", wsync.diff, a, {"x": torch.zeros(4, dtype=torch.float16)})
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.diff, a, {"y": torch.zeros(4, dtype=torch.bfloat16)})
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.diff, a, a, encoding="zip")

    def test_wrong_types_and_closed(self):
        T = wsync.WsyncTypeError
        self.assertRaises(T, wsync.Publisher, 123)
        self.assertRaises(TypeError, wsync.Publisher, self.store, nosuch=1)   # keyword-only, checked by Python
        self.assertRaises(T, wsync.Publisher, self.store, anchor_every="3")
        self.assertRaises(T, wsync.Publisher, self.store, keep_f32=1)
        pub = wsync.Publisher(self.store, fsync=False)
        self.assertRaises(T, pub.publish, "3", self.sd)
        self.assertRaises(T, pub.publish, 3.0, self.sd)
        self.assertRaises(T, pub.publish, True, self.sd)
        self.assertRaises(T, pub.publish, 3, [1, 2])
        self.assertRaises(T, pub.publish, 3, 5)
        self.assertRaises(T, pub.publish, 3, {"a": None})
        self.assertRaises(T, pub.publish, 3, {"a": 1.5})
        self.assertRaises(T, pub.publish, 3, {1: torch.zeros(2)})
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, 3, {"": torch.zeros(2)})
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, 3, {"a\x00b": torch.zeros(2)})
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, -1, self.sd)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, 10 ** 15, self.sd)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, 2, self.sd)  # not after HEAD
        self.assertCode("WSYNC_ERR_UNKNOWN_DTYPE", pub.publish, 3, {"a": (b"ab", "BF17")})
        self.assertCode("WSYNC_ERR_SIZE_MISMATCH", pub.publish, 3, {"a": (b"abc", "BF16")})
        self.assertCode("WSYNC_ERR_SIZE_MISMATCH", pub.publish, 3, {"a": (b"abcd", "BF16", (3,))})
        pub.close()
        pub.close()
        e = self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", pub.publish, 3, self.sd)
        self.assertIn("closed", e.message)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", lambda: pub.head)
        targets = zeros_like(self.sd)
        sub = wsync.Subscriber(self.store, targets)
        self.assertRaises(T, sub.sync, "latest")
        self.assertRaises(T, sub.start, interval_ms="fast")
        self.assertRaises(T, wsync.Subscriber, self.store, targets, verify_state="yes")
        self.assertRaises(T, wsync.Subscriber, self.store, [torch.zeros(3)])
        self.assertRaises(T, wsync.apply, 42, targets)
        self.assertRaises(T, wsync.inspect, 42)
        sub.close()
        for fn in (sub.sync, sub.apply_ready, sub.ready, sub.status, sub.start, sub.stop,
                   lambda: sub.step, lambda: sub.set_step(1)):
            self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", fn)
        with wsync.Subscriber(self.store, targets, verify_state=True) as sub:
            self.assertEqual(sub.sync().step, 2)
        self.assertTrue(sub.closed)


@need_numpy
class TestNumpyAndBuffers(Base):
    def test_numpy_bf16_chain(self):
        rng = np.random.default_rng(0)
        sd = {"w": rng.integers(0x3c00, 0x3f80, size=(200, 33), dtype=np.uint16),
              "b": rng.integers(0x3c00, 0x3f80, size=(77,), dtype=np.uint16)}
        tg = dict((k, np.zeros_like(v)) for k, v in sd.items())
        with wsync.Publisher(self.store, fsync=False) as pub:
            sub = wsync.Subscriber(self.store, dict((k, (v, "BF16")) for k, v in tg.items()))
            for step in range(1, 6):
                if step > 1:
                    idx = rng.integers(0, sd["w"].size, size=100)
                    sd["w"].reshape(-1)[idx] += 1
                st = pub.publish(step, dict((k, (v, "BF16")) for k, v in sd.items()))
                self.assertEqual(sub.sync().step, step)
                for k in sd:
                    self.assertTrue(np.array_equal(sd[k], tg[k]), k)
                self.assertEqual(wsync.state_digest(dict((k, (v, "BF16")) for k, v in tg.items())), st.state)
            sub.close()
        info = wsync.inspect(os.path.join(self.store, "anchors", "step_000001.safetensors"))
        self.assertEqual(set(t.dtype for t in info.tensors), {"BF16"})

    def test_numpy_f32_to_bf16_and_other_dtypes(self):
        x = np.array([1.0, 1.0 + 2 ** -8, -3.5, 1e-40], dtype=np.float32)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"x": x, "i": np.arange(10, dtype=np.int64), "h": np.ones(4, dtype=np.float16)})
        tx = np.zeros(4, dtype=np.uint16)
        ti = np.zeros(10, dtype=np.int64)
        th = np.zeros(4, dtype=np.float16)
        wsync.Subscriber(self.store, {"x": (tx, "BF16"), "i": ti, "h": th}).sync()
        self.assertEqual(list(tx), [0x3F80, 0x3F80, 0xC060, 0x0000 | (x.view(np.uint32)[3] >> 16)])
        self.assertTrue(np.array_equal(ti, np.arange(10)))
        self.assertTrue(np.array_equal(th, np.ones(4, dtype=np.float16)))
        if torch is not None:
            self.assertEqual(list(tx), list(torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy()
                                             .astype(np.uint16)))

    def test_numpy_round_trip_and_errors(self):
        rng = np.random.default_rng(1)
        base = {"a": rng.standard_normal((50, 20)).astype(np.float32), "b": np.arange(1000, dtype=np.uint16)}
        new = dict((k, v.copy()) for k, v in base.items())
        new["a"][3, 4] += 1
        new["b"][::97] = 7
        for enc in wsync.ENCODINGS:
            d = wsync.diff(base, new, encoding=enc)
            t = dict((k, v.copy()) for k, v in base.items())
            wsync.apply(memoryview(d), t)
            for k in base:
                self.assertTrue(np.array_equal(t[k], new[k]), (enc, k))
        ro = base["a"].copy()
        ro.flags.writeable = False
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.apply, d, {"a": ro})
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.apply, d, {"a": base["a"][:, ::2]})
        self.assertCode("WSYNC_ERR_UNKNOWN_DTYPE", wsync.diff, {"o": np.array(["x"])}, {"o": np.array(["y"])})
        self.assertCode("WSYNC_ERR_UNSUPPORTED", wsync.diff, {"o": np.zeros(3, dtype=">f4")},
                        {"o": np.zeros(3, dtype=">f4")})
        # a non-contiguous input to diff is copied, not refused
        d = wsync.diff({"a": base["a"][:, ::2]}, {"a": new["a"][:, ::2]})
        self.assertEqual(wsync.inspect(d).delta.changed, 0 if 4 % 2 else 1)

    def test_bytes_like(self):
        payload = bytearray(range(256)) * 4
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, {"raw": bytes(payload), "bf": (bytearray(payload), "BF16", (16, 32))})
            payload[5] ^= 1
            pub.publish(2, {"raw": memoryview(bytes(payload)), "bf": (bytearray(payload), "BF16", (16, 32))})
        raw = bytearray(len(payload))
        bf = bytearray(len(payload))
        sub = wsync.Subscriber(self.store, {"raw": raw, "bf": (memoryview(bf), "BF16", (16, 32))})
        sub.sync()
        self.assertEqual(raw, payload)
        self.assertEqual(bf, payload)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store, {"raw": bytes(1024)})
        sub.close()


class TestThreads(Base):
    @need_torch
    def test_two_threads_two_objects(self):
        errors = []
        results = {}

        def worker(i):
            try:
                store = os.path.join(self.dir, "s%d" % i)
                sd = torch_model(10 + i)
                tg = zeros_like(sd)
                with wsync.Publisher(store, fsync=False, encoding="packed-max" if i else "packed") as pub, \
                        wsync.Subscriber(store, tg) as sub:
                    for step in range(1, 16):
                        if step > 1:
                            torch_step(sd, step)
                        st = pub.publish(step, sd)
                        sub.sync()
                        if not same(sd, tg) or wsync.state_digest(tg) != st.state:
                            errors.append("thread %d step %d differs" % (i, step))
                    b = dict((k, v.clone()) for k, v in sd.items())
                    torch_step(sd, 99)
                    for _ in range(5):
                        c = dict((k, v.clone()) for k, v in b.items())
                        wsync.apply(wsync.diff(b, sd, encoding="packed-max"), c)
                        if not same(c, sd):
                            errors.append("thread %d: diff/apply differs" % i)
                results[i] = True
            except Exception as e:  # reported below
                errors.append("thread %d: %r" % (i, e))

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(results, {0: True, 1: True})

    @need_torch
    def test_close_while_prefetching_and_ready_from_another_thread(self):
        sd = torch_model(20)
        tg = zeros_like(sd)
        pub = wsync.Publisher(self.store, fsync=False)
        pub.publish(1, sd)
        sub = wsync.Subscriber(self.store, tg)
        sub.start(interval_ms=1)
        seen = []
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                try:
                    seen.append(sub.ready())
                except wsync.WsyncError as e:
                    seen.append(e.code)
                    return

        t = threading.Thread(target=poll)
        t.start()
        for step in range(2, 5):
            torch_step(sd, step)
            pub.publish(step, sd)
            sub.sync()
        sub.close()
        stop.set()
        t.join()
        self.assertTrue(same(sd, tg))
        self.assertTrue(seen)


@need_torch
class TestHttp(Base):
    def test_http_store(self):
        url = os.environ.get("WSYNC_TEST_HTTP_URL")
        if not url or not wsync.has_http():
            self.skipTest("no WSYNC_TEST_HTTP_URL (tests/python/test_python.sh starts nginx) or no libcurl")
        url = url.rstrip("/") + "/py-%d" % os.getpid()
        sd = torch_model(30)
        tg = zeros_like(sd)
        with wsync.Publisher(url, anchor_every=3) as pub:
            sub = wsync.Subscriber(url, tg)
            for step in range(1, 8):
                if step > 1:
                    torch_step(sd, step)
                pub.publish(step, sd)
                self.assertEqual(sub.sync().step, step)
                self.assertTrue(same(sd, tg))
            sub.close()



def raw(x):
    """An engine tensor's bits on the CPU: torch (any device) or numpy."""
    if torch is not None and isinstance(x, torch.Tensor):
        return bits(x.detach().to("cpu"))
    return x


def engine_equal(sd, eng):
    """The publisher's torch tensors and the engine's (torch on any device,
    or numpy (uint16, "BF16") pairs), bit for bit."""
    if set(sd) != set(eng):
        return False
    for k, v in sd.items():
        e = eng[k][0] if isinstance(eng[k], tuple) else eng[k]
        if isinstance(e, torch.Tensor):
            if not torch.equal(bits(v), raw(e)):
                return False
        elif not np.array_equal(bits(v).numpy().view(np.uint16), e):
            return False
    return True


def clone(sd):
    return dict((k, v.clone()) for k, v in sd.items())


class Boom(Exception):
    pass


@need_torch
class TestMirror(Base):
    """The mirror subscriber (mirror=True) on CPU torch tensors and numpy
    arrays: the engine's tensors are written only by the take's callback
    (the host copy is the library's own memory), through the same code as
    for CUDA tensors (index_copy_ / copy_ on the tensor's device)."""

    device = "cpu"

    def engine(self, sd):
        return dict((k, torch.zeros(v.shape, dtype=v.dtype, device=self.device)) for k, v in sd.items())

    def subscriber(self, eng, **kw):
        kw.setdefault("mirror", True)
        return wsync.Subscriber(self.store, eng, **kw)

    def test_every_step_every_encoding(self):
        for enc in wsync.ENCODINGS:
            store = os.path.join(self.dir, enc)
            sd = torch_model(40)
            eng = self.engine(sd)
            ptrs = dict((k, v.data_ptr()) for k, v in eng.items())
            with wsync.Publisher(store, fsync=False, encoding=enc, anchor_every=4) as pub, \
                    wsync.Subscriber(store, eng, mirror=True, chunk=97) as sub:
                self.assertTrue(sub.mirror)
                self.assertIsNone(sub.step)
                self.assertIsNone(sub.state_digest())
                for step in range(1, 10):
                    if step > 1:
                        torch_step(sd, step)
                    st = pub.publish(step, sd)
                    s = sub.sync()
                    self.assertEqual((s.step, sub.step, sub.mirror_step), (step, step, step))
                    t = s.take
                    self.assertIsInstance(t, wsync.MirrorStats)
                    self.assertTrue(t.handed)
                    self.assertEqual((t.from_step, t.step, t.steps), (None if step == 1 else step - 1, step, 1))
                    if step == 1:   # the engine held nothing: every tensor whole
                        self.assertEqual((t.whole_tensors, t.positions), (len(sd), 0))
                    else:
                        self.assertGreater(t.positions, 0)
                        self.assertGreater(t.chunks, 1)
                    self.assertGreaterEqual(t.pause_seconds, 0.0)
                    self.assertTrue(engine_equal(sd, eng), "%s step %d" % (enc, step))
                    self.assertEqual(sub.state_digest(), st.state)
                    self.assertEqual(wsync.state_digest(dict((k, raw(v)) for k, v in eng.items())), st.state)
                    # nothing new: a take hands nothing
                    again = sub.take()
                    self.assertFalse(again.handed)
                    self.assertEqual((again.chunks, again.step), (0, step))
            self.assertEqual(ptrs, dict((k, v.data_ptr()) for k, v in eng.items()))   # in place

    def test_catch_up_merged_and_across_anchors(self):
        sd = torch_model(41)
        eng = self.engine(sd)
        saved = {}
        with wsync.Publisher(self.store, fsync=False, anchor_every=5, retain=20) as pub:
            pub.publish(1, sd)
            saved[1] = clone(sd)
            sub = self.subscriber(eng)
            self.assertEqual(sub.sync().step, 1)
            for step in range(2, 5):            # deltas only: one merged patch
                torch_step(sd, step)
                pub.publish(step, sd)
                saved[step] = clone(sd)
            s = sub.sync()
            t = s.take
            self.assertEqual((s.step, t.from_step, t.step, t.steps), (4, 1, 4, 3))
            self.assertEqual(t.whole_tensors, 0)
            # the union of positions: at least every element that differs from step 1 to 4
            differ = 0
            for k in sd:
                out = bytearray(4 * sd[k].numel())
                differ += wsync.changed_positions(saved[1][k], saved[4][k], out)
            self.assertGreaterEqual(t.positions, differ)
            self.assertGreater(differ, 0)
            self.assertTrue(engine_equal(sd, eng))
            for step in range(5, 13):           # across the anchors of steps 6 and 11
                torch_step(sd, step)
                pub.publish(step, sd)
            s = sub.sync(9)
            self.assertEqual((s.step, s.take.from_step, s.take.steps), (9, 4, 5))
            s = sub.sync()
            self.assertEqual((s.step, s.take.from_step), (12, 9))
            self.assertTrue(engine_equal(sd, eng))
            self.assertEqual(sub.state_digest(), wsync.state_digest(sd))
            sub.close()
        # a new engine far behind: the store's anchor, handed whole
        eng2 = self.engine(sd)
        with self.subscriber(eng2) as sub2:
            s = sub2.sync()
            self.assertEqual((s.step, s.take.whole_tensors), (12, len(sd)))
            self.assertTrue(engine_equal(sd, eng2))

    def test_background_thread_while_taking(self):
        sd = torch_model(42)
        eng = self.engine(sd)
        states = {}
        pub = wsync.Publisher(self.store, fsync=False, anchor_every=6)
        pub.publish(1, sd)
        states[1] = clone(sd)
        sub = self.subscriber(eng, interval_ms=2, chunk=256)
        sub.start()
        self.assertTrue(sub.status().running)
        sub.start()                      # running at the same interval: nothing to do
        self.assertEqual(sub.status().interval_ms, 2)
        errors = []

        def publisher():
            try:
                for step in range(2, 21):
                    torch_step(sd, step)
                    states[step] = clone(sd)    # before: the engine may take it before publish returns
                    pub.publish(step, sd)
                    time.sleep(0.003)
            except Exception as e:
                errors.append(repr(e))

        th = threading.Thread(target=publisher)
        th.start()
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            r = sub.ready()
            s = sub.apply_ready()
            if s.take.handed:
                seen.append((s.step, s.take.steps))
                want = states[s.step]
                self.assertTrue(engine_equal(want, eng), "step %d" % s.step)
                self.assertEqual(sub.state_digest(), wsync.state_digest(want))
                self.assertEqual(s.path, "mirror")
                self.assertTrue(r is None or r <= s.step)
            else:
                self.assertEqual(s.path, "none")
            if not th.is_alive() and sub.step == 20:
                break
            time.sleep(0.001)
        th.join()
        self.assertEqual(errors, [])
        self.assertEqual(sub.step, 20)
        self.assertTrue(engine_equal(states[20], eng))
        self.assertIsNone(sub.ready())
        self.assertGreater(len(seen), 1)
        self.assertEqual(sum(n for _, n in seen), 20)    # every object applied, each handed once
        self.assertIsNone(sub.status().last_error)
        sub.stop()
        self.assertFalse(sub.status().running)
        sub.close()
        pub.close()

    def test_corrupt_delta_hands_nothing(self):
        sd = torch_model(43)
        eng = self.engine(sd)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
            step1 = clone(sd)
            sub = self.subscriber(eng)
            sub.sync()
            torch_step(sd, 2)
            pub.publish(2, sd)
        p = os.path.join(self.store, "deltas", "step_000002.safetensors")
        with open(p, "r+b") as f:
            f.seek(-20, 2)
            b = f.read(1)
            f.seek(-20, 2)
            f.write(bytes([b[0] ^ 0xFF]))
        calls = sub._sink.chunks
        with self.assertRaises(wsync.WsyncError) as cm:
            sub.sync()
        self.assertTrue(cm.exception.code.startswith("WSYNC_ERR_"))
        self.assertEqual(sub._sink.chunks, calls)            # no callback at all
        self.assertEqual(sub.step, 1)                        # the engine at its step
        self.assertTrue(engine_equal(step1, eng))
        self.assertEqual(sub.state_digest(), wsync.state_digest(step1))
        t = sub.take()
        self.assertFalse(t.handed)
        self.assertEqual(sub._sink.chunks, calls)
        sub.close()

    def test_callback_exception_then_handed_again(self):
        sd = torch_model(44)
        eng = self.engine(sd)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
            sub = self.subscriber(eng, chunk=64)
            sub.sync()
            torch_step(sd, 2)
            pub.publish(2, sd)
            sink = sub._sink
            real = sink._positions
            n = [0]

            def failing(t, count, positions, values):
                n[0] += 1
                if n[0] == 3:              # after two chunks were scattered
                    raise Boom("scatter failed")
                return real(t, count, positions, values)
            sink._positions = failing
            with self.assertRaises(Boom):
                sub.sync()
            self.assertIsNone(sub.step)     # a mixture: no step until the next take
            self.assertIsNone(sink.exc)
            del sink._positions
            t = sub.take()                  # hands again what was not handed (the tensor whole)
            self.assertTrue(t.handed)
            self.assertEqual((t.from_step, t.step), (None, 2))
            self.assertGreaterEqual(t.whole_tensors, 1)
            self.assertTrue(engine_equal(sd, eng))
            self.assertEqual(sub.state_digest(), wsync.state_digest(sd))
            # a whole tensor's copy failing too, and an exception that is not an Exception
            torch_step(sd, 3)
            pub.publish(3, sd)
            sink._whole_tensor = lambda *a: (_ for _ in ()).throw(KeyboardInterrupt())
            sink._positions = lambda *a: (_ for _ in ()).throw(KeyboardInterrupt())
            with self.assertRaises(KeyboardInterrupt):
                sub.sync()
            del sink._whole_tensor, sink._positions
            self.assertEqual(sub.sync().step, 3)
            self.assertTrue(engine_equal(sd, eng))
            sub.close()

    def test_set_step_from_a_checkpoint(self):
        sd = torch_model(45)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
            eng = dict((k, v.clone().to(self.device)) for k, v in sd.items())   # loaded from a checkpoint
            sub = self.subscriber(eng)
            sub.set_step(1)
            self.assertEqual((sub.step, sub.mirror_step), (1, 1))
            self.assertEqual(sub.state_digest(), wsync.state_digest(sd))
            torch_step(sd, 2)
            pub.publish(2, sd)
            s = sub.sync()
            self.assertEqual((s.step, s.take.whole_tensors), (2, 0))   # positions only
            self.assertTrue(engine_equal(sd, eng))
            sub.close()

    def test_wrong_targets(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, torch_model(46))
        T = wsync.WsyncTypeError
        self.assertRaises(T, wsync.Subscriber, self.store, {"x": bytearray(8)}, mirror=True)
        self.assertRaises(T, wsync.Subscriber, self.store, {"x": torch.zeros(3)}, mirror="yes")
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", wsync.Subscriber, self.store,
                        {"x": torch.zeros(4, 6, dtype=torch.bfloat16, device=self.device).t()}, mirror=True)
        self.assertCode("WSYNC_ERR_SIZE_MISMATCH", wsync.Subscriber, self.store,
                        {"x": (torch.zeros(4, dtype=torch.float32, device=self.device), "BF16")}, mirror=True)
        with self.assertRaises(wsync.WsyncUnsupportedError):
            wsync.Subscriber(self.store, {"x": torch.zeros(3, device="meta")}, mirror=True)
        eng = self.engine(torch_model(46))
        eng["embed.weight"] = torch.zeros(300, 63, dtype=torch.bfloat16, device=self.device)
        sub = self.subscriber(eng)
        self.assertCode("WSYNC_ERR_LAYOUT", sub.sync)
        self.assertIsNone(sub.step)
        self.assertTrue(all(not raw(v).any() for v in eng.values()))
        plain = wsync.Subscriber(self.store, zeros_like(torch_model(46)))
        self.assertFalse(plain.mirror)
        self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", plain.take)
        plain.close()
        sub.close()
        for fn in (sub.sync, sub.take, sub.apply_ready, sub.ready, sub.status, sub.start, sub.stop,
                   sub.state_digest, lambda: sub.step, lambda: sub.set_step(1)):
            self.assertCode("WSYNC_ERR_INVALID_ARGUMENT", fn)

    @need_numpy
    def test_numpy_targets(self):
        if self.device != "cpu":
            self.skipTest("numpy targets are host memory")
        sd = torch_model(47)
        eng = dict((k, (np.zeros(tuple(v.shape), dtype=np.uint16), "BF16")) for k, v in sd.items())
        with wsync.Publisher(self.store, fsync=False, anchor_every=3) as pub:
            sub = wsync.Subscriber(self.store, eng, mirror=True, chunk=50)
            for step in range(1, 8):
                if step > 1:
                    torch_step(sd, step)
                st = pub.publish(step, sd)
                if step in (3, 4):
                    continue                          # caught up at 5: one merged take
                s = sub.sync()
                self.assertEqual(s.step, step)
                self.assertEqual(s.take.steps, 3 if step == 5 else 1)
                self.assertTrue(engine_equal(sd, eng), "step %d" % step)
                self.assertEqual(sub.state_digest(), st.state)
            sub.close()
        # other dtypes as themselves (F32 kept, I64)
        other = os.path.join(self.dir, "f32")
        a = np.arange(1000, dtype=np.float32)
        i = np.arange(10, dtype=np.int64)
        with wsync.Publisher(other, fsync=False, keep_f32=True) as pub:
            pub.publish(1, {"a": a, "i": i})
            ea, ei = np.zeros_like(a), np.zeros_like(i)
            sub = wsync.Subscriber(other, {"a": ea, "i": ei}, mirror=True)
            sub.sync()
            a[::7] += 0.5
            i[3] = -5
            pub.publish(2, {"a": a, "i": i})
            self.assertEqual(sub.sync().take.whole_tensors, 0)
            self.assertTrue(np.array_equal(ea, a) and np.array_equal(ei, i))
            sub.close()


@need_torch
class TestMirrorCuda(TestMirror):
    """The same tests on CUDA tensors (the mirror chosen by the device, the
    staging pinned, index_copy_ on the GPU)."""

    device = "cuda"

    def setUp(self):
        if not torch.cuda.is_available():
            self.skipTest("torch.cuda.is_available() is False: no GPU on this machine, "
                          "the CUDA path has not run here")
        TestMirror.setUp(self)

    def subscriber(self, eng, **kw):
        return wsync.Subscriber(self.store, eng, **kw)   # chosen by the device, no mirror=True

    def test_device_chooses_the_mirror(self):
        sd = torch_model(48)
        with wsync.Publisher(self.store, fsync=False) as pub:
            pub.publish(1, sd)
        eng = self.engine(sd)
        with wsync.Subscriber(self.store, eng) as sub:
            self.assertTrue(sub.mirror)
            self.assertEqual(sub.sync().step, 1)
            self.assertTrue(engine_equal(sd, eng))
            self.assertEqual(sub._sink._pos.is_pinned(), True)

TRAINER = r"""
import sys, torch, wsync
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x = torch.randn(256, 32).to(torch.bfloat16); y = torch.randint(0, 8, (256,))
with wsync.Publisher(sys.argv[1], fsync=False) as pub:
    for step in range(1, 11):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        opt.zero_grad(); loss.backward(); opt.step()
        st = pub.publish(step, model.state_dict())
        print(step, st.state, flush=True)
"""


@need_torch
class TestTwoProcesses(Base):
    """A trainer process runs 10 real AdamW steps, publishing each and
    printing its step and state digest; this process is the engine. One
    subscriber follows in the background (bit-exact at every step it
    reaches and at the last); a second syncs to each step in turn as soon
    as the trainer printed it, so that every one of the 10 steps is checked
    bit-exact (state digests of its tensors against the trainer's)."""

    shapes = {"0.weight": (64, 32), "0.bias": (64,), "2.weight": (8, 64), "2.bias": (8,)}

    def run_pair(self, store):
        zeros = lambda: dict((k, torch.zeros(s, dtype=torch.bfloat16)) for k, s in self.shapes.items())
        tg, each = zeros(), zeros()
        errf = open(os.path.join(self.dir, "trainer.err"), "w+")
        proc = subprocess.Popen([sys.executable, "-c", TRAINER, store], stdout=subprocess.PIPE, stderr=errf,
                                text=True)
        lines = []

        def read():
            for line in proc.stdout:
                if line.strip():
                    lines.append(line)

        reader = threading.Thread(target=read)
        reader.start()
        states, checked, reached = {}, {}, []
        step_sub = None
        sub = wsync.Subscriber(store, tg)
        sub.start(interval_ms=5)
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                while len(states) < len(lines):
                    step, state = lines[len(states)].split()
                    states[int(step)] = int(state)
                    # the trainer printed after its publish returned: the step is there
                    if step_sub is None:
                        step_sub = wsync.Subscriber(store, each)
                    self.assertEqual(step_sub.sync(step=int(step)).step, int(step))
                    checked[int(step)] = wsync.state_digest(each)
                if sub.ready() is not None:
                    s = sub.apply_ready()
                    reached.append((s.step, wsync.state_digest(tg)))
                if proc.poll() is not None and not reader.is_alive() and len(states) == len(lines) and \
                        sub.step == 10:
                    break
                time.sleep(0.002)
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join()
            proc.wait()
            errf.seek(0)
            err = errf.read()
            errf.close()
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(sorted(states), list(range(1, 11)))
        self.assertEqual(sorted(checked), list(range(1, 11)))
        for step in range(1, 11):
            self.assertEqual(checked[step], states[step], "step %d" % step)
        self.assertEqual(step_sub.state_digest(), states[10])
        self.assertEqual(sub.step, 10)
        self.assertTrue(reached)
        for step, digest in reached:
            self.assertEqual(digest, states[step], "step %d" % step)
        self.assertEqual(wsync.state_digest(tg), states[10])
        sub.close()
        step_sub.close()

    def test_adamw_trainer_and_engine(self):
        """Through a directory store."""
        os.makedirs(self.store)
        self.run_pair(self.store)

    def test_adamw_trainer_and_engine_http(self):
        """Through nginx (the HTTP store), as TestHttp."""
        url = os.environ.get("WSYNC_TEST_HTTP_URL")
        if not url or not wsync.has_http():
            self.skipTest("no WSYNC_TEST_HTTP_URL (tests/python/test_python.sh starts nginx) or no libcurl")
        self.run_pair(url.rstrip("/") + "/py-2p-%d" % os.getpid())


class Result(unittest.TextTestResult):
    pass


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    runner = unittest.TextTestRunner(verbosity=2 if os.environ.get("CHECK_VERBOSE") else 1, stream=sys.stdout)
    print("python %s, torch %s, numpy %s, libcurl %s" % (
        sys.version.split()[0], getattr(torch, "__version__", "absent"), getattr(np, "__version__", "absent"),
        "yes" if wsync.has_http() else "no"))
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
