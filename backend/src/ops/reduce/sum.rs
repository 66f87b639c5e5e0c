//! `sum`, `mean` and `prod`: accumulations with PyTorch's result dtypes.

use super::split::Split;
use super::{columns, reduce};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, RedKind, UnOp};
use crate::layout::wrap_dim;
use crate::ops::Value;
use crate::ops::checks::{Pending, checks_on};
use crate::ops::helpers::{OpScope, dims_of};
use crate::ops::wide;
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
    let check = if out == DType::I64 {
        int_sum_check(op, x, dims, keepdim)?
    } else {
        Pending::none()
    };
    let r = match columns::leading(op, x, dims, keepdim, out, false)? {
        Some(t) => t,
        None => reduce(
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
        .remove(0),
    };
    check.guards(op.rt(), &[&r]);
    Ok(r)
}

/// An int64 sum accumulates in the device's 32-bit lanes, which wrap: exact exactly when the
/// true sum fits int32 (wrap-around arithmetic is exact modulo 2^32). Checked on the device
/// (see `ops::checks`): the sum in f32, `e`, and of the magnitudes, `s`, bound the true sum by
/// `|e| + n u s` (`n` elements, `u` = 2^-24, the rounding of each element and each addition, in
/// any order); a sum not provably inside int32 is refused, never wrapped.
fn int_sum_check(op: &OpScope, x: &Tensor, dims: &[usize], keepdim: bool) -> Result<Pending> {
    let f = DType::F32;
    let n: usize = dims
        .iter()
        .map(|d| x.shape().get(*d).copied().unwrap_or(1))
        .product::<usize>()
        .max(1);
    if n > super::split::SPLIT_ABOVE {
        // Too long for one row: the registered f32 sums, which reduce in chunks (the bound
        // holds for any order of the additions).
        let rt = op.rt();
        let xf = x.to_dtype(f)?;
        let ax = crate::ops::compose::op(rt, "aten::abs", vec![Value::Tensor(xf.clone())])?;
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let sum = |t: Tensor| {
            crate::ops::compose::op(
                rt,
                "aten::sum.dim_IntList",
                vec![
                    Value::Tensor(t),
                    Value::Ints(dims.clone()),
                    Value::Bool(keepdim),
                    Value::Dtype(f),
                ],
            )
        };
        let (e, a) = (sum(xf)?, sum(ax)?);
        return crate::ops::wide::sums_fit(op, &e, &a, n);
    }
    let zero = Scalar::Float(0.0);
    let parts = reduce(
        op,
        x,
        dims,
        keepdim,
        &[(f, zero), (f, zero)],
        None,
        |p, v, _| {
            let v = p.cast(v, f);
            let a = p.un(UnOp::Abs, v, f);
            vec![p.reduce(RedKind::Sum, v, f), p.reduce(RedKind::Sum, a, f)]
        },
    )?;
    crate::ops::wide::sums_fit(op, &parts[0], &parts[1], n)
}

/// The reduction `f` as operator `name`: over `dims` (PyTorch's rules: empty is every dim),
/// or with `None` over every dim without `keepdim` (the overloads without a dim).
fn over(
    name: &str,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
    f: impl FnOnce(&OpScope, &Tensor, &[usize], bool, Option<DType>) -> Result<Tensor>,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let (dims, keepdim) = match dims {
        Some(d) => (dims_of(d, x.dim(), true)?, keepdim),
        None => ((0..x.dim()).collect(), false),
    };
    f(&op, x, &dims, keepdim, dtype)
}

/// `torch.sum(x, dims, keepdim, dtype=dtype)` (`aten::sum.dim_IntList`); an empty `dims` sums
/// everything.
pub fn sum(x: &Tensor, dims: &[i64], keepdim: bool, dtype: Option<DType>) -> Result<Tensor> {
    over(
        "aten::sum.dim_IntList",
        x,
        Some(dims),
        keepdim,
        dtype,
        sum_impl,
    )
}

/// `torch.sum(x, dtype=dtype)`: every element (`aten::sum`).
pub fn sum_all(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    over("aten::sum", x, None, false, dtype, sum_impl)
}

/// The dtype `mean` gives; PyTorch's errors for integer inputs and integer `dtype`s.
fn mean_dtype(x: &Tensor, dtype: Option<DType>) -> Result<DType> {
    match dtype {
        Some(d) if !d.is_float() => Err(TpuError::DtypeMismatch(format!(
            "mean(): could not infer output dtype. Optional dtype must be either a floating point or complex dtype. Got: {}",
            d.scalar_type_name()
        ))),
        Some(d) => Ok(d),
        None if !x.dtype().is_float() => Err(TpuError::DtypeMismatch(format!(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: {}",
            x.dtype().scalar_type_name()
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
    over("aten::mean.dim", x, Some(dims), keepdim, dtype, mean_impl)
}

/// `torch.mean(x, dtype=dtype)`: every element (`aten::mean`).
pub fn mean_all(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    over("aten::mean", x, None, false, dtype, mean_impl)
}

fn prod_impl(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let out = accumulate_dtype(x, dtype);
    let n: usize = dims
        .iter()
        .map(|d| x.shape().get(*d).copied().unwrap_or(1))
        .product();
    let wide = out == DType::I64 && checks_on(op);
    if wide {
        wide::checkable_product(n)?;
    }
    let r = reduce(
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
    .remove(0);
    if wide && r.numel() > 0 {
        // The product again in f32 tells whether the lanes' one wrapped (`ops::wide`).
        let f = DType::F32;
        let shadow = reduce(
            op,
            x,
            dims,
            keepdim,
            &[(f, Scalar::Float(1.0))],
            None,
            |p, v, _| {
                let v = p.cast(v, f);
                vec![p.reduce(RedKind::Prod, v, f)]
            },
        )?
        .remove(0);
        wide::products_fit(op, &r, &shadow)?.guards(op.rt(), &[&r]);
    }
    Ok(r)
}

/// `torch.prod(x, dtype=dtype)`: the product of every element (`aten::prod`).
pub fn prod(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    over("aten::prod", x, None, false, dtype, prod_impl)
}

/// `torch.prod(x, dim, keepdim, dtype=dtype)` (`aten::prod.dim_int`).
pub fn prod_dim(x: &Tensor, dim: i64, keepdim: bool, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::prod.dim_int", &[x])?;
    let d = wrap_dim(dim, x.dim())?;
    prod_impl(&op, x, &[d], keepdim, dtype)
}
