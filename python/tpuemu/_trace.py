"""``with tpuemu.trace("step.json"):`` — the Chrome trace ``tpuemu viz`` opens.

Host lanes: ``python`` (the torch calls the program made), ``aten`` (every operator the backend
ran, by overload), ``cpu fallback`` (operators run on the CPU), ``queue`` (DeferAndFuse flushes
and fused groups); then the device's kernels and units. Times are the simulated clocks.
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


@contextlib.contextmanager
def trace(path: str | Path, label: str | None = None, python_calls: bool = True):
    """Records what runs in the block and writes it as a Chrome trace to ``path``."""
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
            text = _rust.take_trace(label or Path(path).stem)
            _rust.set_profiling(False)
            Path(path).write_text(text)
