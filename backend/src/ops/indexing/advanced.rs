//! Advanced indexing: `index.Tensor` (`x[i, :, j]`), `index_put` (`x[i, :, j] = v`), and the
//! `_unsafe_index`, `_unsafe_index_put`, `_unsafe_masked_index` and
//! `_unsafe_masked_index_put_accumulate` forms.
//!
//! PyTorch's rules: boolean masks become the index tensors of their `nonzero()`; the index
//! tensors broadcast together to `B`; when the indexed dims are adjacent, `B` takes their place
//! in the result, otherwise it comes first. Here the result is split into `R` (every dim up to
//! the last indexed one, rearranged as the rule says) and `T` (the dims after it, which stay as
//! they are): one tile kernel computes, for each position of `R`, the flat offset of its row of
//! `T` in the input, and one row kernel gathers (or puts) those rows. Indexing the leading dims
//! of a large tensor (`emb[ids]`, `x[mask]`) moves whole rows; indexing the last dim moves single
//! elements.

use super::{Bound, bounded, check_index, compact};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine};
use crate::layout::{Layout, broadcast_shapes};
use crate::ops::aten;
use crate::ops::checks::{Pending, check_range};
use crate::ops::data::{gather_rows, table_view};
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::prims::{fits_i32, put_rows, reshaped};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// Where the rows of an indexing operation are.
struct Plan {
    /// Rows of the input seen as a table (dims up to the last indexed one).
    rows: usize,
    /// Elements per row (the dims after the last indexed one).
    row_len: usize,
    /// The result's leading dims.
    r_shape: Vec<usize>,
    /// The result's trailing dims (the input's dims after the last indexed one).
    t_shape: Vec<usize>,
    /// Row offset of each position of `R` (int32, contiguous, -1 where an index is invalid).
    flat: Tensor,
}

impl Plan {
    fn out_shape(&self) -> Vec<usize> {
        self.r_shape.iter().chain(&self.t_shape).copied().collect()
    }
}

/// One index tensor per dim of `x` (`None`: the whole dim), boolean masks replaced by their
/// nonzero coordinates.
fn expand_masks(
    op: &OpScope,
    x: &Tensor,
    indices: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>> {
    let mut out = Vec::new();
    for (k, t) in indices.iter().enumerate() {
        match t {
            Some(t) if t.dtype() == DType::Bool => {
                let at = out.len();
                let kd = t.dim();
                if kd == 0 {
                    return Err(TpuError::Unsupported(
                        "indexing with a zero-dimensional boolean mask".into(),
                    ));
                }
                if at + kd > x.dim() || t.shape() != &x.shape()[at..at + kd] {
                    return Err(TpuError::IndexOutOfRange(format!(
                        "The shape of the mask {:?} at index {k} does not match the shape of the indexed tensor {:?} at index {at}",
                        t.shape(),
                        x.shape()
                    )));
                }
                let nz = compact::nonzero_in(op, t)?;
                for j in 0..kd {
                    out.push(Some(nz.with_layout(nz.layout().select(1, j as i64)?)));
                }
            }
            Some(t) => {
                check_index("index", t)?;
                out.push(Some(t.clone()));
            }
            None => out.push(None),
        }
    }
    if out.len() > x.dim() {
        return Err(TpuError::IndexOutOfRange(format!(
            "too many indices for tensor of dimension {}",
            x.dim()
        )));
    }
    Ok(out)
}

/// The plan of indexing `x` with `indices` (at least one tensor).
fn plan(op: &OpScope, x: &Tensor, idx: &[Option<Tensor>], bound: Bound) -> Result<Plan> {
    let shape = x.shape();
    let dims: Vec<usize> = (0..idx.len()).filter(|d| idx[*d].is_some()).collect();
    let (first, last) = (dims[0], *dims.last().expect("an index"));
    let adjacent = dims.len() == last - first + 1;
    let mut b_shape: Vec<usize> = Vec::new();
    for d in &dims {
        let t = idx[*d].as_ref().expect("indexed");
        b_shape = broadcast_shapes(&b_shape, t.shape()).map_err(|_| {
            TpuError::IndexOutOfRange(format!(
                "shape mismatch: indexing tensors could not be broadcast together with shapes {:?}",
                dims.iter()
                    .map(|d| idx[*d]
                        .as_ref()
                        .map(|t| t.shape().to_vec())
                        .unwrap_or_default())
                    .collect::<Vec<_>>()
            ))
        })?;
    }
    let sliced: Vec<usize> = (0..=last).filter(|d| !dims.contains(d)).collect();
    let s_sizes: Vec<usize> = sliced.iter().map(|d| shape[*d]).collect();
    let (r_shape, b_at, s_at) = if adjacent {
        let r: Vec<usize> = s_sizes.iter().chain(&b_shape).copied().collect();
        (r, sliced.len(), 0)
    } else {
        let r: Vec<usize> = b_shape.iter().chain(&s_sizes).copied().collect();
        (r, 0, b_shape.len())
    };
    let t_shape: Vec<usize> = shape[last + 1..].to_vec();
    let rows: usize = shape[..=last].iter().product();
    let row_len: usize = t_shape.iter().product();
    fits_i32(rows)?;
    let stride = |d: usize| shape[d + 1..=last].iter().product::<usize>() as i64;
    // Each index tensor seen over R: its broadcast strides at B's place, 0 elsewhere.
    let nr = r_shape.len();
    let mut views = Vec::new();
    for d in &dims {
        let t = idx[*d].as_ref().expect("indexed");
        let l = t.layout().broadcast_to(&b_shape)?;
        let mut strides = vec![0isize; nr];
        strides[b_at..b_at + b_shape.len()].copy_from_slice(&l.strides);
        views.push(t.with_layout(Layout {
            shape: r_shape.clone(),
            strides,
            offset: l.offset,
        }));
    }
    let refs: Vec<&Tensor> = views.iter().collect();
    let sizes: Vec<(usize, i64)> = dims.iter().map(|d| (shape[*d], stride(*d))).collect();
    let s_terms: Vec<(u32, i64)> = sliced
        .iter()
        .enumerate()
        .map(|(k, d)| ((s_at + k) as u32, stride(*d)))
        .collect();
    let flat = map_shape(op, &r_shape, &refs, &[DType::I32], |p, r| {
        let i = DType::I32;
        let mut f = p.constant(Scalar::Int(0), i);
        let mut valid = p.constant(Scalar::Bool(true), DType::Bool);
        for (k, (size, st)) in sizes.iter().enumerate() {
            let v = bounded(p, r[k], *size, bound);
            if bound == Bound::Check {
                let bad = p.constant(Scalar::Int(-1), i);
                let ok = p.cmp(CmpKind::Ne, v, bad, i);
                valid = p.bin(BinOp::And, valid, ok, DType::Bool);
            }
            let s = p.constant(Scalar::Int(*st), i);
            let t = p.bin(BinOp::Mul, v, s, i);
            f = p.bin(BinOp::Add, f, t, i);
        }
        for (pos, st) in &s_terms {
            let c = p.index(*pos);
            let s = p.constant(Scalar::Int(*st), i);
            let t = p.bin(BinOp::Mul, c, s, i);
            f = p.bin(BinOp::Add, f, t, i);
        }
        let bad = p.constant(Scalar::Int(-1), i);
        vec![p.select(valid, f, bad, i)]
    })?
    .remove(0);
    let n: usize = r_shape.iter().product();
    Ok(Plan {
        rows,
        row_len,
        r_shape,
        t_shape,
        flat: reshaped(&flat, &[n]),
    })
}

/// Checks on the device that every index lies in `[-size, size)` of its dim (with
/// [`Bound::Check`]; see [`check_range`]): PyTorch's `IndexError` otherwise.
fn check_indices(
    op: &OpScope,
    x: &Tensor,
    idx: &[Option<Tensor>],
    bound: Bound,
) -> Result<Vec<Pending>> {
    if bound != Bound::Check {
        return Ok(Vec::new());
    }
    let mut checks = Vec::new();
    for (d, t) in idx.iter().enumerate() {
        if let Some(t) = t {
            let size = x.shape()[d];
            let n = size as i64;
            checks.push(check_range(op, t, -n, n, move |v| {
                TpuError::IndexOutOfRange(format!(
                    "index {v} is out of bounds for dimension {d} with size {size}"
                ))
            })?);
        }
    }
    Ok(checks)
}

/// `x[indices]` under `op`, indices mapped as `bound` says.
fn index_in(op: &OpScope, x: &Tensor, indices: &[Option<Tensor>], bound: Bound) -> Result<Tensor> {
    let idx = expand_masks(op, x, indices)?;
    if idx.iter().all(Option::is_none) {
        return Ok(map_contiguous(op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0));
    }
    let pl = plan(op, x, &idx, bound)?;
    let out_shape = pl.out_shape();
    if out_shape.iter().product::<usize>() == 0 {
        return Tensor::empty(op.rt(), &out_shape, x.dtype());
    }
    let checks = check_indices(op, x, &idx, bound)?;
    let table = table_view(op, x, pl.rows, pl.row_len)?;
    let out = gather_rows(op, &table, &pl.flat)?;
    for c in checks {
        c.guards(op.rt(), &[&out]);
    }
    Ok(out.with_layout(Layout::contiguous(&out_shape)))
}

/// `x[indices]` (`aten::index.Tensor`): `None` keeps a dim, int tensors select, bool tensors
/// mask; negative indices count from the end.
#[aten("aten::index.Tensor", dtypes = DType::ALL_TPU, shard = REP, call = IndexTensor(self_, &indices))]
pub fn index(x: &Tensor, indices: &[Option<Tensor>]) -> Result<Tensor> {
    let mut ins = vec![x];
    ins.extend(indices.iter().flatten());
    let op = OpScope::new(IndexTensor::NAME, &ins)?;
    index_in(&op, x, indices, Bound::Check)
}

/// `x[indices] = values` (or `+=` with `accumulate`) on a copy of `x`, under `op`.
fn index_put_in(
    op: &OpScope,
    x: &Tensor,
    indices: &[Option<Tensor>],
    values: &Tensor,
    accumulate: bool,
    bound: Bound,
) -> Result<Tensor> {
    if values.dtype() != x.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "Index put requires the source and destination dtypes match, got {} for the destination and {} for the source.",
            x.dtype().scalar_type_name(),
            values.dtype().scalar_type_name()
        )));
    }
    let out = map_contiguous(op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
    let idx = expand_masks(op, x, indices)?;
    if idx.iter().all(Option::is_none) {
        let v = values.layout().broadcast_to(x.shape()).map_err(|_| {
            TpuError::ShapeMismatch(format!(
                "shape mismatch: value tensor of shape {:?} cannot be broadcast to indexing result of shape {:?}",
                values.shape(),
                x.shape()
            ))
        })?;
        return Ok(
            map_contiguous(op, &[&out, &values.with_layout(v)], &[x.dtype()], |p, r| {
                vec![if accumulate {
                    p.bin(BinOp::Add, r[0], r[1], x.dtype())
                } else {
                    r[1]
                }]
            })?
            .remove(0),
        );
    }
    let pl = plan(op, x, &idx, bound)?;
    let res_shape = pl.out_shape();
    let vl = values.layout().broadcast_to(&res_shape).map_err(|_| {
        TpuError::ShapeMismatch(format!(
            "shape mismatch: value tensor of shape {:?} cannot be broadcast to indexing result of shape {:?}",
            values.shape(),
            res_shape
        ))
    })?;
    let n: usize = pl.r_shape.iter().product();
    if n * pl.row_len == 0 {
        return Ok(out);
    }
    let src = map_shape(
        op,
        &res_shape,
        &[&values.with_layout(vl)],
        &[x.dtype()],
        |_, r| vec![r[0]],
    )?
    .remove(0);
    let src = reshaped(&src, &[n, pl.row_len]);
    let table = reshaped(&out, &[pl.rows, pl.row_len]);
    let combine = if accumulate {
        Combine::Add
    } else {
        Combine::Copy
    };
    let checks = check_indices(op, x, &idx, bound)?;
    put_rows(op, &table, &pl.flat, &src, combine, true)?;
    for c in checks {
        c.guards(op.rt(), &[&out]);
    }
    Ok(out)
}

/// `torch.index_put(x, indices, values, accumulate)`: a copy of `x` with `x[indices] = values`
/// (`+=` with `accumulate`; repeated indices accumulate in order, or the last one wins).
pub fn index_put(
    x: &Tensor,
    indices: &[Option<Tensor>],
    values: &Tensor,
    accumulate: bool,
) -> Result<Tensor> {
    let mut ins = vec![x, values];
    ins.extend(indices.iter().flatten());
    let op = OpScope::new(IndexPut::NAME, &ins)?;
    index_put_in(&op, x, indices, values, accumulate, Bound::Check)
}

/// `_unsafe_masked_index(x, mask, indices, fill)`: `x[indices]` with each index clamped to its
/// dim (negative to 0), and `fill` where `mask` is false.
#[aten(
    "aten::_unsafe_masked_index",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = UnsafeMaskedIndex(self_, mask, &indices, fill)
)]
fn unsafe_masked_index(
    x: &Tensor,
    mask: &Tensor,
    indices: &[Option<Tensor>],
    fill: Scalar,
) -> Result<Tensor> {
    let mut ins = vec![x, mask];
    ins.extend(indices.iter().flatten());
    let op = OpScope::new(UnsafeMaskedIndex::NAME, &ins)?;
    if mask.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(
            "_unsafe_masked_index found mask with dtype other than bool".into(),
        ));
    }
    let g = if x.numel() == 0 {
        // Only the shape matters: every element is `fill`.
        let idx = expand_masks(&op, x, indices)?;
        let shape = if idx.iter().all(Option::is_none) {
            x.shape().to_vec()
        } else {
            let dims: Vec<usize> = (0..idx.len()).filter(|d| idx[*d].is_some()).collect();
            let mut b: Vec<usize> = Vec::new();
            for d in &dims {
                b = broadcast_shapes(&b, idx[*d].as_ref().expect("indexed").shape())?;
            }
            let last = *dims.last().expect("an index");
            let sliced: Vec<usize> = (0..=last)
                .filter(|d| !dims.contains(d))
                .map(|d| x.shape()[d])
                .collect();
            let adjacent = dims.len() == last - dims[0] + 1;
            let mut s: Vec<usize> = if adjacent {
                sliced.iter().chain(&b).copied().collect()
            } else {
                b.iter().chain(&sliced).copied().collect()
            };
            s.extend(&x.shape()[last + 1..]);
            s
        };
        return crate::ops::prims::fill(&op, &shape, fill, x.dtype());
    } else {
        index_in(&op, x, indices, Bound::Clamp)?
    };
    let d = x.dtype();
    Ok(map_contiguous(&op, &[&g, mask], &[d], |p, r| {
        let f = p.constant(fill, d);
        vec![p.select(r[1], r[0], f, d)]
    })?
    .remove(0))
}

/// `_unsafe_masked_index_put_accumulate(x, mask, indices, values)`: `x[indices] += values`
/// where `mask` is true, indices clamped to `[-size, size)`.
#[aten(
    "aten::_unsafe_masked_index_put_accumulate",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = UnsafeMaskedIndexPutAccumulate(self_, mask, &indices, values)
)]
fn unsafe_masked_index_put_accumulate(
    x: &Tensor,
    mask: &Tensor,
    indices: &[Option<Tensor>],
    values: &Tensor,
) -> Result<Tensor> {
    let mut ins = vec![x, mask, values];
    ins.extend(indices.iter().flatten());
    let op = OpScope::new(UnsafeMaskedIndexPutAccumulate::NAME, &ins)?;
    if x.numel() == 0 {
        return Ok(map_contiguous(&op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0));
    }
    let d = values.dtype();
    let masked = map_contiguous(&op, &[values, mask], &[d], |p, r| {
        let z = p.constant(Scalar::Int(0), d);
        vec![p.select(r[1], r[0], z, d)]
    })?
    .remove(0);
    index_put_in(&op, x, indices, &masked, true, Bound::ClampWrap)
}

/// Every advanced indexing operator's rule.
const REP: Sharding = Sharding::Replicate("indices address the global tensor");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::_unsafe_index.Tensor", dtypes = DType::ALL_TPU, shard = REP)]
fn unsafe_index_tensor_op(a: UnsafeIndexTensor<'_>) -> Result<Tensor> {
    let (x, idx) = (a.self_, &a.indices);
    let mut ins = vec![x];
    ins.extend(idx.iter().flatten());
    let op = OpScope::new(UnsafeIndexTensor::NAME, &ins)?;
    index_in(&op, x, idx, Bound::Check)
}

#[aten("aten::index_put", dtypes = DType::ALL_TPU, shard = REP)]
fn index_put_op(a: IndexPut<'_>) -> Result<Tensor> {
    index_put(a.self_, &a.indices, a.values, a.accumulate)
}

/// What `index_put_` and the backward of `x[indices]` call; `unsafe` only lets PyTorch skip its
/// index checks, which are kept here.
#[aten("aten::_index_put_impl", dtypes = DType::ALL_TPU, shard = REP)]
fn index_put_impl_op(a: IndexPutImpl<'_>) -> Result<Tensor> {
    index_put(a.self_, &a.indices, a.values, a.accumulate)
}

#[aten("aten::_unsafe_index_put", dtypes = DType::ALL_TPU, shard = REP)]
fn unsafe_index_put_op(a: UnsafeIndexPut<'_>) -> Result<Tensor> {
    let (x, v, idx) = (a.self_, a.values, &a.indices);
    let mut ins = vec![x, v];
    ins.extend(idx.iter().flatten());
    let op = OpScope::new(UnsafeIndexPut::NAME, &ins)?;
    index_put_in(&op, x, idx, v, a.accumulate, Bound::Check)
}
