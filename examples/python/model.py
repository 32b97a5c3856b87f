"""The small character-level GPT shared by train.py and serve.py.

Both sides build the same architecture from the same text file: the
vocabulary is the sorted set of the file's characters, and the last 10% of
the file is held out (the trainer never trains on it; the server measures
its loss there). No weight tying and no persistent buffers, so the
state_dict is exactly the parameters, each its own contiguous tensor.

The sizes are options of both scripts (add_arguments): the defaults make a
GPT of about 3.2 million parameters; serve.py must be given the sizes that
train.py was given (a different shape is refused by the Subscriber).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, HEADS, D_MODEL, CONTEXT = 4, 8, 256, 64
DEFAULT_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data.txt")


def add_arguments(p):
    """The model's sizes as options (the same in train.py and serve.py)."""
    p.add_argument("--layers", type=int, default=LAYERS, help="transformer blocks")
    p.add_argument("--heads", type=int, default=HEADS, help="attention heads (dividing --d-model)")
    p.add_argument("--d-model", type=int, default=D_MODEL, help="width of the residual stream")
    p.add_argument("--context", type=int, default=CONTEXT, help="characters of context")


def check_arguments(p, a):
    if a.layers < 1 or a.heads < 1 or a.d_model < 1 or a.context < 1:
        p.error("--layers, --heads, --d-model and --context must be at least 1")
    if a.d_model % a.heads:
        p.error("--heads (%d) must divide --d-model (%d)" % (a.heads, a.d_model))


def from_arguments(a, vocab_size):
    return GPT(vocab_size, a.layers, a.heads, a.d_model, a.context)


def load_text(path, context=CONTEXT):
    """(vocabulary, encoded train part, encoded held-out part)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("cannot read the text file %s: %s" % (path, e))
    if len(text) < 20 * context:
        sys.exit("%s: %d characters, at least %d needed" % (path, len(text), 20 * context))
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = int(len(data) * 0.9)
    return vocab, data[:cut], data[cut:]


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab_size, layers=LAYERS, heads=HEADS, d_model=D_MODEL, context=CONTEXT):
        super().__init__()
        self.layers, self.heads, self.d_model, self.context = layers, heads, d_model, context
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def held_out_loss(model, held, batch=32):
    """Mean loss over the held-out part in non-overlapping windows."""
    c = model.context
    n = (len(held) - 1) // c
    if n == 0:
        return float("nan")
    device = next(model.parameters()).device
    xs = held[:n * c].view(n, c).to(device)
    ys = held[1:n * c + 1].view(n, c).to(device)
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, batch):
            total += model(xs[i:i + batch], ys[i:i + batch]).item() * len(xs[i:i + batch])
    return total / n
