"""Host cost of the bridge per eager operator, against PyTorch CPU eager in the same run.

A chain of N ``y = y + x`` on a [8, 128] float32 tensor (the issue's benchmark). For the tpu the
wall time per operator is split into
  - emulator: host time inside the emulator (launches, waits, transfers) — excluded;
  - backend: the rest of the time inside the Rust backend's operator call (dispatch, kernel
    cache, node building);
  - bridge: everything else — Python, PyTorch's dispatcher and autograd layer, the C++ shim,
    marshalling the arguments and wrapping the result.
The goal is bridge (and bridge + backend) at most 3x PyTorch CPU eager's per-operator time.

    scripts/python.sh python/benchmarks/bridge_overhead.py [--ops 1000] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import tpuemu
from _common import chain, positive


def cpu_per_op(n, repeat):
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    chain(x, y, n)
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        chain(x, y, n)
        runs.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(runs)


def tpu_per_op(n, repeat, mode):
    x, y = torch.randn(8, 128).to("tpu"), torch.randn(8, 128).to("tpu")
    with tpuemu.mode_guard(mode):
        chain(x, y, n)
        tpuemu.sync()
        rows = []
        for _ in range(repeat):
            tpuemu.reset_timing()
            t0 = time.perf_counter_ns()
            r = chain(x, y, n)
            tpuemu.sync()
            wall = time.perf_counter_ns() - t0
            t = tpuemu.timing()
            del r
            rows.append(
                {
                    "wall": wall / n,
                    "emulator": t["emulator_ns"] / n,
                    "backend": (t["backend_ns"] - t["emulator_ns"]) / n,
                    "bridge": (wall - t["backend_ns"]) / n,
                }
            )
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=positive, default=1000, help="operators per chain")
    ap.add_argument("--repeat", type=positive, default=5, help="chains timed (median of)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cpu = cpu_per_op(a.ops, a.repeat)
    out = {"ops": a.ops, "cpu_ns_per_op": cpu, "tpu": {}}
    for mode in ["strict", "defer"]:
        out["tpu"][mode] = tpu_per_op(a.ops, a.repeat, mode)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"chain of {a.ops} adds on [8, 128] float32, median of {a.repeat} runs, host ns per operator")
    print(f"PyTorch CPU eager: {cpu:8.0f}")
    for mode, r in out["tpu"].items():
        print(
            f"tpu {mode:6}: wall {r['wall']:8.0f} = bridge {r['bridge']:6.0f} + backend {r['backend']:6.0f}"
            f" + emulator {r['emulator']:7.0f};  bridge/CPU {r['bridge'] / cpu:4.2f}x,"
            f" (bridge+backend)/CPU {(r['bridge'] + r['backend']) / cpu:4.2f}x"
        )


if __name__ == "__main__":
    main()
