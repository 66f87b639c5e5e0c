"""PyTorch's device-generic test machinery over the OpInfo entries the backend implements
(opt-in: not part of scripts/test.sh, it takes minutes).

    scripts/python.sh -m pytest python/tests/device_generic.py -q [-x] [-k NAME]

``instantiate_device_type_tests`` instantiates the class for the CPU and for PyTorch's
PrivateUse1 test base (device "tpu"); for every OpInfo whose aten name the backend registers,
each sample input runs on the tpu and, moved to the CPU, on the CPU (PyTorch's
``test_compare_cpu`` does the same), and the results must agree within the OpInfo's
tolerances. Operators the backend does not take with these arguments run through the CPU
fallback and then agree trivially; ``test_native`` fails those, so its count says how many run
on the device.
"""

import warnings

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

import tpuemu

tpuemu.set_matmul_precision("highest")

_BACKEND = {row[0].split("::")[1].split(".")[0] for row in tpuemu._rust.registry()}
# Factories of uninitialised memory have nothing to compare.
OPS = [
    op
    for op in op_db
    if ((op.aten_name or op.name) in _BACKEND or op.name in _BACKEND) and "empty" not in op.name
]
DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool)


def _to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_cpu(v) for k, v in x.items()}
    return x


def _to_tpu(t):
    """The tensor on the tpu with the same storage layout (views stay views of a copy of their
    whole storage: as_strided samples address it)."""
    if not isinstance(t, torch.Tensor):
        return t
    n = t.untyped_storage().nbytes() // t.element_size()
    whole = t.detach().as_strided((n,), (1,), 0).to("tpu")
    moved = whole.as_strided(t.size(), t.stride(), t.storage_offset())
    return moved.requires_grad_(t.requires_grad)


class TestTpuOpInfo(TestCase):
    def _compare(self, device, dtype, op):
        ran = 0
        # Samples are made on the host (random factories on the device would run through the
        # CPU fallback) and copied with their storage layout.
        for cpu in op.sample_inputs("cpu", dtype, requires_grad=False):
            sample = cpu.transform(_to_tpu)
            want = op(cpu.input, *cpu.args, **cpu.kwargs)
            got = op(sample.input, *sample.args, **sample.kwargs)
            self.assertEqual(_to_cpu(got), want, exact_device=False)
            ran += 1
        return ran

    @ops(OPS, allowed_dtypes=DTYPES)
    def test_compare_cpu(self, device, dtype, op):
        if torch.device(device).type == "cpu":
            self.skipTest("the reference")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._compare(device, dtype, op)

    @ops(OPS, allowed_dtypes=DTYPES)
    def test_native(self, device, dtype, op):
        """Like test_compare_cpu, and no sample needed the CPU fallback."""
        if torch.device(device).type == "cpu":
            self.skipTest("the reference")
        before = tpuemu.metrics()["cpu_fallbacks"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._compare(device, dtype, op)
        after = tpuemu.metrics()["cpu_fallbacks"]
        new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        self.assertEqual(new, {}, msg=f"ran on the CPU: {new}")


instantiate_device_type_tests(TestTpuOpInfo, globals())

if __name__ == "__main__":
    run_tests()
