"""Writes from_torch.json: fixed samples of the indexing, ordering, scan and shape operators
with the outputs PyTorch 2.15.0 computes for them, for the op suite's `from_torch` tests.

Run with the project's Python (torch 2.15.0):
    ~/.cache/tpuemu/venv/bin/python backend/tests/backend/op_suite/from_torch.py
Every sample calls `torch.ops.aten.<name>.<overload>` on CPU tensors; the Rust side uploads the
same values (some through a non-contiguous placement: "t" = dims stored in reverse order, "s" =
every other element of the storage after an offset) and compares in every mode. Values are
multiples of 1/4 so that sums and scans are exact in every dtype.
"""
import json
import math
import os

import torch

aten = torch.ops.aten
torch.manual_seed(0)
F, BF, H, I32, I64, B = (torch.float32, torch.bfloat16, torch.float16, torch.int32,
                         torch.int64, torch.bool)
U8, I8 = torch.uint8, torch.int8
DT = {F: "float32", BF: "bfloat16", H: "float16", I32: "int32", I64: "int64", B: "bool",
      U8: "uint8", I8: "int8"}
SAMPLES = []


class Placed:
    """A tensor argument uploaded through a non-contiguous placement."""

    def __init__(self, t, place):
        self.t, self.place = t, place


def num(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return int(x) if x == int(x) and abs(x) < 2**53 else x


def tensor(t, place="c"):
    t = t.detach()
    data = t.to(torch.float64 if t.dtype != torch.int64 else torch.int64).reshape(-1).tolist()
    return {"shape": list(t.shape), "dtype": DT[t.dtype], "data": [num(v) for v in data],
            "place": place}


def arg(a):
    if isinstance(a, Placed):
        return {"t": tensor(a.t, a.place)}
    if isinstance(a, torch.Tensor):
        return {"t": tensor(a)}
    if isinstance(a, torch.dtype):
        return {"dtype": DT[a]}
    if a is None:
        return {"none": True}
    if isinstance(a, bool):
        return {"bool": a}
    if isinstance(a, int):
        return {"int": a}
    if isinstance(a, float):
        return {"float": num(a)}
    if isinstance(a, str):
        return {"str": a}
    if isinstance(a, (list, tuple)):
        if any(isinstance(x, (torch.Tensor, Placed)) for x in a):
            if any(x is None for x in a):
                return {"ots": [None if x is None else arg(x)["t"] for x in a]}
            return {"ts": [arg(x)["t"] for x in a]}
        if all(isinstance(x, bool) for x in a) and a:
            return {"bools": list(a)}
        if all(isinstance(x, int) and not isinstance(x, bool) for x in a):
            return {"ints": list(a)}
        return {"floats": [num(x) for x in a]}
    raise TypeError(a)


def plain(a):
    if isinstance(a, Placed):
        return a.t.clone()
    if isinstance(a, torch.Tensor):
        return a.clone()
    if isinstance(a, (list, tuple)) and any(isinstance(x, (torch.Tensor, Placed)) for x in a):
        return [plain(x) if x is not None else None for x in a]
    return a


def flat(r):
    if isinstance(r, torch.Tensor):
        return [r]
    out = []
    for x in r:
        out.extend(flat(x))
    return out


def sample(op, *args, meta=False, **kwargs):
    """One call of `aten::op` with positional `args` (and keyword-only `kwargs`)."""
    base, _, overload = op.partition(".")
    fn = getattr(getattr(aten, base), overload or "default")
    r = fn(*[plain(a) for a in args], **{k: plain(v) for k, v in kwargs.items()})
    outs = []
    for t in flat(r):
        o = tensor(t)
        o.pop("place")
        if meta:
            o.pop("data")
        outs.append(o)
    SAMPLES.append({"op": "aten::" + op, "args": [arg(a) for a in args],
                    "kwargs": {k: arg(v) for k, v in kwargs.items()}, "outs": outs})


def q(*shape, dtype=F, lo=-8, hi=8):
    """Multiples of 1/4 in [lo, hi) (integers for integer dtypes)."""
    if dtype == B:
        return torch.randint(0, 2, shape).bool()
    if dtype in (I32, I64):
        return torch.randint(lo, hi, shape, dtype=dtype)
    return (torch.randint(lo * 4, hi * 4, shape).float() / 4).to(dtype)


def distinct(*shape, dtype=F):
    """Distinct values (a permutation of multiples of 1/4), so that orders have no ties."""
    n = math.prod(shape)
    if dtype in (I32, I64):
        return (torch.randperm(n) - n // 2).reshape(shape).to(dtype)
    v = torch.randperm(n).float() / 4 - n / 8
    return v.reshape(shape).to(dtype)


def t(x):
    return Placed(x, "t")


def s(x):
    return Placed(x, "s")


def idx(n, hi, dtype=I64, lo=0):
    return torch.randint(lo, hi, (n,) if isinstance(n, int) else n, dtype=dtype)


# --- ordering ---------------------------------------------------------------------------
for dt in (F, BF, I32):
    x = distinct(3, 5, dtype=dt)
    sample("sort", x)
    sample("sort", t(x), 0, True)
    sample("argsort", x, 0)
    sample("argsort", s(x), -1, True)
    sample("msort", x)
    sample("topk", x, 2)
    sample("topk", t(x), 2, 0, False)
    sample("kthvalue", x, 3)
    sample("kthvalue", x, 2, 0, True)
    sample("median", x)
    sample("median.dim", x, 1)
    sample("nanmedian", x)
    sample("nanmedian.dim", t(x), 0, True)
ties = torch.tensor([[3, 1, 3, 2, 1, 3], [0, 0, 5, 5, 5, 0]], dtype=F)
sample("sort.stable", ties, stable=True)
sample("sort.stable", ties, stable=True, dim=0, descending=True)
sample("argsort.stable", ties, stable=True)
sample("argsort.stable", ties, stable=True, descending=True)
sample("mode", torch.tensor([[1, 2, 2, 3, 7], [4, 4, 1, 1, 4]], dtype=F))
sample("mode", torch.tensor([[1, 2, 2, 3, 7], [4, 4, 1, 1, 4]], dtype=I32), 0, True)
nan = torch.tensor([[1.5, float("nan"), -2.0, 0.5], [float("nan"), float("nan"), 3.0, 1.0]])
sample("nanmedian", nan)
sample("nanmedian.dim", nan, 1)
sample("median.dim", nan, 1)

# --- scans ------------------------------------------------------------------------------
for dt in (F, BF, I32, I64):
    x = q(3, 6, dtype=dt, lo=-3, hi=4)
    sample("cumsum", x, 1)
    sample("cumsum", t(x), 0)
    sample("cumprod", x, 1)
    sample("cummax", s(x), 1)
    sample("cummin", x, 0)
sample("cumsum", q(4, 5, dtype=I32), 1, dtype=F)
sample("cumsum", q(700, dtype=F, lo=-2, hi=2), 0)
sample("cumsum", q(4, 5, dtype=B), -1)
sample("cummax", torch.tensor([1.0, float("nan"), 3.0, 0.0]), 0)
sample("logcumsumexp", q(3, 6), 1)
sample("logcumsumexp", t(q(3, 6, dtype=BF)), 0)

# --- searches ---------------------------------------------------------------------------
bounds = torch.tensor([-2.0, -0.5, 0.0, 1.0, 3.5])
sample("bucketize.Tensor", q(3, 4, lo=-3, hi=4), bounds)
sample("bucketize.Tensor", q(3, 4, lo=-3, hi=4), bounds, out_int32=True, right=True)
sample("bucketize.Scalar", 0.0, bounds)
sample("searchsorted.Tensor", torch.sort(q(2, 5, lo=-3, hi=4), -1)[0], q(2, 3, lo=-3, hi=4))
sample("searchsorted.Tensor", bounds, q(6, lo=-3, hi=4), right=True)
sample("searchsorted.Scalar", bounds, 1.0, side="left")
sample("isin.Tensor_Tensor", q(3, 4, dtype=I64), q(5, dtype=I64))
sample("isin.Tensor_Tensor", q(3, 4), q(5), invert=True)
sample("isin.Tensor_Scalar", q(3, 4, dtype=I32), 2)
sample("isin.Scalar_Tensor", 2, q(5, dtype=I64))
sample("bincount", idx(10, 6))
sample("bincount", idx(8, 4), q(8), 6)
sample("histc", q(20, lo=-4, hi=4), 8, -4, 4)
sample("histc", q(20, lo=-4, hi=4), 5)
sample("histogram.bin_ct", q(20, lo=-4, hi=4), 4)
sample("histogram.bin_ct", torch.tensor(-1.25), 1)
sample("histc", torch.tensor([2.0, 2.0]), 3)
sample("histogram.bin_ct", q(20, lo=-4, hi=4), 4, range=[-2.0, 2.0], weight=q(20), density=True)

# --- unique -----------------------------------------------------------------------------
u = q(12, dtype=I64, lo=0, hi=5)
sample("_unique", u)
sample("_unique", u, True, True)
sample("_unique2", u, True, True, True)
sample("_unique2", q(3, 4, lo=-1, hi=2), True, False, True)
sample("unique_consecutive", torch.tensor([1, 1, 2, 2, 3, 1, 1, 2]), True, True)
sample("unique_consecutive", torch.tensor([[1, 1], [1, 1], [2, 3], [2, 3]]), True, True, 0)
sample("unique_consecutive", torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0]), False, False, -1)

# --- compaction -------------------------------------------------------------------------
for dt in (F, I64, B):
    x = q(3, 4, dtype=dt, lo=-1, hi=2)
    sample("nonzero", x)
    sample("argwhere", t(x))
    sample("nonzero_numpy", x)
    sample("where", x)
sample("nonzero_static", q(3, 4, lo=-1, hi=2), size=4)
sample("nonzero_static", q(3, 4, lo=-1, hi=2), size=20, fill_value=-5)
m = q(3, 4, dtype=B)
sample("masked_select", q(3, 4), m)
sample("masked_select", t(q(3, 4, dtype=BF)), q(4, dtype=B))
sample("masked_scatter", q(3, 4), m, q(12))
sample("masked_scatter", q(3, 4, dtype=I32), q(4, dtype=B), q(5, 4, dtype=I32))
sample("where.Scalar", m, 1.5, -2)
sample("where.ScalarOther", m, q(3, 4, dtype=BF), 2.0)
sample("where.ScalarSelf", m, 3, q(3, 4, dtype=I32))

# --- advanced indexing ------------------------------------------------------------------
x = q(4, 5, 3)
sample("index.Tensor", x, [idx(3, 4)])
sample("index.Tensor", t(x), [None, idx((2, 2), 5, I32)])
sample("index.Tensor", x, [idx(3, 4), None, idx(3, 3)])
sample("index.Tensor", x, [q(4, 5, dtype=B)])
sample("index.Tensor", x, [idx(2, 4, lo=-4)])
sample("_unsafe_index.Tensor", x, [idx(3, 4), idx(3, 5)])
sample("index_put", x, [idx(3, 4), idx(3, 5)], q(3))
sample("index_put", x, [torch.tensor([0, 2, 0]), None, idx(3, 3)], q(3, 5), True)
sample("index_put", q(4, 5, dtype=I32), [q(4, 5, dtype=B)], torch.tensor(7, dtype=I32))
sample("_unsafe_index_put", x, [idx(3, 4)], q(5, 3), True)
sample("_unsafe_masked_index", x, q(3, 5, 3, dtype=B),
       [idx((3, 1, 1), 4), idx((1, 5, 1), 5), idx((1, 1, 3), 3)], -1.5)
sample("_unsafe_masked_index_put_accumulate", q(4, 5), q(3, 2, dtype=B),
       [idx((3, 2), 4), idx((3, 2), 5)], q(3, 2))

# --- element scatters -------------------------------------------------------------------
for dt in (F, BF, I64):
    base = q(3, 5, dtype=dt)
    src = q(3, 5, dtype=dt)
    ind = idx((2, 4), 3)
    sample("scatter.src", base, 0, ind, src)
    sample("scatter.value", t(base), 1, idx((3, 2), 5), 2.5 if dt != I64 else 2)
    sample("scatter_add", base, 0, ind, s(src))
    sample("scatter.reduce", base, 0, ind, src, reduce="multiply")
    sample("scatter.value_reduce", base, 1, idx((3, 3), 5), 2, reduce="add")
    for red in ("sum", "prod", "mean", "amax", "amin"):
        sample("scatter_reduce.two", base, 0, ind, src, red)
        sample("scatter_reduce.two", base, 1, idx((3, 4), 5), src, red, include_self=False)
    sample("take", base, idx((2, 3), 15, lo=-15))
    sample("take_along_dim", base, idx((3, 2), 5), 1)
    sample("take_along_dim", base, idx(4, 15))
    sample("put", base, idx(4, 15, lo=-15), q(4, dtype=dt))
    sample("put", base, torch.tensor([1, 1, 7]), q(3, dtype=dt), True)

# --- puts along a dim -------------------------------------------------------------------
for dt in (F, BF, I32):
    base = q(5, 3, dtype=dt)
    src = q(4, 3, dtype=dt)
    ind = torch.tensor([4, 0, 4, 2])
    sample("index_add", base, 0, ind, src)
    sample("index_add", t(base), 1, torch.tensor([2, 0]), q(5, 2, dtype=dt), alpha=2)
    sample("index_copy", base, 0, torch.tensor([3, 0, 1, 2]), src)
    sample("index_fill.int_Scalar", base, 1, torch.tensor([0, 2]), -1)
    sample("index_fill.int_Tensor", base, 0, torch.tensor([1, -1]), torch.tensor(3, dtype=dt))
    for red in ("prod", "mean", "amax", "amin"):
        sample("index_reduce", base, 0, ind, src, red)
        sample("index_reduce", base, 0, ind, src, red, include_self=False)
sample("index_select_backward", q(2, 3), [4, 3], 0, torch.tensor([3, 3]))

# --- view backward and scatter forms ----------------------------------------------------
sample("select_backward", q(4), [3, 4], 0, 1)
sample("select_scatter", q(3, 4), t(q(3)), 1, -1)
sample("slice_backward", q(2, 4), [5, 4], 0, 1, 5, 2)
sample("slice_scatter", q(5, 4, dtype=BF), q(5, 2, dtype=BF), 1, 1, None, 2)
sample("diagonal_backward", q(3), [3, 4], 1, 0, 1)
sample("diagonal_scatter", q(4, 3, dtype=I32), q(2, dtype=I32), -2)
sample("as_strided_scatter", q(4, 4), q(2, 2), [2, 2], [4, 1], 5)
# as_strided reads the storage: its input is contiguous (a placement would change the result).
sample("as_strided_copy", q(4, 4), [3, 2], [1, 4], 1)
sample("unfold_backward", q(2, 3, 2), [2, 6], 1, 2, 2)
sample("unfold_backward", q(3, 2), [4], 0, 2, 1)

# --- views and copies -------------------------------------------------------------------
x = q(2, 1, 3, 1)
sample("squeeze", x)
sample("squeeze.dims", x, [1, -1])
sample("squeeze_", x)
sample("squeeze_.dim", x, 1)
sample("squeeze_.dims", x, [1, 3])
sample("squeeze_copy", t(x))
sample("squeeze_copy.dim", x, 3)
sample("squeeze_copy.dims", x, [0, 1])
sample("unsqueeze_", q(2, 3), 1)
sample("unsqueeze_copy", t(q(2, 3)), -1)
sample("t_", q(2, 3))
sample("t_copy", t(q(2, 3)))
sample("transpose_", q(2, 3, 4), 0, 2)
sample("transpose_copy.int", q(2, 3, 4), 0, -1)
sample("permute_copy", s(q(2, 3, 4)), [2, 0, 1])
sample("alias", q(2, 3))
sample("alias_copy", t(q(2, 3)))
sample("view_copy", q(2, 6), [3, 4])
sample("_reshape_copy", t(q(2, 6)), [4, -1])
sample("expand_copy", q(3, 1), [2, 3, 4])
sample("narrow", q(5, 3), 0, 1, 3)
sample("narrow_copy", t(q(5, 3)), 1, 1, 2)
sample("select_copy.int", q(3, 4), 1, -1)
sample("slice_copy.Tensor", q(6, 2), 0, 1, 6, 2)
sample("diagonal", q(3, 4), 1)
sample("diagonal_copy", t(q(3, 4, 2)), -1, 0, 1)
sample("unfold", q(2, 7), 1, 3, 2)
sample("unfold_copy", t(q(5, 2)), 0, 2, 1)
sample("unbind.int", q(3, 2))
sample("unbind_copy.int", t(q(3, 2)), 1)
x = q(7, 2, dtype=BF)
sample("split_with_sizes", x, [2, 5])
sample("split_with_sizes", t(x), [1, 1], 1)
sample("split_with_sizes_copy", x, [3, 0, 4])
sample("split_copy.Tensor", x, 3)
sample("unsafe_split.Tensor", x, 3)
sample("unsafe_split.Tensor", t(x), 1, 1)
sample("unsafe_split_with_sizes", x, [6, 1])

# --- rearrangements ---------------------------------------------------------------------
for dt in (F, I64, B):
    x = q(3, 4, dtype=dt)
    sample("roll", x, [1], [0])
    sample("roll", t(x), [-5, 2], [1, 0])
    sample("roll", x, [3])
    sample("rot90", x)
    sample("rot90", t(x), 2)
    sample("rot90", x, -1, [1, 0])
    sample("repeat", x, [2, 1, 3])
    sample("repeat", s(x), [1, 2])
    sample("diag_embed", x)
    sample("diag_embed", x, -1, 0, 2)
    sample("block_diag", [x, q(2, dtype=dt), q(1, 3, dtype=dt)])
sample("repeat_interleave.Tensor", torch.tensor([2, 0, 3, 1]))
sample("repeat_interleave.self_Tensor", q(4, 2), torch.tensor([2, 0, 3, 1]), 0)
sample("repeat_interleave.self_Tensor", q(2, 3), torch.tensor([2]))
sample("repeat_interleave.self_int", q(2, 3, dtype=I32), 2, 1)
sample("repeat_interleave.self_int", q(2, 3), 3)
sample("_chunk_cat", [q(3, 4), q(3, 5)], 1, 2)
sample("_chunk_cat", [q(4, 2, dtype=BF), q(2, 3, dtype=BF)], 0, 3)
sample("pixel_shuffle", q(1, 8, 2, 3), 2)
sample("pixel_unshuffle", q(2, 4, 6), 2)
sample("channel_shuffle", q(1, 6, 2, 2), 3)
sample("native_channel_shuffle", q(2, 4, 3), 2)
sample("im2col", q(1, 2, 4, 5), [2, 3], [1, 1], [1, 0], [2, 1])
sample("col2im", q(1, 4 * 1, 6), [3, 4], [2, 2], [1, 1], [0, 0], [1, 1])

# --- reductions -------------------------------------------------------------------------
for dt in (F, BF, I32, B):
    x = q(3, 4, dtype=dt, lo=-1, hi=2)
    for op in ("any", "all"):
        sample(op, x)
        sample(op + ".dim", t(x), 1)
        sample(op + ".dim", x, 0, True)
        sample(op + ".dims", x, [0, 1])
        sample(op + ".dims", x, None, True)
        sample(op + ".dims", q(2, 0, 3, dtype=dt), [1])
    sample("aminmax", x)
    sample("aminmax", t(x), dim=0, keepdim=True)
    sample("aminmax", x, dim=-1)
sample("all", torch.tensor([[1.0, float("nan")], [0.5, 2.0]]))
for dt in (F, BF, I64, B):
    x = q(3, 4, dtype=dt, lo=-1, hi=2)
    sample("count_nonzero", x)
    sample("count_nonzero", t(x), 1)
    sample("count_nonzero.dim_IntList", x, [0, 1])
    sample("count_nonzero.dim_IntList", x, [-2])
sample("count_nonzero", torch.tensor([[0.0, float("nan")], [0.0, 2.0]]), 0)
sample("aminmax", torch.tensor([[1.0, float("nan")], [0.5, 2.0]]), dim=1)
for dt in (F, BF):
    x = q(3, 5, dtype=dt)
    for op in ("var_mean", "std_mean"):
        sample(op + ".correction", x)
        sample(op + ".correction", t(x), [1], correction=0, keepdim=True)
        sample(op + ".correction", x, [0], correction=2)
        sample(op, x)
        sample(op, x, False)
        sample(op + ".dim", x, [1])
        sample(op + ".dim", s(x), [0], False, True)
    for o in (2, 1, 0, 3, 0.5, float("inf"), float("-inf")):
        sample("linalg_vector_norm", x, o)
        sample("linalg_vector_norm", t(x), o, [1], True)
    sample("linalg_vector_norm", x, 2, [0], dtype=F)
    sample("linalg_vector_norm", q(2, 0), 2, [1])
    sample("norm.Scalar", x)
    sample("norm.Scalar", x, 1)
    sample("norm.ScalarOpt_dim", x, None, [1])
    sample("norm.ScalarOpt_dim", t(x), 3, [0], True)
    sample("norm.ScalarOpt_dim_dtype", x, 2, [1], False, dtype=F)
    sample("norm.ScalarOpt_dtype", x, float("inf"), dtype=F)
    sample("logsumexp", x, [1])
    sample("logsumexp", t(x), [0, 1], True)
sample("logsumexp", q(3, 4, dtype=I64), [0])
sample("logsumexp", torch.tensor([[float("-inf"), float("-inf")], [float("inf"), 1.0]]), [1])
sample("logsumexp", q(2, 0), [1])
sample("linalg_vector_norm", torch.tensor(-1.5), 2, [0])
sample("linalg_vector_norm", torch.tensor(-1.5), 2, [])

# --- factories --------------------------------------------------------------------------
sample("eye", 3)
sample("eye.m", 2, 4, dtype=I64)
sample("linspace", -1.0, 2.0, 7)
sample("linspace", 0, 10, 4, dtype=I64)
sample("linspace.Tensor_Scalar", torch.tensor(1.0), 3.0, 5)
sample("linspace.Scalar_Tensor", 1.0, torch.tensor(3.0), 5)
sample("linspace.Tensor_Tensor", torch.tensor(-1.0), torch.tensor(3.0), 9, dtype=BF)
sample("logspace", -1.0, 2.0, 4)
sample("logspace", 0.0, 3.0, 4, 2.0)
sample("logspace.Tensor_Scalar", torch.tensor(0.0), 2.0, 3)
sample("logspace.Scalar_Tensor", 0.0, torch.tensor(2.0), 3)
sample("logspace.Tensor_Tensor", torch.tensor(1.0), torch.tensor(2.0), 3, 2.0)
sample("tril_indices", 3, 4)
sample("tril_indices", 4, 3, -1)
sample("triu_indices", 3, 4, 1)
sample("triu_indices", 3, 3, 0, dtype=I32)
sample("empty_strided", [2, 3], [1, 2], meta=True)
sample("empty_permuted", [2, 3, 4], [2, 0, 1], dtype=I32, meta=True)
sample("resize_", q(2, 3), [3, 2], meta=True)
sample("resize_as_", q(2, 3), q(6), meta=True)

# --- orthogonal polynomials (x, n): edges |x| == 1, x == 0, n < 0, trigonometric forms ---
px = torch.tensor([-3.0, -1.0, -0.75, -0.3, 0.0, 0.2, 0.5, 0.9, 1.0, 2.5, float("nan")])
pn = torch.tensor([-1.0, 0.0, 1.0, 2.0, 3.7, 5.0, 7.0, 9.0, 12.0, float("nan")])
for kind in ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
             "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
             "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
             "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
             "laguerre_polynomial_l", "legendre_polynomial_p"]:
    xs = px / 2 + 0.5 if kind.startswith("shifted") else px
    sample("special_" + kind, xs[:, None], pn)
    sample("special_" + kind, q(2, 3, dtype=I64, lo=-2, hi=3), q(3, dtype=I64, lo=-1, hi=6))

# --- decompositions: trace (diagonal().sum(); integers sum to int64), vdot (dot) ---------
sample("trace", q(3, 4))
sample("trace", t(q(4, 3)))
sample("trace", q(3, 3, dtype=I32))
sample("trace", q(0, 2))
sample("vdot", q(5), q(5))
sample("vdot", q(4, dtype=BF), q(4, dtype=BF))
nx = q(3, 4)
nx[0, 1] = nx[2, 3] = float("nan")
sample("nansum", nx)
sample("nansum", t(nx), [1], True)
sample("nansum", nx, [0], dtype=F)
sample("nansum", q(2, 3, dtype=I32), [1])

# --- compositions (ops/compose): products on the vector unit, losses, norms ---------------
sample("addr", q(3, 4), q(3), q(4))
sample("addr", q(3, 4), t(q(3)), q(4), beta=0.5, alpha=0.25)
sample("addr", q(3, 4, dtype=I64), q(3, dtype=I64), q(4, dtype=I64), beta=2, alpha=3)
sample("addr", q(3, 4, dtype=B), q(3, dtype=B), q(4, dtype=B))
sample("addr", q(3, 4, dtype=BF), q(3, dtype=BF), q(4, dtype=BF), beta=0)
sample("addmv", q(3), q(3, 4), q(4))
sample("addmv", q(3, dtype=I32), t(q(3, 4, dtype=I32)), q(4, dtype=I32), beta=2, alpha=-1)
sample("addmv", q(1, dtype=BF), q(3, 4, dtype=BF), q(4, dtype=BF), beta=0.5)
sample("addbmm", q(3, 5), q(2, 3, 4), q(2, 4, 5))
sample("addbmm", q(3, 5, dtype=I64), q(2, 3, 4, dtype=I64), q(2, 4, 5, dtype=I64), beta=0, alpha=2)
sample("addbmm", q(5), q(2, 3, 4, dtype=F), q(2, 4, 5), beta=-1)
sample("_trilinear", q(4, 3), q(5, 3, 2), q(4, 2), [1, 3], [0], [1, 2], [2, 3])
sample("_trilinear", q(4, 3, dtype=I64), q(5, 3, 2, dtype=I64), q(4, 2, dtype=I64), [1, 3], [0],
       [1, 2], [2, 3])
sample("_trilinear", q(2, 3), q(2, 3), q(2, 3), [], [], [], [1])
sample("linalg_cross", q(4, 3), q(4, 3))
sample("linalg_cross", q(3, 5, dtype=I32), q(3, 1, dtype=I32), dim=0)
sample("linalg_cross", t(q(2, 3, dtype=BF)), q(3, dtype=BF).expand(2, 3).clone())
sample("mse_loss", q(3, 4), q(3, 4))
sample("mse_loss", q(3, 4, dtype=BF), q(3, 4, dtype=BF), 0)
sample("mse_loss", q(5), t(q(5)), 2)
sample("mse_loss_backward", q(), q(3, 4), q(3, 4), 1)
sample("mse_loss_backward", q(3, 4), q(3, 4), q(3, 4), 0)
sample("huber_loss", q(3, 4), q(3, 4), 1, 0.5)
sample("huber_loss", q(6, dtype=BF), q(6, dtype=BF), 0, 2.0)
sample("smooth_l1_loss", q(3, 4), q(3, 4), 2, 2.0)
sample("smooth_l1_loss", q(6), q(6), 0, 0.0)
sample("soft_margin_loss", q(3, 4, lo=-2, hi=2), q(3, 4, dtype=B).float() * 2 - 1)
sample("soft_margin_loss", q(6, lo=-2, hi=2), q(6, lo=-1, hi=2), 0)
probs = torch.tensor([[0.125, 0.25, 0.5, 0.75], [0.875, 0.0625, 0.9375, 0.5], [0.0, 1.0, 0.25, 0.5]])
labels = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.5, 1.0], [0.0, 1.0, 0.0, 1.0]])
sample("binary_cross_entropy", probs, labels)
sample("binary_cross_entropy", probs, labels, q(4), 0)
sample("binary_cross_entropy", probs.to(BF), labels.to(BF), None, 2)
sample("binary_cross_entropy_with_logits", q(3, 4), labels)
sample("binary_cross_entropy_with_logits", q(3, 4), labels, q(4), q(4, lo=0, hi=3), 0)
sample("binary_cross_entropy_with_logits", q(3, 4, dtype=BF), labels.to(BF), None, q(4, dtype=BF), 2)
sample("dist", q(3, 4), q(3, 4))
sample("dist", q(3, 4), q(4), 1)
sample("dist", q(5, dtype=BF), q(5, dtype=BF), 3.0)
sample("renorm", q(3, 4), 2, 0, 5.0)
sample("renorm", q(2, 3, 4), 1, -1, 4)
sample("renorm", q(4, 3, dtype=BF), 2, 1, 3.0)
sample("glu", q(3, 4))
sample("glu", q(4, 6, dtype=BF), 0)
sample("_prelu_kernel", q(2, 3, 4), q(1, 3, 1))
sample("_prelu_kernel", q(5, dtype=BF), q(1, dtype=BF))

# --- Bessel, Airy, i0 family, erfinv, ndtri, zeta (pointwise/bessel.rs, special.rs) -------
bx = torch.tensor([-9.5, -4.0, -1.25, -0.5, 0.0, 1e-6, 0.375, 1.0, 2.0, 3.5, 5.0, 6.5, 8.0, 12.0])
pos = torch.tensor([0.0, 1e-6, 0.25, 0.75, 1.5, 2.0, 2.5, 4.0, 5.0, 6.25, 9.0, 14.0])
for name in ["i0", "special_i0e", "special_i1", "special_i1e", "special_modified_bessel_i0",
             "special_modified_bessel_i1", "special_bessel_j0", "special_bessel_j1",
             "special_spherical_bessel_j0"]:
    sample(name, bx)
    sample(name, q(2, 3, dtype=I32, lo=-6, hi=7))
for name in ["special_modified_bessel_k0", "special_modified_bessel_k1", "special_bessel_y0",
             "special_bessel_y1", "special_scaled_modified_bessel_k0",
             "special_scaled_modified_bessel_k1"]:
    sample(name, pos)
    sample(name, torch.tensor([-1.0, 0.0, float("nan"), float("inf")]))
sample("special_airy_ai", torch.tensor([-12.0, -5.5, -2.5, -2.0, -1.0, 0.0, 0.5, 1.5, 2.0, 2.5,
                                        4.0, 9.0, float("inf"), float("-inf"), float("nan")]))
sample("special_airy_ai", q(2, 3, dtype=I64, lo=-4, hi=4))
sample("i0", q(2, 3, dtype=BF))
sample("special_i1e", q(4, dtype=H))
sample("erfinv", torch.tensor([-1.0, -0.999, -0.75, -0.5, -0.1, 0.0, 0.3, 0.7, 0.71, 0.95, 1.0,
                               1.5, float("nan")]))
sample("erfinv", q(5, dtype=I64, lo=-2, hi=3))
sample("erfinv", q(4, dtype=BF, lo=-1, hi=1))
sample("special_ndtri", torch.tensor([0.0, 1e-10, 1e-4, 0.05, 0.1353, 0.2, 0.5, 0.8, 0.9, 0.999,
                                      1.0, -0.5, 1.5]))
sample("special_ndtri", q(3, dtype=B))
sample("special_zeta", torch.tensor([2.0, 3.0, 1.5, 4.5, 1.0, 0.5, 2.0, 3.0]),
       torch.tensor([1.0, 2.5, 0.5, 3.0, 1.0, 1.0, -2.0, -1.5]))
sample("special_zeta", q(2, 3, dtype=I64, lo=2, hi=6), q(3, dtype=I64, lo=1, hi=4))

# --- float bits and divisibility (pointwise/bits.rs), erfcx and log_ndtr (special.rs) -------
sample("frexp.Tensor", torch.tensor([0.0, -0.0, 1.0, -3.5, 0.1, 1e-40, 6e4, float("inf"), float("nan")]))
sample("frexp.Tensor", q(2, 3, dtype=BF))
sample("nextafter", torch.tensor([0.0, 1.0, -1.0, 1.0, 2.5, -0.0, 3e38]),
       torch.tensor([-1.0, 2.0, 0.0, 1.0, -5.0, 1.0, float("inf")]))
sample("nextafter", q(4, dtype=BF), q(4, dtype=BF))
sample("nextafter", torch.tensor([0.0, 1.0, 6.1e-5, 2.0 ** -14, -2.0, 65504.0], dtype=H),
       torch.tensor([1.0, 0.0, 0.0, 0.0, -3.0, float("inf")], dtype=H))
sample("gcd", torch.tensor([0, -12, 7, 1071, 2 ** 20, 1836311903], dtype=I32),
       torch.tensor([0, 18, -21, 462, 3 * 2 ** 11, 1134903170], dtype=I32))
sample("gcd", q(3, 4, dtype=I64, lo=-20, hi=20), q(4, dtype=I64, lo=-20, hi=20))
sample("lcm", torch.tensor([0, -4, 6, 21, 9], dtype=I64), torch.tensor([5, 6, -4, 6, 0], dtype=I64))
sample("special_erfcx", torch.tensor([-30.0, -3.0, -1.0, -0.5, 0.0, 0.3, 0.9, 1.0, 2.5, 7.9, 8.0,
                                      20.0, 100.0, float("inf"), float("-inf"), float("nan")]))
sample("special_erfcx", q(5, dtype=I64, lo=-3, hi=3))
sample("special_log_ndtr", torch.tensor([-30.0, -10.0, -3.0, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5, 8.0,
                                         float("inf"), float("-inf"), float("nan")]))

# --- distances and the margin loss (compose/distances.rs) -------------------------------------
sample("_euclidean_dist", q(4, 3), q(5, 3))
sample("_cdist_forward", q(2, 4, 3), q(2, 5, 3), 1.0, None)
sample("_cdist_forward", q(4, 3), q(5, 3), 2.0, 1)
sample("_cdist_forward", q(4, 3), q(5, 3), float("inf"), 2)
sample("_pdist_forward", q(5, 3), 2.0)
sample("_pdist_forward", q(4, 2), 1.0)
sample("multi_margin_loss", q(4, 5), idx(4, 5))
sample("multi_margin_loss", q(4, 5), idx(4, 5), 2, 0.5, q(5, lo=0, hi=3), 0)
sample("multi_margin_loss", q(5), torch.tensor(2), 1, 1.0, None, 2)

# --- byte dtypes: conversions wrap, int8 loads sign-extend ---------------------------------
sample("_to_copy", torch.tensor([0.0, 3.75, 127.5, 200.25, 255.0]), dtype=U8)
sample("_to_copy", torch.tensor([-128.0, -1.5, 0.0, 3.75, 127.0]), dtype=I8)
sample("_to_copy", torch.tensor([-1, 256, 300, 7], dtype=I32), dtype=U8)
sample("_to_copy", torch.tensor([200, -129, 5, -7], dtype=I64), dtype=I8)
sample("_to_copy", torch.tensor([0, 1, 127, 128, 200, 255], dtype=U8), dtype=F)
sample("_to_copy", torch.tensor([-128, -1, 0, 5, 127], dtype=I8), dtype=I32)
# Operators the model zoo needs (mixture-of-experts layers, batch/group norm training, weight
# norm, the backward of advanced indexing).
I32T = lambda *v: torch.tensor(v, dtype=I32)  # noqa: E731
sample("_grouped_mm", q(6, 8), q(3, 8, 4), I32T(2, 2, 6))
sample("_grouped_mm", q(6, 8, dtype=BF), q(3, 8, 8, dtype=BF), I32T(1, 4, 6))
sample("_grouped_mm", q(3, 4, 8), q(8, 12), I32T(4, 8, 12))
sample("_grouped_mm", q(4, 12), q(12, 4), I32T(4, 4, 12))
sample("_grouped_mm", q(2, 4, 8), q(2, 8, 4))
bx, bdy, bw = q(3, 4, 5), q(3, 4, 5), q(4)
_, bmean, binv = aten.native_batch_norm(bx, bw, None, None, None, True, 0.1, 1e-5)
rm, rv = q(4), q(4, lo=1, hi=4)
sample("native_batch_norm_backward", bdy, bx, bw, rm, rv, bmean, binv, True, 1e-5,
       [True, True, True])
sample("native_batch_norm_backward", bdy, bx, None, rm, rv, bmean, binv, True, 1e-5,
       [True, True, True])
sample("native_batch_norm_backward", q(2, 3), q(2, 3), q(3), q(3), q(3, lo=1, hi=4), None, None,
       False, 1e-5, [True, True, True])
gx, gdy, gw = q(2, 6, 5), q(2, 6, 5), q(6)
_, gmean, grstd = aten.native_group_norm(gx, gw, q(6), 2, 6, 5, 3, 1e-5)
sample("native_group_norm_backward", gdy, gx, gmean, grstd, gw, 2, 6, 5, 3, [True, True, True])
sample("native_group_norm_backward", gdy, gx, gmean, grstd, None, 2, 6, 5, 3,
       [True, True, True])
sample("_index_put_impl", q(5, 3), [torch.tensor([0, 2, 2])], q(3, 3), True, False)
sample("_index_put_impl", q(5, 3), [torch.tensor([4, 1])], q(2, 3), False, True)
wv, wg = q(4, 3), q(4, 1, lo=1, hi=4)
sample("_weight_norm_interface", wv, wg, 0)
_, wn = aten._weight_norm_interface(wv, wg, 0)
sample("_weight_norm_interface_backward", q(4, 3), wv, wg, wn, 0)

# --- linear algebra (ops/linalg): well-conditioned float32 matrices; the rows of the LU
# samples are shuffled so that partial pivoting swaps rows ---------------------------------


def well(*shape):
    """A diagonally dominant matrix (or batch): entries in [-1, 1), n on the diagonal."""
    n = shape[-1]
    return q(*shape) / 8 + n * torch.eye(n)


def shuffled(*shape):
    """`well` with its rows in a fixed shuffled order."""
    return well(*shape)[..., torch.randperm(shape[-2]), :].contiguous()


def spd(*shape):
    """Symmetric positive-definite: M Mᵀ + n I."""
    m = q(*shape) / 8
    return m @ m.mT + shape[-1] * torch.eye(shape[-1])


la, lb = shuffled(3, 4, 4), q(3, 4, 2) / 4
sample("linalg_lu_factor_ex", la)
sample("linalg_lu_factor_ex", q(5, 3) / 4)
sample("linalg_lu_factor_ex", q(2, 3, 5) / 4)
sample("linalg_lu", la)
sample("linalg_lu", q(5, 3) / 4)
sample("linalg_lu", t(q(3, 5) / 4))
lu_, piv_ = torch.linalg.lu_factor(la)
sample("lu_unpack", lu_, piv_)
sample("lu_unpack", lu_, piv_, False, True)
lur, pivr = torch.linalg.lu_factor(q(5, 3) / 4)
sample("lu_unpack", lur, pivr)
sample("linalg_lu_solve", lu_, piv_, lb)
sample("linalg_lu_solve", lu_, piv_, lb, adjoint=True)
sample("linalg_lu_solve", lu_, piv_, q(3, 2, 4) / 4, left=False)
sample("_linalg_solve_ex", la, lb)
sample("_linalg_solve_ex", la, q(3, 4) / 4)
sample("_linalg_solve_ex", shuffled(4, 4), q(2, 3, 4) / 4, left=False)
sample("linalg_inv_ex", la)
sample("linalg_inv_ex", shuffled(5, 5))
singular = torch.tensor([[1.0, 2.0, 0.5], [2.0, 4.0, 1.0], [0.25, -1.0, 3.0]])
sample("_linalg_det", la)
sample("_linalg_det", singular)
sample("_linalg_det", torch.zeros(2, 0, 0))
sample("_linalg_slogdet", la)
sample("_linalg_slogdet", -shuffled(5, 5))
sample("_linalg_slogdet", singular)
sa = spd(2, 4, 4)
sample("linalg_cholesky_ex", sa)
sample("linalg_cholesky_ex", t(spd(5, 5)), upper=True)
cl = torch.linalg.cholesky(sa)
sample("_cholesky_solve_helper", lb[:2], cl, False)
sample("_cholesky_solve_helper", lb[:2], cl.mT.contiguous(), True)
sample("cholesky_inverse", cl)
sample("cholesky_inverse", cl[0].mT.contiguous(), True)
tu = well(2, 4, 4).triu()
sample("linalg_solve_triangular", tu, lb[:2], upper=True)
sample("linalg_solve_triangular", well(4, 4).tril(), q(3, 4, 2) / 4, upper=False)
sample("linalg_solve_triangular", tu, q(2, 3, 4) / 4, upper=True, left=False)
sample("linalg_solve_triangular", q(4, 4).tril() / 4, lb, upper=False, unitriangular=True)
sample("triangular_solve", lb[:2], tu)
sample("triangular_solve", lb[:2], tu, True, True)
sample("triangular_solve", q(4, 3) / 4, well(4, 4).tril(), False, False, True)
qa = q(5, 3) / 4
sample("geqrf", qa)
sample("geqrf", q(3, 5) / 4)
sample("geqrf", t(q(2, 4, 4) / 4))
qv, qtau = torch.geqrf(qa)
sample("linalg_householder_product", qv, qtau)
sample("linalg_householder_product", qv[:, :2].contiguous(), qtau[:1].contiguous())
sample("linalg_qr", qa)
sample("linalg_qr", qa, "complete")
sample("linalg_qr", q(2, 3, 5) / 4, "r")
sample("ormqr", qv, qtau, q(5, 2) / 4)
sample("ormqr", qv, qtau, q(5, 2) / 4, True, True)
sample("ormqr", qv, qtau, q(3, 5) / 4, False)
sample("ormqr", qv, qtau, q(3, 5) / 4, False, True)
# BatchNorm's training path in torch 2.15: the functional form of _batch_norm_with_update (the
# in-place one writes its running statistics: python/tests/test_ops.py) and its backward.
bnx, bnw, bnb = q(3, 4, 5), q(4), q(4)
bnrm, bnrv = q(4), q(4, lo=1, hi=4)
sample("_batch_norm_with_update_functional", bnx, bnw, bnb, bnrm, bnrv, 0.1, 1e-5)
sample("_batch_norm_with_update_functional", q(2, 3, 2, 2), None, None, q(3), q(3, lo=1, hi=4),
       0.3, 1e-3)
_, bnm, bni, bnres = aten._batch_norm_with_update(bnx.clone(), bnw, bnb, bnrm.clone(),
                                                   bnrv.clone(), 0.1, 1e-5)
sample("batch_norm_backward", q(3, 4, 5), bnx, bnw, bnrm, bnrv, bnm, bni, True, 1e-5,
       [True, True, True], bnres)
sample("batch_norm_backward", q(3, 4, 5), bnx, bnw, bnrm, bnrv, None, None, False, 1e-5,
       [True, True, True], bnres)
# nll_loss2d's backward (the pixels as rows of nll_loss_backward).
n2x, n2t, n2w = q(2, 3, 4, 5), torch.randint(0, 3, (2, 4, 5)), q(3, lo=1, hi=4)
n2t[0, 0, :2] = -100
for red, wt in ((1, n2w), (2, None), (0, n2w)):
    _, n2tw = aten.nll_loss2d_forward(n2x, n2t, wt, red, -100)
    n2g = q(2, 4, 5) if red == 0 else q()
    sample("nll_loss2d_backward", n2g, n2x, n2t, wt, red, -100, n2tw)
# Eigenvalues and singular values alone (vectors are unique only up to sign: linalg.rs).
sample("_linalg_eigh", spd(2, 4, 4), "L", False)
sample("_linalg_eigh", t(q(5, 5) / 4), "U", False)
sample("_linalg_svd", q(5, 3) / 4, False, False)
sample("_linalg_svd", q(2, 3, 6) / 4, True, False)

# Backward kernels of the gated activations and of edge padding (gradients PyTorch computes).
gx = q(3, 8, 2)
sample("glu_backward", q(3, 4, 2), gx, 1)
sample("glu_backward", q(1, 6), t(q(2, 6)), 0)
sample("glu_backward", q(3, 4, 2, dtype=BF), gx.to(BF), -2)
sample("_prelu_kernel_backward", q(2, 3, 4), q(2, 3, 4), q(3, 1, lo=-2, hi=2))
sample("_prelu_kernel_backward", q(5), q(5), q(1))
for mode in ("reflection", "replication"):
    sample(f"{mode}_pad1d_backward", q(2, 3, 9), q(2, 3, 5), [3, 1])
    sample(f"{mode}_pad1d_backward", q(4, 10), t(q(4, 6)), [2, 2])
    sample(f"{mode}_pad2d_backward", q(2, 6, 7), q(2, 4, 4), [1, 2, 0, 2])
    sample(f"{mode}_pad2d_backward", q(1, 2, 5, 5, dtype=BF), q(1, 2, 3, 3, dtype=BF), [1, 1, 1, 1])
    sample(f"{mode}_pad3d_backward", q(1, 3, 5, 6), q(1, 2, 3, 4), [1, 1, 2, 0, 1, 0])

# Adaptive max pooling's backward (the forward's flat indices; distinct values: no ties).
amx = distinct(2, 3, 5, 7)
_, ami = aten.adaptive_max_pool2d(amx, [2, 3])
sample("adaptive_max_pool2d_backward", q(2, 3, 2, 3), amx, ami)
amx3 = distinct(2, 4, 5, 6)
_, ami3 = aten.adaptive_max_pool3d(amx3, [2, 2, 3])
sample("adaptive_max_pool3d_backward", q(2, 2, 2, 3), amx3, ami3)

# multi_margin_loss's backward: p 1 and 2, a weight, the three reductions, one sample alone.
mmx, mmt, mmw = q(4, 5) / 4, torch.tensor([0, 3, 4, 1]), q(5, lo=1, hi=3)
sample("multi_margin_loss_backward", q(), mmx, mmt, 1, 1.0, None, 1)
sample("multi_margin_loss_backward", q(), mmx, mmt, 2, 0.5, mmw, 2)
sample("multi_margin_loss_backward", q(4), mmx, mmt, 1, 1.0, mmw, 0)
sample("multi_margin_loss_backward", q(), q(5) / 4, torch.tensor(2), 2, 1.0, None, 1)

# The pairwise distances' gradients (the forward's distances as PyTorch computes them; a
# repeated row gives a zero distance).
cx1, cx2 = q(2, 4, 3), q(2, 5, 3)
cx2[0, 1] = cx1[0, 2]
for cp in (1.0, 2.0, 0.5, 3.0, float("inf")):
    cd = aten._cdist_forward(cx1, cx2, cp, 2)
    sample("_cdist_backward", q(2, 4, 5), cx1, cx2, cp, cd)
px = q(5, 3)
px[3] = px[1]
for pp in (1.0, 2.0, 1.5):
    pd = aten._pdist_forward(px, pp)
    sample("_pdist_backward", q(10), px, pp, pd)

# --- histograms among given edges, and histogramdd (values on the edges: multiples of 1/4) ---
edges = torch.tensor([-4.0, -1.5, 0.0, 0.25, 3.0])
sample("histogram.bins_tensor", q(20, lo=-5, hi=5), edges)
sample("histogram.bins_tensor", q(20, lo=-4, hi=4), edges, weight=q(20, lo=0, hi=4), density=True)
sample("histogram.bins_tensor", Placed(q(4, 5), "t"), torch.tensor([-2.0, 2.0]))
pts = q(12, 3, lo=-4, hi=4)
box = [-2.0, 2.0, 0.0, 1.0, -4.0, 4.0]
sample("_histogramdd_bin_edges", pts, [3, 2, 4])
sample("_histogramdd_bin_edges", pts, [2, 2, 2], range=box)
sample("_histogramdd_from_bin_cts", pts, [3, 2, 4])
sample("_histogramdd_from_bin_cts", pts, [2, 3, 2], range=box, weight=q(12, lo=0, hi=4), density=True)
sample("_histogramdd_from_bin_tensors", q(10, 2, lo=-4, hi=4),
       [torch.tensor([-4.0, 0.0, 1.0, 4.0]), torch.tensor([-2.0, 2.0])])
sample("_histogramdd_from_bin_tensors", q(10, 2, lo=-4, hi=4),
       [torch.tensor([-4.0, 0.0, 4.0]), torch.tensor([-2.0, 0.0, 2.0])], weight=q(10, lo=0, hi=4), density=True)

# --- embedding_renorm: rows named (some twice, one from the end) above max_norm scaled ---------
ew = q(6, 4, lo=-4, hi=4)
sample("embedding_renorm", ew, torch.tensor([[0, 2, 2], [5, -1, 3]]), 1.5, 2.0)
sample("embedding_renorm", Placed(ew, "t"), torch.tensor([1, 4]), 3.0, 1.0)

# --- multilabel_margin_loss: the labels before the first -1 (repeats count again), the three
# reductions, a vector alone; the backward with the forward's is_target and with one given ------
mlx = q(4, 4, lo=-2, hi=2)
mlt = torch.tensor([[3, 0, -1, 1], [0, 0, 3, 1], [-1, 2, 0, 0], [2, -1, 3, -1]])
sample("multilabel_margin_loss_forward", mlx, mlt, 0)
sample("multilabel_margin_loss_forward", Placed(mlx, "t"), mlt, 1)
sample("multilabel_margin_loss_forward", q(4, lo=-2, hi=2), torch.tensor([2, 0, -1, 3]), 2)
mli = aten.multilabel_margin_loss_forward(mlx, mlt, 0)[1]
sample("multilabel_margin_loss_backward", q(4), mlx, mlt, 0, mli)
sample("multilabel_margin_loss_backward", q(), mlx, mlt, 1, mli)
sample("multilabel_margin_loss_backward", q(), q(4, lo=-2, hi=2), torch.tensor([2, 0, -1, 3]), 2,
       torch.tensor([1.0, 1.0, 1.0, 0.0]))

# --- unique_dim: distinct slices in lexicographic order (rows, columns, a 3-d middle dim,
# repeats, bool), the inverse and the counts ----------------------------------------------------
ud = torch.tensor([[1, 2, 0], [0, 5, 1], [1, 2, 0], [0, 1, 1], [0, 5, 1]])
sample("unique_dim", ud, 0, True, True, True)
sample("unique_dim", Placed(ud, "t"), 1, False, False, False)
sample("unique_dim", q(2, 4, 3, lo=-1, hi=1), 1, True, True, True)
sample("unique_dim", torch.tensor([[True, False], [False, False], [True, False]]), 0)

# --- segment_reduce: lengths (an empty segment, rows of their own along axis 1) and offsets
# (elements before the first and after the last left out), initial, each reduction; the backward
# with ties (max), zeros (prod, one and two in a segment) and initial ---------------------------
sx = q(6, lo=-2, hi=2)
sl = torch.tensor([2, 0, 3, 1])
for red in ("sum", "mean", "max", "min", "prod"):
    sample("segment_reduce", sx, red, lengths=sl)
sample("segment_reduce", sx, "mean", lengths=sl, initial=2)
sample("segment_reduce", sx, "max", lengths=sl, initial=-0.5)
sample("segment_reduce", Placed(q(2, 5, 3), "t"), "sum",
       lengths=torch.tensor([[2, 0, 3], [1, 1, 3]]), axis=1)
sample("segment_reduce", q(2, 5), "prod", offsets=torch.tensor([[1, 2, 2, 4], [0, 1, 2, 5]]),
       axis=1, unsafe=True)
sgx = torch.tensor([1.0, 3.0, 3.0, 0.0, 2.0, 0.0, 0.0, 0.5])
sgl = torch.tensor([3, 2, 2, 0, 1])
for red, init in (("sum", None), ("mean", 2), ("max", None), ("min", 1), ("prod", None), ("prod", 2)):
    out = aten.segment_reduce(sgx, red, lengths=sgl, initial=init)
    sample("_segment_reduce_backward", q(5), out, sgx, red, lengths=sgl, initial=init)

# --- antialiased resampling (F.interpolate(antialias=True)): shrinking (wide windows) and
# growing, align_corners, a given scale, a dim left as it is; the backward of each ------------
ax = q(1, 2, 8, 9, lo=-2, hi=2)
sample("_upsample_bilinear2d_aa", ax, [3, 4], False)
sample("_upsample_bilinear2d_aa", Placed(ax, "t"), [11, 9], True)
sample("_upsample_bicubic2d_aa", ax, [3, 13], False, 0.4, None)
sample("_upsample_bicubic2d_aa", ax, [5, 5], True)
sample("_upsample_bilinear2d_aa_backward", q(1, 2, 3, 4), [3, 4], [1, 2, 8, 9], False)
sample("_upsample_bicubic2d_aa_backward", q(1, 2, 11, 5), [11, 5], [1, 2, 8, 9], True)

# --- grid_sampler_3d: trilinear, nearest and tricubic, each padding, inside and outside -----
gx3 = q(2, 2, 3, 4, 5, lo=-2, hi=2)
gg3 = q(2, 2, 3, 2, 3, lo=-5, hi=5) / 4
sample("grid_sampler_3d", gx3, gg3, 0, 0, False)
sample("grid_sampler_3d", Placed(gx3, "t"), gg3, 1, 1, True)
sample("grid_sampler_3d", gx3, gg3, 2, 2, False)
sample("grid_sampler_3d", gx3, gg3, 0, 2, True)

# --- embedding_bag: each mode, an empty bag, padding_idx, per_sample_weights, include_last_offset
# (the last offset short of the end: positions past it count in the size, not the sum), int32
# indices, max with ties and a NaN first / not first in its bag ---------------------------------
ebw = q(10, 3, lo=-2, hi=2)
ebi = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
ebo = torch.tensor([0, 4, 4, 6])
for mode in (0, 1, 2):
    sample("_embedding_bag", ebw, ebi, ebo, False, mode)
    sample("_embedding_bag", ebw, ebi, ebo, False, mode, False, None, False, 4)
    sample("_embedding_bag_forward_only", Placed(ebw, "t"), ebi.int(), ebo.int(), False, mode)
sample("_embedding_bag", ebw, ebi, ebo, False, 0, False, q(8, lo=-2, hi=2))
sample("_embedding_bag", ebw, ebi, torch.tensor([0, 4, 6]), False, 1, False, None, True)
sample("_embedding_bag", ebw, ebi, torch.tensor([0, 4, 8]), False, 0, False, None, True)
sample("_embedding_bag", ebw.bfloat16(), ebi, ebo, False, 1)
ebn = torch.tensor([[float("nan"), 2.0], [1.0, 2.0], [0.0, 3.0], [1.0, float("nan")]])
sample("_embedding_bag", ebn, torch.tensor([0, 1, 2, 1, 3, 0, 2]), torch.tensor([0, 3]), False, 2)

# the backwards: each mode (offset2bag empty for a sum, as its forward leaves it), padding_idx,
# scale_grad_by_freq, per_sample_weights, and the per-sample weights' gradient
ebg = q(4, 3, lo=-2, hi=2)
for mode, pad, scale in ((0, -1, False), (0, 4, True), (1, -1, True), (1, 4, False), (2, 4, False)):
    r = aten._embedding_bag(ebw, ebi, ebo, scale, mode, False, None, False, pad)
    sample("_embedding_bag_backward", ebg, ebi, ebo, r[1], r[2], r[3], 10, scale, mode, False,
           None, pad)
ebp = q(8, lo=-2, hi=2)
r = aten._embedding_bag(ebw, ebi, ebo, False, 0, False, ebp, False, -1)
sample("_embedding_bag_backward", ebg, ebi, ebo, r[1], r[2], r[3], 10, False, 0, False, ebp)
sample("_embedding_bag_per_sample_weights_backward", ebg, ebw, ebi, ebo, r[1], 0, 4)

# --- integer convolutions (exact, on the vector unit): int64 plain and transposed with groups,
# stride, dilation, padding beyond the transposed kernel's reach, output_padding and bias; int32
# plain; int64 average pooling (sums divided rounding toward zero) ------------------------------
g_ci = torch.Generator().manual_seed(21)
cix = torch.randint(-9, 9, (2, 4, 5, 5), generator=g_ci)
ciw = torch.randint(-9, 9, (6, 2, 2, 3), generator=g_ci)
cib = torch.randint(-9, 9, (6,), generator=g_ci)
sample("convolution", cix, ciw, cib, [2, 1], [0, 1], [1, 2], False, [0, 0], 2)
sample("convolution", cix, torch.randint(-9, 9, (4, 3, 2, 2), generator=g_ci), None, [2, 2], [3, 1],
       [1, 1], True, [1, 0], 1)
sample("convolution", cix[:, :, 0].int(), ciw[:, :, 0].int(), cib.int(), [1], [1], [1], False, [0], 2)
sample("convolution", cix[:1, :2, :3, :3].unsqueeze(2).expand(1, 2, 2, 3, 3),
       torch.randint(-9, 9, (3, 2, 1, 2, 2), generator=g_ci), None, [1, 1, 1], [0, 1, 0], [1, 1, 1],
       False, [0, 0, 0], 1)
sample("avg_pool2d", cix * 7, [3, 3], [2, 2], [1, 1], True, False)
sample("avg_pool2d", cix, [2, 2], [1, 1], [0, 0], False, True, -3)
sample("avg_pool3d", torch.randint(-50, 50, (1, 2, 4, 5, 3), generator=g_ci), [2, 2, 2], [1, 2, 1],
       [1, 0, 1], False, True)

# --- fractional max pooling with given samples (2-d [w, h], 3-d [t, h, w]): window starts in
# the input's dtype, the last NaN or the first maximum, and the gradient at the indices ----------
g_fm = torch.Generator().manual_seed(22)
fmx = torch.randn(2, 3, 9, 7, generator=g_fm)
fmx.view(-1)[::11] = float("nan")
fms = torch.rand(2, 3, 2, generator=g_fm)
sample("fractional_max_pool2d", fmx, [2, 3], [4, 3], fms)
sample("fractional_max_pool2d", fmx.bfloat16(), [3, 2], [5, 6], fms.bfloat16())
fmr = aten.fractional_max_pool2d(fmx, [2, 3], [4, 3], fms)
sample("fractional_max_pool2d_backward", torch.randn(2, 3, 4, 3, generator=g_fm), fmx, [2, 3], [4, 3], fmr[1])
fmx3 = torch.randn(1, 2, 5, 6, 7, generator=g_fm)
fms3 = torch.rand(1, 2, 3, generator=g_fm)
sample("fractional_max_pool3d", fmx3, [2, 3, 2], [3, 3, 5], fms3)
fmr3 = aten.fractional_max_pool3d(fmx3, [2, 3, 2], [3, 3, 5], fms3)
sample("fractional_max_pool3d_backward", torch.randn(1, 2, 3, 3, 5, generator=g_fm), fmx3, [2, 3, 2], [3, 3, 5],
       fmr3[1])

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "from_torch.json"), "w") as f:
    json.dump({"generator": "backend/tests/backend/op_suite/from_torch.py",
               "torch": torch.__version__.split("+")[0], "samples": SAMPLES}, f, separators=(",", ":"))
    f.write("\n")
print(len(SAMPLES), "samples of", len({x["op"] for x in SAMPLES}), "overloads")
