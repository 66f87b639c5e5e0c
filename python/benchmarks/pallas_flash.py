"""JAX's Pallas flash attention (`jax.experimental.pallas.ops.tpu.flash_attention`) through
`tpuemu.pallas` against the built-in flash kernel of `F.scaled_dot_product_attention`: simulated
device time of one call (forward) and of forward and backward, bf16, causal.

    scripts/python.sh python/benchmarks/pallas_flash.py [B H S D ...] [--block 512]

Shapes default to the four README.md quotes. Device time is `tpuemu.metrics()["device_busy_ns"]`
of the second call (the first lowers and loads the kernels)."""

from __future__ import annotations

import argparse
import functools

import torch
import torch.nn.functional as F

import tpuemu
import tpuemu.pallas


def busy_us(f) -> float:
    f()
    tpuemu.sync()
    tpuemu.reset_metrics()
    f()
    tpuemu.sync()
    return tpuemu.metrics()["device_busy_ns"] / 1e3


def main() -> None:
    from jax.experimental.pallas.ops.tpu import flash_attention as fa  # noqa: PLC0415

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dims", nargs="*", type=int, help="B H S D, repeated")
    p.add_argument("--block", type=int, default=512, help="block_q = block_k (capped at S)")
    a = p.parse_args()
    dims = a.dims or [1, 4, 128, 64, 2, 8, 256, 128, 1, 8, 512, 64, 1, 8, 1024, 128]
    if len(dims) % 4:
        p.error("shapes come as B H S D")
    for b, h, s, d in zip(*[iter(dims)] * 4):
        bq = min(a.block, s)
        blocks = fa.BlockSizes(block_q=bq, block_k_major=bq, block_k=bq, block_b=1,
                               block_q_major_dkv=bq, block_k_major_dkv=bq, block_k_dkv=bq,
                               block_q_dkv=bq, block_k_major_dq=bq, block_k_dq=bq, block_q_dq=bq)
        attn = tpuemu.pallas.custom_jax_kernel(functools.partial(
            fa.flash_attention, causal=True, sm_scale=d**-0.5, block_sizes=blocks))
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device="tpu")
                   for _ in range(3))
        builtin = functools.partial(F.scaled_dot_product_attention, is_causal=True)
        fwd = [busy_us(lambda f=f: f(q, k, v)) for f in (attn, builtin)]
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

        def both(f):
            out = f(qg, kg, vg)
            out.backward(torch.ones_like(out))

        fb = [busy_us(lambda f=f: both(f)) for f in (attn, builtin)]
        print(f"({b}, {h}, {s}, {d}) forward: pallas {fwd[0]:.1f} us, built-in {fwd[1]:.1f} us "
              f"({fwd[0] / fwd[1]:.2f}x); forward+backward: {fb[0]:.1f} us, {fb[1]:.1f} us "
              f"({fb[0] / fb[1]:.2f}x)")


if __name__ == "__main__":
    main()
