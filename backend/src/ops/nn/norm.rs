//! Normalisations: `native_layer_norm` and `rms_norm` (one rows kernel each: row statistics,
//! then the normalised, optionally affine output), `native_group_norm`, and
//! `native_batch_norm` (per-channel statistics in training, running statistics in eval, and
//! their update).

use super::F;
use crate::dtype::{Scalar, promote_types};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, PRef, ProgBuilder, RedKind, UnOp};
use crate::ops::creation;
use crate::ops::helpers::{OpScope, rows};
use crate::ops::reduce::reduced_shape;
use crate::tensor::Tensor;

/// Checks `normalized_shape` against the input's trailing dims and an affine parameter's shape;
/// returns the normalised (trailing) dims.
fn norm_dims(
    x: &Tensor,
    normalized_shape: &[i64],
    params: &[(&str, Option<&Tensor>)],
) -> Result<Vec<usize>> {
    let k = normalized_shape.len();
    if k == 0 {
        return Err(TpuError::BadArgs(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = []".into(),
        ));
    }
    let n = x.dim();
    let matches = n >= k
        && normalized_shape
            .iter()
            .zip(&x.shape()[n - k..])
            .all(|(a, b)| *a >= 0 && *a as usize == *b);
    if !matches {
        return Err(TpuError::ShapeMismatch(format!(
            "Given normalized_shape={normalized_shape:?}, expected input with shape [*, {}], but got input of size{:?}",
            normalized_shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            x.shape()
        )));
    }
    for (what, p) in params {
        if let Some(p) = p {
            let same = p.dim() == k
                && p.shape()
                    .iter()
                    .zip(normalized_shape)
                    .all(|(a, b)| *a as i64 == *b);
            if !same {
                return Err(TpuError::ShapeMismatch(format!(
                    "Expected {what} to be of same shape as normalized_shape, but got {what} of shape {:?} and normalized_shape = {normalized_shape:?}",
                    p.shape()
                )));
            }
        }
    }
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"LayerNormKernelImpl\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    Ok((n - k..n).collect())
}

/// The statistics of one row of `v` (f32) over its `k` elements, as the norms compute them:
/// the mean, the deviations `v - mean`, the biased variance and `rsqrt(var + eps)`.
struct RowStats {
    mean: PRef,
    d: PRef,
    var: PRef,
    rstd: PRef,
}

/// Emits [`RowStats`] into the rows program `p`.
fn row_stats(p: &mut ProgBuilder, v: PRef, k: f64, eps: f64) -> RowStats {
    let kc = p.constant(Scalar::Float(k), F);
    let s = p.reduce(RedKind::Sum, v, F);
    let mean = p.bin(BinOp::Div, s, kc, F);
    let d = p.bin(BinOp::Sub, v, mean, F);
    let d2 = p.bin(BinOp::Mul, d, d, F);
    let ss = p.reduce(RedKind::Sum, d2, F);
    let var = p.bin(BinOp::Div, ss, kc, F);
    let e = p.constant(Scalar::Float(eps), F);
    let ve = p.bin(BinOp::Add, var, e, F);
    let rstd = p.un(UnOp::Rsqrt, ve, F);
    RowStats { mean, d, var, rstd }
}

/// `torch.native_layer_norm(x, normalized_shape, weight, bias, eps)`: `(output, mean, rstd)`,
/// with `mean` and `rstd` of the input's dtype, shaped like the input with the normalised dims
/// as size 1. One kernel: mean, then variance (two passes), then the affine output.
pub fn native_layer_norm(
    x: &Tensor,
    normalized_shape: &[i64],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let mut inputs: Vec<&Tensor> = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let op = OpScope::new("aten::native_layer_norm", &inputs)?;
    let dims = norm_dims(x, normalized_shape, &[("weight", weight), ("bias", bias)])?;
    let dt = x.dtype();
    let n: usize = dims.iter().map(|d| x.shape()[*d]).product();
    if n == 0 {
        // Nothing to normalise: an empty output, and NaN statistics (the mean of no elements).
        let stat = reduced_shape(x.shape(), &dims, true);
        let nan = Scalar::Float(f64::NAN);
        return Ok((
            creation::full(op.rt(), x.shape(), Scalar::Int(0), dt)?,
            creation::full(op.rt(), &stat, nan, dt)?,
            creation::full(op.rt(), &stat, nan, dt)?,
        ));
    }
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let mut out = rows(
        &op,
        x.shape(),
        &dims,
        true,
        &inputs,
        &[false, false, false],
        &[(dt, false), (dt, true), (dt, true)],
        |p, r| {
            let v = p.cast(r[0], F);
            let RowStats { mean, d, rstd, .. } = row_stats(p, v, n as f64, eps);
            let mut y = p.bin(BinOp::Mul, d, rstd, F);
            let mut i = 1;
            if has_w {
                y = p.bin(BinOp::Mul, y, r[i], F);
                i += 1;
            }
            if has_b {
                y = p.bin(BinOp::Add, y, r[i], F);
            }
            vec![y, mean, rstd]
        },
    )?;
    let rstd = out.remove(2);
    let mean = out.remove(1);
    Ok((out.remove(0), mean, rstd))
}

/// `torch.rms_norm(x, normalized_shape, weight, eps)` as PyTorch composes it: in f32,
/// `x * rsqrt(mean(x^2) + eps)`, converted to the input's dtype, then times `weight` (type
/// promotion applies). `eps` defaults to f32's machine epsilon and is held in the input's dtype,
/// as PyTorch does. One kernel.
pub fn rms_norm(
    x: &Tensor,
    normalized_shape: &[i64],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    let mut inputs: Vec<&Tensor> = vec![x];
    inputs.extend(weight);
    let op = OpScope::new("aten::rms_norm", &inputs)?;
    let dims = norm_dims(x, normalized_shape, &[("weight", weight)])?;
    let dt = x.dtype();
    let out = weight.map_or(dt, |w| promote_types(dt, w.dtype()));
    let eps = Scalar::Float(eps.unwrap_or(f32::EPSILON as f64));
    // PyTorch keeps eps in the input's scalar type.
    let eps = Scalar::Float(f32::from_bits(eps.lane_bits(dt)) as f64);
    let n: usize = dims.iter().map(|d| x.shape()[*d]).product();
    if n == 0 {
        return creation::full(op.rt(), x.shape(), Scalar::Int(0), out);
    }
    let has_w = weight.is_some();
    Ok(rows(
        &op,
        x.shape(),
        &dims,
        false,
        &inputs,
        &[false, false],
        &[(out, false)],
        |p, r| {
            let v = p.cast(r[0], F);
            let v2 = p.bin(BinOp::Mul, v, v, F);
            let ss = p.reduce(RedKind::Sum, v2, F);
            let k = p.constant(Scalar::Float(n as f64), F);
            let ms = p.bin(BinOp::Div, ss, k, F);
            let e = p.constant(eps, F);
            let me = p.bin(BinOp::Add, ms, e, F);
            let r_ = p.un(UnOp::Rsqrt, me, F);
            let y = p.bin(BinOp::Mul, v, r_, F);
            // `.type_as(input)`: rounded to the input's dtype before the weight.
            let y = p.round(y, dt);
            if has_w {
                let y = p.cast(y, F);
                vec![p.bin(BinOp::Mul, y, r[1], F)]
            } else {
                vec![y]
            }
        },
    )?
    .remove(0))
}

/// `torch.native_group_norm(x, weight, bias, N, C, HxW, group, eps)`: `(output, mean, rstd)`,
/// `mean` and `rstd` of shape `[N, group]` in the input's dtype. One rows kernel over `x` seen
/// as `[N, group, C/group, HxW]` (the row is one group's channels and positions); the
/// per-channel weight and bias are broadcast along it.
#[allow(clippy::too_many_arguments)]
pub fn native_group_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    n: i64,
    c: i64,
    hxw: i64,
    group: i64,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let mut inputs: Vec<&Tensor> = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let op = OpScope::new("aten::native_group_norm", &inputs)?;
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"GroupNormKernelImpl\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    let (n, c, hw, g) = (n as usize, c as usize, hxw as usize, group as usize);
    if g == 0 || !c.is_multiple_of(g) || n * c * hw != x.numel() {
        return Err(TpuError::ShapeMismatch(format!(
            "Expected number of channels in input to be divisible by num_groups, but got input of shape {:?} and num_groups={g}",
            x.shape()
        )));
    }
    for (what, p) in [("weight", weight), ("bias", bias)] {
        if let Some(p) = p
            && (p.dim() != 1 || p.shape()[0] != c)
        {
            return Err(TpuError::ShapeMismatch(format!(
                "Expected {what} to be a vector of size equal to the number of channels in input, but got {what} of shape {:?} and input of shape {:?}",
                p.shape(),
                x.shape()
            )));
        }
    }
    let dt = x.dtype();
    let cg = c / g;
    let shape4 = [n, g, cg, hw];
    let xv = match x.layout().view_as(&shape4) {
        Some(l) => x.with_layout(l),
        None => {
            let cx =
                crate::ops::helpers::map_shape(&op, x.shape(), &[x], &[dt], |_, r| vec![r[0]])?
                    .remove(0);
            cx.with_layout(crate::layout::Layout::contiguous(&shape4))
        }
    };
    if cg * hw == 0 || n * g == 0 {
        let nan = Scalar::Float(f64::NAN);
        return Ok((
            creation::full(op.rt(), x.shape(), Scalar::Int(0), dt)?,
            creation::full(op.rt(), &[n, g], nan, dt)?,
            creation::full(op.rt(), &[n, g], nan, dt)?,
        ));
    }
    let per_channel = |t: &Tensor| {
        let s = t.strides()[0];
        t.with_layout(crate::layout::Layout {
            shape: vec![1, g, cg, 1],
            strides: vec![0, cg as isize * s, s, 0],
            offset: t.storage_offset(),
        })
    };
    let wv = weight.map(per_channel);
    let bv = bias.map(per_channel);
    let mut ins: Vec<&Tensor> = vec![&xv];
    ins.extend(wv.as_ref());
    ins.extend(bv.as_ref());
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let k = (cg * hw) as f64;
    let mut out = rows(
        &op,
        &shape4,
        &[2, 3],
        false,
        &ins,
        &[false, false, false],
        &[(dt, false), (dt, true), (dt, true)],
        |p, r| {
            let v = p.cast(r[0], F);
            let RowStats { mean, d, rstd, .. } = row_stats(p, v, k, eps);
            let mut y = p.bin(BinOp::Mul, d, rstd, F);
            let mut i = 1;
            if has_w {
                let w = p.cast(r[i], F);
                y = p.bin(BinOp::Mul, y, w, F);
                i += 1;
            }
            if has_b {
                let b = p.cast(r[i], F);
                y = p.bin(BinOp::Add, y, b, F);
            }
            vec![y, mean, rstd]
        },
    )?;
    let rstd = out.remove(2);
    let mean = out.remove(1);
    let y = out.remove(0);
    let y = y.with_layout(
        y.layout()
            .view_as(x.shape())
            .ok_or_else(|| op.err("internal: group norm output view"))?,
    );
    Ok((y, mean, rstd))
}

/// `torch.native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
/// eps)`: `(output, save_mean, save_invstd)`. Training normalises with the batch statistics of
/// each channel (dim 1; one rows kernel whose row is every other dim) and, given running
/// statistics, updates them in place (`(1 - momentum)·running + momentum·batch`, the variance
/// unbiased); `save_mean`/`save_invstd` are the batch mean and `1/sqrt(var + eps)`. Evaluation
/// normalises with the running statistics and returns empty `save_*` tensors.
#[allow(clippy::too_many_arguments)]
pub fn native_batch_norm(
    name: &str,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let mut inputs: Vec<&Tensor> = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    inputs.extend(running_mean);
    inputs.extend(running_var);
    let op = OpScope::new(name, &inputs)?;
    check_batch_norm(
        name,
        x,
        [
            ("weight", weight),
            ("bias", bias),
            ("running_mean", running_mean),
            ("running_var", running_var),
        ],
    )?;
    let c = x.shape()[1];
    let dt = x.dtype();
    let bn = BatchNorm {
        op: &op,
        x,
        dims: (0..x.dim()).filter(|&d| d != 1).collect(),
        w: weight.map(|t| per_channel(t, c)),
        b: bias.map(|t| per_channel(t, c)),
        eps,
    };
    let count: usize = bn.dims.iter().map(|&d| x.shape()[d]).product();
    let empty = || Tensor::empty(op.rt(), &[0], dt);
    if !training {
        let (Some(rm), Some(rv)) = (running_mean, running_var) else {
            return Err(TpuError::BadArgs(format!(
                "{name}: running_mean and running_var must be defined in evaluation mode"
            )));
        };
        let y = bn.eval(&per_channel(rm, c), &per_channel(rv, c))?;
        return Ok((y, empty()?, empty()?));
    }
    if count == 0 || c == 0 {
        let nan = Scalar::Float(f64::NAN);
        return Ok((
            creation::full(op.rt(), x.shape(), Scalar::Int(0), dt)?,
            creation::full(op.rt(), &[c], nan, dt)?,
            creation::full(op.rt(), &[c], nan, dt)?,
        ));
    }
    let (y, mean, invstd, var) = bn.train(count)?;
    let k = count as f64;
    let unbias = if count > 1 {
        k / (k - 1.0)
    } else {
        f64::INFINITY
    };
    for (run, stat, factor) in [(running_mean, &mean, 1.0), (running_var, &var, unbias)] {
        if let Some(run) = run {
            update_running(&op, &per_channel(run, c), stat, factor, momentum)?;
        }
    }
    Ok((y, mean, invstd))
}

/// `native_batch_norm`'s argument checks: a float input of at least 2 dims, and `c` elements
/// in each per-channel parameter given.
fn check_batch_norm(name: &str, x: &Tensor, params: [(&str, Option<&Tensor>); 4]) -> Result<()> {
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"batch_norm\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    if x.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected input to have at least 2 dimensions, but got {:?}",
            x.shape()
        )));
    }
    let c = x.shape()[1];
    for (what, p) in params {
        if let Some(p) = p
            && p.numel() != c
        {
            return Err(TpuError::ShapeMismatch(format!(
                "{name}: {what} should contain {c} elements not {}",
                p.numel()
            )));
        }
    }
    Ok(())
}

/// A per-channel parameter viewed as `[c]` (as it is when it cannot be).
fn per_channel(t: &Tensor, c: usize) -> Tensor {
    t.with_layout(
        t.layout()
            .view_as(&[c])
            .unwrap_or_else(|| t.layout().clone()),
    )
}

/// A batch norm's input and affine parameters: rows kernels over every dim but the channels.
struct BatchNorm<'a> {
    op: &'a OpScope,
    x: &'a Tensor,
    /// Every dim but the channels (dim 1).
    dims: Vec<usize>,
    /// Weight and bias, as `[c]`.
    w: Option<Tensor>,
    b: Option<Tensor>,
    eps: f64,
}

impl BatchNorm<'_> {
    /// Evaluation: the input normalised with the running statistics `rm`, `rv` (as `[c]`).
    fn eval(&self, rm: &Tensor, rv: &Tensor) -> Result<Tensor> {
        let (x, dt, eps) = (self.x, self.x.dtype(), self.eps);
        let (has_w, has_b) = (self.w.is_some(), self.b.is_some());
        let mut ins: Vec<&Tensor> = vec![x, rm, rv];
        ins.extend(self.w.as_ref());
        ins.extend(self.b.as_ref());
        Ok(rows(
            self.op,
            x.shape(),
            &self.dims,
            true,
            &ins,
            &[false, true, true, true, true],
            &[(dt, false)],
            |p, r| {
                let v = p.cast(r[0], F);
                let m = p.cast(r[1], F);
                let var = p.cast(r[2], F);
                let e = p.constant(Scalar::Float(eps), F);
                let ve = p.bin(BinOp::Add, var, e, F);
                let is = p.un(UnOp::Rsqrt, ve, F);
                let d = p.bin(BinOp::Sub, v, m, F);
                let mut y = p.bin(BinOp::Mul, d, is, F);
                let mut i = 3;
                if has_w {
                    let wv = p.cast(r[i], F);
                    y = p.bin(BinOp::Mul, y, wv, F);
                    i += 1;
                }
                if has_b {
                    let bv = p.cast(r[i], F);
                    y = p.bin(BinOp::Add, y, bv, F);
                }
                vec![y]
            },
        )?
        .remove(0))
    }

    /// Training over `count` elements per channel: the output normalised with the batch
    /// statistics, and the batch mean, invstd and (biased) variance.
    fn train(&self, count: usize) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
        let (x, dt, eps) = (self.x, self.x.dtype(), self.eps);
        let (has_w, has_b) = (self.w.is_some(), self.b.is_some());
        let mut ins: Vec<&Tensor> = vec![x];
        ins.extend(self.w.as_ref());
        ins.extend(self.b.as_ref());
        let k = count as f64;
        let mut out = rows(
            self.op,
            x.shape(),
            &self.dims,
            false,
            &ins,
            &[false, true, true],
            &[(dt, false), (dt, true), (dt, true), (F, true)],
            |p, r| {
                let v = p.cast(r[0], F);
                let RowStats {
                    mean,
                    var,
                    rstd: is,
                    ..
                } = row_stats(p, v, k, eps);
                // PyTorch keeps the statistics in the input's dtype and applies them as
                // `x·alpha + beta`, `alpha = invstd·w`, `beta = b - mean·alpha` (in f32).
                let mean_r = p.round(mean, dt);
                let mean_r = p.cast(mean_r, F);
                let is_r = p.round(is, dt);
                let is_r = p.cast(is_r, F);
                let mut alpha = is_r;
                let mut i = 1;
                if has_w {
                    let wv = p.cast(r[i], F);
                    alpha = p.bin(BinOp::Mul, alpha, wv, F);
                    i += 1;
                }
                let ma = p.bin(BinOp::Mul, mean_r, alpha, F);
                let zero = p.constant(Scalar::Float(0.0), F);
                let bv = if has_b { p.cast(r[i], F) } else { zero };
                let beta = p.bin(BinOp::Sub, bv, ma, F);
                let xa = p.bin(BinOp::Mul, v, alpha, F);
                let y = p.bin(BinOp::Add, xa, beta, F);
                vec![y, mean, is, var]
            },
        )?;
        let var = out.remove(3);
        let invstd = out.remove(2);
        let mean = out.remove(1);
        let y = out.remove(0);
        Ok((y, mean, invstd, var))
    }
}

/// Updates running statistic `run` (as `[c]`) in place from the batch's `stat`:
/// `(1 - momentum)·run + momentum·factor·stat`.
fn update_running(
    op: &OpScope,
    run: &Tensor,
    stat: &Tensor,
    factor: f64,
    momentum: f64,
) -> Result<()> {
    crate::ops::helpers::write_into(op, run, &[run, stat], |p, r| {
        let old = p.cast(r[0], F);
        let new = p.cast(r[1], F);
        let keep = p.constant(Scalar::Float(1.0 - momentum), F);
        let m = p.constant(Scalar::Float(momentum), F);
        let fct = p.constant(Scalar::Float(factor), F);
        let a = p.bin(BinOp::Mul, old, keep, F);
        let nf = p.bin(BinOp::Mul, new, fct, F);
        let b = p.bin(BinOp::Mul, nf, m, F);
        p.bin(BinOp::Add, a, b, F)
    })
}
