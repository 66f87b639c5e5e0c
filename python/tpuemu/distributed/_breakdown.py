"""Where a rank's simulated step went, from its trace: compute, communication, and the part
of the communication that compute did not hide.

Times are unions of intervals on the chip's timeline (a kernel and a collective in flight at
once count once for each), over the trace's span from its first to its last event:

- ``compute_ns``: some kernel running;
- ``collective_ns``: some collective in flight (the chip's ``collective`` lane);
- ``exposed_collective_ns``: a collective in flight and no kernel running: communication the
  step waits for;
- ``idle_ns``: neither (the chip waiting for the host, or for data);
- ``step_ns``: the whole span.
"""

from __future__ import annotations

import json
from pathlib import Path


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _minus(xs, ys) -> list[tuple[float, float]]:
    """The parts of the (disjoint, sorted) intervals xs outside the (disjoint, sorted) ys."""
    out = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def step_breakdown(trace: str | Path) -> dict:
    """The breakdown (ns, see the module docs) of one rank's trace file."""
    events = json.loads(Path(trace).read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        return {"step_ns": 0.0, "compute_ns": 0.0, "collective_ns": 0.0,
                "exposed_collective_ns": 0.0, "idle_ns": 0.0}
    us = [(e["ts"], e["ts"] + e["dur"]) for e in spans]
    start, end = min(a for a, _ in us), max(b for _, b in us)

    def of(pred):
        return _union([(e["ts"], e["ts"] + e["dur"]) for e in spans
                       if pred(e.get("args", {}).get("track", {}))])

    kernels = of(lambda t: t.get("kind") == "kernel")
    colls = of(lambda t: t.get("kind") == "link" and t.get("link") == "collective")
    busy = _union(kernels + colls)
    exposed = _minus(colls, kernels)
    k = 1e3  # trace times are microseconds
    return {
        "step_ns": (end - start) * k,
        "compute_ns": _length(kernels) * k,
        "collective_ns": _length(colls) * k,
        "exposed_collective_ns": _length(exposed) * k,
        "idle_ns": ((end - start) - _length(busy)) * k,
    }
