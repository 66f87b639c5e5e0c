"""The c10d backend "tpu": torch.distributed's collectives on tpu tensors, one process per chip.

``torch.distributed.Backend.register_backend("tpu", ...)`` makes it what
``init_process_group()`` (or ``backend="tpu"``, ``"cpu:gloo,tpu:tpu"``) creates for tpu tensors,
and what ``DeviceMesh``, DDP, FSDP2, DTensor and the functional collectives use through it.

A collective, on every rank of its group:

1. the chip reaches it (``_rust.begin_collective``): DeferAndFuse runs what it recorded, the
   host is charged a dispatch and a launch, and the chip is ready once its earlier work is done
   (the host does not wait);
2. the ranks swap headers over gloo (:mod:`._exchange`): the collective starts when the last
   chip arrives; mismatched calls raise on every rank;
3. the tensors' bytes move through torch.distributed's own gloo backend, over TCP or shared
   memory between the processes (on one host or several, as ``torchrun --nnodes`` places them);
4. the result lands in the output tensors, ready at ``start + duration``, where the duration is
   the backend's collective program on the slice's interconnect (``tpuemu bench collective``,
   timing-only, cached per kind, axes and bytes); the chip's trace and
   ``tpuemu.metrics()["collectives"]`` record it.

How each collective is timed (``V``: the bytes ``bench collective --bytes`` means):

| collective | timed as |
|---|---|
| all_reduce, all_reduce_coalesced | all-reduce of the tensors' bytes |
| all_gather(_into_tensor), coalesced | all-gather of the gathered bytes |
| reduce_scatter(_tensor), coalesced | reduce-scatter of the input bytes |
| all_to_all(_single) | all-to-all of group size x the largest block any rank sends (uneven splits) |
| broadcast, scatter, gather | all-gather of the bytes every chip ends with (a pipelined ring moves them once over every link) |
| reduce | all-reduce of the tensor's bytes (an upper bound: the root alone needs the sum) |
| barrier | all-reduce of one float32 per chip |
| send / recv | one remote DMA between the two chips, routed over the torus |
"""

from __future__ import annotations

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


def _op_name(op) -> str:
    for k, v in _SUPPORTED_OPS.items():
        if op == k:
            return v
    raise NotImplementedError(
        f"tpuemu: reduce op {op} is not supported by the tpu process group (sum, avg, product, "
        "min, max, band, bor, bxor are)"
    )


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class ProcessGroupTPU(_C10dBackend):
    """torch.distributed's backend for tpu tensors (see the module docs)."""

    def __init__(self, opts, backend_options=None):  # noqa: ARG002
        super().__init__(opts.group_rank, opts.group_size)
        self._size = opts.group_size
        self._group_rank = opts.group_rank
        self._ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
        self._slice = _state.slice_for(opts)
        self._me = self._ranks[self._group_rank]
        self._axes, self._exact = self._slice.axes_of(self._ranks)
        timeout = opts.timeout if isinstance(opts.timeout, timedelta) else timedelta(minutes=30)
        # The bytes travel over torch.distributed's own gloo, beside this group's store keys.
        self._gloo = dist.ProcessGroupGloo(
            dist.PrefixStore("tpuemu/", opts.store), opts.group_rank, opts.group_size, timeout=timeout
        )
        self._seq = 0

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
                raise TypeError(f"tpuemu: {what} takes tensors, not {type(t).__name__}")
            if t.device.type != "tpu":
                raise ValueError(
                    f"tpuemu: {what} on the tpu process group got a tensor on {t.device}; it "
                    "moves tpu tensors (CPU tensors go to gloo: init_process_group("
                    '"cpu:gloo,tpu:tpu"))'
                )
            if not t.is_contiguous():
                raise ValueError(f"tpuemu: {what}: tensors must be contiguous")

    def _time(self, op: str, dtype: str, nbytes: int) -> tuple[float, str]:
        """Simulated ns of `op` of `nbytes` over this group's axes, and what was timed."""
        if self._size == 1 or nbytes == 0:
            return 0.0, "nothing crosses a link"
        axes = self._axes
        if not self._exact and op == "all-gather":
            # The enclosing sub-torus with the same shard per chip.
            nbytes = nbytes * math.prod(self._slice.mesh[a] for a in axes) // self._size
        ns = _rust.collective_ns(self._slice.spec, op, dtype, int(nbytes), list(axes))
        return ns, f"{op} of {nbytes} bytes over axes {list(axes)} of {self._slice.spec}"

    def _run(self, what: str, kind: str, ins, outs, move, timing, *, same_shapes=True,
             extra=0.0, dtype=None, result=None, blocking=False, shapes=None):
        """One collective (see the module docs). `move(cpu_ins, headers)` runs gloo and
        returns the CPU results for `outs`; `timing(headers)` gives (ns, timed-as, bytes)."""
        self._check(what, list(ins) + list(outs))
        dtype = dtype or (_dtype(ins[0]) if ins else _dtype(outs[0]) if outs else "float32")
        shapes = shapes if shapes is not None else str([list(t.shape) for t in ins])
        entry = _rust.begin_collective(f"c10d::{what}", shapes)
        ready = max(entry[2], entry[3])
        self._seq += 1
        mine = ex.Header(ready, self._seq, kind, dtype, shapes, ex.digest(shapes), float(extra))
        try:
            headers = ex.exchange(self._gloo, mine, self._size)
        except RuntimeError as e:
            raise ex.backend_error(what, self._ranks, e) from None
        ex.check(headers, self._ranks, what, same_shapes)
        start = max(h.ready_ns for h in headers)
        cpu_ins = [_C.peek(t) for t in ins]
        try:
            cpu_outs = move(cpu_ins, headers)
        except (RuntimeError, ValueError) as e:
            if isinstance(e, (NotImplementedError, ex.CollectiveMismatch)):
                raise
            raise ex.backend_error(what, self._ranks, e) from None
        ns, timed_as, nbytes = timing(headers)
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
        if not self._exact:
            args["timed_over"] = self._axes
        label = f"{kind} {_human(nbytes)} axes {list(self._axes)}"
        _rust.end_collective(entry, kind, label, int(nbytes), start, end, json.dumps(args))
        return Work(list(result if result is not None else outs), end, blocking=blocking)

    # ------------------------------------------------------------------ all-reduce

    def _reduce_opts(self, op):
        name = _op_name(op)
        o = dist.AllreduceOptions()
        o.reduceOp = dist.ReduceOp.SUM if name == "avg" else op
        return name, o

    def _check_avg(self, name: str, tensors) -> None:
        if name == "avg" and any(not t.is_floating_point() for t in tensors):
            raise ValueError("tpuemu: ReduceOp.AVG needs floating-point tensors")

    def allreduce(self, tensors, opts):
        name, o = self._reduce_opts(opts.reduceOp)
        self._check_avg(name, tensors)

        if len({t.dtype for t in tensors}) > 1:
            raise ValueError("tpuemu: all_reduce_coalesced: the tensors must share a dtype")

        def move(cpu, _):
            # Several tensors (coalesced) go as one flat buffer, as one collective.
            flat = torch.cat([c.reshape(-1) for c in cpu]) if len(cpu) > 1 else cpu[0].reshape(-1)
            self._gloo.allreduce([flat], o).wait()
            if name == "avg":
                flat = flat / self._size
            parts = flat.split([c.numel() for c in cpu])
            return [p.view(c.shape) for p, c in zip(parts, cpu)]

        def timing(_):
            nbytes = _nbytes(tensors)
            return (*self._time("all-reduce", _dtype(tensors[0]), nbytes), nbytes)

        return self._run("allreduce_", "all_reduce", tensors, tensors, move, timing,
                         shapes=str([list(t.shape) for t in tensors]) + " " + name)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        name, o = self._reduce_opts(opts.reduceOp)
        self._check_avg(name, tensors)
        root = opts.rootRank
        ro = dist.ReduceOptions()
        ro.reduceOp, ro.rootRank, ro.rootTensor = o.reduceOp, root, 0

        def move(cpu, _):
            self._gloo.reduce(cpu, ro).wait()
            if self._group_rank != root:
                return [None]
            return [cpu[0] / self._size if name == "avg" else cpu[0]]

        def timing(_):
            nbytes = _nbytes(tensors)
            return (*self._time("all-reduce", _dtype(tensors[0]), nbytes), nbytes)

        return self._run("reduce_", "reduce", tensors, tensors, move, timing)

    # ------------------------------------------------------------------ all-gather

    def all_gather_single(self, output, input, opts):  # noqa: A002  (c10d's names)
        if output.numel() != input.numel() * self._size:
            raise ValueError(
                f"tpuemu: all_gather_into_tensor: the output has {output.numel()} elements; it "
                f"needs the group's {self._size} x {input.numel()}"
            )

        def move(cpu, _):
            out = torch.empty(output.shape, dtype=output.dtype)
            self._gloo._allgather_base(out, cpu[0]).wait()
            return [out]

        def timing(_):
            nbytes = _nbytes([output])
            return (*self._time("all-gather", _dtype(input), nbytes), nbytes)

        return self._run("_allgather_base_", "all_gather", [input], [output], move, timing)

    def _allgather_base(self, output, input, opts):  # noqa: A002
        return self.all_gather_single(output, input, opts)

    def allgather(self, output_tensors, input_tensors, opts):
        outs = output_tensors[0]
        if len(outs) != self._size:
            raise ValueError(f"tpuemu: all_gather needs {self._size} output tensors, got {len(outs)}")

        def move(cpu, _):
            got = [torch.empty(o.shape, dtype=o.dtype) for o in outs]
            self._gloo.allgather([got], cpu).wait()
            return got

        def timing(_):
            nbytes = _nbytes(input_tensors) * self._size
            return (*self._time("all-gather", _dtype(input_tensors[0]), nbytes), nbytes)

        return self._run("allgather_", "all_gather", input_tensors, outs, move, timing,
                         result=[outs])

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        for o, i in zip(outputs, inputs):
            if o.numel() != i.numel() * self._size:
                raise ValueError("tpuemu: all_gather_into_tensor_coalesced: an output is not the "
                                 "group's size times its input")

        def move(cpu, _):
            got = []
            for o, c in zip(outputs, cpu):
                out = torch.empty(o.shape, dtype=o.dtype)
                self._gloo._allgather_base(out, c).wait()
                got.append(out)
            return got

        def timing(_):
            nbytes = _nbytes(outputs)
            return (*self._time("all-gather", _dtype(inputs[0]), nbytes), nbytes)

        return self._run("allgather_into_tensor_coalesced_", "all_gather", inputs, outputs, move,
                         timing, dtype=None)

    def allgather_coalesced(self, output_lists, input_list, opts):
        flat_outs = [o for lst in output_lists for o in lst]

        def move(cpu, _):
            got = [[torch.empty(o.shape, dtype=o.dtype) for o in lst] for lst in output_lists]
            for g, c in zip(got, cpu):
                self._gloo.allgather([g], [c]).wait()
            return [o for lst in got for o in lst]

        def timing(_):
            nbytes = _nbytes(input_list) * self._size
            return (*self._time("all-gather", _dtype(input_list[0]), nbytes), nbytes)

        return self._run("allgather_coalesced_", "all_gather", input_list, flat_outs, move, timing,
                         result=output_lists)

    # ------------------------------------------------------------------ reduce-scatter

    def reduce_scatter_single(self, output, input, opts):  # noqa: A002
        name, o = self._reduce_opts(opts.reduceOp)
        self._check_avg(name, [input])
        if input.numel() != output.numel() * self._size:
            raise ValueError(
                f"tpuemu: reduce_scatter_tensor: the input has {input.numel()} elements; it "
                f"needs the group's {self._size} x the output's {output.numel()}"
            )
        rso = dist.ReduceScatterOptions()
        rso.reduceOp = o.reduceOp

        def move(cpu, _):
            out = torch.empty(output.shape, dtype=output.dtype)
            self._gloo._reduce_scatter_base(out, cpu[0], rso).wait()
            return [out / self._size if name == "avg" else out]

        def timing(_):
            nbytes = _nbytes([input])
            return (*self._time("reduce-scatter", _dtype(input), nbytes), nbytes)

        return self._run("_reduce_scatter_base_", "reduce_scatter", [input], [output], move,
                         timing, shapes=f"[{list(input.shape)}] {name}")

    def _reduce_scatter_base(self, output, input, opts):  # noqa: A002
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        name, o = self._reduce_opts(opts.reduceOp)
        ins = input_tensors[0]
        if len(ins) != self._size:
            raise ValueError(f"tpuemu: reduce_scatter needs {self._size} input tensors, got {len(ins)}")
        self._check_avg(name, ins)
        rso = dist.ReduceScatterOptions()
        rso.reduceOp = o.reduceOp

        def move(cpu, _):
            out = torch.empty(output_tensors[0].shape, dtype=output_tensors[0].dtype)
            self._gloo.reduce_scatter([out], [cpu], rso).wait()
            return [out / self._size if name == "avg" else out]

        def timing(_):
            nbytes = _nbytes(ins)
            return (*self._time("reduce-scatter", _dtype(ins[0]), nbytes), nbytes)

        return self._run("reduce_scatter_", "reduce_scatter", ins, output_tensors, move, timing,
                         shapes=str([list(t.shape) for t in ins]) + " " + name)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        name, o = self._reduce_opts(opts.reduceOp)
        self._check_avg(name, inputs)
        rso = dist.ReduceScatterOptions()
        rso.reduceOp = o.reduceOp

        def move(cpu, _):
            got = []
            for out_t, c in zip(outputs, cpu):
                out = torch.empty(out_t.shape, dtype=out_t.dtype)
                self._gloo._reduce_scatter_base(out, c, rso).wait()
                got.append(out / self._size if name == "avg" else out)
            return got

        def timing(_):
            nbytes = _nbytes(inputs)
            return (*self._time("reduce-scatter", _dtype(inputs[0]), nbytes), nbytes)

        return self._run("reduce_scatter_tensor_coalesced_", "reduce_scatter", inputs, outputs,
                         move, timing, shapes=str([list(t.shape) for t in inputs]) + " " + name)

    # ------------------------------------------------------------------ all-to-all

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        row = input[0].numel() * input.element_size() if input.dim() > 0 and input.shape[0] else 0
        splits = list(input_split_sizes) or [input.shape[0] // self._size] * self._size
        biggest = max(splits) * row if splits else 0

        def move(cpu, _):
            out = torch.empty(output.shape, dtype=output.dtype)
            self._gloo.alltoall_base(out, cpu[0], list(output_split_sizes),
                                     list(input_split_sizes)).wait()
            return [out]

        def timing(headers):
            nbytes = int(max(h.extra for h in headers)) * self._size
            return (*self._time("all-to-all", _dtype(input), nbytes), nbytes)

        return self._run("alltoall_base_", "all_to_all", [input], [output], move, timing,
                         same_shapes=False, extra=biggest)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts):
        biggest = max((_nbytes([t]) for t in input_tensors), default=0)

        def move(cpu, _):
            got = [torch.empty(o.shape, dtype=o.dtype) for o in output_tensors]
            self._gloo.alltoall(got, cpu).wait()
            return got

        def timing(headers):
            nbytes = int(max(h.extra for h in headers)) * self._size
            return (*self._time("all-to-all", _dtype(input_tensors[0]), nbytes), nbytes)

        return self._run("alltoall_", "all_to_all", input_tensors, output_tensors, move, timing,
                         same_shapes=False, extra=biggest)

    # ------------------------------------------------------------------ one-to-all, all-to-one

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        bo = dist.BroadcastOptions()
        bo.rootRank, bo.rootTensor = root, 0

        def move(cpu, _):
            self._gloo.broadcast(cpu, bo).wait()
            return [None] * len(cpu) if self._group_rank == root else cpu

        def timing(_):
            nbytes = _nbytes(tensors)
            return (*self._time("all-gather", _dtype(tensors[0]), nbytes), nbytes)

        return self._run("broadcast_", "broadcast", tensors, tensors, move, timing)

    def gather(self, output_tensors, input_tensors, opts):
        root = opts.rootRank
        go = dist.GatherOptions()
        go.rootRank = root
        outs = output_tensors[0] if self._group_rank == root else []

        def move(cpu, _):
            got = [[torch.empty(o.shape, dtype=o.dtype) for o in outs]] if outs else []
            self._gloo.gather(got, cpu, go).wait()
            return got[0] if got else []

        def timing(_):
            nbytes = _nbytes(input_tensors) * self._size
            return (*self._time("all-gather", _dtype(input_tensors[0]), nbytes), nbytes)

        return self._run("gather_", "gather", input_tensors, outs, move, timing,
                         result=output_tensors)

    def scatter(self, output_tensors, input_tensors, opts):
        root = opts.rootRank
        so = dist.ScatterOptions()
        so.rootRank = root
        ins = input_tensors[0] if self._group_rank == root else []

        def move(cpu, _):
            out = torch.empty(output_tensors[0].shape, dtype=output_tensors[0].dtype)
            self._gloo.scatter([out], [cpu] if cpu else [], so).wait()
            return [out]

        def timing(_):
            nbytes = _nbytes(output_tensors) * self._size
            return (*self._time("all-gather", _dtype(output_tensors[0]), nbytes), nbytes)

        return self._run("scatter_", "scatter", ins, output_tensors, move, timing,
                         dtype=_dtype(output_tensors[0]),
                         shapes=str([list(t.shape) for t in output_tensors]))

    def barrier(self, opts):
        def move(cpu, _):
            return []

        def timing(_):
            nbytes = 4 * self._size
            return (*self._time("all-reduce", "float32", nbytes), nbytes)

        return self._run("barrier", "barrier", [], [], move, timing, dtype="none", shapes="[]",
                         blocking=True)

    # ------------------------------------------------------------------ point to point

    def _send_ns(self, src_group_rank: int, dst_group_rank: int, nbytes: int) -> float:
        if nbytes == 0:
            return 0.0
        return _rust.send_ns(self._slice.spec, self._ranks[src_group_rank],
                             self._ranks[dst_group_rank], int(nbytes))

    def send(self, tensors, dstRank, tag):  # noqa: N803  (c10d's names)
        self._check("send", tensors)
        t = tensors[0]
        shapes = str([list(t.shape)])
        entry = _rust.begin_collective("c10d::send", shapes)
        ready = max(entry[2], entry[3])
        h = ex.Header(ready, 0, "send", _dtype(t), shapes, ex.digest(shapes))
        # The sends complete when the receiver takes them: waited for by Work.wait(), so that
        # isend/irecv pairs posted in any order do not block each other.
        try:
            pending = [self._gloo.send([h.encode()], dstRank, tag),
                       self._gloo.send([_C.peek(t)], dstRank, tag)]
        except RuntimeError as e:
            raise ex.backend_error("send", self._ranks, e) from None
        nbytes = _nbytes([t])
        end = ready + self._send_ns(self._group_rank, dstRank, nbytes)
        args = {"to": self._ranks[dstRank], "slice": self._slice.spec}
        _rust.end_collective(entry, "send", f"send {_human(nbytes)} to rank {self._ranks[dstRank]}",
                             nbytes, ready, end, json.dumps(args))
        return Work([t], end, pending=pending,
                    on_error=lambda e: ex.backend_error("send", self._ranks, e))

    def _recv(self, tensors, src, tag):
        self._check("recv", tensors)
        t = tensors[0]
        shapes = str([list(t.shape)])
        entry = _rust.begin_collective("c10d::recv_", shapes)
        ready = max(entry[2], entry[3])
        try:
            h, src = ex.recv_header(self._gloo, src, tag)
            if h.dtype != _dtype(t) or h.digest != ex.digest(shapes):
                # Take the data anyway, so that the sender is not left waiting.
                junk = torch.empty(_shape_of(h.shapes), dtype=getattr(torch, h.dtype))
                self._gloo.recv([junk], src, tag).wait()
                raise ex.CollectiveMismatch(
                    f"tpuemu: recv on rank {self._me}: rank {self._ranks[src]} sent {h.dtype} "
                    f"{h.shapes}, the receiving tensor is {_dtype(t)} {shapes}"
                )
            got = torch.empty(t.shape, dtype=t.dtype)
            self._gloo.recv([got], src, tag).wait()
        except ex.CollectiveMismatch:
            raise
        except RuntimeError as e:
            raise ex.backend_error("recv", self._ranks, e) from None
        nbytes = _nbytes([t])
        start = max(ready, h.ready_ns)
        end = start + self._send_ns(src, self._group_rank, nbytes)
        _C.land(t, got, end)
        args = {"from": self._ranks[src], "slice": self._slice.spec}
        _rust.end_collective(entry, "recv",
                             f"recv {_human(nbytes)} from rank {self._ranks[src]}", nbytes, start,
                             end, json.dumps(args))
        return Work([t], end, source_rank=src)

    def recv(self, tensors, srcRank, tag):  # noqa: N803
        return self._recv(tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag):
        return self._recv(tensors, None, tag)


def _shape_of(shapes: str) -> list[int]:
    return json.loads(shapes)[0]


def create(opts, backend_options=None) -> ProcessGroupTPU:
    """The creator ``register_backend`` calls (its extended form: with the group's ranks)."""
    return ProcessGroupTPU(opts, backend_options)
