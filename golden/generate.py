#!/usr/bin/env python3
"""Generate tpuemu's golden cases from PyTorch itself.

Walks PyTorch's OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``),
runs a few small samples of every entry under a ``TorchDispatchMode`` that records each ATen call
reaching the dispatcher (its overload, every schema argument, the tensors it saw and the outputs it
produced), and writes them in the format described in ``golden/README.md``:

* ``<out>/opinfo/<entry>.json`` + ``<entry>.safetensors``: one file pair per OpInfo entry;
* ``<out>/opinfo/_index.json``: every OpInfo entry visited, with its case count or why it has none;
* ``<out>/explicit/*.{json,safetensors}``: cases written here by hand for overloads of the backend's
  first operator list that OpInfo does not reach (backward ops, CompositeImplicit ops such as
  ``rms_norm`` or ``scaled_dot_product_attention`` called explicitly through ``torch.ops.aten``);
* ``<out>/models/*.{json,safetensors}``: an MLP, an attention block and a cross-entropy loss, forward
  and backward, as the sequence of ATen calls PyTorch made.

Run it through ``golden/regenerate.sh``, which pins PyTorch 2.15.0 in a virtual environment kept
outside the repository. The output is reproducible byte for byte: seeds derive from the entry name
(never from iteration order), PyTorch runs on one thread, JSON is written with sorted keys and
``repr`` floats, and safetensors files are written with sorted names and no metadata.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

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


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------


class Unsupported(Exception):
    """A sample that cannot be recorded (complex values, generators, sparse tensors, ...)."""


@dataclass
class Snap:
    """A tensor as a call saw it: storage copy plus view, or a plain contiguous copy."""

    data: Any  # torch.Tensor: the contiguous data to store (1-D storage when `view` is set)
    view: tuple[list[int], list[int], int] | None = None  # size, stride, storage offset
    source: tuple[int, ...] | None = None  # (call, output[, element]) that produced it


@dataclass
class RawCall:
    func: Any  # torch._ops.OpOverload
    args: list[Any]  # one per schema argument, tensors replaced by Snap
    outputs: list[Any]  # one per schema return, tensors replaced by Snap
    originals: list[Any]  # the live argument values (for tolerance bounds)
    propagated: dict | None = None  # a model case's tolerance for upstream MXU rounding


class Recorder:
    """Collects the ATen calls of one sample (used inside ``RecordMode``)."""

    def __init__(self, max_calls: int = MAX_CALLS) -> None:
        self.max_calls = max_calls
        self.calls: list[RawCall] = []
        self.produced: dict[int, tuple[int, ...]] = {}  # id(tensor) -> where it came from
        self.keep: list[Any] = []  # keeps produced tensors alive so ids stay unique

    def snap(self, t: Any, materialize: bool = False) -> Snap:
        import torch

        if t.is_sparse or t.layout != torch.strided:
            raise Unsupported("sparse or non-strided tensor")
        if t.is_complex():
            raise Unsupported("complex tensor")
        if str(t.dtype).removeprefix("torch.") not in DTYPE_NAMES:
            raise Unsupported(f"dtype {t.dtype}")
        if t.numel() > MAX_TENSOR_NUMEL:
            raise Unsupported(f"tensor of {t.numel()} elements exceeds {MAX_TENSOR_NUMEL}")
        source = self.produced.get(id(t))
        t = t.detach()
        storage_numel = t.untyped_storage().nbytes() // t.element_size()
        plain = t.is_contiguous() and t.storage_offset() == 0 and storage_numel == t.numel()
        if materialize or plain:
            return Snap(t.contiguous().clone(), None, source)
        if storage_numel <= max(4 * t.numel(), 64):
            view = (list(t.shape), list(t.stride()), t.storage_offset())
            if source is not None:
                # An earlier call's output: storage outside the view may be uninitialised memory,
                # so store zeros there (the view's own elements are what the call produced).
                full = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (storage_numel,), (1,))
                reach = torch.arange(storage_numel).as_strided(t.shape, t.stride(), t.storage_offset())
                reach = reach.reshape(-1)
                base = torch.zeros(storage_numel, dtype=t.dtype)
                base[reach] = full[reach]
                return Snap(base, view, source)
            # A sample input: keep the whole storage (as_strided may read outside the view).
            base = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (storage_numel,), (1,))
            return Snap(base.clone(), view, source)
        # A small view of a big storage: keep the values, drop the view (documented).
        return Snap(t.contiguous().clone(), None, source)

    def snap_value(self, v: Any, materialize: bool = False) -> Any:
        import torch

        if isinstance(v, torch.Tensor):
            return self.snap(v, materialize)
        if isinstance(v, (list, tuple)):
            return [self.snap_value(x, materialize) for x in v]
        if isinstance(v, torch.Generator):
            raise Unsupported("takes a random generator")
        if isinstance(v, complex):
            raise Unsupported("complex scalar")
        return v

    def record(self, func: Any, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        """Snapshots the arguments, runs the call, snapshots the outputs, returns the result."""
        import torch

        name = func.name()
        if torch.Tag.nondeterministic_seeded in func.tags:
            if not (name in RANDOM_UNLESS_DROPOUT_ZERO and _dropout_p(func, args, kwargs) == 0.0):
                raise Unsupported(f"random op {name}")
        if len(self.calls) >= self.max_calls:
            raise Unsupported(f"more than {self.max_calls} ATen calls")
        full = normalize_args(func, args, kwargs)
        snapped = [self.snap_value(v) for v in full]
        result = run()
        if name in SHAPE_ONLY_OPS and isinstance(result, torch.Tensor) and name != "aten::resize_":
            # Uninitialised memory: zero it so later calls that read it (fill_, copy_ into it) are
            # reproducible. Its own output is compared by shape only.
            result.zero_()
        outs = list(result) if isinstance(result, tuple) else [result]
        if len(func._schema.returns) == 0:
            outs = []
        index = len(self.calls)
        out_snaps = []
        for i, o in enumerate(outs):
            out_snaps.append(self.snap_value(o, materialize=True))
            if isinstance(o, torch.Tensor):
                self.produced[id(o)] = (index, i)
                self.keep.append(o)
            elif isinstance(o, (list, tuple)):
                for j, e in enumerate(o):
                    if isinstance(e, torch.Tensor):
                        self.produced[id(e)] = (index, i, j)
                        self.keep.append(e)
        self.calls.append(RawCall(func, snapped, out_snaps, full))
        return result


def _dropout_p(func: Any, args: tuple, kwargs: dict) -> float | None:
    for i, a in enumerate(func._schema.arguments):
        if a.name == "dropout_p":
            if i < len(args):
                return float(args[i])
            return float(kwargs.get("dropout_p", a.default_value if a.has_default_value() else 0.0))
    return None


def normalize_args(func: Any, args: tuple, kwargs: dict) -> list[Any]:
    """Every schema argument in schema order, defaults filled in."""
    types = [a["type"] for a in schema_info(func)["arguments"]]
    out = []
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        elif a.has_default_value():
            out.append(_enum_default(a.default_value, types[i]))
        else:
            out.append(None)
        # ``int[2] padding=0`` or a call passing one int for an ``int[2]``: expand to the list.
        if a.N and isinstance(out[-1], int) and not isinstance(out[-1], bool) and "List" in str(a.type):
            out[-1] = [out[-1]] * a.N
    return out


#: c10's enum numbering, which the schema's defaults use (``ScalarType? dtype=long`` -> 4).
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 11: "bool", 15: "bfloat16"}
MEMORY_FORMATS = {0: "contiguous_format", 1: "preserve_format", 2: "channels_last", 3: "channels_last_3d"}
LAYOUTS = {0: "strided"}


def _enum_default(value: Any, ty: str) -> Any:
    """A schema default for an enum-typed argument arrives as an int: make it the enum."""
    import torch

    if not isinstance(value, int) or isinstance(value, bool):
        return value
    base = ty.rstrip("?")
    table = {"ScalarType": SCALAR_TYPES, "MemoryFormat": MEMORY_FORMATS, "Layout": LAYOUTS}.get(base)
    if table is None:
        return value
    if value not in table:
        raise Unsupported(f"{base} default {value}")
    return getattr(torch, table[value])


def make_mode(recorder: Recorder):
    from torch.utils._python_dispatch import TorchDispatchMode

    class RecordMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            return recorder.record(func, args, kwargs, lambda: func(*args, **kwargs))

    return RecordMode()


def record_explicit(recorder: Recorder, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Records one call exactly as given, without the dispatch mode (for CompositeImplicit ops
    such as ``aten::rms_norm`` that never reach the dispatcher's Python key themselves)."""
    return recorder.record(func, args, kwargs, lambda: func(*args, **kwargs))


# ---------------------------------------------------------------------------------------------
# Encoding into the file format
# ---------------------------------------------------------------------------------------------


_SCHEMA_CACHE: dict[str, dict] = {}


def schema_info(func: Any) -> dict:
    """The op-table entry: schema string, argument names and type tags, returns (cached)."""
    schema = str(func._schema)
    if schema not in _SCHEMA_CACHE:
        _SCHEMA_CACHE[schema] = _schema_info(func, schema)
    return _SCHEMA_CACHE[schema]


def _schema_info(func: Any, schema: str) -> dict:
    arg_text, ret_text = _split_schema(schema)
    types = [_type_and_name(a)[0] for a in _split_top(arg_text) if a.strip() != "*"]
    args = []
    for a, ty in zip(func._schema.arguments, types, strict=True):
        entry: dict[str, Any] = {"name": a.name, "type": ty}
        if a.alias_info is not None and a.alias_info.is_write:
            entry["mutable"] = True
        if a.kwarg_only:
            entry["kwarg_only"] = True
        args.append(entry)
    rets = []
    ret_text = ret_text.strip()
    if ret_text.startswith("(") and ret_text.endswith(")"):
        ret_text = ret_text[1:-1]
    for r in _split_top(ret_text):
        ty, name = _type_and_name(r)
        rets.append({"name": name, "type": ty})
    return {"schema": schema, "arguments": args, "returns": rets}


def _split_schema(schema: str) -> tuple[str, str]:
    """``aten::f.o(ARGS) -> RETS`` into ARGS and RETS."""
    open_at = schema.index("(")
    depth = 0
    for i in range(open_at, len(schema)):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(schema[i], 0)
        if depth == 0:
            return schema[open_at + 1 : i], schema[i + 1 :].split("->", 1)[1]
    raise ValueError(f"unbalanced schema {schema}")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _type_and_name(arg: str) -> tuple[str, str]:
    """``Tensor(a!)[] out=None`` -> (``Tensor[]``, ``out``); ``int[1]?`` -> ``int[]?``."""
    import re

    decl = arg.split("=", 1)[0].strip()
    ty, _, name = decl.rpartition(" ") if " " in decl else (decl, "", "")
    ty = re.sub(r"\([^)]*\)", "", ty)  # alias annotations
    ty = re.sub(r"\[\d+\]", "[]", ty)  # fixed list sizes
    return ty, name


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


# ---------------------------------------------------------------------------------------------
# Tolerances
# ---------------------------------------------------------------------------------------------

#: torch.testing.assert_close defaults (rtol, atol).
DEFAULT_TOL = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}
#: Unit roundoff of bf16 (8 significant bits, round to nearest even).
BF16_U = 2.0**-8
F32_U = 2.0**-24


def tolerance_for(c: RawCall) -> dict | None:
    """The per-call tolerance exception, or None for the torch.testing default."""
    import torch

    name = c.func.name()
    out_dtype = next(
        (str(o.data.dtype).removeprefix("torch.") for o in c.outputs if isinstance(o, Snap)), None
    )
    if (name, out_dtype) in TOLERANCE_EXCEPTIONS:
        rtol, atol, why = TOLERANCE_EXCEPTIONS[(name, out_dtype)]
        return {"rtol": rtol, "atol": atol, "why": why}
    if out_dtype not in ("float32", "float16", "bfloat16"):
        return None
    own = None
    try:
        with torch.no_grad():
            if name in MXU_BILINEAR and out_dtype in ("float32", "float16"):
                own = mxu_tolerance(c, out_dtype)
            elif name in MXU_ATTENTION:
                own = attention_tolerance(c, out_dtype)
    except Exception:  # a bound that cannot be computed falls back to the default
        own = None
    # A model case's call after matrix-unit products: the larger of its own bound and the
    # propagated one (which, for a product, includes its own operands' rounding).
    if c.propagated is not None and (own is None or c.propagated["atol"] > own["atol"]):
        return c.propagated
    return own


def _round(x: float) -> float:
    """Round a bound up to 3 significant digits so the JSON stays short and stable."""
    if x == 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(abs(x))) - 2
    return math.ceil(x / 10**e) * 10**e if x > 0 else x


def _bf16(t):
    """``t`` rounded to bf16 (round to nearest even), as the MXU reads it, back in float64."""
    import torch

    return t.to(torch.bfloat16).double()


def mxu_tolerance(c: RawCall, out_dtype: str) -> dict | None:
    """The error of one bf16 pass, computed from the inputs: the largest difference between the
    product of the bf16-rounded operands and the exact product (both in float64), plus a bound
    on what f32 accumulation adds (k * 2^-24 * max sum|a||b|). A kernel off by more than the
    effect of rounding its inputs to bf16 fails."""
    import torch

    name = c.func.name()
    li, ri, alpha_name = MXU_BILINEAR[name]
    a, b = c.originals[li], c.originals[ri]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    alpha = 1.0
    if alpha_name is not None:
        for v, arg in zip(c.originals, c.func._schema.arguments):
            if arg.name == alpha_name and v is not None:
                alpha = abs(float(v))
    a64, b64 = a.detach().double(), b.detach().double()
    aa, bb = a64.abs(), b64.abs()

    def product(x, y):
        if name in ("aten::convolution", "aten::_convolution"):
            args = list(c.originals)
            args[0], args[1], args[2] = x, y, None
            return torch.ops.aten.convolution(*args[:9])
        if name in ("aten::dot", "aten::vdot"):
            return (x * y).sum().reshape(1)
        if name == "aten::addbmm":
            return (x @ y).sum(0)
        return x @ y

    if a64.numel() == 0 or b64.numel() == 0:
        return None
    exact, rounded, sums = product(a64, b64), product(_bf16(a64), _bf16(b64)), product(aa, bb)
    if name in ("aten::convolution", "aten::_convolution"):
        k = bb[0].numel()
    elif name in ("aten::dot", "aten::vdot"):
        k = aa.numel()
    elif name == "aten::addbmm":
        k = aa.shape[-1] * aa.shape[0]
    else:
        k = aa.shape[-1]
    d = float((rounded - exact).abs().max()) if exact.numel() else 0.0
    s = float(sums.max()) if sums.numel() else 0.0
    atol = _round(alpha * (d + k * F32_U * s) + DEFAULT_TOL[out_dtype][1])
    return {
        "rtol": DEFAULT_TOL[out_dtype][0],
        "atol": atol,
        "why": "MXU at DEFAULT precision is one bf16 pass: atol is the inputs' bf16 rounding "
        "effect on this product, max|bf16(a)bf16(b)-ab|, plus k*2^-24*max(sum|a||b|) for the f32 "
        "accumulation, plus atol0 (golden/README.md)",
    }


def bf16_matmul_mode():
    """A dispatch mode that rounds the float32/float16 operands of the matrix-unit operators to
    bf16 (and back) before running them: the TPU's DEFAULT precision, on the CPU (the products
    of bf16 values are exact in float32, which accumulates them, as the MXU does)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    def rounded(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.dtype in (torch.float32, torch.float16):
            return a.to(torch.bfloat16).to(a.dtype)
        return a

    class Bf16Matmuls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.name()
            if name in MXU_BILINEAR:
                li, ri, _ = MXU_BILINEAR[name]
                args = tuple(rounded(a) if i in (li, ri) else a for i, a in enumerate(args))
            elif name in MXU_ATTENTION:
                args = tuple(rounded(a) if i < 3 else a for i, a in enumerate(args))
            return func(*args, **kwargs)

    return Bf16Matmuls()


def _float_snaps(outputs: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for o in outputs:
        if isinstance(o, (list, tuple)):
            flat.extend(_float_snaps(list(o)))
        elif isinstance(o, Snap) and o.data.is_floating_point():
            flat.append(o)
    return flat


def propagate_tolerances(exact: list[RawCall], rounded: list[RawCall]) -> None:
    """Gives each call of a model case whose outputs moved when the matrix-unit operands were
    rounded to bf16 (``rounded``: the same calls under ``bf16_matmul_mode``) the tolerance ``atol
    = 2 * max|moved| + atol0`` (``tolerance_for`` keeps a product's own bound when larger)."""
    import torch

    if [c.func for c in exact] != [c.func for c in rounded]:
        raise Unsupported("the model made different calls with bf16-rounded matrix products")
    for c, r in zip(exact, rounded):
        moved, dtype = 0.0, None
        for a, b in zip(_float_snaps(c.outputs), _float_snaps(r.outputs)):
            x, y = a.data.double(), b.data.double()
            if x.shape != y.shape or x.numel() == 0:
                continue
            d = (x - y).abs()
            d = torch.where(torch.isnan(x) & torch.isnan(y), torch.zeros_like(d), d)
            d = torch.where(x == y, torch.zeros_like(d), d)  # equal infinities
            moved = max(moved, float(d.max()))
            dtype = str(a.data.dtype).removeprefix("torch.")
        if moved > 0 and dtype in DEFAULT_TOL:
            rtol, atol0 = DEFAULT_TOL[dtype]
            c.propagated = {
                "rtol": rtol,
                "atol": _round(2 * moved + atol0),
                "why": "model case: the calls before it include matrix-unit products at DEFAULT "
                "precision; atol is twice how far its outputs move when those products' operands "
                "are rounded to bf16 (the model rerun that way), plus atol0 (golden/README.md)",
            }


def attention_tolerance(c: RawCall, out_dtype: str) -> dict | None:
    """Attention's error on the MXU, computed from the inputs: the largest difference between
    attention over bf16-rounded Q, K, V (scale applied before or after the rounding, in float64)
    and exact attention, plus one bf16 rounding of the probabilities in the P.V pass (u * max|V|),
    plus one more for a bf16 output, plus atol0. The logsumexp output's bound is the scores'
    difference under the same rounding."""
    import torch

    q, k, v = (x.detach().double() for x in c.originals[:3])
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0:
        return None
    names = [a.name for a in c.func._schema.arguments]
    scale = c.originals[names.index("scale")] if "scale" in names else None
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    mask = c.originals[names.index("attn_mask")] if "attn_mask" in names else None
    causal = bool(c.originals[names.index("is_causal")]) if "is_causal" in names else False
    gqa = k.shape[-3] != q.shape[-3] if q.dim() >= 3 and k.dim() >= 3 else False

    def attend(qq, kk, vv, prescaled):
        if gqa and q.shape[-3] % kk.shape[-3] == 0:
            rep = q.shape[-3] // kk.shape[-3]
            kk, vv = kk.repeat_interleave(rep, dim=-3), vv.repeat_interleave(rep, dim=-3)
        s = qq @ kk.transpose(-2, -1)
        s = s if prescaled else s * scale
        if causal:
            L, S = s.shape[-2], s.shape[-1]
            keep = torch.ones(L, S, dtype=torch.bool).tril()
            s = s.masked_fill(~keep, float("-inf"))
        if mask is not None:
            m = mask.detach()
            s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m.double()
        lse = torch.logsumexp(s, dim=-1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        return p @ vv, lse

    exact, lse = attend(q * scale, k, v, True)
    d, dl = 0.0, 0.0
    for pre in (True, False):
        qq = _bf16(q * scale) if pre else _bf16(q)
        o, l = attend(qq, _bf16(k), _bf16(v), pre)
        d = max(d, float((o - exact).abs().nan_to_num(0.0).max()))
        dl = max(dl, float((l - lse).abs().nan_to_num(0.0).max()))
    vmax = float(v.abs().max())
    extra = BF16_U if out_dtype == "bfloat16" else 0.0
    atol = d + (BF16_U + extra) * vmax + DEFAULT_TOL[out_dtype][1]
    atol = max(atol, dl + DEFAULT_TOL[out_dtype][1])  # the logsumexp output
    return {
        "rtol": DEFAULT_TOL[out_dtype][0],
        "atol": _round(atol),
        "why": "attention on the MXU: Q.K^T and P.V are bf16 passes; atol is the effect of "
        "rounding Q, K, V to bf16 on this attention, plus one bf16 rounding of P (golden/README.md)",
    }


# ---------------------------------------------------------------------------------------------
# Sample descriptions (for humans reading the manifest and the report)
# ---------------------------------------------------------------------------------------------


def describe(v: Any, depth: int = 0) -> str:
    import torch

    if isinstance(v, torch.Tensor):
        dt = str(v.dtype).removeprefix("torch.")
        return f"{dt}{list(v.shape)}" + ("" if v.is_contiguous() else "(strided)")
    if isinstance(v, (list, tuple)):
        if depth > 1 or len(v) > 6:
            return f"[{len(v)} items]"
        return "[" + ", ".join(describe(x, depth + 1) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (int, bool, str)) or v is None:
        return repr(v)
    return str(v).removeprefix("torch.")


def describe_sample(s: Any) -> str:
    parts = [describe(s.input)] + [describe(a) for a in s.args]
    parts += [f"{k}={describe(v)}" for k, v in sorted(s.kwargs.items())]
    text = ", ".join(parts)
    return text if len(text) <= 160 else text[:157] + "..."


# ---------------------------------------------------------------------------------------------
# OpInfo walk
# ---------------------------------------------------------------------------------------------


def entry_stem(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def skip_reason(op: Any) -> str | None:
    """Why a whole entry is skipped: a key of ``SKIP_ENTRIES_PREFIX`` ending in "." matches every
    entry starting with it; any other key matches that entry and its variants."""
    stem = entry_stem(op)
    for prefix, why in SKIP_ENTRIES_PREFIX.items():
        if prefix.endswith("."):
            if stem.startswith(prefix):
                return why
        elif stem == prefix or stem.startswith(prefix + "."):
            return why
    return None


def sample_numel(s: Any) -> int:
    import torch

    total = 0

    def walk(v: Any) -> None:
        nonlocal total
        if isinstance(v, torch.Tensor):
            total += v.numel()
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk([s.input, s.args, s.kwargs])
    return total


def case_numel(calls: list[RawCall]) -> int:
    total = 0

    def walk(v: Any) -> None:
        nonlocal total
        if isinstance(v, Snap):
            total += v.data.numel()
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for c in calls:
        walk(c.args)
        walk(c.outputs)
    return total


def run_sample(op: Any, sample: Any) -> list[RawCall]:
    """Runs one OpInfo sample under the recording mode and returns its calls."""
    recorder = Recorder()
    with make_mode(recorder):
        op(sample.input, *sample.args, **sample.kwargs)
    if not recorder.calls:
        raise Unsupported("reached no ATen call")
    if case_numel(recorder.calls) > MAX_CASE_NUMEL:
        raise Unsupported(f"case stores more than {MAX_CASE_NUMEL} elements")
    return recorder.calls


def spread(items: list, k: int) -> list:
    """Up to ``k`` items spread evenly over the list (first and last included)."""
    if len(items) <= k:
        return items
    if k == 1:
        return items[:1]
    idx = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in idx]


def visit_entry(op: Any, out_dir: Path, log: Callable[[str], None]) -> dict:
    """Writes the cases of one OpInfo entry; returns its index record."""
    import torch

    stem = entry_stem(op)
    record: dict[str, Any] = {"name": op.name, "variant": op.variant_test_name}
    why = skip_reason(op)
    if why is not None:
        record.update(status="skipped", reason=why, cases=0)
        return record
    supported = {str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu")}
    dtypes = [d for d in SAMPLES_PER_DTYPE if d in supported]
    if not dtypes:
        record.update(status="skipped", reason="no CPU dtype among " + ", ".join(SAMPLES_PER_DTYPE), cases=0)
        return record
    writer = FileWriter(stem)
    skipped: dict[str, int] = {}
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        seed = seed_for(stem, dtype_name)
        seed_all(seed)
        found: list[tuple[int, Any, list[RawCall]]] = []
        try:
            samples = op.sample_inputs("cpu", dtype, requires_grad=False)
            for index, sample in enumerate(samples):
                if index >= SCAN_SAMPLES:
                    break
                if sample_numel(sample) > MAX_CASE_NUMEL:
                    skipped[f"{dtype_name}: sample too large"] = skipped.get(f"{dtype_name}: sample too large", 0) + 1
                    continue
                try:
                    calls = run_sample(op, sample)
                except Unsupported as e:
                    key = f"{dtype_name}: {e}"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                except Exception as e:  # the op itself raised: PyTorch rejects this sample
                    key = f"{dtype_name}: PyTorch raised {type(e).__name__}"
                    skipped[key] = skipped.get(key, 0) + 1
                    continue
                found.append((index, sample, calls))
        except Exception as e:  # the sample generator itself failed
            key = f"{dtype_name}: sample_inputs raised {type(e).__name__}"
            skipped[key] = skipped.get(key, 0) + 1
        for index, sample, calls in spread(found, SAMPLES_PER_DTYPE[dtype_name]):
            meta = {
                "source": {"kind": "opinfo", "name": op.name, "variant": op.variant_test_name, "sample": index},
                "dtype": dtype_name,
                "seed": seed,
                "description": describe_sample(sample),
            }
            try:
                writer.add_case(f"{stem}/{dtype_name}/{index}", meta, calls)
            except Unsupported as e:
                key = f"{dtype_name}: {e}"
                skipped[key] = skipped.get(key, 0) + 1
    record["cases"] = len(writer.cases)
    if writer.cases:
        extra = {"source": {"kind": "opinfo", "name": op.name, "variant": op.variant_test_name}}
        if skipped:
            extra["skipped_samples"] = skipped
        size = writer.write(out_dir, extra)
        record.update(status="cases", file=f"{stem}.json", bytes=size)
        log(f"{stem}: {len(writer.cases)} cases, {size} bytes")
    else:
        reasons = sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0]))
        record.update(status="skipped", reason="no sample recorded: " + "; ".join(k for k, _ in reasons[:3]))
        log(f"{stem}: no cases ({record['reason']})")
    return record


def generate_opinfo(out_dir: Path, only: list[str], log: Callable[[str], None]) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    entries = []
    for op in op_db:
        stem = entry_stem(op)
        if only and not any(stem == o or stem.startswith(o + ".") for o in only):
            continue
        entries.append(visit_entry(op, out_dir, log))
    if not only:
        index = {
            "format": FORMAT,
            "kind": "index",
            "generator": {"script": "golden/generate.py", "torch": TORCH_VERSION},
            "entries": entries,
        }
        (out_dir / "_index.json").write_text(dumps(index))


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def setup_torch() -> None:
    import warnings

    import torch

    warnings.filterwarnings("ignore")  # OpInfo samples trigger many deprecation warnings

    if torch.__version__.split("+")[0] != TORCH_VERSION:
        sys.exit(f"generate.py needs torch=={TORCH_VERSION}, found {torch.__version__}")
    torch.set_num_threads(1)  # reductions must not depend on the thread count
    torch.set_default_dtype(torch.float32)


def main(argv: list[str] | None = None) -> int:
    wanted = {"PYTHONHASHSEED": "0", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        # Some OpInfo sample functions iterate over sets of strings, whose order depends on the
        # hash seed: fix it, by re-running this script with PYTHONHASHSEED=0. PyTorch's vectorised
        # CPU kernels and MKL pick code paths by CPU (AVX2, AVX-512): force the portable ones so
        # that every x86-64 machine computes the same bits.
        env = dict(os.environ, **wanted)
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)
    parser = argparse.ArgumentParser(
        description="Generate tpuemu golden cases from PyTorch's OpInfo database, explicit ATen "
        "calls and small models (see golden/README.md). Normally run through golden/regenerate.sh.",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "cases",
                        help="output directory (default: golden/cases next to this script)")
    parser.add_argument("--only", action="append", default=[],
                        help="only these OpInfo entries (repeatable; no index is written); for debugging")
    parser.add_argument("--skip-opinfo", action="store_true", help="write only explicit and model cases")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)

    setup_torch()
    from extra_cases import generate_explicit, generate_models  # noqa: E402 (needs torch set up)

    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, flush=True))
    out: Path = args.out
    if not args.skip_opinfo:
        generate_opinfo(out / "opinfo", args.only, log)
    if not args.only:
        generate_explicit(out / "explicit", log)
        generate_models(out / "models", log)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {total} bytes in {sum(1 for p in out.rglob('*') if p.is_file())} files")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
