#!/usr/bin/env python3
"""An independent check of what `wsync push-demo --dump DIR` left in each
inference rank's memory: recomputes every part from the step's data with
its own code (the hash that defines the data, slicing, fusing, and fp8 e4m3
quantisation with tile scales, rounding done here with exact fractions),
and compares byte for byte.

usage: tests/cli/push_check.py DIR        (exit 0 when every rank matches)

DIR/inference_R.json, written by the demo:
  {"rank": R, "step": S, "bytes": N, "parts": [
     {"dst": fused name, "tensor": k, "name": source name,
      "shape": [rows, cols], "row_begin": a, "rows": n, "col_begin": c, "cols": m,
      "dtype": "bf16" | "f8_e4m3", "offset": byte offset, "block": B,
      "scale_offset": byte offset of the f32 tile scales (f8 only),
      "step": the step whose data the part holds (S, or the step before
      for a tensor that a partial step did not move)}]}
DIR/inference_R.bin: the rank's region, N bytes.

The data: byte g of tensor k (row-major, bf16) at step s is byte g & 7 of
mix64(key ^ (g >> 3)) with key = mix64(SEED ^ s * GAMMA ^ k << 40), mix64
the splitmix64 finaliser (tool/cmd_push.c, push_fill).
"""
import json
import math
import os
import struct
import sys
from fractions import Fraction


M64 = (1 << 64) - 1
SEED = 0x57535950
GAMMA = 0x9E3779B97F4A7C15


def mix64_scalar(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def tensor_bytes(step, k, g, n):
    """n data bytes of tensor k at step, from byte offset g"""
    key = mix64_scalar(SEED ^ ((step * GAMMA) & M64) ^ ((k << 40) & M64))
    out = bytearray()
    w0, w1 = g >> 3, (g + n + 7) >> 3
    for w in range(w0, w1):
        out += mix64_scalar(key ^ w).to_bytes(8, 'little')
    skip = g & 7
    return bytes(out[skip:skip + n])


def f32(x):
    """x rounded to float32 (from a double: double rounding is exact for a
    quotient of two floats, 53 >= 2 * 24 + 2)"""
    return struct.unpack('<f', struct.pack('<f', x))[0]


def bf16_to_f32(u):
    return struct.unpack('<f', struct.pack('<I', u << 16))[0]


def source_slice(step, p):
    """the part's bf16 elements, row by row, as lists of uint16"""
    full_cols = p['shape'][1] if len(p['shape']) > 1 else 1
    rows = []
    for r in range(p['row_begin'], p['row_begin'] + p['rows']):
        b = tensor_bytes(step, p['tensor'], (r * full_cols + p['col_begin']) * 2, p['cols'] * 2)
        rows.append(list(struct.unpack('<%dH' % p['cols'], b)))
    return rows


# e4m3fn: every non-negative finite value with its code, ascending
E4M3 = []
for code in range(0x7F):
    e, m = code >> 3, code & 7
    v = Fraction(m, 8) * Fraction(1, 64) if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
    E4M3.append((v, code))


def e4m3(x):
    """float -> e4m3fn code, round to nearest even, saturating at 448"""
    if x != x:
        return 0xFF if math.copysign(1.0, x) < 0 else 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    if abs(x) >= 448.0:
        return sign | 0x7E
    a = Fraction(abs(x))
    lo, hi = 0, len(E4M3) - 1  # E4M3[lo] <= a < E4M3[hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if E4M3[mid][0] <= a:
            lo = mid
        else:
            hi = mid
    dl, dh = a - E4M3[lo][0], E4M3[hi][0] - a
    return sign | (lo if dl < dh or (dl == dh and lo % 2 == 0) else hi)


def quantize(w, block):
    """rows of bf16 -> (fp8 bytes row-major, f32 tile scales row-major)"""
    rows, cols = len(w), len(w[0]) if w else 0
    f = [[bf16_to_f32(u) for u in row] for row in w]
    br, bc = block or rows, block or cols
    q = bytearray(rows * cols)
    scales = []
    for r0 in range(0, rows, br):
        for c0 in range(0, cols, bc):
            tile = [row[c0:c0 + bc] for row in f[r0:r0 + br]]
            vals = [abs(v) for row in tile for v in row]
            if any(v != v or v == math.inf for v in vals):
                s = 1.0
            else:
                m = max(vals)
                s = f32(m / 448.0) if m > 0 else 1.0
            scales.append(s)
            for i, row in enumerate(tile):
                for j, v in enumerate(row):
                    q[(r0 + i) * cols + c0 + j] = e4m3(f32(v / s))
    return bytes(q), struct.pack('<%df' % len(scales), *scales)


def check_rank(path_json):
    lay = json.load(open(path_json))
    mem = open(path_json[:-5] + '.bin', 'rb').read()
    if len(mem) != lay['bytes']:
        return ['rank %d: %d bytes dumped, %d described' % (lay['rank'], len(mem), lay['bytes'])], 0
    bad = []
    for p in lay['parts']:
        w = source_slice(p.get('step', lay['step']), p)
        if p['dtype'] == 'bf16':
            want = b''.join(struct.pack('<%dH' % len(row), *row) for row in w)
            got = mem[p['offset']:p['offset'] + len(want)]
        else:
            want, ws = quantize(w, p['block'])
            got = mem[p['offset']:p['offset'] + len(want)]
            gs = mem[p['scale_offset']:p['scale_offset'] + len(ws)]
            if ws != gs:
                bad.append('rank %d: %s (%s rows %d+%d cols %d+%d): scales differ' % (
                    lay['rank'], p['dst'], p['name'], p['row_begin'], p['rows'], p['col_begin'], p['cols']))
        if got != want:
            i = next(i for i in range(len(want)) if i >= len(got) or got[i] != want[i])
            bad.append('rank %d: %s (%s rows %d+%d cols %d+%d, %s): byte %d differs' % (
                lay['rank'], p['dst'], p['name'], p['row_begin'], p['rows'], p['col_begin'], p['cols'],
                p['dtype'], i))
    return bad, len(lay['parts'])


def main():
    d = sys.argv[1]
    ranks = sorted(f for f in os.listdir(d) if f.startswith('inference_') and f.endswith('.json'))
    if not ranks:
        print('push_check: no inference_*.json in %s' % d)
        return 1
    failures = 0
    for f in ranks:
        bad, n = check_rank(os.path.join(d, f))
        for b in bad[:10]:
            print('push_check: ' + b)
        failures += len(bad)
        print('push_check: %s: %d parts, %s' % (f[:-5], n, 'all equal' if not bad else '%d differ' % len(bad)))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
