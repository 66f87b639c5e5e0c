"""pytest plugin: a test suite on the tpu (the ``pytest11`` entry point, so installing the
package enables it).

    pytest --tpu-mode defer           # Strict (default), Debug or DeferAndFuse for the session
    pytest --tpu-no-fallback          # an operator the backend lacks fails its test
    pytest --tpu-check-fallback       # so does any CPU fallback a test does not declare:
    @pytest.mark.cpu_fallback("aten::normal_", reason="...")   # declared
    def test_x(tpu_device): ...       # torch.device("tpu")

At the end of a session that used the device it lists the operators that ran on the CPU (the
fallback), with how many calls; under pytest-xdist (``-n``) the workers' counts are added up in
the controller's summary. Nothing is imported until a test uses the device, so a suite that never
does pays nothing.
"""

from __future__ import annotations

import os
import sys

import pytest

_MODE_VARIABLES = {
    "strict": {},
    "debug": {"TORCH_TPU_LAUNCH_BLOCKING": "1"},
    "defer": {"TORCH_TPU_DEFER_AND_FUSE": "1"},
}


def pytest_addoption(parser):
    group = parser.getgroup("tpuemu", "tpuemu: the emulated TPU device")
    group.addoption(
        "--tpu-mode",
        choices=sorted(_MODE_VARIABLES),
        default=None,
        help="the tpu's eager mode for the session: strict (each operator launched as called), "
        "debug (launch-blocking) or defer (DeferAndFuse)",
    )
    group.addoption(
        "--tpu-no-fallback",
        action="store_true",
        default=False,
        help="fail any test that runs an operator on the CPU because the tpu backend lacks it "
        "(TORCH_TPU_CPU_FALLBACK=0)",
    )
    group.addoption(
        "--tpu-check-fallback",
        action="store_true",
        default=False,
        help="keep the CPU fallback on, but fail a test during which an operator ran on the CPU "
        "unless the test declares it: @pytest.mark.cpu_fallback(\"aten::normal_\", reason=...)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cpu_fallback(*overloads, reason): the operators this test may run on the CPU "
        "(checked with --tpu-check-fallback)",
    )
    mode = config.getoption("--tpu-mode")
    no_fallback = config.getoption("--tpu-no-fallback")
    # Read when tpuemu is imported; set now, before any test module imports torch.
    if mode is not None:
        for var in ("TORCH_TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE",
                    "TPU_LAUNCH_BLOCKING", "TPU_DEFER_AND_FUSE"):
            os.environ.pop(var, None)
        os.environ.update(_MODE_VARIABLES[mode])
    if no_fallback:
        os.environ["TORCH_TPU_CPU_FALLBACK"] = "0"
    tpuemu = sys.modules.get("tpuemu")
    if tpuemu is not None:
        # Imported already (by ``import torch``'s autoload, say): switch it now.
        if mode is not None:
            tpuemu.set_mode(mode)
        if no_fallback:
            tpuemu.set_cpu_fallback(False)
    config.pluginmanager.register(_Fallbacks(config), "tpuemu-fallbacks")


@pytest.fixture
def tpu_device():
    """``torch.device("tpu")`` (importing tpuemu if ``import torch`` did not)."""
    import torch

    import tpuemu  # noqa: F401

    return torch.device("tpu")


class _Fallbacks:
    """Counts the operators that ran on the CPU over the session (tests may reset tpuemu's
    metrics: each reset adds what it clears to the tally first). An xdist worker hands its tally
    to the controller when it finishes."""

    def __init__(self, config):
        self.config = config
        self.counts: dict[str, int] = {}
        self.wrapped = False

    def _wrap(self):
        tpuemu = sys.modules.get("tpuemu")
        if self.wrapped or tpuemu is None:
            return tpuemu
        reset = tpuemu.reset_metrics

        def reset_metrics():
            self._add(tpuemu)
            reset()

        tpuemu.reset_metrics = reset_metrics
        self.reset = reset
        self.wrapped = True
        return tpuemu

    def _add(self, tpuemu):
        self._merge(tpuemu.metrics()["cpu_fallbacks"])

    def _merge(self, counts):
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + n

    def _collect(self):
        """Adds what the metrics hold now to the tally and clears them (so a second call adds
        nothing)."""
        tpuemu = self._wrap()
        if tpuemu is not None:
            self._add(tpuemu)
            self.reset()

    def _total(self) -> dict[str, int]:
        """The session's tally so far, what the metrics hold now included (nothing cleared)."""
        tpuemu = self._wrap()
        total = dict(self.counts)
        if tpuemu is not None:
            for name, n in tpuemu.metrics()["cpu_fallbacks"].items():
                total[name] = total.get(name, 0) + n
        return total

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        check = self.config.getoption("--tpu-check-fallback", default=False)
        before = self._total() if check else {}
        result = yield
        if check:
            after = self._total()
            ran = {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}
            declared = {name for m in item.iter_markers("cpu_fallback") for name in m.args}
            undeclared = {k: n for k, n in ran.items() if k not in declared}
            if undeclared:
                listed = ", ".join(f"{k} ({n} call{'s' if n > 1 else ''})" for k, n in sorted(undeclared.items()))
                pytest.fail(
                    f"ran on the CPU, not the tpu: {listed}; implement it in the backend, or declare "
                    f"it with @pytest.mark.cpu_fallback({', '.join(repr(k) for k in sorted(undeclared))}, "
                    "reason=...)",
                    pytrace=False,
                )
        return result

    def pytest_sessionfinish(self, session):
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:
            # An xdist worker: the controller prints the summary.
            self._collect()
            workeroutput["tpuemu_fallbacks"] = dict(self.counts)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        # xdist's controller, as each worker finishes.
        self._merge(getattr(node, "workeroutput", {}).get("tpuemu_fallbacks", {}))

    def pytest_terminal_summary(self, terminalreporter):
        self._collect()
        if not self.counts:
            return
        terminalreporter.write_sep("-", "operators that ran on the CPU (tpuemu's fallback)")
        for name, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            terminalreporter.write_line(f"{n:8d}  {name}")
