//! `index_select`, `gather` and `embedding` on the row-gather kernel, and `embedding_renorm`.
//!
//! Each becomes one gather of table rows, the table being a 2-D view of the input:
//! - `embedding`: the weight's rows, by the flattened indices;
//! - `index_select` along `dim`: the input as `[outer * size, inner]` (`outer` the dims before
//!   `dim`, `inner` those after), by indices `o * size + index[j]` computed by a small tile
//!   kernel (none when `outer == 1`), so the output comes out contiguous;
//! - `gather`: single elements, by flat offsets computed from the index tensor and the
//!   coordinates (a tile kernel), one row of one element each.
//!
//! Every gather checks its indices on the device: an index outside the table makes the kernel
//! fault. Where indices are combined into flat offsets, the tile kernel first replaces an index
//! outside its own dimension by -1, which the gather then rejects, so an out-of-range index
//! never reads a neighbouring row.

use super::super::aten;
use super::super::checks::check_range;
use super::super::helpers::{OpScope, map, map_contiguous, map_shape};
use super::super::prims;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, GatherNode, NodeKind, PRef, ProgBuilder};
use crate::layout::{Layout, contiguous_strides, wrap_dim};
use crate::ops::sharding::{Sharding, Special};
use crate::tensor::Tensor;

fn is_index_dtype(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64)
}

/// A contiguous copy of `t` under `op`, or `t` itself when already contiguous.
fn contiguous_in(op: &OpScope, t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() {
        return Ok(t.clone());
    }
    Ok(map_contiguous(op, &[t], &[t.dtype()], |_, r| vec![r[0]])?.remove(0))
}

/// The `[rows, row_len]` view of `t` (contiguous or copied), with unit steps along the rows
/// and non-negative row strides, as the gather kernel reads tables.
pub(crate) fn table_view(op: &OpScope, t: &Tensor, rows: usize, row_len: usize) -> Result<Tensor> {
    let usable = |l: &Layout| {
        let mut l = l.clone();
        if row_len <= 1 {
            l.strides[1] = 1;
        }
        if rows <= 1 {
            l.strides[0] = row_len.max(1) as isize;
        }
        (l.strides[1] == 1 && l.strides[0] >= 0).then_some(l)
    };
    if let Some(l) = t
        .layout()
        .view_as(&[rows, row_len])
        .as_ref()
        .and_then(usable)
    {
        return Ok(t.with_layout(l));
    }
    let c = contiguous_in(op, t)?;
    let l = Layout::contiguous(&[rows, row_len]);
    Ok(c.with_layout(usable(&l).unwrap_or(l)))
}

/// `out[i, :] = table[index[i], :]` for a 1-D int `index`; an index outside `[0, rows)`
/// faults on the device.
pub(crate) fn gather_rows(op: &OpScope, table: &Tensor, index: &Tensor) -> Result<Tensor> {
    let (rows, row_len) = (table.shape()[0], table.shape()[1]);
    let count = index.numel();
    if rows == 0 && count > 0 {
        return Err(TpuError::IndexOutOfRange(
            "index out of range in self".into(),
        ));
    }
    let index = contiguous_in(op, index)?;
    let out = Tensor::empty(op.rt(), &[count, row_len], table.dtype())?;
    op.submit(
        NodeKind::Gather(GatherNode {
            rows,
            row_len,
            count,
            check_bounds: true,
            zero_table: false,
        }),
        vec![table.view(), index.view()],
        vec![out.view()],
    )?;
    Ok(out)
}

/// `v` if `0 <= v < size`, else -1 (i32), for indices combined into flat offsets.
fn checked(p: &mut ProgBuilder, idx: PRef, size: usize, flat: PRef) -> PRef {
    let i = DType::I32;
    let zero = p.constant(Scalar::Int(0), i);
    let n = p.constant(Scalar::Int(size as i64), i);
    let bad = p.constant(Scalar::Int(-1), i);
    let ge = p.cmp(CmpKind::Ge, idx, zero, i);
    let lt = p.cmp(CmpKind::Lt, idx, n, i);
    let ok = p.bin(BinOp::And, ge, lt, i);
    p.select(ok, flat, bad, i)
}

fn fits_i32(n: usize, what: &str) -> Result<()> {
    if n > i32::MAX as usize {
        return Err(TpuError::Unsupported(format!(
            "{what}: {n} elements exceed the device's 32-bit indices"
        )));
    }
    Ok(())
}

/// `torch.index_select(x, dim, index)`: the slices of `x` along `dim` at `index` (a vector or
/// a scalar of int32/int64).
pub fn index_select(x: &Tensor, dim: i64, index: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(IndexSelect::NAME, &[x, index])?;
    if index.dim() > 1 {
        return Err(TpuError::BadArgs(
            "index_select(): Index is supposed to be a vector".into(),
        ));
    }
    if !is_index_dtype(index.dtype()) {
        return Err(TpuError::DtypeMismatch(
            "index_select(): Expected dtype int32 or int64 for index".into(),
        ));
    }
    let d = wrap_dim(dim, x.dim())?;
    let count = index.numel();
    if x.dim() == 0 && count != 1 {
        return Err(TpuError::IndexOutOfRange(format!(
            "index_select(): Index to scalar can have only 1 value, got {count} value(s)"
        )));
    }
    let shape = x.shape();
    let (size, outer, inner) = if x.dim() == 0 {
        (1, 1, 1)
    } else {
        (
            shape[d],
            shape[..d].iter().product::<usize>(),
            shape[d + 1..].iter().product::<usize>(),
        )
    };
    let mut out_shape = shape.to_vec();
    if x.dim() > 0 {
        out_shape[d] = count;
    }
    if size == 0 && count > 0 {
        return Err(TpuError::IndexOutOfRange(
            "index out of range in self".into(),
        ));
    }
    if out_shape.iter().product::<usize>() == 0 {
        return Tensor::empty(op.rt(), &out_shape, x.dtype());
    }
    fits_i32(outer * size, "index_select")?;
    let check = check_range(&op, index, 0, size as i64, |_| {
        TpuError::IndexOutOfRange("index out of range in self".into())
    })?;
    let idx = index.with_layout(
        index
            .layout()
            .view_as(&[count])
            .ok_or_else(|| op.err("internal: index view"))?,
    );
    let table = table_view(&op, x, outer * size, inner)?;
    let rows_index = if outer == 1 {
        idx
    } else {
        // o * size + index[j] over [outer, count], -1 where index[j] is out of range.
        let idx2 = idx.with_layout(idx.layout().unsqueeze(0)?);
        let flat = map_shape(&op, &[outer, count], &[&idx2], &[DType::I32], |p, r| {
            let i = DType::I32;
            let v = p.cast(r[0], i);
            let o = p.index(0);
            let s = p.constant(Scalar::Int(size as i64), i);
            let base = p.bin(BinOp::Mul, o, s, i);
            let f = p.bin(BinOp::Add, base, v, i);
            vec![checked(p, v, size, f)]
        })?
        .remove(0);
        flat.with_layout(Layout::contiguous(&[outer * count]))
    };
    let out = gather_rows(&op, &table, &rows_index)?;
    check.guards(op.rt(), &[&out]);
    Ok(out.with_layout(Layout::contiguous(&out_shape)))
}

/// `torch.gather(x, dim, index)`: `out[i][j][k] = x[i][index[i][j][k]][k]` (for `dim == 1`),
/// with PyTorch's shape checks.
pub fn gather(x: &Tensor, dim: i64, index: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Gather::NAME, &[x, index])?;
    let d = wrap_dim(dim, x.dim())?;
    if index.numel() == 0 {
        return Tensor::empty(op.rt(), index.shape(), x.dtype());
    }
    if !is_index_dtype(index.dtype()) {
        return Err(TpuError::DtypeMismatch(
            "gather(): Expected dtype int32/int64 for index".into(),
        ));
    }
    let nonempty = |t: &Tensor| t.dim().max(1);
    if nonempty(x) != nonempty(index) {
        return Err(TpuError::BadArgs(
            "Index tensor must have the same number of dimensions as input tensor".into(),
        ));
    }
    let size_of = |t: &Tensor, k: usize| if t.dim() == 0 { 1 } else { t.shape()[k] };
    for k in (0..nonempty(x)).filter(|k| *k != d) {
        if size_of(index, k) > size_of(x, k) {
            return Err(TpuError::ShapeMismatch(format!(
                "Size does not match at dimension {k} expected index {:?} to be no larger than self {:?} apart from dimension {d}",
                index.shape(),
                x.shape()
            )));
        }
    }
    let size = size_of(x, d);
    if size == 0 {
        return Err(TpuError::IndexOutOfRange(format!(
            "index is out of bounds for dimension {d} with size 0"
        )));
    }
    fits_i32(x.numel(), "gather")?;
    let check = check_range(&op, index, 0, size as i64, move |v| {
        TpuError::BadArgs(format!(
            "index {v} is out of bounds for dimension {d} with size {size}"
        ))
    })?;
    // Flat offsets into x (contiguous), -1 where the index is out of range.
    let xs = if x.dim() == 0 {
        vec![1]
    } else {
        contiguous_strides(x.shape())
    };
    let ndim = index.dim();
    let flat = map_contiguous(&op, &[index], &[DType::I32], |p, r| {
        let i = DType::I32;
        let v = p.cast(r[0], i);
        let mut f = v;
        if ndim > 0 {
            let st = p.constant(Scalar::Int(xs[d] as i64), i);
            f = p.bin(BinOp::Mul, v, st, i);
            for (k, st) in xs.iter().enumerate().filter(|(k, _)| *k != d) {
                let c = p.index(k as u32);
                let st = p.constant(Scalar::Int(*st as i64), i);
                let term = p.bin(BinOp::Mul, c, st, i);
                f = p.bin(BinOp::Add, f, term, i);
            }
        }
        vec![checked(p, v, size, f)]
    })?
    .remove(0);
    let flat = flat.with_layout(Layout::contiguous(&[index.numel()]));
    let table = table_view(&op, x, x.numel(), 1)?;
    let out = gather_rows(&op, &table, &flat)?;
    check.guards(op.rt(), &[&out]);
    Ok(out.with_layout(Layout::contiguous(index.shape())))
}

/// `torch.nn.functional.embedding(indices, weight)`: `weight[indices]`, of shape
/// `indices.shape + [weight.shape[1]]` (`padding_idx` and the other arguments only matter for
/// the backward).
pub fn embedding(weight: &Tensor, indices: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Embedding::NAME, &[weight, indices])?;
    if weight.dim() != 2 {
        return Err(TpuError::BadArgs("'weight' must be 2-D".into()));
    }
    if !is_index_dtype(indices.dtype()) {
        return Err(TpuError::DtypeMismatch(format!(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got {} instead (while checking arguments for embedding)",
            indices.dtype()
        )));
    }
    let (rows, dim) = (weight.shape()[0], weight.shape()[1]);
    let mut out_shape = indices.shape().to_vec();
    out_shape.push(dim);
    if indices.numel() == 0 {
        return Tensor::empty(op.rt(), &out_shape, weight.dtype());
    }
    let check = check_range(&op, indices, 0, rows as i64, |_| {
        TpuError::IndexOutOfRange("index out of range in self".into())
    })?;
    let flat = contiguous_in(&op, indices)?;
    let flat = flat.with_layout(
        flat.layout()
            .view_as(&[flat.numel()])
            .ok_or_else(|| op.err("internal: index view"))?,
    );
    let table = table_view(&op, weight, rows, dim)?;
    let out = gather_rows(&op, &table, &flat)?;
    check.guards(op.rt(), &[&out]);
    Ok(out.with_layout(Layout::contiguous(&out_shape)))
}

impl Tensor {
    /// `self.index_select(dim, index)`.
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        index_select(self, dim, index)
    }

    /// `self.gather(dim, index)`.
    pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        gather(self, dim, index)
    }
}

/// `embedding_renorm(weight, indices, max_norm, norm_type)` (and its in-place form, what
/// `F.embedding(..., max_norm=)` calls): each row of `weight` that `indices` name whose
/// `norm_type`-norm exceeds `max_norm` is scaled by `max_norm / (norm + 1e-7)`, as PyTorch's
/// CPU kernel scales it (the norm and the factor in the weight's dtype); the other rows are
/// copied. An index outside the table is PyTorch's `IndexError`, checked on the device.
#[aten(
    "aten::embedding_renorm",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("the rows named may be on any shard"),
    call = EmbeddingRenorm(self_, indices, max_norm, norm_type)
)]
pub fn embedding_renorm(
    weight: &Tensor,
    indices: &Tensor,
    max_norm: f64,
    norm_type: f64,
) -> Result<Tensor> {
    let op = OpScope::new(EmbeddingRenorm::NAME, &[weight, indices])?;
    if weight.dim() != 2 {
        return Err(TpuError::BadArgs(format!(
            "Expected 2-dimensional tensor, but got {}-dimensional tensor for argument #1 'self' (while checking arguments for embedding_renorm_)",
            weight.dim()
        )));
    }
    if !is_index_dtype(indices.dtype()) {
        return Err(TpuError::DtypeMismatch(format!(
            "Expected tensor for argument #2 'indices' to have one of the following scalar types: Long, Int; but got {} instead (while checking arguments for embedding_renorm_)",
            indices.dtype()
        )));
    }
    let (rows, cols, dt, f) = (
        weight.shape()[0],
        weight.shape()[1],
        weight.dtype(),
        DType::F32,
    );
    // PyTorch's kernel selects each row named (a negative index counts from the end): an index
    // outside is its IndexError.
    let check = check_range(&op, indices, -(rows as i64), rows as i64, move |v| {
        TpuError::IndexOutOfRange(format!(
            "select(): index {v} out of range for tensor of size [{rows}, {cols}] at dimension 0"
        ))
    })?;
    // How many times each row is named.
    let named = prims::fill(&op, &[rows, 1], Scalar::Int(0), f)?;
    let n = indices.numel();
    if n > 0 {
        // The indices, counted from the start (contiguous, as the index-add kernel reads them).
        let wrapped = map_contiguous(&op, &[indices], &[DType::I32], |p, r| {
            let i = DType::I32;
            let v = p.cast(r[0], i);
            let zero = p.constant(Scalar::Int(0), i);
            let negative = p.cmp(CmpKind::Lt, v, zero, i);
            let size = p.constant(Scalar::Int(rows as i64), i);
            let from_end = p.bin(BinOp::Add, v, size, i);
            vec![p.select(negative, from_end, v, i)]
        })?
        .remove(0);
        let ones = prims::fill(&op, &[n, 1], Scalar::Int(1), f)?;
        let wrapped = prims::reshaped(&wrapped, &[n]);
        prims::put_rows(&op, &named, &wrapped, &ones, Combine::Add, true)?;
    }
    let norms = crate::ops::reduce::vector_norm(
        EmbeddingRenorm::NAME,
        weight,
        norm_type,
        Some(&[1]),
        true,
        None,
    )?;
    let out = map(&op, &[weight, &norms, &named], &[dt], |p, r| {
        let norm = p.cast(r[1], f);
        let zero = p.constant(Scalar::Float(0.0), f);
        let cap = p.constant(Scalar::Float(max_norm), f);
        let is_named = p.cmp(CmpKind::Gt, r[2], zero, f);
        let over = p.cmp(CmpKind::Gt, norm, cap, f);
        let scaled = p.bin(BinOp::And, is_named, over, DType::Bool);
        let eps = p.constant(Scalar::Float(1e-7), f);
        let d = p.bin(BinOp::Add, norm, eps, f);
        // PyTorch's kernel takes the factor in the weight's dtype (bfloat16: rounded).
        let factor = p.bin(BinOp::Div, cap, d, f);
        let factor = p.cast(factor, dt);
        let factor = p.cast(factor, f);
        let x = p.cast(r[0], f);
        let y = p.bin(BinOp::Mul, x, factor, f);
        let y = p.cast(y, dt);
        vec![p.select(scaled, y, r[0], dt)]
    })?
    .remove(0);
    check.guards(op.rt(), &[&out]);
    Ok(out)
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::index_select", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::IndexSelect))]
fn index_select_op(a: IndexSelect<'_>) -> Result<Tensor> {
    index_select(a.self_, a.dim, a.index)
}

#[aten("aten::gather", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Gather))]
fn gather_op(a: Gather<'_>) -> Result<Tensor> {
    gather(a.self_, a.dim, a.index)
}

/// `padding_idx`, `scale_grad_by_freq` and `sparse` only matter to the backward.
#[aten("aten::embedding", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Embedding))]
fn embedding_op(a: Embedding<'_>) -> Result<Tensor> {
    embedding(a.weight, a.indices)
}
