"""Compares regenerated golden cases with the committed ones (golden/regenerate.sh --check).

Everything must be byte for byte the same except floating-point tensor values, which may differ
by rounding: a few of PyTorch's CPU kernels (MKL's vector math and LAPACK, oneDNN's
convolutions) pick code paths by the host CPU even with ATEN_CPU_CAPABILITY=default and
MKL_CBWR=COMPATIBLE, so two x86-64 machines can disagree in the last bits (measured: sqrt,
gelu, cdist, cholesky_inverse/solve, local_response_norm and conv_transpose1d/2d/3d, by at
most 1.3 units of rounding of the tensor's largest magnitude). Such values are accepted within
RTOL units of rounding of that magnitude; dtypes, shapes, integer and boolean values, metadata
and every other file must be identical.

Usage: compare_cases.py PATH... (paths of modified .safetensors files, relative to the
repository root; the committed version is read with `git show HEAD:PATH`). Exit 1 on a
difference beyond rounding, naming the file, tensor and difference.
"""

import subprocess
import sys

import torch
from safetensors.torch import load

RTOL = 4  # units of rounding (eps) of the tensor's largest magnitude


def committed(path: str) -> bytes:
    return subprocess.run(["git", "show", f"HEAD:{path}"], capture_output=True, check=True).stdout


def metadata(raw: bytes) -> dict:
    # The JSON header: 8-byte length, then the header (tensor names, dtypes, shapes, metadata).
    n = int.from_bytes(raw[:8], "little")
    import json

    header = json.loads(raw[8 : 8 + n])
    return {k: (v if k == "__metadata__" else (v["dtype"], v["shape"])) for k, v in header.items()}


def compare(path: str) -> list[str]:
    old_raw = committed(path)
    with open(path, "rb") as f:
        new_raw = f.read()
    if metadata(old_raw) != metadata(new_raw):
        return [f"{path}: tensor names, dtypes, shapes or metadata differ"]
    old, new = load(old_raw), load(new_raw)
    errors = []
    for name, a in old.items():
        b = new[name]
        if torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                 and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))):
            continue
        if not (a.is_floating_point() or a.is_complex()):
            errors.append(f"{path}: {name} ({a.dtype}) differs")
            continue
        if a.is_complex():
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        eps = torch.finfo(a.dtype).eps
        a64, b64 = a.double(), b.double()
        if not torch.equal(a64.isnan(), b64.isnan()) or not torch.equal(a64.isinf(), b64.isinf()):
            errors.append(f"{path}: {name} has NaN or infinities in other places")
            continue
        finite = a64.isfinite()
        if not torch.equal(a64[~finite], b64[~finite]):
            errors.append(f"{path}: {name} has infinities of other signs")
            continue
        a64, b64 = a64[finite], b64[finite]
        scale = max(float(a64.abs().max()), float(b64.abs().max()), torch.finfo(a.dtype).tiny)
        worst = float((a64 - b64).abs().max()) / (eps * scale)
        if worst > RTOL:
            errors.append(f"{path}: {name} ({a.dtype}) differs by {worst:.1f} eps of its scale")
    return errors


def main() -> int:
    errors = [e for p in sys.argv[1:] for e in compare(p)]
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
