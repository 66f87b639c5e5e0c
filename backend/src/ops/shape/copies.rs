//! The `*_copy` forms of view operators (functionalization's names for them): the view, then one
//! tile kernel copying it into a new contiguous tensor.

use super::views::{diagonal_layout, narrow_layout, split_sizes, unbind_views, unfold_layout};
use super::{t1, ts};
use crate::error::{Result, TpuError};
use crate::layout::{Layout, infer_size};
use crate::ops::args::Args;
use crate::ops::helpers::{OpScope, map_contiguous};
use crate::ops::registry::{OpDef, OpImpl};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

fn copy(op: &OpScope, v: &Tensor) -> Result<Tensor> {
    Ok(map_contiguous(op, &[v], &[v.dtype()], |_, r| vec![r[0]])?.remove(0))
}

/// A copy of the view `f(x)`.
fn copied(name: &str, x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Layout>) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let l = f(x)?;
    copy(&op, &x.with_layout(l))
}

/// Copies of the views `f(x)`.
fn copied_all(
    name: &str,
    x: &Tensor,
    f: impl FnOnce(&Tensor) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let op = OpScope::new(name, &[x])?;
    f(x)?.iter().map(|v| copy(&op, v)).collect()
}

fn squeeze_dims(l: &Layout, dims: Option<Vec<i64>>) -> Result<Layout> {
    let keep: Vec<usize> = match dims {
        None => (0..l.ndim()).filter(|d| l.shape[*d] != 1).collect(),
        Some(ds) => {
            let ds = if l.ndim() == 0 {
                for &d in &ds {
                    crate::layout::wrap_dim(d, 0)?;
                }
                Vec::new()
            } else {
                crate::ops::helpers::dims_of(&ds, l.ndim(), false)?
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

/// `as_strided` over `x`'s storage, bounds-checked.
fn strided(x: &Tensor, a: &Args) -> Result<Layout> {
    let (size, stride) = (a.ints(1)?, a.ints(2)?);
    let off = a.opt_int(3)?.unwrap_or(x.storage_offset() as i64);
    let nl = Layout::as_strided(&size, &stride, off)?;
    let (_, hi) = nl.storage_span();
    let cap = (x.storage.bytes() / x.dtype().size().max(1) as u64) as usize;
    if nl.numel() > 0 && hi > cap {
        return Err(TpuError::BadArgs(format!(
            "setStorage: sizes {size:?}, strides {stride:?}, storage offset {off} are out of bounds for storage of {cap} elements"
        )));
    }
    Ok(nl)
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let all = crate::ops::data::ALL;
    let k = OpImpl::Kernel;
    let rep = Sharding::Replicate("a copy of a view without a sharding rule");
    vec![
        OpDef::new("aten::as_strided_copy", k, all, |_, a| {
            t1(copied("aten::as_strided_copy", a.tensor(0)?, |x| {
                strided(x, a)
            }))
        })
        .shard(rep),
        OpDef::new("aten::diagonal_copy", k, all, |_, a| {
            let (o, d1, d2) = (a.int(1)?, a.int(2)?, a.int(3)?);
            t1(copied("aten::diagonal_copy", a.tensor(0)?, |x| {
                diagonal_layout(x.layout(), o, d1, d2)
            }))
        })
        .shard(rep),
        OpDef::new("aten::expand_copy", k, all, |_, a| {
            let s = a.ints(1)?;
            t1(copied("aten::expand_copy", a.tensor(0)?, |x| {
                x.layout().expand(&s)
            }))
        })
        .shard(rep),
        OpDef::new("aten::narrow_copy", k, all, |_, a| {
            let (d, s, n) = (a.int(1)?, a.int(2)?, a.int(3)?);
            t1(copied("aten::narrow_copy", a.tensor(0)?, |x| {
                narrow_layout(x.layout(), d, s, n)
            }))
        })
        .shard(rep),
        OpDef::new("aten::permute_copy", k, all, |_, a| {
            let p = a.ints(1)?;
            t1(copied("aten::permute_copy", a.tensor(0)?, |x| {
                x.layout().permute(&p)
            }))
        })
        .shard(rep),
        OpDef::new("aten::select_copy.int", k, all, |_, a| {
            let (d, i) = (a.int(1)?, a.int(2)?);
            t1(copied("aten::select_copy.int", a.tensor(0)?, |x| {
                x.layout().select(d, i)
            }))
        })
        .shard(rep),
        OpDef::new("aten::slice_copy.Tensor", k, all, |_, a| {
            let (d, s, e, st) = (a.int(1)?, a.opt_int(2)?, a.opt_int(3)?, a.int(4)?);
            t1(copied("aten::slice_copy.Tensor", a.tensor(0)?, |x| {
                x.layout().slice(d, s, e, st)
            }))
        })
        .shard(rep),
        OpDef::new("aten::split_copy.Tensor", k, all, |_, a| {
            let (s, d) = (a.int(1)?, a.int(2)?);
            ts(copied_all("aten::split_copy.Tensor", a.tensor(0)?, |x| {
                crate::ops::data::split(x, s, d)
            }))
        })
        .shard(rep),
        OpDef::new("aten::split_with_sizes_copy", k, all, |_, a| {
            let (s, d) = (a.ints(1)?, a.int(2)?);
            ts(copied_all(
                "aten::split_with_sizes_copy",
                a.tensor(0)?,
                |x| split_sizes(x, &s, d),
            ))
        })
        .shard(rep),
        OpDef::new("aten::squeeze_copy", k, all, |_, a| {
            t1(copied("aten::squeeze_copy", a.tensor(0)?, |x| {
                squeeze_dims(x.layout(), None)
            }))
        })
        .shard(rep),
        OpDef::new("aten::squeeze_copy.dim", k, all, |_, a| {
            let d = a.int(1)?;
            t1(copied("aten::squeeze_copy.dim", a.tensor(0)?, |x| {
                x.layout().squeeze(d)
            }))
        })
        .shard(rep),
        OpDef::new("aten::squeeze_copy.dims", k, all, |_, a| {
            let d = a.ints(1)?;
            t1(copied("aten::squeeze_copy.dims", a.tensor(0)?, |x| {
                squeeze_dims(x.layout(), Some(d))
            }))
        })
        .shard(rep),
        OpDef::new("aten::t_copy", k, all, |_, a| {
            t1(copied("aten::t_copy", a.tensor(0)?, |x| {
                if x.dim() > 2 {
                    return Err(TpuError::BadArgs(format!(
                        "t() expects a tensor with <= 2 dimensions, but self is {}D",
                        x.dim()
                    )));
                }
                if x.dim() == 2 {
                    x.layout().transpose(0, 1)
                } else {
                    Ok(x.layout().clone())
                }
            }))
        })
        .shard(rep),
        OpDef::new("aten::transpose_copy.int", k, all, |_, a| {
            let (d0, d1) = (a.int(1)?, a.int(2)?);
            t1(copied("aten::transpose_copy.int", a.tensor(0)?, |x| {
                x.layout().transpose(d0, d1)
            }))
        })
        .shard(rep),
        OpDef::new("aten::unbind_copy.int", k, all, |_, a| {
            let d = a.int(1)?;
            ts(copied_all("aten::unbind_copy.int", a.tensor(0)?, |x| {
                unbind_views(x, d)
            }))
        })
        .shard(rep),
        OpDef::new("aten::unfold_copy", k, all, |_, a| {
            let (d, s, st) = (a.int(1)?, a.int(2)?, a.int(3)?);
            t1(copied("aten::unfold_copy", a.tensor(0)?, |x| {
                unfold_layout(x.layout(), d, s, st)
            }))
        })
        .shard(rep),
        OpDef::new("aten::unsqueeze_copy", k, all, |_, a| {
            let d = a.int(1)?;
            t1(copied("aten::unsqueeze_copy", a.tensor(0)?, |x| {
                x.layout().unsqueeze(d)
            }))
        })
        .shard(rep),
        OpDef::new("aten::view_copy", k, all, |_, a| {
            let s = a.ints(1)?;
            t1(copied("aten::view_copy", a.tensor(0)?, |x| {
                x.layout().view(&s)
            }))
        })
        .shard(rep),
        OpDef::new("aten::_reshape_copy", k, all, |_, a| {
            let s = a.ints(1)?;
            let x = a.tensor(0)?;
            let op = OpScope::new("aten::_reshape_copy", &[x])?;
            let shape = infer_size(&s, x.numel())?;
            let c = copy(&op, x)?;
            t1(Ok(c.with_layout(Layout::contiguous(&shape))))
        })
        .shard(rep),
    ]
}
