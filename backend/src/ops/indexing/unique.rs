//! `unique_consecutive`, `_unique2`, `_unique`: runs of equal elements.
//!
//! A run starts where an element differs from the one before it (NaN differs from everything);
//! the running count of run starts (a scan) numbers the runs: that is the inverse; the first
//! element of each run is put at its run's number, and ones are added there for the counts. The
//! number of runs is read to the host (the output's shape). `_unique2` sorts first
//! ([`order::sort`](crate::ops::order::sort)) and maps the inverse back through the sort's
//! indices. `unique_consecutive` with a `dim` compares whole slices; `unique_dim` sorts the
//! slices lexicographically first ([`row_ranks`]).

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, RedKind};
use crate::layout::{Layout, wrap_dim};
use crate::ops::helpers::{OpScope, map_contiguous, map_shape, write_into};
use crate::ops::prims::{self, dim_last, fill, host_int, put_rows, reshaped, tile};
use crate::ops::sharding::Sharding;
use crate::ops::{Value, aten};
use crate::tensor::Tensor;

/// Runs of `rows [n, r]` (contiguous): the run number of each row (int32 `[n]`) and the count
/// of runs.
fn runs(op: &OpScope, rows: &Tensor) -> Result<(Tensor, Tensor, usize)> {
    let (n, r) = (rows.shape()[0], rows.shape()[1]);
    let dt = rows.dtype();
    // The previous row (row 0 compared with itself).
    let prev = map_shape(op, &[n, r], &[rows], &[dt], |_, v| vec![v[0]])?.remove(0);
    if n > 1 {
        let dst = prev.with_layout(prev.layout().slice(0, Some(1), None, 1)?);
        let src = rows.with_layout(rows.layout().slice(0, Some(0), Some(n as i64 - 1), 1)?);
        write_into(op, &dst, &[&src], |_, v| v[0])?;
    }
    let starts = tile(
        op,
        &[n, r],
        1,
        &[(rows, false), (&prev, false)],
        &[(DType::I32, true)],
        |p, v| {
            let ne = p.cmp(CmpKind::Ne, v[0], v[1], dt);
            let c = p.cast(ne, DType::I32);
            vec![p.reduce(RedKind::Max, c, DType::I32)]
        },
    )?
    .remove(0);
    // Row 0 always starts a run.
    let starts = map_shape(op, &[n], &[&starts], &[DType::I32], |p, v| {
        let i = p.index(0);
        let z = p.constant(Scalar::Int(0), DType::I32);
        let first = p.cmp(CmpKind::Eq, i, z, DType::I32);
        let one = p.constant(Scalar::Int(1), DType::I32);
        vec![p.select(first, one, v[0], DType::I32)]
    })?
    .remove(0);
    let incl = prims::scan(op, &starts, RedKind::Sum, DType::I32, false)?;
    let total = incl.with_layout(incl.layout().select(0, n as i64 - 1)?);
    let count = host_int(&total)? as usize;
    let id = map_contiguous(op, &[&incl], &[DType::I32], |p, v| {
        let one = p.constant(Scalar::Int(1), DType::I32);
        vec![p.bin(BinOp::Sub, v[0], one, DType::I32)]
    })?
    .remove(0);
    Ok((starts, id, count))
}

/// Unique consecutive rows of `rows [n, r]`: the first row of each run `[count, r]`, the run
/// number of each row (int64 `[n]`), and the run lengths (int64 `[count]`).
fn unique_rows(op: &OpScope, rows: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, r) = (rows.shape()[0], rows.shape()[1]);
    let (starts, id, count) = runs(op, rows)?;
    let pos = map_contiguous(op, &[&starts, &id], &[DType::I32], |p, v| {
        let one = p.constant(Scalar::Int(1), DType::I32);
        let s = p.cmp(CmpKind::Eq, v[0], one, DType::I32);
        let spare = p.constant(Scalar::Int(count as i64), DType::I32);
        vec![p.select(s, v[1], spare, DType::I32)]
    })?
    .remove(0);
    let values = Tensor::empty(op.rt(), &[count + 1, r], rows.dtype())?;
    put_rows(op, &values, &pos, rows, Combine::Copy, false)?;
    let values = values.with_layout(values.layout().slice(0, Some(0), Some(count as i64), 1)?);
    let counts = fill(op, &[count, 1], Scalar::Int(0), DType::I32)?;
    let ones = fill(op, &[n, 1], Scalar::Int(1), DType::I32)?;
    put_rows(op, &counts, &id, &ones, Combine::Add, false)?;
    let counts = map_shape(
        op,
        &[count],
        &[&reshaped(&counts, &[count])],
        &[DType::I64],
        |_, v| vec![v[0]],
    )?
    .remove(0);
    let inverse = map_contiguous(op, &[&id], &[DType::I64], |_, v| vec![v[0]])?.remove(0);
    Ok((values, inverse, counts))
}

/// The slices of `x` along dim `d` as the rows of a contiguous `[n, r]` tensor (`n` the dim's
/// size, `r` the elements of a slice).
fn slices(op: &OpScope, x: &Tensor, d: usize) -> Result<Tensor> {
    let moved = if x.dim() == 0 {
        x.clone()
    } else {
        dim_last(x, d)?
    };
    // The dim first, the rest flattened.
    let nd = moved.dim();
    let mut perm: Vec<i64> = vec![nd as i64 - 1];
    perm.extend(0..nd as i64 - 1);
    let first = moved.with_layout(moved.layout().permute(&perm)?);
    let n = x.shape().get(d).copied().unwrap_or(1);
    let r = x.numel().checked_div(n).unwrap_or(0);
    Ok(reshaped(&prims::dense(op, &first)?, &[n, r]))
}

/// Rows `[k, r]` (from [`slices`] of `x` along `d`) as `k` slices of `x` along `d`.
fn unslice(x: &Tensor, rows: &Tensor, d: usize) -> Result<Tensor> {
    let mut shape: Vec<usize> = x.shape().to_vec();
    shape.remove(d);
    let mut full = vec![rows.shape()[0]];
    full.extend(shape);
    let v = rows.with_layout(Layout::contiguous(&full));
    let nd = v.dim();
    let mut perm: Vec<i64> = (1..nd as i64).collect();
    perm.insert(d, 0);
    Ok(v.with_layout(v.layout().permute(&perm)?))
}

fn empty_i64(op: &OpScope) -> Result<Tensor> {
    Tensor::empty(op.rt(), &[0], DType::I64)
}

/// `torch.unique_consecutive(x, return_inverse, return_counts, dim)`.
#[aten(
    "aten::unique_consecutive",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = UniqueConsecutive(self_, return_inverse, return_counts, dim)
)]
fn unique_consecutive(
    x: &Tensor,
    inverse: bool,
    counts: bool,
    dim: Option<i64>,
) -> Result<Vec<Value>> {
    let op = OpScope::new(UniqueConsecutive::NAME, &[x])?;
    let (rows, d) = match dim {
        None => (reshaped(&prims::dense(&op, x)?, &[x.numel(), 1]), None),
        Some(dim) => {
            let d = wrap_dim(dim, x.dim())?;
            (slices(&op, x, d)?, Some(d))
        }
    };
    let n = rows.shape()[0];
    if n == 0 || rows.shape()[1] == 0 && d.is_none() {
        let v = Tensor::empty(
            op.rt(),
            if d.is_some() { x.shape() } else { &[0] },
            x.dtype(),
        )?;
        let inv = Tensor::empty(
            op.rt(),
            if inverse {
                if d.is_some() { &[0][..] } else { x.shape() }
            } else {
                &[0]
            },
            DType::I64,
        )?;
        return Ok(vec![
            Value::Tensor(v),
            Value::Tensor(inv),
            Value::Tensor(empty_i64(&op)?),
        ]);
    }
    let (values, inv, cnt) = unique_rows(&op, &rows)?;
    let values = match d {
        None => reshaped(&values, &[values.shape()[0]]),
        Some(d) => unslice(x, &values, d)?,
    };
    // Along a dim, PyTorch returns the inverse and the counts whether asked or not.
    let inv = if !inverse && d.is_none() {
        empty_i64(&op)?
    } else if d.is_none() {
        inv.with_layout(Layout::contiguous(x.shape()))
    } else {
        inv
    };
    let cnt = if counts || d.is_some() {
        cnt
    } else {
        empty_i64(&op)?
    };
    Ok(vec![
        Value::Tensor(values),
        Value::Tensor(inv),
        Value::Tensor(cnt),
    ])
}

/// `_unique2(x, sorted, return_inverse, return_counts)`: the sorted unique elements.
fn unique2(x: &Tensor, inverse: bool, counts: bool) -> Result<(Tensor, Tensor, Tensor)> {
    let op = OpScope::new(Unique2::NAME, &[x])?;
    let n = x.numel();
    if n == 0 {
        let inv = Tensor::empty(op.rt(), if inverse { x.shape() } else { &[0] }, DType::I64)?;
        return Ok((
            Tensor::empty(op.rt(), &[0], x.dtype())?,
            inv,
            empty_i64(&op)?,
        ));
    }
    let flat = reshaped(&prims::dense(&op, x)?, &[n]);
    let (sorted, order) = crate::ops::order::sort(&flat, 0, false)?;
    let (values, inv_sorted, cnt) =
        unique_rows(&op, &reshaped(&prims::dense(&op, &sorted)?, &[n, 1]))?;
    let values = reshaped(&values, &[values.shape()[0]]);
    let inv = if inverse {
        // inverse[order[k]] = inv_sorted[k].
        let dst = Tensor::empty(op.rt(), &[n, 1], DType::I64)?;
        let order = prims::dense(&op, &order)?;
        put_rows(
            &op,
            &dst,
            &order,
            &reshaped(&inv_sorted, &[n, 1]),
            Combine::Copy,
            false,
        )?;
        dst.with_layout(Layout::contiguous(x.shape()))
    } else {
        empty_i64(&op)?
    };
    let cnt = if counts { cnt } else { empty_i64(&op)? };
    Ok((values, inv, cnt))
}

/// The rank of each row of `rows [n, r]` in lexicographic order, ties by position (int32
/// `[n]`): two kernels over pairs of rows. The first finds, for rows `i` and `j`, the first
/// column where they differ, as the largest of `2 (r - c) + [j's element before i's]` over
/// the columns `c` that differ (0 when none does), so that `j` sorts before `i` exactly when
/// it is odd; the second counts the rows before each (an equal row counts when it is earlier).
/// Elements compare as `sort` orders them (NaN after every number, NaN equal to NaN).
fn row_ranks(op: &OpScope, rows: &Tensor) -> Result<Tensor> {
    let (n, r) = (rows.shape()[0], rows.shape()[1]);
    let dt = rows.dtype();
    let i32_ = DType::I32;
    let as_j = reshaped(rows, &[1, n, r]);
    let as_i = reshaped(rows, &[n, 1, r]);
    let first_difference = tile(
        op,
        &[n, n, r],
        1,
        &[(&as_j, false), (&as_i, false)],
        &[(i32_, true)],
        |p, v| {
            let (before, same) = prims::order(p, v[0], v[1], dt, false);
            let c = p.index(2);
            let end = p.constant(Scalar::Int(r as i64), i32_);
            let left = p.bin(BinOp::Sub, end, c, i32_);
            let two = p.constant(Scalar::Int(2), i32_);
            let weight = p.bin(BinOp::Mul, left, two, i32_);
            let b = p.cast(before, i32_);
            let code = p.bin(BinOp::Add, weight, b, i32_);
            let zero = p.constant(Scalar::Int(0), i32_);
            let code = p.select(same, zero, code, i32_);
            vec![p.reduce(RedKind::Max, code, i32_)]
        },
    )?
    .remove(0);
    Ok(tile(
        op,
        &[n, n],
        1,
        &[(&first_difference, false)],
        &[(i32_, true)],
        |p, v| {
            let one = p.constant(Scalar::Int(1), i32_);
            let zero = p.constant(Scalar::Int(0), i32_);
            let low = p.bin(BinOp::And, v[0], one, i32_);
            let before = p.cmp(CmpKind::Eq, low, one, i32_);
            let equal = p.cmp(CmpKind::Eq, v[0], zero, i32_);
            let (i, j) = (p.index(0), p.index(1));
            let earlier = p.cmp(CmpKind::Lt, j, i, i32_);
            let tie = p.bin(BinOp::And, equal, earlier, DType::Bool);
            let counts = p.bin(BinOp::Or, before, tie, DType::Bool);
            let c = p.cast(counts, i32_);
            vec![p.reduce(RedKind::Sum, c, i32_)]
        },
    )?
    .remove(0))
}

/// `unique_dim(x, dim, sorted, return_inverse, return_counts)`: the distinct slices of `x`
/// along `dim` in lexicographic order (as PyTorch's CPU kernel, which sorts whatever `sorted`
/// says), the index of each slice's distinct slice and their counts (both returned whether
/// asked or not, as PyTorch does). Slices with NaN: PyTorch's comparator leaves their order
/// open (NaN is neither smaller nor larger); here NaN sorts after every number, as in `sort`,
/// and a slice holding NaN equals no other.
fn unique_dim(x: &Tensor, dim: i64) -> Result<(Tensor, Tensor, Tensor)> {
    let op = OpScope::new(UniqueDim::NAME, &[x])?;
    if x.dim() == 0 {
        return Err(TpuError::BadDim(format!(
            "Dimension specified as {dim} but tensor has no dimensions"
        )));
    }
    let d = wrap_dim(dim, x.dim())?;
    let n = x.shape()[d];
    if n == 0 {
        if x.shape().iter().filter(|&&s| s == 0).count() > 1 {
            return Err(TpuError::BadArgs(
                "Number of zero sized dimensions is more than one, so unique cannot be applied "
                    .into(),
            ));
        }
        let values = Tensor::empty(op.rt(), x.shape(), x.dtype())?;
        return Ok((values, empty_i64(&op)?, empty_i64(&op)?));
    }
    if x.numel() == 0 {
        return Err(TpuError::BadArgs(
            "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied"
                .into(),
        ));
    }
    let rows = slices(&op, x, d)?;
    let rank = row_ranks(&op, &rows)?;
    let sorted = Tensor::empty(op.rt(), rows.shape(), rows.dtype())?;
    put_rows(&op, &sorted, &rank, &rows, Combine::Copy, false)?;
    let (values, inv_sorted, counts) = unique_rows(&op, &sorted)?;
    // Row i sorted to rank[i]: its distinct row is the sorted row's.
    let inverse = crate::ops::data::index::index_select(&inv_sorted, 0, &rank)?;
    Ok((unslice(x, &values, d)?, inverse, counts))
}

/// Every `unique` form's rule.
const REP: Sharding = Sharding::Replicate("the output's shape depends on every shard's values");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

/// `sorted` is ignored: the values come sorted.
#[aten("aten::_unique2", dtypes = DType::ALL_TPU, shard = REP)]
fn unique2_op(a: Unique2<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    unique2(a.self_, a.return_inverse, a.return_counts)
}

/// `sorted` is ignored: the values come sorted.
#[aten("aten::unique_dim", dtypes = DType::ALL_TPU, shard = REP)]
fn unique_dim_op(a: UniqueDim<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    unique_dim(a.self_, a.dim)
}

/// `sorted` is ignored: the values come sorted.
#[aten("aten::_unique", dtypes = DType::ALL_TPU, shard = REP)]
fn unique_op(a: Unique<'_>) -> Result<(Tensor, Tensor)> {
    let (v, i, _) = unique2(a.self_, a.return_inverse, false)?;
    Ok((v, i))
}
