#!/usr/bin/env python3
"""Generate tpuemu's golden cases from PyTorch itself.

Walks PyTorch's OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``),
runs a few small samples of every entry under a ``TorchDispatchMode`` that records each ATen call
reaching the dispatcher (its overload, every schema argument, the tensors it saw and the outputs it
produced), and writes them in the format described in ``golden/README.md``:

* ``<out>/opinfo/<entry>.json`` + ``<entry>.safetensors``: one file pair per OpInfo entry;
* ``<out>/opinfo/_index.json``: every OpInfo entry visited, with its case count or why it has none;
* ``<out>/explicit/*.{json,safetensors}``: cases written here by hand for overloads of the backend's
  first operator list that OpInfo does not reach (backward ops, CompositeImplicit ops such as
  ``rms_norm`` or ``scaled_dot_product_attention`` called explicitly through ``torch.ops.aten``);
* ``<out>/models/*.{json,safetensors}``: an MLP, an attention block and a cross-entropy loss, forward
  and backward, as the sequence of ATen calls PyTorch made.

Run it through ``golden/regenerate.sh``, which pins PyTorch 2.15.0 in a virtual environment kept
outside the repository. The output is reproducible byte for byte: seeds derive from the entry name
(never from iteration order), PyTorch runs on one thread, JSON is written with sorted keys and
``repr`` floats, and safetensors files are written with sorted names and no metadata.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from files import FileWriter, dumps
from record import RawCall, Recorder, Snap, Unsupported, make_mode
from settings import (FORMAT, MAX_CASE_NUMEL, SAMPLES_PER_DTYPE, SCAN_SAMPLES, SKIP_ENTRIES_PREFIX, TORCH_VERSION,
                      seed_all, seed_for)


# ---------------------------------------------------------------------------------------------
# Sample descriptions (for humans reading the manifest and the report)
# ---------------------------------------------------------------------------------------------


def describe(v: Any, depth: int = 0) -> str:
    import torch

    if isinstance(v, torch.Tensor):
        dt = str(v.dtype).removeprefix("torch.")
        return f"{dt}{list(v.shape)}" + ("" if v.is_contiguous() else "(strided)")
    if isinstance(v, (list, tuple)):
        if depth > 1 or len(v) > 6:
            return f"[{len(v)} items]"
        return "[" + ", ".join(describe(x, depth + 1) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (int, bool, str)) or v is None:
        return repr(v)
    return str(v).removeprefix("torch.")


def describe_sample(s: Any) -> str:
    parts = [describe(s.input)] + [describe(a) for a in s.args]
    parts += [f"{k}={describe(v)}" for k, v in sorted(s.kwargs.items())]
    text = ", ".join(parts)
    return text if len(text) <= 160 else text[:157] + "..."


# ---------------------------------------------------------------------------------------------
# OpInfo walk
# ---------------------------------------------------------------------------------------------


def entry_stem(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def skip_reason(op: Any) -> str | None:
    """Why a whole entry is skipped: a key of ``SKIP_ENTRIES_PREFIX`` ending in "." matches every
    entry starting with it; any other key matches that entry and its variants."""
    stem = entry_stem(op)
    for prefix, why in SKIP_ENTRIES_PREFIX.items():
        if prefix.endswith("."):
            if stem.startswith(prefix):
                return why
        elif stem == prefix or stem.startswith(prefix + "."):
            return why
    return None


def sample_numel(s: Any) -> int:
    import torch

    total = 0

    def walk(v: Any) -> None:
        nonlocal total
        if isinstance(v, torch.Tensor):
            total += v.numel()
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk([s.input, s.args, s.kwargs])
    return total


def case_numel(calls: list[RawCall]) -> int:
    total = 0

    def walk(v: Any) -> None:
        nonlocal total
        if isinstance(v, Snap):
            total += v.data.numel()
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for c in calls:
        walk(c.args)
        walk(c.outputs)
    return total


def run_sample(op: Any, sample: Any) -> list[RawCall]:
    """Runs one OpInfo sample under the recording mode and returns its calls."""
    recorder = Recorder()
    with make_mode(recorder):
        op(sample.input, *sample.args, **sample.kwargs)
    if not recorder.calls:
        raise Unsupported("reached no ATen call")
    if case_numel(recorder.calls) > MAX_CASE_NUMEL:
        raise Unsupported(f"case stores more than {MAX_CASE_NUMEL} elements")
    return recorder.calls


def spread(items: list, k: int) -> list:
    """Up to ``k`` items spread evenly over the list (first and last included)."""
    if len(items) <= k:
        return items
    if k == 1:
        return items[:1]
    idx = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in idx]


def visit_entry(op: Any, out_dir: Path, log: Callable[[str], None]) -> dict:
    """Writes the cases of one OpInfo entry; returns its index record."""
    import torch

    stem = entry_stem(op)
    record: dict[str, Any] = {"name": op.name, "variant": op.variant_test_name}
    why = skip_reason(op)
    if why is not None:
        record.update(status="skipped", reason=why, cases=0)
        return record
    supported = {str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu")}
    dtypes = [d for d in SAMPLES_PER_DTYPE if d in supported]
    if not dtypes:
        record.update(status="skipped", reason="no CPU dtype among " + ", ".join(SAMPLES_PER_DTYPE), cases=0)
        return record
    writer = FileWriter(stem)
    skipped: dict[str, int] = {}
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        seed = seed_for(stem, dtype_name)
        seed_all(seed)
        found: list[tuple[int, Any, list[RawCall]]] = []
        try:
            samples = op.sample_inputs("cpu", dtype, requires_grad=False)
            for index, sample in enumerate(samples):
                if index >= SCAN_SAMPLES:
                    break
                if sample_numel(sample) > MAX_CASE_NUMEL:
                    skipped[f"{dtype_name}: sample too large"] = skipped.get(f"{dtype_name}: sample too large", 0) + 1
                    continue
                try:
                    calls = run_sample(op, sample)
                except Unsupported as e:
                    key = f"{dtype_name}: {e}"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                except Exception as e:  # the op itself raised: PyTorch rejects this sample
                    key = f"{dtype_name}: PyTorch raised {type(e).__name__}"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                found.append((index, sample, calls))
        except Exception as e:  # the sample generator itself failed
            key = f"{dtype_name}: sample_inputs raised {type(e).__name__}"
            skipped[key] = skipped.get(key, 0) + 1
        for index, sample, calls in spread(found, SAMPLES_PER_DTYPE[dtype_name]):
            meta = {
                "source": {"kind": "opinfo", "name": op.name, "variant": op.variant_test_name, "sample": index},
                "dtype": dtype_name,
                "seed": seed,
                "description": describe_sample(sample),
            }
            try:
                writer.add_case(f"{stem}/{dtype_name}/{index}", meta, calls)
            except Unsupported as e:
                key = f"{dtype_name}: {e}"
                skipped[key] = skipped.get(key, 0) + 1
    record["cases"] = len(writer.cases)
    if writer.cases:
        extra = {"source": {"kind": "opinfo", "name": op.name, "variant": op.variant_test_name}}
        if skipped:
            extra["skipped_samples"] = skipped
        size = writer.write(out_dir, extra)
        record.update(status="cases", file=f"{stem}.json", bytes=size)
        log(f"{stem}: {len(writer.cases)} cases, {size} bytes")
    else:
        reasons = sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0]))
        record.update(status="skipped", reason="no sample recorded: " + "; ".join(k for k, _ in reasons[:3]))
        log(f"{stem}: no cases ({record['reason']})")
    return record


def logger(quiet: bool) -> Callable[[str], None]:
    """What prints a progress line: nothing when `quiet`."""
    return (lambda _msg: None) if quiet else (lambda msg: print(msg, flush=True))


def _visit_at(task: tuple[int, Path, bool]) -> dict:
    """`visit_entry` of ``op_db[i]``, in a worker process."""
    from torch.testing._internal.common_methods_invocations import op_db

    i, out_dir, quiet = task
    return visit_entry(op_db[i], out_dir, logger(quiet))


def generate_opinfo(out_dir: Path, only: list[str], quiet: bool, jobs: int) -> None:
    """Every entry's cases, `jobs` entries at a time (forked workers that inherit the imported
    torch and op_db). Each entry's seeds derive from its name and PyTorch runs on one thread, so
    the files are the same bytes for any number of workers; the index keeps op_db's order."""
    import multiprocessing

    from torch.testing._internal.common_methods_invocations import op_db

    picked = [i for i, op in enumerate(op_db)
              if not only or any(entry_stem(op) == o or entry_stem(op).startswith(o + ".") for o in only)]
    if jobs > 1 and len(picked) > 1:
        out_dir.mkdir(parents=True, exist_ok=True)
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            entries = list(pool.imap(_visit_at, [(i, out_dir, quiet) for i in picked], chunksize=4))
    else:
        entries = [visit_entry(op_db[i], out_dir, logger(quiet)) for i in picked]
    if not only:
        index = {
            "format": FORMAT,
            "kind": "index",
            "generator": {"script": "golden/generate.py", "torch": TORCH_VERSION},
            "entries": entries,
        }
        (out_dir / "_index.json").write_text(dumps(index))


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def setup_torch() -> None:
    import warnings

    import torch

    warnings.filterwarnings("ignore")  # OpInfo samples trigger many deprecation warnings

    if torch.__version__.split("+")[0] != TORCH_VERSION:
        sys.exit(f"generate.py needs torch=={TORCH_VERSION}, found {torch.__version__}")
    torch.set_num_threads(1)  # reductions must not depend on the thread count
    # OpInfo's sample generators reseed per sample (`set_rng_seed`); in a torch built for CUDA (as
    # PyPI's is) `torch.manual_seed` also queues lazy CUDA, XPU and MTIA seeds, each with its
    # caller's formatted stack: an eighth of the run. Only the CPU's generator is drawn from here.
    torch.manual_seed = lambda seed: torch.default_generator.manual_seed(int(seed))
    torch.set_default_dtype(torch.float32)


def main(argv: list[str] | None = None) -> int:
    wanted = {"PYTHONHASHSEED": "0", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
              # Only the CPU is used: no device backend (tpuemu's included) is loaded with torch.
              "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        # Some OpInfo sample functions iterate over sets of strings, whose order depends on the
        # hash seed: fix it, by re-running this script with PYTHONHASHSEED=0. PyTorch's vectorised
        # CPU kernels and MKL pick code paths by CPU (AVX2, AVX-512): force the portable ones so
        # that every x86-64 machine computes the same bits.
        env = dict(os.environ, **wanted)
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)
    parser = argparse.ArgumentParser(
        description="Generate tpuemu golden cases from PyTorch's OpInfo database, explicit ATen "
        "calls and small models (see golden/README.md). Normally run through golden/regenerate.sh.",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "cases",
                        help="output directory (default: golden/cases next to this script)")
    parser.add_argument("--only", action="append", default=[],
                        help="only these OpInfo entries (repeatable; no index is written); for debugging")
    parser.add_argument("--skip-opinfo", action="store_true", help="write only explicit and model cases")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 4),
                        help="OpInfo entries generated at once, in worker processes (default: the "
                        "cores, at most 4); the output is the same for any number")
    args = parser.parse_args(argv)

    setup_torch()
    from extra_cases import generate_explicit, generate_models  # noqa: E402 (needs torch set up)

    log = logger(args.quiet)
    out: Path = args.out
    if not args.skip_opinfo:
        generate_opinfo(out / "opinfo", args.only, args.quiet, max(1, args.jobs))
    if not args.only:
        generate_explicit(out / "explicit", log)
        generate_models(out / "models", log)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {total} bytes in {sum(1 for p in out.rglob('*') if p.is_file())} files")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
