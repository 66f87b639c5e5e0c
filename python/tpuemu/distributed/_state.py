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
    """The process's chip (``TPUEMU_CHIP``, ``tpuemu.set_chip``) must be the slice's."""
    from .. import _rust

    if _rust.chip() != s.chip:
        how = ("runs on" if _rust.started() else "is set to")
        raise RuntimeError(
            f"tpuemu: this process's tpu {how} {_rust.chip()} (TPUEMU_CHIP or tpuemu.set_chip) "
            f"but the slice is {s.spec}: name one chip (unset TPUEMU_CHIP, or make TPUEMU_SLICE "
            f"{_rust.chip()}:...)"
        )
