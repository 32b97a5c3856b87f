#!/usr/bin/env python3
"""What a checkpoint directory holds, for bench_dir.sh's check: for every
tensor of every *.safetensors in DIR (name order), its name, dtype, shape and
a BLAKE2b of its bytes; then the bytes' hash of the index and config.json.
Reads a tensor 64 MiB at a time (a full-size model in bounded memory).

usage: bench_dir_hash.py DIR"""
import glob
import hashlib
import json
import os
import struct
import sys


def main():
    d = sys.argv[1]
    rows = []
    for path in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
            base = 8 + n
            for name, t in head.items():
                if name == "__metadata__":
                    continue
                b, e = t["data_offsets"]
                h = hashlib.blake2b(digest_size=16)
                f.seek(base + b)
                left = e - b
                while left:
                    chunk = f.read(min(left, 64 << 20))
                    if not chunk:
                        sys.exit("%s: %s: short read" % (path, name))
                    h.update(chunk)
                    left -= len(chunk)
                rows.append("%s %s %s %s" % (name, t["dtype"], t["shape"], h.hexdigest()))
    rows.sort()
    for other in ("model.safetensors.index.json", "config.json"):
        p = os.path.join(d, other)
        if os.path.exists(p):
            with open(p, "rb") as f:
                rows.append("%s %s" % (other, hashlib.blake2b(f.read(), digest_size=16).hexdigest()))
    if not rows:
        sys.exit("%s: no tensors" % d)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
