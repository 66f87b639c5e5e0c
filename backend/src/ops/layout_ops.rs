//! View operators (no kernel: they change only the layout) and `contiguous`/`reshape`, which
//! copy when a view is impossible.

use super::args::Args;
use super::creation;
use super::helpers::OpScope;
use super::registry::{OpDef, OpImpl};
use super::t1;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::{Layout, infer_size};
use crate::ops::sharding::{Lin, Sharding, ViewKind};
use crate::tensor::Tensor;

fn view_op(name: &str, x: &Tensor, f: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Tensor> {
    let _op = OpScope::view(name, &[x])?;
    Ok(x.with_layout(f(x.layout())?))
}

/// `x.view(shape)`.
pub fn view(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    view_op("aten::view", x, |l| l.view(shape))
}

/// `x.reshape(shape)`: a view when the strides allow, else a copy. Charged as a view, as
/// PyTorch's composite `reshape` is; a copy is a `clone` charged as its own operator.
pub fn reshape(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    let _op = OpScope::view("aten::reshape", &[x])?;
    let new = infer_size(shape, x.numel())?;
    match x.layout().view_as(&new) {
        Some(l) => Ok(x.with_layout(l)),
        None => {
            let c = creation::clone(x)?;
            Ok(c.with_layout(Layout::contiguous(&new)))
        }
    }
}

/// `x.contiguous()`: `x` itself when already contiguous.
pub fn contiguous(x: &Tensor) -> Result<Tensor> {
    if x.is_contiguous() {
        return Ok(x.clone());
    }
    creation::clone(x)
}

/// `x.permute(dims)`.
pub fn permute(x: &Tensor, dims: &[i64]) -> Result<Tensor> {
    view_op("aten::permute", x, |l| l.permute(dims))
}

/// `x.transpose(a, b)`.
pub fn transpose(x: &Tensor, a: i64, b: i64) -> Result<Tensor> {
    view_op("aten::transpose.int", x, |l| l.transpose(a, b))
}

/// `x.t()` (at most 2 dims).
pub fn t(x: &Tensor) -> Result<Tensor> {
    if x.dim() > 2 {
        return Err(TpuError::BadArgs(format!(
            "t() expects a tensor with <= 2 dimensions, but self is {}D",
            x.dim()
        )));
    }
    view_op("aten::t", x, |l| {
        if l.ndim() == 2 {
            l.transpose(0, 1)
        } else {
            Ok(l.clone())
        }
    })
}

/// `x.expand(shape)`.
pub fn expand(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    view_op("aten::expand", x, |l| l.expand(shape))
}

/// `x[..., start:end:step, ...]` along `dim`.
pub fn slice(
    x: &Tensor,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Result<Tensor> {
    view_op("aten::slice.Tensor", x, |l| l.slice(dim, start, end, step))
}

/// `x.select(dim, index)`.
pub fn select(x: &Tensor, dim: i64, index: i64) -> Result<Tensor> {
    view_op("aten::select.int", x, |l| l.select(dim, index))
}

/// `x.unsqueeze(dim)`.
pub fn unsqueeze(x: &Tensor, dim: i64) -> Result<Tensor> {
    view_op("aten::unsqueeze", x, |l| l.unsqueeze(dim))
}

/// `x.squeeze(dim)`.
pub fn squeeze(x: &Tensor, dim: i64) -> Result<Tensor> {
    view_op("aten::squeeze.dim", x, |l| l.squeeze(dim))
}

/// `x.as_strided(size, stride, offset)`.
pub fn as_strided(x: &Tensor, size: &[i64], stride: &[i64], offset: Option<i64>) -> Result<Tensor> {
    view_op("aten::as_strided", x, |l| {
        let nl = Layout::as_strided(size, stride, offset.unwrap_or(l.offset as i64))?;
        let (_, hi) = nl.storage_span();
        let cap = (x.storage.bytes() / x.dtype().size().max(1) as u64) as usize;
        if nl.numel() > 0 && hi > cap {
            return Err(TpuError::BadArgs(format!(
                "setStorage: sizes {size:?}, strides {stride:?}, storage offset {}, and itemsize {} requiring a storage size of {} are out of bounds for storage of size {}",
                nl.offset,
                x.dtype().size(),
                hi * x.dtype().size(),
                cap * x.dtype().size()
            )));
        }
        Ok(nl)
    })
}

impl Tensor {
    /// `self.view(shape)`.
    pub fn view_shape(&self, shape: &[i64]) -> Result<Tensor> {
        view(self, shape)
    }

    /// `self.reshape(shape)`.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        reshape(self, shape)
    }

    /// `self.permute(dims)`.
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        permute(self, dims)
    }

    /// `self.transpose(a, b)`.
    pub fn transpose(&self, a: i64, b: i64) -> Result<Tensor> {
        transpose(self, a, b)
    }

    /// `self.t()`.
    pub fn t(&self) -> Result<Tensor> {
        t(self)
    }

    /// `self.unsqueeze(dim)`.
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        unsqueeze(self, dim)
    }

    /// `self.contiguous()`.
    pub fn contiguous(&self) -> Result<Tensor> {
        contiguous(self)
    }

    /// `self.expand(shape)`.
    pub fn expand(&self, shape: &[i64]) -> Result<Tensor> {
        expand(self, shape)
    }

    /// `self.to(dtype)`.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        creation::to_copy(self, Some(dtype))
    }
}

fn opt(a: &Args, i: usize) -> Result<Option<i64>> {
    a.opt_int(i)
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let all = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    let v = OpImpl::View;
    vec![
        OpDef::new("aten::view", v, all, |_, a| {
            t1(view(a.tensor(0)?, &a.ints(1)?))
        })
        .shard(Sharding::View(ViewKind::Reshape)),
        OpDef::new("aten::_unsafe_view", v, all, |_, a| {
            t1(reshape(a.tensor(0)?, &a.ints(1)?))
        })
        .shard(Sharding::View(ViewKind::Reshape)),
        OpDef::new("aten::reshape", OpImpl::Decomposition, all, |_, a| {
            t1(reshape(a.tensor(0)?, &a.ints(1)?))
        })
        .shard(Sharding::View(ViewKind::Reshape)),
        OpDef::new("aten::contiguous", OpImpl::Decomposition, all, |_, a| {
            t1(contiguous(a.tensor(0)?))
        })
        .shard(Sharding::pointwise(Lin::All)),
        OpDef::new("aten::permute", v, all, |_, a| {
            t1(permute(a.tensor(0)?, &a.ints(1)?))
        })
        .shard(Sharding::View(ViewKind::Permute)),
        OpDef::new("aten::transpose.int", v, all, |_, a| {
            t1(transpose(a.tensor(0)?, a.int(1)?, a.int(2)?))
        })
        .shard(Sharding::View(ViewKind::Transpose)),
        OpDef::new("aten::t", v, all, |_, a| t1(t(a.tensor(0)?)))
            .shard(Sharding::View(ViewKind::T)),
        OpDef::new("aten::expand", v, all, |_, a| {
            t1(expand(a.tensor(0)?, &a.ints(1)?))
        })
        .shard(Sharding::View(ViewKind::Expand)),
        OpDef::new("aten::slice.Tensor", v, all, |_, a| {
            t1(slice(
                a.tensor(0)?,
                a.int(1)?,
                opt(a, 2)?,
                opt(a, 3)?,
                a.int(4)?,
            ))
        })
        .shard(Sharding::View(ViewKind::Slice)),
        OpDef::new("aten::select.int", v, all, |_, a| {
            t1(select(a.tensor(0)?, a.int(1)?, a.int(2)?))
        })
        .shard(Sharding::View(ViewKind::Select)),
        OpDef::new("aten::unsqueeze", v, all, |_, a| {
            t1(unsqueeze(a.tensor(0)?, a.int(1)?))
        })
        .shard(Sharding::View(ViewKind::Unsqueeze)),
        OpDef::new("aten::squeeze.dim", v, all, |_, a| {
            t1(squeeze(a.tensor(0)?, a.int(1)?))
        })
        .shard(Sharding::View(ViewKind::SqueezeDim)),
        OpDef::new("aten::as_strided", v, all, |_, a| {
            t1(as_strided(
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                a.opt_int(3)?,
            ))
        })
        .shard(Sharding::Replicate(
            "strides and offsets address the global storage, which no rank has",
        )),
    ]
}
