"""FSDP2's ``fully_shard`` moving a CPU model onto the tpu.

``fully_shard`` moves parameters and buffers with ``tensor.data = tensor.to(device)``, which
PyTorch allows only between devices whose tensors it can shallow-copy into each other (CPU,
CUDA, XPU, ...; never a PrivateUse1 device such as "tpu": "incompatible tensor type"). For the
tpu the move swaps each tensor with its moved copy instead (``torch.utils.swap_tensors``, what
``Module.to`` does with ``swap_module_params_on_conversion``), so that the parameters the
program holds become the tpu ones, as on CUDA.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import itertools
import sys

import torch
from torch import nn

_FSDP_INIT = "torch.distributed.fsdp._fully_shard._fsdp_init"


def _patch_fsdp_move(_fsdp_init) -> None:
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


class _PatchWhenImported(importlib.abc.MetaPathFinder):
    """Patches FSDP2's module when a program imports it, not before: importing FSDP2 took 1.2 s
    of ``import tpuemu`` (``python -X importtime``), which every process that imports torch
    pays (the backend autoloads) and few use."""

    def find_spec(self, name, path=None, target=None):
        if name != _FSDP_INIT:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _patch_fsdp_move(module)

        spec.loader.exec_module = exec_module
        return spec


if _FSDP_INIT in sys.modules:
    _patch_fsdp_move(sys.modules[_FSDP_INIT])
else:
    sys.meta_path.insert(0, _PatchWhenImported())
