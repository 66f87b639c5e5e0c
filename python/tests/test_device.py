"""Tensors on "tpu" are ordinary torch.Tensors: creation, copies, dtypes, printing, views."""

import io

import numpy as np
import pytest
import torch

import tpuemu
from conftest import assert_same


def test_device_and_module():
    x = torch.ones(2, device="tpu")
    assert x.device == torch.device("tpu", 0)
    assert x.is_tpu and not x.is_cpu
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() == 1
    assert torch.tpu.current_device() == 0
    torch.tpu.synchronize()
    assert str(x.device) == "tpu:0"
    assert torch.ones(1).tpu().device.type == "tpu"


def test_host_round_trip_is_exact_for_every_dtype():
    for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                  torch.bool, torch.float64, torch.int8, torch.uint8, torch.int16]:
        if dtype == torch.bool:
            h = torch.tensor([True, False, True])
        elif dtype.is_floating_point:
            h = torch.randn(5, 3).to(dtype)
        else:
            info = torch.iinfo(dtype)
            h = torch.tensor([info.min, info.max, 0, -1 if info.min < 0 else 1], dtype=dtype)
        d = h.to("tpu")
        assert d.dtype == dtype
        assert torch.equal(d.cpu(), h), dtype


@pytest.mark.cpu_fallback(
    "aten::_local_scalar_dense",
    reason="an int64 element beyond 32 bits is read through the CPU (the device's lanes are 32-bit)",
)
def test_int64_values_beyond_32_bits_survive_copies():
    vals = [2**40 + 1, -(2**62), 2**63 - 1]
    x = torch.tensor(vals, device="tpu")
    assert x.tolist() == vals
    assert x[1].item() == vals[1]
    y = torch.empty(3, dtype=torch.int64, device="tpu")
    y.copy_(x)  # a device-to-device copy
    assert y.cpu().tolist() == vals


def test_item_tolist_numpy_print():
    x = torch.arange(6.0).reshape(2, 3).to("tpu")
    assert x.sum().item() == 15.0
    assert isinstance(x[0, 1].item(), float)
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert np.array_equal(x.cpu().numpy(), np.arange(6.0, dtype=np.float32).reshape(2, 3))
    s = str(x)
    assert "device='tpu:0'" in s and "[3., 4., 5.]" in s
    assert "dtype=torch.int64" not in repr(x.long()) and "device='tpu:0'" in repr(x.long())
    assert "dtype=torch.float16" in repr(x.half())


def test_factories(mode):
    torch.manual_seed(0)
    assert_same(torch.empty(2, 3, device="tpu").shape, torch.Size([2, 3]))
    assert_same(torch.zeros(2, 3, device="tpu"), torch.zeros(2, 3), exact=True)
    assert_same(torch.ones(4, dtype=torch.int32, device="tpu"), torch.ones(4, dtype=torch.int32), exact=True)
    assert_same(torch.full((2, 2), 7.5, device="tpu"), torch.full((2, 2), 7.5), exact=True)
    assert_same(torch.arange(5, device="tpu"), torch.arange(5), exact=True)
    assert_same(torch.arange(1.0, 3.0, 0.5, device="tpu"), torch.arange(1.0, 3.0, 0.5), exact=True)
    assert_same(torch.tensor([[1, 2], [3, 4]], device="tpu"), torch.tensor([[1, 2], [3, 4]]), exact=True)
    x = torch.randn(3, 4)
    t = x.to("tpu")
    for f in [torch.zeros_like, torch.ones_like, torch.empty_like]:
        r = f(t)
        assert r.device.type == "tpu" and r.shape == x.shape and r.dtype == x.dtype
    assert_same(torch.full_like(t, 3.0), torch.full_like(x, 3.0), exact=True)


def test_float64_and_complex_are_created_and_filled_on_the_device(mode):
    # The device computes neither, but holds their bytes: creation and fills are a device copy
    # of the value's 32-bit words (no CPU fallback: the fixture would fail the test).
    tpuemu.reset_metrics()
    for dtype, v in [(torch.float64, 0.1), (torch.complex64, 1.5 - 2j),
                     (torch.complex128, -0.3 + 1e-300j)]:
        cpu = torch.full((3, 4), v, dtype=dtype)
        assert_same(torch.full((3, 4), v, dtype=dtype, device="tpu"), cpu, exact=True)
        assert_same(torch.zeros(2, 5, dtype=dtype, device="tpu"), torch.zeros(2, 5, dtype=dtype),
                    exact=True)
        assert_same(torch.ones(7, dtype=dtype, device="tpu"), torch.ones(7, dtype=dtype),
                    exact=True)
        t = cpu.to("tpu")
        assert_same(torch.zeros_like(t), torch.zeros_like(cpu), exact=True)
        assert_same(torch.full_like(t, v), torch.full_like(cpu, v), exact=True)
        assert_same(t.new_ones(2, 3), cpu.new_ones(2, 3), exact=True)
        # A strided view filled in place: its base keeps the rest.
        t.t()[1].fill_(-4.25)
        cpu.t()[1].fill_(-4.25)
        assert_same(t, cpu, exact=True)
        t.zero_()
        assert_same(t, torch.zeros_like(cpu), exact=True)
        # fill_ with a 0-d tensor on the device, as PyTorch casts it.
        t.fill_(torch.tensor(2.5, device="tpu"))
        assert_same(t, torch.full_like(cpu, 2.5), exact=True)
    z = torch.ones(2, 3, device="tpu")
    assert_same(torch.zeros_like(z, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64),
                exact=True)
    assert not tpuemu.metrics()["cpu_fallbacks"]
    # Their arithmetic is refused, never downcast.
    tpuemu.set_cpu_fallback(False)
    try:
        with pytest.raises(NotImplementedError, match="float64 is not computed"):
            torch.ones(2, dtype=torch.float64, device="tpu") + 1
    finally:
        tpuemu.set_cpu_fallback(True)


def test_complex_tensors_viewed_as_reals_and_built_from_parts(mode):
    tpuemu.reset_metrics()
    re, im = torch.randn(3, 4), torch.randn(3, 4)
    c = torch.complex(re, im)
    t = c.to("tpu")
    assert_same(torch.view_as_real(t), torch.view_as_real(c), exact=True)
    assert_same(t.real, c.real, exact=True)
    assert_same(t.imag, c.imag, exact=True)
    # A view: writing through the reals writes the complex tensor.
    t.real.fill_(7.0)
    c.real.fill_(7.0)
    assert_same(t, c, exact=True)
    pairs = torch.randn(5, 2)
    assert_same(torch.view_as_complex(pairs.to("tpu")), torch.view_as_complex(pairs), exact=True)
    assert_same(torch.complex(re.to("tpu"), im.to("tpu")), torch.complex(re, im), exact=True)
    assert_same(torch.complex(re.double().to("tpu"), im.double()[0].to("tpu")),
                torch.complex(re.double(), im.double()[0]), exact=True)
    r = re.abs()
    assert_same(torch.polar(r.to("tpu"), im.to("tpu")), torch.polar(r, im))
    assert not tpuemu.metrics()["cpu_fallbacks"]
    # PyTorch's errors.
    with pytest.raises(RuntimeError, match="Expected object of scalar type Float but got scalar "
                                           "type Double for second argument"):
        torch.complex(re.to("tpu"), im.double().to("tpu"))
    with pytest.raises(RuntimeError, match="unresolved conjugated tensors"):
        torch.view_as_real(t.conj())


def test_dtype_conversions_match_the_cpu(mode):
    x = torch.tensor([-2.7, -0.5, 0.0, 0.4999, 1.5, 3.25, 1e4])
    t = x.to("tpu")
    for dtype in [torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.float64]:
        assert_same(t.to(dtype), x.to(dtype), exact=True)
    assert_same(t.half().float(), x.half().float(), exact=True)
    assert_same(t.long().float(), x.long().float(), exact=True)


def test_views_alias_their_base(mode):
    v = torch.zeros(6, device="tpu")
    v.view(2, 3)[1, 2] = 5
    assert v.cpu()[5].item() == 5
    v[1:3].add_(1)
    v.view(2, 3).t()[0].fill_(-1)  # a strided view: elements 0 and 3
    assert v.cpu().tolist() == [-1.0, 1.0, 1.0, -1.0, 0.0, 5.0]
    m = torch.arange(9.0).reshape(3, 3).to("tpu")
    m.diagonal().mul_(10)
    m[:, 0] = torch.tensor([7.0, 8.0, 9.0], device="tpu")
    want = torch.arange(9.0).reshape(3, 3)
    want.diagonal().mul_(10)
    want[:, 0] = torch.tensor([7.0, 8.0, 9.0])
    assert_same(m, want, exact=True)
    base = torch.arange(8.0, device="tpu")
    w = base[::2]
    assert w._base is base
    assert w.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    w.zero_()
    assert base.cpu().tolist() == [0.0, 1.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0]
    d = base.detach()
    d[1] = 100
    assert base[1].item() == 100


def test_distinct_storages_have_distinct_addresses():
    a, b = torch.empty(4, device="tpu"), torch.empty(4, device="tpu")
    pa, pb = a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()
    assert pa != pb and (pa >= pb + 16 or pb >= pa + 16)
    assert a[2:].data_ptr() == pa + 8


def test_resize_and_set(mode):
    x = torch.arange(4.0, device="tpu")
    x.resize_(6)
    assert x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device="tpu")
    y.set_(x.untyped_storage(), 1, (2,), (2,))
    assert y.cpu().tolist() == [1.0, 3.0]
    out = torch.empty(0, device="tpu")
    torch.add(torch.ones(3, device="tpu"), 1, out=out)  # an out= tensor of the wrong shape
    assert out.cpu().tolist() == [2.0, 2.0, 2.0]


def test_storage_round_trips_through_save_and_load():
    x = torch.randn(3, 4).to("tpu")
    buf = io.BytesIO()
    torch.save({"x": x, "v": x[1]}, buf)
    buf.seek(0)
    back = torch.load(buf, map_location="tpu")
    assert back["x"].device.type == "tpu"
    assert torch.equal(back["x"].cpu(), x.cpu())
    back["v"].fill_(0)  # views saved together stay views
    assert back["x"][1].abs().sum().item() == 0
    buf.seek(0)
    assert torch.equal(torch.load(buf, map_location="cpu")["x"], x.cpu())


def test_mixed_devices_are_an_error_but_cpu_scalars_are_fine():
    x = torch.ones(2, 3, device="tpu")
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(2, 3)
    assert_same(x * torch.tensor(2.0), torch.ones(2, 3) * 2, exact=True)
    assert_same(x * 2, torch.ones(2, 3) * 2, exact=True)
    assert_same(x.half() * 0.5, torch.ones(2, 3).half() * 0.5, exact=True)
    assert_same(x.long() * 3, torch.ones(2, 3).long() * 3, exact=True)
    assert_same(x.long() * 0.5, torch.ones(2, 3).long() * 0.5, exact=True)


@pytest.mark.cpu_fallback(
    "aten::abs", "aten::add.Tensor", "aten::mul.Tensor", "aten::sub.Tensor",
    reason="what this test checks: int64 operands beyond 32 bits run on the CPU, exactly",
)
def test_int64_beyond_32_bits_computes_exactly_on_the_cpu(mode):
    # The device computes int64 in 32-bit lanes; such values run through the CPU instead.
    a = torch.tensor([2**40, -(2**35), 7])
    t = a.to("tpu")
    assert_same(t + 1, a + 1, exact=True)
    assert_same(t.abs(), a.abs(), exact=True)
    assert_same((t * 2)[0:2], (a * 2)[0:2], exact=True)
    c = torch.empty(3, dtype=torch.int64, device="tpu")
    c.copy_(t)  # the copy keeps the values, and so does what is computed from it
    assert_same(c - 3, a - 3, exact=True)



def test_non_blocking_copies_and_pinned_memory():
    """`.to("cpu", non_blocking=True)` (a training loop's habit) needs pinned host memory: it
    raised "implement getPinnedMemoryAllocator" (found by the op_db run's `to` entry)."""
    x = torch.arange(6.0).to("tpu")
    y = x.to("cpu", non_blocking=True)
    assert y.is_pinned() and torch.equal(y, torch.arange(6.0))
    z = x.to("cpu", torch.float64, non_blocking=True, copy=True)
    assert z.dtype == torch.float64 and torch.equal(z, torch.arange(6.0, dtype=torch.float64))
    p = torch.ones(3).pin_memory()
    assert p.is_pinned() and p[1:].is_pinned() and not torch.ones(3).is_pinned()
    assert torch.equal(p.to("tpu", non_blocking=True).cpu(), torch.ones(3))
