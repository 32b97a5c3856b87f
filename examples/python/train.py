#!/usr/bin/env python3
"""Trains a small character-level GPT with AdamW and publishes every optimizer
step into a wsync store, as an RL trainer hands its weights to its engines.

The optimizer keeps an fp32 master copy (the model); after each step the
trainer publishes its bf16 cast (what the engines run), and prints the
state digest of what it published: serve.py prints the digest of the
tensors it holds at its step, and equal digests mean bit-identical weights.

    PYTHONPATH=python python3 examples/python/train.py --steps 200
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preflight  # noqa: E402  (standard library only)
preflight.check(os.path.basename(__file__))   # torch here, and wsync with its library, or exit 1 saying what to do

import torch  # noqa: E402
import wsync  # noqa: E402
import model  # noqa: E402  (the architecture shared with serve.py)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--text", default=model.DEFAULT_TEXT,
                   help="text file to train on (its last 10%% is held out)")
    p.add_argument("--store", default="./py-bucket",
                   help="wsync store: a directory, http(s)://host/prefix or s3://bucket/prefix")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps to train and publish")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights and batches")
    p.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda)")
    p.add_argument("--batch", type=int, default=8, help="sequences per batch")
    p.add_argument("--lr", type=float, default=2e-3, help="AdamW learning rate")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    model.add_arguments(p)
    a = p.parse_args()
    if a.steps < 1 or a.batch < 1 or a.threads < 1:
        p.error("--steps, --batch and --threads must be at least 1")
    model.check_arguments(p, a)
    return a


def bf16_state(m):
    """The bf16 cast of the fp32 master weights: what the engines run."""
    return {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in m.state_dict().items()}


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        device = torch.device(a.device)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as e:
        sys.exit("device %r is not usable here: %s" % (a.device, e))

    vocab, train, held = model.load_text(a.text, a.context)
    m = model.from_arguments(a, len(vocab)).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=0.01)
    n_params = sum(p.numel() for p in m.parameters())

    try:
        pub = wsync.Publisher(a.store)
    except wsync.WsyncError as e:
        sys.exit("cannot open the store %s: %s" % (a.store, e))
    if pub.head is not None:
        sys.exit("the store %s already holds a chain (HEAD step %d): give an empty store "
                 "(remove the directory, or another --store)" % (a.store, pub.head))

    print("GPT: %d layers, %d heads, d_model %d, context %d, vocabulary %d, %d parameters; "
          "%d training / %d held-out characters; publishing bf16 to %s"
          % (a.layers, a.heads, a.d_model, a.context, len(vocab), n_params,
             len(train), len(held), a.store), flush=True)

    def publish(step, loss):
        state = bf16_state(m)
        t = time.perf_counter()
        st = pub.publish(step, state)
        ms = (time.perf_counter() - t) * 1e3
        if st.state != wsync.state_digest(state):      # HEAD records the digest of what we hold
            sys.exit("step %d: the published state digest differs from our own" % step)
        kind = "anchor %7.1f KB" % (st.anchor_bytes / 1e3) if st.wrote_anchor else \
               "delta  %7.1f KB" % (st.delta_bytes / 1e3)
        print("train step %4d  loss %s  changed %5.1f%%  %s  publish %6.1f ms  digest %016x"
              % (step, "%.3f" % loss if loss is not None else "  -  ",
                 100.0 * st.changed / max(st.elements, 1) if step else 100.0, kind, ms, st.state),
              flush=True)

    g = torch.Generator().manual_seed(a.seed)
    try:
        publish(0, None)                                # the initial weights: step 0
        for step in range(1, a.steps + 1):
            ix = torch.randint(len(train) - a.context - 1, (a.batch,), generator=g)
            x = torch.stack([train[i:i + a.context] for i in ix]).to(device)
            y = torch.stack([train[i + 1:i + 1 + a.context] for i in ix]).to(device)
            loss = m(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            publish(step, loss.item())
    except wsync.WsyncError as e:
        sys.exit("publishing failed: %s" % e)
    except KeyboardInterrupt:
        print("interrupted; HEAD is step %s" % pub.head)
    finally:
        pub.close()


if __name__ == "__main__":
    main()
