//! Reductions with two results from one kernel: `aminmax` (the minimum and the maximum, NaN
//! propagating) and `var_mean`/`std_mean` (the variance or standard deviation, and the mean).

use super::{check_nonempty, reduce};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{RedKind, UnOp};
use crate::layout::wrap_dim;
use crate::ops::helpers::OpScope;
use crate::tensor::Tensor;

/// `torch.aminmax(x, dim=dim, keepdim=keepdim)`: `(min, max)` over one dim or everything.
pub fn aminmax(x: &Tensor, dim: Option<i64>, keepdim: bool) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new("aten::aminmax", &[x])?;
    let dims: Vec<usize> = match dim {
        Some(d) => {
            check_nonempty("aminmax", x, Some(&[d]))?;
            if x.dim() == 0 {
                wrap_dim(d, 1)?;
                vec![]
            } else {
                vec![wrap_dim(d, x.dim())?]
            }
        }
        None => {
            if x.numel() == 0 {
                return Err(TpuError::BadArgs(
                    "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity."
                        .into(),
                ));
            }
            (0..x.dim()).collect()
        }
    };
    let dt = x.dtype();
    let mut r = reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(dt, Scalar::Int(0)), (dt, Scalar::Int(0))],
        None,
        |p, v, _| vec![p.reduce(RedKind::Min, v, dt), p.reduce(RedKind::Max, v, dt)],
    )?;
    let max = r.remove(1);
    Ok((r.remove(0), max))
}

/// `torch.var_mean` (`sqrt` false) or `torch.std_mean` (`sqrt` true) with `correction`
/// (default 1): two passes over the row in one kernel, as `var` does, and the mean.
pub fn var_mean(
    name: &str,
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: Option<f64>,
    keepdim: bool,
    sqrt: bool,
) -> Result<(Tensor, Tensor)> {
    let (op, dims, c) = super::moments::var_args(name, x, dims, correction)?;
    let dt = x.dtype();
    let f = DType::F32;
    let nan = Scalar::Float(f64::NAN);
    let mut r = reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(dt, nan), (dt, nan)],
        None,
        |p, v, n| {
            let (var, mean) = super::moments::var_and_mean(p, v, n, c);
            let first = if sqrt { p.un(UnOp::Sqrt, var, f) } else { var };
            vec![first, mean]
        },
    )?;
    let mean = r.remove(1);
    Ok((r.remove(0), mean))
}
