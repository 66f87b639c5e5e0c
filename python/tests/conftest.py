"""Shared fixtures: every test compares the tpu against the same code on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import tpuemu

# Products on the matrix units in full float32 precision, so that results compare with the CPU
# closely (the TPU default, one bfloat16 pass, is tested on its own).
tpuemu.set_matmul_precision("highest")

MODES = ["strict", "debug", "defer"]

def pytest_configure(config):
    # This suite compares the device: a test during which an operator ran on the CPU fallback
    # fails unless it declares it (@pytest.mark.cpu_fallback("aten::...", reason=...)).
    config.option.tpu_check_fallback = True


@pytest.fixture(params=MODES)
def mode(request):
    """Runs the test in each eager mode."""
    with tpuemu.mode_guard(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="tpuemu: aten::")
        yield


def tpu(x):
    """x with every tensor moved to the tpu."""
    if isinstance(x, torch.Tensor):
        return x.to("tpu")
    if isinstance(x, (list, tuple)):
        return type(x)(tpu(v) for v in x)
    if isinstance(x, dict):
        return {k: tpu(v) for k, v in x.items()}
    return x


def assert_same(got, want, rtol=1.3e-6, atol=1e-5, exact=False):
    """A tpu result against the CPU's: same structure, dtypes, shapes and values."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.device.type == "tpu", got.device
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.shape == want.shape, (got.shape, want.shape)
        g = got.detach().cpu()
        if exact:
            assert torch.equal(g, want.detach()), (g, want)
        else:
            torch.testing.assert_close(g, want.detach(), rtol=rtol, atol=atol)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol=rtol, atol=atol, exact=exact)
    else:
        assert got == want, (got, want)


def run_python(code: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter of this environment (for settings read at start-up)."""
    e = dict(os.environ)
    for k in ("TORCH_TPU_DEFER_AND_FUSE", "TORCH_TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEBUG",
              "TORCH_TPU_CPU_FALLBACK", "TPUEMU_CHIP"):
        e.pop(k, None)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r

# The operators that ran on the CPU are listed at the end by tpuemu's pytest plugin
# (tpuemu/pytest_plugin.py).
