"""torch.fft on "tpu": the three primitives PyTorch builds every transform from run as DFTs on
the matrix units (tpuemu/_fft.py); each result against PyTorch's own FFT on the CPU (pocketfft,
an independent algorithm), with no operator on the CPU fallback (the suite's fixture)."""

from __future__ import annotations

import pytest
import torch

import tpuemu

torch.manual_seed(0)
REAL = torch.randn(3, 6, 5)
CPLX = torch.randn(3, 6, 5, dtype=torch.complex64)

CASES = {
    "fft": lambda t: torch.fft.fft(t),
    "fft n=8 dim=1": lambda t: torch.fft.fft(t, n=8, dim=1),
    "fft n=3 (cropped)": lambda t: torch.fft.fft(t, n=3),
    "ifft ortho": lambda t: torch.fft.ifft(t, norm="ortho"),
    "fft2": lambda t: torch.fft.fft2(t),
    "ifftn forward dims 0,2": lambda t: torch.fft.ifftn(t, dim=(0, 2), norm="forward"),
    "rfft": lambda t: torch.fft.rfft(t.real if t.is_complex() else t),
    "rfftn": lambda t: torch.fft.rfftn(t.real if t.is_complex() else t),
    "irfft": lambda t: torch.fft.irfft(t),
    "irfft n=9": lambda t: torch.fft.irfft(t, n=9),
    "irfftn": lambda t: torch.fft.irfftn(t),
    "hfft": lambda t: torch.fft.hfft(t),
    "ihfft": lambda t: torch.fft.ihfft(t.real if t.is_complex() else t),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("x", [REAL, CPLX], ids=["float32", "complex64"])
def test_transforms_match_the_cpu(mode, name, x):
    f = CASES[name]
    want = f(x)
    got = f(x.to("tpu"))
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    # Each output is a sum of n float32 products: relative to the largest output, a few ulps.
    scale = want.abs().max().item()
    assert (got.cpu() - want).abs().max().item() <= 4e-7 * scale


def test_a_transform_is_matrix_unit_work():
    x = torch.randn(16, 64, device="tpu")
    tpuemu.sync()
    tpuemu.reset_metrics()
    torch.fft.fft(x).cpu()
    m = tpuemu.metrics()
    # 16 rows of 64 points against a 64 x 64 table of cosines and one of sines: at least
    # 2 * 16 * 64 * 64 * 2 flops (more at the "highest" precision's six passes).
    assert m["mxu_flops"] >= 2 * 2 * 16 * 64 * 64
    assert not m["cpu_fallbacks"]


def test_round_trip_and_complex_inputs_conjugated():
    x = torch.randn(4, 10, device="tpu")
    back = torch.fft.irfft(torch.fft.rfft(x), n=10)
    torch.testing.assert_close(back.cpu(), x.cpu(), rtol=0, atol=2e-6)
    c = CPLX.to("tpu")
    torch.testing.assert_close(torch.fft.fft(c.conj()).cpu(), torch.fft.fft(CPLX.conj()),
                               rtol=0, atol=4e-7 * 20)


def test_dtypes_the_cpu_refuses_or_the_tpu_does_not_compute():
    with pytest.raises(RuntimeError, match="Unsupported dtype BFloat16"):
        torch.fft.fft(torch.randn(8).to(torch.bfloat16))  # the CPU's own refusal
    with pytest.raises(RuntimeError, match="Unsupported dtype BFloat16"):
        torch.fft.fft(torch.randn(8, device="tpu").to(torch.bfloat16))
    tpuemu.set_cpu_fallback(False)
    try:
        with pytest.raises(NotImplementedError, match="float64 and complex128 are not computed"):
            torch.fft.fft(torch.randn(8, dtype=torch.float64).to("tpu"))
    finally:
        tpuemu.set_cpu_fallback(True)
