"""`F.scaled_dot_product_attention` on the tpu: unmasked calls run the backend's flash-attention
kernels (one forward, one backward, through `aten::_scaled_dot_product_fused_attention_overrideable`)
and agree with the CPU; masked calls take PyTorch's math path as before."""

import pytest
import torch
import torch.nn.functional as F

import tpuemu

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
FUSED_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def _run(q, k, v, **kw):
    """Output and input gradients of attention on the tpu, and the operators it called."""
    qt, kt, vt = (t.detach().to("tpu").requires_grad_() for t in (q, k, v))
    tpuemu.reset_metrics()
    out = F.scaled_dot_product_attention(qt, kt, vt, **kw)
    (out * out).sum().backward()
    m = tpuemu.metrics()
    grads = [t.grad.cpu() for t in (qt, kt, vt)]
    return out.detach().cpu(), grads, m["ops_by_name"], m["cpu_fallbacks"]


def _reference(q, k, v, **kw):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    (out * out).sum().backward()
    return out.detach(), [q.grad, k.grad, v.grad]


@pytest.mark.parametrize(
    "shape,kv_heads,causal",
    [
        ((2, 4, 300, 64), 4, True),  # a partial key block, two batches
        ((1, 4, 200, 32), 2, False),  # grouped-query heads
        ((1, 2, 640, 64), 1, True),  # causal over whole key blocks, two query blocks
    ],
)
def test_unmasked_attention_is_the_flash_kernels_and_matches_cpu(mode, shape, kv_heads, causal):
    torch.manual_seed(0)
    b, h, l, e = shape
    q = torch.randn(b, h, l, e)
    k = torch.randn(b, kv_heads, l, e)
    v = torch.randn(b, kv_heads, l, e)
    kw = dict(is_causal=causal, enable_gqa=kv_heads != h)
    out, grads, ops, fallbacks = _run(q, k, v, **kw)
    want, want_grads = _reference(q, k, v, **kw)
    assert not fallbacks
    assert ops.get(FUSED) == 1 and ops.get(FUSED_BACKWARD) == 1, ops
    # The decomposition's operators never ran: the scores stayed in VMEM.
    assert not any(n in ops for n in ("aten::bmm", "aten::_softmax", "aten::_safe_softmax")), ops
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    for name, g, w in zip("qkv", grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3, msg=name)


def test_bf16_attention_matches_cpu_to_bf16_rounding():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 256, 64, dtype=torch.bfloat16) for _ in range(3))
    out, grads, ops, _ = _run(q, k, v, is_causal=True)
    assert ops.get(FUSED) == 1, ops
    want, want_grads = _reference(q.float(), k.float(), v.float(), is_causal=True)
    # The weights reach the matrix units rounded to bf16, as on a TPU: errors of a few ulps of
    # bf16 (2^-8 relative) in the output and its gradients.
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)
    for name, g, w in zip("qkv", grads, want_grads):
        torch.testing.assert_close(g.float(), w, rtol=5e-2, atol=5e-2, msg=name)


def test_masked_attention_takes_the_math_path_and_matches_cpu():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 64, 32) for _ in range(3))
    mask = torch.rand(64, 64) > 0.3
    mask.fill_diagonal_(True)
    out, grads, ops, fallbacks = _run(q, k, v, attn_mask=mask.to("tpu"))
    want, want_grads = _reference(q, k, v, attn_mask=mask)
    assert FUSED not in ops, ops
    assert not fallbacks
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    for name, g, w in zip("qkv", grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3, msg=name)


def _heads(x, h):
    """`[B, L, H * E]` projections seen as `[B, H, L, E]` heads (a view, as models split them)."""
    b, l, he = x.shape
    return x.view(b, l, h, he // h).transpose(1, 2)


@pytest.mark.parametrize("split", [True, False])
def test_the_output_is_laid_out_as_pytorchs_meta_function_says(mode, split):
    torch.manual_seed(3)
    shape = (2, 3, 130, 64)
    if split:
        q, k, v = (_heads(torch.randn(2, 130, 3 * 64), 3) for _ in range(3))
    else:
        q, k, v = (torch.randn(shape) for _ in range(3))
    args = (None, 0.0, True, False)
    meta = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *(t.to("meta") for t in (q, k, v)), *args
    )[0]
    tq, tk, tv = (t.to("tpu") for t in (q, k, v))
    assert tq.stride() == q.stride()
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(tq, tk, tv, *args)[0]
    assert out.shape == meta.shape
    assert out.stride() == meta.stride(), (out.stride(), meta.stride())
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-4)


def test_compiled_attention_over_split_heads_matches_eager():
    torch.manual_seed(4)
    x = torch.randn(2, 96, 4 * 32)
    w = torch.randn(4 * 32, 3 * 4 * 32) / 12

    def f(x, w):
        q, k, v = (x @ w).chunk(3, dim=-1)
        q, k, v = (_heads(t, 4) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(x.shape).sum(-1)

    xt, wt = x.to("tpu"), w.to("tpu").requires_grad_()
    eager = f(xt, wt)
    eager.sum().backward()
    g_eager = wt.grad.cpu()
    wt.grad = None
    compiled = torch.compile(f, backend="tpu")(xt, wt)
    compiled.sum().backward()
    torch.testing.assert_close(compiled.cpu(), eager.cpu(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), g_eager, rtol=1e-5, atol=1e-5)
