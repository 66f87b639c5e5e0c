//! View operators (no kernel: they change only the layout) and `contiguous`/`reshape`, which
//! copy when a view is impossible.

use super::aten;
use super::creation;
use super::helpers::OpScope;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::{Layout, infer_size};
use crate::ops::sharding::{Lin, Sharding, ViewKind};
use crate::tensor::Tensor;

fn view_with(name: &str, x: &Tensor, f: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Tensor> {
    let _op = OpScope::view(name, &[x])?;
    Ok(x.with_layout(f(x.layout())?))
}

/// `x.view(shape)`.
pub fn view(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    view_with(View::NAME, x, |l| l.view(shape))
}

/// `x.reshape(shape)`: a view when the strides allow, else a copy. Charged as a view, as
/// PyTorch's composite `reshape` is; a copy is a `clone` charged as its own operator.
pub fn reshape(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    let _op = OpScope::view(Reshape::NAME, &[x])?;
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
    view_with(Permute::NAME, x, |l| l.permute(dims))
}

/// `x.transpose(a, b)`.
pub fn transpose(x: &Tensor, a: i64, b: i64) -> Result<Tensor> {
    view_with(TransposeInt::NAME, x, |l| l.transpose(a, b))
}

/// `x.t()` (at most 2 dims).
pub fn t(x: &Tensor) -> Result<Tensor> {
    if x.dim() > 2 {
        return Err(TpuError::BadArgs(format!(
            "t() expects a tensor with <= 2 dimensions, but self is {}D",
            x.dim()
        )));
    }
    view_with(T::NAME, x, |l| {
        if l.ndim() == 2 {
            l.transpose(0, 1)
        } else {
            Ok(l.clone())
        }
    })
}

/// `x.expand(shape)`.
pub fn expand(x: &Tensor, shape: &[i64]) -> Result<Tensor> {
    view_with(Expand::NAME, x, |l| l.expand(shape))
}

/// `x[..., start:end:step, ...]` along `dim`.
#[aten(
    "aten::slice.Tensor",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Slice),
    kind = View,
    call = SliceTensor(self_, dim, start, end, step)
)]
pub fn slice(
    x: &Tensor,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Result<Tensor> {
    view_with(SliceTensor::NAME, x, |l| l.slice(dim, start, end, step))
}

/// `x.select(dim, index)`.
#[aten(
    "aten::select.int",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Select),
    kind = View,
    call = SelectInt(self_, dim, index)
)]
pub fn select(x: &Tensor, dim: i64, index: i64) -> Result<Tensor> {
    view_with(SelectInt::NAME, x, |l| l.select(dim, index))
}

/// `x.unsqueeze(dim)`.
pub fn unsqueeze(x: &Tensor, dim: i64) -> Result<Tensor> {
    view_with(Unsqueeze::NAME, x, |l| l.unsqueeze(dim))
}

/// `x.squeeze(dim)`.
#[aten(
    "aten::squeeze.dim",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::SqueezeDim),
    kind = View,
    call = SqueezeDim(self_, dim)
)]
pub fn squeeze(x: &Tensor, dim: i64) -> Result<Tensor> {
    view_with(SqueezeDim::NAME, x, |l| l.squeeze(dim))
}

/// `x.as_strided(size, stride, offset)`.
#[aten(
    "aten::as_strided",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate("strides and offsets address the global storage, which no rank has"),
    kind = View,
    call = AsStrided(self_, &size, &stride, storage_offset)
)]
pub fn as_strided(x: &Tensor, size: &[i64], stride: &[i64], offset: Option<i64>) -> Result<Tensor> {
    view_with(AsStrided::NAME, x, |l| {
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

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::view",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Reshape),
    kind = View
)]
fn view_op(a: View<'_>) -> Result<Tensor> {
    view(a.self_, &a.size)
}

#[aten(
    "aten::_unsafe_view",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Reshape),
    kind = View
)]
fn unsafe_view_op(a: UnsafeView<'_>) -> Result<Tensor> {
    reshape(a.self_, &a.size)
}

#[aten(
    "aten::reshape",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Reshape),
    kind = Decomposition
)]
fn reshape_op(a: Reshape<'_>) -> Result<Tensor> {
    reshape(a.self_, &a.shape)
}

#[aten(
    "aten::contiguous",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::All),
    kind = Decomposition
)]
fn contiguous_op(a: Contiguous<'_>) -> Result<Tensor> {
    contiguous(a.self_)
}

#[aten(
    "aten::permute",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Permute),
    kind = View
)]
fn permute_op(a: Permute<'_>) -> Result<Tensor> {
    permute(a.self_, &a.dims)
}

#[aten(
    "aten::transpose.int",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Transpose),
    kind = View
)]
fn transpose_int_op(a: TransposeInt<'_>) -> Result<Tensor> {
    transpose(a.self_, a.dim0, a.dim1)
}

#[aten(
    "aten::t",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::T),
    kind = View
)]
fn t_op(a: T<'_>) -> Result<Tensor> {
    t(a.self_)
}

#[aten(
    "aten::expand",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Expand),
    kind = View
)]
fn expand_op(a: Expand<'_>) -> Result<Tensor> {
    expand(a.self_, &a.size)
}

#[aten(
    "aten::unsqueeze",
    dtypes = DType::ALL_TPU,
    shard = Sharding::View(ViewKind::Unsqueeze),
    kind = View
)]
fn unsqueeze_op(a: Unsqueeze<'_>) -> Result<Tensor> {
    unsqueeze(a.self_, a.dim)
}
