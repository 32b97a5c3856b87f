"""The small character-level GPT shared by train.py and serve.py.

Both sides build the same architecture from the same text file: the
vocabulary is the sorted set of the file's characters, and the last 10% of
the file is held out (the trainer never trains on it; the server measures
its loss there). No weight tying and no persistent buffers, so the
state_dict is exactly the parameters, each its own contiguous tensor.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, HEADS, D_MODEL, CONTEXT = 2, 4, 128, 64
DEFAULT_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data.txt")


def load_text(path):
    """(vocabulary, encoded train part, encoded held-out part)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("cannot read the text file %s: %s" % (path, e))
    if len(text) < 20 * CONTEXT:
        sys.exit("%s: %d characters, at least %d needed" % (path, len(text), 20 * CONTEXT))
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = int(len(data) * 0.9)
    return vocab, data[:cut], data[cut:]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.fc = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.out = nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // HEADS)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, D_MODEL)
        self.pos = nn.Embedding(CONTEXT, D_MODEL)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def held_out_loss(model, held, batch=32):
    """Mean loss over the held-out part in non-overlapping windows."""
    n = (len(held) - 1) // CONTEXT
    if n == 0:
        return float("nan")
    device = next(model.parameters()).device
    xs = held[:n * CONTEXT].view(n, CONTEXT).to(device)
    ys = held[1:n * CONTEXT + 1].view(n, CONTEXT).to(device)
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, batch):
            total += model(xs[i:i + batch], ys[i:i + batch]).item() * len(xs[i:i + batch])
    return total / n
