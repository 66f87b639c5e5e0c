"""What a zoo check compares, and how close is close enough.

PROVISIONAL: tolerances being measured.
"""

from __future__ import annotations

import torch

# Normalised error limits (see the module docstring).
LIMITS = {"logits": 2.0**-5, "loss": 2.0**-7, "grad": 2.0**-4, "adamw": 1e-2}


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
