#!/usr/bin/env python3
"""A tensor-parallel engine over 2 processes, with fused qkv_proj and
gate_up_proj, following a torch trainer through wsync's engine map.

The trainer (this process) trains a small Llama/Qwen3-style model with AdamW,
as examples/python/train.py does, and publishes the bf16 cast of every step.
Two engine ranks (child processes) hold the model as vLLM does for tensor
parallelism over 2: qkv_proj = q, k and v stacked and gate_up_proj = gate
and up stacked, each rank's half of their rows (column-parallel); o_proj and
down_proj split by columns (row-parallel); the vocabulary split with padding
rows. Each rank's layout comes from wsync.EngineLayout.tensor_parallel with
the Qwen3 rule table, and each take hands the rank only its share of the
changes, scattered into its own (fused, sharded) parameters.

The trainer prints, for every step and rank, the state digest of the
trainer's tensors fused and sliced as that rank holds them; each rank prints
the digest of its parameters after every take. Equal digests: bit-identical.

    make python
    PYTHONPATH=python python3 examples/python/engine_tp.py --store ./tp-bucket --steps 20
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preflight  # noqa: E402  (standard library only)
preflight.check(os.path.basename(__file__))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import wsync  # noqa: E402

WORLD = 2


class Layer(nn.Module):
    """Llama's decoder layer's weights (the names are what matters here)."""

    def __init__(self, d, heads, kv_heads, ff):
        super().__init__()
        hd = d // heads
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(d, heads * hd, bias=False)
        self.self_attn.k_proj = nn.Linear(d, kv_heads * hd, bias=False)
        self.self_attn.v_proj = nn.Linear(d, kv_heads * hd, bias=False)
        self.self_attn.o_proj = nn.Linear(heads * hd, d, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(d, ff, bias=False)
        self.mlp.up_proj = nn.Linear(d, ff, bias=False)
        self.mlp.down_proj = nn.Linear(ff, d, bias=False)
        self.input_layernorm = nn.LayerNorm(d)
        self.heads, self.kv, self.hd = heads, kv_heads, hd

    def forward(self, x):
        b, t, d = x.shape
        h = self.input_layernorm(x)
        q = self.self_attn.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.self_attn.k_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.self_attn.v_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = torch.softmax((q @ k.transpose(-1, -2)) / self.hd ** 0.5 +
                          torch.full((t, t), float("-inf")).triu(1), -1) @ v
        x = x + self.self_attn.o_proj(a.transpose(1, 2).reshape(b, t, d))
        g = self.mlp.gate_proj(x)
        return x + self.mlp.down_proj(torch.nn.functional.silu(g) * self.mlp.up_proj(x))


class Model(nn.Module):
    def __init__(self, vocab=250, d=64, layers=2, heads=4, kv_heads=2, ff=128):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, d)
        self.model.layers = nn.ModuleList([Layer(d, heads, kv_heads, ff) for _ in range(layers)])
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(x)


def bf16_state(m):
    return dict((k, v.detach().to(torch.bfloat16).contiguous()) for k, v in m.state_dict().items())


def fused(layout, sd, name):
    """The trainer's tensors fused and sliced as the rank's parameter `name`
    (padding rows zero, as the engine allocates them)."""
    if name not in layout:
        return sd[name]
    dim, pieces, pad = layout.params[name]
    parts = [sd[t].narrow(dim, a, n) for t, a, n in pieces]
    if pad:
        shape = list(parts[0].shape)
        shape[dim] = pad
        parts.append(torch.zeros(shape, dtype=parts[0].dtype))
    return torch.cat(parts, dim)


def rank_digest(layout, params):
    return wsync.state_digest(dict((k, params[k]) for k in sorted(params)))


def engine(a):
    """One rank: its layout, its own fused and sharded parameters, a take per
    published step until --steps."""
    m = Model()
    shapes = dict((k, tuple(v.shape)) for k, v in m.state_dict().items())
    lay = wsync.EngineLayout.tensor_parallel(shapes, a.rank, WORLD, wsync.RULES_QWEN3)
    params = dict((k, torch.zeros(s, dtype=torch.bfloat16)) for k, s in sorted(lay.shapes.items()))
    nbytes = sum(p.numel() * 2 for p in params.values())
    deadline = time.time() + a.wait
    while True:          # the trainer's first anchor (the mirror's layout)
        try:
            sub = wsync.Subscriber(a.store, params, layout=lay)
            break
        except (wsync.WsyncNoStoreError, wsync.WsyncNotFoundError, wsync.WsyncEmptyChainError):
            if time.time() > deadline:
                sys.exit("rank %d: no chain at %s" % (a.rank, a.store))
            time.sleep(0.05)
    with sub:
        print("rank %d: %d parameters, %d bytes (fused, sharded)" % (a.rank, len(params), nbytes), flush=True)
        sub.start(20)
        while True:
            st = sub.take()
            if st.handed and a.ready:
                open(os.path.join(a.ready, "rank%d" % a.rank), "w").close()    # the trainer goes on
            if st.handed:
                print("rank %d step %4d  pause %6.2f ms  %7d positions  %8d bytes  digest %016x"
                      % (a.rank, st.step, st.pause_seconds * 1e3, st.param_positions, st.param_bytes,
                         rank_digest(lay, params)), flush=True)
                if st.step >= a.steps:
                    return
            elif time.time() > deadline + a.steps:
                sys.exit("rank %d: step %d never came" % (a.rank, a.steps))
            time.sleep(0.01)


def trainer(a):
    torch.manual_seed(a.seed)
    m = Model()
    opt = torch.optim.AdamW(m.parameters(), lr=2e-3)
    shapes = dict((k, tuple(v.shape)) for k, v in m.state_dict().items())
    lays = [wsync.EngineLayout.tensor_parallel(shapes, r, WORLD, wsync.RULES_QWEN3) for r in range(WORLD)]
    ready = tempfile.mkdtemp(prefix="engine-tp-")
    kids = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r), "--store", a.store,
                              "--steps", str(a.steps), "--wait", str(a.wait), "--ready", ready])
            for r in range(WORLD)]
    pub = wsync.Publisher(a.store, anchor_every=50, new_chain=True)
    try:
        for step in range(a.steps + 1):
            if step == 1:    # the ranks hold step 0 (their first take, every parameter whole)
                deadline = time.time() + a.wait
                while len(os.listdir(ready)) < WORLD and time.time() < deadline and \
                        all(k.poll() is None for k in kids):
                    time.sleep(0.05)
            if step:
                idx = torch.randint(0, 250, (4, 32))
                loss = nn.functional.cross_entropy(m(idx[:, :-1]).reshape(-1, 250), idx[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
            sd = bf16_state(m)
            st = pub.publish(step, sd)
            for r in range(WORLD):
                want = dict((k, fused(lays[r], sd, k)) for k in lays[r].shapes)
                print("train step %4d rank %d  changed %5.1f%%  digest %016x"
                      % (step, r, 100.0 * st.changed / max(st.elements, 1), rank_digest(lays[r], want)), flush=True)
            time.sleep(a.pace)
    finally:
        rcs = [k.wait() for k in kids]
        for f in os.listdir(ready):
            os.unlink(os.path.join(ready, f))
        os.rmdir(ready)
    if any(rcs):
        sys.exit("engine ranks exited %s" % rcs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", default="./tp-bucket")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--ready", default="", help=argparse.SUPPRESS)
    p.add_argument("--wait", type=float, default=60.0, help="seconds a rank waits for the chain")
    p.add_argument("--pace", type=float, default=0.2, help="seconds between the trainer's steps")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.rank >= 0:
        engine(a)
    else:
        trainer(a)


if __name__ == "__main__":
    main()
