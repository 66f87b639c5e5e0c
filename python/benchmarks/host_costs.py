"""Measures what the runtime's host-cost figures (``backend/src/runtime/config.rs``) stand for.

1. PyTorch CPU eager on one thread: a 1-element ``add``/``mul``/``relu``/``sum`` against view
   operators (``t``, ``view``, ``permute``, ``reshape``, ``transpose``, ``unsqueeze``,
   ``expand``, a slice): ``view_ns`` against the PyTorch part of ``op_dispatch_ns``.
2. The same views on "tpu" tensors through the bridge (PyTorch's generic view kernels: the
   backend never sees them).
3. Dispatching against recording on the bridge: a chain of ``y = y + x`` on ``[8, 128]``
   float32 (DeferAndFuse's size limit raised above it: nothing runs before the sync). Strict: the calls' wall time less the
   time inside the emulator (running the kernels), so dispatch and launch on the host.
   DeferAndFuse: the calls' wall time (recording only: nothing runs until the sync), and the
   sync (fusing, finding the kernel, launching; emulation excluded) apart.

Timings are best-of-``--repeat`` (``timeit``) or medians; the host's load moves them, so
compare figures from the same run.

    scripts/python.sh python/benchmarks/host_costs.py [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import timeit

import torch

os.environ.setdefault("TORCH_TPU_DEFER_MAX_OPS", "100000")  # read when the runtime starts
import tpuemu  # noqa: E402
from _common import chain, positive  # noqa: E402


def best_ns(f, number: int, repeat: int) -> float:
    return min(timeit.repeat(f, number=number, repeat=repeat)) / number * 1e9


def cpu_costs(repeat: int) -> dict:
    a, b = torch.randn(1), torch.randn(1)
    ops = {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "relu": lambda: a.relu(),
        "sum": lambda: a.sum(),
    }
    return {k: best_ns(f, 20_000, repeat) for k, f in ops.items()}


def view_costs(device: str, repeat: int) -> dict:
    x = torch.randn(8, 128).to(device)
    x4 = torch.randn(2, 8, 16, 16).to(device)
    one = torch.randn(1).to(device)
    views = {
        "t": lambda: x.t(),
        "view": lambda: x.view(128, 8),
        "permute": lambda: x4.permute(0, 2, 1, 3),
        "reshape": lambda: x.reshape(1024),
        "transpose": lambda: x.transpose(0, 1),
        "unsqueeze": lambda: x.unsqueeze(0),
        "expand": lambda: one.expand(8, 128),
        "slice": lambda: x[:, :64],
    }
    n = 20_000 if device == "cpu" else 2_000
    return {k: best_ns(f, n, repeat) for k, f in views.items()}


def dispatch_vs_record(n: int, rounds: int) -> dict:
    x, y = torch.randn(8, 128).to("tpu"), torch.randn(8, 128).to("tpu")
    out = {}
    for mode in ["strict", "defer"]:
        with tpuemu.mode_guard(mode):
            chain(x, y, n)
            tpuemu.sync()
            calls, syncs = [], []
            for _ in range(rounds):
                tpuemu.reset_timing()
                t0 = time.perf_counter_ns()
                r = chain(x, y, n)
                t1 = time.perf_counter_ns()
                emulated = tpuemu.timing()["emulator_ns"]
                tpuemu.sync()
                t2 = time.perf_counter_ns()
                emulated_at_sync = tpuemu.timing()["emulator_ns"] - emulated
                del r
                calls.append((t1 - t0 - emulated) / n)
                syncs.append((t2 - t1 - emulated_at_sync) / n)
            out[mode] = {
                "calls_ns_per_op": statistics.median(calls),
                "sync_ns_per_op": statistics.median(syncs),
            }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=positive, default=5, help="timeit repeats (best of)")
    ap.add_argument("--chain", type=positive, default=50, help="operators per chain")
    ap.add_argument("--rounds", type=positive, default=200, help="chains timed (median of)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    r = {
        "cpu_ops_ns": cpu_costs(a.repeat),
        "cpu_views_ns": view_costs("cpu", a.repeat),
        "tpu_views_ns": view_costs("tpu", a.repeat),
        "bridge": dispatch_vs_record(a.chain, a.rounds),
    }
    if a.json:
        print(json.dumps(r, indent=1))
        return
    fmt = lambda d: ", ".join(f"{k} {v:.0f}" for k, v in d.items())  # noqa: E731
    print("host ns per call, one thread (best of %d)" % a.repeat)
    print("  PyTorch CPU, 1-element ops: " + fmt(r["cpu_ops_ns"]))
    print("  PyTorch CPU, views:         " + fmt(r["cpu_views_ns"]))
    print("  tpu tensors, views:         " + fmt(r["tpu_views_ns"]))
    b = r["bridge"]
    print(f"bridge, chain of {a.chain} adds on [8, 128] float32 (median of {a.rounds}), ns per operator:")
    print(f"  Strict:       {b['strict']['calls_ns_per_op']:7.0f} dispatching and launching (emulation excluded)")
    print(f"  DeferAndFuse: {b['defer']['calls_ns_per_op']:7.0f} recording, then {b['defer']['sync_ns_per_op']:.0f}"
          " at the sync (fusing, the kernel, its launch; emulation excluded)")


if __name__ == "__main__":
    main()
