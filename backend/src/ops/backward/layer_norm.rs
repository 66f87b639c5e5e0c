//! `native_layer_norm_backward`: PyTorch's CPU formula, one rows kernel for the input's
//! gradient and one column-sum kernel (a rows kernel over the leading dims) for the weight's and
//! bias's.

use super::{F, add, as_shape, mask3, mul, norm_terms, opt3, zeros};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::{PRef, ProgBuilder, RedKind, UnOp};
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::ops::sharding::{Sharding, Special};
use crate::tensor::Tensor;

/// The normalized shape of a layer norm's backward, after PyTorch's checks of the arguments
/// (shapes of the input, weight, bias and gradient; floating dtypes).
fn checked_shape(
    grad_out: &Tensor,
    input: &Tensor,
    normalized_shape: &[i64],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    ins: &[&Tensor],
) -> Result<Vec<usize>> {
    let ns: Vec<usize> = normalized_shape
        .iter()
        .map(|d| usize::try_from(*d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| TpuError::BadArgs(format!("invalid normalized_shape {normalized_shape:?}")))?;
    if ns.is_empty() {
        return Err(TpuError::BadArgs(format!(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = {normalized_shape:?}"
        )));
    }
    let nd = input.dim();
    if nd < ns.len() || input.shape()[nd - ns.len()..] != ns[..] {
        return Err(TpuError::ShapeMismatch(format!(
            "Given normalized_shape={normalized_shape:?}, expected input with shape [*, {}], but got input of size{:?}",
            ns.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            input.shape()
        )));
    }
    for (t, what) in [(weight, "weight"), (bias, "bias")] {
        if let Some(t) = t
            && t.shape() != ns
        {
            return Err(TpuError::ShapeMismatch(format!(
                "Expected {what} to be of same shape as normalized_shape, but got {what} of shape {:?} and normalized_shape = {normalized_shape:?}",
                t.shape()
            )));
        }
    }
    if grad_out.shape() != input.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "native_layer_norm_backward: grad_out of shape {:?} does not match input of shape {:?}",
            grad_out.shape(),
            input.shape()
        )));
    }
    for t in ins {
        if !t.dtype().is_float() {
            return Err(TpuError::Unsupported(format!(
                "\"native_layer_norm_backward\" not implemented for '{}'",
                t.dtype().scalar_type_name()
            )));
        }
    }
    Ok(ns)
}

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
/// output_mask)`: `(grad_input, grad_weight, grad_bias)`, each computed when its
/// `output_mask` entry is set (grad_weight / grad_bias also need the weight / bias).
///
/// With `g = dy * weight`, per row of `N` elements: `ds = sum(g * x)`, `db = sum(g)`, `b =
/// (db * mean - ds) * rstd^3 / N`, `c = -b * mean - db * rstd / N`, `dx = rstd * g + b * x +
/// c`; `grad_weight = sum over rows of dy * (x - mean) * rstd`, `grad_bias = sum over rows of
/// dy`.
#[allow(clippy::too_many_arguments)]
pub fn native_layer_norm_backward(
    grad_out: &Tensor,
    input: &Tensor,
    normalized_shape: &[i64],
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    output_mask: [bool; 3],
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let mut ins = vec![grad_out, input, mean, rstd];
    ins.extend(weight);
    ins.extend(bias);
    let op = OpScope::new(NativeLayerNormBackward::NAME, &ins)?;
    let ns = checked_shape(grad_out, input, normalized_shape, weight, bias, &ins)?;
    let nd = input.dim();
    let axis = nd - ns.len();
    let outer = &input.shape()[..axis];
    let m: usize = outer.iter().product();
    let n: usize = ns.iter().product();
    let mean_rows = as_shape(mean, outer, "mean")?;
    let rstd_rows = as_shape(rstd, outer, "rstd")?;

    let dx = if output_mask[0] {
        let mut inputs = vec![grad_out, input, &mean_rows, &rstd_rows];
        inputs.extend(weight);
        let has_w = weight.is_some();
        let dims: Vec<usize> = (axis..nd).collect();
        let scale = (1.0f32 / n.max(1) as f32) as f64;
        Some(
            rows(
                &op,
                input.shape(),
                &dims,
                false,
                &inputs,
                &[false, false, true, true, false],
                &[(input.dtype(), false)],
                |p, r| {
                    let (dy, x) = (p.cast(r[0], F), p.cast(r[1], F));
                    let (mu, a) = (p.cast(r[2], F), p.cast(r[3], F));
                    let g = if has_w {
                        let w = p.cast(r[4], F);
                        mul(p, dy, w)
                    } else {
                        dy
                    };
                    let (b, c) = norm_terms(p, g, x, mu, a, scale);
                    // dx = a * dy * w + b * x + c
                    let ady = mul(p, a, dy);
                    let ag = if has_w {
                        let w = p.cast(r[4], F);
                        mul(p, ady, w)
                    } else {
                        ady
                    };
                    let bx = mul(p, b, x);
                    let s = add(p, ag, bx);
                    vec![add(p, s, c)]
                },
            )?
            .remove(0),
        )
    } else {
        None
    };

    let want_w = output_mask[1] && weight.is_some();
    let want_b = output_mask[2] && bias.is_some();
    let (mut dw, mut db) = (None, None);
    if want_w || want_b {
        let mut outs = Vec::new();
        if want_w {
            outs.push((weight.map_or(input.dtype(), |w| w.dtype()), true));
        }
        if want_b {
            outs.push((bias.map_or(input.dtype(), |b| b.dtype()), true));
        }
        let mut r = if m == 0 {
            // Sums over no rows.
            outs.iter()
                .map(|(d, _)| zeros(&op, &ns, *d))
                .collect::<Result<Vec<_>>>()?
        } else {
            // mean and rstd broadcast along the normalized dims.
            let mut kshape = outer.to_vec();
            kshape.extend(std::iter::repeat_n(1, ns.len()));
            let mean_k = as_shape(mean, &kshape, "mean")?;
            let rstd_k = as_shape(rstd, &kshape, "rstd")?;
            let inputs = [grad_out, input, &mean_k, &rstd_k];
            let body = |p: &mut ProgBuilder, r: &[PRef], reduce: bool| {
                let (dy, x) = (p.cast(r[0], F), p.cast(r[1], F));
                let (mu, a) = (p.cast(r[2], F), p.cast(r[3], F));
                let mut v = Vec::new();
                if want_w {
                    // dy * (a * x + b) with b = -a * mean.
                    let na = p.un(UnOp::Neg, a, F);
                    let b = mul(p, na, mu);
                    let ax = mul(p, a, x);
                    let xh = add(p, ax, b);
                    let t = mul(p, dy, xh);
                    v.push(if reduce {
                        p.reduce(RedKind::Sum, t, F)
                    } else {
                        t
                    });
                }
                if want_b {
                    v.push(if reduce {
                        p.reduce(RedKind::Sum, dy, F)
                    } else {
                        dy
                    });
                }
                v
            };
            if axis == 0 {
                // One row: the sums are the values themselves.
                let dts: Vec<DType> = outs.iter().map(|o| o.0).collect();
                map_shape(&op, input.shape(), &inputs, &dts, |p, r| body(p, r, false))?
            } else {
                let dims: Vec<usize> = (0..axis).collect();
                rows(
                    &op,
                    input.shape(),
                    &dims,
                    false,
                    &inputs,
                    &[false; 4],
                    &outs,
                    |p, r| body(p, r, true),
                )?
            }
        };
        if want_b {
            db = r.pop();
        }
        if want_w {
            dw = r.pop();
        }
    }
    Ok((dx, dw, db))
}
#[aten(
    "aten::native_layer_norm_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Special(Special::LayerNormBackward)
)]
fn native_layer_norm_backward_op(a: NativeLayerNormBackward<'_>) -> Result<Vec<Value>> {
    let mask = mask3(NativeLayerNormBackward::NAME, 7, &a.output_mask)?;
    Ok(opt3(native_layer_norm_backward(
        a.grad_out,
        a.input,
        &a.normalized_shape,
        a.mean,
        a.rstd,
        a.weight,
        a.bias,
        mask,
    )?))
}
