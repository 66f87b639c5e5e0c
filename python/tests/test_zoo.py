"""The model zoo (``tpuemu.zoo``): every architecture's training step on the tpu, with the CPU
fallback off, matches the CPU's step computed with the TPU's matmul numerics, in Strict,
DeferAndFuse and compiled (``python -m tpuemu.zoo`` prints the same as a table)."""

import functools

import pytest

pytest.importorskip("transformers")

from tpuemu.zoo import ENTRIES, MODELS, check  # noqa: E402
from tpuemu.zoo.numerics import TpuMatmulNumerics  # noqa: E402


@functools.lru_cache(maxsize=None)
def _reference(name):
    return check.reference(MODELS[name])


@pytest.mark.parametrize("mode", ["strict", "defer", "compile"])
@pytest.mark.parametrize("name", [e.name for e in ENTRIES])
def test_training_step_matches_the_cpu(name, mode):
    o = check.run(MODELS[name], mode, _reference(name))
    assert o.status == "pass", f"{name} {mode}: {o.status}: {o.detail}"
    assert o.kernels > 0 and o.hbm_bytes > 0
    if mode == "compile":
        done, total = o.graphs.split()[0].split("/")
        assert int(done) >= 1, f"no graph of {name} was compiled: {o.graphs}"


def test_the_zoo_covers_the_architectures_the_issue_names():
    families = {e.family for e in ENTRIES}
    names = {e.name for e in ENTRIES}
    assert len(ENTRIES) >= 20
    assert {"llama", "qwen3", "mistral", "gpt2", "gpt_neox", "opt", "bert", "roberta",
            "distilbert", "bart"} <= names
    assert {"moe", "vision", "audio"} <= families
    assert any(e.cls.startswith(("ResNet", "ConvNext")) for e in ENTRIES)


def test_the_reference_rounds_matmul_operands_to_bf16():
    import torch

    a = torch.tensor([[1.0 + 2.0**-10]])  # not a bf16 value: rounds to 1.0
    b = torch.tensor([[3.0]])
    assert float(a @ b) != 3.0
    with TpuMatmulNumerics():
        assert float(a @ b) == 3.0
