"""The common path of every collective of the "tpu" process group (see ``_backend``): the
group's place on the slice, the checks, the header exchange, the bytes through gloo, the timing
and the landing of the result."""

from __future__ import annotations

import functools
import json
import math
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend

from .. import _C, _rust
from . import _exchange as ex
from . import _state
from ._work import Work

_SUPPORTED_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor",
    dist.ReduceOp.BXOR: "bxor",
}


def op_name(op) -> str:
    for k, v in _SUPPORTED_OPS.items():
        if op == k:
            return v
    name = "PREMUL_SUM (NCCL's pre-multiplied sum)" if op == dist.ReduceOp.PREMUL_SUM else str(op)
    raise ex.Refused(NotImplementedError(
        f"tpuemu: reduce op {name} is not supported by the tpu process group (sum, avg, "
        "product, min, max, band, bor, bxor are)"))


def untraced(method):
    """Marks a method of the group that Dynamo must never trace into (DDP calls the group from
    C++ in the middle of a compiled model): :func:`disable_tracing` wraps it in
    ``torch._dynamo.disable`` when the first group is made. Not at import: importing Dynamo
    took 2.8 s of the 6.4 s of ``import tpuemu`` (``python -X importtime``), which every
    process that imports torch pays (the backend autoloads)."""
    method._tpu_untraced = True
    return method


def disable_tracing(cls) -> None:
    """Wraps each method of `cls` marked :func:`untraced` in ``torch._dynamo.disable`` (once)."""
    if cls.__dict__.get("_tracing_disabled"):
        return
    import inspect

    import torch._dynamo

    for name in dir(cls):
        method = inspect.getattr_static(cls, name)
        if getattr(method, "_tpu_untraced", False):
            setattr(cls, name, torch._dynamo.disable(method))
    cls._tracing_disabled = True


def collective(kind: str, what: str):
    """Makes a method one of the group's collectives: a rank that refuses its own arguments
    (``Refused``) tells its peers before raising, and Dynamo never traces into it
    (:func:`untraced`)."""

    def wrap(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except ex.Refused as r:
                self._refuse(kind, what, r.error)
                raise r.error from None

        return untraced(run)

    return wrap


def nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class GroupCore(_C10dBackend):
    """A process group's state and its one path for every collective."""

    def __init__(self, opts, backend_options=None):  # noqa: ARG002
        super().__init__(opts.group_rank, opts.group_size)
        self._size = opts.group_size
        self._group_rank = opts.group_rank
        self._ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
        self._slice = _state.slice_for(opts)
        self._me = self._ranks[self._group_rank]
        self._axes, self._exact = self._slice.axes_of(self._ranks)
        # Where this group's collectives are timed (see _slice.Slice.timing_of).
        self._timed_on, self._timed_axes, self._how = self._slice.timing_of(self._ranks)
        timeout = opts.timeout if isinstance(opts.timeout, timedelta) else timedelta(minutes=30)
        # The bytes travel over torch.distributed's own gloo, beside this group's store keys.
        self._gloo = dist.ProcessGroupGloo(
            dist.PrefixStore("tpuemu/", opts.store), opts.group_rank, opts.group_size, timeout=timeout
        )
        self._seq = 0
        # Sends handed to gloo and not yet delivered (see _p2p).
        self._in_flight: list = []

    # ------------------------------------------------------------------ c10d's queries

    def getBackendName(self) -> str:  # noqa: N802  (c10d's name)
        return "tpu"

    # c10d asks these of every backend (a Python backend must answer them itself).
    supports_coalescing = property(lambda self: False)
    supports_splitting = property(lambda self: False)
    supports_shrinking = property(lambda self: False)
    supports_tensor_alloc = property(lambda self: False)
    supports_abort_hooks = property(lambda self: False)
    supports_completion_hooks = property(lambda self: False)
    supports_reconfigure = property(lambda self: False)
    supports_window = property(lambda self: False)

    @property
    def group_ranks(self) -> list[int]:
        """The group's global ranks, in group order."""
        return list(self._ranks)

    # ------------------------------------------------------------------ the common path

    def _check(self, what: str, tensors) -> None:
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise ex.Refused(TypeError(f"tpuemu: {what} takes tensors, not {type(t).__name__}"))
            if t.device.type != "tpu":
                raise ex.Refused(ValueError(
                    f"tpuemu: {what} on the tpu process group got a tensor on {t.device}; it "
                    "moves tpu tensors (CPU tensors go to gloo: init_process_group("
                    '"cpu:gloo,tpu:tpu"))'))
            if t.is_complex():
                raise ex.Refused(NotImplementedError(
                    f"tpuemu: {what}: the tpu computes no complex numbers"))

    def _require(self, ok: bool, message: str) -> None:
        """A rank's own argument check (see :func:`collective`)."""
        if not ok:
            raise ex.Refused(ValueError(f"tpuemu: {message}"))

    def _check_root(self, root: int) -> None:
        self._require(0 <= root < self._size,
                      f"root rank {root} is not a rank of this group of {self._size}")

    def _refuse(self, kind: str, what: str, error: Exception) -> None:
        """Tells the group this rank will not run its collective (its next header says why),
        so that every rank raises instead of waiting."""
        self._seq += 1
        mine = ex.Header(0.0, self._seq, kind, error=f"{type(error).__name__}: {error}")
        try:
            ex.exchange(self._gloo, mine, self._size)
        except RuntimeError:
            pass  # the peers are gone: this rank's own error says enough

    def _time(self, op: str, dtype: str, nbytes: int) -> tuple[float, str]:
        """Simulated ns of `op` of `nbytes` over this group's axes, and what was timed."""
        if self._size == 1 or nbytes == 0:
            return 0.0, "nothing crosses a link"
        axes = self._timed_axes
        if self._how == "enclosing" and op == "all-gather":
            # The enclosing sub-torus with the same shard per chip.
            nbytes = nbytes * math.prod(self._slice.mesh[a] for a in axes) // self._size
        ns = _rust.collective_ns(self._timed_on, op, dtype, int(nbytes), list(axes))
        return ns, f"{op} of {nbytes} bytes over axes {list(axes)} of {self._timed_on}"

    def _run(self, what: str, kind: str, ins, outs, move, timing, *, same_shapes=True,
             extra=0.0, dtype=None, result=None, blocking=False, shapes=None, op="", root=-1,
             splits=None):
        """One collective (see the module docs). `move(cpu_ins, headers)` runs gloo and
        returns the CPU results for `outs` (None: leave that one); `timing` is what to time,
        `(op, dtype, bytes)`, or a function of every rank's header that gives it."""
        self._check(what, list(ins) + list(outs))
        self._sends_delivered()
        dtype = dtype or (dtype_name(ins[0]) if ins else dtype_name(outs[0]) if outs else "float32")
        shapes = shapes if shapes is not None else str([list(t.shape) for t in ins])
        entry = _rust.begin_collective(f"c10d::{what}", shapes)
        ready = max(entry[2], entry[3])
        self._seq += 1
        mine = ex.Header(ready, self._seq, kind, dtype, shapes, ex.digest(shapes), float(extra),
                         op, root, splits)
        try:
            headers = ex.exchange(self._gloo, mine, self._size)
        except RuntimeError as e:
            raise ex.transport_error(what, self._ranks, e) from None
        ex.check(headers, self._ranks, what, same_shapes)
        start = max(h.ready_ns for h in headers)
        cpu_ins = [_C.peek(t) for t in ins]
        try:
            cpu_outs = move(cpu_ins, headers)
        except RuntimeError as e:
            if isinstance(e, (NotImplementedError, ex.CollectiveMismatch)):
                raise
            raise ex.transport_error(what, self._ranks, e) from None
        op, op_dtype, nbytes = timing(headers) if callable(timing) else timing
        ns, timed_as = self._time(op, op_dtype, int(nbytes))
        end = start + ns
        for t, c in zip(outs, cpu_outs):
            if c is not None:
                _C.land(t, c, end)
        args = {
            "group": self._ranks,
            "axes": self._axes,
            "seq": self._seq,
            "slice": self._slice.spec,
            "timed_as": timed_as,
        }
        if self._how != "exact":
            args["timed_over"] = f"{self._how}: {self._timed_on} axes {self._timed_axes}"
        label = f"{kind} {human(nbytes)} axes {list(self._axes)}"
        _rust.end_collective(entry, kind, label, int(nbytes), start, end, json.dumps(args))
        return Work(list(result if result is not None else outs), end, blocking=blocking)

