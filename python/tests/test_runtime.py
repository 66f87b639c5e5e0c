"""Metrics, traces, the CPU fallback, chip selection."""

import json
import textwrap
import warnings

import pytest
import torch

import tpuemu
from conftest import run_python


def test_metrics():
    tpuemu.reset_metrics()
    x = torch.randn(16, 16).to("tpu")
    (x @ x).sum().item()
    m = tpuemu.metrics()
    for key in ["ops", "ops_by_name", "kernels_launched", "cpu_fallbacks", "flushes", "hbm_bytes",
                "hbm_bytes_in_use", "simulated_time_ns", "device_busy_ns", "h2d_bytes"]:
        assert key in m, key
    assert m["ops"] >= 2 and m["kernels_launched"] >= 2
    assert m["hbm_bytes"] > 0 and m["hbm_bytes_in_use"] >= 16 * 16 * 4
    assert m["simulated_time_ns"] > 0 and m["h2d_bytes"] == 16 * 16 * 4
    assert "OperatorCalls" in tpuemu.metrics_report()


@pytest.mark.cpu_fallback(
    "aten::_int_mm", reason="what this test checks: the fallback's warning and counts"
)
def test_cpu_fallback_warns_once_and_counts():
    # int8 matrix products are not computed on the tpu: an operator no other test calls, so
    # the warning is still due.
    a = torch.randint(-8, 8, (32, 16), dtype=torch.int8)
    b = torch.randint(-8, 8, (16, 8), dtype=torch.int8)
    ta, tb = a.to("tpu"), b.to("tpu")
    tpuemu.reset_metrics()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = torch._int_mm(ta, tb)
        torch._int_mm(ta, tb)
    msgs = [str(i.message) for i in w if "aten::_int_mm" in str(i.message)]
    assert len(msgs) == 1, msgs  # once per overload
    assert "runs on the CPU" in msgs[0]
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), torch._int_mm(a, b))
    assert tpuemu.metrics()["cpu_fallbacks"] == {"aten::_int_mm": 2}


def test_fallback_off_is_an_error_naming_the_overload():
    r = run_python(
        "import torch, tpuemu\n"
        "x = torch.ones(3, device='tpu')\n"
        "a = torch.ones(32, 8, dtype=torch.int8).to('tpu')\n"
        "try:\n    torch._int_mm(a, a[:8])\nexcept NotImplementedError as e:\n    print('ERR', e)\n"
        "print('still', (x + 1).sum().item())",
        {"TORCH_TPU_CPU_FALLBACK": "0"},
    )
    assert "ERR" in r.stdout and "aten::_int_mm" in r.stdout and "TORCH_TPU_CPU_FALLBACK" in r.stdout
    assert "still 6.0" in r.stdout


@pytest.mark.cpu_fallback("aten::_int_mm", reason="the trace shows a CPU fallback's span")
def test_trace(tmp_path):
    path = tmp_path / "step.json"
    x = torch.randn(8, 8).to("tpu")
    with tpuemu.trace(path):
        y = torch.nn.functional.relu(x @ x) + 1
        torch._int_mm(torch.ones(32, 8, dtype=torch.int8).to("tpu"),
                      torch.ones(8, 8, dtype=torch.int8).to("tpu"))
        y.sum().item()
    t = json.loads(path.read_text())
    events = t["traceEvents"] if isinstance(t, dict) else t
    names = {e.get("args", {}).get("name") for e in events if e.get("ph") == "M"}
    assert {"python", "aten", "cpu fallback"} <= names, names
    spans = [e for e in events if e.get("ph") == "X"]
    span_names = {e["name"] for e in spans}
    assert "aten::mm" in span_names and "aten::_int_mm" in span_names
    assert any("relu" in n for n in span_names)
    assert len(spans) > 10


def test_chip_selection(tmp_path):
    r = run_python("import tpuemu; tpuemu.set_chip('v6e'); import torch; torch.ones(1, device='tpu').item();"
                   "print(tpuemu.chip_info()['generation'])")
    assert "v6e" in r.stdout.lower()
    r = run_python("import tpuemu, torch; torch.ones(1, device='tpu').item(); print(tpuemu.chip())",
                   {"TPUEMU_CHIP": "v5p"})
    assert r.stdout.strip() == "v5p"
    toml = tmp_path / "mine.toml"
    toml.write_text('base = "v4"\nname = "my-v4"\n')
    r = run_python(textwrap.dedent(f"""
        import tpuemu, torch
        tpuemu.set_chip({str(toml)!r})
        torch.ones(1, device='tpu').item()
        try:
            tpuemu.set_chip('v5e')
        except ValueError as e:
            print('late:', e)
        print(tpuemu.chip_info()['generation'])
    """))
    assert "late:" in r.stdout and "already runs" in r.stdout
    with pytest.raises(ValueError, match="unknown chip"):
        tpuemu.set_chip("v99")
