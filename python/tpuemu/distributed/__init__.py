"""Sharded PyTorch on an emulated slice: one process per chip, torch.distributed as usual.

    torchrun --nproc-per-node 4 train.py          # TPUEMU_SLICE=v5e:2x2 (default: 4 chips of v5e)

where ``train.py`` is ordinary sharded PyTorch::

    import torch, torch.distributed as dist, tpuemu
    dist.init_process_group()                     # "cpu:gloo,tpu:tpu" (or backend="tpu")
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))

Importing tpuemu registers the c10d backend "tpu" (:mod:`._backend`): DDP, FSDP2
(``fully_shard``), tensor parallelism (``parallelize_module``), DTensor and the functional
collectives run on it. Each process emulates one chip: rank ``r`` is chip ``r`` of the slice
(:mod:`._slice`), and each collective is timed on the slice's interconnect while its bytes move
through gloo. :func:`spawn` starts the ranks from one Python call; :func:`step_breakdown` says
where a rank's traced step went (compute, communication, exposed communication).
"""

from __future__ import annotations

import torch.distributed as dist

from . import _backend, _compat  # noqa: F401  (_compat: FSDP2 moving CPU models to the tpu)
from ._breakdown import step_breakdown
from ._slice import Slice
from ._spawn import spawn
from ._state import current as _current

__all__ = ["spawn", "Slice", "slice", "ProcessGroupTPU", "step_breakdown"]

ProcessGroupTPU = _backend.ProcessGroupTPU

if "tpu" not in dist.Backend.backend_list:
    dist.Backend.register_backend("tpu", _backend.create, extended_api=True, devices=["tpu"])


def slice() -> Slice | None:  # noqa: A001  (the natural name)
    """The slice this process's ranks form, once a tpu process group exists."""
    return _current()
