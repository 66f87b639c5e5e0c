//! `_softmax` and `_log_softmax`: one rows kernel each (max, exponentials, sum, normalise).

use super::F;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, RedKind, UnOp};
use crate::layout::wrap_dim;
use crate::ops::helpers::{OpScope, rows};
use crate::tensor::Tensor;

/// A zero-dimensional tensor seen as one element along a new dim 0 (softmax over a scalar).
fn lift_scalar(x: &Tensor) -> Result<Tensor> {
    if x.dim() == 0 {
        Ok(x.with_layout(x.layout().unsqueeze(0)?))
    } else {
        Ok(x.clone())
    }
}

/// `t` seen with `shape` (same elements; for undoing [`lift_scalar`]).
fn reshaped(op: &OpScope, t: Tensor, shape: &[usize]) -> Result<Tensor> {
    let l = t
        .layout()
        .view_as(shape)
        .ok_or_else(|| op.err("internal: result view"))?;
    Ok(t.with_layout(l))
}

/// Softmax or log-softmax along `dim`: one kernel, `max`, `exp(x - max)`, `sum`, normalise.
fn softmax_impl(
    name: &str,
    x: &Tensor,
    dim: i64,
    half_to_float: bool,
    log: bool,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let d = wrap_dim(dim, x.dim())?;
    let kernel = if log { "log_softmax" } else { "softmax" };
    if !x.dtype().is_float() {
        let which = if x.dim() == 0 || d + 1 == x.dim() {
            "lastdim_kernel_impl"
        } else {
            "kernel_impl"
        };
        return Err(TpuError::Unsupported(format!(
            "\"{kernel}_{which}\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    let out = if half_to_float {
        if x.dtype() == DType::F32 {
            return Err(TpuError::BadArgs(
                "conversion is supported for Half type only".into(),
            ));
        }
        DType::F32
    } else {
        x.dtype()
    };
    // PyTorch's CPU log-softmax along the last dim of a bf16/f16 tensor rounds the row's sum of
    // exponentials and its log to the tensor's dtype; along other dims it keeps them in f32.
    let round_lse = log && out != DType::F32 && x.dim() > 0 && d + 1 == x.dim();
    let xl = lift_scalar(x)?;
    let y = rows(
        &op,
        xl.shape(),
        &[d],
        false,
        &[&xl],
        &[false],
        &[(out, false)],
        |p, r| {
            let v = p.cast(r[0], F);
            let m = p.reduce(RedKind::Max, v, F);
            let z = p.bin(BinOp::Sub, v, m, F);
            let e = p.un(UnOp::Exp, z, F);
            let s = p.reduce(RedKind::Sum, e, F);
            if log {
                let ls = if round_lse {
                    // PyTorch's last-dim kernel keeps the sum and its log in the input's dtype.
                    let s = p.round(s, out);
                    let ls = p.un(UnOp::Log, s, F);
                    p.round(ls, out)
                } else {
                    p.un(UnOp::Log, s, F)
                };
                vec![p.bin(BinOp::Sub, z, ls, F)]
            } else {
                vec![p.bin(BinOp::Div, e, s, F)]
            }
        },
    )?
    .remove(0);
    if x.dim() == 0 {
        reshaped(&op, y, &[])
    } else {
        Ok(y)
    }
}

/// `torch._softmax(x, dim, half_to_float)`: with `half_to_float`, bf16/f16 inputs give f32.
pub fn softmax_(x: &Tensor, dim: i64, half_to_float: bool) -> Result<Tensor> {
    softmax_impl("aten::_softmax", x, dim, half_to_float, false)
}

/// `torch._log_softmax(x, dim, half_to_float)`.
pub fn log_softmax_(x: &Tensor, dim: i64, half_to_float: bool) -> Result<Tensor> {
    softmax_impl("aten::_log_softmax", x, dim, half_to_float, true)
}

/// `torch._safe_softmax(x, dim, dtype)`: softmax (of `x` converted to `dtype`), with zeros for
/// rows whose every element is `-inf` (where softmax gives NaN): attention over fully masked
/// rows. One rows kernel.
pub fn safe_softmax(x: &Tensor, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
    let op = OpScope::new("aten::_safe_softmax", &[x])?;
    let d = wrap_dim(dim, x.dim())?;
    let out = dtype.unwrap_or(x.dtype());
    if !out.is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"softmax_lastdim_kernel_impl\" not implemented for '{}'",
            out.scalar_type_name()
        )));
    }
    let xl = lift_scalar(x)?;
    let y = rows(
        &op,
        xl.shape(),
        &[d],
        false,
        &[&xl],
        &[false],
        &[(out, false)],
        |p, r| {
            // The input is converted to `dtype` first, as `softmax(x, dim, dtype)` does.
            let v = p.cast(r[0], out);
            let v = p.cast(v, F);
            let m = p.reduce(RedKind::Max, v, F);
            let z = p.bin(BinOp::Sub, v, m, F);
            let e = p.un(UnOp::Exp, z, F);
            let s = p.reduce(RedKind::Sum, e, F);
            let y = p.bin(BinOp::Div, e, s, F);
            let ninf = p.constant(crate::dtype::Scalar::Float(f64::NEG_INFINITY), F);
            let masked = p.cmp(crate::ir::CmpKind::Eq, m, ninf, F);
            let zero = p.constant(crate::dtype::Scalar::Float(0.0), F);
            vec![p.select(masked, zero, y, F)]
        },
    )?
    .remove(0);
    if x.dim() == 0 {
        reshaped(&op, y, &[])
    } else {
        Ok(y)
    }
}
