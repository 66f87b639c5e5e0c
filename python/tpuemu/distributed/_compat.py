"""FSDP2's ``fully_shard`` moving a CPU model onto the tpu.

``fully_shard`` moves parameters and buffers with ``tensor.data = tensor.to(device)``, which
PyTorch allows only between devices whose tensors it can shallow-copy into each other (CPU,
CUDA, XPU, ...; never a PrivateUse1 device such as "tpu": "incompatible tensor type"). For the
tpu the move swaps each tensor with its moved copy instead (``torch.utils.swap_tensors``, what
``Module.to`` does with ``swap_module_params_on_conversion``), so that the parameters the
program holds become the tpu ones, as on CUDA.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn


def _patch_fsdp_move() -> None:
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_init
    except ImportError:  # a torch without FSDP2
        return
    original = _fsdp_init._move_states_to_device
    if getattr(original, "_tpuemu", False):
        return

    def move(params, buffers, device):
        if device.type != "tpu":
            return original(params, buffers, device)
        rest = []
        for t in itertools.chain(params, buffers):
            if t.device.type != "cpu" or type(t) not in (nn.Parameter, torch.Tensor):
                rest.append(t)  # PyTorch's own checks and moves
                continue
            with torch.no_grad():
                moved = t.to(device)
                if isinstance(t, nn.Parameter):
                    moved = nn.Parameter(moved, requires_grad=t.requires_grad)
            torch.utils.swap_tensors(t, moved)
        ps = [t for t in rest if isinstance(t, nn.Parameter)]
        bs = [t for t in rest if not isinstance(t, nn.Parameter)]
        return original(ps, bs, device)

    move._tpuemu = True
    _fsdp_init._move_states_to_device = move


_patch_fsdp_move()
