"""One zoo check: a model's forward and one training step on the tpu against the CPU.

For an architecture and a mode (``strict``, ``defer`` or ``compile``) it builds the model, copies
the same weights to the tpu, and runs one training step there: the forward (logits and loss),
``loss.backward()`` and one ``torch.optim.AdamW`` step, with the CPU fallback off so that every
operator is the backend's. The CPU runs the same step on the same weights (once per model; every
mode compares against it). What is compared, and the tolerances, are described in
``tpuemu.zoo.tolerance``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import time
import warnings
from contextlib import nullcontext

import torch

import tpuemu

from . import numerics, tolerance
from .models import Entry

LR = 1e-3

_MISSING = re.compile(r"tpuemu: (\S+) is not implemented for the tpu device(?: \((.*?)\))?,")


@dataclasses.dataclass
class Outcome:
    """What one (model, mode) check found."""

    model: str
    mode: str
    status: str  # "pass", "mismatch", "unsupported" or "error"
    detail: str = ""  # the worst comparison, the missing overload or the error's first line
    worst: float = 0.0  # the largest error / tolerance ratio over every compared tensor
    errors: dict = dataclasses.field(default_factory=dict)  # kind -> largest normalised error
    simulated_ns: int = 0  # simulated time of the step, compilation excluded
    compile_ns: int = 0  # simulated host time compiling: kernels generated, graphs traced (first use)
    kernels: int = 0
    hbm_bytes: int = 0
    host_s: float = 0.0
    graphs: str = ""  # compile: "compiled/total" graphs, and why any ran eagerly


@dataclasses.dataclass
class Reference:
    """The CPU's step: its outputs, and the model as it was before the step."""

    initial: torch.nn.Module
    inputs: dict
    logits: torch.Tensor
    loss: torch.Tensor
    grads: dict
    updated: dict
    host_s: float
    precision: str  # the tpu's matmul precision the reference's numerics stand for


def _quiet():
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore")
    return w


def reference(entry: Entry, precision: str = "default") -> Reference:
    """Builds the model (seeded) and runs the step on the CPU, with the TPU's matmul numerics at
    ``precision`` ("default": one bf16 pass, see ``tpuemu.zoo.numerics``; "highest": plain
    float32, which 6 bf16 passes match to about 1e-6)."""
    torch.manual_seed(0)
    model = entry.build()
    initial = copy.deepcopy(model)
    inputs = entry.inputs()
    t0 = time.perf_counter()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    with numerics.tpu_numerics() if precision == "default" else nullcontext():
        out = model(**inputs)
        out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    return Reference(initial, inputs, _logits(out).detach(), out.loss.detach(), grads,
                     {n: p.detach().clone() for n, p in model.named_parameters()},
                     time.perf_counter() - t0, precision)


def _logits(out) -> torch.Tensor:
    return out.logits


def _to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    return {k: _to(v, dev) for k, v in x.items()} if isinstance(x, dict) else x


def _adamw_with(initial: torch.nn.Module, grads: dict) -> dict:
    """The CPU's AdamW step from the initial weights with the given gradients."""
    model = copy.deepcopy(initial)
    params = dict(model.named_parameters())
    for n, p in params.items():
        p.grad = grads.get(n)
    torch.optim.AdamW(model.parameters(), lr=LR).step()
    return {n: p.detach().clone() for n, p in params.items()}


def _missing(e: BaseException) -> tuple[str, str] | None:
    m = _MISSING.search(str(e))
    return (m.group(1), m.group(2) or "") if m else None


def run(entry: Entry, mode: str, ref: Reference, trace: str | None = None) -> Outcome:
    """Runs the step on the tpu in ``mode`` and compares it with ``ref``."""
    from .. import _compile

    torch._dynamo.reset()
    dev = copy.deepcopy(ref.initial).to("tpu")
    inputs = _to(ref.inputs, "tpu")
    opt = torch.optim.AdamW(dev.parameters(), lr=LR)
    fwd = torch.compile(dev, backend="tpu") if mode == "compile" else dev
    graphs_before = len(_compile.compiled_graphs())
    eager_mode = "strict" if mode == "compile" else mode
    outcome = Outcome(entry.name, mode, "pass")
    tpuemu.sync()
    tpuemu.reset_metrics()
    clock0 = int(tpuemu.metrics().get("simulated_time_ns", 0))
    t0 = time.perf_counter()
    w = _quiet()
    C = tpuemu._device._C
    C.set_cpu_fallback(False)  # every operator must be the backend's
    precision = tpuemu.matmul_precision()
    tpuemu.set_matmul_precision(ref.precision)
    try:
        with tpuemu.mode_guard(eager_mode), (tpuemu.trace(trace, label=f"{entry.name} {mode}")
                                             if trace else nullcontext()):
            out = fwd(**inputs)
            out.loss.backward()
            opt.step()
            tpuemu.sync()
    except Exception as e:  # noqa: BLE001 - every failure is a row of the report
        outcome.host_s = time.perf_counter() - t0
        miss = _missing(e)
        if miss:
            outcome.status, outcome.detail = "unsupported", miss[0] + (f" ({miss[1]})" if miss[1] else "")
        else:
            outcome.status = "error"
            outcome.detail = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return outcome
    finally:
        w.__exit__(None, None, None)
        C.set_cpu_fallback(tpuemu.cpu_fallback_enabled())
        tpuemu.set_matmul_precision(precision)
    outcome.host_s = time.perf_counter() - t0
    m = tpuemu.metrics()
    outcome.compile_ns = int(m.get("compile_ns", 0))
    outcome.simulated_ns = int(m.get("simulated_time_ns", 0)) - clock0 - outcome.compile_ns
    outcome.kernels = int(m.get("kernels_launched", 0))
    outcome.hbm_bytes = int(m.get("hbm_bytes", 0))
    if mode == "compile":
        graphs = _compile.compiled_graphs()[graphs_before:]
        done = sum(1 for _, s in graphs if s == "compiled")
        why = sorted({s[len("eager: "):] for _, s in graphs if s != "compiled"})
        outcome.graphs = f"{done}/{len(graphs)}" + (f" eager: {why[0]}" if why else "")
    grads = {n: p.grad.detach().cpu() for n, p in dev.named_parameters() if p.grad is not None}
    updated = {n: p.detach().cpu() for n, p in dev.named_parameters()}
    checks = tolerance.compare(ref, _logits(out).detach().cpu(), out.loss.detach().cpu(), grads,
                               updated, _adamw_with(ref.initial, grads))
    outcome.errors = {k: v[0] for k, v in checks.items()}
    kind, (err, tol, where) = max(checks.items(), key=lambda kv: kv[1][0] / kv[1][1])
    outcome.worst = err / tol
    outcome.detail = f"{kind} {where}: {err:.2e} (tolerance {tol:.1e})"
    if outcome.worst > 1:
        outcome.status = "mismatch"
    return outcome


def fallbacks(entry: Entry, ref: Reference) -> dict:
    """Every overload the step runs on the CPU when the fallback is on (Strict): what the backend
    lacks for this model."""
    C = tpuemu._device._C
    dev = copy.deepcopy(ref.initial).to("tpu")
    inputs = _to(ref.inputs, "tpu")
    opt = torch.optim.AdamW(dev.parameters(), lr=LR)
    tpuemu.sync()
    tpuemu.reset_metrics()
    C.set_cpu_fallback(True)
    w = _quiet()
    try:
        with tpuemu.mode_guard("strict"):
            out = dev(**inputs)
            out.loss.backward()
            opt.step()
            tpuemu.sync()
    except Exception as e:  # noqa: BLE001
        return {"<error>": f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"}
    finally:
        w.__exit__(None, None, None)
        C.set_cpu_fallback(tpuemu.cpu_fallback_enabled())
    return dict(tpuemu.metrics()["cpu_fallbacks"])
