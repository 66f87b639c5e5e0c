"""What a zoo check compares, and how close is close enough.

Compared, for one training step: the logits, the loss, every parameter's gradient and every
parameter after one ``torch.optim.AdamW`` step. The tpu runs at the TPU's DEFAULT matmul
precision (one bf16 pass: operands rounded to bf16, products summed in f32); the CPU reference
computes with the same matmul numerics (``tpuemu.zoo.numerics``), so what remains between the
two is the order of f32 additions (about ``n * 2^-24`` relative for a sum of ``n`` terms) and,
through it, an occasional operand that lands on the other side of a bf16 rounding boundary (one
term off by up to ``2^-8`` of its size). Errors are normalised by the largest magnitude of the
compared tensor (for gradients, at least 1% of the model's largest gradient, so that a
parameter whose gradient is almost zero is not judged on noise). The limits:

- logits: ``2^-8`` (one bf16 rounding of the largest logit);
- loss: ``2^-10`` relative (a mean over tokens averages the per-token errors down);
- gradients: ``2^-5`` (a backward pass chains every layer's rounding: four bf16 roundings of
  the largest gradient);
- AdamW: the updated weights against AdamW applied on the CPU to the tpu's own gradients, in
  units of the learning rate, ``1e-2`` (the optimizer's arithmetic is elementwise f32).

Measured on the 29 architectures (``python -m tpuemu.zoo``): logits at most 6.3e-5, loss 1e-7,
gradients 6.9e-3 (Mixtral's router: the top-k choice amplifies roundings), AdamW 1.5e-5. Against
plain CPU float32 instead, ReLU models (OPT, T5, ResNet) differ by 33-43% of their largest
gradient: a pre-activation that the bf16 rounding moves across zero flips the ReLU's mask; at
``tpuemu.set_matmul_precision("highest")`` against plain float32 the same models agree to 1e-6.
"""

from __future__ import annotations

import torch

# Normalised error limits (see the module docstring).
LIMITS = {"logits": 2.0**-8, "loss": 2.0**-10, "grad": 2.0**-5, "adamw": 1e-2}


def _norm_err(got: torch.Tensor, want: torch.Tensor, floor: float = 0.0) -> float:
    got = got.float()
    want = want.float()
    if got.shape != want.shape:
        return float("inf")
    if not torch.isfinite(got).all():
        return float("inf")
    scale = max(float(want.abs().max()) if want.numel() else 0.0, floor, 1e-30)
    return float((got - want).abs().max()) / scale if want.numel() else 0.0


def compare(ref, logits, loss, grads, updated, expected_updated) -> dict:
    """{kind: (error, tolerance, where)} for the logits, the loss, every gradient (the worst) and
    the updated weights against AdamW applied on the CPU to the tpu's gradients (the worst)."""
    from .check import LR

    out = {
        "logits": (_norm_err(logits, ref.logits), LIMITS["logits"], ""),
        "loss": (abs(float(loss) - float(ref.loss)) / max(abs(float(ref.loss)), 1e-30),
                 LIMITS["loss"], ""),
    }
    floor = 1e-2 * max((float(g.abs().max()) for g in ref.grads.values() if g.numel()), default=0.0)
    worst = (0.0, "")
    missing = sorted(set(ref.grads) ^ set(grads))
    if missing:
        worst = (float("inf"), f"gradient present on one side only: {missing[0]}")
    for n, g in ref.grads.items():
        if n in grads:
            e = _norm_err(grads[n], g, floor)
            if e > worst[0]:
                worst = (e, n)
    out["grad"] = (worst[0], LIMITS["grad"], worst[1])
    worst = (0.0, "")
    for n, w in expected_updated.items():
        e = float((updated[n].float() - w.float()).abs().max()) / LR if w.numel() else 0.0
        if e > worst[0]:
            worst = (e, n)
    out["adamw"] = (worst[0], LIMITS["adamw"], worst[1])
    return out
