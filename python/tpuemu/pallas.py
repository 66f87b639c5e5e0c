"""Custom kernels the TorchTPU way: JAX Pallas kernels called from PyTorch, run on the emulated chip.

    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl
    import tpuemu.pallas

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    @tpuemu.pallas.custom_jax_kernel
    def add(x, y):
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // 8,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))] * 2,
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x, y)

    z = add(torch.randn(64, 128, device="tpu"), torch.randn(64, 128, device="tpu"))

``custom_jax_kernel(fn, static_argnums=())`` (also a decorator, with or without arguments) makes a
JAX function a function of torch tensors on "tpu", TorchTPU's ``custom_jax_kernel`` contract. On
the first call with new shapes, dtypes or static arguments, ``fn`` is traced by JAX on the CPU
into a jaxpr (``jax.make_jaxpr``); nothing of it runs in JAX. Each ``pallas_call`` in it is
serialised (grid, block specs, index maps, the kernel body's jaxpr) and lowered by the Rust
backend to a program of this instruction set (``tpuemu_kernels::kernels::pallas``): blocks
copied by DMA into double-buffered VMEM as Mosaic's pipeline does, the body as vector and
matrix-unit code. The program is registered as an operator ``tpuemu_pallas::<kernel>_<hash>``
and called like any other on the tensors' storages: in Strict, Debug and DeferAndFuse, timed,
in traces and the op profile under the kernel's name. The plain ``jax.numpy``/``lax`` parts of
``fn`` around the ``pallas_call`` run as the backend's own operators (through PyTorch).

Under ``torch.compile(backend="tpu")`` the decorated function is put in the graph whole
(``torch._dynamo.allow_in_graph``): AOT autograd traces it with fake tensors, each kernel's
operator has a fake implementation from the jaxpr's shapes, and the compiled program calls the
kernels' programs with no graph break.

What Mosaic refuses is refused with the kernel's name (``ValueError``): block shapes that break
the (8, 128) tiling, VMEM over capacity, block indices outside the array, an index outside a
reference. Constructs this lowering does not handle raise ``NotImplementedError`` naming the
primitive and the kernel's source line. python/README.md ("Writing a kernel") lists what is
lowered.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math

import numpy as np
import torch

from . import _rust

__all__ = ["custom_jax_kernel"]

_TORCH_TO_JAX = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.int8: "int8",
}
_JAX_TO_TORCH = {v: k for k, v in _TORCH_TO_JAX.items()}

_CALL_PRIMS = ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint",
               "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr")


def _jax():
    try:
        import jax  # noqa: PLC0415
    except ImportError as e:  # pragma: no cover - the environment pins jax
        raise ImportError(
            "tpuemu.pallas needs JAX (jax and jaxlib 0.10.2, CPU): scripts/python.sh installs "
            "them with python/requirements.txt") from e
    return jax


# ---- serialising jaxprs -------------------------------------------------------------------


def _num(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _dtype_name(dt) -> str:
    """JAX's dtype name; semaphores are `dma_sem` or `sem`."""
    text = str(dt)
    if "sem" in text:
        return "dma_sem" if "dma" in text else "sem"
    return np.dtype(dt).name


def _src(eqn) -> str:
    from jax._src import source_info_util  # noqa: PLC0415
    try:
        f = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:  # noqa: BLE001 - where JAX keeps it moves between versions
        f = None
    if f is None:
        return ""
    return f"{f.file_name}:{f.start_line}"


class _Ser:
    """Writes jaxprs in the form `tpuemu_kernels::kernels::pallas::spec` reads."""

    def __init__(self):
        self.ids = {}
        # Where the innermost call (a `jnp` function is a `jit`) was made: equations inside
        # library code are reported at the user's line.
        self.ctx = ""

    def var(self, v):
        aval = v.aval
        inner = getattr(aval, "inner_aval", None)
        is_ref = inner is not None
        a = inner if is_ref else aval
        if v not in self.ids:
            self.ids[v] = len(self.ids)
        return {"id": self.ids[v], "shape": [int(d) for d in a.shape],
                "dtype": _dtype_name(a.dtype), "ref": is_ref}

    def atom(self, a):
        if type(a).__name__ == "Literal":
            val = np.asarray(a.val)
            if val.ndim != 0:
                raise NotImplementedError("tpuemu.pallas: an array literal in a kernel")
            return {"lit": _num(val.item()) if val.dtype != bool else bool(val.item()),
                    "dtype": _dtype_name(a.aval.dtype)}
        if a not in self.ids:
            self.var(a)
        return {"v": self.ids[a]}

    def closed(self, cj):
        if getattr(cj, "consts", None):
            raise NotImplementedError(
                "tpuemu.pallas: a kernel closing over array constants (pass them as inputs)")
        return self.jaxpr(cj.jaxpr if hasattr(cj, "jaxpr") else cj)

    def jaxpr(self, j):
        if j.constvars:
            raise NotImplementedError(
                "tpuemu.pallas: a kernel closing over array constants (pass them as inputs)")
        return {"invars": [self.var(v) for v in j.invars],
                "eqns": [self.eqn(e) for e in j.eqns],
                "outvars": [self.atom(a) for a in j.outvars]}

    def eqn(self, e):
        name = e.primitive.name
        p = e.params
        params = {}
        ins = [self.atom(a) for a in e.invars]
        src = _src(e) or self.ctx
        outer, self.ctx = self.ctx, src
        if name == "dot_general":
            (lc, rc), (lb, rb) = p["dimension_numbers"]
            params.update(lhs_contract=list(lc), rhs_contract=list(rc),
                          lhs_batch=list(lb), rhs_batch=list(rb))
            prec = p.get("precision")
            if prec is not None:
                first = prec[0] if isinstance(prec, tuple) else prec
                params["precision"] = getattr(first, "name", str(first))
        elif name == "broadcast_in_dim":
            params.update(shape=list(p["shape"]),
                          broadcast_dimensions=list(p["broadcast_dimensions"]))
        elif name in ("reduce_sum", "reduce_max", "reduce_min"):
            params["axes"] = [int(a) for a in p["axes"]]
        elif name in ("program_id", "num_programs"):
            params["axis"] = int(p["axis"])
        elif name == "iota":
            params["dimension"] = int(p["dimension"])
        elif name == "integer_pow":
            params["y"] = int(p["y"])
        elif name == "round":
            params["rounding_method"] = int(p["rounding_method"])
        elif name == "cond":
            params["branches"] = [self.closed(b) for b in p["branches"]]
        elif name == "scan":
            params.update(jaxpr=self.closed(p["jaxpr"]), length=int(p["length"]),
                          num_consts=int(p["num_consts"]), num_carry=int(p["num_carry"]),
                          reverse=bool(p["reverse"]))
        elif name == "while":
            params.update(cond_jaxpr=self.closed(p["cond_jaxpr"]),
                          body_jaxpr=self.closed(p["body_jaxpr"]),
                          cond_nconsts=int(p["cond_nconsts"]),
                          body_nconsts=int(p["body_nconsts"]))
        elif name in _CALL_PRIMS:
            sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
            params["jaxpr"] = self.closed(sub)
        elif name in ("get", "swap"):
            chain = self.indexers(e)
            params["idx"] = chain[0] if chain else []
            if len(chain) > 1:
                params["then"] = chain[1:]
        elif name in ("dma_start", "dma_wait"):
            params.update(self.dma(e))
        elif name in ("semaphore_signal", "semaphore_wait"):
            params.update(self.sem_op(e))
        elif name == "squeeze":
            params["dimensions"] = [int(d) for d in p["dimensions"]]
        elif name == "transpose":
            params["permutation"] = [int(d) for d in p["permutation"]]
        elif name == "slice":
            params["start_indices"] = [int(d) for d in p["start_indices"]]
            params["limit_indices"] = [int(d) for d in p["limit_indices"]]
            if p.get("strides") is not None:
                params["strides"] = [int(d) for d in p["strides"]]
        elif name == "tile":
            params["reps"] = [int(d) for d in p["reps"]]
        self.ctx = outer
        return {"prim": name, "ins": ins, "outs": [self.var(v) for v in e.outvars],
                "params": params, "src": src}

    def dma(self, e):
        """A DMA's source, destination and semaphore: `{"ref": k, "idx": [...]}` with k and
        any computed index the position among the equation's operands."""
        import jax  # noqa: PLC0415
        tree = e.params["tree"]
        parts = jax.tree_util.tree_unflatten(tree, [_Leaf(i) for i in range(tree.num_leaves)])
        src, dst, sem = parts[0], parts[1], parts[2]
        rest = [x for x in parts[3:] if x is not None]
        if rest:
            raise NotImplementedError(
                "tpuemu.pallas: remote DMA (device_id, a source semaphore) is not lowered yet")

        def one(t):
            if isinstance(t, _Leaf):
                return {"ref": t.i, "idx": []}
            if not isinstance(getattr(t, "ref", None), _Leaf):
                raise NotImplementedError(f"tpuemu.pallas: a DMA of {t!r}")
            chain = []
            for tr in t.transforms:
                if not hasattr(tr, "indices"):
                    raise NotImplementedError(
                        f"tpuemu.pallas: a DMA of a reference transformed by {tr!r}")
                chain.append([self.index(ix, absolute=True) for ix in tr.indices])
            out = {"ref": t.ref.i, "idx": chain[0] if chain else []}
            if len(chain) > 1:
                out["then"] = chain[1:]
            return out

        return {"src": one(src), "dst": one(dst), "sem": one(sem)}

    def sem_op(self, e):
        """`pltpu.semaphore_signal(sem, inc)` / `semaphore_wait(sem, value)`: the semaphore as
        a DMA's (`{"ref": k, "idx": [...]}`), `amount` the operand position of the value, and
        whether a wait decrements."""
        import jax  # noqa: PLC0415
        tree = e.params["args_tree"]
        parts = jax.tree_util.tree_unflatten(tree, [_Leaf(i) for i in range(tree.num_leaves)])
        sem, transforms, value = parts[0], parts[1], parts[2]
        if e.primitive.name == "semaphore_signal":
            if len(parts) > 3 and parts[3] is not None:
                raise NotImplementedError(
                    "tpuemu.pallas: a semaphore signal to another device (device_id) is not "
                    "lowered yet")
            if len(parts) > 4 and parts[4] is not None:
                raise NotImplementedError(
                    "tpuemu.pallas: a semaphore signal to another core (core_index) is not "
                    "lowered (the emulated chips run a kernel on one core)")
        chain = []
        for t in transforms or ():
            if not hasattr(t, "indices"):
                raise NotImplementedError(f"tpuemu.pallas: a semaphore transformed by {t!r}")
            chain.append([self.index(ix, absolute=True) for ix in t.indices])
        ref = {"ref": sem.i, "idx": chain[0] if chain else []}
        if len(chain) > 1:
            ref["then"] = chain[1:]
        out = {"sem": ref, "amount": value.i}
        if e.primitive.name == "semaphore_wait" and len(parts) > 3:
            dec = e.invars[parts[3].i]
            if type(dec).__name__ != "Literal":
                raise NotImplementedError(
                    "tpuemu.pallas: a semaphore wait whose `decrement` is computed")
            out["decrement"] = bool(dec.val)
        return out

    def index(self, ix, absolute=False):
        """One dimension of an indexer (see `indexers`)."""
        def pos(x):
            if isinstance(x, _Leaf):
                return {"arg": x.i, "abs": absolute}
            return int(x)

        if type(ix).__name__ == "Slice":
            return {"start": pos(ix.start), "size": int(ix.size), "stride": int(ix.stride)}
        return {"at": pos(ix)}

    def indexers(self, e):
        """A reference's chain of indexers (`ref.at[i][...]` has two), each per dimension
        `{"start", "size", "stride"}` (a slice) or `{"at"}` (an integer index); a start or
        index computed in the kernel is `{"arg": k}`, the k-th operand after the reference
        (and value)."""
        import jax  # noqa: PLC0415
        tree = e.params["tree"]
        leaves = [_Leaf(i) for i in range(tree.num_leaves)]
        transforms = jax.tree_util.tree_unflatten(tree, leaves)
        if not transforms:
            return []
        if not all(hasattr(t, "indices") for t in transforms):
            raise NotImplementedError(
                f"tpuemu.pallas: a reference transformed by {transforms!r} (bitcasts and "
                "reshapes are not lowered)")

        def pos(x):
            # A leaf is an operand after the reference (and the stored value).
            return {"arg": x.i} if isinstance(x, _Leaf) else int(x)

        chain = []
        for t in transforms:
            out = []
            for ix in t.indices:
                if type(ix).__name__ == "Slice":
                    out.append({"start": pos(ix.start), "size": int(ix.size),
                                "stride": int(ix.stride)})
                else:
                    out.append({"at": pos(ix)})
            chain.append(out)
        return chain


class _Leaf:
    """Stands for the i-th index operand of a `get`/`swap` while its indexers are rebuilt."""

    def __init__(self, i):
        self.i = i
        self.shape = ()
        self.dtype = np.dtype("int32")


def _block(b):
    """A block dimension: its size, or None when squeezed."""
    name = type(b).__name__
    if name == "Squeezed" or b is None:
        return None
    if name != "Blocked" and not isinstance(b, int):
        raise NotImplementedError(
            f"tpuemu.pallas: a block dimension of indexing mode {name} (pl.Element, "
            "pl.BoundedSlice) is not lowered yet; use blocked dimensions")
    size = getattr(b, "block_size", b)
    return int(size)


def _kernel_spec(eqn) -> dict:
    p = eqn.params
    gm = p["grid_mapping"]
    if p.get("input_output_aliases"):
        raise NotImplementedError("tpuemu.pallas: input_output_aliases is not lowered yet")
    ser = _Ser()
    operands = []
    # Scalar prefetch (`PrefetchScalarGridSpec`): the first operands, copied into SMEM whole.
    for v in eqn.invars[:gm.num_index_operands]:
        aval = v.aval
        operands.append({
            "shape": [int(d) for d in aval.shape],
            "dtype": _dtype_name(aval.dtype),
            "block": [],
            "index_map": {"invars": [], "eqns": [], "outvars": []},
            "space": "smem",
        })
    for bm in gm.block_mappings:
        aval = bm.array_aval
        space = str(getattr(bm.transformed_block_aval, "memory_space", "") or "").lower()
        operands.append({
            "shape": [int(d) for d in aval.shape],
            "dtype": _dtype_name(aval.dtype),
            "block": [_block(b) for b in bm.block_shape],
            "index_map": ser.closed(bm.index_map_jaxpr),
            # `memory_space=pl.ANY`: the kernel gets the array in HBM, and copies what it
            # wants itself (`make_async_copy`).
            "space": "any" if "any" in space or "hbm" in space else "",
        })
    scratch = []
    for sc in gm.scratch_avals:
        inner = getattr(sc, "inner_aval", sc)
        space = str(getattr(sc, "memory_space", "") or "").lower()
        if not hasattr(inner, "shape"):
            raise NotImplementedError(f"tpuemu.pallas: scratch {sc} is not lowered")
        dt = str(inner.dtype)
        if "sem" in space or "sem" in dt:
            dt = "dma_sem" if "dma" in dt else "sem"
        else:
            dt = _dtype_name(inner.dtype)
        scratch.append({"shape": [int(d) for d in inner.shape], "dtype": dt,
                        "space": "smem" if "smem" in space else ""})
    body = p["jaxpr"]
    dbg = getattr(body, "debug_info", None)
    name = p.get("name") or getattr(dbg, "func_name", None) or "pallas_kernel"
    src = ""
    if dbg is not None and getattr(dbg, "func_filename", None):
        src = f"{dbg.func_filename}:{dbg.func_lineno}"
    return {
        "name": str(name),
        "source": str(src or _src(eqn)),
        "grid": [int(g) for g in gm.grid],
        "num_inputs": int(gm.num_index_operands) + int(gm.num_inputs),
        "operands": operands,
        "scratch": scratch,
        "body": ser.jaxpr(body),
    }


# ---- the operators --------------------------------------------------------------------------

_LIB = None
_OPS: dict[str, object] = {}


def _library():
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("tpuemu_pallas", "DEF")
    return _LIB


def _refusal(e: RuntimeError) -> Exception:
    """The backend's error as Python's: what tpuemu does not lower is a NotImplementedError,
    what Mosaic refuses a ValueError."""
    msg = str(e).removeprefix("NotImplementedError: ")
    if "not supported by tpuemu" in msg:
        return NotImplementedError(msg)
    if "Pallas kernel" in msg:
        return ValueError(msg)
    return e


def _kernel_op(spec: dict):
    """The torch operator of a lowered kernel (lowering and defining it on first use)."""
    text = json.dumps(spec, separators=(",", ":"), sort_keys=True)
    try:
        full, outs = _rust.pallas_register(text)
    except RuntimeError as e:
        raise _refusal(e) from None
    short = full.split("::", 1)[1]
    if short in _OPS:
        return _OPS[short]
    n_in = spec["num_inputs"]
    args = ", ".join(f"Tensor a{i}" for i in range(n_in))
    rets = "Tensor" if len(outs) == 1 else "(" + ", ".join(["Tensor"] * len(outs)) + ")"
    lib = _library()
    lib.define(f"{short}({args}) -> {rets}")
    shapes = [(list(s), _JAX_TO_TORCH[d]) for s, d in outs]

    def fake(*xs):
        r = [xs[0].new_empty(s, dtype=d) for s, d in shapes]
        return r[0] if len(r) == 1 else tuple(r)

    torch.library.register_fake(f"tpuemu_pallas::{short}", fake, lib=lib)
    op = getattr(torch.ops.tpuemu_pallas, short).default
    _OPS[short] = op
    return op


# ---- running the traced function --------------------------------------------------------------


def _strided(x: torch.Tensor):
    """For a broadcast of a whole contiguous buffer (``expand`` of it): the element strides of
    ``x`` in that buffer and the buffer as a 1-D tensor, so that a kernel reads it where it
    repeats (its block copies use stride 0) instead of a materialised copy; ``None``
    otherwise."""
    if x.is_contiguous() or x.storage_offset() != 0 or 0 not in x.stride():
        return None
    kept = [(n, st) for n, st in zip(x.shape, x.stride()) if st != 0 and n != 1]
    want = 1
    for n, st in reversed(kept):
        if st != want:
            return None
        want *= n
    if x.untyped_storage().nbytes() != want * x.element_size():
        return None
    return list(x.stride()), x.as_strided((want,), (1,))


def _fresh(outs):
    """Results are new arrays, as in JAX: never a view of an argument or of one another (a
    broadcast is a view while the function runs)."""
    return [o.clone() if isinstance(o, torch.Tensor) and o._is_view() else o for o in outs]


def _whole(x: torch.Tensor) -> torch.Tensor:
    """A kernel takes whole contiguous buffers."""
    if x.storage_offset() != 0 or not x.is_contiguous():
        return x.clone(memory_format=torch.contiguous_format)
    return x


@contextlib.contextmanager
def _as_one_computation(tensors):
    """TorchTPU jits a custom JAX kernel's function as one XLA computation, so its plain
    ``jax.numpy`` parts are fused around the ``pallas_call``s whatever the eager mode. Here, in
    Strict mode, the function runs recorded as in DeferAndFuse (its operators fused by the
    backend's planner, the kernels launched in order) and is run whole before the call
    returns, so an error still comes from this call. Debug mode stays launch-blocking, one
    operator at a time; tracing under ``torch.compile`` is left alone (the graph is fused
    there)."""
    real = all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors)
    if not real or torch.compiler.is_compiling() or _rust.mode() != "strict":
        yield
        return
    _rust.set_mode("defer")
    try:
        yield
    finally:
        try:
            _rust.set_mode("strict")
        except BaseException:
            # The failed flush took what was recorded: switching again runs nothing.
            _rust.set_mode("strict")
            raise


def _run(jaxpr, consts, args, device, memo=None):
    env = {}
    # Broadcasts of the same array to the same shape are materialised once per call (XLA
    # would share them too): flash attention's backward broadcasts its statistics for each of
    # its two kernels.
    memo = {} if memo is None else memo

    def read(a):
        if type(a).__name__ == "Literal":
            v = np.asarray(a.val)
            return v.item() if v.ndim == 0 else torch.from_numpy(v).to(device)
        return env[a]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = torch.from_numpy(np.array(c)).to(device)
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for e in jaxpr.eqns:
        ins = [read(a) for a in e.invars]
        name = e.primitive.name
        if name == "pallas_call":
            spec = _kernel_spec(e)
            # int8 scalar-prefetch arrays (splash attention's block masks) go widened to
            # int32, one SMEM word per value; the device computes no int8, so the widening
            # is done on the host (these are small tables).
            nidx = e.params["grid_mapping"].num_index_operands
            ins = [x.cpu().to(torch.int32).to(device) if i < nidx and x.dtype == torch.int8
                   else x for i, x in enumerate(ins)]
            # A broadcast input of a pipelined block is read unexpanded.
            for i, x in enumerate(ins):
                o = spec["operands"][i]
                if i < spec["num_inputs"] and not o["space"] and isinstance(x, torch.Tensor):
                    st = _strided(x)
                    if st is not None:
                        o["strides"], ins[i] = st[0], st[1]
                        o["hbm_shape"] = list(st[1].shape)
            op = _kernel_op(spec)
            outs = op(*[_whole(x) for x in ins])
            outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        elif name in _CALL_PRIMS:
            sub = e.params.get("jaxpr") or e.params.get("call_jaxpr") or e.params.get("fun_jaxpr")
            outs = _run(sub.jaxpr, sub.consts, ins, device, memo)
        elif name == "broadcast_in_dim" and isinstance(ins[0], torch.Tensor):
            key = (id(ins[0]), tuple(e.params["shape"]),
                   tuple(e.params["broadcast_dimensions"]), _tdt(e))
            hit = memo.get(key)
            if hit is None or hit[0] is not ins[0]:
                hit = (ins[0], _bcast(e, ins[0]))
                memo[key] = hit
            outs = [hit[1]]
        elif all(v.aval.dtype == _jax().dtypes.float0 for v in e.outvars):
            # The cotangent of an integer input (JAX's `float0`): no gradient.
            outs = [None] * len(e.outvars)
        else:
            f = _TORCH.get(name)
            if f is None:
                raise NotImplementedError(
                    f"tpuemu.pallas: the JAX primitive `{name}` outside a pallas_call "
                    f"({_src(e) or 'in the traced function'}) has no torch equivalent here")
            r = f(e, *ins)
            outs = list(r) if isinstance(r, (tuple, list)) else [r]
        for v, x in zip(e.outvars, outs):
            env[v] = x
    return [read(a) for a in jaxpr.outvars]


def _tdt(e, k=0):
    return _JAX_TO_TORCH.get(_dtype_name(e.outvars[k].aval.dtype))


def _dot(e, a, b):
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    la = list(letters[:a.dim()])
    lb_ = list(letters[a.dim():a.dim() + b.dim()])
    for x, y in zip(lc, rc):
        lb_[y] = la[x]
    for x, y in zip(lb, rb):
        lb_[y] = la[x]
    out = [la[i] for i in lb] + [la[i] for i in range(a.dim()) if i not in lc and i not in lb]
    out += [lb_[i] for i in range(b.dim()) if i not in rc and i not in rb]
    dt = _tdt(e)
    if not dt.is_floating_point:
        # Integer products wrap in int32 as XLA's do; computed in the operands' dtype.
        return torch.einsum(f"{''.join(la)},{''.join(lb_)}->{''.join(out)}",
                            a.to(dt), b.to(dt))
    r = torch.einsum(f"{''.join(la)},{''.join(lb_)}->{''.join(out)}", a.float(), b.float())
    return r.to(dt)


def _bcast(e, x):
    shape = list(e.params["shape"])
    dims = list(e.params["broadcast_dimensions"])
    if not isinstance(x, torch.Tensor):
        return torch.full(shape, x, dtype=_tdt(e), device=_DEVICE[0])
    view = [1] * len(shape)
    for i, d in enumerate(dims):
        view[d] = x.shape[i]
    # A view: a kernel reads it unexpanded (stride 0 where it repeats, `_strided`); other
    # operators take views as they are.
    return x.reshape(view).expand(shape)


_DEVICE = [torch.device("tpu")]


def _select_n(p, cases):
    """`lax.select_n`: case k where the selector is k (a bool selector picks case 1 where set)."""
    out = cases[0]
    for k, c in enumerate(cases[1:], start=1):
        out = torch.where(p.to(torch.int32) == k if p.dtype != torch.bool else p, c, out)
    return out


def _slice(e, x):
    idx = []
    strides = e.params.get("strides") or [1] * x.dim()
    for a, b, st in zip(e.params["start_indices"], e.params["limit_indices"], strides):
        idx.append(slice(int(a), int(b), int(st)))
    return x[tuple(idx)].contiguous()


def _iota(e):
    p = e.params
    shape = list(p["shape"])
    d = int(p["dimension"])
    r = torch.arange(shape[d], device=_DEVICE[0], dtype=_tdt(e))
    view = [1] * len(shape)
    view[d] = shape[d]
    return r.reshape(view).expand(shape).contiguous()


def _cvt(e, x):
    dt = _tdt(e)
    if not isinstance(x, torch.Tensor):
        return torch.tensor(x, dtype=dt, device=_DEVICE[0])
    return x.to(dt)


def _bin(f):
    def run(e, a, b):
        r = f(a, b)
        return r.to(_tdt(e)) if isinstance(r, torch.Tensor) else r
    return run


_TORCH = {
    "add": _bin(torch.add), "add_any": _bin(torch.add), "sub": _bin(torch.sub), "mul": _bin(torch.mul),
    "div": lambda e, a, b: (torch.div(a, b, rounding_mode="trunc")
                            if not _tdt(e).is_floating_point else torch.div(a, b)).to(_tdt(e)),
    "max": lambda e, a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
    "min": lambda e, a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
    "neg": lambda e, x: -x, "exp": lambda e, x: torch.exp(x), "log": lambda e, x: torch.log(x),
    "sqrt": lambda e, x: torch.sqrt(x), "rsqrt": lambda e, x: torch.rsqrt(x),
    "tanh": lambda e, x: torch.tanh(x), "logistic": lambda e, x: torch.sigmoid(x),
    "abs": lambda e, x: torch.abs(x), "sin": lambda e, x: torch.sin(x),
    "cos": lambda e, x: torch.cos(x),
    "integer_pow": lambda e, x: torch.pow(x, e.params["y"]),
    "pow": lambda e, a, b: torch.pow(a, b),
    "dot_general": _dot,
    "broadcast_in_dim": _bcast,
    "reshape": lambda e, x: x.reshape(list(e.params["new_sizes"])),
    "squeeze": lambda e, x: x.squeeze(list(e.params["dimensions"])),
    "expand_dims": lambda e, x: x.unsqueeze(list(e.params["dimensions"])[0]),
    "transpose": lambda e, x: x.permute(list(e.params["permutation"])).contiguous(),
    "convert_element_type": _cvt,
    "reduce_sum": lambda e, x: x.sum(dim=list(e.params["axes"])).to(_tdt(e)),
    "reduce_max": lambda e, x: x.amax(dim=list(e.params["axes"])),
    "reduce_min": lambda e, x: x.amin(dim=list(e.params["axes"])),
    "select_n": lambda e, p, *c: _select_n(p, c),
    "eq": lambda e, a, b: torch.eq(a, b), "ne": lambda e, a, b: torch.ne(a, b),
    "lt": lambda e, a, b: torch.lt(a, b), "le": lambda e, a, b: torch.le(a, b),
    "gt": lambda e, a, b: torch.gt(a, b), "ge": lambda e, a, b: torch.ge(a, b),
    "concatenate": lambda e, *xs: torch.cat(xs, dim=e.params["dimension"]),
    "copy": lambda e, x: x.clone(), "copy_p": lambda e, x: x.clone(),
    "slice": _slice,
    "rev": lambda e, x: torch.flip(x, list(e.params["dimensions"])),
    "square": lambda e, x: x * x,
    "erf": lambda e, x: torch.erf(x), "log1p": lambda e, x: torch.log1p(x),
    "expm1": lambda e, x: torch.expm1(x),
    "sign": lambda e, x: torch.where(torch.isnan(x), x, torch.sign(x)) if x.is_floating_point()
    else torch.sign(x),
    "floor": lambda e, x: torch.floor(x), "ceil": lambda e, x: torch.ceil(x),
    "and": lambda e, a, b: a & b, "or": lambda e, a, b: a | b, "not": lambda e, x: ~x,
    "stop_gradient": lambda e, x: x,
    "iota": lambda e: _iota(e),
}


def _name(fn) -> str:
    """A function's name (a ``functools.partial``'s function's)."""
    return getattr(fn, "__name__", None) or _name(getattr(fn, "func", None)) if fn else "kernel"


class _Kernel:
    """A JAX function callable on torch tensors (see the module's docs)."""

    def __init__(self, fn, static_argnums):
        self.fn = fn
        self.static = tuple(sorted(static_argnums))
        self.cache: dict = {}
        functools.update_wrapper(self, fn)

    def _traced(self, args):
        jax = _jax()
        key = []
        avals = []
        for i, a in enumerate(args):
            if i in self.static:
                key.append(("s", a))
                avals.append(a)
                continue
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"{_name(self.fn)}: argument {i} is a {type(a).__name__}; "
                                "pass torch tensors, or name it in static_argnums")
            dt = _TORCH_TO_JAX.get(a.dtype)
            if dt is None:
                raise TypeError(
                    f"{_name(self.fn)}: argument {i} has dtype {a.dtype}; Pallas kernels take "
                    f"{', '.join(str(d) for d in _TORCH_TO_JAX)} (JAX without x64 has no int64)")
            key.append((tuple(a.shape), dt))
            avals.append(jax.ShapeDtypeStruct(tuple(a.shape), dt))
        key = tuple(key)
        hit = self.cache.get(key)
        if hit is None:
            hit = jax.make_jaxpr(self.fn, static_argnums=self.static, return_shape=True)(*avals)
            self.cache[key] = hit
        return hit

    def _flat(self, args):
        """The outputs of ``fn`` on ``args``, flattened, and their tree."""
        closed, out_shape = self._traced(args)
        tensors = [a for i, a in enumerate(args) if i not in self.static]
        for i, t in enumerate(tensors):
            if t.device.type != "tpu" and t.device.type != "meta":
                raise ValueError(f"{_name(self.fn)}: tensor argument {i} is on {t.device}, "
                                 "not on tpu")
        device = tensors[0].device if tensors else torch.device("tpu")
        _DEVICE[0] = device
        with _as_one_computation(tensors):
            outs = _run(closed.jaxpr, closed.consts, tensors, device)
        return outs, _jax().tree_util.tree_structure(out_shape)

    def _split(self, args):
        """``fn`` split at its residuals, as JAX's reverse mode splits it: a kernel of the
        forward (tensors to outputs, then residuals) and one of the backward (residuals, then
        one cotangent per output, to one gradient per tensor), and the number of outputs. The
        forward's residuals are what JAX saves (a ``custom_vjp`` such as ``flash_attention``'s
        saves its own), so the backward does not run the forward again."""
        key = tuple((a if i in self.static else (tuple(a.shape), a.dtype))
                    for i, a in enumerate(args))
        hit = self.cache.get(("split", key))
        if hit is not None:
            return hit
        jax = _jax()
        static = {i: a for i, a in enumerate(args) if i in self.static}
        n = len(args) - len(static)
        fn = self.fn
        held = {}

        def full(*xs):
            it = iter(xs)
            return fn(*[static[i] if i in static else next(it) for i in range(len(args))])

        def forward(*xs):
            out, pull = jax.vjp(full, *xs)
            flat, tree = jax.tree_util.tree_flatten(out)
            # The pullback is a pytree whose leaves are the residuals, of any dtype (integer
            # indices and boolean masks too).
            res, res_tree = jax.tree_util.tree_flatten(pull)
            held["res_tree"], held["out_tree"], held["n"] = res_tree, tree, len(flat)
            return (*flat, *res)

        def backward(*flat):
            k = held["n"]
            nres = len(flat) - k
            pull = jax.tree_util.tree_unflatten(held["res_tree"], list(flat[:nres]))
            return pull(jax.tree_util.tree_unflatten(held["out_tree"], list(flat[nres:])))

        forward.__name__ = f"{_name(fn)}_fwd"
        backward.__name__ = f"{_name(fn)}_bwd"
        fwd = _Kernel(forward, ())
        # Tracing the forward fixes the backward's jaxpr and the number of outputs.
        avals = [a for i, a in enumerate(args) if i not in self.static]
        fwd._traced(avals)
        hit = (fwd, _Kernel(backward, ()), held["n"])
        del n
        self.cache[("split", key)] = hit
        return hit

    def assembly(self, *args) -> list[str]:
        """The programs the ``pallas_call``s of ``fn`` lower to for these arguments (tensors,
        or anything with ``shape`` and ``dtype``), as assembly text, in the order they run."""
        closed, _ = self._traced(args)
        found = []

        def walk(j):
            for e in j.eqns:
                if e.primitive.name == "pallas_call":
                    found.append(e)
                elif e.primitive.name in _CALL_PRIMS:
                    sub = (e.params.get("jaxpr") or e.params.get("call_jaxpr")
                           or e.params.get("fun_jaxpr"))
                    walk(sub.jaxpr)

        walk(closed.jaxpr)
        out = []
        for e in found:
            text = json.dumps(_kernel_spec(e), separators=(",", ":"), sort_keys=True)
            try:
                out.append(_rust.pallas_assembly(text))
            except RuntimeError as err:
                raise _refusal(err) from None
        return out

    def __call__(self, *args):
        tensors = [a for i, a in enumerate(args) if i not in self.static]
        if not tensors:
            raise TypeError(f"{_name(self.fn)}: a kernel call needs at least one tensor "
                            "argument (its device and the operator's dispatch come from them)")
        if torch.is_grad_enabled() and any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            outs = _Differentiable.apply(self, args, *tensors)
            _, out_shape = self._traced(args)
            tree = _jax().tree_util.tree_structure(out_shape)
        else:
            outs, tree = self._flat(args)
            outs = _fresh(outs)
        return _jax().tree_util.tree_unflatten(tree, list(outs))


class _Differentiable(torch.autograd.Function):
    """A kernel call that PyTorch's autograd differentiates through JAX's reverse mode: the
    forward kernel returns the outputs and JAX's residuals, kept for the backward kernel."""

    @staticmethod
    def forward(ctx, kernel, args, *tensors):
        fwd, bwd, n = kernel._split(args)
        flat, _ = fwd._flat(list(tensors))
        outs, res = _fresh(flat[:n]), flat[n:]
        # A residual that is a constant comes back a Python number: a 0-d tensor of its dtype.
        closed, _ = fwd._traced(list(tensors))
        avals = [v.aval for v in closed.jaxpr.outvars[n:]]
        res = [r if isinstance(r, torch.Tensor) else torch.tensor(
            r, dtype=_JAX_TO_TORCH[_dtype_name(a.dtype)], device=_DEVICE[0])
            for r, a in zip(res, avals)]
        ctx.bwd, ctx.nout = bwd, n
        ctx.shapes = [(tuple(o.shape), o.dtype) for o in outs]
        ctx.floating = [t.is_floating_point() for t in tensors]
        ctx.save_for_backward(*res)
        ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        res = ctx.saved_tensors
        device = res[0].device if res else _DEVICE[0]
        cts = [g.contiguous() if g is not None else torch.zeros(s, dtype=d, device=device)
               for g, (s, d) in zip(grads, ctx.shapes)]
        grads_in = ctx.bwd._flat([*res, *cts])[0]
        out = [g if f and g is not None else None for f, g in zip(ctx.floating, grads_in)]
        return (None, None, *out)


def custom_jax_kernel(fn=None, *, static_argnums=()):
    """Makes the JAX function ``fn`` a function of torch tensors on "tpu" whose ``pallas_call``s
    run as kernels of the emulated chip (see the module's docs). Use as
    ``custom_jax_kernel(fn)``, ``@custom_jax_kernel`` or
    ``@custom_jax_kernel(static_argnums=(2,))``."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    def wrap(f):
        k = _Kernel(f, static_argnums)
        try:
            torch._dynamo.allow_in_graph(k)
        except Exception:  # noqa: BLE001 - dynamo may be unavailable; eager still works
            pass
        return k

    return wrap if fn is None else wrap(fn)
