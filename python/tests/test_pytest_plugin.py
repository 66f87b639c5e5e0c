"""tpuemu's pytest plugin (the ``pytest11`` entry point): ``--tpu-mode``, ``--tpu-no-fallback``,
``--tpu-check-fallback`` with ``@pytest.mark.cpu_fallback``,
the ``tpu_device`` fixture and the summary of operators that ran on the CPU; and a test written
as Hugging Face writes its model tests, run on the tpu by its environment variables."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_SUITE = '''
import torch, tpuemu

def test_mode(tpu_device):
    assert tpu_device == torch.device("tpu")
    print("MODE", tpuemu.mode())

def test_an_operator_the_backend_lacks():
    a = torch.ones(32, 8, dtype=torch.int8).to("tpu")
    assert torch._int_mm(a, a[:8]).device.type == "tpu"  # int8 products: not on the tpu
'''


def _pytest(args, cwd, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    for k in ("TORCH_TPU_DEFER_AND_FUSE", "TORCH_TPU_LAUNCH_BLOCKING", "TORCH_TPU_CPU_FALLBACK"):
        env.pop(k, None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )


def test_mode_option_fixture_and_fallback_summary(tmp_path):
    (tmp_path / "test_suite.py").write_text(_SUITE)
    r = _pytest(["--tpu-mode", "defer", "test_suite.py"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "MODE defer" in r.stdout and "2 passed" in r.stdout
    # The option wins over the environment's switches (the TPU_ spellings too).
    r2 = _pytest(["--tpu-mode", "strict", "test_suite.py"], tmp_path, {"TPU_DEFER_AND_FUSE": "1"})
    assert "MODE strict" in r2.stdout, r2.stdout[-3000:]
    # The operator the backend lacks ran on the CPU, and the summary says so.
    assert "operators that ran on the CPU (tpuemu's fallback)" in r.stdout
    assert "aten::_int_mm" in r.stdout


def test_the_summary_adds_up_the_workers_of_pytest_xdist(tmp_path):
    # Two files, so that each of two workers runs one; both call the lacking operator.
    (tmp_path / "test_one.py").write_text(_SUITE)
    (tmp_path / "test_two.py").write_text(_SUITE)
    r = _pytest(["-n", "2", "--dist", "loadfile", "test_one.py", "test_two.py"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "4 passed" in r.stdout
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.strip().endswith("aten::_int_mm")]
    assert lines == [["2", "aten::_int_mm"]], r.stdout[-3000:]


def test_no_fallback_fails_a_test_that_runs_an_operator_on_the_cpu(tmp_path):
    (tmp_path / "test_suite.py").write_text(_SUITE)
    r = _pytest(["--tpu-mode", "debug", "--tpu-no-fallback", "test_suite.py"], tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "MODE debug" in r.stdout
    assert "1 failed, 1 passed" in r.stdout, r.stdout[-3000:]
    assert "NotImplementedError" in r.stdout and "aten::_int_mm" in r.stdout


_DECLARED = '''
import pytest, torch, tpuemu

@pytest.mark.cpu_fallback("aten::_int_mm", reason="what this test checks")
def test_declared():
    a = torch.ones(32, 8, dtype=torch.int8).to("tpu")
    assert torch._int_mm(a, a[:8]).device.type == "tpu"

def test_undeclared():
    a = torch.ones(32, 8, dtype=torch.int8).to("tpu")
    assert torch._int_mm(a, a[:8]).device.type == "tpu"

def test_on_the_device():
    x = torch.tensor([0.5, 2.0], device="tpu")
    assert (x * 2).sum().item() == 5.0
'''


def test_check_fallback_fails_a_test_whose_cpu_fallback_is_not_declared(tmp_path):
    (tmp_path / "test_suite.py").write_text(_DECLARED)
    r = _pytest(["--tpu-check-fallback", "test_suite.py"], tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "1 failed, 2 passed" in r.stdout, r.stdout[-3000:]
    assert "test_undeclared" in r.stdout and "ran on the CPU, not the tpu: aten::_int_mm (1 call)" in r.stdout
    # Without the option the fallback is allowed (and listed).
    r2 = _pytest(["test_suite.py"], tmp_path)
    assert r2.returncode == 0 and "3 passed" in r2.stdout, r2.stdout[-3000:]


def test_a_hugging_face_style_test_runs_on_the_tpu_from_its_environment():
    r = _pytest(
        ["--tpu-mode", "strict", str(ROOT / "examples" / "ci")],
        ROOT,
        {"TRANSFORMERS_TEST_DEVICE": "tpu", "TRANSFORMERS_TEST_BACKEND": "tpuemu"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "2 passed" in r.stdout, r.stdout[-3000:]
