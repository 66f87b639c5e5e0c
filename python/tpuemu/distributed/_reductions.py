"""The "tpu" process group's reductions: all-reduce (and its coalesced form), reduce,
reduce-scatter (list, tensor, coalesced). Sums, products, minima and maxima are gloo's;
``ReduceOp.AVG`` is a sum divided by the group size (gloo has no average)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ._core import dtype_name, nbytes, op_name


class Reductions:
    """Methods of :class:`._backend.ProcessGroupTPU` (c10d's names and arguments)."""

    # ------------------------------------------------------------------ all-reduce

    def _reduce_opts(self, op):
        name = op_name(op)
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

        timing = ("all-reduce", dtype_name(tensors[0]), nbytes(tensors))

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

        timing = ("all-reduce", dtype_name(tensors[0]), nbytes(tensors))

        return self._run("reduce_", "reduce", tensors, tensors, move, timing)

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

        timing = ("reduce-scatter", dtype_name(input), nbytes([input]))

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

        timing = ("reduce-scatter", dtype_name(ins[0]), nbytes(ins))

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

        timing = ("reduce-scatter", dtype_name(inputs[0]), nbytes(inputs))

        return self._run("reduce_scatter_tensor_coalesced_", "reduce_scatter", inputs, outputs,
                         move, timing, shapes=str([list(t.shape) for t in inputs]) + " " + name)
