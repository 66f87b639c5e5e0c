//! `sum`, `mean` and `prod`: accumulations with PyTorch's result dtypes.

use super::split::Split;
use super::{columns, reduce};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, RedKind};
use crate::layout::wrap_dim;
use crate::ops::helpers::{OpScope, dims_of};
use crate::ops::reduce::scalar_type_name;
use crate::tensor::Tensor;

/// The dtype `sum` and `prod` give: `dtype` if given, else int64 for integer and bool inputs.
fn accumulate_dtype(x: &Tensor, dtype: Option<DType>) -> DType {
    dtype.unwrap_or(if x.dtype().is_float() {
        x.dtype()
    } else {
        DType::I64
    })
}

/// Chunks of a sum or product accumulate in the lane type (f32 partials for every float
/// dtype, int64 for integers) after the input's conversion to `out`.
fn accumulation(kind: RedKind, out: DType, mean: bool) -> Split {
    Split::Assoc {
        kind,
        pre: out,
        acc: if out.is_float() {
            DType::F32
        } else {
            DType::I64
        },
        mean,
    }
}

fn sum_impl(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let out = accumulate_dtype(x, dtype);
    if let Some(t) = columns::leading(op, x, dims, keepdim, out, false)? {
        return Ok(t);
    }
    Ok(reduce(
        op,
        x,
        dims,
        keepdim,
        &[(out, Scalar::Int(0))],
        Some(accumulation(RedKind::Sum, out, false)),
        |p, v, _| {
            // The input is converted to the result dtype first, as PyTorch does.
            let v = p.cast(v, out);
            vec![p.reduce(RedKind::Sum, v, out)]
        },
    )?
    .remove(0))
}

/// `torch.sum(x, dims, keepdim, dtype=dtype)` (`aten::sum.dim_IntList`); an empty `dims` sums
/// everything.
pub fn sum(x: &Tensor, dims: &[i64], keepdim: bool, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::sum.dim_IntList", &[x])?;
    let dims = dims_of(dims, x.dim(), true)?;
    sum_impl(&op, x, &dims, keepdim, dtype)
}

/// `torch.sum(x, dtype=dtype)`: every element (`aten::sum`).
pub fn sum_all(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::sum", &[x])?;
    let dims: Vec<usize> = (0..x.dim()).collect();
    sum_impl(&op, x, &dims, false, dtype)
}

/// The dtype `mean` gives; PyTorch's errors for integer inputs and integer `dtype`s.
fn mean_dtype(x: &Tensor, dtype: Option<DType>) -> Result<DType> {
    match dtype {
        Some(d) if !d.is_float() => Err(TpuError::DtypeMismatch(format!(
            "mean(): could not infer output dtype. Optional dtype must be either a floating point or complex dtype. Got: {}",
            scalar_type_name(d)
        ))),
        Some(d) => Ok(d),
        None if !x.dtype().is_float() => Err(TpuError::DtypeMismatch(format!(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: {}",
            scalar_type_name(x.dtype())
        ))),
        None => Ok(x.dtype()),
    }
}

fn mean_impl(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let out = mean_dtype(x, dtype)?;
    if let Some(t) = columns::leading(op, x, dims, keepdim, out, true)? {
        return Ok(t);
    }
    Ok(reduce(
        op,
        x,
        dims,
        keepdim,
        &[(out, Scalar::Float(f64::NAN))],
        Some(accumulation(RedKind::Sum, out, true)),
        |p, v, n| {
            let v = p.cast(v, out);
            let s = p.reduce(RedKind::Sum, v, DType::F32);
            let k = p.constant(Scalar::Float(n as f64), DType::F32);
            vec![p.bin(BinOp::Div, s, k, DType::F32)]
        },
    )?
    .remove(0))
}

/// `torch.mean(x, dims, keepdim, dtype=dtype)` (`aten::mean.dim`); floating dtypes only.
pub fn mean(x: &Tensor, dims: &[i64], keepdim: bool, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::mean.dim", &[x])?;
    let dims = dims_of(dims, x.dim(), true)?;
    mean_impl(&op, x, &dims, keepdim, dtype)
}

/// `torch.mean(x, dtype=dtype)`: every element (`aten::mean`).
pub fn mean_all(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::mean", &[x])?;
    let dims: Vec<usize> = (0..x.dim()).collect();
    mean_impl(&op, x, &dims, false, dtype)
}

fn prod_impl(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let out = accumulate_dtype(x, dtype);
    Ok(reduce(
        op,
        x,
        dims,
        keepdim,
        &[(out, Scalar::Int(1))],
        Some(accumulation(RedKind::Prod, out, false)),
        |p, v, _| {
            let v = p.cast(v, out);
            vec![p.reduce(RedKind::Prod, v, out)]
        },
    )?
    .remove(0))
}

/// `torch.prod(x, dtype=dtype)`: the product of every element (`aten::prod`).
pub fn prod(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::prod", &[x])?;
    let dims: Vec<usize> = (0..x.dim()).collect();
    prod_impl(&op, x, &dims, false, dtype)
}

/// `torch.prod(x, dim, keepdim, dtype=dtype)` (`aten::prod.dim_int`).
pub fn prod_dim(x: &Tensor, dim: i64, keepdim: bool, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::prod.dim_int", &[x])?;
    let d = wrap_dim(dim, x.dim())?;
    prod_impl(&op, x, &[d], keepdim, dtype)
}
