"""Mixed precision: ``torch.autocast("tpu", dtype=torch.bfloat16)`` casts as PyTorch's autocast
policy says (the op lists ATen shares between backends: matrix products and convolutions in
bfloat16; softmax, norms, losses and sums in float32), in every eager mode and compiled, and a
training step under it matches the same step under the CPU's autocast."""

import copy

import pytest
import torch

import tpuemu
from tpuemu._compile import compiled_graphs
from tpuemu.zoo.parallel import llama


def test_autocast_casts_as_the_policy_says(mode):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=g), torch.randn(8, 3, generator=g)
    b = torch.randn(4, 3, generator=g)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        xt, wt = x.to("tpu"), w.to("tpu")
        y = xt @ wt
        lin = torch.nn.functional.linear(xt, wt.t())
        soft = torch.softmax(y, -1)
        total = y.sum()
        mixed = torch.addcmul(b.to("tpu"), y, y)  # promote: float32 wins
        plain = xt + 1  # not in any list: as it is
    assert (y.dtype, lin.dtype) == (torch.bfloat16, torch.bfloat16)
    assert (soft.dtype, total.dtype, mixed.dtype, plain.dtype) == (torch.float32,) * 4
    # The product is the bfloat16 product of the bfloat16-rounded operands.
    want = (x.bfloat16().float() @ w.bfloat16().float()).bfloat16()
    assert torch.allclose(y.cpu().float(), want.float(), rtol=1e-2, atol=1e-2)
    # Outside the region nothing is cast.
    assert (xt @ wt).dtype == torch.float32


def test_the_default_autocast_dtype_is_bfloat16():
    # A TPU's matrix units take bfloat16 (PyTorch's default for a new device type is float16).
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    with torch.autocast("tpu"):
        assert (torch.ones(2, 2, device="tpu") @ torch.ones(2, 2, device="tpu")).dtype == torch.bfloat16


def test_binary_cross_entropy_is_refused_under_autocast_as_on_cuda():
    p = torch.full((3,), 0.5, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(p, p)


def _train(model, inputs, dev, steps=2, compiled=False):
    model = copy.deepcopy(model).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    f = torch.compile(model, backend="tpu") if compiled else model
    inputs = {k: v.to(dev) for k, v in inputs.items()}
    losses = []
    for _ in range(steps):
        with torch.autocast(dev, dtype=torch.bfloat16):
            out = f(**inputs)
        assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    return losses, {n: p.detach().cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("how", ["strict", "defer", "debug", "compiled"])
def test_a_zoo_model_trains_under_autocast_as_on_the_cpu(how):
    # The zoo's tiny Llama, two SGD steps under bfloat16 autocast: the tpu's losses and
    # updated weights against the CPU's autocast run (the CPU's own policy keeps softmax in
    # bfloat16 where this one computes it in float32: bfloat16-sized differences).
    model, inputs = llama()
    want, want_w = _train(model, inputs, "cpu")
    before = len(compiled_graphs())
    with tpuemu.mode_guard("strict" if how == "compiled" else how):
        got, got_w = _train(model, inputs, "tpu", compiled=how == "compiled")
    assert got == pytest.approx(want, rel=2e-2), (got, want)
    for n, w in want_w.items():
        err = (got_w[n] - w).abs().max().item()
        assert err <= 2e-2 * max(w.abs().max().item(), 1.0), (n, err)
    if how == "compiled":
        graphs = compiled_graphs()[before:]
        assert graphs and all(kind == "compiled" for _, kind in graphs), graphs


@pytest.mark.cpu_fallback(
    "aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_", "aten::reciprocal",
    reason="GradScaler's unscale and update kernels, and its float64 1/scale, are not the backend's",
)
def test_grad_scaler_is_accepted():
    # bfloat16 needs no loss scaling, but code written for float16 makes a scaler: it runs
    # (its 1/scale is computed in float64, one scalar through the CPU fallback).
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 2).to("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu")
    x = torch.randn(4, 8).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        loss = m(x).float().pow(2).mean()
    before = m.weight.detach().cpu().clone()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(m.weight.detach().cpu(), before)
    assert scaler.get_scale() == 65536.0


def test_a_cast_keeps_the_strides_of_a_dense_input_as_on_the_cpu():
    # `_to_copy`'s preserve_format (what autocast's casts and `.to(dtype)` use): a transposed
    # tensor's copy is transposed; a compiled graph's later `view` counts on it (the compiled
    # Llama under autocast ran eagerly when the copy was contiguous). Non-dense inputs and
    # contiguous_format give contiguous copies.
    x = torch.arange(24.0).reshape(2, 3, 4)
    for v in (x.transpose(1, 2), x.permute(2, 0, 1), x[:, :, ::2], x):
        want = v.to(torch.bfloat16)
        got = v.to("tpu").to(torch.bfloat16)
        assert got.stride() == want.stride(), (v.stride(), got.stride(), want.stride())
        assert torch.equal(got.cpu(), want)
    t = x.transpose(1, 2).to("tpu")
    assert t.to(torch.bfloat16, memory_format=torch.contiguous_format).is_contiguous()
