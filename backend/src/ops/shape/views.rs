//! View operators: `squeeze` (all, `.dims`), the in-place view forms (`squeeze_`,
//! `unsqueeze_`, `transpose_`, `t_`), `split_with_sizes`, `unsafe_split`, `unbind`, `narrow`,
//! `diagonal`, `unfold`, `alias`.
//!
//! An in-place view form returns `self` with its new shape over the same storage: a caller that
//! holds `self` (a framework bridge) takes the returned layout as its tensor's new metadata.

use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::{Layout, wrap_dim};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, dims_of};
use crate::ops::sharding::{Sharding, ViewKind};
use crate::tensor::Tensor;

fn view(name: &str, x: &Tensor, f: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Tensor> {
    let _op = OpScope::view(name, &[x])?;
    Ok(x.with_layout(f(x.layout())?))
}

/// `squeeze` of the size-1 dims among `dims` (all dims when `None`).
pub(super) fn squeeze_layout(l: &Layout, dims: Option<&[i64]>) -> Result<Layout> {
    let keep: Vec<usize> = match dims {
        None => (0..l.ndim()).filter(|d| l.shape[*d] != 1).collect(),
        Some(ds) => {
            let ds = if l.ndim() == 0 {
                for &d in ds {
                    wrap_dim(d, 0)?;
                }
                Vec::new()
            } else {
                dims_of(ds, l.ndim(), false)?
            };
            (0..l.ndim())
                .filter(|d| !(ds.contains(d) && l.shape[*d] == 1))
                .collect()
        }
    };
    Ok(Layout {
        shape: keep.iter().map(|d| l.shape[*d]).collect(),
        strides: keep.iter().map(|d| l.strides[*d]).collect(),
        offset: l.offset,
    })
}

/// The diagonal of dims `d1`, `d2` with `offset` (PyTorch's `diagonal` view): the two dims
/// removed and the diagonal appended.
pub fn diagonal_layout(l: &Layout, offset: i64, d1: i64, d2: i64) -> Result<Layout> {
    let n = l.ndim();
    let (a, b) = (wrap_dim(d1, n)?, wrap_dim(d2, n)?);
    if a == b {
        return Err(TpuError::BadArgs(format!(
            "diagonal dimensions cannot be identical {d1}, {d2}"
        )));
    }
    let (na, nb) = (l.shape[a] as i64, l.shape[b] as i64);
    let len = if offset >= 0 {
        na.min(nb - offset).max(0)
    } else {
        (na + offset).min(nb).max(0)
    };
    let mut out = l.clone();
    if len > 0 {
        let delta = if offset >= 0 {
            offset as isize * l.strides[b]
        } else {
            -offset as isize * l.strides[a]
        };
        out.offset = (l.offset as isize + delta) as usize;
    }
    let st = l.strides[a] + l.strides[b];
    let (hi, lo) = (a.max(b), a.min(b));
    out.shape.remove(hi);
    out.strides.remove(hi);
    out.shape.remove(lo);
    out.strides.remove(lo);
    out.shape.push(len as usize);
    out.strides.push(st);
    Ok(out)
}

/// `unfold(dim, size, step)`: windows of `size` every `step` along `dim`, as a new last dim.
pub(super) fn unfold_layout(l: &Layout, dim: i64, size: i64, step: i64) -> Result<Layout> {
    let n = l.ndim();
    let d = wrap_dim(dim, n)?;
    let len = if n == 0 { 1 } else { l.shape[d] as i64 };
    if size < 0 || size > len {
        return Err(TpuError::BadArgs(format!(
            "maximum size for tensor at dimension {d} is {len} but size is {size}"
        )));
    }
    if step <= 0 {
        return Err(TpuError::BadArgs(format!("step is {step} but must be > 0")));
    }
    let mut out = l.clone();
    if n == 0 {
        out.shape.push(size as usize);
        out.strides.push(1);
        return Ok(out);
    }
    let st = l.strides[d];
    out.shape[d] = ((len - size) / step + 1) as usize;
    out.strides[d] = st * step as isize;
    out.shape.push(size as usize);
    out.strides.push(st);
    Ok(out)
}

/// `narrow(dim, start, length)`.
pub(super) fn narrow_layout(l: &Layout, dim: i64, start: i64, length: i64) -> Result<Layout> {
    if l.ndim() == 0 {
        return Err(TpuError::BadArgs(
            "narrow() cannot be applied to a 0-dim tensor.".into(),
        ));
    }
    let d = wrap_dim(dim, l.ndim())?;
    let size = l.shape[d] as i64;
    if length < 0 {
        return Err(TpuError::BadArgs(
            "narrow(): length must be non-negative.".into(),
        ));
    }
    if start < -size || start > size {
        return Err(TpuError::IndexOutOfRange(format!(
            "start out of range (expected to be in range of [{}, {size}], but got {start})",
            -size
        )));
    }
    let start = if start < 0 { start + size } else { start };
    if start + length > size {
        return Err(TpuError::BadArgs(format!(
            "start ({start}) + length ({length}) exceeds dimension size ({size})."
        )));
    }
    l.slice(d as i64, Some(start), Some(start + length), 1)
}

/// Views of the pieces of `sizes` along `dim` (they must add up to the dim's size).
pub(super) fn split_sizes(x: &Tensor, sizes: &[i64], dim: i64) -> Result<Vec<Tensor>> {
    if x.dim() == 0 {
        return Err(TpuError::BadArgs(
            "split expects at least a 1-dimensional tensor".into(),
        ));
    }
    let d = wrap_dim(dim, x.dim())?;
    let n = x.shape()[d] as i64;
    if sizes.iter().any(|s| *s < 0) || sizes.iter().sum::<i64>() != n {
        return Err(TpuError::BadArgs(format!(
            "split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at dimension {d}), but got split_sizes={sizes:?}"
        )));
    }
    let mut at = 0;
    sizes
        .iter()
        .map(|s| {
            let l = x.layout().slice(d as i64, Some(at), Some(at + s), 1)?;
            at += s;
            Ok(x.with_layout(l))
        })
        .collect()
}

/// Views of each index along `dim`.
pub(super) fn unbind_views(x: &Tensor, dim: i64) -> Result<Vec<Tensor>> {
    if x.dim() == 0 {
        return Err(TpuError::BadArgs(
            "Dimension specified as 0 but tensor has no dimensions".into(),
        ));
    }
    let d = wrap_dim(dim, x.dim())?;
    (0..x.shape()[d])
        .map(|i| Ok(x.with_layout(x.layout().select(d as i64, i as i64)?)))
        .collect()
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

const REP: Sharding = Sharding::Replicate("a view without a sharding rule of its own");

#[aten("aten::squeeze", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn squeeze_op(a: Squeeze<'_>) -> Result<Tensor> {
    view(Squeeze::NAME, a.self_, |l| squeeze_layout(l, None))
}

#[aten("aten::squeeze.dims", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn squeeze_dims_op(a: SqueezeDims<'_>) -> Result<Tensor> {
    view(SqueezeDims::NAME, a.self_, |l| {
        squeeze_layout(l, Some(&a.dim))
    })
}

#[aten("aten::squeeze_", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn squeeze_inplace_op(a: SqueezeInplace<'_>) -> Result<Tensor> {
    view(SqueezeInplace::NAME, a.self_, |l| squeeze_layout(l, None))
}

#[aten(
    "aten::squeeze_.dim",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::SqueezeDim),
    kind = View
)]
fn squeeze_inplace_dim_op(a: SqueezeInplaceDim<'_>) -> Result<Tensor> {
    view(SqueezeInplaceDim::NAME, a.self_, |l| l.squeeze(a.dim))
}

#[aten("aten::squeeze_.dims", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn squeeze_inplace_dims_op(a: SqueezeInplaceDims<'_>) -> Result<Tensor> {
    view(SqueezeInplaceDims::NAME, a.self_, |l| {
        squeeze_layout(l, Some(&a.dim))
    })
}

#[aten(
    "aten::unsqueeze_",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Unsqueeze),
    kind = View
)]
fn unsqueeze_inplace_op(a: UnsqueezeInplace<'_>) -> Result<Tensor> {
    view(UnsqueezeInplace::NAME, a.self_, |l| l.unsqueeze(a.dim))
}

#[aten(
    "aten::transpose_",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Transpose),
    kind = View
)]
fn transpose_inplace_op(a: TransposeInplace<'_>) -> Result<Tensor> {
    view(TransposeInplace::NAME, a.self_, |l| {
        l.transpose(a.dim0, a.dim1)
    })
}

#[aten(
    "aten::t_",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::T),
    kind = View
)]
fn t_inplace_op(a: TInplace<'_>) -> Result<Tensor> {
    let x = a.self_;
    if x.dim() > 2 {
        return Err(TpuError::BadArgs(format!(
            "t_() expects a tensor with <= 2 dimensions, but self is {}D",
            x.dim()
        )));
    }
    view(TInplace::NAME, x, |l| {
        if l.ndim() == 2 {
            l.transpose(0, 1)
        } else {
            Ok(l.clone())
        }
    })
}

#[aten("aten::split_with_sizes", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn split_with_sizes_op(a: SplitWithSizes<'_>) -> Result<Vec<Tensor>> {
    let _op = OpScope::view(SplitWithSizes::NAME, &[a.self_])?;
    split_sizes(a.self_, &a.split_sizes, a.dim)
}

#[aten("aten::unsafe_split.Tensor", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn unsafe_split_tensor_op(a: UnsafeSplitTensor<'_>) -> Result<Vec<Tensor>> {
    crate::ops::data::split(a.self_, a.split_size, a.dim)
}

#[aten("aten::unsafe_split_with_sizes", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn unsafe_split_with_sizes_op(a: UnsafeSplitWithSizes<'_>) -> Result<Vec<Tensor>> {
    let _op = OpScope::view(UnsafeSplitWithSizes::NAME, &[a.self_])?;
    split_sizes(a.self_, &a.split_sizes, a.dim)
}

#[aten("aten::unbind.int", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn unbind_int_op(a: UnbindInt<'_>) -> Result<Vec<Tensor>> {
    let _op = OpScope::view(UnbindInt::NAME, &[a.self_])?;
    unbind_views(a.self_, a.dim)
}

#[aten("aten::narrow", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn narrow_op(a: Narrow<'_>) -> Result<Tensor> {
    view(Narrow::NAME, a.self_, |l| {
        narrow_layout(l, a.dim, a.start, a.length)
    })
}

#[aten("aten::diagonal", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn diagonal_op(a: Diagonal<'_>) -> Result<Tensor> {
    view(Diagonal::NAME, a.self_, |l| {
        diagonal_layout(l, a.offset, a.dim1, a.dim2)
    })
}

#[aten("aten::unfold", dtypes = DType::ALL_TPU, shard = REP, kind = View)]
fn unfold_op(a: Unfold<'_>) -> Result<Tensor> {
    view(Unfold::NAME, a.self_, |l| {
        unfold_layout(l, a.dimension, a.size, a.step)
    })
}
