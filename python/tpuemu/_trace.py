"""``with tpuemu.trace("step.json"):`` — the Chrome trace ``tpuemu viz`` opens.

Host lanes: ``python`` (the torch calls the program made), ``aten`` (every operator the backend
ran, by overload), ``cpu fallback`` (operators run on the CPU), ``queue`` (DeferAndFuse flushes
and fused groups); then the device's kernels and units, and the collectives on the chip's
``collective`` lane. Times are the simulated clocks.

In a distributed job (``torch.distributed`` initialised with more than one rank) every rank
writes its own file: ``{rank}`` in the path is replaced by the rank, else ``.rank<r>`` goes
before the suffix (``run/step.json`` -> ``run/step.rank0.json``, ...). ``tpuemu viz run/`` opens
the directory's rank traces as one multi-chip timeline.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from . import _rust

_SKIP = {"__get__", "__set__", "__repr__", "__format__", "__len__", "__iter__", "__bool__"}


def _name(func) -> str:
    n = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    mod = getattr(func, "__module__", None) or ""
    if mod.startswith("torch.nn.functional"):
        return "F." + n
    if mod in ("torch", "torch._C._nn", "torch.functional") or n.startswith("_VariableFunctions"):
        return "torch." + n.split(".")[-1]
    return n


class _PythonCalls(TorchFunctionMode):
    """Records each top-level torch call as a span on the ``python`` lane."""

    def __init__(self):
        super().__init__()
        self.depth = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self.depth > 0 or name in _SKIP or torch.compiler.is_compiling():
            return func(*args, **kwargs)
        self.depth += 1
        start = _rust.host_time_ns()
        try:
            return func(*args, **kwargs)
        finally:
            self.depth -= 1
            _rust.record_span("python", _name(func), start, _rust.host_time_ns())


def _rank_path(path: str | Path) -> tuple[Path, dict]:
    """The file this process writes, and its rank facts for the trace's metadata."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return Path(path), {}
    from .distributed import slice as current_slice

    rank = dist.get_rank()
    text = str(path)
    if "{rank}" in text:
        p = Path(text.replace("{rank}", str(rank)))
    else:
        p = Path(path)
        p = p.with_name(f"{p.stem}.rank{rank}{p.suffix}")
    s = current_slice()
    return p, {"rank": rank, "world_size": dist.get_world_size(),
               "slice": s.spec if s is not None else None}


@contextlib.contextmanager
def trace(path: str | Path, label: str | None = None, python_calls: bool = True):
    """Records what runs in the block and writes it as a Chrome trace to ``path`` (one file per
    rank in a distributed job, see the module docs)."""
    _rust.sync()
    _rust.take_trace("")  # drop anything recorded before
    _rust.set_profiling(True)
    mode = _PythonCalls() if python_calls else contextlib.nullcontext()
    try:
        with mode:
            yield
    finally:
        try:
            _rust.sync()
        finally:
            out, ranks = _rank_path(path)
            text = _rust.take_trace(label or Path(path).stem, **ranks)
            _rust.set_profiling(False)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
