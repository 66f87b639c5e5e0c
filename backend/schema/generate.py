"""Writes aten-2.15.0.txt: every ATen operator schema of the pinned PyTorch, one per line, sorted.

The backend takes its operators' schemas (argument names, types, defaults, alias annotations)
from this file instead of typing them by hand; `golden/regenerate.sh --check` regenerates it and
fails when it differs from the committed file.

    python generate.py OUT.txt
"""

import sys

import torch

assert torch.__version__.startswith("2.15.0"), torch.__version__
schemas = sorted({str(s) for s in torch._C._jit_get_all_schemas() if str(s).startswith("aten::")})
text = "".join(s + "\n" for s in schemas)
# Written only when it changed: a new modification time alone makes cargo rebuild the schema
# crate and everything above it (and `scripts/python.sh` the extension) after every check.
try:
    with open(sys.argv[1], encoding="utf-8", newline="") as f:
        same = f.read() == text
except FileNotFoundError:
    same = False
if not same:
    with open(sys.argv[1], "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
