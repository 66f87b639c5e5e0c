"""The "tpu" process group's reductions: all-reduce (and its coalesced form), reduce,
reduce-scatter (list, tensor, coalesced). Sums, products, minima and maxima are gloo's;
``ReduceOp.AVG`` is a sum divided by the group size (gloo has no average)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ._core import collective, dtype_name, nbytes, op_name


class Reductions:
    """Methods of :class:`._backend.ProcessGroupTPU` (c10d's names and arguments)."""

    def _reduce_op(self, op, tensors):
        """(the operation's name, gloo's op) after checking it suits the tensors."""
        name = op_name(op)
        floating = any(t.is_floating_point() for t in tensors)
        self._require(name != "avg" or all(t.is_floating_point() for t in tensors),
                      "ReduceOp.AVG needs floating-point tensors")
        self._require(name not in ("band", "bor", "bxor") or not floating,
                      f"ReduceOp.{name.upper()} needs integer or bool tensors")
        return name, dist.ReduceOp.SUM if name == "avg" else op

    def _average(self, name: str, t: torch.Tensor) -> torch.Tensor:
        return t / self._size if name == "avg" else t

    # ------------------------------------------------------------------ all-reduce

    @collective("all_reduce", "allreduce_")
    def allreduce(self, tensors, opts):
        name, op = self._reduce_op(opts.reduceOp, tensors)
        self._require(len({t.dtype for t in tensors}) <= 1,
                      "all_reduce_coalesced: the tensors must share a dtype")
        o = dist.AllreduceOptions()
        o.reduceOp = op

        def move(cpu, _):
            # Several tensors (coalesced) go as one flat buffer, as one collective.
            flat = torch.cat([c.reshape(-1) for c in cpu])
            self._gloo.allreduce([flat], o).wait()
            parts = self._average(name, flat).split([c.numel() for c in cpu])
            return [p.view(c.shape) for p, c in zip(parts, cpu)]

        timing = ("all-reduce", dtype_name(tensors[0]), nbytes(tensors))
        return self._run("allreduce_", "all_reduce", tensors, tensors, move, timing, op=name)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    @collective("reduce", "reduce_")
    def reduce(self, tensors, opts):
        name, op = self._reduce_op(opts.reduceOp, tensors)
        root = opts.rootRank
        self._check_root(root)
        ro = dist.ReduceOptions()
        ro.reduceOp, ro.rootRank, ro.rootTensor = op, root, 0

        def move(cpu, _):
            self._gloo.reduce(cpu, ro).wait()
            return [self._average(name, cpu[0])] if self._group_rank == root else [None]

        timing = ("all-reduce", dtype_name(tensors[0]), nbytes(tensors))
        return self._run("reduce_", "reduce", tensors, tensors, move, timing, op=name, root=root)

    # ------------------------------------------------------------------ reduce-scatter

    def _scatter_opts(self, op):
        rso = dist.ReduceScatterOptions()
        rso.reduceOp = op
        return rso

    @collective("reduce_scatter", "_reduce_scatter_base_")
    def reduce_scatter_single(self, output, input, opts):  # noqa: A002  (c10d's names)
        name, op = self._reduce_op(opts.reduceOp, [input])
        self._require(input.numel() == output.numel() * self._size,
                      f"reduce_scatter_tensor: the input has {input.numel()} elements; it needs "
                      f"the group's {self._size} x the output's {output.numel()}")
        rso = self._scatter_opts(op)

        def move(cpu, _):
            out = torch.empty(output.shape, dtype=output.dtype)
            self._gloo._reduce_scatter_base(out, cpu[0], rso).wait()
            return [self._average(name, out)]

        timing = ("reduce-scatter", dtype_name(input), nbytes([input]))
        return self._run("_reduce_scatter_base_", "reduce_scatter", [input], [output], move,
                         timing, op=name)

    def _reduce_scatter_base(self, output, input, opts):  # noqa: A002
        return self.reduce_scatter_single(output, input, opts)

    @collective("reduce_scatter", "reduce_scatter_")
    def reduce_scatter(self, output_tensors, input_tensors, opts):
        ins = input_tensors[0]
        self._require(len(ins) == self._size,
                      f"reduce_scatter needs {self._size} input tensors, got {len(ins)}")
        name, op = self._reduce_op(opts.reduceOp, ins)
        rso = self._scatter_opts(op)

        def move(cpu, _):
            out = torch.empty(output_tensors[0].shape, dtype=output_tensors[0].dtype)
            self._gloo.reduce_scatter([out], [cpu], rso).wait()
            return [self._average(name, out)]

        timing = ("reduce-scatter", dtype_name(ins[0]), nbytes(ins))
        return self._run("reduce_scatter_", "reduce_scatter", ins, output_tensors, move, timing,
                         op=name)

    @collective("reduce_scatter", "reduce_scatter_tensor_coalesced_")
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        name, op = self._reduce_op(opts.reduceOp, inputs)
        for o, i in zip(outputs, inputs):
            self._require(i.numel() == o.numel() * self._size,
                          "reduce_scatter_tensor_coalesced: an input is not the group's size "
                          "times its output")
        rso = self._scatter_opts(op)

        def move(cpu, _):
            got = []
            for out_t, c in zip(outputs, cpu):
                out = torch.empty(out_t.shape, dtype=out_t.dtype)
                self._gloo._reduce_scatter_base(out, c, rso).wait()
                got.append(self._average(name, out))
            return got

        timing = ("reduce-scatter", dtype_name(inputs[0]), nbytes(inputs))
        return self._run("reduce_scatter_tensor_coalesced_", "reduce_scatter", inputs, outputs,
                         move, timing, op=name)
