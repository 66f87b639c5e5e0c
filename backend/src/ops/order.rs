//! Order statistics: `sort` (+ `.stable`), `argsort` (+ `.stable`), `msort`, `topk`,
//! `kthvalue`, `median`/`nanmedian` (whole tensor and `.dim`), `mode`.
//!
//! Each runs on stable ranks ([`prims::ranks`]: one rows kernel counting, for every element, the
//! elements of its row that sort before it, ties broken by position) and a placement of the
//! elements (and of their positions, the indices) at their ranks with one index-put kernel each
//! ([`prims::place`]). NaN sorts after every number (before, descending), as in PyTorch. Where
//! PyTorch's unstable algorithms (`std::sort` for rows above 16 elements, `nth_element` for
//! `kthvalue` and `median`) may order equal elements otherwise, the values agree and the
//! indices are those of the stable order.
//!
//! Cost: ranks are quadratic in the row length (see [`prims`]).

use super::aten;
use super::helpers::{OpScope, map_shape};
use super::prims::{self, along, back, dim_back, isnan, pairwise, place, ranks, tile};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// Positions `0..n` along the last dim of `shape`, as int64.
fn positions(op: &OpScope, shape: &[usize]) -> Result<Tensor> {
    let last = shape.len() as u32 - 1;
    Ok(map_shape(op, shape, &[], &[DType::I64], |p, _| vec![p.index(last)])?.remove(0))
}

/// The first `k` elements of each row in sorted order, and their indices (dim last).
fn sorted_rows(op: &OpScope, xl: &Tensor, k: usize, descending: bool) -> Result<(Tensor, Tensor)> {
    let r = ranks(op, xl, descending)?;
    let values = place(op, xl, &r, k, xl.dtype())?;
    let pos = positions(op, xl.shape())?;
    let indices = place(op, &pos, &r, k, DType::I64)?;
    Ok((values, indices))
}

/// `torch.sort(x, dim, descending, stable)`: `(values, indices)` (always stable here).
pub fn sort(x: &Tensor, dim: i64, descending: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(Sort::NAME, &[x])?;
    let (xl, d) = along(x, dim)?;
    let n = *xl.shape().last().unwrap_or(&1);
    let (v, i) = sorted_rows(&op, &xl, n, descending)?;
    Ok((back(x, &v, d)?, back(x, &i, d)?))
}

/// `torch.topk(x, k, dim, largest, sorted)`: the `k` largest (smallest) elements of each row,
/// in sorted order.
#[aten("aten::topk", dtypes = DType::ALL_TPU, shard = ROWS, call = Topk(self_, k, dim, largest))]
pub fn topk(x: &Tensor, k: i64, dim: i64, largest: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(Topk::NAME, &[x])?;
    let (xl, d) = along(x, dim)?;
    let n = *xl.shape().last().unwrap_or(&1);
    if k < 0 || k as usize > n {
        return Err(TpuError::IndexOutOfRange(
            "selected index k out of range".into(),
        ));
    }
    let (v, i) = sorted_rows(&op, &xl, k as usize, largest)?;
    Ok((back(x, &v, d)?, back(x, &i, d)?))
}

/// The element of each row at rank `target` (per-row int32 `[outer...]`, or a constant) and its
/// index; `keepdim` keeps the reduced dim as size 1.
fn at_rank(
    op: &OpScope,
    x: &Tensor,
    xl: &Tensor,
    d: usize,
    r: &Tensor,
    target: Result<&Tensor, i64>,
    keepdim: bool,
) -> Result<(Tensor, Tensor)> {
    let shape = xl.shape().to_vec();
    let nd = shape.len();
    let rel = match target {
        Ok(t) => {
            let t = t.with_layout(t.layout().unsqueeze(-1)?);
            map_shape(op, &shape, &[r, &t], &[DType::I32], |p, v| {
                vec![p.bin(BinOp::Sub, v[0], v[1], DType::I32)]
            })?
        }
        Err(c) => map_shape(op, &shape, &[r], &[DType::I32], |p, v| {
            let k = p.constant(Scalar::Int(c), DType::I32);
            vec![p.bin(BinOp::Sub, v[0], k, DType::I32)]
        })?,
    }
    .remove(0);
    let values = place(op, xl, &rel, 1, x.dtype())?;
    let pos = positions(op, &shape)?;
    let indices = place(op, &pos, &rel, 1, DType::I64)?;
    let finish = |t: Tensor| -> Result<Tensor> {
        if x.dim() == 0 {
            return Ok(t.with_layout(t.layout().squeeze(0)?));
        }
        let t = dim_back(&t, d)?;
        if keepdim {
            Ok(t)
        } else {
            Ok(t.with_layout(t.layout().squeeze(d as i64)?))
        }
    };
    let _ = nd;
    Ok((finish(values)?, finish(indices)?))
}

/// `torch.kthvalue(x, k, dim, keepdim)`: the `k`-th smallest element of each row (1-based).
#[aten("aten::kthvalue", dtypes = DType::ALL_TPU, shard = ROWS, call = Kthvalue(self_, k, dim, keepdim))]
pub fn kthvalue(x: &Tensor, k: i64, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(Kthvalue::NAME, &[x])?;
    let (xl, d) = along(x, dim)?;
    let n = *xl.shape().last().unwrap_or(&1) as i64;
    if k < 1 || k > n {
        return Err(TpuError::IndexOutOfRange(format!(
            "kthvalue(): selected number k out of range for dimension {d}"
        )));
    }
    let r = ranks(&op, &xl, false)?;
    at_rank(&op, x, &xl, d, &r, Err(k - 1), keepdim)
}

/// NaN count of each row (int32, `[outer...]`).
fn nan_counts(op: &OpScope, xl: &Tensor) -> Result<Tensor> {
    let shape = xl.shape().to_vec();
    let nd = shape.len();
    let float = xl.dtype().is_float();
    Ok(tile(
        op,
        &shape,
        1,
        &[(xl, false)],
        &[(DType::I32, true)],
        |p, r| {
            let c = if float {
                let x = p.cast(r[0], DType::F32);
                let n = isnan(p, x);
                p.cast(n, DType::I32)
            } else {
                p.constant(Scalar::Int(0), DType::I32)
            };
            let _ = nd;
            vec![p.reduce(RedKind::Sum, c, DType::I32)]
        },
    )?
    .remove(0))
}

/// `median`/`nanmedian` along `dim`: the lower median; `median` gives NaN (the first NaN) when
/// a row holds one, `nanmedian` ignores NaN.
fn median_dim_in(
    op: &OpScope,
    x: &Tensor,
    dim: i64,
    keepdim: bool,
    ignore_nan: bool,
) -> Result<(Tensor, Tensor)> {
    let (xl, d) = along(x, dim)?;
    let n = *xl.shape().last().unwrap_or(&1);
    if n == 0 {
        return Err(TpuError::IndexOutOfRange(format!(
            "median() cannot compute median for a dimension of size zero: {d}"
        )));
    }
    let r = ranks(op, &xl, false)?;
    let nans = nan_counts(op, &xl)?;
    let outer = nans.shape().to_vec();
    let target = map_shape(op, &outer, &[&nans], &[DType::I32], |p, v| {
        let i = DType::I32;
        let total = p.constant(Scalar::Int(n as i64), i);
        let valid = p.bin(BinOp::Sub, total, v[0], i);
        let one = p.constant(Scalar::Int(1), i);
        let two = p.constant(Scalar::Int(2), i);
        let zero = p.constant(Scalar::Int(0), i);
        let vm1 = p.bin(BinOp::Sub, valid, one, i);
        let lower = p.bin(BinOp::Div, vm1, two, i);
        let lower = p.bin(BinOp::Max, lower, zero, i);
        if ignore_nan {
            vec![lower]
        } else {
            // With a NaN: the first NaN, at rank `valid`.
            let any = p.cmp(CmpKind::Gt, v[0], zero, i);
            vec![p.select(any, valid, lower, i)]
        }
    })?
    .remove(0);
    at_rank(op, x, &xl, d, &r, Ok(&target), keepdim)
}

/// `torch.median(x, dim, keepdim)`.
#[aten("aten::median.dim", dtypes = DType::ALL_TPU, shard = ROWS, call = MedianDim(self_, dim, keepdim))]
pub fn median_dim(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(MedianDim::NAME, &[x])?;
    median_dim_in(&op, x, dim, keepdim, false)
}

/// `torch.nanmedian(x, dim, keepdim)`.
#[aten("aten::nanmedian.dim", dtypes = DType::ALL_TPU, shard = ROWS, call = NanmedianDim(self_, dim, keepdim))]
pub fn nanmedian_dim(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(NanmedianDim::NAME, &[x])?;
    median_dim_in(&op, x, dim, keepdim, true)
}

/// `torch.median(x)` / `torch.nanmedian(x)` of every element; NaN for an empty tensor.
fn median_all(name: &str, x: &Tensor, ignore_nan: bool) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    if x.numel() == 0 {
        return prims::fill(&op, &[], Scalar::Float(f64::NAN), x.dtype());
    }
    let flat = prims::dense(&op, x)?;
    let flat = prims::reshaped(&flat, &[x.numel()]);
    Ok(median_dim_in(&op, &flat, 0, false, ignore_nan)?.0)
}

/// `torch.median(x)`.
#[aten("aten::median", dtypes = DType::ALL_TPU, shard = ROWS, call = Median(self_))]
pub fn median(x: &Tensor) -> Result<Tensor> {
    median_all(Median::NAME, x, false)
}

/// `torch.nanmedian(x)`.
#[aten("aten::nanmedian", dtypes = DType::ALL_TPU, shard = ROWS, call = Nanmedian(self_))]
pub fn nanmedian(x: &Tensor) -> Result<Tensor> {
    median_all(Nanmedian::NAME, x, true)
}

/// `a` and `b` the same value (NaN equal to NaN) in `dt`'s lanes.
fn same(p: &mut ProgBuilder, a: PRef, b: PRef, dt: DType) -> PRef {
    prims::order(p, a, b, dt, false).1
}

/// `torch.mode(x, dim, keepdim)`: the most frequent value of each row (the smallest among
/// equally frequent ones) and the last index holding it.
#[aten("aten::mode", dtypes = DType::ALL_TPU, shard = ROWS, call = Mode(self_, dim, keepdim))]
pub fn mode(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(Mode::NAME, &[x])?;
    let (xl, d) = along(x, dim)?;
    let n = *xl.shape().last().unwrap_or(&1);
    if n == 0 {
        return Err(TpuError::IndexOutOfRange(format!(
            "mode(): Expected reduction dim {d} to have non-zero size."
        )));
    }
    let dt = x.dtype();
    let lane = if dt.is_float() {
        DType::F32
    } else {
        DType::I32
    };
    // How often each element's value occurs in its row.
    let (xj, _, shape) = pairwise(&op, &xl)?;
    let counts = tile(
        &op,
        &shape,
        1,
        &[(&xj, false), (&xl, true)],
        &[(DType::I32, true)],
        |p, r| {
            let s = same(p, r[0], r[1], dt);
            let c = p.cast(s, DType::I32);
            vec![p.reduce(RedKind::Sum, c, DType::I32)]
        },
    )?
    .remove(0);
    let rshape = xl.shape().to_vec();
    let last = rshape.len() as u32 - 1;
    let hi = prims::identity(RedKind::Min, dt);
    let mut outs = tile(
        &op,
        &rshape,
        1,
        &[(&xl, false), (&counts, false)],
        &[(dt, true), (DType::I64, true)],
        |p, r| {
            let best = p.reduce(RedKind::Max, r[1], DType::I32);
            let top = p.cmp(CmpKind::Eq, r[1], best, DType::I32);
            let x = p.cast(r[0], lane);
            let big = p.constant(hi, lane);
            let cand = p.select(top, x, big, lane);
            let v = p.reduce(RedKind::Min, cand, lane);
            let hit = same(p, x, v, lane);
            let j = p.index(last);
            let none = p.constant(Scalar::Int(-1), DType::I32);
            let jj = p.select(hit, j, none, DType::I32);
            let idx = p.reduce(RedKind::Max, jj, DType::I32);
            vec![v, idx]
        },
    )?;
    let idx = outs.remove(1);
    let values = outs.remove(0);
    let finish = |t: Tensor| -> Result<Tensor> {
        if x.dim() == 0 {
            return Ok(t);
        }
        let t = t.with_layout(t.layout().unsqueeze(-1)?);
        let t = dim_back(&t, d)?;
        if keepdim {
            Ok(t)
        } else {
            Ok(t.with_layout(t.layout().squeeze(d as i64)?))
        }
    };
    Ok((finish(values)?, finish(idx)?))
}

/// Every order statistic's rule.
const ROWS: Sharding = Sharding::Replicate("ordering a sharded dim needs the whole row");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema;
// binding it checks the arguments the computation does not read, `stable` and `sorted`).

#[aten("aten::sort", dtypes = DType::ALL_TPU, shard = ROWS)]
fn sort_op(a: Sort<'_>) -> Result<(Tensor, Tensor)> {
    sort(a.self_, a.dim, a.descending)
}

#[aten("aten::sort.stable", dtypes = DType::ALL_TPU, shard = ROWS)]
fn sort_stable_op(a: SortStable<'_>) -> Result<(Tensor, Tensor)> {
    sort(a.self_, a.dim, a.descending)
}

#[aten("aten::argsort", dtypes = DType::ALL_TPU, shard = ROWS)]
fn argsort_op(a: Argsort<'_>) -> Result<Tensor> {
    Ok(sort(a.self_, a.dim, a.descending)?.1)
}

#[aten("aten::argsort.stable", dtypes = DType::ALL_TPU, shard = ROWS)]
fn argsort_stable_op(a: ArgsortStable<'_>) -> Result<Tensor> {
    Ok(sort(a.self_, a.dim, a.descending)?.1)
}

#[aten("aten::msort", dtypes = DType::ALL_TPU, shard = ROWS)]
fn msort_op(a: Msort<'_>) -> Result<Tensor> {
    Ok(sort(a.self_, 0, false)?.0)
}
