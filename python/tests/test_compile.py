"""torch.compile(backend="tpu"): one program per AOT graph, graph breaks run eagerly."""

import copy
import warnings

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import tpuemu
from tpuemu._compile import compiled_graphs


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def test_compiled_training_step_matches_cpu():
    torch._dynamo.reset()
    ref = _mlp()
    dev = copy.deepcopy(ref).to("tpu")
    x, y = torch.randn(12, 8), torch.randint(0, 4, (12,))

    def step(m, x, y):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    n0 = len(compiled_graphs())
    cstep = torch.compile(step, backend="tpu")
    tpuemu.reset_metrics()
    loss = cstep(dev, x.to("tpu"), y.to("tpu"))
    want = step(ref, x, y)
    torch.testing.assert_close(loss.cpu(), want, rtol=1e-5, atol=1e-6)
    for a, b in zip(ref.parameters(), dev.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-6)
    new = compiled_graphs()[n0:]
    assert [s for _, s in new] == ["compiled", "compiled"], new  # one forward, one backward
    m = tpuemu.metrics()
    assert sum(m["graph_compiles"].values()) == 2
    # A second call reuses both programs: one launch each (gradients cleared, so that nothing
    # accumulates into them outside the graphs).
    for p in dev.parameters():
        p.grad = None
    tpuemu.reset_metrics()
    cstep(dev, x.to("tpu"), y.to("tpu")).item()
    m = tpuemu.metrics()
    assert sum(m["graph_compiles"].values()) == 0
    assert m["kernels_launched"] <= 3, m["ops_by_name"]


def test_compiled_module_in_every_mode():
    for mode in ["strict", "debug", "defer"]:
        with tpuemu.mode_guard(mode):
            torch._dynamo.reset()
            m = _mlp()
            x = torch.randn(5, 8)
            want = m(x)
            cm = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu")
            with torch.no_grad():
                got = cm(x.to("tpu"))
            torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.cpu_fallback("aten::_int_mm", reason="what this test checks: an operator the backend lacks")
def test_graph_breaks_and_unsupported_operators_run_eagerly():
    torch._dynamo.reset()

    def f(x, a):
        y = (x * 2).relu()
        print("a graph break")
        z = torch._int_mm(a, a[:8])  # int8 products are not on the tpu: eager
        return y.sum() + z.sum()

    x = torch.randn(6)
    a = torch.randint(-8, 8, (32, 8), dtype=torch.int8)
    n0 = len(compiled_graphs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(f, backend="tpu")(x.to("tpu"), a.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x, a), rtol=1e-6, atol=1e-5)
    states = [s for _, s in compiled_graphs()[n0:]]
    assert "compiled" in states
    assert any(s.startswith("eager") and "_int_mm" in s for s in states), states
