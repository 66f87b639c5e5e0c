"""JAX's Pallas paged attention (`jax.experimental.pallas.ops.tpu.paged_attention`) through
`tpuemu.pallas`: simulated device time of one decode step, against the HBM roofline of the K
and V it reads.

    scripts/python.sh python/benchmarks/pallas_paged.py [--batch 8] [--heads 32] [--kv-heads 8]
        [--head-dim 128] [--length 1024] [--page 16] [--pages-per-block 4 8 16 32]

Defaults: Llama-3.1-8B's attention (32 query heads, 8 KV heads of 128), bf16 pages of 16
tokens, 8 sequences of 1,024 tokens. Device time is `tpuemu.metrics()["device_busy_ns"]` of
the second call (the first lowers and loads the kernel)."""

from __future__ import annotations

import argparse
import functools

import torch

import tpuemu
import tpuemu.pallas
from pallas_flash import busy_us  # the sibling benchmark's measurement (this directory)


def main() -> None:
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention  # noqa: PLC0415

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--length", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--page", type=int, default=16, help="tokens per page")
    p.add_argument("--pages-per-block", type=int, nargs="+", default=[4, 8, 16, 32])
    a = p.parse_args()
    b, h, hk, d = a.batch, a.heads, a.kv_heads, a.head_dim
    per_seq = a.length // a.page
    pages = b * per_seq
    q = torch.randn(b, h, d, dtype=torch.bfloat16, device="tpu")
    k_pages, v_pages = (torch.randn(hk, pages, a.page, d, dtype=torch.bfloat16, device="tpu")
                        for _ in range(2))
    lengths = torch.full((b,), a.length, dtype=torch.int32, device="tpu")
    table = torch.randperm(pages, dtype=torch.int32).reshape(b, per_seq).to("tpu")
    kv_bytes = 2 * b * a.length * hk * d * 2
    hbm = tpuemu.chip_info()["hbm_bytes_per_s"]
    for ppb in a.pages_per_block:
        if per_seq % ppb:
            continue
        attn = tpuemu.pallas.custom_jax_kernel(
            functools.partial(paged_attention, pages_per_compute_block=ppb))
        t = busy_us(lambda attn=attn: attn(q, k_pages, v_pages, lengths, table))
        print(f"{ppb} pages per block: {t:.1f} us; K and V {kv_bytes / 1e6:.1f} MB, HBM "
              f"roofline {kv_bytes / hbm * 1e6:.1f} us ({t / (kv_bytes / hbm * 1e6):.1f}x)")


if __name__ == "__main__":
    main()
