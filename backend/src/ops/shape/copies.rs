//! The `*_copy` forms of view operators (functionalization's names for them): the view, then one
//! tile kernel copying it into a new contiguous tensor.

use super::views::{
    diagonal_layout, narrow_layout, split_sizes, squeeze_layout, unbind_views, unfold_layout,
};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::{Layout, infer_size};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_contiguous};
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

/// `as_strided` over `x`'s storage, bounds-checked.
fn strided(x: &Tensor, size: &[i64], stride: &[i64], offset: Option<i64>) -> Result<Layout> {
    let off = offset.unwrap_or(x.storage_offset() as i64);
    let nl = Layout::as_strided(size, stride, off)?;
    let (_, hi) = nl.storage_span();
    let cap = (x.storage.bytes() / x.dtype().size().max(1) as u64) as usize;
    if nl.numel() > 0 && hi > cap {
        return Err(TpuError::BadArgs(format!(
            "setStorage: sizes {size:?}, strides {stride:?}, storage offset {off} are out of bounds for storage of {cap} elements"
        )));
    }
    Ok(nl)
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

const REP: Sharding = Sharding::Replicate("a copy of a view without a sharding rule");

#[aten("aten::as_strided_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn as_strided_copy_op(a: AsStridedCopy<'_>) -> Result<Tensor> {
    copied(AsStridedCopy::NAME, a.self_, |x| {
        strided(x, &a.size, &a.stride, a.storage_offset)
    })
}

#[aten("aten::diagonal_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn diagonal_copy_op(a: DiagonalCopy<'_>) -> Result<Tensor> {
    copied(DiagonalCopy::NAME, a.self_, |x| {
        diagonal_layout(x.layout(), a.offset, a.dim1, a.dim2)
    })
}

#[aten("aten::expand_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn expand_copy_op(a: ExpandCopy<'_>) -> Result<Tensor> {
    copied(ExpandCopy::NAME, a.self_, |x| x.layout().expand(&a.size))
}

#[aten("aten::narrow_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn narrow_copy_op(a: NarrowCopy<'_>) -> Result<Tensor> {
    copied(NarrowCopy::NAME, a.self_, |x| {
        narrow_layout(x.layout(), a.dim, a.start, a.length)
    })
}

#[aten("aten::permute_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn permute_copy_op(a: PermuteCopy<'_>) -> Result<Tensor> {
    copied(PermuteCopy::NAME, a.self_, |x| x.layout().permute(&a.dims))
}

#[aten("aten::select_copy.int", dtypes = DType::ALL_TPU, shard = REP)]
fn select_copy_int_op(a: SelectCopyInt<'_>) -> Result<Tensor> {
    copied(SelectCopyInt::NAME, a.self_, |x| {
        x.layout().select(a.dim, a.index)
    })
}

#[aten("aten::slice_copy.Tensor", dtypes = DType::ALL_TPU, shard = REP)]
fn slice_copy_tensor_op(a: SliceCopyTensor<'_>) -> Result<Tensor> {
    copied(SliceCopyTensor::NAME, a.self_, |x| {
        x.layout().slice(a.dim, a.start, a.end, a.step)
    })
}

#[aten("aten::split_copy.Tensor", dtypes = DType::ALL_TPU, shard = REP)]
fn split_copy_tensor_op(a: SplitCopyTensor<'_>) -> Result<Vec<Tensor>> {
    copied_all(SplitCopyTensor::NAME, a.self_, |x| {
        crate::ops::data::split(x, a.split_size, a.dim)
    })
}

#[aten("aten::split_with_sizes_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn split_with_sizes_copy_op(a: SplitWithSizesCopy<'_>) -> Result<Vec<Tensor>> {
    copied_all(SplitWithSizesCopy::NAME, a.self_, |x| {
        split_sizes(x, &a.split_sizes, a.dim)
    })
}

#[aten("aten::squeeze_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn squeeze_copy_op(a: SqueezeCopy<'_>) -> Result<Tensor> {
    copied(SqueezeCopy::NAME, a.self_, |x| {
        squeeze_layout(x.layout(), None)
    })
}

#[aten("aten::squeeze_copy.dim", dtypes = DType::ALL_TPU, shard = REP)]
fn squeeze_copy_dim_op(a: SqueezeCopyDim<'_>) -> Result<Tensor> {
    copied(SqueezeCopyDim::NAME, a.self_, |x| x.layout().squeeze(a.dim))
}

#[aten("aten::squeeze_copy.dims", dtypes = DType::ALL_TPU, shard = REP)]
fn squeeze_copy_dims_op(a: SqueezeCopyDims<'_>) -> Result<Tensor> {
    copied(SqueezeCopyDims::NAME, a.self_, |x| {
        squeeze_layout(x.layout(), Some(&a.dim))
    })
}

#[aten("aten::t_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn t_copy_op(a: TCopy<'_>) -> Result<Tensor> {
    copied(TCopy::NAME, a.self_, |x| {
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
    })
}

#[aten("aten::transpose_copy.int", dtypes = DType::ALL_TPU, shard = REP)]
fn transpose_copy_int_op(a: TransposeCopyInt<'_>) -> Result<Tensor> {
    copied(TransposeCopyInt::NAME, a.self_, |x| {
        x.layout().transpose(a.dim0, a.dim1)
    })
}

#[aten("aten::unbind_copy.int", dtypes = DType::ALL_TPU, shard = REP)]
fn unbind_copy_int_op(a: UnbindCopyInt<'_>) -> Result<Vec<Tensor>> {
    copied_all(UnbindCopyInt::NAME, a.self_, |x| unbind_views(x, a.dim))
}

#[aten("aten::unfold_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn unfold_copy_op(a: UnfoldCopy<'_>) -> Result<Tensor> {
    copied(UnfoldCopy::NAME, a.self_, |x| {
        unfold_layout(x.layout(), a.dimension, a.size, a.step)
    })
}

#[aten("aten::unsqueeze_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn unsqueeze_copy_op(a: UnsqueezeCopy<'_>) -> Result<Tensor> {
    copied(UnsqueezeCopy::NAME, a.self_, |x| {
        x.layout().unsqueeze(a.dim)
    })
}

#[aten("aten::view_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn view_copy_op(a: ViewCopy<'_>) -> Result<Tensor> {
    copied(ViewCopy::NAME, a.self_, |x| x.layout().view(&a.size))
}

#[aten("aten::_reshape_copy", dtypes = DType::ALL_TPU, shard = REP)]
fn reshape_copy_op(a: ReshapeCopy<'_>) -> Result<Tensor> {
    let x = a.self_;
    let op = OpScope::new(ReshapeCopy::NAME, &[x])?;
    let shape = infer_size(&a.size, x.numel())?;
    let c = copy(&op, x)?;
    Ok(c.with_layout(Layout::contiguous(&shape)))
}
