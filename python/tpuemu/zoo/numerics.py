"""The CPU reference with a TPU's matmul numerics.

A TPU's matrix unit multiplies bf16 operands and accumulates in f32: a float32 matmul at the
DEFAULT precision (what ``torch`` on a TPU does unless told otherwise, and what tpuemu does by
default: ``tpuemu.set_matmul_precision("default")``) rounds both operands to bf16 once and sums the
products in f32. A CPU float32 run does not round, so the two differ by up to a bf16 rounding
(2^-9 relative) in every product — and, more visibly, wherever a ReLU-like mask or an argmax
depends on the sign of a pre-activation that the rounding moves across zero: measured on the zoo,
OPT, T5 and ResNet (ReLU) gradients differ from plain CPU float32 by 33-43% of the largest
gradient at DEFAULT precision, and by less than 1e-6 at ``"highest"`` precision (6 bf16 passes),
so the difference is the matmul rounding and nothing else.

``TpuMatmulNumerics`` is a ``TorchDispatchMode`` for the CPU reference: it rounds the matrix
operands of every matmul-like aten operator (``mm``, ``bmm``, ``addmm`` (not its bias),
``baddbmm``, ``addbmm``, ``addmv``, ``mv``, ``dot``, ``convolution`` and ``convolution_backward``)
to bf16 and back before the CPU's f32 kernel runs, so the reference computes what the TPU
computes up to the order of f32 additions. Attention is decomposed on the CPU as on the tpu
(``SDPBackend.MATH``: the tpu has no fused attention operator, so PyTorch decomposes it into
``bmm``/``softmax`` for both).
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# operator -> the positional arguments that are matrix operands (rounded to bf16).
_OPERANDS = {
    aten.mm.default: (0, 1),
    aten.bmm.default: (0, 1),
    aten.addmm.default: (1, 2),
    aten.baddbmm.default: (1, 2),
    aten.addbmm.default: (1, 2),
    aten.addmv.default: (1, 2),
    aten.mv.default: (0, 1),
    aten.dot.default: (0, 1),
    aten.convolution.default: (0, 1),
    aten.convolution_backward.default: (0, 1, 2),
}


def _bf16(t):
    if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
        return t.to(torch.bfloat16).to(torch.float32)
    return t


class TpuMatmulNumerics(TorchDispatchMode):
    """Rounds matmul operands to bf16 (f32 accumulation), as a TPU's DEFAULT precision does."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        idx = _OPERANDS.get(func)
        if idx:
            args = tuple(_bf16(a) if i in idx else a for i, a in enumerate(args))
        return func(*args, **kwargs)


@contextlib.contextmanager
def tpu_numerics():
    """The CPU computes as the tpu does at DEFAULT matmul precision (see the module doc)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH), TpuMatmulNumerics():
        yield
