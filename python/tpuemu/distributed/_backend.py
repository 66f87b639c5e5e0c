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

from ._core import GroupCore, disable_tracing
from ._movements import Movements
from ._p2p import PointToPoint
from ._reductions import Reductions


class ProcessGroupTPU(Reductions, Movements, PointToPoint, GroupCore):
    """torch.distributed's backend for tpu tensors (see the module docs)."""


def create(opts, backend_options=None) -> ProcessGroupTPU:
    """The creator ``register_backend`` calls (its extended form: with the group's ranks)."""
    disable_tracing(ProcessGroupTPU)
    return ProcessGroupTPU(opts, backend_options)
