//! Compaction by a mask: `nonzero` (+ `argwhere`, `nonzero_static`, `nonzero_numpy`, the
//! one-argument `where`), `masked_select`, `masked_scatter`, and the scalar forms of `where`.
//!
//! The position of each selected element in the output is the running count of the mask
//! before it (a scan, [`prims::scan`]); `nonzero` and `masked_select` read the total count to
//! the host (their output shape depends on it) and put each selected element, or its
//! coordinates, at its position with one index-put kernel (the others go to a spare row that is
//! cut off). `masked_scatter` needs no count: each selected position gathers the source element
//! at its running count. `nonzero_static` puts at most `size` rows into a tensor filled with
//! `fill_value`.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, RedKind};
use crate::layout::{Layout, broadcast_shapes};
use crate::ops::aten;
use crate::ops::data::gather_rows;
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::prims::{self, fill, host_int, put_rows, reshaped};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// The flattened mask `x != 0` as int32 (contiguous `[n]`) and its inclusive running count.
fn counts(op: &OpScope, x: &Tensor) -> Result<(Tensor, Tensor)> {
    let n = x.numel();
    let d = x.dtype();
    let m = map_contiguous(op, &[x], &[DType::I32], |p, r| {
        let z = p.constant(Scalar::Int(0), d);
        let nz = p.cmp(CmpKind::Ne, r[0], z, d);
        vec![p.cast(nz, DType::I32)]
    })?
    .remove(0);
    let m = reshaped(&m, &[n]);
    let incl = prims::scan(op, &m, RedKind::Sum, DType::I32, false)?;
    Ok((m, incl))
}

/// Row `pos - 1` for a selected element (`m == 1`), else `spare`.
fn positions(
    op: &OpScope,
    m: &Tensor,
    incl: &Tensor,
    limit: usize,
    spare: usize,
) -> Result<Tensor> {
    let i = DType::I32;
    Ok(map_contiguous(op, &[m, incl], &[i], |p, r| {
        let one = p.constant(Scalar::Int(1), i);
        let pos = p.bin(BinOp::Sub, r[1], one, i);
        let lim = p.constant(Scalar::Int(limit as i64), i);
        let fits = p.cmp(CmpKind::Lt, pos, lim, i);
        let sel = p.cmp(CmpKind::Eq, r[0], one, i);
        let ok = p.bin(BinOp::And, sel, fits, DType::Bool);
        let sp = p.constant(Scalar::Int(spare as i64), i);
        vec![p.select(ok, pos, sp, i)]
    })?
    .remove(0))
}

/// Every element's coordinates, `[n, ndim]` int64.
fn coordinates(op: &OpScope, x: &Tensor) -> Result<Tensor> {
    let nd = x.dim();
    let mut shape = x.shape().to_vec();
    shape.push(nd);
    let c = map_shape(op, &shape, &[], &[DType::I64], |p, _| {
        let i = DType::I32;
        let k = p.index(nd as u32);
        let mut v = p.constant(Scalar::Int(0), i);
        for d in 0..nd {
            let dc = p.constant(Scalar::Int(d as i64), i);
            let is = p.cmp(CmpKind::Eq, k, dc, i);
            let c = p.index(d as u32);
            v = p.select(is, c, v, i);
        }
        vec![v]
    })?
    .remove(0);
    Ok(reshaped(&c, &[x.numel(), nd]))
}

/// `nonzero(x)` under `op`: `[count, ndim]` int64 coordinates in row-major order.
pub(crate) fn nonzero_in(op: &OpScope, x: &Tensor) -> Result<Tensor> {
    let nd = x.dim();
    let n = x.numel();
    if n == 0 {
        return Tensor::empty(op.rt(), &[0, nd], DType::I64);
    }
    prims::fits_i32(n + 1)?;
    let (m, incl) = counts(op, x)?;
    let total = incl.with_layout(incl.layout().select(0, n as i64 - 1)?);
    let count = host_int(&total)? as usize;
    let pos = positions(op, &m, &incl, count, count)?;
    let dst = Tensor::empty(op.rt(), &[count + 1, nd], DType::I64)?;
    if nd > 0 {
        put_rows(op, &dst, &pos, &coordinates(op, x)?, Combine::Copy, false)?;
    }
    Ok(dst.with_layout(dst.layout().slice(0, Some(0), Some(count as i64), 1)?))
}

/// `torch.nonzero(x)`.
pub fn nonzero(x: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Nonzero::NAME, &[x])?;
    nonzero_in(&op, x)
}

/// `torch.nonzero_static(x, size=size, fill_value=fill)`: the first `size` coordinates, the
/// rest `fill_value` (no synchronisation).
#[aten("aten::nonzero_static", dtypes = DType::ALL_TPU, shard = REP, call = NonzeroStatic(self_, size, fill_value))]
pub fn nonzero_static(x: &Tensor, size: i64, fill_value: i64) -> Result<Tensor> {
    let op = OpScope::new(NonzeroStatic::NAME, &[x])?;
    if size < 0 {
        return Err(TpuError::BadArgs(format!(
            "nonzero_static: 'size' must be an non-negative integer, but got {size}"
        )));
    }
    let size = size as usize;
    let nd = x.dim();
    let dst = fill(&op, &[size + 1, nd], Scalar::Int(fill_value), DType::I64)?;
    if x.numel() > 0 && nd > 0 {
        prims::fits_i32(x.numel() + size + 1)?;
        let (m, incl) = counts(&op, x)?;
        let pos = positions(&op, &m, &incl, size, size)?;
        put_rows(&op, &dst, &pos, &coordinates(&op, x)?, Combine::Copy, false)?;
    }
    Ok(dst.with_layout(dst.layout().slice(0, Some(0), Some(size as i64), 1)?))
}

/// `torch.masked_select(x, mask)`: the elements of the broadcast of `x` where `mask` is true,
/// as a vector.
#[aten("aten::masked_select", dtypes = DType::ALL_TPU, shard = REP, call = MaskedSelect(self_, mask))]
pub fn masked_select(x: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(MaskedSelect::NAME, &[x, mask])?;
    if mask.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(format!(
            "masked_select: expected BoolTensor for mask, got {}",
            mask.dtype().scalar_type_name()
        )));
    }
    let shape = broadcast_shapes(x.shape(), mask.shape())?;
    let n: usize = shape.iter().product();
    if n == 0 {
        return Tensor::empty(op.rt(), &[0], x.dtype());
    }
    prims::fits_i32(n + 1)?;
    let mb = mask.with_layout(mask.layout().broadcast_to(&shape)?);
    let (m, incl) = counts(&op, &mb)?;
    let total = incl.with_layout(incl.layout().select(0, n as i64 - 1)?);
    let count = host_int(&total)? as usize;
    let pos = positions(&op, &m, &incl, count, count)?;
    let xb = x.with_layout(x.layout().broadcast_to(&shape)?);
    let src = map_shape(&op, &shape, &[&xb], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
    let dst = Tensor::empty(op.rt(), &[count + 1, 1], x.dtype())?;
    put_rows(
        &op,
        &dst,
        &pos,
        &reshaped(&src, &[n, 1]),
        Combine::Copy,
        false,
    )?;
    Ok(dst.with_layout(Layout::contiguous(&[count])))
}

/// `x.masked_scatter(mask, source)`: `x` where `mask` is false; where it is true, the
/// elements of `source` in order. A `source` with too few elements faults the gather.
#[aten(
    "aten::masked_scatter",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate("the source is consumed in the global order"),
    call = MaskedScatter(self_, mask, source)
)]
pub fn masked_scatter(x: &Tensor, mask: &Tensor, source: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(MaskedScatter::NAME, &[x, mask, source])?;
    if mask.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(format!(
            "masked_scatter_ only supports boolean masks, but got mask with dtype {}",
            mask.dtype().scalar_type_name()
        )));
    }
    if source.dtype() != x.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "masked_scatter: expected self and source to have same dtypes but got {} and {}",
            x.dtype().scalar_type_name(),
            source.dtype().scalar_type_name()
        )));
    }
    let shape = broadcast_shapes(x.shape(), mask.shape())?;
    let n: usize = shape.iter().product();
    let d = x.dtype();
    let xb = x.with_layout(x.layout().broadcast_to(&shape)?);
    let mb = mask.with_layout(mask.layout().broadcast_to(&shape)?);
    if n == 0 {
        return Tensor::empty(op.rt(), &shape, d);
    }
    if source.numel() == 0 {
        // Nothing can be taken from an empty source: the mask must be all false.
        let (_, incl) = counts(&op, &mb)?;
        let total = incl.with_layout(incl.layout().select(0, n as i64 - 1)?);
        if host_int(&total)? > 0 {
            return Err(TpuError::BadArgs(
                "masked_scatter: the source has fewer elements than the mask selects".into(),
            ));
        }
        return Ok(map_shape(&op, &shape, &[&xb], &[d], |_, r| vec![r[0]])?.remove(0));
    }
    prims::fits_i32(n.max(source.numel()))?;
    let (m, incl) = counts(&op, &mb)?;
    // Unselected positions read source element 0 (always there), then keep x.
    let idx = map_contiguous(&op, &[&m, &incl], &[DType::I32], |p, r| {
        let i = DType::I32;
        let one = p.constant(Scalar::Int(1), i);
        let pos = p.bin(BinOp::Sub, r[1], one, i);
        let zero = p.constant(Scalar::Int(0), i);
        let sel = p.cmp(CmpKind::Eq, r[0], one, i);
        vec![p.select(sel, pos, zero, i)]
    })?
    .remove(0);
    let src = prims::dense(&op, source)?;
    let table = reshaped(&src, &[source.numel(), 1]);
    let g = gather_rows(&op, &table, &idx)?;
    let g = reshaped(&g, &shape);
    Ok(map_shape(&op, &shape, &[&xb, &mb, &g], &[d], |p, r| {
        vec![p.select(r[1], r[2], r[0], d)]
    })?
    .remove(0))
}

/// `nonzero(x).unbind(1)` (`where(cond)`, `nonzero_numpy`).
fn nonzero_columns(name: &str, x: &Tensor) -> Result<Vec<Tensor>> {
    let op = OpScope::new(name, &[x])?;
    let nz = nonzero_in(&op, x)?;
    (0..x.dim())
        .map(|j| Ok(nz.with_layout(nz.layout().select(1, j as i64)?)))
        .collect()
}

/// The rule of the operators whose output's shape depends on the values.
const REP: Sharding = Sharding::Replicate("the output's shape depends on every shard's values");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::nonzero", dtypes = DType::ALL_TPU, shard = REP)]
fn nonzero_op(a: Nonzero<'_>) -> Result<Tensor> {
    nonzero(a.self_)
}

#[aten("aten::argwhere", dtypes = DType::ALL_TPU, shard = REP, kind = Decomposition)]
fn argwhere_op(a: Argwhere<'_>) -> Result<Tensor> {
    nonzero(a.self_)
}

#[aten("aten::nonzero_numpy", dtypes = DType::ALL_TPU, shard = REP, kind = Decomposition)]
fn nonzero_numpy_op(a: NonzeroNumpy<'_>) -> Result<Vec<Tensor>> {
    nonzero_columns(NonzeroNumpy::NAME, a.self_)
}

#[aten("aten::where", dtypes = DType::ALL_TPU, shard = REP, kind = Decomposition)]
fn where_op(a: Where<'_>) -> Result<Vec<Tensor>> {
    nonzero_columns(Where::NAME, a.condition)
}
