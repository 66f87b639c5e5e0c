//! `native_batch_norm_backward` and `native_group_norm_backward`: PyTorch's CPU formulas.
//!
//! Batch norm: one rows kernel whose row is a channel (every dim but dim 1) computes the two
//! per-channel sums and, from them, the input's gradient, the weight's and the bias's. Group
//! norm: one rows kernel per `(n, group)` row for the input's gradient, and one rows kernel over
//! `(n, positions)` per channel for the weight's and bias's.

use super::{F, add, as_shape, k, mask3, mul, opt3, sub};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::{PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, rows};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

fn float_only(name: &str, ts: &[&Tensor]) -> Result<()> {
    for t in ts {
        if !t.dtype().is_float() {
            return Err(TpuError::Unsupported(format!(
                "\"{name}\" not implemented for '{}'",
                t.dtype().scalar_type_name()
            )));
        }
    }
    Ok(())
}

/// `t` seen as a `[c]` vector.
fn channel(t: &Tensor, c: usize, what: &str) -> Result<Tensor> {
    as_shape(t, &[c], what)
}

/// `native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
/// save_invstd, train, eps, output_mask)`: `(grad_input, grad_weight, grad_bias)`.
///
/// Per channel, with `M` elements, `mean`/`invstd` the saved batch statistics in training
/// (the running ones, `invstd = 1/sqrt(running_var + eps)`, in evaluation), `w` the weight (1
/// without one): `sum_dy = Σ dy`, `dot = Σ dy·(x - mean)`; training: `grad_input = (dy - sum_dy/M
/// - (x - mean)·invstd²·dot/M)·invstd·w`; evaluation: `grad_input = dy·invstd·w`;
/// `grad_weight = dot·invstd`, `grad_bias = sum_dy`.
#[allow(clippy::too_many_arguments)]
pub fn native_batch_norm_backward(
    grad_out: &Tensor,
    input: &Tensor,
    weight: Option<&Tensor>,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    save_mean: Option<&Tensor>,
    save_invstd: Option<&Tensor>,
    train: bool,
    eps: f64,
    output_mask: [bool; 3],
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let name = NativeBatchNormBackward::NAME;
    let mut ins = vec![grad_out, input];
    ins.extend(weight);
    ins.extend(running_mean);
    ins.extend(running_var);
    ins.extend(save_mean);
    ins.extend(save_invstd);
    let op = OpScope::new(name, &ins)?;
    float_only("batch_norm_backward", &ins)?;
    if input.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: expected input with at least 2 dimensions, but got {:?}",
            input.shape()
        )));
    }
    if grad_out.shape() != input.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_out of shape {:?} does not match input of shape {:?}",
            grad_out.shape(),
            input.shape()
        )));
    }
    let c = input.shape()[1];
    let dims: Vec<usize> = (0..input.dim()).filter(|&d| d != 1).collect();
    let m: usize = dims.iter().map(|&d| input.shape()[d]).product();
    let (mean, stat, stat_is_var) = if train {
        let (Some(sm), Some(si)) = (save_mean, save_invstd) else {
            return Err(TpuError::BadArgs(format!(
                "{name}: training needs save_mean and save_invstd"
            )));
        };
        (
            channel(sm, c, "save_mean")?,
            channel(si, c, "save_invstd")?,
            false,
        )
    } else {
        let (Some(rm), Some(rv)) = (running_mean, running_var) else {
            return Err(TpuError::BadArgs(format!(
                "{name}: evaluation needs running_mean and running_var"
            )));
        };
        (
            channel(rm, c, "running_mean")?,
            channel(rv, c, "running_var")?,
            true,
        )
    };
    let w = weight.map(|w| channel(w, c, "weight")).transpose()?;
    let dt = input.dtype();
    let wdt = weight.map_or(dt, |w| w.dtype());
    let mut inputs: Vec<&Tensor> = vec![grad_out, input, &mean, &stat];
    inputs.extend(w.as_ref());
    let has_w = w.is_some();
    let mut outs = Vec::new();
    if output_mask[0] {
        outs.push((dt, false));
    }
    if output_mask[1] {
        outs.push((wdt, true));
    }
    if output_mask[2] {
        outs.push((wdt, true));
    }
    if outs.is_empty() {
        return Ok((None, None, None));
    }
    let inv_m = if m > 0 { 1.0 / m as f64 } else { 0.0 };
    let mut r = rows(
        &op,
        input.shape(),
        &dims,
        false,
        &inputs,
        &[false, false, true, true, true],
        &outs,
        |p, r| {
            let (dy, x) = (p.cast(r[0], F), p.cast(r[1], F));
            let mu = p.cast(r[2], F);
            let s = p.cast(r[3], F);
            let invstd = if stat_is_var {
                let e = k(p, eps);
                let ve = add(p, s, e);
                p.un(UnOp::Rsqrt, ve, F)
            } else {
                s
            };
            let xm = sub(p, x, mu);
            let sum_dy = p.reduce(RedKind::Sum, dy, F);
            let dyxm = mul(p, dy, xm);
            let dot = p.reduce(RedKind::Sum, dyxm, F);
            let scale = if has_w {
                let wv = p.cast(r[4], F);
                mul(p, invstd, wv)
            } else {
                invstd
            };
            let mut v = Vec::new();
            if output_mask[0] {
                let g = if train {
                    let im = k(p, inv_m);
                    let mean_dy = mul(p, sum_dy, im);
                    let i2 = mul(p, invstd, invstd);
                    let proj = mul(p, dot, im);
                    let proj = mul(p, proj, i2);
                    let xp = mul(p, xm, proj);
                    let d = sub(p, dy, mean_dy);
                    sub(p, d, xp)
                } else {
                    dy
                };
                v.push(mul(p, g, scale));
            }
            if output_mask[1] {
                v.push(mul(p, dot, invstd));
            }
            if output_mask[2] {
                v.push(sum_dy);
            }
            v
        },
    )?;
    let db = if output_mask[2] { r.pop() } else { None };
    let dw = if output_mask[1] { r.pop() } else { None };
    let dx = if output_mask[0] { r.pop() } else { None };
    Ok((dx, dw, db))
}

/// A group norm's backward's sizes `(N, C, HxW, group)` as `usize`, after PyTorch's checks (none
/// negative, `C` divisible by `group`, the input `N x C x HxW`, the gradient of its shape).
fn group_dims(
    name: &str,
    grad_out: &Tensor,
    input: &Tensor,
    [n, c, hxw, group]: [i64; 4],
) -> Result<(usize, usize, usize, usize)> {
    let dim = |v: i64, what: &str| {
        usize::try_from(v)
            .map_err(|_| TpuError::BadArgs(format!("{name}: {what} = {v} is negative")))
    };
    let (n, c, hw, g) = (
        dim(n, "N")?,
        dim(c, "C")?,
        dim(hxw, "HxW")?,
        dim(group, "group")?,
    );
    if g == 0 || !c.is_multiple_of(g) || n * c * hw != input.numel() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: input of shape {:?} is not N={n} x C={c} x HxW={hw} with C divisible by group={g}",
            input.shape()
        )));
    }
    if grad_out.shape() != input.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_out of shape {:?} does not match input of shape {:?}",
            grad_out.shape(),
            input.shape()
        )));
    }
    Ok((n, c, hw, g))
}

/// `native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
/// output_mask)`: `(grad_input, grad_weight, grad_bias)`.
///
/// Per `(n, group)` row of `K = C/group·HxW` elements with `g = dy·w` (the channel's weight, 1
/// without one): `ds = Σ g·x`, `db = Σ g`, `b = (db·mean - ds)·rstd³/K`, `c = -b·mean -
/// db·rstd/K`, `grad_input = rstd·g + b·x + c` (the layer-norm formula over the row);
/// `grad_weight[c] = Σ_{n, positions} dy·(x - mean)·rstd`, `grad_bias[c] = Σ dy`.
#[allow(clippy::too_many_arguments)]
pub fn native_group_norm_backward(
    grad_out: &Tensor,
    input: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
    n: i64,
    c: i64,
    hxw: i64,
    group: i64,
    output_mask: [bool; 3],
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let name = NativeGroupNormBackward::NAME;
    let mut ins = vec![grad_out, input, mean, rstd];
    ins.extend(weight);
    let op = OpScope::new(name, &ins)?;
    float_only("native_group_norm_backward", &ins)?;
    let (n, c, hw, g) = group_dims(name, grad_out, input, [n, c, hxw, group])?;
    let cg = c / g;
    let shape4 = [n, g, cg, hw];
    let dy = as_shape(grad_out, &shape4, "grad_out")?;
    let x = as_shape(input, &shape4, "input")?;
    let mean2 = as_shape(mean, &[n, g], "mean")?;
    let rstd2 = as_shape(rstd, &[n, g], "rstd")?;
    let w = weight.map(|w| as_shape(w, &[c], "weight")).transpose()?;
    // The weight seen per element of [n, g, cg, hw] (stride 0 along n and the positions).
    let per_channel = |t: &Tensor| {
        let s = t.strides()[0];
        t.with_layout(Layout {
            shape: vec![1, g, cg, 1],
            strides: vec![0, cg as isize * s, s, 0],
            offset: t.storage_offset(),
        })
    };
    let wv = w.as_ref().map(per_channel);
    let dt = input.dtype();
    let wdt = weight.map_or(dt, |w| w.dtype());
    let empty = n * g == 0 || cg * hw == 0;
    let dx = if output_mask[0] && !empty {
        let mut inputs: Vec<&Tensor> = vec![&dy, &x, &mean2, &rstd2];
        inputs.extend(wv.as_ref());
        let has_w = wv.is_some();
        let inv_k = 1.0 / (cg * hw) as f64;
        let t = rows(
            &op,
            &shape4,
            &[2, 3],
            false,
            &inputs,
            &[false, false, true, true, false],
            &[(dt, false)],
            |p, r| {
                let (dyv, xv) = (p.cast(r[0], F), p.cast(r[1], F));
                let (mu, a) = (p.cast(r[2], F), p.cast(r[3], F));
                let gv = if has_w {
                    let wc = p.cast(r[4], F);
                    mul(p, dyv, wc)
                } else {
                    dyv
                };
                let (b, cc) = super::norm_terms(p, gv, xv, mu, a, inv_k);
                let ag = mul(p, a, gv);
                let bx = mul(p, b, xv);
                let s = add(p, ag, bx);
                vec![add(p, s, cc)]
            },
        )?
        .remove(0);
        let l = t
            .layout()
            .view_as(input.shape())
            .ok_or_else(|| op.err("internal: group norm gradient view"))?;
        Some(t.with_layout(l))
    } else if output_mask[0] {
        Some(super::zeros(&op, input.shape(), dt)?)
    } else {
        None
    };
    let want_w = output_mask[1];
    let want_b = output_mask[2];
    let (mut dw, mut db) = (None, None);
    if want_w || want_b {
        let mut outs = Vec::new();
        if want_w {
            outs.push((wdt, true));
        }
        if want_b {
            outs.push((wdt, true));
        }
        let mut r = if empty {
            outs.iter()
                .map(|(d, _)| super::zeros(&op, &[c], *d))
                .collect::<Result<Vec<_>>>()?
        } else {
            // mean and rstd broadcast along the group's channels and positions.
            let mean4 = mean2.with_layout(
                mean2
                    .layout()
                    .view_as(&[n, g, 1, 1])
                    .ok_or_else(|| op.err("internal: group norm statistics view"))?,
            );
            let rstd4 = rstd2.with_layout(
                rstd2
                    .layout()
                    .view_as(&[n, g, 1, 1])
                    .ok_or_else(|| op.err("internal: group norm statistics view"))?,
            );
            let inputs = [&dy, &x, &mean4, &rstd4];
            let body = |p: &mut ProgBuilder, r: &[PRef]| {
                let (dyv, xv) = (p.cast(r[0], F), p.cast(r[1], F));
                let (mu, a) = (p.cast(r[2], F), p.cast(r[3], F));
                let mut v = Vec::new();
                if want_w {
                    let xm = sub(p, xv, mu);
                    let xh = mul(p, xm, a);
                    let t = mul(p, dyv, xh);
                    v.push(p.reduce(RedKind::Sum, t, F));
                }
                if want_b {
                    v.push(p.reduce(RedKind::Sum, dyv, F));
                }
                v
            };
            rows(
                &op,
                &shape4,
                &[0, 3],
                false,
                &inputs,
                &[false; 4],
                &outs,
                body,
            )?
            .into_iter()
            .map(|t| {
                let l = t.layout().view_as(&[c]);
                l.map(|l| t.with_layout(l))
                    .ok_or_else(|| op.err("internal: group norm weight gradient view"))
            })
            .collect::<Result<Vec<_>>>()?
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
    "aten::native_batch_norm_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("per-channel sums span every dim but the channels")
)]
fn native_batch_norm_backward_op(a: NativeBatchNormBackward<'_>) -> Result<Vec<Value>> {
    let mask = mask3(NativeBatchNormBackward::NAME, 9, &a.output_mask)?;
    Ok(opt3(native_batch_norm_backward(
        a.grad_out,
        a.input,
        a.weight,
        a.running_mean,
        a.running_var,
        a.save_mean,
        a.save_invstd,
        a.train,
        a.eps,
        mask,
    )?))
}

/// The backward of `_batch_norm_with_update` (`update`: the batch's statistics were used;
/// `reserve` is the empty workspace the forward returned).
#[aten(
    "aten::batch_norm_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("per-channel sums span every dim but the channels")
)]
fn batch_norm_backward_op(a: BatchNormBackward<'_>) -> Result<Vec<Value>> {
    let mask = mask3(BatchNormBackward::NAME, 9, &a.output_mask)?;
    Ok(opt3(native_batch_norm_backward(
        a.grad_out,
        a.input,
        Some(a.weight),
        a.running_mean,
        a.running_var,
        a.save_mean,
        a.save_var,
        a.update,
        a.eps,
        mask,
    )?))
}

#[aten(
    "aten::native_group_norm_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("group statistics span channels and positions")
)]
fn native_group_norm_backward_op(a: NativeGroupNormBackward<'_>) -> Result<Vec<Value>> {
    let mask = mask3(NativeGroupNormBackward::NAME, 9, &a.output_mask)?;
    Ok(opt3(native_group_norm_backward(
        a.grad_out, a.input, a.mean, a.rstd, a.weight, a.N, a.C, a.HxW, a.group, mask,
    )?))
}
