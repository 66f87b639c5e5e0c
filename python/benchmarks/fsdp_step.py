"""One FSDP2 training step of the zoo's Llama on 4 ranks: host wall time on the tpu (each rank
one emulated chip of v5e:2x2, gloo moving the collectives' bytes) against the same step on the
CPU through gloo, and the simulated step time with where it went on the chip.

    scripts/python.sh python/benchmarks/fsdp_step.py [--steps 5] [--mode strict|defer] [--ranks 4]

Each rank trains ``--steps`` steps after one warm-up step; the wall time of a step is the
slowest rank's, the median over steps. The simulated breakdown is rank 0's last step
(``tpuemu.distributed.step_breakdown``: compute, collectives, the part of them no kernel hid,
idle).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist


def _rank(rank: int, out_dir: str, steps: int, mode: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import tpuemu
    from tpuemu.zoo.parallel import llama

    dist.init_process_group("cpu:gloo,tpu:tpu")
    tpuemu.set_mode(mode)
    res = {}
    for dev in ("cpu", "tpu"):
        model, inputs = llama()
        mesh = init_device_mesh(dev, (dist.get_world_size(),))
        model = model.to(dev)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = {k: ((v + rank) % 128).to(dev) for k, v in inputs.items()}
        walls, sims = [], []
        for step in range(steps + 1):
            dist.barrier()  # every rank starts the step together (gloo, on the CPU)
            trace = os.path.join(out_dir, "trace", "step.json")
            last = dev == "tpu" and step == steps
            ctx = tpuemu.trace(trace) if last else contextlib.nullcontext()
            t0 = time.perf_counter()
            s0 = tpuemu.metrics()["simulated_time_ns"]
            with ctx:
                loss = model(**batch).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                loss.item()
                if dev == "tpu":
                    tpuemu.sync()
            if step > 0:
                walls.append(time.perf_counter() - t0)
                sims.append(tpuemu.metrics()["simulated_time_ns"] - s0)
        res[dev] = {"walls": walls, "sims": sims}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))
    dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5, help="timed steps after one warm-up")
    p.add_argument("--mode", choices=["strict", "defer"], default="strict")
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args(argv)
    if args.steps < 1 or args.ranks < 1:
        p.error("--steps and --ranks must be positive")
    import tpuemu.distributed as td

    out = tempfile.mkdtemp(prefix="tpuemu-fsdp-")
    td.spawn(_rank, args=(out, args.steps, args.mode), nprocs=args.ranks)
    ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(args.ranks)]
    s = td.Slice.parse(os.environ.get("TPUEMU_SLICE") or "v5e", args.ranks)

    def wall(dev):
        per_step = [max(r[dev]["walls"][i] for r in ranks) for i in range(args.steps)]
        return statistics.median(per_step)

    tpu, cpu = wall("tpu"), wall("cpu")
    sim = statistics.median(ranks[0]["tpu"]["sims"])
    b = td.step_breakdown(Path(out, "trace", "step.rank0.json"))
    print(f"FSDP2 step of the zoo's Llama on {args.ranks} ranks ({s.spec}, {args.mode} mode), "
          f"median of {args.steps} steps")
    print(f"host wall time   tpu {tpu * 1e3:8.1f} ms   CPU/gloo {cpu * 1e3:8.1f} ms   "
          f"ratio {tpu / cpu:5.1f}x")
    print(f"simulated step   {sim / 1e6:.3f} ms (rank 0)")
    print("  traced step    " + ", ".join(f"{k.removesuffix('_ns')} {v / 1e6:.3f} ms"
                                           for k, v in b.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
