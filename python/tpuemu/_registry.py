"""Which aten overloads go to the Rust backend, and how.

The backend exports one table (``tpuemu._rust.registry()``): every overload it registers, and
for each in-place and ``out=`` form it derives, the functional overload it runs, where each of
that overload's arguments comes from and which arguments receive the results (derived once, in
``backend/src/ops/derive.rs``). The device registers a PrivateUse1 kernel for each row, and
the shim runs a derived form as its functional overload followed by a copy into the written
arguments. What stays here is policy about PyTorch's dispatcher: overloads PyTorch itself
implements by decomposition on every device (CompositeImplicitAutograd), views (PyTorch's own
view kernels keep aliasing), factories and conversions between devices are left to PyTorch.
Random operators run on the backend's Threefry streams, which the tpu generators are
(``csrc/generator.cpp``).
"""

from __future__ import annotations

from collections import defaultdict

import torch

# Left to PyTorch: conversions that may cross devices, and factories (PyTorch builds them as
# empty + fill_, which the backend runs).
EXCLUDED = {
    "aten::_to_copy",
    "aten::copy_",
    "aten::empty.memory_format",
    "aten::zeros",
    "aten::ones",
    "aten::full",
    "aten::scalar_tensor",
    "aten::arange",
    "aten::arange.start_step",
    # The shim implements resize_ itself (PyTorch's TensorImpl must see the new sizes).
    "aten::resize_",
    "aten::resize_as_",
}

def full_name(s) -> str:
    return s.name + ("." + s.overload_name if s.overload_name else "")


def short_name(full: str) -> str:
    return full.split("::", 1)[1]


def _writes(s) -> list[int]:
    return [i for i, a in enumerate(s.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _is_view(s) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in s.returns)


def _has(name: str, key: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    except RuntimeError:  # a TorchScript builtin, not a dispatcher operator
        return False


def _implicit(name: str) -> bool:
    return _has(name, "CompositeImplicitAutograd")


def _out_mapping(out, functional) -> list[int] | None:
    """Indices into ``out``'s arguments forming ``functional``'s (-1: left to its default; -2:
    the dtype of the first out= tensor)."""
    writes = set(_writes(out))
    by_name = {a.name: i for i, a in enumerate(out.arguments) if i not in writes}
    used = set()
    fargs = []
    for a in functional.arguments:
        i = by_name.get(a.name)
        if i is not None and str(out.arguments[i].type) == str(a.type):
            fargs.append(i)
            used.add(i)
        elif a.name == "dtype":
            fargs.append(-2)  # the out= tensor's dtype (arange.out computes in it)
        elif a.default_value is not None or a.kwarg_only or str(a.type).endswith("?"):
            fargs.append(-1)
        else:
            return None
    if used != set(by_name.values()):
        return None
    return fargs


def _structured_functionals(by_name, by_base) -> list[str]:
    """Functional and in-place overloads PyTorch runs on other devices through their ``out=``
    kernel (structured operators): registered so that they arrive as themselves (the CPU
    fallback then names the overload the program called, and runs it once)."""
    names = []
    for name, s in by_name.items():
        if _writes(s) and not name.split("::")[1].split(".")[0].endswith("_"):
            continue
        if _is_view(s) or not _has(name, "CompositeExplicitAutogradNonFunctional"):
            continue
        if _implicit(name):
            continue
        base = s.name.rstrip("_") if _writes(s) else s.name
        functional = s if not _writes(s) else by_name.get(base + ("." + s.overload_name if s.overload_name else ""))
        if functional is None:
            continue
        for o in by_base[base]:
            w = _writes(o)
            oname = full_name(o)
            if (w and all(o.arguments[i].kwarg_only for i in w) and _out_mapping(o, functional) is not None
                    and _has(oname, "CPU") and not _has(oname, "CompositeExplicitAutograd")):
                names.append(name)
                break
    return names


def plan(rows):
    """(kernels to register, variants as (name, functional, fargs, writes)) from the backend's
    table: rows of (overload, kind, functional, fargs, writes)."""
    by_name = {}
    by_base = defaultdict(list)
    for s in torch._C._jit_get_all_schemas():
        if not s.name.startswith("aten::"):
            continue
        by_name[full_name(s)] = s
        by_base[s.name].append(s)
    kernels: list[str] = []
    variants: list[tuple[str, str, list[int], list[int]]] = []
    seen = set()

    def add_kernel(name: str):
        if name not in seen and not _implicit(name):
            seen.add(name)
            kernels.append(short_name(name))

    for name, kind, functional, fargs, writes in sorted(rows):
        s = by_name.get(name)
        if s is None or kind == "view" or _is_view(s) or name in EXCLUDED:
            continue
        if kind in ("inplace", "out"):
            variants.append((name, functional, list(fargs), list(writes)))
        add_kernel(name)
    for name in _structured_functionals(by_name, by_base):
        add_kernel(name)
    return kernels, variants
