"""``python -m tpuemu.zoo``: the zoo's report, architecture x mode.

    scripts/python.sh -m tpuemu.zoo                         every model, strict/defer/compile
    scripts/python.sh -m tpuemu.zoo --model llama --mode defer --json out.json --trace-dir traces/

Each row says pass, mismatch (with the worst error over its tolerance), unsupported (the overload
the backend lacks) or error (the first line of the error), with the simulated step time, kernels
launched, HBM bytes moved and the host seconds the step took. The CPU fallback is off for every
run (``TORCH_TPU_CPU_FALLBACK=0`` semantics), so a pass means every operator ran on the emulator.
The exit status is 0 when every row passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

MODES = ("strict", "defer", "compile")


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m tpuemu.zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", default=None,
                   help="an architecture (repeatable; default: all). --list names them")
    p.add_argument("--mode", action="append", choices=MODES, default=None,
                   help="strict, defer or compile (repeatable; default: all three)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--trace-dir", metavar="DIR",
                   help="write each run's trace as DIR/MODEL-MODE.json (open with `tpuemu viz`)")
    p.add_argument("--fallbacks", action="store_true",
                   help="also list the overloads each model would run on the CPU (fallback on)")
    p.add_argument("--precision", choices=("default", "highest"), default="default",
                   help="the tpu's float32 matmul precision (default: one bf16 pass, as a TPU; "
                        "the CPU reference computes with the same numerics)")
    p.add_argument("--list", action="store_true", help="list the architectures and exit")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = _args(argv)
    os.environ["TORCH_TPU_CPU_FALLBACK"] = "0"
    from . import check
    from .models import ENTRIES, MODELS

    if a.list:
        for e in ENTRIES:
            print(f"{e.name:12} {e.family:16} {e.cls}")
        return 0
    names = a.model or [e.name for e in ENTRIES]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    modes = a.mode or list(MODES)
    if a.trace_dir:
        os.makedirs(a.trace_dir, exist_ok=True)
    rows, refs = [], {}
    hdr = f"{'model':12} {'mode':8} {'status':11} {'sim ms':>8} {'kernels':>8} {'HBM MiB':>8} {'host s':>7}  detail"
    print(hdr)
    print("-" * len(hdr))
    t_all = time.perf_counter()
    for n in names:
        entry = MODELS[n]
        try:
            refs[n] = check.reference(entry, a.precision)
        except Exception as e:  # noqa: BLE001 - a model that cannot build is a row too
            for m in modes:
                o = check.Outcome(n, m, "error", f"CPU reference: {type(e).__name__}: {e}")
                rows.append(o)
                print(f"{n:12} {m:8} {o.status:11} {'':>8} {'':>8} {'':>8} {'':>7}  {o.detail}")
            continue
        for m in modes:
            trace = os.path.join(a.trace_dir, f"{n}-{m}.json") if a.trace_dir else None
            o = check.run(entry, m, refs[n], trace)
            rows.append(o)
            detail = o.detail + (f" [graphs {o.graphs}]" if o.graphs else "")
            print(f"{n:12} {m:8} {o.status:11} {o.simulated_ns / 1e6:8.3f} {o.kernels:8d} "
                  f"{o.hbm_bytes / 2**20:8.2f} {o.host_s:7.2f}  {detail}", flush=True)
        if a.fallbacks:
            fb = check.fallbacks(entry, refs[n])
            print(f"{'':12} fallbacks: {', '.join(f'{k} x{v}' for k, v in sorted(fb.items())) or 'none'}")
    total = time.perf_counter() - t_all
    passed = sum(o.status == "pass" for o in rows)
    print(f"\n{passed}/{len(rows)} passed ({100 * passed / max(len(rows), 1):.0f}%) in {total:.1f} s host")
    for m in modes:
        mr = [o for o in rows if o.mode == m]
        print(f"  {m:8} {sum(o.status == 'pass' for o in mr)}/{len(mr)}")
    ok_models = [n for n in names if all(o.status == "pass" for o in rows if o.model == n)]
    print(f"  architectures passing every mode: {len(ok_models)}/{len(names)}")
    per_model = {n: sum(o.host_s for o in rows if o.model == n) for n in names}
    if per_model:
        slow = max(per_model, key=per_model.get)
        print(f"  slowest model: {slow} ({per_model[slow]:.1f} s host over its modes)")
    strict = {o.model: o for o in rows if o.mode == "strict" and o.status == "pass"}
    ratios = [(o.model, o.simulated_ns / strict[o.model].simulated_ns) for o in rows
              if o.mode == "defer" and o.status == "pass" and o.model in strict
              and strict[o.model].simulated_ns]
    if ratios:
        print("  DeferAndFuse / Strict simulated time: "
              + ", ".join(f"{n} {r:.2f}x" for n, r in ratios))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": [vars(o) for o in rows], "passed": passed, "total": len(rows),
                       "host_seconds": total,
                       "host_seconds_per_model": per_model}, f, indent=1)
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
