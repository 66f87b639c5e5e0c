"""Recording ATen calls for the golden cases: a ``TorchDispatchMode`` that captures each call's
overload, schema arguments, input tensors and outputs (``generate.py`` drives it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from settings import DTYPE_NAMES, MAX_CALLS, MAX_TENSOR_NUMEL, RANDOM_UNLESS_DROPOUT_ZERO, SHAPE_ONLY_OPS


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
