"""The "tpu" process group's collectives that move without reducing: all-gather (list, tensor,
coalesced), all-to-all (even and uneven), broadcast, gather, scatter, barrier."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ._core import collective, dtype_name, nbytes


def _empty_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype)


class Movements:
    """Methods of :class:`._backend.ProcessGroupTPU` (c10d's names and arguments)."""

    # ------------------------------------------------------------------ all-gather

    @collective("all_gather", "_allgather_base_")
    def all_gather_single(self, output, input, opts):  # noqa: A002  (c10d's names)
        self._require(output.numel() == input.numel() * self._size,
                      f"all_gather_into_tensor: the output has {output.numel()} elements; it "
                      f"needs the group's {self._size} x {input.numel()}")

        def move(cpu, _):
            out = _empty_like(output)
            self._gloo._allgather_base(out, cpu[0]).wait()
            return [out]

        timing = ("all-gather", dtype_name(input), nbytes([output]))
        return self._run("_allgather_base_", "all_gather", [input], [output], move, timing)

    def _allgather_base(self, output, input, opts):  # noqa: A002
        return self.all_gather_single(output, input, opts)

    @collective("all_gather", "allgather_")
    def allgather(self, output_tensors, input_tensors, opts):
        outs = output_tensors[0]
        self._require(len(outs) == self._size,
                      f"all_gather needs {self._size} output tensors, got {len(outs)}")

        def move(cpu, _):
            got = [_empty_like(o) for o in outs]
            self._gloo.allgather([got], cpu).wait()
            return got

        timing = ("all-gather", dtype_name(input_tensors[0]), nbytes(input_tensors) * self._size)
        return self._run("allgather_", "all_gather", input_tensors, outs, move, timing,
                         result=[outs])

    @collective("all_gather", "allgather_into_tensor_coalesced_")
    def all_gather_single_coalesced(self, outputs, inputs, opts):
        for o, i in zip(outputs, inputs):
            self._require(o.numel() == i.numel() * self._size,
                          "all_gather_into_tensor_coalesced: an output is not the group's size "
                          "times its input")

        def move(cpu, _):
            got = []
            for o, c in zip(outputs, cpu):
                out = _empty_like(o)
                self._gloo._allgather_base(out, c).wait()
                got.append(out)
            return got

        timing = ("all-gather", dtype_name(inputs[0]), nbytes(outputs))
        return self._run("allgather_into_tensor_coalesced_", "all_gather", inputs, outputs, move,
                         timing)

    @collective("all_gather", "allgather_coalesced_")
    def allgather_coalesced(self, output_lists, input_list, opts):
        flat_outs = [o for lst in output_lists for o in lst]

        def move(cpu, _):
            got = [[_empty_like(o) for o in lst] for lst in output_lists]
            for g, c in zip(got, cpu):
                self._gloo.allgather([g], [c]).wait()
            return [o for lst in got for o in lst]

        timing = ("all-gather", dtype_name(input_list[0]), nbytes(input_list) * self._size)
        return self._run("allgather_coalesced_", "all_gather", input_list, flat_outs, move, timing,
                         result=output_lists)

    # ------------------------------------------------------------------ all-to-all

    def _rows(self, t: torch.Tensor, splits, what: str) -> list[int]:
        """The rows of `t` for each rank (even when `splits` is empty), checked."""
        rows = t.shape[0] if t.dim() > 0 else 0
        if not splits:
            self._require(rows % self._size == 0,
                          f"all_to_all_single: {rows} rows do not split evenly among {self._size}")
            return [rows // self._size] * self._size
        splits = list(splits)
        self._require(len(splits) == self._size and all(s >= 0 for s in splits)
                      and sum(splits) == rows,
                      f"all_to_all_single: {what} split sizes {splits} do not divide the "
                      f"{rows} rows among {self._size} ranks")
        return splits

    @collective("all_to_all", "alltoall_base_")
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        sent = self._rows(input, input_split_sizes, "input")
        got = self._rows(output, output_split_sizes, "output")
        row = input[0].numel() * input.element_size() if input.dim() > 0 and input.shape[0] else 0

        def move(cpu, _):
            out = _empty_like(output)
            self._gloo.alltoall_base(out, cpu[0], list(output_split_sizes),
                                     list(input_split_sizes)).wait()
            return [out]

        def timing(headers):
            return ("all-to-all", dtype_name(input), int(max(h.extra for h in headers)) * self._size)

        return self._run("alltoall_base_", "all_to_all", [input], [output], move, timing,
                         same_shapes=False, extra=max(sent, default=0) * row, splits=[sent, got])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    @collective("all_to_all", "alltoall_")
    def alltoall(self, output_tensors, input_tensors, opts):
        self._require(len(input_tensors) == len(output_tensors) == self._size,
                      f"all_to_all needs {self._size} input and output tensors")
        sizes = [[t.numel() for t in input_tensors], [t.numel() for t in output_tensors]]

        def move(cpu, _):
            got = [_empty_like(o) for o in output_tensors]
            self._gloo.alltoall(got, cpu).wait()
            return got

        def timing(headers):
            return ("all-to-all", dtype_name(input_tensors[0]),
                    int(max(h.extra for h in headers)) * self._size)

        biggest = max((nbytes([t]) for t in input_tensors), default=0)
        return self._run("alltoall_", "all_to_all", input_tensors, output_tensors, move, timing,
                         same_shapes=False, extra=biggest, splits=sizes)

    # ------------------------------------------------------------------ one-to-all, all-to-one

    @collective("broadcast", "broadcast_")
    def broadcast(self, tensors, opts):
        root = opts.rootRank
        self._check_root(root)
        bo = dist.BroadcastOptions()
        bo.rootRank, bo.rootTensor = root, 0

        def move(cpu, _):
            self._gloo.broadcast(cpu, bo).wait()
            return [None] * len(cpu) if self._group_rank == root else cpu

        timing = ("all-gather", dtype_name(tensors[0]), nbytes(tensors))
        return self._run("broadcast_", "broadcast", tensors, tensors, move, timing, root=root)

    @collective("gather", "gather_")
    def gather(self, output_tensors, input_tensors, opts):
        root = opts.rootRank
        self._check_root(root)
        go = dist.GatherOptions()
        go.rootRank = root
        outs = output_tensors[0] if self._group_rank == root else []
        self._require(self._group_rank != root or len(outs) == self._size,
                      f"gather needs {self._size} output tensors on the root")

        def move(cpu, _):
            got = [[_empty_like(o) for o in outs]] if outs else []
            self._gloo.gather(got, cpu, go).wait()
            return got[0] if got else []

        timing = ("all-gather", dtype_name(input_tensors[0]), nbytes(input_tensors) * self._size)
        return self._run("gather_", "gather", input_tensors, outs, move, timing,
                         result=output_tensors, root=root)

    @collective("scatter", "scatter_")
    def scatter(self, output_tensors, input_tensors, opts):
        root = opts.rootRank
        self._check_root(root)
        so = dist.ScatterOptions()
        so.rootRank = root
        ins = input_tensors[0] if self._group_rank == root else []
        self._require(self._group_rank != root or len(ins) == self._size,
                      f"scatter needs {self._size} input tensors on the root")

        def move(cpu, _):
            out = _empty_like(output_tensors[0])
            self._gloo.scatter([out], [cpu] if cpu else [], so).wait()
            return [out]

        timing = ("all-gather", dtype_name(output_tensors[0]), nbytes(output_tensors) * self._size)
        return self._run("scatter_", "scatter", ins, output_tensors, move, timing,
                         dtype=dtype_name(output_tensors[0]),
                         shapes=str([list(t.shape) for t in output_tensors]), root=root)

    @collective("barrier", "barrier")
    def barrier(self, opts):
        def move(cpu, _):
            return []

        timing = ("all-reduce", "float32", 4 * self._size)
        return self._run("barrier", "barrier", [], [], move, timing, dtype="none", shapes="[]",
                         blocking=True)
