"""A small GPT-style model trained for a few steps on device "tpu", eager or compiled.

    scripts/python.sh examples/train_gpt.py [--steps 5] [--compile] [--mode defer] [--chip v6e]
    scripts/python.sh examples/train_gpt_compiled.py      # the same with torch.compile

Decoder blocks (causal self-attention, GELU MLP, pre-LayerNorm), token and position
embeddings, and an output head tied to the token embedding (it stays tied on the device). The
data is a synthetic next-token task, so the loss falls within a few steps. `--trace step.json`
writes the last step's timeline for `tpuemu viz`.
"""

import argparse
import contextlib
import math
import time

import torch
from torch import nn
import torch.nn.functional as F

import tpuemu


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = scores.masked_fill(causal, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=64, d=64, heads=4, layers=2, context=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for m in self.modules():  # GPT-2's initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def batches(vocab, context, batch, seed=0):
    """Sequences that count up by a random stride: the next token is predictable."""
    g = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 4, (batch, 1), generator=g)
        seq = (start + stride * torch.arange(context + 1)) % vocab
        yield seq[:, :-1], seq[:, 1:]


def main(default_compile=False):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--compile", action="store_true", default=default_compile)
    ap.add_argument("--chip", default=None)
    ap.add_argument("--mode", default=None, choices=["strict", "debug", "defer"])
    ap.add_argument("--trace", default=None, help="write the last step's trace to this file")
    a = ap.parse_args()
    if a.chip:
        tpuemu.set_chip(a.chip)
    if a.mode:
        tpuemu.set_mode(a.mode)
    torch.manual_seed(0)
    model = GPT().to("tpu")
    assert model.head.weight is model.tok.weight
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        return loss

    if a.compile:
        step = torch.compile(step, backend="tpu")
    data = batches(64, 32, a.batch)
    print(f"GPT on {tpuemu.chip()} ({tpuemu.mode()}{', compiled' if a.compile else ''}):"
          f" {sum(p.numel() for p in model.parameters())} parameters")
    for i in range(a.steps):
        x, y = (t.to("tpu") for t in next(data))
        t0 = time.perf_counter()
        before = tpuemu.metrics()
        tracing = a.trace and i == a.steps - 1
        with tpuemu.trace(a.trace) if tracing else contextlib.nullcontext():
            opt.zero_grad()
            loss = step(x, y)
            opt.step()
            value = loss.item()
        m = tpuemu.metrics()
        print(f"step {i}: loss {value:.4f}  {m['kernels_launched'] - before['kernels_launched']:4d} kernels"
              f"  {(m['simulated_time_ns'] - before['simulated_time_ns']) / 1e6:8.3f} ms simulated"
              f"  {time.perf_counter() - t0:6.2f} s host")
    m = tpuemu.metrics()
    print(f"CPU fallbacks: {m['cpu_fallbacks'] or 'none'}")
    if a.compile:
        from tpuemu._compile import compiled_graphs

        print("graphs:", ", ".join(f"{n} {s}" for n, s in compiled_graphs()))
    if a.trace:
        print(f"trace of the last step: {a.trace} (target/release/tpuemu viz {a.trace})")


if __name__ == "__main__":
    main()
