"""The optimizers users run, single-tensor and foreach forms, against the CPU."""

import copy

import pytest
import torch
from torch import nn
import torch.nn.functional as F

OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
]


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("name,kwargs", OPTIMIZERS, ids=lambda v: str(v))
def test_training_matches_cpu(name, kwargs, foreach, mode):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
    dev = copy.deepcopy(ref).to("tpu")
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    opts = [getattr(torch.optim, name)(m.parameters(), foreach=foreach, **kwargs) for m in (ref, dev)]
    for _ in range(3):
        for m, opt, xx, yy in [(ref, opts[0], x, y), (dev, opts[1], x.to("tpu"), y.to("tpu"))]:
            opt.zero_grad()
            F.cross_entropy(m(xx), yy).backward()
            opt.step()
    for a, b in zip(ref.parameters(), dev.parameters()):
        assert b.device.type == "tpu"
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
