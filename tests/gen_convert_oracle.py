#!/usr/bin/python3
"""Writes the committed oracle data for tests/test_convert.c and
tests/test_exhaustive.c, so that `make test` never needs PyTorch.

Run with Debian's interpreter, which has torch and numpy (a pyenv `python3`
earlier in PATH may lack torch):

    /usr/bin/python3 tests/gen_convert_oracle.py            # everything
    /usr/bin/python3 tests/gen_convert_oracle.py --sample-only

Oracles
-------
f32 -> bf16: torch `x.to(torch.bfloat16)` (the header promises bit identity
             with it for every non-NaN input).
f32 -> f16:  numpy `x.astype(np.float16)`; torch `x.to(torch.float16)` is
             computed as well and every non-NaN disagreement is reported.

NaN rule: wsync maps every NaN to the quiet NaN with the input's sign,
0x7FC0 | sign for bf16 and 0x7E00 | sign for f16. Neither oracle does that
(torch 1.13 on CPU gives 0xFFFF for every NaN -> bf16; numpy keeps the
payload, so a signalling f32 NaN can become a signalling f16 NaN), so for
NaN inputs this script replaces the oracle's output with wsync's rule.

Files (all integers little-endian)
----------------------------------
tests/data/convert_sample.bin
    8 bytes  magic "WSCVTS01"
    u32      record count N
    u32      0 (reserved)
    N records of 8 bytes: u32 f32 bits, u16 expected bf16, u16 expected f16,
    sorted by f32 bits, no duplicates.
    The sample mixes uniformly random patterns, bf16 and f16 rounding ties
    and their neighbours, f32 subnormals, the bf16/f16 subnormal ranges,
    the overflow thresholds, an exponent sweep, +-0, +-inf and NaNs with
    assorted payloads.

tests/data/bf16_exhaustive_digests.bin, tests/data/f16_exhaustive_digests.bin
    8 bytes  magic "WSCVTD01"
    u32      chunk count (256)
    u32      log2 of the chunk size (24)
    256 x u64 digests

Digest of chunk c (inputs u = c * 2^24 .. c * 2^24 + 2^24 - 1, out(u) the
expected 16-bit result, NaN rule applied):

    digest(c) = sum over u of mix64(((u << 16) | out(u)) + 0x9E3779B97F4A7C15)
                mod 2^64
    mix64(z):  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
               z ^= z >> 27; z *= 0x94D049BB133111EB;
               z ^= z >> 31          (all uint64, wrapping)

mix64 is the splitmix64 finaliser, a bijection, so each (input, output)
pair hashes to an unrelated 64-bit value: a wrong output at any position
changes the digest except with probability ~2^-64, and since the sum does
not depend on order the C side may visit inputs in any order or thread
split. tests/test_exhaustive.c computes the same function.
"""
import argparse
import multiprocessing
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")

SAMPLE_MAGIC = b"WSCVTS01"
DIGEST_MAGIC = b"WSCVTD01"
SAMPLE_SIZE = 240000          # 8 bytes each: keeps the file under 2 MB
SEED = 0x77737963             # "wsyc"
CHUNK_BITS = 24
N_CHUNKS = 1 << (32 - CHUNK_BITS)

U64 = np.uint64


# ---------------------------------------------------------------- oracles


def is_nan(u):
    return (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)


def sign16(u):
    return ((u >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16)


def bf16_torch(u):
    x = torch.from_numpy(u.view(np.float32))
    out = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()
    nan = is_nan(u)
    out[nan] = sign16(u[nan]) | np.uint16(0x7FC0)      # wsync NaN rule
    return out


def f16_numpy(u):
    with np.errstate(over="ignore", invalid="ignore"):
        out = u.view(np.float32).astype(np.float16).view(np.uint16).copy()
    nan = is_nan(u)
    out[nan] = sign16(u[nan]) | np.uint16(0x7E00)      # wsync NaN rule
    return out


def f16_torch(u):
    x = torch.from_numpy(u.view(np.float32))
    out = x.to(torch.float16).view(torch.int16).numpy().view(np.uint16).copy()
    nan = is_nan(u)
    out[nan] = sign16(u[nan]) | np.uint16(0x7E00)
    return out


def bf16_rne_reference(u):
    """Round to nearest even on the bit pattern, written here as a cross-check
    of torch's (vectorised) kernel; NaN rule as above."""
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    out = ((u.astype(U64) + U64(0x7FFF) + lsb.astype(U64)) >> U64(16)).astype(np.uint16)
    nan = is_nan(u)
    out[nan] = sign16(u[nan]) | np.uint16(0x7FC0)
    return out


def digest(u, out):
    """See the module docstring; order-independent, wrapping uint64."""
    z = (u.astype(U64) << U64(16)) | out.astype(U64)
    z += U64(0x9E3779B97F4A7C15)
    z ^= z >> U64(30)
    z *= U64(0xBF58476D1CE4E5B9)
    z ^= z >> U64(27)
    z *= U64(0x94D049BB133111EB)
    z ^= z >> U64(31)
    return int(z.sum(dtype=U64))


# ---------------------------------------------------------------- sample


def f32bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def build_sample(rng):
    parts = []

    def add(a):
        parts.append(np.asarray(a, dtype=np.uint32).ravel())

    def rsign(a):
        a = np.asarray(a, dtype=np.uint32)
        return a | (rng.integers(0, 2, a.shape, dtype=np.uint32) << np.uint32(31))

    def both_signs(a):
        a = np.asarray(a, dtype=np.uint32)
        return np.concatenate([a, a | np.uint32(0x80000000)])

    # Specials: zeros, infinities, extremes, NaNs with payloads (quiet and
    # signalling, both signs, payload bits that survive and that do not
    # survive truncation to 16 bits).
    special = [0x00000000, 0x00000001, 0x00000002, 0x00000003, 0x007FFFFF,
               0x00800000, 0x00800001, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
               0x7F800000, 0x3F800000, 0x3F808000, 0x3F818000, 0x3F800001,
               0x3F807FFF, 0x3F808001]
    nans = [0x7F800001, 0x7F800002, 0x7F8000FF, 0x7F801000, 0x7F810000,
            0x7F812345, 0x7FA00000, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001,
            0x7FC0FFFF, 0x7FD55555, 0x7FE00000, 0x7FFF0000, 0x7FFFE000,
            0x7FFFFFFF, 0x7F802000, 0x7F804000]
    add(both_signs(special + nans))
    add(rsign(rng.integers(0x7F800001, 0x80000000, 2000, dtype=np.uint32)))

    # Uniformly random 32-bit patterns.
    add(rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32))

    # Exponent sweep: every f32 exponent with a spread of mantissas.
    mants = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0x18000, 0x1000, 0x1001,
                      0x2000, 0x3000, 0x400000, 0x7FFFFF, 0x7F8000, 0x7FE000,
                      0x7FF000, 0x7FFFF0], dtype=np.uint32)
    exps = np.arange(0, 255, dtype=np.uint32) << np.uint32(23)
    add(both_signs((exps[:, None] | mants[None, :]).ravel()))

    # bf16 ties: every representable bf16 (random picks over all finite codes,
    # subnormals and the largest included), the exact value, the tie
    # (low half 0x8000) and its neighbours, plus a few sticky-bit offsets.
    h = np.concatenate([rng.integers(0, 0x7F80, 7000, dtype=np.uint32),
                        np.arange(0, 0x81, dtype=np.uint32),          # subnormal/normal edge
                        np.arange(0x7F70, 0x7F80, dtype=np.uint32)])  # top of range
    base = h << np.uint32(16)
    for off in (0, 0x8000, 0x7FFF, 0x8001, 0x7FFE, 0x8002):
        add(rsign(base + np.uint32(off)))
    add(rsign(base + rng.integers(1, 0x10000, base.shape, dtype=np.uint32)))

    # f16 ties: the midpoint between every pair of adjacent non-negative
    # finite f16 values (0 and the smallest subnormal, ..., 65504 and the
    # overflow point 65536), exact in f32, with its f32 neighbours.
    vals = np.arange(0, 0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)
    vals[-1] = 65536.0
    mids = f32bits(((vals[:-1] + vals[1:]) / 2).astype(np.float32))
    for d in (0, 1, -1):
        add(rsign(mids.astype(np.int64) + d))
    # and some exact f16 values
    add(rsign(f32bits(rng.choice(vals[:-1], 6000).astype(np.float32))))

    # f32 subnormals (also bf16's subnormal range: same exponent field).
    add(rsign(rng.integers(1, 0x800000, 12000, dtype=np.uint32)))
    add(rsign(np.arange(1, 256, dtype=np.uint32)))
    add(rsign(np.arange(0x7FFF00, 0x800100, dtype=np.uint32)))

    # f16 subnormal range and underflow: |x| in [2^-26, 2^-13].
    lo, hi = f32bits(np.float32(2.0 ** -26)), f32bits(np.float32(2.0 ** -13))
    add(rsign(rng.integers(int(lo), int(hi), 12000, dtype=np.uint32)))

    # Overflow thresholds: bf16 (around FLT_MAX, ties at 0x7F7F8000) and f16
    # (around 65504 .. 65536 and a bit beyond).
    add(rsign(rng.integers(0x7F7E0000, 0x7F800000, 4000, dtype=np.uint32)))
    lo, hi = f32bits(np.float32(65000.0)), f32bits(np.float32(70000.0))
    add(rsign(rng.integers(int(lo), int(hi), 4000, dtype=np.uint32)))
    m = int(f32bits(np.float32(65520.0)))
    add(both_signs(np.arange(m - 64, m + 64, dtype=np.uint32)))

    allu = np.unique(np.concatenate(parts))
    if len(allu) > SAMPLE_SIZE:
        sys.exit("sample categories alone hold %d > %d patterns" % (len(allu), SAMPLE_SIZE))
    print("sample: %d patterns from the categories" % len(allu))
    # Fill up with more uniformly random patterns.
    while len(allu) < SAMPLE_SIZE:
        extra = rng.integers(0, 1 << 32, SAMPLE_SIZE - len(allu), dtype=np.uint64)
        allu = np.unique(np.concatenate([allu, extra.astype(np.uint32)]))
    return allu


def write_sample(path):
    rng = np.random.default_rng(SEED)
    u = build_sample(rng)
    bf = bf16_torch(u)
    f16 = f16_numpy(u)
    f16t = f16_torch(u)
    ref = bf16_rne_reference(u)

    dis = np.nonzero(f16 != f16t)[0]
    print("sample: %d patterns; numpy vs torch f16 disagreements: %d" % (len(u), len(dis)))
    for i in dis[:10]:
        print("  f32 0x%08x: numpy 0x%04x torch 0x%04x" % (u[i], f16[i], f16t[i]))
    dis = np.nonzero(bf != ref)[0]
    print("sample: torch bf16 vs bit-level RNE disagreements: %d" % len(dis))
    for i in dis[:10]:
        print("  f32 0x%08x: torch 0x%04x rne 0x%04x" % (u[i], bf[i], ref[i]))

    rec = np.zeros(len(u), dtype=[("u", "<u4"), ("bf", "<u2"), ("h", "<u2")])
    rec["u"], rec["bf"], rec["h"] = u, bf, f16
    with open(path, "wb") as f:
        f.write(SAMPLE_MAGIC)
        f.write(np.array([len(u), 0], dtype="<u4").tobytes())
        f.write(rec.tobytes())
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


# ---------------------------------------------------------------- exhaustive


def chunk_job(c):
    u = (np.arange(1 << CHUNK_BITS, dtype=np.uint32) + np.uint32(c << CHUNK_BITS))
    bf = bf16_torch(u)
    f16 = f16_numpy(u)
    f16t = f16_torch(u)
    ref = bf16_rne_reference(u)
    d_f16 = np.nonzero(f16 != f16t)[0]
    d_bf = np.nonzero(bf != ref)[0]
    return (c, digest(u, bf), digest(u, f16),
            len(d_f16), [(int(u[i]), int(f16[i]), int(f16t[i])) for i in d_f16[:5]],
            len(d_bf), [(int(u[i]), int(bf[i]), int(ref[i])) for i in d_bf[:5]])


def write_digests(jobs):
    torch.set_num_threads(1)
    t0 = time.time()
    d_bf = [0] * N_CHUNKS
    d_f16 = [0] * N_CHUNKS
    n_f16_dis = n_bf_dis = 0
    ex_f16, ex_bf = [], []
    with multiprocessing.Pool(jobs) as pool:
        for k, r in enumerate(pool.imap_unordered(chunk_job, range(N_CHUNKS))):
            c, dbf, df16, nf, exf, nb, exb = r
            d_bf[c], d_f16[c] = dbf, df16
            n_f16_dis += nf
            n_bf_dis += nb
            ex_f16 += exf
            ex_bf += exb
            if (k + 1) % 16 == 0:
                print("exhaustive: %d/%d chunks, %.0f s" % (k + 1, N_CHUNKS, time.time() - t0),
                      flush=True)
    print("exhaustive: numpy vs torch f16 disagreements (non-NaN): %d" % n_f16_dis)
    for e in sorted(ex_f16)[:10]:
        print("  f32 0x%08x: numpy 0x%04x torch 0x%04x" % e)
    print("exhaustive: torch bf16 vs bit-level RNE disagreements (non-NaN): %d" % n_bf_dis)
    for e in sorted(ex_bf)[:10]:
        print("  f32 0x%08x: torch 0x%04x rne 0x%04x" % e)
    for name, d in (("bf16", d_bf), ("f16", d_f16)):
        path = os.path.join(DATA, "%s_exhaustive_digests.bin" % name)
        with open(path, "wb") as f:
            f.write(DIGEST_MAGIC)
            f.write(np.array([N_CHUNKS, CHUNK_BITS], dtype="<u4").tobytes())
            f.write(np.array(d, dtype="<u8").tobytes())
        print("wrote %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample-only", action="store_true", help="skip the 2^32 digests")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="worker processes for the digests")
    args = ap.parse_args()
    print("torch %s, numpy %s" % (torch.__version__, np.__version__))
    os.makedirs(DATA, exist_ok=True)
    write_sample(os.path.join(DATA, "convert_sample.bin"))
    if not args.sample_only:
        write_digests(args.jobs)


if __name__ == "__main__":
    main()
