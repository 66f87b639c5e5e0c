"""PyTorch's operator database on the tpu: every OpInfo entry, natively, against the CPU.

    python -m tpuemu.op_db                      the table for every entry
    python -m tpuemu.op_db -k linalg -k fft     entries whose key contains one of these
    python -m tpuemu.op_db --json op_db.json    the results as JSON too
    tpuemu ops --op-db                          the same table, from the command line

For each entry of ``torch.testing._internal.common_methods_invocations.op_db`` (its key: the
name, then ``.variant`` when it has one) and each dtype of float32, bfloat16, int64 and bool the
entry supports on the CPU, every sample input (made on the CPU from a fixed seed) runs on the
CPU and, copied with its storage layout, on the tpu with the CPU fallback off. A pair passes when
every sample agrees: the same dtype and shape, values within rtol = atol = 1e-3 for float32
(PyTorch's ``test_compare_cpu``), rtol = 1.6e-2, atol = 1e-2 for bfloat16 (one bfloat16 rounding
of an f32 result), equal for integers and bool, after the entry's ``output_process_fn_grad`` (which
makes sign-ambiguous results such as singular vectors comparable); where the CPU raises, the tpu
must raise too. Otherwise the pair's outcome names the first sample that did not pass:

    not-native   the tpu lacks the operator with these arguments (NotImplementedError, the
                 CPU fallback being off)
    error        the tpu raised where the CPU returned a value
    wrong        the tpu returned something else (value, shape or dtype), or returned where the
                 CPU raises
    slow         (not an outcome: the seconds are reported, nothing is stopped)

For an entry that supports autograd, ``float32.grad`` is one more pair: every float32 sample
that requires gradients, its differentiable outputs weighted by fixed random cotangents and
differentiated with ``torch.autograd.grad`` with respect to its inputs, on the CPU and on the
tpu (PyTorch's autograd calling the tpu's backward operators), compared as float32 values.

An entry passes natively when every dtype it was tried in passes. What PyTorch leaves open is
not held against the tpu: factories of uninitialised memory (``empty``, ``empty_like``, ...) are
compared by shape and dtype only; so is a sample whose CPU result changes with the seed (it
draws random numbers: dropout, or attention with ``dropout_p``; the tpu draws its own stream);
a bfloat16 result each of whose elements is as close to the result computed in float32 (the
sample's bfloat16 tensors upcast, on the CPU) as the CPU's bfloat16 element, or within the
bfloat16 tolerance of it, is accepted (the CPU rounds intermediates to bfloat16 at other points
than the device: its convolutions' col2im and chunked losses accumulate in bfloat16);
and where ``sort`` (unless ``stable=True``), ``argsort``, ``topk``, ``kthvalue`` and ``mode`` meet
ties, any indices that select the CPU's values from the input (each once) are accepted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import time
import warnings
from dataclasses import dataclass, field

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool)
OUTCOMES = ("pass", "not-native", "error", "wrong")
# Entries whose results are uninitialised memory: only their shapes and dtypes mean anything.
UNINITIALISED = ("empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted")
TOLERANCES = {torch.float32: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}
# Entries whose index outputs PyTorch leaves open on ties: where the dim argument sits.
TIES = {"sort": 0, "argsort": 0, "topk": 1, "kthvalue": 1, "mode": 0}
# Entries whose tensor arguments must stay on the CPU (PyTorch requires it).
ARGS_ON_CPU = ("tensor_split",)
SEED = 0
# Whether entries that support autograd also compare their float32 gradients.
GRADIENTS = True


def key(op) -> str:
    """An entry's key: its name, then ``.variant`` when it has one."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def entries(filters: list[str] | None = None) -> list:
    """The op_db entries, in op_db's order (those whose key contains one of `filters`)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if not filters or any(f in key(op) for f in filters)]


def dtypes_of(op) -> list[torch.dtype]:
    """The dtypes of DTYPES the entry supports on the CPU."""
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


@dataclass
class Outcome:
    """How one (entry, dtype) pair went."""

    outcome: str
    samples: int = 0
    detail: str = ""
    seconds: float = 0.0


@dataclass
class EntryResult:
    key: str
    dtypes: dict[str, Outcome] = field(default_factory=dict)

    @property
    def native(self) -> bool:
        return bool(self.dtypes) and all(o.outcome == "pass" for o in self.dtypes.values())


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:240]}"


def _to_tpu(t, grad: bool = False):
    """The tensor on the tpu with the same storage layout (a view stays a view of a copy of its
    whole storage: ``as_strided`` samples address it). With `grad`, a tensor that requires
    gradients keeps requiring them: the moved storage is the leaf, the result a view of it."""
    if not isinstance(t, torch.Tensor):
        return t
    grad = grad and t.requires_grad
    if t.numel() == 0 or t.untyped_storage().nbytes() == 0:
        return t.detach().to("tpu").requires_grad_(grad)
    n = t.untyped_storage().nbytes() // t.element_size()
    whole = t.detach().as_strided((n,), (1,), 0).to("tpu").requires_grad_(grad)
    return whole.as_strided(t.size(), t.stride(), t.storage_offset())


def _to_tpu_grad(t):
    return _to_tpu(t, grad=True)


def _to_cpu(x):
    """`x` on the CPU; named results (values, indices) become plain tuples."""
    return _map(lambda t: t.detach().cpu(), x)


def _compare(got, want, dtype: torch.dtype, meta_only: bool) -> str | None:
    """Why `got` (on the CPU now) does not match `want`, or None."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"returned {type(got).__name__}, the CPU a tensor"
        if got.dtype != want.dtype:
            return f"dtype {got.dtype}, the CPU's {want.dtype}"
        if got.shape != want.shape:
            return f"shape {tuple(got.shape)}, the CPU's {tuple(want.shape)}"
        if meta_only:
            return None
        if want.is_floating_point() or want.is_complex():
            rtol, atol = TOLERANCES.get(dtype, (1e-3, 1e-3))
            try:
                torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
            except AssertionError as e:
                lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
                return "; ".join(lines[1:4])[:240]
            return None
        if not torch.equal(got, want):
            bad = (got != want).nonzero()
            at = tuple(bad[0].tolist()) if len(bad) else ()
            return f"{len(bad)} of {want.numel()} elements differ (at {at}: {got[at].item()} vs {want[at].item()})"
        return None
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"returned {type(got).__name__} of {len(got) if hasattr(got, '__len__') else '?'}, the CPU {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = _compare(g, w, dtype, meta_only)
            if why:
                return f"[{i}] {why}"
        return None
    if isinstance(want, float) and isinstance(got, float):
        if (math.isnan(want) and math.isnan(got)) or math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-3):
            return None
        return f"{got} vs the CPU's {want}"
    if got != want:
        return f"{got!r} vs the CPU's {want!r}"
    return None


def _ties_accepted(op, sample, got, want) -> bool:
    """Whether `got` differs from `want` only in which of tied elements its indices name (see
    the module docs): its values are the CPU's and its indices select them from the input."""
    x = sample.input
    pos = TIES.get(op.name)
    if pos is None or not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    if op.name in ("sort", "argsort") and sample.kwargs.get("stable", False):
        return False
    dim = sample.kwargs.get("dim", sample.args[pos] if len(sample.args) > pos else -1)

    def same(a, b):
        return _compare(a, b, torch.float32, False) is None and a.shape == b.shape

    def distinct(idx):
        srt = idx.sort(dim).values
        return idx.size(dim) < 2 or bool((srt.diff(dim=dim) != 0).all())

    if op.name == "argsort":
        return (
            isinstance(got, torch.Tensor)
            and got.shape == want.shape
            and got.dtype == want.dtype
            and same(x.take_along_dim(got, dim), x.take_along_dim(want, dim))
            and distinct(got)
        )
    values, idx = got[0], got[1]
    if not same(values, want[0]) or idx.dtype != want[1].dtype or idx.shape != want[1].shape:
        return False
    if op.name in ("kthvalue", "mode"):
        keep = sample.kwargs.get("keepdim", sample.args[pos + 1] if len(sample.args) > pos + 1 else False)
        at = idx if keep else idx.unsqueeze(dim)
        picked = x.take_along_dim(at, dim)
        return same(picked if keep else picked.squeeze(dim), values)
    return same(x.take_along_dim(idx, dim), values) and distinct(idx)


def _as_accurate_as_cpu(op, sample, got, want) -> bool:
    """Whether a bfloat16 `got` is elementwise no further from the float32 result than the
    CPU's bfloat16 `want` (or within the bfloat16 tolerance of the float32 result)."""
    up = sample.transform(lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 else t)
    try:
        ref = _to_cpu(up.output_process_fn_grad(op(up.input, *up.args, **up.kwargs)))
    except Exception:  # noqa: BLE001 - no float32 reference: no leniency
        return False
    rtol, atol = TOLERANCES[torch.bfloat16]

    def close(g, w, r) -> bool:
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor) or not isinstance(r, torch.Tensor) or g.shape != w.shape:
                return False
            if g.dtype != w.dtype or r.shape != w.shape:
                return False
            if not g.is_floating_point():
                return torch.equal(g, w)
            g, w, r = g.float(), w.float(), r.float()
            mine, theirs = (g - r).abs(), (w - r).abs()
            ok = (mine <= theirs) | (mine <= atol + rtol * r.abs()) | (g.isnan() & r.isnan())
            return bool(ok.all())
        if isinstance(w, (list, tuple)):
            return isinstance(g, (list, tuple)) and isinstance(r, (list, tuple)) and len(g) == len(w) == len(r) and all(
                close(a, b, c) for a, b, c in zip(g, w, r)
            )
        return _compare(g, w, torch.bfloat16, False) is None

    return close(got, want, ref)


def _random(op, sample) -> bool:
    """Whether the CPU's result depends on the seed (the sample draws random numbers). Entries
    that draw seed themselves (OpInfo's ``wrapper_set_seed`` calls ``torch.manual_seed(42)``), so
    their reseeding is turned off while this runs."""
    import torch.utils._pytree  # noqa: F401 - tree_map below

    results = []
    seed_with = torch.manual_seed
    torch.manual_seed = lambda _seed: None
    try:
        for seed in (1, 2, 3, 4):
            seed_with(seed)
            # Copied: an in-place entry (``uniform_``) returns its input, which the second
            # draw overwrites.
            results.append(torch.utils._pytree.tree_map(
                lambda t: t.clone() if isinstance(t, torch.Tensor) else t,
                op(sample.input, *sample.args, **sample.kwargs)))
    except Exception:  # noqa: BLE001 - not random then
        return False
    finally:
        torch.manual_seed = seed_with
    # Four draws: a small sample (three Bernoulli trials) may draw alike twice.
    return any(_compare(results[0], r, torch.float32, False) is not None for r in results[1:])


def _not_native(e: BaseException) -> bool:
    return isinstance(e, NotImplementedError)


def chosen(samples: list, max_samples: int | None) -> list[tuple[int, object]]:
    """The samples to run, each with its index: all of them, or where there are more than
    `max_samples`, that many chosen at random (seeded: the same ones every run) and kept in
    their order, so that a generator's product of arguments is sampled throughout rather
    than cut after its first factors."""
    idx: range | list[int] = range(len(samples))
    if max_samples is not None and len(samples) > max_samples:
        idx = sorted(random.Random(len(samples)).sample(idx, max_samples))
    return [(i, samples[i]) for i in idx]


def run_pair(op, dtype: torch.dtype, max_samples: int | None = None) -> Outcome:
    """Runs every sample input of `op` in `dtype` (or `max_samples` of them: `chosen`) on the
    CPU and on the tpu."""
    start = time.perf_counter()
    meta_only = op.name in UNINITIALISED
    n = 0
    torch.manual_seed(SEED)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception as e:  # noqa: BLE001 - the entry's own sample generator
        return Outcome("pass", 0, f"no samples: {_short(e)}", time.perf_counter() - start)
    for _, sample in chosen(samples, max_samples):
        try:
            want = op(sample.input, *sample.args, **sample.kwargs)
            want = sample.output_process_fn_grad(want)
            cpu_error = None
        except Exception as e:  # noqa: BLE001 - the reference may raise; then the tpu must
            cpu_error = e
        try:
            if op.name in ARGS_ON_CPU:
                moved = sample.transform(lambda t: t)
                moved.input = _to_tpu(sample.input)
            else:
                moved = sample.transform(_to_tpu)
            got = op(moved.input, *moved.args, **moved.kwargs)
            got = _to_cpu(moved.output_process_fn_grad(got))
        except Exception as e:  # noqa: BLE001 - classified below
            if cpu_error is not None:
                n += 1
                continue
            outcome = "not-native" if _not_native(e) else "error"
            return Outcome(outcome, n, _short(e), time.perf_counter() - start)
        if cpu_error is not None:
            return Outcome("wrong", n, f"returned where the CPU raises {_short(cpu_error)}", time.perf_counter() - start)
        want = _to_cpu(want)
        why = _compare(got, want, dtype, meta_only)
        if why and (
            _ties_accepted(op, sample, got, want)
            or (dtype == torch.bfloat16 and _as_accurate_as_cpu(op, sample, got, want))
            or (_random(op, sample) and not _compare(got, want, dtype, True))
        ):
            why = None
        if why:
            return Outcome("wrong", n, f"sample {n}: {why}", time.perf_counter() - start)
        n += 1
    return Outcome("pass", n, "", time.perf_counter() - start)


def _leaves(x) -> list:
    """The tensors in `x` (nested lists, tuples and dicts), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _leaves(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _leaves(v)]
    return []


def _map(f, x):
    """`x` with `f` applied to every tensor in it (nested lists, tuples and dicts), with
    autograd on (``SampleInput.transform`` runs under ``no_grad``)."""
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, list):
        return [_map(f, v) for v in x]
    if isinstance(x, tuple):
        return tuple(_map(f, v) for v in x)
    if isinstance(x, dict):
        return {k: _map(f, v) for k, v in x.items()}
    return x


def _grads(op, sample, cotangent_seed: int, move=None):
    """The gradients of the sample's differentiable outputs (weighted by fixed random
    cotangents made on the CPU) with respect to its inputs that require them; with `move`,
    of the sample moved by it."""
    inp, args, kwargs = sample.input, sample.args, sample.kwargs
    if move is not None:
        inp = _map(move, inp)
        if op.name not in ARGS_ON_CPU:
            args, kwargs = _map(move, args), _map(move, kwargs)
    out = sample.output_process_fn_grad(op(inp, *args, **kwargs))
    outs = [o for o in _leaves(out) if o.requires_grad and o.is_floating_point()]
    ins = [t for t in _leaves([inp, args, kwargs]) if t.requires_grad]
    if not outs or not ins:
        return None
    g = torch.Generator().manual_seed(cotangent_seed)
    cots = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
    grads = torch.autograd.grad(outs, ins, cots, allow_unused=True)
    return [None if x is None else x.detach().cpu() for x in grads]


def run_grad(op, max_samples: int | None = None) -> Outcome:
    """The float32 gradients of every sample (PyTorch's autograd over the tpu's backward
    operators) against the CPU's, as `run_pair` compares values."""
    start = time.perf_counter()
    n = 0
    torch.manual_seed(SEED)
    try:
        samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=True))
    except Exception as e:  # noqa: BLE001 - the entry's own sample generator
        return Outcome("pass", 0, f"no samples: {_short(e)}", time.perf_counter() - start)
    for i, sample in chosen(samples, max_samples):
        try:
            torch.manual_seed(SEED)
            want = _grads(op, sample, i)
        except Exception:  # noqa: BLE001 - no reference gradient for this sample
            continue
        if want is None:
            continue
        try:
            torch.manual_seed(SEED)
            got = _grads(op, sample, i, _to_tpu_grad)
        except Exception as e:  # noqa: BLE001 - classified
            outcome = "not-native" if _not_native(e) else "error"
            return Outcome(outcome, n, _short(e), time.perf_counter() - start)
        if got is None or len(got) != len(want) or any((a is None) != (b is None) for a, b in zip(got, want)):
            return Outcome("wrong", n, f"sample {i}: gradients missing or extra", time.perf_counter() - start)
        why = _compare([a for a in got if a is not None], [b for b in want if b is not None], torch.float32, False)
        if why and not _random(op, sample):
            return Outcome("wrong", n, f"sample {i}: gradient {why}", time.perf_counter() - start)
        n += 1
    return Outcome("pass", n, "", time.perf_counter() - start)


@contextlib.contextmanager
def _seeding_what_runs_here():
    """``torch.manual_seed`` seeds what this check draws from: the CPU's default generator and
    the tpu's. PyTorch's own (in a torch built for CUDA, as PyPI's is) also queues a lazy
    seeding of CUDA, XPU and MTIA, each recording its caller's formatted stack, about a
    millisecond a call under pytest; OpInfo's sample generators reseed per sample
    (``set_rng_seed``), so it was 5.8 of ``nn.functional.max_pool2d``'s 8.5 s. No tensor here is
    on those devices, so the values drawn are the same."""
    from ._device import manual_seed_all

    def seed(s):
        manual_seed_all(s)
        return torch.default_generator.manual_seed(int(s))

    everywhere = torch.manual_seed
    torch.manual_seed = seed
    try:
        yield
    finally:
        torch.manual_seed = everywhere


def run_entry(op, max_samples: int | None = None) -> EntryResult:
    """Every dtype of the entry, and float32 gradients (``float32.grad``) where it has them."""
    r = EntryResult(key(op))
    with warnings.catch_warnings(), _seeding_what_runs_here():
        warnings.simplefilter("ignore")
        for d in dtypes_of(op):
            r.dtypes[str(d).removeprefix("torch.")] = run_pair(op, d, max_samples)
        if GRADIENTS and op.supports_autograd and torch.float32 in dtypes_of(op):
            r.dtypes["float32.grad"] = run_grad(op, max_samples)
    return r


def prepare() -> None:
    """The fallback off, products at f32 precision (the CPU's)."""
    import tpuemu

    tpuemu.set_cpu_fallback(False)
    tpuemu.set_matmul_precision("highest")


def summary(results: list[EntryResult]) -> dict:
    tried = [r for r in results if r.dtypes]
    pairs = [o for r in tried for o in r.dtypes.values()]
    return {
        "entries": len(results),
        "tried": len(tried),
        "native": sum(r.native for r in tried),
        "pairs": len(pairs),
        "pairs_pass": sum(o.outcome == "pass" for o in pairs),
        "by_outcome": {k: sum(o.outcome == k for o in pairs) for k in OUTCOMES},
    }


def table(results: list[EntryResult]) -> str:
    """The results as text: one line per entry that is not native, then the totals."""
    out = []
    width = max((len(r.key) for r in results), default=10)
    for r in results:
        if not r.dtypes or r.native:
            continue
        for d, o in r.dtypes.items():
            if o.outcome != "pass":
                out.append(f"{r.key:<{width}}  {d:<8}  {o.outcome:<10}  {o.detail}")
    s = summary(results)
    pct = 100.0 * s["native"] / s["tried"] if s["tried"] else 0.0
    out.append("")
    out.append(
        f"op_db: {s['native']} of {s['tried']} entries tried pass natively ({pct:.1f}%); "
        f"{s['pairs_pass']} of {s['pairs']} (entry, dtype) pairs; "
        + ", ".join(f"{k} {v}" for k, v in s["by_outcome"].items() if k != "pass")
        + f"; {s['entries'] - s['tried']} entries have none of the dtypes"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tpuemu.op_db", description=__doc__.split("\n\n")[0])
    p.add_argument("-k", dest="filters", action="append", help="only entries whose key contains this (repeatable)")
    p.add_argument("--json", help="write the results to this file as JSON")
    p.add_argument("--max-samples", type=int, help="at most this many samples per (entry, dtype), chosen at random (seeded)")
    p.add_argument("--all", action="store_true", help="list the passing entries too")
    args = p.parse_args(argv)
    prepare()
    ops = entries(args.filters)
    if not ops:
        print(f"no op_db entry matches {args.filters}", file=sys.stderr)
        return 2
    results = []
    for i, op in enumerate(ops):
        r = run_entry(op, args.max_samples)
        results.append(r)
        if sys.stderr.isatty():
            print(f"\r[{i + 1}/{len(ops)}] {r.key:<60}", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if args.all:
        for r in results:
            if r.native:
                print(f"{r.key}  pass  {', '.join(r.dtypes)}")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "summary": summary(results),
                    "entries": {r.key: {d: vars(o) for d, o in r.dtypes.items()} for r in results},
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
