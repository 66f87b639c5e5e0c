"""This process's place in the job: its rank, the slice, and its chip."""

from __future__ import annotations

import torch.distributed as dist

from ._slice import Slice, from_env

_SLICE: Slice | None = None


def slice_for(opts) -> Slice:
    """The job's slice, fixed when the default group is created (its size is the world)."""
    global _SLICE
    if _SLICE is None:
        world = opts.group_size if not list(opts.global_ranks_in_group) else dist.get_world_size()
        _SLICE = from_env(world)
        _check_chip(_SLICE)
    return _SLICE


def current() -> Slice | None:
    """The slice, once a tpu process group exists."""
    return _SLICE


def _check_chip(s: Slice) -> None:
    from .. import _rust

    if _rust.started() and _rust.chip() != s.chip:
        raise RuntimeError(
            f"tpuemu: this process's tpu runs on {_rust.chip()} but the slice is {s.spec}; "
            "set TPUEMU_SLICE (or TPUEMU_CHIP) before the first tpu tensor"
        )
