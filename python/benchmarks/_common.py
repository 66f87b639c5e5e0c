"""What the benchmark scripts share (they run as scripts: this directory is on ``sys.path``)."""

from __future__ import annotations

import argparse


def chain(x, y, n):
    """``n`` dependent operators: ``y = y + x``, ``n`` times."""
    for _ in range(n):
        y = y + x
    return y


def positive(text: str) -> int:
    """A positive integer argument (``argparse`` type)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n
