"""``torch.fft`` on the device.

Every ``torch.fft`` function (and ``stft``/``istft``) is built by PyTorch from three primitives:
``aten::_fft_r2c`` (real to complex, one-sided on the last transformed dimension),
``aten::_fft_c2c`` and ``aten::_fft_c2r`` (Hermitian complex to real). Here they are discrete
Fourier transforms on the matrix units, one dimension at a time, the TPU way (XLA on TPU lowers
small FFTs to matrix products too): a complex tensor is its pairs of float32
(``view_as_real``), and the transform of ``n`` points along a dimension is the product of the
real and imaginary parts with an ``n x m`` table of cosines and sines. The tables are computed
once per size in float64 on the host and rounded to float32 (a compiler's constants); the
products run at the "highest" matmul precision (float32 operands in six bf16 passes), so the
result is float32-accurate: each output is a sum of ``n`` exact products. The cost is that of a
dense DFT, ``O(n^2)`` per dimension (not yet split into radix stages: a transform of more than
``MAX_POINTS`` points is refused rather than run slowly).

Only float32 (complex64) is computed: PyTorch's CPU kernels refuse bfloat16 and float16 the same
way (``Unsupported dtype``), and float64/complex128 are not computed on the tpu (refused, never
downcast).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from . import _rust

MAX_POINTS = 8192
_TABLES: dict = {}
_LIB = None


@contextlib.contextmanager
def _highest():
    previous = _rust.matmul_precision()
    _rust.set_matmul_precision("highest")
    try:
        yield
    finally:
        _rust.set_matmul_precision(previous)


def _check(x: torch.Tensor, op: str, complex_in: bool) -> None:
    want = torch.complex64 if complex_in else torch.float32
    if x.dtype == want:
        return
    if x.dtype in (torch.float64, torch.complex128):
        raise NotImplementedError(
            f"tpuemu: aten::{op} of {x.dtype}: float64 and complex128 are not computed on the "
            "tpu (refused, never downcast); transform float32 tensors, or move this one to the "
            "CPU")
    raise RuntimeError(f"Unsupported dtype {str(x.dtype).replace('torch.', '').title()}")


def _table(period: int, rows: int, cols: int, device, weights: str = ""):
    """cos and sin of 2 pi j k / period for j < rows, k < cols, as float32 on the device;
    ``weights="hermitian"`` scales row k by how many times bin k stands in the full spectrum of
    ``period`` points (1 for 0 and period / 2, else 2)."""
    if max(rows, cols, period) > MAX_POINTS:
        raise NotImplementedError(
            f"tpuemu: an FFT of {max(rows, cols, period)} points: transforms of more than "
            f"{MAX_POINTS} points along a dimension are not on the device yet (dense DFTs)")
    key = (period, rows, cols, str(device), weights)
    hit = _TABLES.get(key)
    if hit is None:
        j = np.arange(rows, dtype=np.int64)[:, None]
        k = np.arange(cols, dtype=np.int64)[None, :]
        angle = 2.0 * np.pi * ((j * k) % period).astype(np.float64) / period
        c, s = np.cos(angle), np.sin(angle)
        if weights == "hermitian":
            w = np.full((rows, 1), 2.0)
            w[0] = 1.0
            if period % 2 == 0 and period // 2 < rows:
                w[period // 2] = 1.0
            c, s = c * w, s * w
        hit = tuple(torch.from_numpy(t.astype(np.float32)).to(device) for t in (c, s))
        _TABLES[key] = hit
    return hit


def _along(re, im, d: int, rows: int, cols: int, period: int, sign: int, weights: str = ""):
    """The transform of (re, im) along dimension ``d`` (its first ``rows`` entries) into ``cols``
    outputs: sum_j x_j e^{sign 2 pi i j k / period}. ``im`` may be None (a real input)."""
    re = re.movedim(d, -1).narrow(-1, 0, rows)
    im = None if im is None else im.movedim(d, -1).narrow(-1, 0, rows)
    c, s = _table(period, rows, cols, re.device, weights)
    # (re + i im)(cos + i sign sin) = re cos - sign im sin + i (im cos + sign re sin)
    with _highest():
        out_re = re @ c
        out_im = re @ s
        if sign < 0:
            out_im = -out_im
        if im is not None:
            out_re = out_re - sign * (im @ s)
            out_im = out_im + im @ c
    return out_re.movedim(-1, d), out_im.movedim(-1, d)


def _scale(n: int, normalization: int) -> float:
    # PyTorch's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n.
    return {0: 1.0, 1: 1.0 / math.sqrt(n), 2: 1.0 / n}[normalization]


def _dims(x: torch.Tensor, dim) -> list[int]:
    return [d % x.dim() for d in dim] if x.dim() else []


def _complex(re, im, scale: float) -> torch.Tensor:
    if scale != 1.0:
        re, im = re * scale, im * scale
    return torch.complex(re.contiguous(), im.contiguous())


def fft_r2c(self, dim, normalization, onesided):
    _check(self, "_fft_r2c", False)
    dims = _dims(self, dim)
    if not dims:
        return _complex(self, torch.zeros_like(self), 1.0)
    last = dims[-1]
    n = self.shape[last]
    n_out = n // 2 + 1 if onesided else n
    re, im = _along(self, None, last, n, n_out, n, -1)
    for d in dims[:-1]:
        m = self.shape[d]
        re, im = _along(re, im, d, m, m, m, -1)
    count = math.prod(self.shape[d] for d in dims)
    return _complex(re, im, _scale(count, normalization))


def _parts(x: torch.Tensor):
    """The real and imaginary parts of a complex tensor, as float32 views (a conjugate view's
    imaginary part negated: exact)."""
    if x.is_conj():
        pairs = torch.view_as_real(x.conj())
        return pairs.select(-1, 0), -pairs.select(-1, 1)
    pairs = torch.view_as_real(x)
    return pairs.select(-1, 0), pairs.select(-1, 1)


def fft_c2c(self, dim, normalization, forward):
    _check(self, "_fft_c2c", True)
    dims = _dims(self, dim)
    re, im = _parts(self)
    sign = -1 if forward else 1
    for d in dims:
        m = self.shape[d]
        re, im = _along(re, im, d, m, m, m, sign)
    count = math.prod(self.shape[d] for d in dims) if dims else 1
    return _complex(re, im, _scale(count, normalization))


def fft_c2r(self, dim, normalization, last_dim_size):
    _check(self, "_fft_c2r", True)
    dims = _dims(self, dim)
    re, im = _parts(self)
    for d in dims[:-1]:
        m = self.shape[d]
        re, im = _along(re, im, d, m, m, m, 1)
    last = dims[-1]
    n = int(last_dim_size)
    bins = min(n // 2 + 1, self.shape[last])
    # The Hermitian spectrum's real inverse: bin k counted as often as it stands in the full
    # spectrum; the imaginary parts of bins 0 and n/2 fall out (their sines are 0).
    out, _ = _along(re, im, last, bins, n, n, 1, weights="hermitian")
    sizes = [self.shape[d] for d in dims[:-1]] + [n]
    scale = _scale(math.prod(sizes), normalization)
    return out * scale if scale != 1.0 else out.contiguous()


def register() -> None:
    """Registers the three primitives for the tpu (once)."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_fft_r2c", fft_r2c, "PrivateUse1")
    lib.impl("_fft_c2c", fft_c2c, "PrivateUse1")
    lib.impl("_fft_c2r", fft_c2r, "PrivateUse1")
    _LIB = lib
