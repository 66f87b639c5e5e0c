"""An MLP training loop on device "tpu" (an emulated TPU chip), checked against the CPU.

    scripts/python.sh examples/train_mlp.py [--steps 20] [--chip v5e] [--mode strict|debug|defer]

The only change from a CPU training loop is `.to("tpu")`. At the end it prints the loss curve
next to the same loop on the CPU, and what the device did (tpuemu.metrics()).
"""

import argparse
import copy
import time

import torch
from torch import nn
import torch.nn.functional as F

import tpuemu


def data(n=256, d=32, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, d, generator=g)
    return x, y


def train(model, x, y, steps, batch):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        i = (step * batch) % len(x)
        xb, yb = x[i : i + batch], y[i : i + batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # a sync point: the value comes back to the host
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--chip", default=None, help="v4, v5e, v5p, v6e, v7x or a preset TOML file")
    ap.add_argument("--mode", default=None, choices=["strict", "debug", "defer"])
    a = ap.parse_args()
    if a.chip:
        tpuemu.set_chip(a.chip)
    if a.mode:
        tpuemu.set_mode(a.mode)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 4))
    cpu_model = copy.deepcopy(model)
    x, y = data()

    model.to("tpu")
    t0 = time.perf_counter()
    tpu_losses = train(model, x.to("tpu"), y.to("tpu"), a.steps, a.batch)
    wall = time.perf_counter() - t0
    cpu_losses = train(cpu_model, x, y, a.steps, a.batch)

    print(f"step  loss(tpu, {tpuemu.chip()}, {tpuemu.mode()})  loss(cpu)")
    for i, (lt, lc) in enumerate(zip(tpu_losses, cpu_losses)):
        print(f"{i:4d}  {lt:10.5f}  {lc:10.5f}")
    m = tpuemu.metrics()
    print(
        f"\n{a.steps} steps: {m['ops']} operator calls, {m['kernels_launched']} kernels,"
        f" {m['simulated_time_ns'] / 1e6:.3f} ms simulated, {wall:.1f} s on this host;"
        f" CPU fallbacks: {m['cpu_fallbacks'] or 'none'}"
    )


if __name__ == "__main__":
    main()
