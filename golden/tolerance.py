"""Tolerances of the golden cases: float rounding per dtype, and the bounds for products the
emulated matrix unit computes with bf16 operands (see golden/README.md).
"""

from __future__ import annotations

import math
from typing import Any

from record import RawCall, Snap, Unsupported
from settings import MXU_ATTENTION, MXU_BILINEAR, TOLERANCE_EXCEPTIONS


#: torch.testing.assert_close defaults (rtol, atol).
DEFAULT_TOL = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}
#: Unit roundoff of bf16 (8 significant bits, round to nearest even).
BF16_U = 2.0**-8
F32_U = 2.0**-24


def tolerance_for(c: RawCall) -> dict | None:
    """The per-call tolerance exception, or None for the torch.testing default."""
    import torch

    name = c.func.name()
    out_dtype = next(
        (str(o.data.dtype).removeprefix("torch.") for o in c.outputs if isinstance(o, Snap)), None
    )
    if (name, out_dtype) in TOLERANCE_EXCEPTIONS:
        rtol, atol, why = TOLERANCE_EXCEPTIONS[(name, out_dtype)]
        return {"rtol": rtol, "atol": atol, "why": why}
    if out_dtype not in ("float32", "float16", "bfloat16"):
        return None
    if name == "aten::linalg_matrix_exp" and out_dtype == "float32":
        try:
            with torch.no_grad():
                return matrix_exp_tolerance(c)
        except Exception:  # a bound that cannot be computed falls back to the default
            return None
    own = None
    try:
        with torch.no_grad():
            if name in MXU_BILINEAR and out_dtype in ("float32", "float16"):
                own = mxu_tolerance(c, out_dtype)
            elif name in MXU_ATTENTION:
                own = attention_tolerance(c, out_dtype)
    except Exception:  # a bound that cannot be computed falls back to the default
        own = None
    # A model case's call after matrix-unit products: the larger of its own bound and the
    # propagated one (which, for a product, includes its own operands' rounding).
    if c.propagated is not None and (own is None or c.propagated["atol"] > own["atol"]):
        return c.propagated
    return own


def matrix_exp_tolerance(c: RawCall) -> dict | None:
    """A float32 matrix exponential is accurate normwise, not elementwise: scaling and squaring
    loses about ``n u`` of the result's largest entry, and small entries of a matrix whose
    exponential spans orders of magnitude carry that absolute error. The bound is measured on
    the call: twice PyTorch's own float32 result's distance from the float64 exponential, plus
    ``4 n 2^-24 max|e^A|``, plus atol0 (golden/README.md)."""
    import torch

    a = c.originals[0]
    out = next(o.data for o in c.outputs if isinstance(o, Snap))
    if not isinstance(a, torch.Tensor) or a.numel() == 0:
        return None
    exact = torch.linalg.matrix_exp(a.detach().double())
    d = (exact - out.double()).abs().max().item()
    top = exact.abs().max().item()
    n = a.shape[-1]
    atol = 2 * d + 4 * n * F32_U * top + DEFAULT_TOL["float32"][1]
    return {
        "rtol": DEFAULT_TOL["float32"][0],
        "atol": _round(atol),
        "why": "a float32 matrix exponential is accurate normwise: atol is twice PyTorch's own "
        "float32 result's distance from the float64 exponential plus 4*n*2^-24*max|e^A| plus "
        "atol0 (golden/README.md)",
    }


def _round(x: float) -> float:
    """Round a bound up to 3 significant digits so the JSON stays short and stable."""
    if x == 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(abs(x))) - 2
    return math.ceil(x / 10**e) * 10**e if x > 0 else x


def _bf16(t):
    """``t`` rounded to bf16 (round to nearest even), as the MXU reads it, back in float64."""
    import torch

    return t.to(torch.bfloat16).double()


def mxu_tolerance(c: RawCall, out_dtype: str) -> dict | None:
    """The error of one bf16 pass, computed from the inputs: the largest difference between the
    product of the bf16-rounded operands and the exact product (both in float64), plus a bound
    on what f32 accumulation adds (k * 2^-24 * max sum|a||b|). A kernel off by more than the
    effect of rounding its inputs to bf16 fails."""
    import torch

    name = c.func.name()
    li, ri, alpha_name = MXU_BILINEAR[name]
    a, b = c.originals[li], c.originals[ri]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    alpha = 1.0
    if alpha_name is not None:
        for v, arg in zip(c.originals, c.func._schema.arguments):
            if arg.name == alpha_name and v is not None:
                alpha = abs(float(v))
    a64, b64 = a.detach().double(), b.detach().double()
    aa, bb = a64.abs(), b64.abs()

    def product(x, y):
        if name in ("aten::convolution", "aten::_convolution"):
            args = list(c.originals)
            args[0], args[1], args[2] = x, y, None
            return torch.ops.aten.convolution(*args[:9])
        if name in ("aten::dot", "aten::vdot"):
            return (x * y).sum().reshape(1)
        if name == "aten::addbmm":
            return (x @ y).sum(0)
        return x @ y

    if a64.numel() == 0 or b64.numel() == 0:
        return None
    exact, rounded, sums = product(a64, b64), product(_bf16(a64), _bf16(b64)), product(aa, bb)
    if name in ("aten::convolution", "aten::_convolution"):
        k = bb[0].numel()
    elif name in ("aten::dot", "aten::vdot"):
        k = aa.numel()
    elif name == "aten::addbmm":
        k = aa.shape[-1] * aa.shape[0]
    else:
        k = aa.shape[-1]
    d = float((rounded - exact).abs().max()) if exact.numel() else 0.0
    s = float(sums.max()) if sums.numel() else 0.0
    atol = _round(alpha * (d + k * F32_U * s) + DEFAULT_TOL[out_dtype][1])
    return {
        "rtol": DEFAULT_TOL[out_dtype][0],
        "atol": atol,
        "why": "MXU at DEFAULT precision is one bf16 pass: atol is the inputs' bf16 rounding "
        "effect on this product, max|bf16(a)bf16(b)-ab|, plus k*2^-24*max(sum|a||b|) for the f32 "
        "accumulation, plus atol0 (golden/README.md)",
    }


def bf16_matmul_mode():
    """A dispatch mode that rounds the float32/float16 operands of the matrix-unit operators to
    bf16 (and back) before running them: the TPU's DEFAULT precision, on the CPU (the products
    of bf16 values are exact in float32, which accumulates them, as the MXU does)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    def rounded(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.dtype in (torch.float32, torch.float16):
            return a.to(torch.bfloat16).to(a.dtype)
        return a

    class Bf16Matmuls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.name()
            if name in MXU_BILINEAR:
                li, ri, _ = MXU_BILINEAR[name]
                args = tuple(rounded(a) if i in (li, ri) else a for i, a in enumerate(args))
            elif name in MXU_ATTENTION:
                args = tuple(rounded(a) if i < 3 else a for i, a in enumerate(args))
            return func(*args, **kwargs)

    return Bf16Matmuls()


def _float_snaps(outputs: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for o in outputs:
        if isinstance(o, (list, tuple)):
            flat.extend(_float_snaps(list(o)))
        elif isinstance(o, Snap) and o.data.is_floating_point():
            flat.append(o)
    return flat


def propagate_tolerances(exact: list[RawCall], rounded: list[RawCall]) -> None:
    """Gives each call of a model case whose outputs moved when the matrix-unit operands were
    rounded to bf16 (``rounded``: the same calls under ``bf16_matmul_mode``) the tolerance ``atol
    = 2 * max|moved| + atol0`` (``tolerance_for`` keeps a product's own bound when larger)."""
    import torch

    if [c.func for c in exact] != [c.func for c in rounded]:
        raise Unsupported("the model made different calls with bf16-rounded matrix products")
    for c, r in zip(exact, rounded):
        moved, dtype = 0.0, None
        for a, b in zip(_float_snaps(c.outputs), _float_snaps(r.outputs)):
            x, y = a.data.double(), b.data.double()
            if x.shape != y.shape or x.numel() == 0:
                continue
            d = (x - y).abs()
            d = torch.where(torch.isnan(x) & torch.isnan(y), torch.zeros_like(d), d)
            d = torch.where(x == y, torch.zeros_like(d), d)  # equal infinities
            moved = max(moved, float(d.max()))
            dtype = str(a.data.dtype).removeprefix("torch.")
        if moved > 0 and dtype in DEFAULT_TOL:
            rtol, atol0 = DEFAULT_TOL[dtype]
            c.propagated = {
                "rtol": rtol,
                "atol": _round(2 * moved + atol0),
                "why": "model case: the calls before it include matrix-unit products at DEFAULT "
                "precision; atol is twice how far its outputs move when those products' operands "
                "are rounded to bf16 (the model rerun that way), plus atol0 (golden/README.md)",
            }


def attention_tolerance(c: RawCall, out_dtype: str) -> dict | None:
    """Attention's error on the MXU, computed from the inputs: the largest difference between
    attention over bf16-rounded Q, K, V (scale applied before or after the rounding, in float64)
    and exact attention, plus one bf16 rounding of the probabilities in the P.V pass (u * max|V|),
    plus one more for a bf16 output, plus atol0. The logsumexp output's bound is the scores'
    difference under the same rounding."""
    import torch

    q, k, v = (x.detach().double() for x in c.originals[:3])
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0:
        return None
    names = [a.name for a in c.func._schema.arguments]
    scale = c.originals[names.index("scale")] if "scale" in names else None
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    mask = c.originals[names.index("attn_mask")] if "attn_mask" in names else None
    causal = bool(c.originals[names.index("is_causal")]) if "is_causal" in names else False
    gqa = k.shape[-3] != q.shape[-3] if q.dim() >= 3 and k.dim() >= 3 else False

    def attend(qq, kk, vv, prescaled):
        if gqa and q.shape[-3] % kk.shape[-3] == 0:
            rep = q.shape[-3] // kk.shape[-3]
            kk, vv = kk.repeat_interleave(rep, dim=-3), vv.repeat_interleave(rep, dim=-3)
        s = qq @ kk.transpose(-2, -1)
        s = s if prescaled else s * scale
        if causal:
            L, S = s.shape[-2], s.shape[-1]
            keep = torch.ones(L, S, dtype=torch.bool).tril()
            s = s.masked_fill(~keep, float("-inf"))
        if mask is not None:
            m = mask.detach()
            s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m.double()
        lse = torch.logsumexp(s, dim=-1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        return p @ vv, lse

    exact, lse = attend(q * scale, k, v, True)
    d, dl = 0.0, 0.0
    for pre in (True, False):
        qq = _bf16(q * scale) if pre else _bf16(q)
        o, l = attend(qq, _bf16(k), _bf16(v), pre)
        d = max(d, float((o - exact).abs().nan_to_num(0.0).max()))
        dl = max(dl, float((l - lse).abs().nan_to_num(0.0).max()))
    vmax = float(v.abs().max())
    extra = BF16_U if out_dtype == "bfloat16" else 0.0
    atol = d + (BF16_U + extra) * vmax + DEFAULT_TOL[out_dtype][1]
    atol = max(atol, dl + DEFAULT_TOL[out_dtype][1])  # the logsumexp output
    return {
        "rtol": DEFAULT_TOL[out_dtype][0],
        "atol": _round(atol),
        "why": "attention on the MXU: Q.K^T and P.V are bf16 passes; atol is the effect of "
        "rounding Q, K, V to bf16 on this attention, plus one bf16 rounding of P (golden/README.md)",
    }
