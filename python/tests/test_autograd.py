"""Autograd, no_grad, modules (tied weights, state_dict) on the tpu against the CPU."""

import copy
import io

import torch
from torch import nn
import torch.nn.functional as F

from conftest import assert_same, tpu


def test_backward_matches_cpu(mode):
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 5), torch.randn(5, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    tw, tb = (p.detach().to("tpu").requires_grad_() for p in (w, b))
    tx = tpu(x)
    for xx, ww, bb in [(x, w, b), (tx, tw, tb)]:
        h = F.gelu(xx @ ww + bb)
        loss = (h.softmax(-1) * h).sum() + h.pow(2).mean()
        loss.backward()
    assert tw.grad.device.type == "tpu"
    assert_same(tw.grad, w.grad, rtol=1e-4, atol=1e-5)
    assert_same(tb.grad, b.grad, rtol=1e-4, atol=1e-5)
    gx = torch.autograd.grad((tx.requires_grad_() * 3).sum(), tx)[0]
    assert_same(gx, torch.full((6, 5), 3.0), exact=True)


def test_no_grad_and_detach(mode):
    w = torch.randn(3).to("tpu").requires_grad_()
    with torch.no_grad():
        y = w * 2
    assert not y.requires_grad
    z = (w * 2).detach()
    assert not z.requires_grad and z.device.type == "tpu"
    w.sum().backward()
    assert w.grad.cpu().tolist() == [1.0, 1.0, 1.0]


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.norm(self.emb(idx)))


def test_module_to_keeps_tied_weights_tied(mode):
    torch.manual_seed(0)
    m = Tied()
    ref = copy.deepcopy(m)
    params_before = list(m.parameters())
    m.to("tpu")
    assert m.head.weight is m.emb.weight
    assert all(p.device.type == "tpu" for p in m.parameters())
    assert all(a is b for a, b in zip(params_before, m.parameters()))  # the same Parameter objects
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    F.cross_entropy(m(tpu(idx)).flatten(0, 1), tpu(idx).flatten()).backward()
    F.cross_entropy(ref(idx).flatten(0, 1), idx.flatten()).backward()
    assert_same(m.emb.weight.grad, ref.emb.weight.grad, rtol=1e-4, atol=1e-5)
    m.half()
    assert m.head.weight is m.emb.weight and m.emb.weight.dtype == torch.float16
    # CPU modules convert as PyTorch does by default; the setting is PyTorch's again after.
    c = nn.Linear(2, 2).double()
    assert c.weight.dtype == torch.float64
    assert not torch.__future__.get_swap_module_params_on_conversion()


def test_state_dict_round_trips():
    torch.manual_seed(0)
    m = Tied().to("tpu")
    sd = m.state_dict()
    assert all(v.device.type == "tpu" for v in sd.values())
    cpu = Tied()
    cpu.load_state_dict({k: v.cpu() for k, v in sd.items()})
    for k, v in cpu.state_dict().items():
        assert torch.equal(v, sd[k].cpu()), k
    other = Tied().to("tpu")
    other.load_state_dict(sd)
    idx = torch.tensor([[1, 2]], device="tpu")
    assert torch.equal(other(idx).detach().cpu(), m(idx).detach().cpu())
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    back = torch.load(buf, map_location="tpu")
    assert torch.equal(back["emb.weight"].cpu(), sd["emb.weight"].cpu())
