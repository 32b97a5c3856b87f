"""Bench of the Python binding (make bench-python), in one run, on
qwen3-0.6b-shaped bf16 tensors (vocab 151936, hidden 1024, MLP 3072, 16 query
and 8 key-value heads of 128; --layers of the 28, 2 by default, to fit a
small machine) moving about 1% of their elements per step by small steps,
as RL training does:

  publish   Publisher.publish wall time against wsync_publish's own time,
            timed in C inside the same call (the binding's overhead: turning
            the state_dict into pointers; no copies for CPU tensors)
  sync      Subscriber.sync wall time against wsync_subscriber_sync's own
  trainer   the trainer-side cost of a step, next to TRL's torch way of
            finding the changed elements (new != old, nonzero, gather of the
            new values) on the same tensors, each timed once per step:
            (a) wsync's whole cost, positions and values: wsync.diff (the
                diff plus the packed encode, digests included, that
                publishing does, into bytes in memory), and the publish
                itself (Publisher.publish: encode and the store's writes);
            (b) positions only: wsync.changed_positions (the SIMD diff,
                uint32 positions) against torch's != and nonzero alone
                (the same torch calls, timed before the gather)

Ratios above 1 mean wsync (or C) is faster. usage:
  bench/bench_python.py [--layers N] [--steps S] [--threads T]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import wsync

try:
    import torch
except ImportError:
    sys.exit("bench_python: needs torch (Debian: apt-get install python3-torch; run with /usr/bin/python3)")


def qwen3_shapes(layers, vocab=151936, hidden=1024, mlp=3072, heads=16, kv=8, hd=128):
    s = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = "model.layers.%d." % i
        s[p + "self_attn.q_proj.weight"] = (heads * hd, hidden)
        s[p + "self_attn.k_proj.weight"] = (kv * hd, hidden)
        s[p + "self_attn.v_proj.weight"] = (kv * hd, hidden)
        s[p + "self_attn.o_proj.weight"] = (hidden, heads * hd)
        s[p + "self_attn.q_norm.weight"] = (hd,)
        s[p + "self_attn.k_norm.weight"] = (hd,)
        s[p + "mlp.gate_proj.weight"] = (mlp, hidden)
        s[p + "mlp.up_proj.weight"] = (mlp, hidden)
        s[p + "mlp.down_proj.weight"] = (hidden, mlp)
        s[p + "input_layernorm.weight"] = (hidden,)
        s[p + "post_attention_layernorm.weight"] = (hidden,)
    s["model.norm.weight"] = (hidden,)
    return s


def make_model(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict((k, (torch.randn(v, generator=g) * 0.02).to(torch.bfloat16)) for k, v in shapes.items())


def step_model(sd, step, frac=0.01):
    """About `frac` of every tensor's elements move by one or two bf16 ulps."""
    g = torch.Generator().manual_seed(100 + step)
    for t in sd.values():
        flat = t.view(-1)
        k = max(1, int(flat.numel() * frac))
        idx = torch.randint(0, flat.numel(), (k,), generator=g)
        bits = flat.view(torch.int16).index_select(0, idx)
        bits += torch.randint(1, 3, (k,), generator=g, dtype=torch.int16)
        flat.view(torch.int16).index_copy_(0, idx, bits)


def torch_way(old, new):
    """TRL's way: the mask of changed elements, their indices, their values.
    Returns (changed, seconds to the positions (!=, nonzero), seconds to the
    values too (!=, nonzero, gather))."""
    n, pos_s, all_s = 0, 0.0, 0.0
    clock = time.perf_counter
    for k, t in new.items():
        a, b = old[k].view(-1), t.view(-1)
        t0 = clock()
        idx = (a != b).nonzero().view(-1)
        t1 = clock()
        vals = b.index_select(0, idx)
        t2 = clock()
        pos_s += t1 - t0
        all_s += t2 - t0
        n += int(vals.numel())
    return n, pos_s, all_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="wsync threads (0: one)")
    ap.add_argument("--device", default="cpu", help="the mirror subscriber's engine tensors (cpu: mirror=True)")
    a = ap.parse_args()
    # the CPU head every bench prints (bench/bench_cpu.h), from the
    # bench_probe built beside the library (make bench-python builds both)
    probe = os.path.join(os.path.dirname(os.environ.get("WSYNC_LIB", "build/libwsync.so")), "bench_probe")
    if os.access(probe, os.X_OK):
        sys.stdout.flush()
        subprocess.run([probe, "--head", "bench_python"], check=False)
    shapes = qwen3_shapes(a.layers)
    sd = make_model(shapes)
    elements = sum(t.numel() for t in sd.values())
    print("bench_python: qwen3-0.6b shapes, %d of 28 layers: %d tensors, %.1fM bf16 elements (%.0f MB); "
          "python %s, torch %s (%d threads), wsync %s" % (
              a.layers, len(sd), elements / 1e6, elements * 2 / 1e6, sys.version.split()[0],
              torch.__version__, torch.get_num_threads(), wsync.library_version()))
    tmp = tempfile.mkdtemp(prefix="wsync-bench-py.")
    store = os.path.join(tmp, "bucket")
    targets = dict((k, torch.empty_like(v)) for k, v in sd.items())
    engine = dict((k, torch.zeros(v.shape, dtype=v.dtype, device=a.device)) for k, v in sd.items())
    rows = {"publish": [0.0, 0.0], "sync": [0.0, 0.0], "torch": [0.0], "tpos": [0.0], "wdiff": [0.0],
            "wenc": [0.0], "penc": [0.0], "msync": [0.0], "pause": [0.0]}
    try:
        pub = wsync.Publisher(store, fsync=False, threads=a.threads, anchor_every=1000)
        sub = wsync.Subscriber(store, targets, threads=a.threads)
        msub = wsync.Subscriber(store, engine, threads=a.threads, mirror=True)
        pub.publish(1, sd)
        sub.sync()
        msub.sync()
        pos = bytearray(4 * max(t.numel() for t in sd.values()))
        for step in range(2, 2 + a.steps):
            old = dict((k, v.clone()) for k, v in sd.items())
            step_model(sd, step)
            # trainer side: torch's way, wsync's diff, wsync's whole encode
            n_torch, tpos, tall = torch_way(old, sd)
            rows["tpos"][0] += tpos
            rows["torch"][0] += tall
            t0 = time.perf_counter()
            n_w = 0
            for k, t in sd.items():
                n_w += wsync.changed_positions(old[k], t, pos)
            rows["wdiff"][0] += time.perf_counter() - t0
            t0 = time.perf_counter()
            wsync.diff(old, sd, threads=a.threads)
            rows["wenc"][0] += time.perf_counter() - t0
            assert n_w == n_torch, (n_w, n_torch)
            # publish and sync through the binding; C's own time inside the call
            t0 = time.perf_counter()
            st = pub.publish(step, sd)
            rows["publish"][0] += time.perf_counter() - t0
            rows["publish"][1] += st.seconds
            rows["penc"][0] += st.encode_seconds
            t0 = time.perf_counter()
            ss = sub.sync()
            rows["sync"][0] += time.perf_counter() - t0
            rows["sync"][1] += ss.seconds
            assert ss.step == step and st.changed == n_w
            # the mirror: its apply into the host copy, then the engine's take (its pause)
            ms = msub.sync()
            assert ms.step == step and ms.take.handed and ms.take.whole_tensors == 0
            rows["msync"][0] += ms.seconds
            rows["pause"][0] += ms.take.pause_seconds
            print("  step %d: %d changed (%.2f%%), delta %.1f MB" % (step, st.changed, 100.0 * st.changed / elements,
                                                                     st.delta_bytes / 1e6))
        assert all(torch.equal(targets[k].view(torch.int16), v.view(torch.int16)) for k, v in sd.items())
        assert all(torch.equal(engine[k].to("cpu").view(torch.int16), v.view(torch.int16)) for k, v in sd.items())
        msub.close()
        sub.close()
        pub.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    s = float(a.steps)
    pw, pc = rows["publish"][0] / s, rows["publish"][1] / s
    sw, sc = rows["sync"][0] / s, rows["sync"][1] / s
    tt, tp = rows["torch"][0] / s, rows["tpos"][0] / s
    wd, we, pe = rows["wdiff"][0] / s, rows["wenc"][0] / s, rows["penc"][0] / s
    print("per step, mean of %d:" % a.steps)
    print("  publish  binding %8.1f ms   C %8.1f ms   C/binding %.3f  (target >= 0.9)" % (pw * 1e3, pc * 1e3, pc / pw))
    print("  sync     binding %8.1f ms   C %8.1f ms   C/binding %.3f  (target >= 0.9)" % (sw * 1e3, sc * 1e3, sc / sw))
    print("  trainer  (a) positions and values: torch (!=, nonzero, gather) %8.1f ms" % (tt * 1e3))
    print("             wsync.diff (diff + packed encode, in memory)      %8.1f ms   torch/wsync %5.1fx  (target >= 5)"
          % (we * 1e3, tt / we))
    print("             Publisher.publish (encode %6.1f ms + store writes) %8.1f ms   torch/publish %5.1fx"
          % (pe * 1e3, pw * 1e3, tt / pw))
    print("           (b) positions only: torch (!=, nonzero)               %8.1f ms" % (tp * 1e3))
    print("             wsync.changed_positions (SIMD diff)               %8.1f ms   torch/wsync %5.1fx"
          % (wd * 1e3, tp / wd))
    ms, mp = rows["msync"][0] / s, rows["pause"][0] / s
    print("  mirror   apply to the host copy %8.1f ms   engine pause (take, %s tensors) %8.1f ms   "
          "pause/plain sync %.3f" % (ms * 1e3, a.device, mp * 1e3, mp / sc))


if __name__ == "__main__":
    main()
