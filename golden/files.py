"""Writing golden cases: JSON with sorted keys and ``repr`` floats, safetensors with sorted names
and no metadata, so that regeneration is reproducible byte for byte.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from record import RawCall, Snap, Unsupported, schema_info
from settings import DTYPE_NAMES, FORMAT, SHAPE_ONLY_OPS, TORCH_VERSION
from tolerance import tolerance_for


def fmt_float(x: float) -> Any:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(repr(float(x)))


class FileWriter:
    """Accumulates the cases and tensors of one output file pair."""

    def __init__(self, stem: str) -> None:
        self.stem = stem
        self.tensors: dict[str, Any] = {}
        self.by_content: dict[tuple, str] = {}
        self.ops: dict[str, dict] = {}
        self.cases: list[dict] = []

    def add_tensor(self, t: Any) -> str:
        """Stores a tensor (deduplicated by content within the file) and returns its name."""
        raw = tensor_bytes(t)
        key = (str(t.dtype), tuple(t.shape), raw)
        name = self.by_content.get(key)
        if name is None:
            name = f"t{len(self.tensors)}"
            self.tensors[name] = t
            self.by_content[key] = name
        return name

    def encode(self, v: Any, tag: str) -> Any:
        import torch

        if v is None:
            return None
        if isinstance(v, Snap):
            ref: dict[str, Any] = {"tensor": self.add_tensor(v.data)}
            if v.view is not None:
                size, stride, offset = v.view
                ref["view"] = {"size": size, "stride": stride, "offset": offset}
            if v.source is not None:
                ref["from"] = list(v.source)
            return ref
        if isinstance(v, bool):
            return {"bool": v}
        if isinstance(v, int):
            return {"int": v}
        if isinstance(v, float):
            return {"float": fmt_float(v)}
        if isinstance(v, str):
            return {"str": v}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, torch.layout):
            return {"layout": str(v).removeprefix("torch.")}
        if isinstance(v, torch.device):
            return {"device": v.type}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).removeprefix("torch.")}
        if isinstance(v, (list, tuple)):
            base = tag.rstrip("?")
            if base.startswith("Tensor"):
                return {"tensors": [self.encode(x, "Tensor") for x in v]}
            if all(isinstance(x, bool) for x in v) and base.startswith("bool"):
                return {"bools": list(v)}
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and not base.startswith(
                "float"
            ):
                return {"ints": list(v)}
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                return {"floats": [fmt_float(float(x)) for x in v]}
            raise Unsupported(f"list value {v!r} for type {tag}")
        raise Unsupported(f"value of type {type(v).__name__}")

    def add_case(self, case_id: str, meta: dict, calls: list[RawCall]) -> None:
        encoded = []
        for c in calls:
            name = c.func.name()
            info = self.ops.get(name)
            if info is None:
                info = schema_info(c.func)
                self.ops[name] = info
            args = [self.encode(v, a["type"]) for v, a in zip(c.args, info["arguments"])]
            outs = [
                self.encode(v, r["type"]) for v, r in zip(c.outputs, info["returns"] or [{"type": ""}])
            ]
            call: dict[str, Any] = {"op": name, "args": args, "outputs": outs}
            if name in SHAPE_ONLY_OPS:
                call["compare"] = "shape"
            tol = tolerance_for(c)
            if tol is not None:
                call["tolerance"] = tol
            encoded.append(call)
        case = {"id": case_id, **meta, "calls": encoded}
        self.cases.append(case)

    def write(self, out_dir: Path, extra: dict) -> int:
        """Writes ``<stem>.json`` and ``<stem>.safetensors``; returns the bytes written."""
        out_dir.mkdir(parents=True, exist_ok=True)
        st_name = f"{self.stem}.safetensors"
        doc = {
            "format": FORMAT,
            "kind": "cases",
            "generator": {"script": "golden/generate.py", "torch": TORCH_VERSION},
            "tensors": st_name,
            "ops": self.ops,
            "cases": self.cases,
            **extra,
        }
        text = dumps(doc)
        (out_dir / f"{self.stem}.json").write_text(text)
        blob = safetensors_bytes(self.tensors)
        (out_dir / st_name).write_bytes(blob)
        return len(text) + len(blob)


def _compact(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)


def dumps(doc: dict) -> str:
    """Deterministic JSON: sorted keys, ``repr`` floats, NaN/inf already encoded as strings.

    Top-level keys one per line; the items of top-level lists and objects (cases, ops, index
    entries) one per line, compact, so files stay small and a changed case is a one-line diff.
    """
    lines = ["{"]
    keys = sorted(doc)
    for n, key in enumerate(keys):
        value = doc[key]
        comma = "," if n + 1 < len(keys) else ""
        if isinstance(value, list) and value:
            items = [" " + _compact(x) for x in value]
            lines.append(f"{json.dumps(key)}:[")
            lines.append(",\n".join(items))
            lines.append("]" + comma)
        elif isinstance(value, dict) and value and key in ("ops", "skipped_samples"):
            items = [f" {json.dumps(k)}:{_compact(value[k])}" for k in sorted(value)]
            lines.append(f"{json.dumps(key)}:{{")
            lines.append(",\n".join(items))
            lines.append("}" + comma)
        else:
            lines.append(f"{json.dumps(key)}:{_compact(value)}{comma}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # self-check: the hand-assembled document is valid JSON
    return text


def tensor_bytes(t: Any) -> bytes:
    import torch

    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def safetensors_bytes(tensors: dict[str, Any]) -> bytes:
    """Deterministic safetensors: names sorted by (length, name), no ``__metadata__``.

    Written by hand (the format is an 8-byte little-endian header length, a JSON header, then the
    raw little-endian data) so the bytes do not depend on the safetensors package version.
    """
    header: dict[str, Any] = {}
    chunks = []
    offset = 0
    for name in sorted(tensors, key=lambda n: (len(n), n)):
        t = tensors[name]
        raw = tensor_bytes(t)
        header[name] = {
            "dtype": DTYPE_NAMES[str(t.dtype).removeprefix("torch.")],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)  # align the data to 8 bytes
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)

