"""Installed as a user installs it: the wheel ``maturin build`` makes, ``pip install``ed into a
new environment that has torch and no Rust toolchain, with no repository on the path; there, a
training script that never names tpuemu (with an autocast step, writing a trace), the ``tpuemu``
command (``predict``, ``viz --screenshot`` of that trace), and a test suite through the
package's pytest plugin with the fallback off."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_TRAIN = """
import torch
dev = torch._utils._get_available_device_type()   # never names tpuemu
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8).to(dev), torch.randint(0, 2, (32,)).to(dev)
losses = []
for step in range(5):
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=step >= 3):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
import tpuemu
with tpuemu.trace("step.json"):   # for `tpuemu viz` below
    model(x).sum().backward()
print("device", dev, "from", os.path.dirname(tpuemu.__file__) if (os := __import__("os")) else "")
print("losses", losses[0] > losses[-1], tpuemu.metrics()["kernels_launched"] > 0)
"""

_SUITE = """
import torch

def test_matmul(tpu_device):
    a = torch.arange(6.0).reshape(2, 3)
    assert torch.equal((a.to(tpu_device) @ a.T.to(tpu_device)).cpu(), a @ a.T)

def test_lacking_operator(tpu_device):
    a = torch.ones(32, 8, dtype=torch.int8).to(tpu_device)
    torch._int_mm(a, a[:8])  # int8 products are not computed on the tpu
"""


def _run(cmd, env, cwd):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(shutil.which("cargo") is None, reason="building the wheel needs cargo")
def test_the_wheel_installs_and_runs_where_there_is_torch_and_no_rust(tmp_path):
    # The wheel, from the release build scripts/python.sh made (seconds when it is current):
    # built for this interpreter, as `maturin develop` was — maturin's default is the first
    # python on PATH, and another interpreter makes cargo rebuild pyo3 and the extension
    # (about 2 minutes) although the abi3 wheel is the same.
    maturin = Path(sys.executable).parent / "maturin"
    r = _run([str(maturin), "build", "--release", "--quiet", "-i", sys.executable,
              "-o", str(tmp_path / "dist")],
             dict(os.environ), ROOT / "python")
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("tpuemu-*.whl")

    # A new environment that sees this environment's torch (no download) and nothing of the
    # repository; PATH without cargo or rustc.
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                dict(os.environ), tmp_path).stdout.strip()
    Path(site, "torch_from_the_project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The package's other dependencies, as pip would put them there: ninja's executable (the
    # shim's build runs it from the environment's bin/).
    (env_dir / "bin" / "ninja").symlink_to(Path(sys.executable).parent / "ninja")
    path = [p for p in os.environ["PATH"].split(os.pathsep)
            if not (Path(p) / "cargo").exists() and not (Path(p) / "rustc").exists()]
    env = {"PATH": os.pathsep.join([str(env_dir / "bin"), *path]), "HOME": os.environ["HOME"]}
    r = _run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], env, tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    installed = Path(site, "tpuemu")
    assert (installed / "_rust.abi3.so").exists()

    # Training on the device torch reports, the shim compiled once on first use (told on stderr).
    r = _run([str(py), "-c", _TRAIN], env, tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "compiling the C++ shim against torch 2.15" in r.stderr
    assert f"cached in {installed / '_cpp_build'}" in r.stderr, r.stderr[-2000:]
    assert f"device tpu from {installed}" in r.stdout, r.stdout
    assert "losses True True" in r.stdout

    # The command line, from the wheel (no cargo): its help, a prediction, a screenshot of the
    # training's trace, and a usage error.
    cli = str(env_dir / "bin" / "tpuemu")
    r = _run([cli, "--help"], env, tmp_path)
    assert r.returncode == 0 and "predict" in r.stdout and "viz" in r.stdout, r.stdout + r.stderr
    r = _run([cli, "predict", "--model", "llama3.1-8b", "--slice", "v5p:2x2x2", "--seq", "1024",
              "--json"], env, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    prediction = json.loads(r.stdout)
    assert prediction["chips"] == 8 and 0 < prediction["mfu"] < 1, r.stdout[:2000]
    r = _run([cli, "viz", "step.json", "--screenshot", "step.png", "--width", "400",
              "--height", "300"], env, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _run([cli, "predict", "--model", "no-such-model", "--slice", "v5e:2x2"], env, tmp_path)
    assert r.returncode == 1 and "no-such-model" in r.stderr and "Traceback" not in r.stderr, r.stderr

    # A user's suite through the package's plugin: the lacking operator fails its test.
    (tmp_path / "test_user.py").write_text(_SUITE)
    r = _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tpu-no-fallback",
              "test_user.py"], env, tmp_path)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stdout[-3000:]
    assert "NotImplementedError" in r.stdout


def test_the_shim_is_cached_in_the_users_cache_where_the_package_is_read_only(tmp_path, monkeypatch):
    from tpuemu import _build

    monkeypatch.delenv("TPUEMU_CPP_BUILD", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_build, "HERE", tmp_path / "site-packages" / "tpuemu")
    assert _build.build_dir() == tmp_path / "site-packages" / "tpuemu" / "_cpp_build"
    # A package directory the user cannot write (checked as the OS would answer for them).
    monkeypatch.setattr(_build.os, "access", lambda path, mode: False)
    assert _build.build_dir() == tmp_path / "cache" / "tpuemu" / "cpp_build"
    monkeypatch.setenv("TPUEMU_CPP_BUILD", str(tmp_path / "chosen"))
    assert _build.build_dir() == tmp_path / "chosen"
