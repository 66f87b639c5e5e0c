//! View operators (no kernel: they change only the layout) and `contiguous`/`reshape`, which
//! copy when a view is impossible.

use super::Value;
use super::args::Args;
use super::creation;
use super::helpers::OpScope;
use super::registry::{OpDef, OpImpl};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::{Layout, infer_size};
use crate::tensor::Tensor;

fn view_op(name: &str, x: &Tensor, f: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Tensor> {
    let _op = OpScope::new(name, &[x])?;
    Ok(x.with_layout(f(x.layout())?))
}

/// `x.view(shape)`.
pub fn view(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    view_op("aten::view", x, |l| l.view(shape))
}

/// `x.reshape(shape)`: a view when the strides allow, else a copy.
pub fn reshape(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    let _op = OpScope::new("aten::reshape", &[x])?;
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

fn t1(r: Result<Tensor>) -> Result<Vec<Value>> {
    r.map(|t| vec![Value::Tensor(t)])
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
        OpDef {
            name: "aten::view",
            schema: "view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(view(a.tensor(0)?, &a.ints(1)?)),
        },
        OpDef {
            name: "aten::_unsafe_view",
            schema: "_unsafe_view(Tensor self, SymInt[] size) -> Tensor",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(reshape(a.tensor(0)?, &a.ints(1)?)),
        },
        OpDef {
            name: "aten::reshape",
            schema: "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
            implementation: OpImpl::Decomposition,
            dtypes: all,
            run: |_, a| t1(reshape(a.tensor(0)?, &a.ints(1)?)),
        },
        OpDef {
            name: "aten::contiguous",
            schema: "contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)",
            implementation: OpImpl::Decomposition,
            dtypes: all,
            run: |_, a| t1(contiguous(a.tensor(0)?)),
        },
        OpDef {
            name: "aten::permute",
            schema: "permute(Tensor(a) self, int[] dims) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(permute(a.tensor(0)?, &a.ints(1)?)),
        },
        OpDef {
            name: "aten::transpose.int",
            schema: "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(transpose(a.tensor(0)?, a.int(1)?, a.int(2)?)),
        },
        OpDef {
            name: "aten::t",
            schema: "t(Tensor(a) self) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(t(a.tensor(0)?)),
        },
        OpDef {
            name: "aten::expand",
            schema: "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(expand(a.tensor(0)?, &a.ints(1)?)),
        },
        OpDef {
            name: "aten::slice.Tensor",
            schema: "slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| {
                t1(slice(
                    a.tensor(0)?,
                    a.int_or(1, 0)?,
                    opt(a, 2)?,
                    opt(a, 3)?,
                    a.int_or(4, 1)?,
                ))
            },
        },
        OpDef {
            name: "aten::select.int",
            schema: "select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(select(a.tensor(0)?, a.int(1)?, a.int(2)?)),
        },
        OpDef {
            name: "aten::unsqueeze",
            schema: "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(unsqueeze(a.tensor(0)?, a.int(1)?)),
        },
        OpDef {
            name: "aten::squeeze.dim",
            schema: "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| t1(squeeze(a.tensor(0)?, a.int(1)?)),
        },
        OpDef {
            name: "aten::as_strided",
            schema: "as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
            implementation: v,
            dtypes: all,
            run: |_, a| {
                t1(as_strided(
                    a.tensor(0)?,
                    &a.ints(1)?,
                    &a.ints(2)?,
                    a.opt_int(3)?,
                ))
            },
        },
    ]
}
