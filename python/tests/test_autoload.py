"""Installed, tpuemu loads with ``import torch`` (PyTorch's ``torch.backends`` entry point for
out-of-tree device backends): code that never names tpuemu finds the device the way libraries
look for one; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off."""

import os
import subprocess
import sys

_NEVER_NAMES_TPUEMU = """
import sys, torch
dev = torch._utils._get_available_device_type()
acc = torch.accelerator.current_accelerator()
x = torch.arange(6.0, device=dev).reshape(2, 3)
print("loaded" if "tpuemu" in sys.modules else "not loaded", dev, acc, (x @ x.T).sum().item())
"""


def _run(env_extra):
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-c", _NEVER_NAMES_TPUEMU], env=env, capture_output=True, text=True
    )


def test_import_torch_alone_finds_the_tpu():
    r = _run({})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["loaded", "tpu", "tpu", "83.0"], r.stdout
    # Loading prints nothing (a kernel registered twice made PyTorch warn on every import).
    assert r.stderr == "", r.stderr[-2000:]


def test_autoload_can_be_turned_off():
    r = _run({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[:3] == ["not", "loaded", "None"], r.stdout


def test_a_torch_outside_the_supported_range_is_refused_with_the_range():
    import re

    import pytest

    import tpuemu

    for ok in ("2.15.0", "2.15.3+cpu", "2.15.0a0+git1234"):
        tpuemu._check_torch(ok)
    for bad in ("2.14.1", "2.16.0", "3.0.0", "1.13.1+cu117"):
        with pytest.raises(ImportError, match=r"supports torch >=2\.15,<2\.16 .* torch " + re.escape(bad)):
            tpuemu._check_torch(bad)


def test_the_shim_is_rebuilt_for_another_torch(tmp_path):
    # The C++ shim is compiled against the installed torch's headers: one built for another
    # torch (even a patch release) is stale, as one built from other sources is.
    from importlib.metadata import version

    from tpuemu import _build

    so = tmp_path / "tpuemu_C.so"
    so.write_bytes(b"")
    names = _build._names()
    assert f"torch {version('torch')}" in names
    _build._manifest(tmp_path).write_text(names)
    assert not _build._stale(so)
    _build._manifest(tmp_path).write_text(names.replace(version("torch"), "2.15.99"))
    assert _build._stale(so)
