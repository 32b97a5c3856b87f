"""make bench-engine: an engine's pause per tensor-parallel rank, at Qwen3-0.6B's
shapes (28 layers, hidden 1024, 16 heads of 128, 8 KV heads, MLP 3072,
vocabulary 151936, q_norm and k_norm, lm_head tied to the embedding as in
the real checkpoint; bf16), 2 ranks with vLLM's fused layouts (qkv_proj,
gate_up_proj column-parallel, o_proj and down_proj row-parallel, the
vocabulary padded and split), 1.6% of elements changed per step (random
positions, every tensor touched).

Per rank, best of --repeat published steps (each a fresh 1.6%):
  (a) the take through the map: wsync.Subscriber(..., layout=).take() (the
      mirror has applied the step already, as its background does), the
      rank's parameters scattered in C (CPU) or batched (CUDA, or CPU with
      --batch): wsync writes each changed parameter's positions and values,
      merged, into one pinned host buffer, one upload, index_copy_ per
      parameter from views of the device buffer, one synchronize
      ("uploads": host-to-device copies per take);
  (b) load_weights of every changed tensor from a host copy: what an engine
      can do today (vLLM's weight_loader: each checkpoint tensor's slice
      copied into its place in the fused, sharded parameter; the host copy
      in pinned CPU memory when the parameters are on CUDA);
  (c) a full load_state_dict of the rank's parameters (from CPU tensors).
Also per rank: the mirror's apply of each step (the background's work, not
the pause), the bytes the rank receives, and its memory (the mirror's host
copy of the whole model, its change records, the rank's parameters). Each
rank's parameters are checked exact (the trainer's tensors fused and
sliced) after the last take and after (c). CPU targets unless --device cuda.
Last, the binding's check before every take (check_unmoved: the rank's
parameters not moved, freed or reshaped since the Subscriber was built), per
take: against its recorded identities (what the take runs) and in full (every
parameter through _changed, as before the identities), best of 200.

    make bench-engine            (BENCH_ENGINE_ARGS="--layers 4" for a smaller model)
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import torch
import wsync

QWEN3_06B = dict(layers=28, hidden=1024, heads=16, head_dim=128, kv_heads=8, ff=3072, vocab=151936)


def shapes(c):
    d, hd = c["hidden"], c["head_dim"]
    out = {"model.embed_tokens.weight": (c["vocab"], d), "model.norm.weight": (d,)}
    for i in range(c["layers"]):
        p = "model.layers.%d." % i
        out.update({p + "self_attn.q_proj.weight": (c["heads"] * hd, d),
                    p + "self_attn.k_proj.weight": (c["kv_heads"] * hd, d),
                    p + "self_attn.v_proj.weight": (c["kv_heads"] * hd, d),
                    p + "self_attn.o_proj.weight": (d, c["heads"] * hd),
                    p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                    p + "mlp.gate_proj.weight": (c["ff"], d), p + "mlp.up_proj.weight": (c["ff"], d),
                    p + "mlp.down_proj.weight": (d, c["ff"]),
                    p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,)})
    return out


def fused(layout, sd, name):
    if name not in layout:
        return sd[name]
    dim, pieces, pad = layout.params[name]
    parts = [sd[t].narrow(dim, a, n) for t, a, n in pieces]
    if pad:
        s = list(parts[0].shape)
        s[dim] = pad
        parts.append(torch.zeros(s, dtype=parts[0].dtype, device=parts[0].device))
    return torch.cat(parts, dim)


def load_weights(layout, params, sd, names):
    """vLLM's path: every changed checkpoint tensor's slice into its place."""
    where = {}
    for pname, (dim, pieces, _) in layout.params.items():
        if pname not in params:                 # a tie the engine holds as the embedding itself
            continue
        off = 0
        for t, a, n in pieces:
            where.setdefault(t, []).append((pname, dim, off, a, n))
            off += n
    for t in names:
        for pname, dim, off, a, n in where.get(t, [(t, 0, 0, 0, None)]):
            src = sd[t] if n is None else sd[t].narrow(dim, a, n)
            dst = params[pname] if n is None else params[pname].narrow(dim, off, n)
            dst.copy_(src, non_blocking=True)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=QWEN3_06B["layers"])
    ap.add_argument("--fraction", type=float, default=0.016)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3, help="steps published; (a), (b), (c): best of")
    ap.add_argument("--batch", action="store_true", help="CPU parameters through the batched scatter (CUDA's path)")
    a = ap.parse_args()
    if a.batch:
        wsync._engine._BATCH_CPU = True
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench-engine: --device cuda, but torch.cuda.is_available() is False")
    c = dict(QWEN3_06B, layers=a.layers)
    sh = shapes(c)
    g = torch.Generator().manual_seed(0)
    sd = dict((k, (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16)) for k, s in sorted(sh.items()))
    total = sum(v.numel() for v in sd.values())
    print("bench-engine: Qwen3-0.6B shapes, %d layers, %d parameters (%.2f GB bf16), %d ranks, %.1f%% changed, "
          "targets on %s%s%s" % (a.layers, total, total * 2 / 1e9, a.world, a.fraction * 100, dev,
                                 " (%s)" % torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
                                 ", batched scatter forced" if a.batch else ""), flush=True)
    tmp = tempfile.mkdtemp(prefix="wsync-bench-engine-")
    try:
        store = os.path.join(tmp, "bucket")
        pub = wsync.Publisher(store, fsync=False)
        pub.publish(0, sd)
        lays = [wsync.EngineLayout.tensor_parallel(sh, r, a.world, wsync.RULES_QWEN3) for r in range(a.world)]
        # lm_head is tied: the embedding's tensor (vLLM's tie_weights), not a parameter of its own
        params = [dict((k, fused(lays[r], sd, k).clone().to(dev)) for k in sorted(lays[r].shapes)
                       if k not in lays[r].ties) for r in range(a.world)]
        subs = []
        for r in range(a.world):
            s = wsync.Subscriber(store, params[r], layout=lays[r])
            s.sync()                             # step 0: every parameter whole
            subs.append(s)
        host = sd
        if dev.type == "cuda":
            host = dict((k, v.pin_memory()) for k, v in sd.items())
        changed_names = sorted(sd)               # random positions: every tensor changed
        best = [dict(ta=float("inf"), tca=float("inf"), tb=float("inf"), tc=float("inf"), apply=float("inf"))
                for _ in range(a.world)]
        last = [None] * a.world
        uploads = [0] * a.world
        split = [None] * a.world      # batched: the best take's (C walk, staging, upload and scatter) seconds
        ok = [True] * a.world
        for step in range(1, a.repeat + 1):
            # a.fraction of each tensor's elements, at random positions, one bf16 ulp up
            for k in sorted(sd):
                flat = sd[k].view(-1).view(torch.int16)
                n = max(1, int(flat.numel() * a.fraction))
                pos = torch.randint(0, flat.numel(), (n,), generator=g)
                flat[pos] += 1
            if host is not sd:
                for k in host:
                    host[k].copy_(sd[k])
            ps = pub.publish(step, sd)
            print("trainer: step %d changed %d of %d elements (%.2f%%), delta %.1f MB"
                  % (step, ps.changed, ps.elements, 100.0 * ps.changed / ps.elements, ps.delta_bytes / 1e6), flush=True)
            for r in range(a.world):
                t0 = time.perf_counter()
                bench_mirror_sync(subs[r])       # the background's part
                best[r]["apply"] = min(best[r]["apply"], time.perf_counter() - t0)
            for r in range(a.world):
                lay, prm, b = lays[r], params[r], best[r]
                sync(dev)
                t0 = time.perf_counter()
                st = subs[r].take()
                sync(dev)
                ta = time.perf_counter() - t0
                k = subs[r]._sink
                uploads[r] = getattr(k, "uploads", 0)
                if uploads[r] and ta < b["ta"]:   # the flushes (uploads, scatters) ran inside the take
                    split[r] = (st.pause_seconds - k.stage_s - k.flush_s, k.stage_s, k.flush_s)
                b["ta"] = min(b["ta"], ta)
                b["tca"] = min(b["tca"], st.pause_seconds)
                last[r] = st
                if step == a.repeat:
                    ok[r] = all(torch.equal(prm[k].cpu().view(torch.int16), fused(lay, sd, k).view(torch.int16))
                                for k in prm)
                sync(dev)
                t0 = time.perf_counter()
                load_weights(lay, prm, host, changed_names)
                sync(dev)
                b["tb"] = min(b["tb"], time.perf_counter() - t0)
                full = dict((k, fused(lay, sd, k)) for k in prm)
                mod = torch.nn.Module()
                for i, (k, v) in enumerate(sorted(prm.items())):
                    mod.register_parameter("p%d" % i, torch.nn.Parameter(v, requires_grad=False))
                state = dict(("p%d" % i, full[k]) for i, k in enumerate(sorted(prm)))
                sync(dev)
                t0 = time.perf_counter()
                mod.load_state_dict(state)
                sync(dev)
                b["tc"] = min(b["tc"], time.perf_counter() - t0)
                if step == a.repeat:
                    ok[r] = ok[r] and all(torch.equal(prm[k].cpu(), full[k]) for k in prm)
                del full, state, mod
        print("%-5s %12s %12s %14s %14s %8s %12s %12s %7s %7s %12s %12s %12s %s" % (
            "rank", "(a) take ms", "of which C", "(b) load_w ms", "(c) state ms", "a/b", "positions",
            "bytes recv", "calls", "uploads", "apply ms", "records MB", "params MB", "exact"))
        host_mb = total * 2 / 1e6
        for r in range(a.world):
            b, st = best[r], last[r]
            pb = sum(p.numel() * p.element_size() for p in params[r].values())
            print("%-5d %12.2f %12.2f %14.2f %14.2f %8.3f %12d %12d %7d %7d %12.1f %12.1f %12.1f %s"
                  % (r, b["ta"] * 1e3, b["tca"] * 1e3, b["tb"] * 1e3, b["tc"] * 1e3, b["ta"] / b["tb"],
                     st.param_positions, st.param_bytes, st.calls, uploads[r], b["apply"] * 1e3,
                     st.record_bytes / 1e6, pb / 1e6, "yes" if ok[r] else "NO"))
        print("(a), (b), (c), apply: best of %d steps; of which C: inside wsync_engine_take (with batched "
              "parameters the staging, wsync writing each changed parameter's positions and values into the "
              "host buffer, and the upload and scatters, made at the take's end call, included); calls: one per "
              "parameter that changed. Memory per rank: the mirror's host copy %.1f MB "
              "(the whole model) + its records + the rank's parameters (+ with batched parameters a staging "
              "buffer on the host, pinned, and one on the device, each at most %d MB); apply: the mirror's apply "
              "of a step (its background thread, not the pause), per rank"
              % (a.repeat, host_mb, wsync._mirror.BATCH_BYTES >> 20))
        for r in range(a.world):
            if split[r]:
                print("batched rank %d: the best take's %.2f ms in wsync_engine_take's walk of the records and "
                      "staging in C, %.2f ms staging in Python (callbacks' copies into the host buffer), %.2f ms "
                      "uploading and scattering (synchronized)" % (r, split[r][0] * 1e3, split[r][1] * 1e3,
                                                                   split[r][2] * 1e3))
        bench_check_unmoved(subs)
        print("memory: this process %d MB RSS (the trainer, its publisher, %d ranks' mirrors and parameters)"
              % (rss_mb(), a.world))
        for s in subs:
            s.close()
        if not all(ok):
            sys.exit("bench-engine: a rank's parameters differ from the trainer's fused slices")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_check_unmoved(subs, n=200):
    """check_unmoved per take: by the recorded identities (the take's) and
    in full (check_unmoved_full: every parameter through _changed)."""
    from wsync import _tensors
    for r, sub in enumerate(subs):
        ts = sub._ts
        _tensors.check_unmoved(ts)
        best = {}
        for what, fn in (("identity", _tensors.check_unmoved), ("full", getattr(_tensors, "check_unmoved_full",
                                                                                 _tensors.check_unmoved))):
            t = float("inf")
            for _ in range(n):
                t0 = time.perf_counter()
                fn(ts)
                t = min(t, time.perf_counter() - t0)
            best[what] = t
        print("check_unmoved rank %d: %d parameters, %.3f ms per take (identities; %.2f us a parameter), full "
              "check %.3f ms (%.2f us a parameter), %.3fx" % (r, len(ts), best["identity"] * 1e3,
                                                               best["identity"] * 1e6 / max(len(ts), 1),
                                                               best["full"] * 1e3, best["full"] * 1e6 / max(len(ts), 1),
                                                               best["identity"] / best["full"]))


def bench_mirror_sync(sub):
    """The mirror to HEAD without a take (the background's part)."""
    import ctypes
    from wsync import _lib
    st, err = _lib.SyncStats(), _lib.Error()
    with wsync._Guard(sub._handle(), sub._lock) as ptr:
        rc = wsync._L.wspy_mirror_sync(ptr, wsync._STEP_LATEST, ctypes.byref(st), ctypes.byref(err))
    wsync._check(rc, err)


if __name__ == "__main__":
    main()
