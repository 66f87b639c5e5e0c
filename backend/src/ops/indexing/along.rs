//! Puts along a dim: `index_add`, `index_copy`, `index_fill` (`.int_Scalar`, `.int_Tensor`),
//! `index_reduce`, `index_select_backward`.
//!
//! `self` is copied and seen as a table `[outer * size, inner]` (`outer` the dims before `dim`,
//! `inner` those after); slice `j` of the source goes to row `o * size + index[j]` of every
//! outer block `o`, by one index-put kernel (adding, copying, multiplying or maxing whole
//! `inner` rows, in index order).

use super::{Bound, bounded, check_index};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, RedKind, UnOp};
use crate::layout::wrap_dim;
use crate::ops::aten;
use crate::ops::checks::check_range;
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::pointwise::Arg;
use crate::ops::prims::{self, fill, put_rows, reshaped};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// `(outer, size, inner)` of `shape` around `d` (a 0-d shape is one element).
fn split3(shape: &[usize], d: usize) -> (usize, usize, usize) {
    if shape.is_empty() {
        return (1, 1, 1);
    }
    (
        shape[..d].iter().product(),
        shape[d],
        shape[d + 1..].iter().product(),
    )
}

/// What goes into the slices: the source's (scaled), or a number.
enum Fill<'a> {
    Source(&'a Tensor, Option<Scalar>),
    Value(Scalar),
    /// A zero-dimensional tensor's value.
    Tensor(&'a Tensor),
}

/// Puts `what` into a copy of `x` at `index` along `dim`, combined as `combine`; with
/// `reset`, the targeted slices are first set to that value.
fn put_along(
    op: &OpScope,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    what: Fill<'_>,
    combine: Combine,
    reset: Option<Scalar>,
) -> Result<(Tensor, Tensor, (usize, usize, usize))> {
    let name = op.tag().name.trim_start_matches("aten::").to_string();
    let d = wrap_dim(dim, x.dim())?;
    if index.dim() > 1 {
        return Err(TpuError::BadArgs(format!(
            "{name}(): Index is supposed to be a vector"
        )));
    }
    let count = index.numel();
    let (outer, size, inner) = split3(x.shape(), d);
    if let Fill::Source(s, _) = what {
        if s.dtype() != x.dtype() {
            return Err(TpuError::DtypeMismatch(format!(
                "{name}(): self ({}) and source ({}) must have the same scalar type",
                x.dtype().scalar_type_name(),
                s.dtype().scalar_type_name()
            )));
        }
        let mut want = x.shape().to_vec();
        if !want.is_empty() {
            want[d] = count;
        }
        let ok = s.shape() == want.as_slice()
            || (s.numel() == count * outer * inner && s.dim() <= 1 && x.dim() <= 1);
        if !ok {
            return Err(TpuError::ShapeMismatch(format!(
                "{name}(): Number of indices ({count}) should be equal to source.size(dim) and the other dims of source {:?} should match self {:?}",
                s.shape(),
                x.shape()
            )));
        }
    }
    let out = map_contiguous(op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
    let table = reshaped(&out, &[outer * size, inner]);
    if count == 0 || x.numel() == 0 {
        return Ok((
            out,
            Tensor::empty(op.rt(), &[0], DType::I32)?,
            (outer, count, inner),
        ));
    }
    prims::fits_i32(outer * size.max(count))?;
    let n = size as i64;
    let check = check_range(op, index, -n, n, move |v| {
        TpuError::IndexOutOfRange(format!(
            "index {v} is out of bounds for dimension {d} with size {size}"
        ))
    })?;
    check.guards(op.rt(), &[&out]);
    let idx = reshaped(&prims::dense(op, index)?, &[1, count]);
    let flat = map_shape(op, &[outer, count], &[&idx], &[DType::I32], |p, r| {
        let i = DType::I32;
        let v = bounded(p, r[0], size, Bound::Check);
        let o = p.index(0);
        let s = p.constant(Scalar::Int(size as i64), i);
        let base = p.bin(BinOp::Mul, o, s, i);
        let f = p.bin(BinOp::Add, base, v, i);
        vec![super::keep_invalid(p, v, f)]
    })?
    .remove(0);
    let flat = reshaped(&flat, &[outer * count]);
    let dt = x.dtype();
    let shape3 = [outer, count, inner];
    if let Some(v) = reset {
        let r = fill(op, &[outer * count, inner], v, dt)?;
        put_rows(op, &table, &flat, &r, Combine::Copy, true)?;
    }
    let src = match what {
        Fill::Source(s, alpha) => {
            let sv = match s.layout().view_as(&shape3) {
                Some(l) => s.with_layout(l),
                None => reshaped(&prims::dense(op, s)?, &shape3),
            };
            let scaled = map_shape(op, &shape3, &[&sv], &[dt], |p, r| {
                vec![match alpha {
                    Some(a) if a.to_f64() != 1.0 => {
                        let k = p.constant(a, dt);
                        p.bin(BinOp::Mul, r[0], k, dt)
                    }
                    _ => r[0],
                }]
            })?
            .remove(0);
            // An int64 `source * alpha` beyond int32 is refused (the sum is checked in
            // put_rows).
            if let Some(a) = alpha.filter(|a| a.to_f64() != 1.0) {
                crate::ops::wide::exact_int64(
                    op,
                    &[Arg::Tensor(&sv), Arg::Number(a)],
                    &scaled,
                    |p, v| p.bin(BinOp::Mul, v[0], v[1], DType::F32),
                )?
                .guards(op.rt(), &[&out]);
            }
            scaled
        }
        Fill::Tensor(v) => map_shape(op, &shape3, &[v], &[dt], |_, r| vec![r[0]])?.remove(0),
        Fill::Value(v) => fill(op, &shape3, v, dt)?,
    };
    put_rows(
        op,
        &table,
        &flat,
        &reshaped(&src, &[outer * count, inner]),
        combine,
        true,
    )?;
    Ok((out, flat, (outer, count, inner)))
}

fn index_add(
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    source: &Tensor,
    alpha: Scalar,
) -> Result<Tensor> {
    crate::ops::binary::fits_lanes(IndexAdd::NAME, alpha, x.dtype())?;
    let op = OpScope::new(IndexAdd::NAME, &[x, index, source])?;
    check_index("index_add", index)?;
    Ok(put_along(
        &op,
        x,
        dim,
        index,
        Fill::Source(source, Some(alpha)),
        Combine::Add,
        None,
    )?
    .0)
}

fn index_copy(x: &Tensor, dim: i64, index: &Tensor, source: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(IndexCopy::NAME, &[x, index, source])?;
    if index.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(
            "index_copy_(): Expected a long tensor for index, but got ".to_string()
                + index.dtype().scalar_type_name(),
        ));
    }
    Ok(put_along(
        &op,
        x,
        dim,
        index,
        Fill::Source(source, None),
        Combine::Copy,
        None,
    )?
    .0)
}

fn index_fill(name: &str, x: &Tensor, dim: i64, index: &Tensor, value: Fill<'_>) -> Result<Tensor> {
    let mut ins = vec![x, index];
    if let Fill::Tensor(v) = value {
        ins.push(v);
    }
    let op = OpScope::new(name, &ins)?;
    if index.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(
            "index_fill_(): Expected dtype int64 for index.".into(),
        ));
    }
    Ok(put_along(&op, x, dim, index, value, Combine::Copy, None)?.0)
}

/// `index_reduce(x, dim, index, source, reduce, include_self)` for `prod`, `mean`, `amax`,
/// `amin`.
#[aten(
    "aten::index_reduce",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = IndexReduce(self_, dim, index, source, reduce, include_self)
)]
fn index_reduce(
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    source: &Tensor,
    reduce: &str,
    include_self: bool,
) -> Result<Tensor> {
    let op = OpScope::new(IndexReduce::NAME, &[x, index, source])?;
    check_index("index_reduce", index)?;
    let (combine, kind) = match reduce {
        "prod" => (Combine::Mul, RedKind::Prod),
        "mean" => (Combine::Add, RedKind::Sum),
        "amax" => (Combine::Max, RedKind::Max),
        "amin" => (Combine::Min, RedKind::Min),
        other => {
            return Err(TpuError::BadArgs(format!(
                "index_reduce(): Expected reduce to be one of prod, mean, amax or amin, got {other}."
            )));
        }
    };
    let dt = x.dtype();
    let reset = (!include_self).then(|| prims::identity(kind, dt));
    let (out, flat, (outer, count, inner)) = put_along(
        &op,
        x,
        dim,
        index,
        Fill::Source(source, None),
        combine,
        reset,
    )?;
    if reduce != "mean" || count == 0 || x.numel() == 0 {
        return Ok(out);
    }
    let f = DType::F32;
    let d = wrap_dim(dim, x.dim())?;
    let (_, size, _) = split3(x.shape(), d);
    let cnt = fill(
        &op,
        &[outer * size, inner],
        Scalar::Int(include_self as i64),
        f,
    )?;
    if !include_self {
        let z = fill(&op, &[outer * count, inner], Scalar::Int(0), f)?;
        put_rows(&op, &cnt, &flat, &z, Combine::Copy, true)?;
    }
    let ones = fill(&op, &[outer * count, inner], Scalar::Int(1), f)?;
    put_rows(&op, &cnt, &flat, &ones, Combine::Add, true)?;
    let cnt = reshaped(&cnt, x.shape());
    Ok(map_contiguous(&op, &[&out, &cnt], &[dt], |p, r| {
        let zero = p.constant(Scalar::Int(0), f);
        let some = p.cmp(CmpKind::Gt, r[1], zero, f);
        let s = p.cast(r[0], f);
        let q = p.bin(BinOp::Div, s, r[1], f);
        let q = if dt.is_float() {
            q
        } else {
            p.un(UnOp::Floor, q, f)
        };
        let q = p.cast(q, dt);
        vec![p.select(some, q, r[0], dt)]
    })?
    .remove(0))
}

/// `index_select_backward(grad, self_sizes, dim, index)`: zeros with `grad`'s slices added at
/// `index`.
#[aten(
    "aten::index_select_backward",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = IndexSelectBackward(grad, &self_sizes, dim, index)
)]
fn index_select_backward(grad: &Tensor, sizes: &[i64], dim: i64, index: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(IndexSelectBackward::NAME, &[grad, index])?;
    check_index("index_select_backward", index)?;
    let shape: Vec<usize> = sizes.iter().map(|s| (*s).max(0) as usize).collect();
    let z = fill(&op, &shape, Scalar::Int(0), grad.dtype())?;
    Ok(put_along(
        &op,
        &z,
        dim,
        index,
        Fill::Source(grad, None),
        Combine::Add,
        None,
    )?
    .0)
}

/// Every put along a dim's rule.
const REP: Sharding = Sharding::Replicate("indices address the global tensor");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::index_add", dtypes = DType::ALL_TPU, shard = REP)]
fn index_add_op(a: IndexAdd<'_>) -> Result<Tensor> {
    index_add(a.self_, a.dim, a.index, a.source, a.alpha)
}

#[aten("aten::index_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn index_copy_op(a: IndexCopy<'_>) -> Result<Tensor> {
    index_copy(a.self_, a.dim, a.index, a.source)
}

#[aten("aten::index_fill.int_Scalar", dtypes = DType::ALL_TPU, shard = REP)]
fn index_fill_int_scalar_op(a: IndexFillIntScalar<'_>) -> Result<Tensor> {
    let value = Fill::Value(a.value);
    index_fill(IndexFillIntScalar::NAME, a.self_, a.dim, a.index, value)
}

#[aten("aten::index_fill.int_Tensor", dtypes = DType::ALL_TPU, shard = REP)]
fn index_fill_int_tensor_op(a: IndexFillIntTensor<'_>) -> Result<Tensor> {
    let v = a.value;
    if v.dim() != 0 {
        return Err(TpuError::BadArgs(format!(
            "index_fill_ only supports a 0-dimensional value tensor, but got tensor with {} dimension(s).",
            v.dim()
        )));
    }
    index_fill(
        IndexFillIntTensor::NAME,
        a.self_,
        a.dim,
        a.index,
        Fill::Tensor(v),
    )
}
