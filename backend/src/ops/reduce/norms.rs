//! `linalg_vector_norm` and the `norm` overloads that PyTorch routes to it, and `logsumexp`.
//!
//! A vector norm is one rows kernel accumulating in f32 (bf16 and f16 inputs too, as PyTorch's
//! CPU kernel does) and rounded once: `ord` 0 counts the non-zero elements, 1 sums `|x|`, 2 is
//! `sqrt(Σ x²)`, ±inf the largest (smallest) `|x|`, any other `p` is `(Σ |x|^p)^(1/p)`.

use super::reduce;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, RedKind, UnOp};
use crate::ops::helpers::{OpScope, dims_of};
use crate::tensor::Tensor;

/// `torch.linalg.vector_norm(x, ord, dim, keepdim, dtype=dtype)`: `dims` `None` or empty
/// reduces everything; `dtype` converts the input first (and is the result's dtype).
pub fn vector_norm(
    name: &str,
    x: &Tensor,
    ord: f64,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    if !x.dtype().is_float() {
        return Err(TpuError::DtypeMismatch(format!(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. Got {}",
            x.dtype().scalar_type_name()
        )));
    }
    let out = match dtype {
        Some(d) if !d.is_float() => {
            return Err(TpuError::DtypeMismatch(format!(
                "linalg.vector_norm: dtype should be floating point or complex. Got {}",
                d.scalar_type_name()
            )));
        }
        Some(d) => d,
        None => x.dtype(),
    };
    let dims = dims_of(dims.unwrap_or(&[]), x.dim(), true)?;
    // A zero-dimensional tensor is one element whatever `dims` says.
    let reduced: usize = if x.dim() == 0 {
        1
    } else {
        dims.iter().map(|d| x.shape()[*d]).product()
    };
    if reduced == 0 && (ord < 0.0 || ord == f64::INFINITY) {
        return Err(TpuError::BadArgs(format!(
            "linalg.vector_norm cannot compute the {} norm on an empty tensor because the operation does not have an identity",
            if ord == f64::INFINITY {
                "inf".to_string()
            } else {
                format!("{ord}")
            }
        )));
    }
    let f = DType::F32;
    Ok(reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(out, Scalar::Float(0.0))],
        None,
        |p, v, _| {
            // The conversion to `dtype` rounds first, as PyTorch converts the input.
            let v = p.cast(v, out);
            let v = p.cast(v, f);
            let a = p.un(UnOp::Abs, v, f);
            let r = if ord == 0.0 {
                let zero = p.constant(Scalar::Float(0.0), f);
                let nz = p.cmp(CmpKind::Ne, v, zero, f);
                let nz = p.cast(nz, f);
                p.reduce(RedKind::Sum, nz, f)
            } else if ord == f64::INFINITY {
                p.reduce(RedKind::Max, a, f)
            } else if ord == f64::NEG_INFINITY {
                p.reduce(RedKind::Min, a, f)
            } else if ord == 1.0 {
                p.reduce(RedKind::Sum, a, f)
            } else if ord == 2.0 {
                let sq = p.bin(BinOp::Mul, a, a, f);
                let s = p.reduce(RedKind::Sum, sq, f);
                p.un(UnOp::Sqrt, s, f)
            } else {
                let e = p.constant(Scalar::Float(ord), f);
                let pw = p.bin(BinOp::Pow, a, e, f);
                let s = p.reduce(RedKind::Sum, pw, f);
                let inv = p.constant(Scalar::Float(1.0 / ord), f);
                p.bin(BinOp::Pow, s, inv, f)
            };
            vec![r]
        },
    )?
    .remove(0))
}

/// `torch.logsumexp(x, dims, keepdim)` as PyTorch computes it: `m = amax(x)` (0 where
/// infinite), then `log(Σ exp(x - m)) + m`; integer inputs become float32; bf16 and f16 round
/// after each of PyTorch's steps (the difference, the exponential, the sum, the logarithm).
/// Over no elements it is `-inf`.
pub fn logsumexp(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    let op = OpScope::new("aten::logsumexp", &[x])?;
    let dims = dims_of(dims, x.dim(), true)?;
    let out = if x.dtype().is_float() {
        x.dtype()
    } else {
        DType::F32
    };
    let f = DType::F32;
    Ok(reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(out, Scalar::Float(f64::NEG_INFINITY))],
        None,
        |p, v, _| {
            let v = p.cast(v, out);
            let m = p.reduce(RedKind::Max, v, out);
            let m = p.cast(m, f);
            let am = p.un(UnOp::Abs, m, f);
            let inf = p.constant(Scalar::Float(f64::INFINITY), f);
            let is_inf = p.cmp(CmpKind::Eq, am, inf, f);
            let zero = p.constant(Scalar::Float(0.0), f);
            let m = p.select(is_inf, zero, m, f);
            let d = p.bin(BinOp::Sub, v, m, out);
            let e = p.un(UnOp::Exp, d, out);
            let s = p.reduce(RedKind::Sum, e, out);
            let l = p.un(UnOp::Log, s, out);
            vec![p.bin(BinOp::Add, l, m, out)]
        },
    )?
    .remove(0))
}
