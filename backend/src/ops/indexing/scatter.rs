//! Element scatters: `scatter` (`.src`, `.value`, `.reduce`, `.value_reduce`), `scatter_add`,
//! `scatter_reduce.two`, `put`; and element gathers: `take`, `take_along_dim`.
//!
//! A scatter is one tile kernel computing the flat destination offset of every element of
//! `index` (`-1` for an index outside its dim) and one index-put kernel writing (or adding,
//! multiplying, maxing) the source elements there in index order, on a copy of `self`:
//! repeated indices accumulate in order, or the last one wins, as PyTorch's CPU loops do.
//! `scatter_reduce` with `include_self=False` first puts the reduction's identity at every
//! target; `mean` divides by the count of elements that landed (integers: floor division).

use super::{Bound, bounded};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, RedKind};
use crate::layout::{Layout, contiguous_strides, wrap_dim};
use crate::ops::aten;
use crate::ops::checks::{Pending, check_range};
use crate::ops::data::{gather, gather_rows};
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::prims::{self, fill, put_rows, reshaped};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// What a scatter writes: a tensor's elements or a number.
#[derive(Clone, Copy)]
enum Src<'a> {
    Tensor(&'a Tensor),
    Value(Scalar),
}

/// Flat offsets into contiguous `x` of every element of `index` along `dim`, with PyTorch's
/// checks (an int32 or int64 index of `x`'s rank, no larger than `x` off `dim` and than `src`).
fn targets(
    op: &OpScope,
    x: &Tensor,
    dim: usize,
    index: &Tensor,
    src: Option<&Tensor>,
) -> Result<Tensor> {
    // PyTorch's message names `scatter` for every scatter form (int32 indices are accepted).
    super::check_index("scatter", index)?;
    let rank = |t: &Tensor| t.dim().max(1);
    if rank(index) != rank(x) || src.is_some_and(|s| rank(s) != rank(index)) {
        return Err(TpuError::BadArgs(
            "Index tensor must have the same number of dimensions as self tensor".into(),
        ));
    }
    let size = |t: &Tensor, d: usize| if t.dim() == 0 { 1 } else { t.shape()[d] };
    for d in 0..rank(x) {
        if (d != dim && size(index, d) > size(x, d))
            || src.is_some_and(|s| size(index, d) > size(s, d))
        {
            return Err(TpuError::ShapeMismatch(format!(
                "Expected index {:?} to be no larger than self {:?} apart from dimension {dim} and to be no larger size than src {:?}",
                index.shape(),
                x.shape(),
                src.map(|s| s.shape().to_vec()).unwrap_or_default()
            )));
        }
    }
    prims::fits_i32(x.numel())?;
    let xs = if x.dim() == 0 {
        vec![1]
    } else {
        contiguous_strides(x.shape())
    };
    let n = size(x, dim);
    let nd = index.dim();
    let f = map_contiguous(op, &[index], &[DType::I32], |p, r| {
        let i = DType::I32;
        let v = bounded(p, r[0], n, Bound::Check);
        let st = p.constant(Scalar::Int(xs[dim] as i64), i);
        let mut f = p.bin(BinOp::Mul, v, st, i);
        for (k, s) in xs.iter().enumerate().filter(|(k, _)| *k != dim && *k < nd) {
            let c = p.index(k as u32);
            let s = p.constant(Scalar::Int(*s as i64), i);
            let t = p.bin(BinOp::Mul, c, s, i);
            f = p.bin(BinOp::Add, f, t, i);
        }
        vec![super::keep_invalid(p, v, f)]
    })?
    .remove(0);
    Ok(reshaped(&f, &[index.numel()]))
}

/// The source elements that `index` covers (`src[:i0, :i1, ...]`), as `[count, 1]` of `dtype`.
fn sources(op: &OpScope, index: &Tensor, src: Src<'_>, dtype: DType) -> Result<Tensor> {
    let n = index.numel();
    let v = match src {
        Src::Tensor(s) => {
            let l = s.layout();
            let part = s.with_layout(Layout {
                shape: index.shape().to_vec(),
                strides: l.strides.clone(),
                offset: l.offset,
            });
            map_shape(op, index.shape(), &[&part], &[dtype], |_, r| vec![r[0]])?.remove(0)
        }
        Src::Value(v) => fill(op, index.shape(), v, dtype)?,
    };
    Ok(reshaped(&v, &[n, 1]))
}

/// A copy of `x` (contiguous) and its `[numel, 1]` table view.
fn copy_table(op: &OpScope, x: &Tensor) -> Result<(Tensor, Tensor)> {
    let out = map_contiguous(op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
    let table = reshaped(&out, &[x.numel(), 1]);
    Ok((out, table))
}

/// Checks on the device that every index lies in `[0, size)` of `x`'s dim `d`: PyTorch's
/// CPU error otherwise (see [`check_range`]).
fn check_targets(op: &OpScope, x: &Tensor, d: usize, index: &Tensor) -> Result<Pending> {
    let n = if x.dim() == 0 { 1 } else { x.shape()[d] };
    check_range(op, index, 0, n as i64, move |v| {
        TpuError::BadArgs(format!(
            "index {v} is out of bounds for dimension {d} with size {n}"
        ))
    })
}

/// `scatter`-like operators: `combine` of `src` into a copy of `x` at `index` along `dim`.
fn scatter_in(
    op: &OpScope,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    src: Src<'_>,
    combine: Combine,
) -> Result<Tensor> {
    let d = wrap_dim(dim, x.dim())?;
    if let Src::Tensor(s) = src
        && s.dtype() != x.dtype()
    {
        return Err(TpuError::DtypeMismatch(format!(
            "{}(): Expected self.dtype to be equal to src.dtype",
            op.tag().name.trim_start_matches("aten::")
        )));
    }
    let s = match src {
        Src::Tensor(s) => Some(s),
        Src::Value(_) => None,
    };
    let (out, table) = copy_table(op, x)?;
    if index.numel() == 0 {
        return Ok(out);
    }
    let check = check_targets(op, x, d, index)?;
    let flat = targets(op, x, d, index, s)?;
    let vals = sources(op, index, src, x.dtype())?;
    put_rows(op, &table, &flat, &vals, combine, true)?;
    check.guards(op.rt(), &[&out]);
    Ok(out)
}

fn reduce_of(name: &str, reduce: &str) -> Result<Combine> {
    match reduce {
        "add" => Ok(Combine::Add),
        "multiply" => Ok(Combine::Mul),
        other => Err(TpuError::BadArgs(format!(
            "{name}(): reduce argument must be either add or multiply, got {other}"
        ))),
    }
}

/// `scatter_reduce.two(x, dim, index, src, reduce, include_self)`.
#[aten(
    "aten::scatter_reduce.two",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = ScatterReduceTwo(self_, dim, index, src, reduce, include_self)
)]
fn scatter_reduce(
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    src: &Tensor,
    reduce: &str,
    include_self: bool,
) -> Result<Tensor> {
    let op = OpScope::new(ScatterReduceTwo::NAME, &[x, index, src])?;
    let (combine, kind) = match reduce {
        "sum" | "mean" => (Combine::Add, RedKind::Sum),
        "prod" => (Combine::Mul, RedKind::Prod),
        "amax" => (Combine::Max, RedKind::Max),
        "amin" => (Combine::Min, RedKind::Min),
        other => {
            return Err(TpuError::BadArgs(format!(
                "reduce argument must be either sum, prod, mean, amax or amin, got {other}"
            )));
        }
    };
    let d = wrap_dim(dim, x.dim())?;
    if src.dtype() != x.dtype() {
        return Err(TpuError::DtypeMismatch(
            "scatter_reduce(): Expected self.dtype to be equal to src.dtype".into(),
        ));
    }
    let (out, table) = copy_table(&op, x)?;
    if index.numel() == 0 {
        return Ok(out);
    }
    let dt = x.dtype();
    check_targets(&op, x, d, index)?.guards(op.rt(), &[&out]);
    let flat = targets(&op, x, d, index, Some(src))?;
    if !include_self {
        let id = sources(&op, index, Src::Value(prims::identity(kind, dt)), dt)?;
        put_rows(&op, &table, &flat, &id, Combine::Copy, true)?;
    }
    let vals = sources(&op, index, Src::Tensor(src), dt)?;
    put_rows(&op, &table, &flat, &vals, combine, true)?;
    if reduce != "mean" {
        return Ok(out);
    }
    let f = DType::F32;
    let cnt = fill(&op, x.shape(), Scalar::Int(include_self as i64), f)?;
    let cnt_table = reshaped(&cnt, &[x.numel(), 1]);
    if !include_self {
        let zeros = sources(&op, index, Src::Value(Scalar::Int(0)), f)?;
        put_rows(&op, &cnt_table, &flat, &zeros, Combine::Copy, true)?;
    }
    let ones = sources(&op, index, Src::Value(Scalar::Int(1)), f)?;
    put_rows(&op, &cnt_table, &flat, &ones, Combine::Add, true)?;
    Ok(map_contiguous(&op, &[&out, &cnt], &[dt], |p, r| {
        let zero = p.constant(Scalar::Int(0), f);
        let some = p.cmp(CmpKind::Gt, r[1], zero, f);
        let q = if dt.is_float() {
            let s = p.cast(r[0], f);
            p.bin(BinOp::Div, s, r[1], f)
        } else {
            let s = p.cast(r[0], f);
            let q = p.bin(BinOp::Div, s, r[1], f);
            p.un(crate::ir::UnOp::Floor, q, f)
        };
        let q = p.cast(q, dt);
        vec![p.select(some, q, r[0], dt)]
    })?
    .remove(0))
}

/// `torch.take(x, index)`: elements of flattened `x` (negative indices from the end).
#[aten("aten::take", dtypes = DType::ALL_TPU, shard = REP, call = Take(self_, index))]
fn take(x: &Tensor, index: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Take::NAME, &[x, index])?;
    if index.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(format!(
            "take(): Expected a long tensor for index, but got {}",
            index.dtype().scalar_type_name()
        )));
    }
    if index.numel() == 0 {
        return Tensor::empty(op.rt(), index.shape(), x.dtype());
    }
    if x.numel() == 0 {
        return Err(TpuError::IndexOutOfRange(
            "take(): tried to take from an empty tensor".into(),
        ));
    }
    prims::fits_i32(x.numel())?;
    let n = x.numel();
    let check = flat_index_check(&op, index, n)?;
    let flat = map_contiguous(&op, &[index], &[DType::I32], |p, r| {
        vec![bounded(p, r[0], n, Bound::Check)]
    })?
    .remove(0);
    let flat = reshaped(&flat, &[index.numel()]);
    let src = prims::dense(&op, x)?;
    let g = gather_rows(&op, &reshaped(&src, &[n, 1]), &flat)?;
    check.guards(op.rt(), &[&g]);
    Ok(g.with_layout(Layout::contiguous(index.shape())))
}

/// Checks on the device that every flat index of `take`/`put` lies in `-n..n`: PyTorch's
/// `IndexError` otherwise, naming the value.
fn flat_index_check(op: &OpScope, index: &Tensor, n: usize) -> Result<Pending> {
    check_range(op, index, -(n as i64), n as i64, move |v| {
        TpuError::IndexOutOfRange(format!(
            "out of range: tried to access index {v} on a tensor of {n} elements."
        ))
    })
}

/// `torch.put(x, index, source, accumulate)`: a copy of `x` with its flat elements at `index`
/// set to (or increased by) `source`'s.
#[aten("aten::put", dtypes = DType::ALL_TPU, shard = REP, call = Put(self_, index, source, accumulate))]
fn put(x: &Tensor, index: &Tensor, source: &Tensor, accumulate: bool) -> Result<Tensor> {
    let op = OpScope::new(Put::NAME, &[x, index, source])?;
    if index.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(format!(
            "put_(): Expected a long tensor for index, but got {}",
            index.dtype().scalar_type_name()
        )));
    }
    if source.dtype() != x.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "put_(): self and source expected to have the same dtype, but got self.dtype = {} and source.dtype = {}",
            x.dtype().scalar_type_name(),
            source.dtype().scalar_type_name()
        )));
    }
    if source.numel() != index.numel() {
        return Err(TpuError::ShapeMismatch(format!(
            "put_(): Expected source and index to have the same number of elements, but got source.numel() = {}, index.numel() = {}",
            source.numel(),
            index.numel()
        )));
    }
    let (out, table) = copy_table(&op, x)?;
    if index.numel() == 0 {
        return Ok(out);
    }
    let n = x.numel();
    prims::fits_i32(n)?;
    flat_index_check(&op, index, n)?.guards(op.rt(), &[&out]);
    let flat = map_contiguous(&op, &[index], &[DType::I32], |p, r| {
        vec![bounded(p, r[0], n, Bound::Check)]
    })?
    .remove(0);
    let flat = reshaped(&flat, &[index.numel()]);
    let src = prims::dense(&op, source)?;
    let combine = if accumulate {
        Combine::Add
    } else {
        Combine::Copy
    };
    put_rows(
        &op,
        &table,
        &flat,
        &reshaped(&src, &[index.numel(), 1]),
        combine,
        true,
    )?;
    Ok(out)
}

/// `torch.take_along_dim(x, indices, dim)`: `gather` along `dim` after broadcasting the other
/// dims (`dim` None: of the flattened tensor).
#[aten(
    "aten::take_along_dim",
    dtypes = DType::ALL_TPU,
    shard = REP,
    kind = Decomposition,
    call = TakeAlongDim(self_, indices, dim)
)]
fn take_along_dim(x: &Tensor, indices: &Tensor, dim: Option<i64>) -> Result<Tensor> {
    let op = OpScope::new(TakeAlongDim::NAME, &[x, indices])?;
    let Some(dim) = dim else {
        let xf = prims::dense(&op, x)?;
        let xf = reshaped(&xf, &[x.numel()]);
        let i = prims::dense(&op, indices)?;
        let i = reshaped(&i, &[indices.numel()]);
        return gather(&xf, 0, &i);
    };
    if x.dim() != indices.dim() {
        return Err(TpuError::BadArgs(format!(
            "torch.take_along_dim(): input and indices should have the same number of dimensions, but got {} dimensions for input, and {} dimensions for indices",
            x.dim(),
            indices.dim()
        )));
    }
    let d = wrap_dim(dim, x.dim())?;
    let mut xs = x.shape().to_vec();
    let mut is = indices.shape().to_vec();
    if x.dim() > 0 {
        xs[d] = 1;
        is[d] = 1;
    }
    let b = crate::layout::broadcast_shapes(&xs, &is)?;
    let (mut bx, mut bi) = (b.clone(), b);
    if x.dim() > 0 {
        bx[d] = x.shape()[d];
        bi[d] = indices.shape()[d];
    }
    let xv = x.with_layout(x.layout().broadcast_to(&bx)?);
    let iv = indices.with_layout(indices.layout().broadcast_to(&bi)?);
    gather(&xv, d as i64, &iv)
}

/// `scatter(self, dim, index, src|value[, reduce])` under the overload's own name `name`: the
/// writes combine as `reduce` says (`scatter.reduce`, `.value_reduce`), else as `fixed`.
fn scatter_call(
    name: &str,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    src: Src<'_>,
    fixed: Combine,
    reduce: Option<&str>,
) -> Result<Tensor> {
    let op = match src {
        Src::Value(_) => OpScope::new(name, &[x, index])?,
        Src::Tensor(t) => OpScope::new(name, &[x, index, t])?,
    };
    let c = match reduce {
        None => fixed,
        Some(r) => reduce_of("scatter", r)?,
    };
    scatter_in(&op, x, dim, index, src, c)
}

/// Every scatter's and gather's rule.
const REP: Sharding = Sharding::Replicate("indices address the global tensor");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::scatter.src", dtypes = DType::ALL_TPU, shard = REP)]
fn scatter_src_op(a: ScatterSrc<'_>) -> Result<Tensor> {
    let src = Src::Tensor(a.src);
    scatter_call(
        ScatterSrc::NAME,
        a.self_,
        a.dim,
        a.index,
        src,
        Combine::Copy,
        None,
    )
}

#[aten("aten::scatter.value", dtypes = DType::ALL_TPU, shard = REP)]
fn scatter_value_op(a: ScatterValue<'_>) -> Result<Tensor> {
    let src = Src::Value(a.value);
    scatter_call(
        ScatterValue::NAME,
        a.self_,
        a.dim,
        a.index,
        src,
        Combine::Copy,
        None,
    )
}

#[aten("aten::scatter.reduce", dtypes = DType::ALL_TPU, shard = REP)]
fn scatter_reduce_op(a: ScatterReduce<'_>) -> Result<Tensor> {
    let (src, r) = (Src::Tensor(a.src), Some(a.reduce));
    scatter_call(
        ScatterReduce::NAME,
        a.self_,
        a.dim,
        a.index,
        src,
        Combine::Copy,
        r,
    )
}

#[aten("aten::scatter.value_reduce", dtypes = DType::ALL_TPU, shard = REP)]
fn scatter_value_reduce_op(a: ScatterValueReduce<'_>) -> Result<Tensor> {
    let (src, r) = (Src::Value(a.value), Some(a.reduce));
    scatter_call(
        ScatterValueReduce::NAME,
        a.self_,
        a.dim,
        a.index,
        src,
        Combine::Copy,
        r,
    )
}

#[aten("aten::scatter_add", dtypes = DType::ALL_TPU, shard = REP)]
fn scatter_add_op(a: ScatterAdd<'_>) -> Result<Tensor> {
    let src = Src::Tensor(a.src);
    scatter_call(
        ScatterAdd::NAME,
        a.self_,
        a.dim,
        a.index,
        src,
        Combine::Add,
        None,
    )
}
