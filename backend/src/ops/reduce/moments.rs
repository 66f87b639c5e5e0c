//! `var` and `std`: two passes over the row in one kernel.

use super::reduce;
use super::split::Split;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, PRef, ProgBuilder, RedKind, UnOp};
use crate::ops::helpers::{OpScope, dims_of};
use crate::tensor::Tensor;

/// Variance (and with `sqrt`, the standard deviation) in one kernel, two passes over the row:
/// the mean, then the sum of squared deviations, divided by `max(0, N - correction)`.
fn var_std(
    name: &str,
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: Option<f64>,
    keepdim: bool,
    sqrt: bool,
) -> Result<Tensor> {
    let (op, dims, c) = var_args(name, x, dims, correction)?;
    let dt = x.dtype();
    let f = DType::F32;
    Ok(reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(dt, Scalar::Float(f64::NAN))],
        Some(Split::Var {
            correction: c,
            sqrt,
        }),
        |p, v, n| {
            let (var, _) = var_and_mean(p, v, n, c);
            vec![if sqrt { p.un(UnOp::Sqrt, var, f) } else { var }]
        },
    )?
    .remove(0))
}

/// The scope, dims and correction of a variance (`var`, `std`, `var_mean`, `std_mean`):
/// floating dtypes only; `dims` None or empty is every dim; `correction` defaults to 1.
pub(super) fn var_args(
    name: &str,
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: Option<f64>,
) -> Result<(OpScope, Vec<usize>, f64)> {
    let op = OpScope::new(name, &[x])?;
    if !x.dtype().is_float() {
        return Err(TpuError::DtypeMismatch(format!(
            "std and var only support floating point and complex dtypes, got {}",
            x.dtype().scalar_type_name()
        )));
    }
    let dims = dims_of(dims.unwrap_or(&[]), x.dim(), true)?;
    let c = correction.unwrap_or(1.0);
    Ok((op, dims, c))
}

/// A row's variance with `correction` (two passes: the mean, then the squared deviations) and
/// its mean, in f32; `n` is the row's length.
pub(super) fn var_and_mean(p: &mut ProgBuilder, v: PRef, n: usize, c: f64) -> (PRef, PRef) {
    let f = DType::F32;
    let v = p.cast(v, f);
    let s = p.reduce(RedKind::Sum, v, f);
    let k = p.constant(Scalar::Float(n as f64), f);
    let mean = p.bin(BinOp::Div, s, k, f);
    let d = p.bin(BinOp::Sub, v, mean, f);
    let d2 = p.bin(BinOp::Mul, d, d, f);
    let ss = p.reduce(RedKind::Sum, d2, f);
    let denom = p.constant(Scalar::Float((n as f64 - c).max(0.0)), f);
    (p.bin(BinOp::Div, ss, denom, f), mean)
}

/// `torch.var(x, dims, correction=correction, keepdim=keepdim)` (`aten::var.correction`):
/// `dims` None or empty reduces everything; `correction` defaults to 1.
pub fn var(
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: Option<f64>,
    keepdim: bool,
) -> Result<Tensor> {
    var_std("aten::var.correction", x, dims, correction, keepdim, false)
}

/// `torch.std(x, dims, correction=correction, keepdim=keepdim)` (`aten::std.correction`).
pub fn std(
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: Option<f64>,
    keepdim: bool,
) -> Result<Tensor> {
    var_std("aten::std.correction", x, dims, correction, keepdim, true)
}
