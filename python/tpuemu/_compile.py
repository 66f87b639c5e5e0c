"""``torch.compile(model, backend="tpu")``.

Dynamo captures the Python program into FX graphs (graph breaks run eagerly between them); AOT
autograd traces each into an ATen forward graph and an ATen backward graph, decomposed with
PyTorch's core-ATen table minus the operators the backend implements itself. Each ATen graph is
serialised (operators by overload name, arguments in schema order) and compiled by the Rust
backend into one program (``tpuemu_backend::compile``): one launch per graph call. A graph
with an operator the backend lacks, or with non-tensor inputs, runs eagerly on the tpu instead
(``tpuemu.metrics()["graph_compiles"]`` and ``tpuemu._compile.compiled_graphs()`` say which).
A graph with functional collectives is cut at each collective: the parts between compile, the
collectives run through the tpu process group.
"""

from __future__ import annotations

import json
import math
import operator
import warnings

import torch
from torch._decomp import core_aten_decompositions

from . import _C, _rust

_DTYPES = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float16: 5,
    torch.float32: 6,
    torch.float64: 7,
    torch.complex64: 9,
    torch.complex128: 10,
    torch.bool: 11,
    torch.bfloat16: 15,
}
_MEMORY_FORMATS = {
    torch.contiguous_format: "contiguous_format",
    torch.preserve_format: "preserve_format",
    torch.channels_last: "channels_last",
    torch.channels_last_3d: "channels_last_3d",
}

# Operators that return their input as it is in a functional graph (views that change nothing).
_IDENTITY = {"aten::alias", "aten::detach", "aten::lift_fresh"}

# What each graph became: (name, "compiled" | "eager: why").
_GRAPHS: list[tuple[str, str]] = []


def compiled_graphs() -> list[tuple[str, str]]:
    """Each graph torch.compile handed to the tpu backend, and whether it was compiled."""
    return list(_GRAPHS)


class _Unsupported(Exception):
    pass


def op_name(op) -> str:
    s = op._schema
    return s.name + ("." + s.overload_name if s.overload_name else "")


def _rust_ops() -> set[str]:
    return {row[0] for row in _rust.registry()}


def _copy(self, src, non_blocking=False):
    """``aten::copy`` (functional ``copy_``): ``src`` in ``self``'s dtype, broadcast to its shape."""
    return src.to(self.dtype).expand(self.shape).clone()


def decompositions() -> dict:
    """Core-ATen decompositions of the operators the backend does not implement itself, and of
    two functional forms AOT autograd produces (``copy``, the functional batch norm)."""
    from torch._decomp import decomposition_table

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    table[aten._native_batch_norm_legit_functional.default] = decomposition_table[
        aten._native_batch_norm_legit_functional.default
    ]
    table[aten.copy.default] = _copy
    ours = _rust_ops()
    return {op: fn for op, fn in table.items() if op_name(op) not in ours}


class _Ref:
    """A value computed by a node the serializer added."""

    def __init__(self, ref):
        self.ref = ref


def _scalar_sibling(name: str) -> str | None:
    """``aten::mul.Tensor`` -> ``aten::mul.Scalar``, ``aten::pow.Tensor_Tensor`` ->
    ``aten::pow.Tensor_Scalar``."""
    base, _, ov = name.partition(".")
    if ov.endswith("Tensor"):
        return f"{base}.{ov[: -len('Tensor')]}Scalar"
    return None


class _Serializer:
    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.ours = _rust_ops()
        self.refs: dict[torch.fx.Node, list] = {}
        self.list_nodes: set[torch.fx.Node] = set()
        self.nodes: list[dict] = []
        self.inputs: list[int] = []
        # Tensors the graph holds as attributes (get_attr nodes), passed after its inputs.
        self.constants: list[torch.Tensor] = []
        # Inputs that are CPU scalar tensors, uploaded at each call.
        self.cpu_inputs: list[int] = []

    def ref(self, n) -> list:
        if n not in self.refs:
            raise _Unsupported(f"{n} is not a tensor the graph computes")
        return self.refs[n]

    def encode(self, v, typ: str = ""):
        if isinstance(v, (list, tuple)) and not v:
            # An empty list takes its kind from the schema (an untyped one is an int list).
            kind = "ts" if "Tensor" in typ else "bs" if "bool" in typ else "fs" if "float" in typ else "is"
            return {kind: []}
        if isinstance(v, _Ref):
            return {"t": v.ref}
        if isinstance(v, torch.fx.Node):
            return {"t": self.ref(v)}
        if isinstance(v, (list, tuple)):
            if any(isinstance(x, torch.fx.Node) for x in v):
                return {"ts": [None if x is None else self.ref(x) for x in v]}
            if all(isinstance(x, bool) for x in v):
                return {"bs": list(v)}
            if all(isinstance(x, int) for x in v):
                return {"is": list(v)}
            if all(isinstance(x, (int, float)) for x in v):
                return {"fs": [float(x) if math.isfinite(x) else str(float(x)) for x in v]}
            raise _Unsupported(f"argument {v!r}")
        if v is None:
            return None
        if isinstance(v, bool):
            return {"b": v}
        if isinstance(v, int):
            return {"i": v}
        if isinstance(v, float):
            return {"f": v if math.isfinite(v) else str(v)}  # JSON has no inf or nan
        if isinstance(v, str):
            return {"s": v}
        if isinstance(v, torch.dtype):
            return {"dt": _DTYPES[v]}
        if isinstance(v, torch.device):
            return {"s": str(v)}
        if isinstance(v, torch.layout):
            return {"s": "strided" if v == torch.strided else str(v)}
        if isinstance(v, torch.memory_format):
            return {"s": _MEMORY_FORMATS[v]}
        raise _Unsupported(f"argument {v!r} of type {type(v).__name__}")

    def call(self, n: torch.fx.Node):
        op = n.target
        if not isinstance(op, torch._ops.OpOverload):
            raise _Unsupported(f"{op} is not an ATen operator")
        name = op_name(op)
        if name in _IDENTITY and name not in self.ours:
            self.refs[n] = self.ref(n.args[0])
            return
        if name not in self.ours:
            raise _Unsupported(f"{name} is not implemented by the tpu backend")
        values = []
        for i, a in enumerate(op._schema.arguments):
            if not a.kwarg_only and i < len(n.args):
                v = n.args[i]
            elif a.name in n.kwargs:
                v = n.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                v = None
            values.append(v)
        numbers = [
            i
            for i, a in enumerate(op._schema.arguments)
            if str(a.type) == "Tensor" and isinstance(values[i], (bool, int, float))
        ]
        sibling = _scalar_sibling(name)
        if numbers == [1] and sibling in self.ours:
            name = sibling  # mul.Tensor(x, 2) -> mul.Scalar(x, 2)
        else:
            for i in numbers:  # a Python number where a tensor goes: a 0-dim tensor node
                values[i] = self.scalar_tensor(values[i])
        args = [self.encode(v, str(a.type)) for v, a in zip(values, op._schema.arguments)]
        index = len(self.nodes)
        self.nodes.append({"op": name, "args": args})
        rets = op._schema.returns
        if len(rets) == 1 and isinstance(rets[0].type, torch.ListType):
            self.list_nodes.add(n)
        self.refs[n] = [index, 0, -1]

    def scalar_tensor(self, v):
        """A node computing the 0-dim tensor PyTorch makes of a Python number."""
        dtype = torch.bool if isinstance(v, bool) else torch.int64 if isinstance(v, int) else torch.float32
        index = len(self.nodes)
        self.nodes.append(
            {"op": "aten::scalar_tensor", "args": [self.encode(v), {"dt": _DTYPES[dtype]}, None, None, None]}
        )
        return _Ref([index, 0, -1])

    def getitem(self, n: torch.fx.Node):
        src, i = n.args
        if src not in self.refs:
            raise _Unsupported("getitem of an unknown value")
        j = self.refs[src][0]
        self.refs[n] = [j, 0, i] if src in self.list_nodes else [j, i, -1]

    def run(self, name: str):
        outputs = None
        placeholders = 0
        total_inputs = sum(1 for n in self.gm.graph.nodes if n.op == "placeholder")
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                val = n.meta.get("val")
                if isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dim() == 0:
                    # A CPU scalar tensor (e.g. torch.tensor(d).sqrt() in the model's code):
                    # uploaded at each call, as eager mode would.
                    self.cpu_inputs.append(placeholders)
                elif not isinstance(val, torch.Tensor) or val.device.type != "tpu":
                    raise _Unsupported(f"input {n.name} is not a tpu tensor")
                self.refs[n] = [-1, placeholders, -1]
                placeholders += 1
            elif n.op == "call_function" and n.target is operator.getitem:
                self.getitem(n)
            elif n.op == "call_function":
                self.call(n)
            elif n.op == "output":
                outputs = n.args[0]
            elif n.op == "get_attr":
                val = self.gm
                for part in str(n.target).split("."):
                    val = getattr(val, part)
                if not isinstance(val, torch.Tensor):
                    raise _Unsupported(f"attribute {n.target} is not a tensor")
                self.refs[n] = [-1, total_inputs + len(self.constants), -1]
                self.constants.append(val)  # moved to the tpu at the first call (not under fake mode)
            else:
                raise _Unsupported(f"FX node kind {n.op}")
        template = []
        refs = []
        for o in outputs:
            if isinstance(o, torch.fx.Node):
                template.append(len(refs))
                refs.append(self.ref(o))
            else:
                template.append(("const", o))
        spec = {"name": name, "inputs": placeholders + len(self.constants), "nodes": self.nodes,
                "outputs": refs}
        return spec, template


def _boxed(module):
    """``module`` called the way AOT autograd calls a compiled graph: with one list of
    arguments, which the callee empties (so that inputs can be freed early)."""

    def run(args):
        a = list(args)
        args.clear()
        return module(*a)

    run._boxed_call = True
    return run


def _eager(gm, name: str, why: str):
    _GRAPHS.append((name, "eager: " + why))
    warnings.warn(f"tpuemu: graph {name} runs eagerly on the tpu: {why}", stacklevel=2)
    return _boxed(gm)


def _is_collective(n: torch.fx.Node) -> bool:
    return (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and n.target.namespace in ("_c10d_functional", "c10d_functional", "c10d"))


def _is_opaque(n: torch.fx.Node) -> bool:
    """A node the graph compiler does not lower: a collective, or a Pallas kernel
    (``tpuemu.pallas``: already a program of its own)."""
    return _is_collective(n) or (
        n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
        and n.target.namespace == "tpuemu_pallas")


def _split_at_collectives(gm: torch.fx.GraphModule, kind: str):
    """A graph with functional collectives (``torch.distributed._functional_collectives``) or
    Pallas kernels: the parts between them compile to programs of their own; the collectives
    run through the tpu process group between them (their bytes move between the rank
    processes), a Pallas kernel as its operator (its own program)."""
    from torch.fx.passes.split_module import split_module

    part = {}
    p = 0
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        if _is_opaque(n):
            p += 1
            part[n] = p
            p += 1
        elif n.op == "call_function" and n.target is operator.getitem and n.args[0] in part \
                and _is_opaque(n.args[0]):
            part[n] = part[n.args[0]]
        else:
            part[n] = p
    split = split_module(gm, None, lambda n: part[n], keep_original_order=True)
    for name, sub in list(split.named_children()):
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        if any(_is_opaque(n) for n in sub.graph.nodes):
            continue
        if not any(n.op == "call_function" for n in sub.graph.nodes):
            continue
        setattr(split, name, _CompiledPart(sub, kind))
    split.recompile()
    return split


class _CompiledPart(torch.nn.Module):
    """One part of a split graph, compiled (its output made a tuple for the serializer)."""

    def __init__(self, sub: torch.fx.GraphModule, kind: str):
        super().__init__()
        out = next(n for n in sub.graph.nodes if n.op == "output")
        self.single = not isinstance(out.args[0], (tuple, list))
        if self.single:
            out.args = ((out.args[0],),)
            sub.recompile()
        self.run = _compiler(kind)(sub, None)

    def forward(self, *args):
        outs = self.run(list(args))
        return outs[0] if self.single else tuple(outs)


def _compiler(kind: str):
    counter = [0]

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        if any(_is_opaque(n) for n in gm.graph.nodes):
            return _boxed(_split_at_collectives(gm, kind))
        name = f"{kind}_{len(_GRAPHS)}"
        counter[0] += 1
        try:
            ser = _Serializer(gm)
            spec, template = ser.run(name)
        except _Unsupported as e:
            return _eager(gm, name, str(e))
        constants = ser.constants
        placed: list = []
        gid = _rust.compile_graph(json.dumps(spec))
        _GRAPHS.append((name, "compiled"))
        state = {"eager": None}

        def run(args):
            if state["eager"] is not None:
                return state["eager"](args)
            if len(placed) != len(constants):
                placed[:] = [c.detach().to("tpu") for c in constants]
            tensors = list(args) + placed
            for i in ser.cpu_inputs:
                tensors[i] = tensors[i].to("tpu")
            try:
                outs = _C.run_graph(gid, tensors)
            except (RuntimeError, NotImplementedError) as e:
                # The backend could not build the program: this graph runs eagerly from now on.
                _GRAPHS[:] = [(n, s) for n, s in _GRAPHS if n != name]
                state["eager"] = _eager(gm, name, str(e).splitlines()[0])
                return state["eager"](args)
            args.clear()
            return [outs[t] if isinstance(t, int) else t[1] for t in template]

        run._boxed_call = True
        return run

    return compile_graph


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The ``torch.compile`` backend ``"tpu"``."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=_compiler("forward"),
        bw_compiler=_compiler("backward"),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )(gm, example_inputs, **kwargs)
