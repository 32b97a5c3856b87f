#!/usr/bin/env python3
"""An inference engine that follows train.py's chain: the same GPT, its bf16
parameters patched in place by a wsync Subscriber, generating a line of text
between updates while the next one is fetched and verified in the background.

Each update prints the step the engine now holds, its loss on the held-out
last 10% of the text, the engine's pause (the time inside apply_ready()) and
the state digest of its tensors, which equals train.py's digest for that step.

    PYTHONPATH=python python3 examples/python/serve.py --until-step 200
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
import model  # noqa: E402  (the architecture shared with train.py)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--store", default="./py-bucket", help="the trainer's wsync store")
    p.add_argument("--text", default=model.DEFAULT_TEXT,
                   help="the trainer's text file (vocabulary and held-out slice)")
    p.add_argument("--until-step", type=int, default=None, metavar="N",
                   help="exit once the engine holds step N or later (default: run until Ctrl-C)")
    p.add_argument("--interval", type=int, default=100, metavar="MS",
                   help="how often the background polls the store for a new step")
    p.add_argument("--wait", type=float, default=60.0, metavar="S",
                   help="how long to wait for the trainer's first step")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling (the same for every line)")
    p.add_argument("--prompt", default="The ", help="the start of every generated line")
    p.add_argument("--chars", type=int, default=60, help="characters generated per line")
    p.add_argument("--device", default="cpu",
                   help="torch device of the engine (cpu; a CUDA device uses wsync's mirror "
                        "subscriber, not run on a GPU here)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    model.add_arguments(p)              # the sizes train.py was given
    a = p.parse_args()
    if a.interval < 1 or a.chars < 1 or a.threads < 1:
        p.error("--interval, --chars and --threads must be at least 1")
    model.check_arguments(p, a)
    return a


def generate(m, vocab, prompt, chars, seed):
    """Samples `chars` characters after `prompt`, stopping at a line's end."""
    index = {c: i for i, c in enumerate(vocab)}
    idx = [index[c] for c in prompt if c in index] or [0]
    g = torch.Generator().manual_seed(seed)
    device = next(m.parameters()).device
    out = []
    with torch.no_grad():
        for _ in range(chars):
            x = torch.tensor([idx[-m.context:]], device=device)
            probs = m(x)[0, -1].float().softmax(-1).cpu()
            i = int(torch.multinomial(probs, 1, generator=g))
            if vocab[i] == "\n":
                break
            idx.append(i)
            out.append(vocab[i])
    return prompt + "".join(out)


def follow(store, tensors, interval, wait):
    """A Subscriber synced to HEAD, waiting up to `wait` seconds for the
    trainer's first step. Returns (subscriber, SyncStats, seconds)."""
    deadline = time.monotonic() + wait
    said = None
    while True:
        sub = None
        try:
            sub = wsync.Subscriber(store, tensors, interval_ms=interval)
            t = time.perf_counter()
            st = sub.sync()
            return sub, st, time.perf_counter() - t
        except wsync.WsyncError as e:
            if sub is not None:
                sub.close()
            waiting = {"WSYNC_ERR_NO_STORE": "the store %s does not exist yet (is the trainer running?)" % store,
                       "WSYNC_ERR_NOT_FOUND": "nothing is published in %s yet" % store}.get(e.code)
            if waiting is None:
                if e.code == "WSYNC_ERR_LAYOUT":
                    sys.exit("this model is not the trainer's (were --layers, --heads, --d-model and "
                             "--context the trainer's?): %s" % e)
                sys.exit("cannot follow %s: %s" % (store, e))
            if time.monotonic() > deadline:
                sys.exit("gave up after %.0f s: %s" % (wait, waiting))
            if waiting != said:
                print("serve: waiting: %s" % waiting, file=sys.stderr, flush=True)
                said = waiting
            time.sleep(0.2)


def report(m, held, step, pause_s, digest, how):
    print("serve step %4d  held-out loss %.3f  pause %7.2f ms (%s)  digest %016x"
          % (step, model.held_out_loss(m, held), pause_s * 1e3, how, digest), flush=True)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    try:
        device = torch.device(a.device)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as e:
        sys.exit("device %r is not usable here: %s" % (a.device, e))

    vocab, _, held = model.load_text(a.text, a.context)
    m = model.from_arguments(a, len(vocab)).to(device, torch.bfloat16).eval()
    tensors = m.state_dict()            # views of the parameters: patched in place
    sub, st, seconds = follow(a.store, tensors, a.interval, a.wait)
    try:
        report(m, held, sub.step, seconds, sub.state_digest(),
               "first sync, %.1f KB" % (st.bytes_fetched / 1e3))
        sub.start()                     # fetch and verify the next steps in the background
        while True:
            print("  | " + generate(m, vocab, a.prompt, a.chars, a.seed), flush=True)
            if a.until_step is not None and sub.step >= a.until_step:
                break
            while sub.ready() is None:
                time.sleep(a.interval / 1e3)
            before = sub.step
            t = time.perf_counter()
            st = sub.apply_ready()      # the engine's pause: the tensors change here
            pause = time.perf_counter() - t
            report(m, held, sub.step, pause, sub.state_digest(),
                   "from step %d, %d objects" % (before, st.anchors + st.deltas))
    except wsync.WsyncError as e:
        sys.exit("update failed (the engine keeps step %s): %s" % (sub.step, e))
    except KeyboardInterrupt:
        print("interrupted at step %s" % sub.step)
    finally:
        sub.close()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
