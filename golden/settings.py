"""Settings of the golden-case generator (``generate.py``): formats, limits, the OpInfo entries
skipped and why, tolerance classes, dtype names, seeds.
"""

from __future__ import annotations

import zlib


FORMAT = "tpuemu-golden/1"
TORCH_VERSION = "2.15.0"

# ---------------------------------------------------------------------------------------------
# Limits that keep the committed cases small (a few MB). See golden/README.md, "Size limits".
# ---------------------------------------------------------------------------------------------

#: Samples kept per OpInfo entry and dtype. float32 gets the most; other dtypes one or two.
SAMPLES_PER_DTYPE = {
    "float32": 3,
    "bfloat16": 2,
    "float16": 1,
    "int64": 1,
    "int32": 1,
    "bool": 1,
}
#: Samples looked at (per entry and dtype) while searching for ones within the limits.
SCAN_SAMPLES = 32
#: Largest tensor (elements) a sample may feed to or get from any call.
MAX_TENSOR_NUMEL = 1024
#: Largest number of elements over all tensors stored for one case.
MAX_CASE_NUMEL = 6144
#: Largest number of ATen calls one sample may make.
MAX_CALLS = 24

#: ATen overloads whose outputs are not meaningful to compare (uninitialised memory): the runner
#: checks only their shape and dtype ("compare": "shape").
SHAPE_ONLY_OPS = {
    "aten::empty.memory_format",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::empty_permuted",
    "aten::resize_",
    "aten::set_.source_Storage_storage_offset",
}

#: OpInfo entries skipped as a whole, with the reason written to the index.
SKIP_ENTRIES_PREFIX = {
    "nn.functional.dropout": "random (dropout)",
    "nn.functional.alpha_dropout": "random (dropout)",
    "nn.functional.feature_alpha_dropout": "random (dropout)",
    "nn.functional.rrelu": "random (rrelu samples its slopes)",
    "bernoulli": "random",
    "multinomial": "random",
    "normal": "random",
    "uniform": "random",
    "rand_like": "random",
    "randn_like": "random",
    "randint_like": "random",
    "randint": "random",
    "randn": "random",
    "rand": "random",
    "cauchy": "random",
    "exponential": "random",
    "geometric": "random",
    "log_normal": "random",
    "sparse.": "sparse tensors",
    "to_sparse": "sparse tensors",
    "_segment_reduce": "sparse-style segment reduction, internal",
    "linalg.": "LAPACK linear algebra, not part of the TPU backend's scope",
    "fft.": "FFT produces complex tensors",
    "stft": "complex output",
    "istft": "complex input",
    "view_as_complex": "complex output",
    "view_as_real": "complex input",
    "complex": "complex output",
    "polar": "complex output",
    "nn.functional.ctc_loss": "CUDA/cudnn-oriented loss, large samples",
    "cuda.": "needs CUDA",
    "jiterator_": "needs CUDA (jiterator)",
    "nonzero_static": "data-dependent output size with padding",
    "item": "returns a Python number through .item(), not a tensor op",
}

#: Matrix-unit ops: on the TPU, float32 (and float16) inputs go through the MXU at DEFAULT
#: precision, i.e. ONE bf16 pass (inputs rounded to bf16, f32 accumulation). Their tolerance is an
#: error bound derived from the inputs (see ``mxu_tolerance`` and golden/README.md).
MXU_BILINEAR = {
    # op: (index of the left operand, index of the right operand, index of the alpha argument)
    "aten::mm": (0, 1, None),
    "aten::bmm": (0, 1, None),
    "aten::dot": (0, 1, None),
    "aten::vdot": (0, 1, None),
    "aten::mv": (0, 1, None),
    "aten::addmm": (1, 2, "alpha"),
    "aten::baddbmm": (1, 2, "alpha"),
    "aten::addmv": (1, 2, "alpha"),
    "aten::addbmm": (1, 2, "alpha"),
    "aten::convolution": (0, 1, None),
    "aten::_convolution": (0, 1, None),
}
MXU_ATTENTION = {
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math",
}
#: Random ops that are deterministic when their dropout probability is zero.
RANDOM_UNLESS_DROPOUT_ZERO = MXU_ATTENTION

#: Hand-written tolerance exceptions: (overload, dtype) -> (rtol, atol, why). Applied by the
#: generator so they survive regeneration. Keep each one justified.
TOLERANCE_EXCEPTIONS: dict[tuple[str, str], tuple[float, float, str]] = {}

DTYPE_NAMES = {
    "float32": "F32",
    "bfloat16": "BF16",
    "float16": "F16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def seed_for(*parts: str) -> int:
    """A seed derived from names only (never from iteration order), stable across runs."""
    return zlib.crc32("/".join(parts).encode()) & 0x7FFFFFFF


def seed_all(seed: int) -> None:
    """Seeds every generator OpInfo samples may draw from: torch, Python's, NumPy's."""
    import random

    import numpy
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)
