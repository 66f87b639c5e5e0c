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
computes up to the order of f32 additions. ``F.scaled_dot_product_attention`` is computed as the
tpu computes it: where the tpu runs it on its flash-attention kernels (no mask, no dropout,
4-D float32 or bfloat16; the bridge's ``_fused_sdp_choice``), by :class:`_FlashReference`,
which follows the kernels' steps and roundings (weights unnormalised in bf16 per key block of
128, the online softmax's rescaling, the backward from the logsumexp); elsewhere decomposed into
``bmm``/``softmax`` (``SDPBackend.MATH``), as PyTorch decomposes it on the tpu.
"""

from __future__ import annotations

import contextlib
import math

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


def _flash_eligible(q, k, v, attn_mask, dropout_p, enable_gqa):
    """Whether the tpu runs this call on its flash-attention kernels (as the bridge's
    ``_fused_sdp_choice`` decides: no mask, no dropout, 4-D float32/bfloat16, key/value heads
    dividing the query heads)."""
    if attn_mask is not None or dropout_p != 0.0:
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if q.dtype not in (torch.float32, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    hq, hk = q.size(1), k.size(1)
    if hk == 0 or v.size(1) != hk or hq % hk != 0 or (hq != hk and not enable_gqa):
        return False
    return k.size(0) == q.size(0) == v.size(0) and k.size(2) == v.size(2) and k.size(3) == q.size(3)


_KEY_BLOCK = 128


class _FlashReference(torch.autograd.Function):
    """Attention as the tpu's flash kernels compute it (``backend/kernels/src/kernels/attention``),
    written with plain CPU operators in f32 whose matmul operands the enclosing
    :class:`TpuMatmulNumerics` rounds to bf16 (the weights and ``dS`` are first stored in the
    inputs' dtype, as the kernels store them). Forward, per key block of 128: the scores in f32
    times the scale, the running maximum ``m``, the weights ``P = exp(s - m)`` unnormalised (they
    reach the matrix unit as bf16), the running sum ``l`` and the output rescaled as ``m``
    grows; ``O / l`` at the end, ``lse = m + log l``. Backward from ``lse``: ``P`` recomputed,
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P (dP - D)`` with ``D = rowsum(dO O)``,
    ``dQ = scale (dS K)``, ``dK = scale (dS^T Q)``."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        g = q.size(1) // k.size(1)
        kk = k.repeat_interleave(g, dim=1) if g > 1 else k
        vv = v.repeat_interleave(g, dim=1) if g > 1 else v
        L, S = q.size(2), kk.size(2)
        f = torch.float32
        m = torch.full(q.shape[:3] + (1,), float("-inf"), dtype=f)
        l = torch.zeros(q.shape[:3] + (1,), dtype=f)
        o = torch.zeros(q.shape[:3] + (vv.size(3),), dtype=f)
        rows = torch.arange(L).view(L, 1)
        for j0 in range(0, S, _KEY_BLOCK):
            j1 = min(S, j0 + _KEY_BLOCK)
            if is_causal and j0 > L - 1:
                break
            s = torch.matmul(q.to(f), kk[:, :, j0:j1].to(f).transpose(-1, -2)) * scale
            if is_causal:
                cols = torch.arange(j0, j1).view(1, j1 - j0)
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            factor = torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            l = l * factor + p.sum(-1, keepdim=True)
            o = o * factor + torch.matmul(p.to(q.dtype).to(f), vv[:, :, j0:j1].to(f))
            m = m_new
        out = (o / l).to(q.dtype)
        lse = (m + torch.log(l)).squeeze(-1)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.scale = is_causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        g = q.size(1) // k.size(1)
        kk = k.repeat_interleave(g, dim=1) if g > 1 else k
        vv = v.repeat_interleave(g, dim=1) if g > 1 else v
        f = torch.float32
        s = torch.matmul(q.to(f), kk.to(f).transpose(-1, -2)) * ctx.scale
        if ctx.is_causal:
            L, S = q.size(2), kk.size(2)
            s = s.masked_fill(torch.arange(S).view(1, S) > torch.arange(L).view(L, 1), float("-inf"))
        p = torch.exp(s - lse.unsqueeze(-1))
        dv = torch.matmul(p.to(q.dtype).to(f).transpose(-1, -2), dout.to(f))
        dp = torch.matmul(dout.to(f), vv.to(f).transpose(-1, -2))
        d = (dout.to(f) * out.to(f)).sum(-1, keepdim=True)
        ds = p * (dp - d)
        dq = torch.matmul(ds.to(q.dtype).to(f), kk.to(f)) * ctx.scale
        dk = torch.matmul(ds.to(q.dtype).to(f).transpose(-1, -2), q.to(f)) * ctx.scale
        if g > 1:
            shape = (k.size(0), k.size(1), g) + dk.shape[2:]
            dk = dk.view(shape).sum(2)
            dv = dv.view((v.size(0), v.size(1), g) + dv.shape[2:]).sum(2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _sdpa_as_on_tpu(original):
    """``F.scaled_dot_product_attention`` for the reference: the flash kernels' numerics where
    the tpu takes them, PyTorch's math path (as the tpu runs it) elsewhere."""

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        if _flash_eligible(query, key, value, attn_mask, dropout_p, enable_gqa):
            sc = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
            return _FlashReference.apply(query, key, value, is_causal, sc)
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    return sdpa


@contextlib.contextmanager
def tpu_numerics():
    """The CPU computes as the tpu does at DEFAULT matmul precision (see the module doc)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _sdpa_as_on_tpu(original)
    try:
        with sdpa_kernel(SDPBackend.MATH), TpuMatmulNumerics():
            yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
