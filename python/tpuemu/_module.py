"""``Module.to("tpu")`` keeps tied weights tied.

PyTorch replaces each parameter by a new one when it moves a module to a device whose tensors
it cannot shallow-copy into (any PrivateUse1 device), which unties tied weights (GPT-2's
``lm_head``/``wte``) and strands optimizers holding the old parameters. With
``torch.__future__.set_swap_module_params_on_conversion(True)`` it swaps the tensors in place
instead. tpuemu turns that on only while a module moves to the tpu or converts tensors already
on it; CPU modules behave as PyTorch's default.
"""

from __future__ import annotations

import functools
import threading

import torch
from torch import nn

_local = threading.local()
_apply = nn.Module._apply


def _on_tpu(m: nn.Module) -> bool:
    for t in m.parameters():
        return t.device.type == "tpu"
    for t in m.buffers():
        return t.device.type == "tpu"
    return False


def _swapping(fn):
    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        if getattr(_local, "on", False) or torch.__future__.get_swap_module_params_on_conversion():
            return fn(self, *args, **kwargs)
        _local.on = True
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            return fn(self, *args, **kwargs)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(False)
            _local.on = False

    return run


_swapped_apply = _swapping(_apply)


def _patched_apply(self, fn, recurse=True):
    if getattr(_local, "target", False) or _on_tpu(self):
        return _swapped_apply(self, fn, recurse)
    return _apply(self, fn, recurse)


def _targeting(method, kind):
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if kind == "to":
            device = torch._C._nn._parse_to(*args, **kwargs)[0]
        elif kind == "to_empty":
            device = torch.device(kwargs.get("device", args[0] if args else "cpu"))
        else:  # Module.tpu()
            device = torch.device("tpu")
        if device is None or device.type != "tpu":
            return method(self, *args, **kwargs)
        previous = getattr(_local, "target", False)
        _local.target = True
        try:
            return method(self, *args, **kwargs)
        finally:
            _local.target = previous

    return run


nn.Module._apply = _patched_apply
nn.Module.to = _targeting(nn.Module.to, "to")
nn.Module.to_empty = _targeting(nn.Module.to_empty, "to_empty")
if hasattr(nn.Module, "tpu"):
    nn.Module.tpu = _targeting(nn.Module.tpu, "tpu")
