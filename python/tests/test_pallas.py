"""Pallas kernels called from PyTorch (`tpuemu.pallas.custom_jax_kernel`): each kernel runs on the
emulated chip in every eager mode and agrees with the same kernel run by JAX itself on the CPU
(`interpret=True`, an independent reference) and with PyTorch on the CPU; what Mosaic refuses is
refused with the kernel's name."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch

import tpuemu

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

import tpuemu.pallas  # noqa: E402

# ---- kernels (the Pallas TPU guide's, and a few more) -----------------------------------------


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y, interpret=False):
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))] * 2,
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=interpret,
    )(x, y)


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(x, y, bm=128, bk=128, bn=128, interpret=False):
    m, k = x.shape
    _, n = y.shape
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=interpret,
    )(x, y)


def softmax_kernel(x_ref, b_ref, o_ref):
    # Row softmax of x + bias: reductions along lanes, a (1, n) block broadcast down the rows.
    x = x_ref[...].astype(jnp.float32) + b_ref[...]
    m = jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(x - m)
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def softmax(x, b, interpret=False):
    r, n = x.shape
    return pl.pallas_call(
        softmax_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(r // 16,),
        in_specs=[pl.BlockSpec((16, n), lambda i: (i, 0)), pl.BlockSpec((1, n), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((16, n), lambda i: (i, 0)),
        interpret=interpret,
    )(x, b)


def loop_kernel(x_ref, o_ref):
    # fori_loop over row slices with pl.ds, a where, integer iota and a column sum.
    def body(i, acc):
        rows = x_ref[pl.ds(i * 8, 8), :]
        return acc + jnp.where(rows > 0, rows, 0.5 * rows)

    acc = jax.lax.fori_loop(0, x_ref.shape[0] // 8, body, jnp.zeros((8, 128), jnp.float32))
    lane = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 1)
    o_ref[...] = acc * (lane % 3).astype(jnp.float32) + jnp.sum(acc, axis=0, keepdims=True)


def loop(x, interpret=False):
    return pl.pallas_call(
        loop_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid=(1,),
        in_specs=[pl.BlockSpec(x.shape, lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        interpret=interpret,
    )(x)


def double_buffered_copy_kernel(x_hbm, o_hbm, buf, sems):
    # The Pallas guide's manual pipelining: rows copied in chunks of 8 into two VMEM buffers
    # with DMA semaphores, the next chunk's copy started before this one's is used.
    n = x_hbm.shape[0] // 8

    def copy_in(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * 8, 8)], buf.at[slot], sems.at[0, slot])

    copy_in(0, 0).start()

    def body(i, carry):
        slot = i % 2

        @pl.when(i + 1 < n)
        def _():
            copy_in(i + 1, 1 - slot).start()

        copy_in(i, slot).wait()
        buf[slot] = buf[slot] * 2.0 + 1.0
        out = pltpu.make_async_copy(buf.at[slot], o_hbm.at[pl.ds(i * 8, 8)], sems.at[1, slot])
        out.start()
        out.wait()
        return carry

    jax.lax.fori_loop(0, n, body, 0)


def double_buffered_copy(x, interpret=False):
    return pl.pallas_call(
        double_buffered_copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((2, 8, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA((2, 2))],
        interpret=interpret,
    )(x)


def prefetch_kernel(s_ref, x_ref, o_ref, total_ref):
    # Scalar prefetch drives the kernel: block b copies `s[b]` chunks of 8 rows (a loop whose
    # trip count is data, slices at positions computed from its counter), a block with none
    # writes the running total kept in SMEM scratch across grid steps (a branch on data).
    b = pl.program_id(0)
    n = s_ref[b]

    @pl.when(b == 0)
    def _():
        total_ref[0] = 0

    o_ref[...] = jnp.zeros_like(o_ref)

    def body(i, c):
        o_ref[pl.ds(i * 8, 8), :] = x_ref[pl.ds(i * 8, 8), :] * 2 + c.astype(jnp.float32)
        return c + 1

    jax.lax.fori_loop(0, n, body, 0)
    total_ref[0] = total_ref[0] + n

    @pl.when(n == 0)
    def _():
        o_ref[...] = jnp.full_like(o_ref, -1.0) + total_ref[0].astype(jnp.float32)


def prefetch(s, x, interpret=False):
    return pl.pallas_call(
        prefetch_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(x.shape[0] // 64,),
            in_specs=[pl.BlockSpec((64, 128), lambda i, s: (i, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i, s: (i, 0)),
            scratch_shapes=[pltpu.SMEM((1,), jnp.int32)],
        ),
        interpret=interpret,
    )(s, x)


def _reference(fn, *xs, **kw):
    """The same kernel run by JAX on the CPU (`interpret=True`)."""
    arrays = [jnp.asarray(x.float().numpy()).astype(_jdt(x.dtype)) for x in xs]
    out = fn(*arrays, interpret=True, **kw)
    return torch.from_numpy(np.array(out.astype(jnp.float32)))


def _jdt(dt):
    return {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16}[dt]


# ---- values ----------------------------------------------------------------------------------


def test_elementwise_add_matches_jax_and_cpu(mode):
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    tpuemu.reset_metrics()
    got = tpuemu.pallas.custom_jax_kernel(add)(x.to("tpu"), y.to("tpu")).cpu()
    assert torch.equal(got, x + y)
    assert torch.equal(got, _reference(add, x, y))
    ops = tpuemu.metrics()["ops_by_name"]
    assert [n for n in ops if n.startswith("tpuemu_pallas::add_kernel_")], ops
    assert not tpuemu.metrics()["cpu_fallbacks"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_blocked_matmul_accumulates_over_k_in_vmem_scratch(mode, dtype):
    torch.manual_seed(0)
    a, b = torch.randn(256, 384).to(dtype), torch.randn(384, 256).to(dtype)
    k = tpuemu.pallas.custom_jax_kernel(matmul, static_argnums=(2, 3, 4))
    got = k(a.to("tpu"), b.to("tpu"), 128, 128, 128).cpu()
    want = _reference(matmul, a, b).to(dtype)
    # Sums over K in another order than JAX on the CPU: a rounding of the result's dtype.
    tol = dict(rtol=1.6e-2, atol=1e-1) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got.float(), (a.float() @ b.float()), **tol)


def products_kernel(a_ref, b_ref, c_ref, o_ref, acc_ref):
    # The lowering reorders this body (the second product is issued with the first, the first
    # store waits until the next read of its reference) and shares the matrix units by K chunks
    # and by rows: the values must not change.
    s = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    acc_ref[...] = s
    e = jnp.exp(s * 0.01)
    t = acc_ref[...] * 2.0
    d = jnp.dot(c_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    acc_ref[...] = t + d
    o_ref[...] = acc_ref[...] + e


def products(a, b, c, interpret=False):
    m, n = a.shape[0], b.shape[1]
    return pl.pallas_call(
        products_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        scratch_shapes=[pltpu.VMEM((m, n), jnp.float32)],
        interpret=interpret,
    )(a, b, c)


# (M, K, N): K in two chunks and M in two shares of 104 and 96 rows; M in four shares of 136
# rows (popped 128 + 8 at a time); two column tiles and M in two shares.
@pytest.mark.parametrize("mkn", [(200, 256, 128), (520, 128, 128), (64, 128, 256)])
def test_products_shared_by_k_and_rows_and_reordered_keep_their_values(mode, mkn):
    m, k, n = mkn
    torch.manual_seed(4)
    a, c = (torch.randn(m, k).to(torch.bfloat16) for _ in range(2))
    b = torch.randn(k, n).to(torch.bfloat16)
    got = tpuemu.pallas.custom_jax_kernel(products)(a.to("tpu"), b.to("tpu"), c.to("tpu")).cpu()
    s, d = a.double() @ b.double(), c.double() @ b.double()
    want = (2 * s + d + torch.exp(s * 0.01)).float()
    # bf16 products are exact; only the float32 sums' order differs.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got, _reference(products, a, b, c), rtol=1e-5, atol=1e-4)


def test_row_softmax_with_broadcast_bias(mode):
    torch.manual_seed(1)
    x, bias = torch.randn(64, 256), torch.randn(1, 256)
    got = tpuemu.pallas.custom_jax_kernel(softmax)(x.to("tpu"), bias.to("tpu")).cpu()
    torch.testing.assert_close(got, _reference(softmax, x, bias), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, torch.softmax(x + bias, dim=-1), rtol=1e-5, atol=1e-6)


def test_fori_loop_slices_where_and_iota(mode):
    torch.manual_seed(2)
    x = torch.randn(32, 128)
    got = tpuemu.pallas.custom_jax_kernel(loop)(x.to("tpu")).cpu()
    torch.testing.assert_close(got, _reference(loop, x), rtol=1e-6, atol=1e-5)


def test_manually_double_buffered_copy_with_dma_semaphores(mode):
    torch.manual_seed(3)
    x = torch.randn(64, 256)
    tpuemu.reset_metrics()
    got = tpuemu.pallas.custom_jax_kernel(double_buffered_copy)(x.to("tpu")).cpu()
    assert torch.equal(got, x * 2.0 + 1.0)
    assert torch.equal(got, _reference(double_buffered_copy, x))
    # Its own copies only: 64 KiB in and 64 KiB out.
    assert tpuemu.metrics()["hbm_bytes"] == 2 * 64 * 256 * 4


FLASH_SHAPES = [((1, 2, 256, 64), False), ((2, 4, 128, 128), True)]


@pytest.mark.parametrize("shape,causal", FLASH_SHAPES)
def test_jax_flash_attention_forward_and_backward(shape, causal):
    # `jax.experimental.pallas.ops.tpu.flash_attention` itself: its forward kernel, and through
    # PyTorch's autograd its dq and dkv kernels (its custom_vjp), against PyTorch's attention on
    # the CPU.
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    b, h, s, d = shape
    blocks = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1,
                           block_q_major_dkv=128, block_k_major_dkv=128, block_k_dkv=128,
                           block_q_dkv=128, block_k_major_dq=128, block_k_dq=128, block_q_dq=128)
    attn = tpuemu.pallas.custom_jax_kernel(
        functools.partial(fa.flash_attention, causal=causal, sm_scale=d**-0.5, block_sizes=blocks))
    torch.manual_seed(4)
    q, k, v = (torch.randn(shape) for _ in range(3))
    qt, kt, vt = (t.to("tpu").requires_grad_() for t in (q, k, v))
    tpuemu.reset_metrics()
    out = attn(qt, kt, vt)
    (out * out).sum().backward()
    ops = tpuemu.metrics()["ops_by_name"]
    for kernel in ("_flash_attention_kernel", "_flash_attention_dq_kernel",
                   "_flash_attention_dkv_kernel"):
        assert any(kernel + "_" in n for n in ops), (kernel, ops)
    assert not tpuemu.metrics()["cpu_fallbacks"]
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(qc, kc, vc, is_causal=causal)
    (want * want).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    for name, got, w in zip("qkv", (qt, kt, vt), (qc, kc, vc)):
        torch.testing.assert_close(got.grad.cpu(), w.grad, rtol=1e-3, atol=1e-3, msg=name)


def test_scalar_prefetch_drives_loops_branches_and_slices(mode):
    torch.manual_seed(5)
    s, x = torch.tensor([3, 0, 8, 1], dtype=torch.int32), torch.randn(256, 128)
    got = tpuemu.pallas.custom_jax_kernel(prefetch)(s.to("tpu"), x.to("tpu")).cpu()
    want = torch.zeros_like(x)
    total = 0
    for b, n in enumerate(s.tolist()):
        total += n
        block = want[b * 64:(b + 1) * 64]
        for i in range(n):
            block[i * 8:(i + 1) * 8] = x[b * 64 + i * 8:b * 64 + (i + 1) * 8] * 2 + i
        if n == 0:
            block[:] = total - 1.0
    assert torch.equal(got, want)
    jref = prefetch(jnp.asarray(s.numpy()), jnp.asarray(x.numpy()), interpret=True)
    assert torch.equal(got, torch.from_numpy(np.array(jref)))


def carry_kernel(n_ref, x_ref, y_ref, o_ref, p_ref):
    # A loop whose trip count is data, carrying arrays: a sum weighted by the counter, and a
    # pair that swaps every iteration (a, b) -> (b, a + b).
    x = x_ref[...]

    def body(i, c):
        acc, a, b = c
        return acc + x * i.astype(jnp.float32), b, a + b

    acc, a, b = jax.lax.fori_loop(0, n_ref[0], body, (jnp.zeros_like(x), x, y_ref[...]))
    o_ref[...] = acc
    p_ref[...] = a * 10.0 + b


def carry(n, x, y, interpret=False):
    spec = pl.BlockSpec((8, 128), lambda i, n: (0, 0))
    return pl.pallas_call(
        carry_kernel,
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype)] * 2,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,), in_specs=[spec, spec], out_specs=[spec, spec]),
        interpret=interpret,
    )(n, x, y)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_a_loop_bounded_by_data_carries_arrays(n):
    torch.manual_seed(10)
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    s = torch.tensor([n], dtype=torch.int32)
    got = tpuemu.pallas.custom_jax_kernel(carry)(s.to("tpu"), x.to("tpu"), y.to("tpu"))
    want = carry(*(jnp.asarray(t.numpy()) for t in (s, x, y)), interpret=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), torch.from_numpy(np.array(w)), rtol=1e-6, atol=1e-5)

def _paged_reference(q, k_pages, v_pages, lengths, page_indices):
    """Attention of each sequence's query over its first `length` positions, gathered from its
    pages (the paged kernel applies no scale), in float32 on the CPU."""
    b, hq, d = q.shape
    hk = k_pages.shape[0]
    g = hq // hk
    out = torch.zeros(b, hq, d)
    for i in range(b):
        n = int(lengths[i])
        for h in range(hk):
            k = k_pages[h, page_indices[i]].reshape(-1, d)[:n].float()
            v = v_pages[h, page_indices[i]].reshape(-1, d)[:n].float()
            s = q[i, h * g:(h + 1) * g].float() @ k.T
            out[i, h * g:(h + 1) * g] = torch.softmax(s, -1) @ v
    return out


# (q heads, kv heads, pages per compute block): 8 query heads per kv head take the kernel's
# bf16 path, 4 its float32 one (q reshaped to (B, H, 1, D)).
PAGED = [(16, 2, 2), (8, 2, 4)]


@pytest.mark.parametrize("hq,hk,per_block", PAGED)
def test_jax_paged_attention_decode_step(mode, hq, hk, per_block):
    # `jax.experimental.pallas.ops.tpu.paged_attention` itself: page tables and lengths
    # prefetched into SMEM, a loop over each sequence's blocks whose trip count is its length,
    # the pages of the next block copied (at addresses read from the page table, into the
    # buffer and on the semaphore an SMEM scalar picks) while this one computes; a length of 0
    # is skipped by the prefetch logic's own `while` loop.
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    torch.manual_seed(6)
    b, d, page, pages_per_seq, pages = 4, 128, 16, 8, 32
    q = torch.randn(b, hq, d).to(torch.bfloat16)
    k_pages, v_pages = (torch.randn(hk, pages, page, d).to(torch.bfloat16) for _ in range(2))
    lengths = torch.tensor([37, 0, 128, 5], dtype=torch.int32)
    table = torch.stack([torch.randperm(pages)[:pages_per_seq] for _ in range(b)]).int()
    attn = tpuemu.pallas.custom_jax_kernel(
        functools.partial(paged_attention, pages_per_compute_block=per_block))
    tpuemu.reset_metrics()
    got = attn(*(t.to("tpu") for t in (q, k_pages, v_pages, lengths, table))).cpu()
    assert any("paged_flash_attention_kernel" in n for n in tpuemu.metrics()["ops_by_name"])
    assert not tpuemu.metrics()["cpu_fallbacks"]
    want = _paged_reference(q, k_pages, v_pages, lengths, table)
    torch.testing.assert_close(got.float(), want, rtol=1.6e-2, atol=2e-2)
    # A length of 0 leaves the kernel's zero initialisation.
    assert torch.equal(got[1], torch.zeros_like(got[1]))


def segment_sum_kernel(src_ref, dst_ref, x_ref, o_ref):
    # Blocks chosen by data, both ways: step i reads block src[i] of x and adds it into block
    # dst[i] of the output, which stays in VMEM while consecutive steps add into it (a grouped
    # reduction, as MoE kernels route tokens to experts).
    i = pl.program_id(0)
    first = jnp.logical_or(i == 0, dst_ref[jnp.maximum(i - 1, 0)] != dst_ref[i])

    @pl.when(first)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def segment_sum(src, dst, x, groups, interpret=False):
    return pl.pallas_call(
        segment_sum_kernel,
        out_shape=jax.ShapeDtypeStruct((groups * 8, x.shape[1]), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(src.shape[0],),
            in_specs=[pl.BlockSpec((8, 128), lambda i, s, d: (s[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, s, d: (d[i], 0)),
        ),
        interpret=interpret,
    )(src, dst, x)


def test_blocks_chosen_by_scalar_prefetch_gather_and_accumulate(mode):
    torch.manual_seed(7)
    x = torch.randn(6 * 8, 128)
    src = torch.tensor([5, 0, 0, 3, 1, 4, 2], dtype=torch.int32)
    dst = torch.tensor([0, 0, 2, 2, 2, 1, 3], dtype=torch.int32)
    k = tpuemu.pallas.custom_jax_kernel(segment_sum, static_argnums=(3,))
    got = k(src.to("tpu"), dst.to("tpu"), x.to("tpu"), 4).cpu()
    want = torch.zeros(4 * 8, 128)
    for s_, d_ in zip(src.tolist(), dst.tolist()):
        want[d_ * 8:(d_ + 1) * 8] += x[s_ * 8:(s_ + 1) * 8]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    jref = segment_sum(*(jnp.asarray(t.numpy()) for t in (src, dst, x)), 4, interpret=True)
    assert torch.equal(got, torch.from_numpy(np.array(jref)))


def test_jax_splash_attention_forward_and_backward():
    # `jax.experimental.pallas.ops.tpu.splash_attention` itself, one head causal and one with a
    # local window: block masks and the next block's index prefetched into SMEM (int8 and
    # int32 tables), blocks of K and V chosen by them, partial mask blocks applied, and its
    # dq and dkv kernels through PyTorch's autograd; against PyTorch's attention with the
    # dense mask on the CPU. The backward's `di` is a float32 einsum outside the kernels: run
    # at "highest" precision here (a TPU's default is one bf16 pass).
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    h, s, d = 2, 512, 128
    masks = [sm.CausalMask((s, s)), sm.LocalMask((s, s), window_size=(128, 0), offset=0)]
    blocks = sk.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128, block_q_dkv=128,
                           block_kv_dkv=128, block_kv_dkv_compute=128, block_q_dq=128,
                           block_kv_dq=128)
    splash = sk.make_splash_mha(sm.MultiHeadMask(masks), head_shards=1, q_seq_shards=1,
                                block_sizes=blocks)
    attn = tpuemu.pallas.custom_jax_kernel(lambda q, k, v: splash(q, k, v))
    torch.manual_seed(8)
    q, k, v = (torch.randn(h, s, d) for _ in range(3))
    qt, kt, vt = (t.to("tpu").requires_grad_() for t in (q, k, v))
    before = tpuemu.matmul_precision()
    tpuemu.set_matmul_precision("highest")
    try:
        tpuemu.reset_metrics()
        out = attn(qt, kt, vt)
        (out * out).sum().backward()
    finally:
        tpuemu.set_matmul_precision(before)
    ops = tpuemu.metrics()["ops_by_name"]
    for kernel in ("splash_mha_fwd", "splash_mha_dq", "splash_mha_dkv"):
        assert any(kernel in n for n in ops), (kernel, ops)
    assert not tpuemu.metrics()["cpu_fallbacks"]
    dense = torch.stack([torch.from_numpy(np.array(m[:, :])) for m in masks])
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(qc, kc, vc, attn_mask=dense, scale=1.0)
    (want * want).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    for name, got, w in zip("qkv", (qt, kt, vt), (qc, kc, vc)):
        torch.testing.assert_close(got.grad.cpu(), w.grad, rtol=1e-3, atol=2e-2, msg=name)


def int_kernel(x_ref, y_ref, o_ref):
    x, y = x_ref[...], y_ref[...]
    # XLA's integer semantics: x // 0 = -1, x % 0 = x, MIN // -1 = MIN, shifts past 31.
    o_ref[...] = (jax.lax.div(x, y) + 3 * jax.lax.rem(x, y)
                  + jax.lax.shift_left(x, y & 63) + jax.lax.shift_right_arithmetic(x, y & 63))


def int_ops(x, y, interpret=False):
    # Blocks along the rows picked by `i // 2`: an index map that calls jnp's floor division.
    return pl.pallas_call(
        int_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2 * (x.shape[0] // 8),),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i // 2, 0))] * 2,
        out_specs=pl.BlockSpec((8, 128), lambda i: (i // 2, 0)),
        interpret=interpret,
    )(x, y)


def test_integer_division_and_shifts_as_xla():
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-2**31, 2**31 - 1, (16, 128), generator=g, dtype=torch.int64)
    y = torch.randint(-40, 40, (16, 128), generator=g, dtype=torch.int64)
    x[0, :4] = -2**31
    y[0, :4] = torch.tensor([-1, 0, 1, 33])
    x, y = x.to(torch.int32), y.to(torch.int32)
    got = tpuemu.pallas.custom_jax_kernel(int_ops)(x.to("tpu"), y.to("tpu")).cpu()
    want = torch.from_numpy(np.asarray(int_ops(jnp.asarray(x.numpy()), jnp.asarray(y.numpy()),
                                                interpret=True)))
    assert torch.equal(got, want)


def test_a_slice_of_a_read_is_kept_from_a_later_store():
    def kern(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...]
        top = s_ref[...][:8]
        s_ref[...] = jnp.zeros_like(s_ref)
        o_ref[...] = top + s_ref[:8, :]

    def f(x, interpret=False):
        return pl.pallas_call(kern, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(1,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                              scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32)],
                              interpret=interpret)(x)

    x = torch.randn(16, 128)
    got = tpuemu.pallas.custom_jax_kernel(f)(x.to("tpu")).cpu()
    assert torch.equal(got, x[:8])


def div_by_scalar_kernel(n_ref, x_ref, o_ref):
    x, n = x_ref[...], n_ref[0]
    o_ref[...] = x // n + (x >> n_ref[1]) + x % n


def div_by_scalar(n, x, interpret=False):
    return pl.pallas_call(
        div_by_scalar_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, n: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, n: (0, 0)),
        ),
        interpret=interpret,
    )(n, x)


@pytest.mark.parametrize("n", [[7, 3], [-3, 40], [0, 1]])
def test_arrays_divided_and_shifted_by_a_prefetched_scalar_as_xla(n):
    # The divisor and the shift are only known while running (XLA: x // 0 = -1, x % 0 = x,
    # a shift by 32 or more shifts everything out).
    torch.manual_seed(9)
    x = torch.randint(-1000, 1000, (8, 128), dtype=torch.int32)
    s = torch.tensor(n, dtype=torch.int32)
    got = tpuemu.pallas.custom_jax_kernel(div_by_scalar)(s.to("tpu"), x.to("tpu")).cpu()
    want = div_by_scalar(jnp.asarray(s.numpy()), jnp.asarray(x.numpy()), interpret=True)
    assert torch.equal(got, torch.from_numpy(np.array(want)))


def test_an_iota_of_one_row_broadcast_to_many():
    def kernel(x_ref, o_ref):
        rows = jax.lax.broadcasted_iota(jnp.int32, (1, 128), 0)
        o_ref[...] = (rows + jnp.zeros((8, 128), jnp.int32)).astype(jnp.float32) + x_ref[...]

    def f(x, interpret=False):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)

    x = torch.randn(8, 128)
    got = tpuemu.pallas.custom_jax_kernel(f)(x.to("tpu")).cpu()
    assert torch.equal(got, x)


def test_backward_keeps_boolean_residuals_and_results_are_not_views():
    # JAX saves `x > 0` (a bool array) for the backward of `where`: the residuals of any dtype
    # go from the forward kernel to the backward one.
    def f(x, idx):
        return jnp.where(idx > 1, x * 2.0, -x), jnp.broadcast_to(x, (2, *x.shape))

    x, idx = torch.randn(8, 128), torch.randint(0, 4, (8, 128), dtype=torch.int32)
    xt = x.to("tpu").requires_grad_()
    out, wide = tpuemu.pallas.custom_jax_kernel(f)(xt, idx.to("tpu"))
    out.sum().backward()
    assert torch.equal(xt.grad.cpu(), torch.where(idx > 1, 2.0, -1.0))
    assert not wide._is_view()
    assert torch.equal(wide.cpu(), x.expand(2, 8, 128))

def test_jnp_around_the_kernel_runs_as_backend_operators():
    @tpuemu.pallas.custom_jax_kernel
    def f(x, y):
        return add(x * 2.0, y) - 1.0

    x, y = torch.randn(16, 128), torch.randn(16, 128)
    tpuemu.reset_metrics()
    got = f(x.to("tpu"), y.to("tpu")).cpu()
    torch.testing.assert_close(got, x * 2 + y - 1)
    ops = tpuemu.metrics()["ops_by_name"]
    assert ops.get("aten::mul.Tensor", 0) + ops.get("aten::mul.Scalar", 0) >= 1, ops


def test_jnp_around_the_kernel_is_fused_as_one_computation():
    # TorchTPU jits the function as one XLA computation: in Strict mode its jnp parts are fused
    # (the product and the sum in one kernel after `add`'s); Debug stays one operator at a time.
    @tpuemu.pallas.custom_jax_kernel
    def f(x, y):
        return (add(x, y) * y).sum(-1)

    x, y = torch.randn(16, 128), torch.randn(16, 128)
    launched = {}
    for m in ("strict", "debug"):
        with tpuemu.mode_guard(m):
            tpuemu.reset_metrics()
            got = f(x.to("tpu"), y.to("tpu"))
            assert tpuemu.mode() == m
            torch.testing.assert_close(got.cpu(), ((x + y) * y).sum(-1))
            launched[m] = tpuemu.metrics()["kernels_launched"]
    assert launched == {"strict": 2, "debug": 3}


def test_the_kernel_is_timed_and_traced_under_its_name(tmp_path):
    x = torch.randn(256, 128, device="tpu")
    k = tpuemu.pallas.custom_jax_kernel(add)
    k(x, x)
    tpuemu.sync()
    with tpuemu.trace(tmp_path / "t.json"):
        k(x, x)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "add_kernel" in e["name"]]
    assert kernels, [e["name"] for e in events if e.get("cat") == "kernel"]
    # 256 x 128 float32 in, twice, and out: 384 KiB over HBM at most 0.82 TB/s (v5e) takes at
    # least 0.48 us; the kernel cannot be faster than its bytes.
    assert kernels[0]["dur"] >= 3 * 256 * 128 * 4 / 0.82e12 * 1e6


def test_compiled_without_graph_break():
    k = tpuemu.pallas.custom_jax_kernel(add)

    def f(x, y):
        return k(x, y) * 3.0

    x, y = torch.randn(32, 128), torch.randn(32, 128)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(x.to("tpu"), y.to("tpu"))
    assert explained.graph_break_count == 0, explained.break_reasons
    import warnings

    tpuemu.reset_metrics()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(f, backend="tpu")(x.to("tpu"), y.to("tpu")).cpu()
    torch.testing.assert_close(got, (x + y) * 3.0)
    # The graph around the kernel compiles (the kernel runs as its own program between the
    # compiled parts); nothing of it falls back to eager operators.
    assert not [w for w in caught if "runs eagerly" in str(w.message)], [
        str(w.message) for w in caught]
    assert tpuemu.metrics()["graph_compiles"], tpuemu.metrics()["graph_compiles"]


# ---- what Mosaic refuses -----------------------------------------------------------------------


def test_block_breaking_the_tiling_is_refused_with_the_kernel_name():
    def bad(x, y):
        return pl.pallas_call(
            add_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 100), lambda i: (i, 0))] * 2,
            out_specs=pl.BlockSpec((8, 100), lambda i: (i, 0)),
        )(x, y)

    x = torch.randn(16, 200, device="tpu")
    with pytest.raises(ValueError, match=r"add_kernel.*\(8, 100\).*tiling"):
        tpuemu.pallas.custom_jax_kernel(bad)(x, x)


def test_vmem_over_capacity_is_refused():
    def big(x, y):
        return pl.pallas_call(
            add_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,),
            in_specs=[pl.BlockSpec(x.shape, lambda i: (0, 0))] * 2,
            out_specs=pl.BlockSpec(x.shape, lambda i: (0, 0)),
        )(x, y)

    # Three operands' 32 MiB blocks, double-buffered: 192 MiB, more than any chip's VMEM (128
    # MiB on v5e and v6e).
    x = torch.randn(8192, 1024, device="tpu")
    with pytest.raises(ValueError, match=r"add_kernel.*VMEM over capacity"):
        tpuemu.pallas.custom_jax_kernel(big)(x, x)


def test_unsupported_primitive_is_named():
    def kern(x_ref, o_ref):
        o_ref[...] = jnp.cumsum(x_ref[...], axis=1)

    def f(x):
        return pl.pallas_call(kern, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,),
                              in_specs=[pl.BlockSpec(x.shape, lambda i: (0, 0))],
                              out_specs=pl.BlockSpec(x.shape, lambda i: (0, 0)))(x)

    x = torch.randn(8, 128, device="tpu")
    with pytest.raises(NotImplementedError, match=r"kern.*cumsum.*test_pallas.py:\d+"):
        tpuemu.pallas.custom_jax_kernel(f)(x)


def test_index_map_outside_the_array_is_refused():
    def f(x, y):
        return pl.pallas_call(
            add_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(3,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))] * 2,
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        )(x, y)

    x = torch.randn(16, 128, device="tpu")
    with pytest.raises(ValueError, match=r"add_kernel.*grid index \[2\].*outside"):
        tpuemu.pallas.custom_jax_kernel(f)(x, x)


def regular_sem_kernel(n_ref, x_ref, o_ref, sems):
    # Regular semaphores signalled and waited on by the kernel itself, by a count read from
    # SMEM and by constants; a wait with decrement=False leaves the count for the next one.
    n = n_ref[0]
    pl.semaphore_signal(sems.at[0], n)
    pl.semaphore_signal(sems.at[1], 2)
    pl.semaphore_wait(sems.at[1], 2, decrement=False)
    pl.semaphore_wait(sems.at[0], n)
    o_ref[...] = x_ref[...] * 2.0
    pl.semaphore_wait(sems.at[1], 2)


def regular_sem(n, x, interpret=False):
    return pl.pallas_call(
        regular_sem_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, n: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, n: (i, 0)),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR((2,))]),
        interpret=interpret,
    )(n, x)


def test_regular_semaphores_signal_and_wait(mode):
    x = torch.randn(16, 128)
    n = torch.tensor([5], dtype=torch.int32)
    k = tpuemu.pallas.custom_jax_kernel(regular_sem)
    got = k(n.to("tpu"), x.to("tpu")).cpu()
    # (JAX 0.10.2's interpret mode cannot run semaphores of a prefetch grid spec: the
    # reference is the kernel's meaning. Had a wait not been satisfied, the launch would
    # deadlock; had one been skipped, the last wait would.)
    assert torch.equal(got, x * 2.0)
    text = k.assembly(n, x)[0]
    assert "sem.signal" in text and "sem.wait" in text, text


def test_async_copy_of_a_slice_of_an_hbm_array():
    def rows_kernel(x_hbm, o_ref, buf, sem):
        pltpu.async_copy(x_hbm.at[pl.ds(8, 8)], buf, sem.at[0]).wait()
        o_ref[...] = buf[...] * 3.0

    def f(x, interpret=False):
        return pl.pallas_call(
            rows_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda: (0, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA((1,))],
            interpret=interpret)(x)

    x = torch.randn(16, 128)
    got = tpuemu.pallas.custom_jax_kernel(f)(x.to("tpu")).cpu()
    assert torch.equal(got, x[8:] * 3.0)
    assert torch.equal(got, _reference(f, x))


def test_a_semaphore_wait_never_signalled_is_a_reported_deadlock():
    def stuck_kernel(x_ref, o_ref, sems):
        pl.semaphore_signal(sems.at[0], 3)
        pl.semaphore_wait(sems.at[0], 4)  # one more than was signalled: waits forever
        o_ref[...] = x_ref[...]

    def f(x):
        return pl.pallas_call(stuck_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              scratch_shapes=[pltpu.SemaphoreType.REGULAR((1,))])(x)

    x = torch.randn(8, 128, device="tpu")
    with pytest.raises(RuntimeError, match=r"(?s)stuck_kernel.*deadlock.*sem"):
        tpuemu.pallas.custom_jax_kernel(f)(x).cpu()


def test_a_race_is_reported_at_the_kernel_line():
    def racy_kernel(x_hbm, o_ref, buf, sem):
        cp = pltpu.make_async_copy(x_hbm, buf, sem.at[0])
        cp.start()
        o_ref[...] = buf[...] + 1.0  # read before the copy is waited for
        cp.wait()

    def f(x):
        return pl.pallas_call(
            racy_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(x.shape, lambda: (0, 0)),
            scratch_shapes=[pltpu.VMEM(x.shape, jnp.float32), pltpu.SemaphoreType.DMA((1,))],
        )(x)

    x = torch.randn(8, 128, device="tpu")
    line = racy_kernel.__code__.co_firstlineno + 3
    with pytest.raises(RuntimeError, match=rf"racy_kernel.*test_pallas.py:{line}.*race on VMEM"):
        tpuemu.pallas.custom_jax_kernel(f)(x).cpu()


def test_an_out_of_bounds_access_is_refused_at_its_line():
    def oob_kernel(x_ref, o_ref):
        # Rows 8..24 of a 16-row block (JAX cannot see it: the start is computed).
        o_ref[...] = x_ref[pl.ds(pl.program_id(0) + 8, 16), :]

    def f(x):
        return pl.pallas_call(oob_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype),
                              grid=(1,), in_specs=[pl.BlockSpec((16, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i: (0, 0)))(x)

    x = torch.randn(16, 128, device="tpu")
    line = oob_kernel.__code__.co_firstlineno + 2
    with pytest.raises(ValueError, match=rf"oob_kernel.*out-of-bounds.*8\.\.24.*test_pallas.py:{line}"):
        tpuemu.pallas.custom_jax_kernel(f)(x)


def test_cpu_tensors_and_int64_are_refused_clearly():
    k = tpuemu.pallas.custom_jax_kernel(add)
    with pytest.raises(ValueError, match="not on tpu"):
        k(torch.randn(8, 128), torch.randn(8, 128))
    with pytest.raises(TypeError, match="int64"):
        k(torch.ones(8, 128, dtype=torch.int64, device="tpu"),
          torch.ones(8, 128, dtype=torch.int64, device="tpu"))

