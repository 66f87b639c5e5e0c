"""FSDP x tensor parallelism on an emulated TPU slice, launched by torchrun.

The zoo's tiny Llama (Hugging Face ``LlamaForCausalLM``) trains a few AdamW steps with FSDP2
(``fully_shard``) over the mesh's "dp" dimension and tensor + sequence parallelism
(``parallelize_module``) over "tp". Each rank is one chip of ``TPUEMU_SLICE`` (default: as many
v5e chips as ranks, 2x2 for four); gloo moves the collectives' bytes, the slice's interconnect
times them.

    scripts/python.sh -m torch.distributed.run --nproc-per-node 4 examples/train_fsdp_tp.py
    ... examples/train_fsdp_tp.py --steps 5 --mode defer --trace traces/   # then: tpuemu viz traces/
    ... examples/train_fsdp_tp.py --check    # the same steps on the CPU through gloo, compared
                                             # (float32 products at full precision on the tpu)

Rank 0 prints each step's loss and simulated time, and with ``--trace`` where the last step's
time went on its chip (compute, collectives, the part of them compute did not hide).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import tpuemu
from tpuemu.distributed import step_breakdown
from tpuemu.zoo.parallel import llama, tensor_parallel


def train(dev: str, dp: int, tp: int, steps: int, trace_dir: str | None):
    mesh = init_device_mesh(dev, (dp, tp), mesh_dim_names=("dp", "tp"))
    model, inputs = llama()
    model = model.to(dev)
    if tp > 1:
        tensor_parallel(model, mesh["tp"], sequence=True)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    # Each data-parallel replica trains on its own tokens.
    shift = mesh["dp"].get_local_rank()
    batch = {k: ((v + shift) % model.config.vocab_size).to(dev) for k, v in inputs.items()}
    rows = []
    for step in range(steps):
        last = step == steps - 1
        tracing = trace_dir is not None and dev == "tpu" and last
        ctx = tpuemu.trace(os.path.join(trace_dir, "step.json")) if tracing else contextlib.nullcontext()
        t0 = tpuemu.metrics()["simulated_time_ns"] if dev == "tpu" else 0.0
        wall = time.perf_counter()
        with ctx:
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            value = loss.item()
            if dev == "tpu":
                tpuemu.sync()
        sim = tpuemu.metrics()["simulated_time_ns"] - t0 if dev == "tpu" else 0.0
        rows.append((value, sim, time.perf_counter() - wall))
    params = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
              for n, p in model.named_parameters()}
    return rows, params


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree (dp = world / tp)")
    p.add_argument("--mode", choices=["strict", "defer"], default="strict")
    p.add_argument("--trace", metavar="DIR", help="write each rank's trace of the last step here")
    p.add_argument("--check", action="store_true",
                   help="also train on the CPU through gloo and compare losses and parameters")
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be at least 1")
    dist.init_process_group("cpu:gloo,tpu:tpu")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.tpu.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if args.tp < 1 or world % args.tp:
        p.error(f"--tp {args.tp} does not divide the world of {world} ranks")
    dp = world // args.tp
    tpuemu.set_mode(args.mode)
    if args.check:
        # The TPU's default, one bfloat16 pass per float32 product, is not what the CPU computes.
        tpuemu.set_matmul_precision("highest")
    rows, params = train("tpu", dp, args.tp, args.steps, args.trace)
    if rank == 0:
        s = tpuemu.distributed.slice()
        print(f"{s.spec}: dp {dp} x tp {args.tp}, {args.mode} mode")
        for i, (loss, sim, wall) in enumerate(rows):
            print(f"step {i}: loss {loss:.6f}  simulated {sim / 1e6:.3f} ms  host {wall:.2f} s")
        if args.trace:
            b = step_breakdown(os.path.join(args.trace, "step.rank0.json"))
            print("last step on chip 0: " + ", ".join(
                f"{k.removesuffix('_ns')} {v / 1e6:.3f} ms" for k, v in b.items()))
        c = tpuemu.metrics()["collectives"]
        print("collectives: " + ", ".join(
            f"{k} {v['calls']} ({v['bytes'] / 2**20:.2f} MiB, {v['ns'] / 1e6:.3f} ms)"
            for k, v in sorted(c.items())))
    if args.check:
        cpu_rows, cpu_params = train("cpu", dp, args.tp, args.steps, None)
        worst = max(float((params[k] - cpu_params[k]).abs().max()) for k in params)
        if rank == 0:
            print("CPU/gloo losses: " + " ".join(f"{r[0]:.6f}" for r in cpu_rows))
            print(f"largest parameter difference from CPU/gloo: {worst:.2e}")
        if worst > 1e-4:  # AdamW at lr 1e-2: a hundredth of a step
            raise SystemExit(f"rank {rank}: parameters differ from CPU/gloo by {worst:.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
