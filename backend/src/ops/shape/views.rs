//! View operators: `squeeze` (all, `.dims`), the in-place view forms (`squeeze_`,
//! `unsqueeze_`, `transpose_`, `t_`), `split_with_sizes`, `unsafe_split`, `unbind`, `narrow`,
//! `diagonal`, `unfold`, `alias`.
//!
//! An in-place view form returns `self` with its new shape over the same storage: a caller that
//! holds `self` (a framework bridge) takes the returned layout as its tensor's new metadata.

use super::{t1, ts};
use crate::error::{Result, TpuError};
use crate::layout::{Layout, wrap_dim};
use crate::ops::helpers::{OpScope, dims_of};
use crate::ops::registry::{OpDef, OpImpl};
use crate::ops::sharding::{Sharding, ViewKind};
use crate::tensor::Tensor;

fn view(name: &str, x: &Tensor, f: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Tensor> {
    let _op = OpScope::view(name, &[x])?;
    Ok(x.with_layout(f(x.layout())?))
}

/// `squeeze` of the size-1 dims among `dims` (all dims when `None`).
fn squeeze_layout(l: &Layout, dims: Option<&[i64]>) -> Result<Layout> {
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

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let all = crate::ops::data::ALL;
    let v = OpImpl::View;
    let rep = Sharding::Replicate("a view without a sharding rule of its own");
    vec![
        OpDef::new("aten::squeeze", v, all, |_, a| {
            t1(view("aten::squeeze", a.tensor(0)?, |l| {
                squeeze_layout(l, None)
            }))
        })
        .shard(rep),
        OpDef::new("aten::squeeze.dims", v, all, |_, a| {
            let ds = a.ints(1)?;
            t1(view("aten::squeeze.dims", a.tensor(0)?, |l| {
                squeeze_layout(l, Some(&ds))
            }))
        })
        .shard(rep),
        OpDef::new("aten::squeeze_", v, all, |_, a| {
            t1(view("aten::squeeze_", a.tensor(0)?, |l| {
                squeeze_layout(l, None)
            }))
        })
        .shard(rep),
        OpDef::new("aten::squeeze_.dim", v, all, |_, a| {
            let d = a.int(1)?;
            t1(view("aten::squeeze_.dim", a.tensor(0)?, |l| l.squeeze(d)))
        })
        .shard(Sharding::View(ViewKind::SqueezeDim)),
        OpDef::new("aten::squeeze_.dims", v, all, |_, a| {
            let ds = a.ints(1)?;
            t1(view("aten::squeeze_.dims", a.tensor(0)?, |l| {
                squeeze_layout(l, Some(&ds))
            }))
        })
        .shard(rep),
        OpDef::new("aten::unsqueeze_", v, all, |_, a| {
            let d = a.int(1)?;
            t1(view("aten::unsqueeze_", a.tensor(0)?, |l| l.unsqueeze(d)))
        })
        .shard(Sharding::View(ViewKind::Unsqueeze)),
        OpDef::new("aten::transpose_", v, all, |_, a| {
            let (d0, d1) = (a.int(1)?, a.int(2)?);
            t1(view("aten::transpose_", a.tensor(0)?, |l| {
                l.transpose(d0, d1)
            }))
        })
        .shard(Sharding::View(ViewKind::Transpose)),
        OpDef::new("aten::t_", v, all, |_, a| {
            let x = a.tensor(0)?;
            if x.dim() > 2 {
                return Err(TpuError::BadArgs(format!(
                    "t_() expects a tensor with <= 2 dimensions, but self is {}D",
                    x.dim()
                )));
            }
            t1(view("aten::t_", x, |l| {
                if l.ndim() == 2 {
                    l.transpose(0, 1)
                } else {
                    Ok(l.clone())
                }
            }))
        })
        .shard(Sharding::View(ViewKind::T)),
        OpDef::new("aten::split_with_sizes", v, all, |_, a| {
            let x = a.tensor(0)?;
            let _op = OpScope::view("aten::split_with_sizes", &[x])?;
            ts(split_sizes(x, &a.ints(1)?, a.int(2)?))
        })
        .shard(rep),
        OpDef::new("aten::unsafe_split.Tensor", v, all, |_, a| {
            ts(crate::ops::data::split(a.tensor(0)?, a.int(1)?, a.int(2)?))
        })
        .shard(rep),
        OpDef::new("aten::unsafe_split_with_sizes", v, all, |_, a| {
            let x = a.tensor(0)?;
            let _op = OpScope::view("aten::unsafe_split_with_sizes", &[x])?;
            ts(split_sizes(x, &a.ints(1)?, a.int(2)?))
        })
        .shard(rep),
        OpDef::new("aten::unbind.int", v, all, |_, a| {
            let x = a.tensor(0)?;
            let _op = OpScope::view("aten::unbind.int", &[x])?;
            ts(unbind_views(x, a.int(1)?))
        })
        .shard(rep),
        OpDef::new("aten::narrow", v, all, |_, a| {
            let (d, s, n) = (a.int(1)?, a.int(2)?, a.int(3)?);
            t1(view("aten::narrow", a.tensor(0)?, |l| {
                narrow_layout(l, d, s, n)
            }))
        })
        .shard(rep),
        OpDef::new("aten::diagonal", v, all, |_, a| {
            let (o, d1, d2) = (a.int(1)?, a.int(2)?, a.int(3)?);
            t1(view("aten::diagonal", a.tensor(0)?, |l| {
                diagonal_layout(l, o, d1, d2)
            }))
        })
        .shard(rep),
        OpDef::new("aten::unfold", v, all, |_, a| {
            let (d, s, st) = (a.int(1)?, a.int(2)?, a.int(3)?);
            t1(view("aten::unfold", a.tensor(0)?, |l| {
                unfold_layout(l, d, s, st)
            }))
        })
        .shard(rep),
    ]
}
