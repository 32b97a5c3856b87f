"""Model directories in Python (issue 41): Publisher.publish_dir,
wsync.pull_dir and wsync.DirFollower over a small Hugging Face checkpoint
directory (three shards written the way safetensors' save_file writes them,
the index as transformers writes it, config, generation config, tokenizer
files, notes.txt taken by include). Three steps published (anchors at 1 and
3, a delta at 2; config.json changes at the anchor of step 3); each pulled
into its own link and compared byte for byte with the trainer's files; a
follower brought forward (on_update, the version kept beside the link, the
older pruned), one in the background; a signed chain (verify_key: the
trainer's key followed, another's refused with the link kept); refusals
raise the right class with a
message naming what failed, and change nothing. Where numpy is installed,
tests/cli/make_dirs.py's "mixed" model (three shards that are other
writers' files byte for byte) published and pulled byte-identical. Pure
Python otherwise. Ends with "summary: N passed, M failed"."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

import wsync

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_DIRS = os.path.join(HERE, "..", "cli", "make_dirs.py")
try:
    import numpy  # noqa: F401 (make_dirs.py needs it)
except ImportError:
    numpy = None

INDEX = "model.safetensors.index.json"
ALIGN = {"F32": 4, "BF16": 2, "I64": 8}
SHARDS = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
# tensor name -> (dtype, shape, shard)
TENSORS = {
    "model.embed_tokens.weight": ("BF16", [64, 16], 0),
    "model.layers.0.mlp.up_proj.weight": ("BF16", [32, 16], 0),
    "model.layers.0.self_attn.q_proj.weight": ("BF16", [16, 16], 1),
    "model.layers.0.input_layernorm.weight": ("F32", [16], 1),
    "model.norm.weight": ("BF16", [16], 2),
    "lm_head.weight": ("BF16", [64, 16], 2),
    "model.position_ids": ("I64", [8], 2),
}
SIZE = {"BF16": 2, "F32": 4, "I64": 8}


def st_bytes(tensors, metadata):
    """safetensors' save_file layout: __metadata__ first, tensors by
    alignment (largest first) then name, compact JSON padded to 8 bytes."""
    order = sorted(tensors, key=lambda t: (-ALIGN[t[1]], t[0]))
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, b in order:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(t[3] for t in order)


def trajectory(last):
    """{step: {file name: bytes}} for steps 1..last: about 5% of each float
    tensor's bytes change a step (F32 in its upper half, so that its BF16
    cast changes too; published with keep_f32 all the same); config.json
    changes at step 3."""
    rng = random.Random(41)
    data = {}
    for n, (dt, shape, _) in sorted(TENSORS.items()):
        count = 1
        for d in shape:
            count *= d
        if dt == "I64":
            data[n] = b"".join(struct.pack("<q", i) for i in range(count))
        else:
            data[n] = bytes(rng.randrange(256) for _ in range(count * SIZE[dt]))
    out = {}
    for k in range(1, last + 1):
        if k > 1:
            for n, (dt, shape, _) in sorted(TENSORS.items()):
                if dt == "I64":
                    continue
                b = bytearray(data[n])
                for _ in range(max(1, len(b) // 20)):
                    i = rng.randrange(len(b))
                    if dt == "F32":
                        i = i - i % 4 + 2 + rng.randrange(2)
                    b[i] ^= 1 << rng.randrange(8)
                data[n] = bytes(b)
        files, wmap = {}, {}
        for s, sn in enumerate(SHARDS):
            ts = [(n, dt, shape, data[n]) for n, (dt, shape, si) in sorted(TENSORS.items()) if si == s]
            files[sn] = st_bytes(ts, {"format": "pt", "model": "tiny", "step": str(k)})
            wmap.update({t[0]: sn for t in ts})
        index = {"metadata": {"total_size": sum(len(b) for b in data.values())}, "weight_map": wmap}
        files[INDEX] = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
        cfg = {"architectures": ["TinyForCausalLM"], "hidden_size": 16, "vocab_size": 64,
               "torch_dtype": "bfloat16", "revision": 0 if k < 3 else 1}
        files["config.json"] = (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode()
        files["generation_config.json"] = b'{\n  "bos_token_id": 1,\n  "eos_token_id": 2\n}\n'
        files["tokenizer.json"] = json.dumps({"model": {"type": "WordLevel",
                                                        "vocab": {str(i): i for i in range(64)}}}).encode()
        files["tokenizer_config.json"] = b'{"model_max_length": 128}\n'
        files["notes.txt"] = b"step notes, carried with include\n"
        out[k] = files
    return out


STEPS = trajectory(3)
# the files of the anchor each step's version carries (anchor_every=2: anchors at 1 and 3)
ANCHOR_OF = {1: 1, 2: 1, 3: 3}


def write_dir(path, files):
    os.makedirs(path, exist_ok=True)
    for fn, b in files.items():
        with open(os.path.join(path, fn), "wb") as f:
            f.write(b)


def read_dir(path):
    out = {}
    for fn in sorted(os.listdir(path)):
        with open(os.path.join(path, fn), "rb") as f:
            out[fn] = f.read()
    return out


def expected(k):
    """What a pull of step k must hold: the shards and index of step k, the
    carried files of its anchor, and wsync-step.json saying k."""
    a = STEPS[ANCHOR_OF[k]]
    files = {fn: b for fn, b in STEPS[k].items() if fn.endswith(".safetensors") or fn == INDEX}
    files.update({fn: b for fn, b in a.items() if fn not in files})
    return files


class DirCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-dir-")
        self.store = os.path.join(self.dir, "bucket")
        self.trainer = os.path.join(self.dir, "trainer")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def publish_all(self, last=3, **kw):
        with wsync.Publisher(self.store, anchor_every=2, keep_f32=True, fsync=False, **kw) as pub:
            stats = []
            for k in range(1, last + 1):
                shutil.rmtree(self.trainer, ignore_errors=True)
                write_dir(self.trainer, STEPS[k])
                stats.append(pub.publish_dir(k, self.trainer, include="*.txt"))
            return stats

    def assertVersion(self, path, k):
        got = read_dir(path)
        step_file = got.pop(wsync.DIR_STEP_FILE, None)
        self.assertIsNotNone(step_file, "%s has no %s" % (path, wsync.DIR_STEP_FILE))
        self.assertEqual(json.loads(step_file)["step"], k)
        want = expected(k)
        self.assertEqual(sorted(got), sorted(want))
        for fn in want:
            self.assertEqual(got[fn], want[fn], "%s differs from the trainer's at step %d" % (fn, k))

    def versions(self, link):
        base = os.path.basename(link) + ".step_"
        return sorted(n for n in os.listdir(os.path.dirname(link)) if n.startswith(base))


class TestPublishPull(DirCase):
    def test_three_steps_byte_for_byte(self):
        stats = self.publish_all()
        self.assertEqual([s.step for s in stats], [1, 2, 3])
        self.assertEqual([s.wrote_anchor for s in stats], [True, False, True])
        self.assertTrue(stats[1].wrote_delta)
        self.assertEqual((stats[0].shards, stats[0].tensors), (3, len(TENSORS)))
        self.assertEqual(stats[0].files, 6)   # index, config, generation config, 2 tokenizer files, notes.txt
        self.assertEqual(stats[0].tensor_bytes, sum(len(b) for b in STEPS[1].values()) - sum(
            len(b) for fn, b in STEPS[1].items() if not fn.endswith(".safetensors")) - sum(
            8 + struct.unpack("<Q", STEPS[1][sn][:8])[0] for sn in SHARDS))
        for k in (1, 2, 3):
            link = os.path.join(self.dir, "pulled%d" % k)
            self.assertEqual(wsync.pull_dir(self.store, link, k), k)
            self.assertTrue(os.path.islink(link))
            self.assertVersion(link, k)
        latest = os.path.join(self.dir, "latest")
        self.assertEqual(wsync.pull_dir(self.store, latest), 3)
        self.assertVersion(latest, 3)
        self.assertEqual(wsync.pull_dir(self.store, latest), 3)   # nothing new: the same version
        self.assertEqual(len(self.versions(latest)), 1)

    def test_step_claimed_and_relay(self):
        """step None: the step the shards claim; a pulled version published
        again (a relay) claims its step and never carries wsync-step.json."""
        write_dir(self.trainer, STEPS[1])
        with wsync.Publisher(self.store, keep_f32=True, fsync=False) as pub:
            self.assertEqual(pub.publish_dir(None, self.trainer, include="*.txt").step, 1)
        link = os.path.join(self.dir, "pulled")
        wsync.pull_dir(self.store, link)
        relay = os.path.join(self.dir, "relay")
        with wsync.Publisher(relay, keep_f32=True, fsync=False) as pub:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                st = pub.publish_dir(None, os.path.realpath(link), include=["*.json", "*.txt"])
            self.assertEqual(st.step, 1)
            self.assertTrue(any(wsync.DIR_STEP_FILE in str(x.message) and "not published" in str(x.message)
                                for x in w), [str(x.message) for x in w])
        again = os.path.join(self.dir, "again")
        self.assertEqual(wsync.pull_dir(relay, again), 1)
        self.assertVersion(again, 1)

    def test_include_matching_nothing_warns(self):
        write_dir(self.trainer, STEPS[1])
        with wsync.Publisher(self.store, keep_f32=True, fsync=False) as pub:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                pub.publish_dir(1, self.trainer, include=["*.bin", "notes.txt"])
        msgs = [str(x.message) for x in w]
        self.assertTrue(any("'*.bin'" in m and "matches no file" in m for m in msgs), msgs)
        self.assertFalse(any("notes.txt" in m for m in msgs), msgs)


class TestFollower(DirCase):
    def test_forward_with_on_update(self):
        seen = []
        link = os.path.join(self.dir, "serve", "model")
        os.makedirs(os.path.dirname(link))
        with wsync.Publisher(self.store, anchor_every=2, keep_f32=True, fsync=False) as pub:
            with wsync.DirFollower(self.store, link, on_update=lambda s, v: seen.append((s, v))) as f:
                self.assertIsNone(f.step)
                self.assertIsNone(f.version)
                self.assertRaises(wsync.WsyncNotFoundError, f.sync)   # nothing published yet
                for k in (1, 2, 3):
                    shutil.rmtree(self.trainer, ignore_errors=True)
                    write_dir(self.trainer, STEPS[k])
                    pub.publish_dir(k, self.trainer, include="*.txt")
                    self.assertEqual(f.sync(), k)
                    self.assertEqual(f.step, k)
                    self.assertEqual(f.version, os.path.realpath(link))
                    self.assertEqual(seen[-1], (k, f.version))
                    self.assertTrue(f.last_stats.switched)
                    self.assertVersion(f.version, k)
                    self.assertIsNone(f.sync())       # already there
                    self.assertFalse(f.last_stats.switched)
                    self.assertLessEqual(len(self.versions(link)), 2)   # the previous kept, older pruned
                self.assertEqual([s for s, _ in seen], [1, 2, 3])
                self.assertEqual(len(self.versions(link)), 2)
            self.assertTrue(f.closed)
            self.assertRaises(wsync.WsyncValueError, f.sync)
            f.close()                                 # twice is fine
            # a new follower picks up the version the link holds
            with wsync.DirFollower(self.store, link) as g:
                self.assertEqual(g.step, 3)
                self.assertIsNone(g.sync())
                self.assertEqual(g.sync(2), 2)        # back to an older step: a new version
                self.assertVersion(link, 2)

    def test_background(self):
        link = os.path.join(self.dir, "model")
        got = threading.Event()
        seen = []

        def on_update(step, version):
            seen.append((step, sorted(os.listdir(version))))
            if step == 2:
                got.set()

        f = wsync.DirFollower(self.store, link, on_update=on_update, interval_ms=20)
        try:
            f.start()
            self.assertTrue(f.running)
            time.sleep(0.1)
            self.assertIsInstance(f.last_error, wsync.WsyncNoStoreError)   # before the trainer: keeps polling
            self.publish_all(last=2)
            self.assertTrue(got.wait(30), "the background never reached step 2: %r" % (f.last_error,))
            self.assertEqual(seen[-1][0], 2)
            self.assertIn(wsync.DIR_STEP_FILE, seen[-1][1])
            self.assertVersion(link, 2)
        finally:
            f.close()
        self.assertFalse(f.running)


class TestOverlap(DirCase):
    def test_two_followers_and_a_reader(self):
        """Two DirFollowers of one path in the background (they take turns
        on the lock beside it) and a reader resolving the link once per
        read while three steps are published: every version read is one
        whole step, and the link never goes back."""
        link = os.path.join(self.dir, "model")
        stop = threading.Event()
        seen, errors = [], []

        def reader():
            while not stop.is_set():
                try:
                    fd = os.open(link, os.O_RDONLY | os.O_DIRECTORY)
                except FileNotFoundError:
                    time.sleep(0.002)
                    continue
                try:
                    gone = False
                    got = {}
                    for fn in os.listdir(fd):
                        with os.fdopen(os.open(fn, os.O_RDONLY, dir_fd=fd), "rb") as f:
                            got[fn] = f.read()
                    gone = os.fstat(fd).st_nlink == 0
                except FileNotFoundError:
                    gone = True
                finally:
                    os.close(fd)
                if gone:
                    continue
                try:
                    k = json.loads(got.pop(wsync.DIR_STEP_FILE))["step"]
                except (KeyError, ValueError) as e:
                    errors.append("no readable %s: %r (%s)" % (wsync.DIR_STEP_FILE, e, sorted(got)))
                    continue
                if k not in STEPS or got != expected(k):
                    errors.append("a version of step %r is not that step's files: %s" % (k, sorted(got)))
                if seen and k < seen[-1]:
                    errors.append("step %d after step %d" % (k, seen[-1]))
                if not seen or seen[-1] != k:
                    seen.append(k)

        self.publish_all(last=1)
        fs = [wsync.DirFollower(self.store, link, interval_ms=5) for _ in range(2)]
        t = threading.Thread(target=reader)
        t.start()
        try:
            for f in fs:
                f.start()
            with wsync.Publisher(self.store, anchor_every=2, keep_f32=True, fsync=False) as pub:
                for k in (2, 3):
                    time.sleep(0.05)
                    shutil.rmtree(self.trainer, ignore_errors=True)
                    write_dir(self.trainer, STEPS[k])
                    pub.publish_dir(k, self.trainer, include="*.txt")
            deadline = time.time() + 30
            while time.time() < deadline and any(f.step != 3 for f in fs):
                time.sleep(0.01)
            time.sleep(0.05)
        finally:
            stop.set()
            t.join()
            for f in fs:
                f.close()
        self.assertEqual([f.last_error for f in fs], [None, None])
        self.assertEqual(errors, [])
        self.assertEqual(seen[-1], 3)
        self.assertVersion(link, 3)
        self.assertLessEqual(len(self.versions(link)), 2)


class TestErrors(DirCase):
    def test_missing_directory(self):
        with wsync.Publisher(self.store, fsync=False) as pub:
            with self.assertRaises(wsync.WsyncError) as cm:
                pub.publish_dir(1, os.path.join(self.dir, "nowhere"))
            self.assertIn("nowhere", str(cm.exception))
            self.assertIsNone(pub.head)

    def test_bad_index(self):
        files = dict(STEPS[1])
        files[INDEX] = b'{"weight_map": {"model.norm.weight": '     # cut short
        write_dir(self.trainer, files)
        with wsync.Publisher(self.store, fsync=False) as pub:
            with self.assertRaises(wsync.WsyncError) as cm:
                pub.publish_dir(1, self.trainer)
            self.assertIn(INDEX, str(cm.exception))
            self.assertIsNone(pub.head)

    def test_index_names_missing_shard(self):
        files = dict(STEPS[1])
        del files[SHARDS[1]]
        write_dir(self.trainer, files)
        with wsync.Publisher(self.store, fsync=False) as pub:
            with self.assertRaises(wsync.WsyncError) as cm:
                pub.publish_dir(1, self.trainer)
            self.assertIn(SHARDS[1], str(cm.exception))
            self.assertIsNone(pub.head)

    def test_weight_map_leaving_the_directory(self):
        files = dict(STEPS[1])
        idx = json.loads(files[INDEX])
        idx["weight_map"]["model.norm.weight"] = "../" + SHARDS[2]
        files[INDEX] = json.dumps(idx).encode()
        write_dir(self.trainer, files)
        with wsync.Publisher(self.store, fsync=False) as pub:
            with self.assertRaises(wsync.WsyncError) as cm:
                pub.publish_dir(1, self.trainer)
            self.assertIn("../" + SHARDS[2], str(cm.exception))

    def test_no_step_claimed(self):
        files = dict(STEPS[1])
        for sn in SHARDS:
            ts = []
            for n, (dt, shape, si) in sorted(TENSORS.items()):
                if SHARDS[si] == sn:
                    ts.append((n, dt, shape, b"\0" * (SIZE[dt] * (shape[0] * (shape[1] if len(shape) > 1 else 1)))))
            files[sn] = st_bytes(ts, {"format": "pt"})
        write_dir(self.trainer, files)
        with wsync.Publisher(self.store, fsync=False) as pub:
            with self.assertRaises(wsync.WsyncValueError) as cm:
                pub.publish_dir(None, self.trainer)
            self.assertIn("step", str(cm.exception))
            self.assertIn(self.trainer, str(cm.exception))
            self.assertEqual(pub.publish_dir(5, self.trainer).step, 5)

    def test_callers_directory_untouched(self):
        self.publish_all(last=1)
        mine = os.path.join(self.dir, "mine")
        write_dir(mine, {"keep.txt": b"mine"})
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.pull_dir(self.store, mine)
        self.assertEqual(cm.exception.code, "WSYNC_ERR_UNSUPPORTED")
        self.assertIn(mine + ": a directory", str(cm.exception))
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.DirFollower(self.store, mine)
        self.assertEqual(cm.exception.code, "WSYNC_ERR_UNSUPPORTED")
        self.assertEqual(read_dir(mine), {"keep.txt": b"mine"})

    def test_stores_not_ready(self):
        link = os.path.join(self.dir, "model")
        self.assertRaises(wsync.WsyncNoStoreError, wsync.pull_dir, self.store, link)
        os.makedirs(self.store)
        self.assertRaises(wsync.WsyncNotFoundError, wsync.pull_dir, self.store, link)
        self.assertFalse(os.path.lexists(link))
        self.publish_all(last=1)
        with self.assertRaises(wsync.WsyncError) as cm:
            wsync.pull_dir(self.store, link, 7)
        self.assertIn("step 7 is not in the chain", str(cm.exception))
        self.assertFalse(os.path.lexists(link))

    def test_arguments(self):
        write_dir(self.trainer, STEPS[1])
        with wsync.Publisher(self.store, fsync=False) as pub:
            self.assertRaises(wsync.WsyncTypeError, pub.publish_dir, 1, self.trainer, include=3)
            self.assertRaises(wsync.WsyncTypeError, pub.publish_dir, 1, self.trainer, include=[b"*.txt"])
            self.assertRaises(wsync.WsyncValueError, pub.publish_dir, 1, self.trainer, include="a/*.txt")
            self.assertRaises(wsync.WsyncValueError, pub.publish_dir, -1, self.trainer)
            self.assertRaises(wsync.WsyncValueError, pub.publish_dir, 1, "")
            self.assertIsNone(pub.head)
        self.assertRaises(wsync.WsyncValueError, pub.publish_dir, 1, self.trainer)   # closed
        link = os.path.join(self.dir, "model")
        self.assertRaises(TypeError, wsync.pull_dir, self.store, link, None, "prefix")   # keyword-only
        self.assertRaises(TypeError, wsync.DirFollower, self.store, link, "prefix")
        self.assertRaises(wsync.WsyncTypeError, wsync.DirFollower, self.store, link, on_update=3)
        self.assertRaises(wsync.WsyncValueError, wsync.DirFollower, self.store, link, interval_ms=0)
        self.assertRaises(wsync.WsyncValueError, wsync.pull_dir, self.store, link, wsync.STEP_MAX + 1)


class TestSigned(DirCase):
    def test_verify_key(self):
        """A signed chain: pulled with the trainer's public key; another key
        is refused (WsyncSignatureError) with the link as it was."""
        mine = wsync.keygen(os.path.join(self.dir, "trainer"))
        other = wsync.keygen(os.path.join(self.dir, "other"))
        self.publish_all(last=2, sign_key=mine[0])
        link = os.path.join(self.dir, "model")
        self.assertEqual(wsync.pull_dir(self.store, link, 1, verify_key=mine[1]), 1)
        with wsync.DirFollower(self.store, link, verify_key=other[1]) as f:
            self.assertRaises(wsync.WsyncSignatureError, f.sync)
        self.assertRaises(wsync.WsyncSignatureError, wsync.pull_dir, self.store, link, verify_key=other[1])
        self.assertVersion(link, 1)
        with wsync.DirFollower(self.store, link, verify_key=wsync.public_key(mine[0])) as f:
            self.assertEqual(f.sync(), 2)
        self.assertVersion(link, 2)
        self.assertIn("chain", json.loads(read_dir(link)[wsync.DIR_STEP_FILE]))


@unittest.skipIf(numpy is None, "numpy is not installed for %s (make_dirs.py needs it)" % sys.executable)
class TestHeldOut(DirCase):
    def test_other_writers_shards(self):
        """make_dirs.py's "mixed": shards that are FluxML's, MLX's and
        tinygrad's files byte for byte, published (keep_f32) and pulled
        as published at an anchor and a delta (make_dirs.py compare: the
        tensors' bytes, the files, each shard's step; a shard whose
        __metadata__ has no "step" gets one, so only the bytes of those
        that claim one can be equal)."""
        steps = os.path.join(self.dir, "steps")
        subprocess.check_call([sys.executable, MAKE_DIRS, "steps", "mixed", steps, "0", "1"])
        with wsync.Publisher(self.store, keep_f32=True, fsync=False) as pub:
            for k in (0, 1):
                pub.publish_dir(k, os.path.join(steps, "step_%d" % k))
        link = os.path.join(self.dir, "model")
        for k in (0, 1):
            self.assertEqual(wsync.pull_dir(self.store, link, k), k)
            r = subprocess.run([sys.executable, MAKE_DIRS, "compare", str(k), os.path.join(steps, "step_%d" % k),
                                os.path.realpath(link)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.assertEqual(r.returncode, 0, r.stdout.decode("utf-8", "replace"))


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
