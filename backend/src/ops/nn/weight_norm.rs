//! Weight normalisation (`torch.nn.utils.weight_norm`, `parametrizations.weight_norm`):
//! `_weight_norm_interface` and its backward, composed of registered operators.
//!
//! `w = g · v / ‖v‖`, the 2-norm taken over every dim of `v` but `dim` (kept as size 1, so it
//! broadcasts); `dim = -1` takes it over every dim. The backward is PyTorch's formula
//! (`WeightNorm.cpp`): with `s = Σ grad_w · v` over the same dims, `grad_g = s / ‖v‖` and
//! `grad_v = (g / ‖v‖) · (grad_w - v · s / ‖v‖²)`.

use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ops::aten;
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// The dims the norm is taken over.
fn norm_dims(v: &Tensor, dim: i64) -> Result<Vec<i64>> {
    let n = v.dim() as i64;
    if dim == -1 {
        return Ok((0..n).collect());
    }
    if dim < 0 || dim >= n {
        return Err(TpuError::BadArgs(format!(
            "_weight_norm_interface: dim {dim} is out of range for a tensor of {n} dims"
        )));
    }
    Ok((0..n).filter(|d| *d != dim).collect())
}

fn check_float(name: &str, ts: &[&Tensor]) -> Result<()> {
    match ts.iter().find(|t| !t.dtype().is_float()) {
        Some(t) => Err(TpuError::Unsupported(format!(
            "{name}: expected float tensors, got {:?}",
            t.dtype()
        ))),
        None => Ok(()),
    }
}

/// `_weight_norm_interface(v, g, dim)`: `(w, norms)`.
#[aten(
    "aten::_weight_norm_interface",
    dtypes = DType::FLOATING,
    shard = NORM,
    kind = Decomposition,
    call = WeightNormInterface(v, g, dim)
)]
pub fn weight_norm_interface(v: &Tensor, g: &Tensor, dim: i64) -> Result<(Tensor, Tensor)> {
    check_float(WeightNormInterface::NAME, &[v, g])?;
    let dims = norm_dims(v, dim)?;
    let norms = v.mul(v)?.sum(&dims, true)?.sqrt()?;
    let w = v.mul(&g.mul(&norms.reciprocal()?)?)?;
    Ok((w, norms))
}

/// `_weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)`:
/// `(grad_v, grad_g)`.
#[aten(
    "aten::_weight_norm_interface_backward",
    dtypes = DType::FLOATING,
    shard = NORM,
    kind = Decomposition,
    call = _WeightNormInterfaceBackward(grad_w, saved_v, saved_g, saved_norms, dim)
)]
pub fn weight_norm_interface_backward(
    grad_w: &Tensor,
    v: &Tensor,
    g: &Tensor,
    norms: &Tensor,
    dim: i64,
) -> Result<(Tensor, Tensor)> {
    check_float(
        "aten::_weight_norm_interface_backward",
        &[grad_w, v, g, norms],
    )?;
    if grad_w.shape() != v.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "_weight_norm_interface_backward: grad_w of shape {:?} does not match v of shape {:?}",
            grad_w.shape(),
            v.shape()
        )));
    }
    let dims = norm_dims(v, dim)?;
    let inv = norms.reciprocal()?;
    let s = grad_w.mul(v)?.sum(&dims, true)?;
    let grad_g = s.mul(&inv)?;
    let proj = v.mul(&grad_g.mul(&inv)?)?;
    let grad_v = g.mul(&inv)?.mul(&grad_w.sub(&proj)?)?;
    Ok((grad_v, grad_g))
}

/// Replicated: the norm spans every dim but one.
const NORM: Sharding = Sharding::Replicate("the norm spans every dim but one");
