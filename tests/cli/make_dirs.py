#!/usr/bin/env python3
"""Hugging Face checkpoint directories for the directory tests
(tests/cli/test_cli_dir.sh), made from the safetensors corpus (tests/fixtures/corpus/
safetensors, files written by other writers; tests/fixtures/corpus/SOURCES.md), and the
checks run on what the tool pulls.

usage:
  make_dirs.py model NAME OUT [--step K]   one directory: step K of NAME's trajectory
  make_dirs.py steps NAME ROOT FIRST LAST  ROOT/step_K for K in FIRST..LAST
  make_dirs.py bad KIND OUT                a directory publish must refuse; prints
                                           the names the refusal may mention, one a line
  make_dirs.py compare [--f32-as-bf16] [--anchor] STEP PUBLISHED PULLED
                                           exit 0 when PULLED is PUBLISHED at STEP
  make_dirs.py compare-file [--f32-as-bf16] STEP PUBLISHED_FILE PULLED_FILE
                                           the same for one safetensors file
  make_dirs.py fake-pull STEP PUBLISHED OUT [--f32-as-bf16]
                                           what a pull of STEP should write into OUT
                                           (to check the checks themselves)
  make_dirs.py reader DIR ROOT STOP REPORT [--f32-as-bf16]
                                           reads DIR in a loop until the file STOP
                                           exists; REPORT: what it saw (JSON)
  make_dirs.py names                       the models and the bad kinds

Models (NAME):
  bf16    the BF16 Qwen2-shaped model transformers wrote (SkyRL's test model),
          its 39 tensors split into three shards written the way safetensors'
          save_file writes them, the index as transformers writes it, config,
          generation config, tokenizer files and notes.txt (for --include);
          config.json changes at step 7 (a new "wsync_test_revision")
  mixed   three shards that are other writers' files byte for byte (headers
          included; only tensor data changes between steps): FluxML's
          safetensors.torch file with every dtype (F8, BOOL, I64, F64, ...),
          MLX's adapters (F32, keys not in offset order, "__metadata__":
          null) and tinygrad's CNN (F32, space-padded header); an index and
          config.json
  single  SkyRL's file as model.safetensors with config.json, no index
  flux    FluxML's file as model.safetensors, no other file

The trajectory: step 0 holds the corpus data; step K is step K-1 with, in
every float tensor (F16, BF16, F32, F64), about 3% of the elements changed in
their lowest mantissa bits (F32: the lowest of its BF16 cast; exponents
untouched), chosen by a splitmix64
stream seeded by K and the tensor's name: deterministic on every machine.

Needs numpy.
"""
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "fixtures", "corpus", "safetensors")
SKYRL = "NovaSky-AI__SkyRL__tests_e2e_arithmetic_sequence_model_model.safetensors"
FLUX = "FluxML__SafeTensors.jl__test_non_sharded_model.with_metadata.safetensors"
MLX = "wyek1n__MLX-CLI__adapters_adapters.safetensors"
CNN = "Elyasb14__models__models_cnn.safetensors"
INDEX = "model.safetensors.index.json"
STEP_FILE = "wsync-step.json"

ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
            "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
FLOAT_BITS = {"F16": np.uint16, "BF16": np.uint16, "F32": np.uint32, "F64": np.uint64}


class Bad(Exception):
    pass


# ---- safetensors: parse (strict) and write ----

def parse(raw, what="file"):
    """(header bytes, metadata or None, {name: (dtype, shape, data bytes)}, names in offset order)"""
    if len(raw) < 8:
        raise Bad("%s: %d bytes, shorter than the 8-byte header length" % (what, len(raw)))
    n = struct.unpack("<Q", raw[:8])[0]
    if n > len(raw) - 8:
        raise Bad("%s: header of %d bytes in a %d-byte file" % (what, n, len(raw)))
    hb = raw[8:8 + n]
    pairs = []
    try:
        h = json.loads(hb, object_pairs_hook=lambda kv: pairs.append(kv) or dict(kv))
    except ValueError as e:
        raise Bad("%s: header is not JSON: %s" % (what, e))
    if not isinstance(h, dict):
        raise Bad("%s: header is not an object" % what)
    top = pairs[-1]
    if len(set(k for k, _ in top)) != len(top):
        raise Bad("%s: duplicate keys in the header" % what)
    meta = h.pop("__metadata__", None)
    data = raw[8 + n:]
    ts, spans = {}, []
    for name, v in h.items():
        dt, shape, (b, e) = v["dtype"], v["shape"], v["data_offsets"]
        ne = 1
        for d in shape:
            ne *= d
        if dt not in ITEMSIZE or ne * ITEMSIZE[dt] != e - b or not 0 <= b <= e <= len(data):
            raise Bad("%s: tensor %s: dtype %s shape %s offsets [%d, %d) in %d data bytes"
                      % (what, name, dt, shape, b, e, len(data)))
        ts[name] = (dt, list(shape), data[b:e])
        spans.append((b, e, name))
    spans.sort()
    at = 0
    for b, e, name in spans:
        if b != at:
            raise Bad("%s: tensor %s starts at %d, not %d (a gap or an overlap)" % (what, name, b, at))
        at = e
    if at != len(data):
        raise Bad("%s: %d data bytes, the tensors end at %d" % (what, len(data), at))
    return hb, meta, ts, [s[2] for s in spans]


def read(path):
    with open(path, "rb") as f:
        return parse(f.read(), path)


ALIGN_ORDER = {8: 0, 4: 1, 2: 2, 1: 3}


def st_bytes(tensors, metadata):
    """safetensors' save_file layout: __metadata__ first, tensors by alignment
    (largest first) then name, compact JSON padded with spaces to 8 bytes."""
    order = sorted(tensors, key=lambda t: (ALIGN_ORDER[ITEMSIZE[t[1]]], t[0]))
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, b in order:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(t[3] for t in order)


def with_data(raw, ts):
    """raw (a parsed file) with each tensor's bytes replaced in place: the header stays byte for byte."""
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    out = bytearray(raw)
    for name, (dt, shape, b) in ts.items():
        s, e = h[name]["data_offsets"]
        assert e - s == len(b)
        out[8 + n + s:8 + n + e] = b
    return bytes(out)


def index_bytes(weight_map, total_size):
    """model.safetensors.index.json as transformers' save_pretrained writes it."""
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()


# ---- the trajectory ----

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix(seed, count):
    with np.errstate(over="ignore"):
        x = np.uint64(seed) + (np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def step_once(name, dt, b, k):
    """b at step k, from b at step k-1."""
    if dt not in FLOAT_BITS or len(b) == 0:
        return b
    a = np.frombuffer(b, dtype=FLOAT_BITS[dt]).copy()
    m = max(1, a.size * 3 // 100)
    seed = int.from_bytes(hashlib.sha256(("%d/%s" % (k, name)).encode()).digest()[:8], "little")
    z = splitmix(seed, m)
    idx, first = np.unique(z % np.uint64(a.size), return_index=True)
    mask = ((z[first] >> np.uint64(40)) & np.uint64(7)) | np.uint64(1)  # 1..7: a few ulps
    if dt == "F32":
        mask <<= np.uint64(16)             # ulps of its BF16 cast, so that a cast still changes
    a[idx.astype(np.int64)] ^= mask.astype(a.dtype)
    return a.tobytes()


def corpus(name):
    with open(os.path.join(CORPUS, name), "rb") as f:
        return f.read()


def split3(names, ts):
    """Consecutive runs of about equal bytes, as transformers fills shards."""
    total = sum(len(ts[n][2]) for n in names)
    runs, cur, acc = [], [], 0
    for n in names:
        cur.append(n)
        acc += len(ts[n][2])
        if len(runs) < 2 and acc >= total * (len(runs) + 1) / 3:
            runs.append(cur)
            cur = []
    runs.append(cur)
    assert all(runs) and len(runs) == 3
    return runs


SMALL_BF16 = {
    "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 32,
                               "transformers_version": "4.46.0"},
    "tokenizer_config.json": {"bos_token": "<s>", "eos_token": "</s>", "model_max_length": 512,
                              "tokenizer_class": "PreTrainedTokenizerFast"},
    "special_tokens_map.json": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>"},
    "tokenizer.json": {"version": "1.0", "model": {"type": "WordLevel",
                                                   "vocab": {str(i): i for i in range(16)}}},
}


def config_bf16(k):
    c = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 128, "intermediate_size": 344,
         "model_type": "qwen2", "num_attention_heads": 4, "num_hidden_layers": 4,
         "num_key_value_heads": 4, "torch_dtype": "bfloat16", "vocab_size": 16,
         "wsync_test_revision": 0 if k < 7 else 1}
    return (json.dumps(c, indent=2, sort_keys=True) + "\n").encode()


def model_files(name, k):
    """{file name: bytes} of the model at step k (computing steps 1..k)."""
    return next(trajectory(name, k, k))[1]


def trajectory(name, first, last):
    """(k, {file: bytes}) for k in first..last."""
    if name == "bf16":
        hb, meta, ts, order = parse(corpus(SKYRL), SKYRL)
        runs = split3(order, ts)
        shard_names = ["model-%05d-of-00003.safetensors" % (i + 1) for i in range(3)]
        cur = {n: ts[n][2] for n in order}
        for k in range(0, last + 1):
            if k > 0:
                cur = {n: step_once(n, ts[n][0], cur[n], k) for n in order}
            if k < first:
                continue
            files, wmap = {}, {}
            for sn, run in zip(shard_names, runs):
                files[sn] = st_bytes([(n, ts[n][0], ts[n][1], cur[n]) for n in run], {"format": "pt"})
                wmap.update({n: sn for n in run})
            files[INDEX] = index_bytes(wmap, sum(len(cur[n]) for n in order))
            files["config.json"] = config_bf16(k)
            for fn, obj in SMALL_BF16.items():
                files[fn] = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
            files["notes.txt"] = b"trained by tests/cli/make_dirs.py; not in the documented list\n"
            yield k, files
    elif name in ("mixed", "single", "flux"):
        srcs = {"mixed": [FLUX, MLX, CNN], "single": [SKYRL], "flux": [FLUX]}[name]
        raws = [corpus(s) for s in srcs]
        parsed = [parse(r, s) for r, s in zip(raws, srcs)]
        cur = [{n: t[2] for n, t in p[2].items()} for p in parsed]
        names = [n for p in parsed for n in p[2]]
        assert len(set(names)) == len(names), "tensor names collide"
        if name == "mixed":
            shard_names = ["model-%05d-of-00003.safetensors" % (i + 1) for i in range(3)]
        else:
            shard_names = ["model.safetensors"]
        for k in range(0, last + 1):
            if k > 0:
                cur = [{n: step_once(n, p[2][n][0], c[n], k) for n in c} for p, c in zip(parsed, cur)]
            if k < first:
                continue
            files, wmap, total = {}, {}, 0
            for sn, raw, p, c in zip(shard_names, raws, parsed, cur):
                files[sn] = with_data(raw, {n: (p[2][n][0], p[2][n][1], c[n]) for n in c})
                wmap.update({n: sn for n in c})
                total += sum(len(b) for b in c.values())
            if name == "mixed":
                files[INDEX] = index_bytes(wmap, total)
            if name != "flux":
                files["config.json"] = (json.dumps({"model_type": "wsync-test-" + name}, indent=2) + "\n").encode()
            yield k, files
    else:
        raise SystemExit("make_dirs.py: unknown model %s (make_dirs.py names)" % name)


def write_dir(out, files):
    os.makedirs(out, exist_ok=True)
    for fn, b in files.items():
        p = os.path.join(out, fn)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b)


# ---- bad directories ----

BAD_KINDS = ["missing-shard", "dup-tensor", "index-extra", "bad-shard", "stray-shard",
             "dotdot", "dotdot-name", "slash", "absolute", "dup-tensor-noindex"]


def bad(kind, out):
    """Writes the bad directory; returns the names the refusal may mention."""
    files = model_files("bf16", 0)
    idx = json.loads(files[INDEX])
    wmap = idx["weight_map"]
    s1, s2, s3 = ("model-%05d-of-00003.safetensors" % i for i in (1, 2, 3))

    def set_index():
        files[INDEX] = index_bytes(wmap, idx["metadata"]["total_size"])

    if kind == "missing-shard":
        del files[s2]                      # the index names it, it is not there
        names = [s2]
    elif kind in ("dup-tensor", "dup-tensor-noindex"):
        _, meta, ts, _ = parse(files[s1])
        _, meta3, ts3, _ = parse(files[s3])
        dup = sorted(ts)[0]                # a tensor of shard 1, also in shard 3
        ts3[dup] = ts[dup]
        files[s3] = st_bytes([(n,) + tuple(t) for n, t in ts3.items()], meta3)
        names = [dup, s1, s3]
        if kind == "dup-tensor-noindex":
            del files[INDEX]
    elif kind == "index-extra":
        ghost = "model.layers.9.self_attn.ghost_proj.weight"
        wmap[ghost] = s1                   # no shard holds it
        set_index()
        names = [ghost, INDEX]
    elif kind == "bad-shard":
        raw = files[s2]
        n = struct.unpack("<Q", raw[:8])[0]
        files[s2] = raw[:8] + raw[8:8 + n // 2]   # the header cut in half
        names = [s2]
    elif kind == "stray-shard":
        files["model-extra.safetensors"] = corpus("foundation-model-stack__fastsafetensors__examples_a.safetensors")
        names = ["model-extra.safetensors"]
    elif kind == "dotdot-name":
        entry = ".." + s1                  # a file of the directory, named with '..'
        files[entry] = files.pop(s1)
        for n in list(wmap):
            if wmap[n] == s1:
                wmap[n] = entry
        set_index()
        names = [entry]
    elif kind in ("dotdot", "slash", "absolute"):
        parent = os.path.dirname(os.path.abspath(out))
        if kind == "dotdot":
            entry = "../" + s1             # the shard is there, outside the directory
            target = os.path.join(parent, s1)
        elif kind == "slash":
            entry = "sub/" + s1            # the shard is there, in a subdirectory
            target = os.path.join(out, "sub", s1)
        else:
            target = os.path.join(parent, "abs", s1)
            entry = target
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(files.pop(s1))
        for n in list(wmap):
            if wmap[n] == s1:
                wmap[n] = entry
        set_index()
        names = [entry]
    else:
        raise SystemExit("make_dirs.py: unknown bad kind %s (make_dirs.py names)" % kind)
    write_dir(out, files)
    return names


# ---- checks on what the tool pulled ----

def bf16_rne(b):
    """F32 bytes cast to BF16 the way the publisher casts (round to nearest
    even, NaN to a quiet NaN of the same sign)."""
    u = np.frombuffer(b, dtype=np.uint32)
    with np.errstate(over="ignore"):
        r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r[nan] = ((u[nan] >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16) | np.uint16(0x7FC0)
    return r.tobytes()


def published(t, f32_as_bf16):
    """The (dtype, shape, bytes) a follower gets for the published tensor t."""
    dt, shape, b = t
    if f32_as_bf16 and dt == "F32":
        return ("BF16", shape, bf16_rne(b))
    return (dt, shape, b)


def is_shard(fn):
    return fn.endswith(".safetensors")


def model_of(pub, f32_as_bf16):
    """{shard: {tensor: (dtype, shape, bytes)}}, {small file: bytes} of a published directory."""
    shards, small = {}, {}
    for fn in sorted(os.listdir(pub)):
        p = os.path.join(pub, fn)
        if not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            raw = f.read()
        if is_shard(fn):
            shards[fn] = {n: published(t, f32_as_bf16) for n, t in parse(raw, p)[2].items()}
        else:
            small[fn] = raw
    return shards, small


def claimed(meta):
    try:
        return int((meta or {}).get("step"))
    except (TypeError, ValueError):
        return None


def compare(step, pub, got, f32_as_bf16, anchor):
    """Problems found (empty: got is pub at step)."""
    probs = []
    shards, small = model_of(pub, f32_as_bf16)
    if not os.path.isdir(got):
        return ["%s is not a directory" % got]
    have = set(fn for fn in os.listdir(got) if not fn.startswith("."))
    want = set(shards) | set(small) | (set() if anchor else {STEP_FILE})
    for fn in sorted(want - have):
        probs.append("%s: missing" % fn)
    for fn in sorted(have - want):
        probs.append("%s: not in the published directory" % fn)
    for fn in sorted(small):
        if fn in have:
            with open(os.path.join(got, fn), "rb") as f:
                if f.read() != small[fn]:
                    probs.append("%s: differs from the published file" % fn)
    if not anchor and STEP_FILE in have:
        try:
            with open(os.path.join(got, STEP_FILE)) as f:
                sj = json.load(f)
            if sj.get("step") != step or not isinstance(sj.get("state"), str):
                probs.append("%s: %s, wanted step %d and a state" % (STEP_FILE, json.dumps(sj), step))
        except ValueError as e:
            probs.append("%s: not JSON: %s" % (STEP_FILE, e))
    for fn in sorted(shards):
        if fn not in have:
            continue
        try:
            _, meta, ts, _ = read(os.path.join(got, fn))
        except (Bad, KeyError, TypeError, ValueError) as e:
            probs.append("%s: does not parse: %s" % (fn, e))
            continue
        if claimed(meta) != step:
            probs.append("%s: __metadata__ %s, wanted step %d" % (fn, json.dumps(meta), step))
        if set(ts) != set(shards[fn]):
            probs.append("%s: holds %d tensors, published %d (%s)" % (
                fn, len(ts), len(shards[fn]), ", ".join(sorted(set(ts) ^ set(shards[fn])))[:200]))
        for n in sorted(set(ts) & set(shards[fn])):
            w, g = shards[fn][n], ts[n]
            if (w[0], w[1]) != (g[0], g[1]):
                probs.append("%s: %s is %s %s, published %s %s" % (fn, n, g[0], g[1], w[0], w[1]))
            elif w[2] != g[2]:
                a, b = np.frombuffer(w[2], np.uint8), np.frombuffer(g[2], np.uint8)
                probs.append("%s: %s differs in %d of %d bytes" % (fn, n, int((a != b).sum()), a.size))
    return probs


def compare_file(step, pub, got, f32_as_bf16):
    want = {n: published(t, f32_as_bf16) for n, t in read(pub)[2].items()}
    try:
        _, meta, ts, _ = read(got)
    except (Bad, KeyError, TypeError, ValueError, OSError) as e:
        return ["does not parse: %s" % e]
    probs = []
    if claimed(meta) != step:
        probs.append("__metadata__ %s, wanted step %d" % (json.dumps(meta), step))
    if set(ts) != set(want):
        probs.append("tensors differ: %s" % ", ".join(sorted(set(ts) ^ set(want)))[:200])
    for n in sorted(set(ts) & set(want)):
        if want[n] != ts[n]:
            probs.append("%s: not the published tensor (%s %s)" % (n, ts[n][0], ts[n][1]))
    return probs


def fake_pull(step, pub, out, f32_as_bf16):
    shards, small = model_of(pub, f32_as_bf16)
    files = dict(small)
    for fn, ts in shards.items():
        files[fn] = st_bytes([(n,) + tuple(t) for n, t in ts.items()], {"format": "pt", "step": str(step)})
    files[STEP_FILE] = json.dumps({"step": step, "state": "0" * 16}).encode()
    write_dir(out, files)


# ---- the reader: an engine loading the directory while it is updated ----

def digests(ts):
    return {n: hashlib.sha1(("%s %s " % (t[0], t[1])).encode() + t[2]).hexdigest() for n, t in ts.items()}


def reader(d, root, stop, report, f32_as_bf16):
    expect = {}
    for e in os.listdir(root):
        if e.startswith("step_"):
            shards, _ = model_of(os.path.join(root, e), f32_as_bf16)
            expect[int(e[5:])] = {fn: digests(ts) for fn, ts in shards.items()}
    seen, errors = [], []
    reads = absent = vanished = 0
    while not os.path.exists(stop):
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)   # follows the link once: one version
        except FileNotFoundError:
            absent += 1
            time.sleep(0.002)
            continue
        raw = {}
        try:
            for fn in os.listdir(fd):
                if is_shard(fn) or fn == STEP_FILE:
                    with os.fdopen(os.open(fn, os.O_RDONLY, dir_fd=fd), "rb") as fo:
                        raw[fn] = fo.read()
        except FileNotFoundError:
            vanished += 1                   # that version was removed while we read it
            continue
        finally:
            os.close(fd)
        reads += 1
        why = []
        try:
            s = json.loads(raw.pop(STEP_FILE))["step"]
        except (KeyError, ValueError) as e:
            errors.append("read %d: no readable %s (%s)" % (reads, STEP_FILE, e))
            continue
        if s not in expect:
            errors.append("read %d: %s says step %s, never published" % (reads, STEP_FILE, s))
            continue
        if seen and s < seen[-1]:
            why.append("step %d after step %d: went back" % (s, seen[-1]))
        if set(raw) != set(expect[s]):
            why.append("shards %s, step %d has %s" % (sorted(raw), s, sorted(expect[s])))
        for fn, b in sorted(raw.items()):
            try:
                _, meta, ts, _ = parse(b, fn)
            except (Bad, KeyError, TypeError, ValueError) as e:
                why.append("%s does not parse: %s" % (fn, e))
                continue
            if claimed(meta) != s:
                why.append("%s claims step %s" % (fn, claimed(meta)))
            if fn in expect[s]:
                got = digests(ts)
                other = [n for n in expect[s][fn] if got.get(n) != expect[s][fn][n]]
                if other:
                    steps = sorted(k for k in expect if fn in expect[k] and expect[k][fn].get(other[0]) == got.get(other[0]))
                    why.append("%s: %d tensors not step %d's (%s is step %s's)" % (fn, len(other), s, other[0], steps))
        if why:
            errors.append("read %d at step %d: %s" % (reads, s, "; ".join(why)[:600]))
        if not seen or seen[-1] != s:
            seen.append(s)
    with open(report, "w") as f:
        json.dump({"reads": reads, "absent": absent, "vanished": vanished, "steps": seen,
                   "errors": errors[:20], "n_errors": len(errors)}, f)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    cmd, args = argv[1], argv[2:]
    flags = set(a for a in args if a.startswith("--") and a != "--step")
    args = [a for a in args if a not in flags]
    if cmd == "names":
        print("models: bf16 mixed single flux")
        print("bad: " + " ".join(BAD_KINDS))
    elif cmd == "model":
        k = 0
        if "--step" in args:
            i = args.index("--step")
            k = int(args[i + 1])
            del args[i:i + 2]
        write_dir(args[1], model_files(args[0], k))
    elif cmd == "steps":
        name, root, a, b = args[0], args[1], int(args[2]), int(args[3])
        for k, files in trajectory(name, a, b):
            write_dir(os.path.join(root, "step_%d" % k), files)
    elif cmd == "bad":
        for n in bad(args[0], args[1]):
            print(n)
    elif cmd == "compare":
        probs = compare(int(args[0]), args[1], args[2], "--f32-as-bf16" in flags, "--anchor" in flags)
        for p in probs[:12]:
            print("%s: %s" % (args[2], p))
        if len(probs) > 12:
            print("%s: ... %d problems in all" % (args[2], len(probs)))
        return 1 if probs else 0
    elif cmd == "compare-file":
        probs = compare_file(int(args[0]), args[1], args[2], "--f32-as-bf16" in flags)
        for p in probs[:12]:
            print("%s: %s" % (args[2], p))
        return 1 if probs else 0
    elif cmd == "fake-pull":
        fake_pull(int(args[0]), args[1], args[2], "--f32-as-bf16" in flags)
    elif cmd == "reader":
        reader(args[0], args[1], args[2], args[3], "--f32-as-bf16" in flags)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
