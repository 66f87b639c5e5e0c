//! Backward operators a training step needs, with PyTorch's formulas: activations
//! (`threshold_backward`, `gelu_backward`, `silu_backward`, `sigmoid_backward`,
//! `tanh_backward`) and softmaxes (`_softmax_backward_data`, `_log_softmax_backward_data`)
//! here; `native_layer_norm_backward` in `layer_norm.rs`, `native_batch_norm_backward` and
//! `native_group_norm_backward` in `norm_stats.rs`, `nll_loss_backward` and
//! `embedding_dense_backward` in `lookup.rs`, `glu_backward` and `_prelu_kernel_backward` in
//! `gated.rs`.
//!
//! Every operator is one kernel (the softmaxes one rows kernel) that computes in f32 and rounds
//! once to the result dtype, as PyTorch's CPU kernels do for bf16 and f16. The activation
//! backwards promote `grad_output` with the other input, as PyTorch's binary kernels do.

pub(crate) mod gated;
pub(crate) mod layer_norm;
pub(crate) mod lookup;
pub(crate) mod norm_stats;

use super::binary::operand;
use super::helpers::{OpScope, map, map_shape, rows};
use super::layout_ops;
use super::{Value, aten};
use crate::dtype::{DType, Scalar, result_type};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::{Layout, wrap_dim};
use crate::ops::sharding::{Lin, Sharding, Special};
use crate::tensor::Tensor;

pub use layer_norm::native_layer_norm_backward;
pub use lookup::{embedding_dense_backward, nll_loss_backward};
pub use norm_stats::{native_batch_norm_backward, native_group_norm_backward};

const F: DType = DType::F32;

/// An f32 constant (kept at f32 precision, like PyTorch's `opmath_t` constants).
fn k(p: &mut ProgBuilder, v: f64) -> PRef {
    p.constant(Scalar::Float(v), F)
}

/// The per-row terms of a normalization's input gradient, as ATen's layer- and group-norm
/// backward kernels compute them: with `g` the output gradient (times the weight where there is
/// one), `x` the input, `mu` the mean, `a` the reciprocal standard deviation and `scale`
/// 1 / (elements a statistic covers): `b = (sum(g) mu - sum(g x)) a^3 scale` and
/// `c = -b mu - sum(g) a scale`, so that `dx = a g + b x + c`. Returns `(b, c)`.
fn norm_terms(
    p: &mut ProgBuilder,
    g: PRef,
    x: PRef,
    mu: PRef,
    a: PRef,
    scale: f64,
) -> (PRef, PRef) {
    let gx = mul(p, g, x);
    let ds = p.reduce(RedKind::Sum, gx, F);
    let db = p.reduce(RedKind::Sum, g, F);
    let sc = k(p, scale);
    // b = (db * mean - ds) * a * a * a * scale
    let dbm = mul(p, db, mu);
    let t = sub(p, dbm, ds);
    let t = mul(p, t, a);
    let t = mul(p, t, a);
    let t = mul(p, t, a);
    let b = mul(p, t, sc);
    // c = -b * mean - db * a * scale
    let nb = p.un(UnOp::Neg, b, F);
    let nbm = mul(p, nb, mu);
    let dba = mul(p, db, a);
    let dbas = mul(p, dba, sc);
    (b, sub(p, nbm, dbas))
}

fn mul(p: &mut ProgBuilder, a: PRef, b: PRef) -> PRef {
    p.bin(BinOp::Mul, a, b, F)
}

fn add(p: &mut ProgBuilder, a: PRef, b: PRef) -> PRef {
    p.bin(BinOp::Add, a, b, F)
}

fn sub(p: &mut ProgBuilder, a: PRef, b: PRef) -> PRef {
    p.bin(BinOp::Sub, a, b, F)
}

/// `t` (of `shape`'s element count) seen with `shape`: a view when possible, else a copy.
fn as_shape(t: &Tensor, shape: &[usize], what: &str) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    if t.numel() != n {
        return Err(TpuError::ShapeMismatch(format!(
            "expected {what} with {n} elements (shape {shape:?}), but got shape {:?}",
            t.shape()
        )));
    }
    if let Some(l) = t.layout().view_as(shape) {
        return Ok(t.with_layout(l));
    }
    let c = layout_ops::contiguous(t)?;
    Ok(c.with_layout(Layout::contiguous(shape)))
}

/// Zeros of `shape` and `dtype`, as part of `op`.
fn zeros(op: &OpScope, shape: &[usize], dtype: DType) -> Result<Tensor> {
    Ok(map_shape(op, shape, &[], &[dtype], |p, _| {
        vec![p.constant(Scalar::Int(0), dtype)]
    })?
    .remove(0))
}

/// `f(grad, x)` elementwise in f32 over the broadcast of `grad` and `x`, rounded to their
/// promoted dtype.
fn binary_backward(
    name: &str,
    grad: &Tensor,
    x: &Tensor,
    f: impl FnOnce(&mut ProgBuilder, PRef, PRef) -> PRef,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad, x])?;
    let common = result_type(&[operand(grad), operand(x)]);
    if !common.is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"{name}\" not implemented for '{}'",
            common.scalar_type_name()
        )));
    }
    Ok(map(&op, &[grad, x], &[common], |p, r| {
        let g = p.cast(r[0], common);
        let g = p.cast(g, F);
        let x = p.cast(r[1], common);
        let x = p.cast(x, F);
        vec![f(p, g, x)]
    })?
    .remove(0))
}

/// `threshold_backward(grad_output, self, threshold)`: `self <= threshold ? 0 : grad_output`
/// in the promoted dtype (the threshold rounded to it first, as PyTorch compares in it; NaN
/// passes the gradient through). Integer dtypes work too, as in PyTorch.
#[aten(
    "aten::threshold_backward",
    dtypes = DType::NUMERIC,
    shard = Sharding::pointwise(Lin::First),
    call = ThresholdBackward(grad_output, self_, threshold)
)]
pub fn threshold_backward(grad: &Tensor, x: &Tensor, threshold: Scalar) -> Result<Tensor> {
    let op = OpScope::new(ThresholdBackward::NAME, &[grad, x])?;
    let common = result_type(&[operand(grad), operand(x)]);
    Ok(map(&op, &[grad, x], &[common], |p, r| {
        let g = p.cast(r[0], common);
        let x = p.cast(r[1], common);
        let t = p.constant(threshold, common);
        let below = p.cmp(CmpKind::Le, x, t, common);
        let zero = p.constant(Scalar::Int(0), common);
        vec![p.select(below, zero, g, common)]
    })?
    .remove(0))
}

/// `gelu_backward(grad_output, self, approximate)` for `approximate` `"none"` (erf) or
/// `"tanh"`, with PyTorch's derivative formulas.
#[aten(
    "aten::gelu_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = GeluBackward(grad_output, self_, approximate)
)]
pub fn gelu_backward(grad: &Tensor, x: &Tensor, approximate: &str) -> Result<Tensor> {
    use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, SQRT_2};
    let tanh = match approximate {
        "none" => false,
        "tanh" => true,
        other => {
            return Err(TpuError::BadArgs(format!(
                "approximate argument must be either none or tanh, not '{other}'"
            )));
        }
    };
    binary_backward(GeluBackward::NAME, grad, x, move |p, dy, x| {
        if tanh {
            // kBeta = sqrt(2/pi), kKappa = 0.044715.
            let beta = k(p, SQRT_2 * FRAC_2_SQRT_PI * 0.5);
            let kappa = k(p, 0.044715f32 as f64);
            let three_kappa = k(p, (3.0f32 * 0.044715f32) as f64);
            let (half, one) = (k(p, 0.5), k(p, 1.0));
            let x_sq = mul(p, x, x);
            let x_cube = mul(p, x_sq, x);
            let kx3 = mul(p, kappa, x_cube);
            let s = add(p, x, kx3);
            let inner = mul(p, beta, s);
            let t = p.un(UnOp::Tanh, inner, F);
            let left = mul(p, half, x);
            let right = add(p, one, t);
            let left_derivative = mul(p, half, right);
            let t2 = mul(p, t, t);
            let tanh_derivative = sub(p, one, t2);
            let kx2 = mul(p, three_kappa, x_sq);
            let s2 = add(p, one, kx2);
            let inner_derivative = mul(p, beta, s2);
            let r = mul(p, left, tanh_derivative);
            let right_derivative = mul(p, r, inner_derivative);
            let d = add(p, left_derivative, right_derivative);
            mul(p, dy, d)
        } else {
            // cdf = 0.5 (1 + erf(x / sqrt 2)), pdf = exp(-x^2 / 2) / sqrt(2 pi).
            let alpha = k(p, FRAC_1_SQRT_2);
            let beta = k(p, FRAC_2_SQRT_PI * FRAC_1_SQRT_2 * 0.5);
            let (half, one, mhalf) = (k(p, 0.5), k(p, 1.0), k(p, -0.5));
            let xa = mul(p, x, alpha);
            let erf = p.un(UnOp::Erf, xa, F);
            let e1 = add(p, one, erf);
            let cdf = mul(p, half, e1);
            let x2 = mul(p, x, x);
            let x2h = mul(p, x2, mhalf);
            let ex = p.un(UnOp::Exp, x2h, F);
            let pdf = mul(p, beta, ex);
            let xpdf = mul(p, x, pdf);
            let d = add(p, cdf, xpdf);
            mul(p, dy, d)
        }
    })
}

/// `hardswish_backward(grad_output, self)`: 0 below -3, `dy·(x/3 + 1/2)` up to 3, `dy` above.
#[aten(
    "aten::hardswish_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = HardswishBackward(grad_output, self_)
)]
pub fn hardswish_backward(grad: &Tensor, x: &Tensor) -> Result<Tensor> {
    binary_backward(HardswishBackward::NAME, grad, x, |p, dy, x| {
        let (m3, p3) = (k(p, -3.0), k(p, 3.0));
        let (half, zero) = (k(p, 0.5), k(p, 0.0));
        // The slope from x clamped to [-3, 3], so that infinities give no NaN; NaN takes
        // the `dy` branch (it is neither < -3 nor <= 3), as in PyTorch.
        let xc = p.bin(BinOp::Min, x, p3, F);
        let xc = p.bin(BinOp::Max, xc, m3, F);
        let third = p.bin(BinOp::Div, xc, p3, F);
        let slope = add(p, third, half);
        let mid = mul(p, dy, slope);
        let low = p.cmp(CmpKind::Lt, x, m3, F);
        let inner = p.cmp(CmpKind::Le, x, p3, F);
        let upper = p.select(inner, mid, dy, F);
        p.select(low, zero, upper, F)
    })
}

/// `mish_backward(grad_output, self)`: `dy·(t + x·σ(x)·(1 - t²))` with `t = tanh(softplus(x))`.
#[aten(
    "aten::mish_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = MishBackward(grad_output, self_)
)]
pub fn mish_backward(grad: &Tensor, x: &Tensor) -> Result<Tensor> {
    binary_backward(MishBackward::NAME, grad, x, |p, dy, x| {
        let one = k(p, 1.0);
        let e = p.un(UnOp::Exp, x, F);
        let sp = add(p, one, e);
        let sp = p.un(UnOp::Log, sp, F);
        let t = p.un(UnOp::Tanh, sp, F);
        let s = p.un(UnOp::Sigmoid, x, F);
        let t2 = mul(p, t, t);
        let d = sub(p, one, t2);
        let xs = mul(p, x, s);
        let xsd = mul(p, xs, d);
        let r = add(p, t, xsd);
        mul(p, dy, r)
    })
}

/// `elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)`: for
/// `x > 0`, `dy·scale`; else `dy·input_scale·alpha·scale·exp(x·input_scale)` (or, from the
/// result `y`, `dy·input_scale·(y + alpha·scale)`).
#[aten(
    "aten::elu_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = EluBackward(grad_output, alpha.to_f64(), scale.to_f64(), input_scale.to_f64(), is_result, self_or_result)
)]
pub fn elu_backward(
    grad: &Tensor,
    alpha: f64,
    scale: f64,
    input_scale: f64,
    is_result: bool,
    x: &Tensor,
) -> Result<Tensor> {
    binary_backward(EluBackward::NAME, grad, x, move |p, dy, x| {
        let neg = k(p, alpha * scale);
        let pos = k(p, scale);
        let ipt = k(p, input_scale);
        let zero = k(p, 0.0);
        let nonpos = p.cmp(CmpKind::Le, x, zero, F);
        let below = if is_result {
            let y = add(p, x, neg);
            let d = mul(p, ipt, y);
            mul(p, dy, d)
        } else {
            let xi = mul(p, x, ipt);
            let e = p.un(UnOp::Exp, xi, F);
            let c = mul(p, ipt, neg);
            let d = mul(p, c, e);
            mul(p, dy, d)
        };
        let above = mul(p, dy, pos);
        p.select(nonpos, below, above, F)
    })
}

/// `silu_backward(grad_output, self)`: `dy * s * (1 + x * (1 - s))` with `s = sigmoid(x)`.
#[aten(
    "aten::silu_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = SiluBackward(grad_output, self_)
)]
pub fn silu_backward(grad: &Tensor, x: &Tensor) -> Result<Tensor> {
    binary_backward(SiluBackward::NAME, grad, x, |p, dy, x| {
        let one = k(p, 1.0);
        let nx = p.un(UnOp::Neg, x, F);
        let e = p.un(UnOp::Exp, nx, F);
        let d = add(p, one, e);
        let s = p.bin(BinOp::Div, one, d, F);
        let oms = sub(p, one, s);
        let xo = mul(p, x, oms);
        let r = add(p, one, xo);
        let ds = mul(p, dy, s);
        mul(p, ds, r)
    })
}

/// `sigmoid_backward(grad_output, output)`: `g * (1 - y) * y`.
#[aten(
    "aten::sigmoid_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = SigmoidBackward(grad_output, output)
)]
pub fn sigmoid_backward(grad: &Tensor, output: &Tensor) -> Result<Tensor> {
    binary_backward(SigmoidBackward::NAME, grad, output, |p, g, y| {
        let one = k(p, 1.0);
        let omy = sub(p, one, y);
        let a = mul(p, g, omy);
        mul(p, a, y)
    })
}

/// `tanh_backward(grad_output, output)`: `g * (1 - y * y)`.
#[aten(
    "aten::tanh_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = TanhBackward(grad_output, output)
)]
pub fn tanh_backward(grad: &Tensor, output: &Tensor) -> Result<Tensor> {
    binary_backward(TanhBackward::NAME, grad, output, |p, g, y| {
        let one = k(p, 1.0);
        let y2 = mul(p, y, y);
        let d = sub(p, one, y2);
        mul(p, g, d)
    })
}

/// A softmax backward along `dim` as one rows kernel: `f(grad, output)` gets f32 values.
fn softmax_like_backward(
    name: &str,
    grad: &Tensor,
    output: &Tensor,
    dim: i64,
    input_dtype: DType,
    f: impl FnOnce(&mut ProgBuilder, PRef, PRef) -> PRef,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad, output])?;
    if grad.shape() != output.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_output of shape {:?} and output of shape {:?} differ",
            grad.shape(),
            output.shape()
        )));
    }
    if !input_dtype.is_float() || !grad.dtype().is_float() || !output.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"{name}\" not implemented for '{}'",
            grad.dtype().scalar_type_name()
        )));
    }
    let d = wrap_dim(dim, grad.dim())?;
    if grad.dim() == 0 {
        // A 0-dim softmax is a softmax over one element.
        let g1 = grad.with_layout(grad.layout().unsqueeze(0)?);
        let y1 = output.with_layout(output.layout().unsqueeze(0)?);
        let r = rows(
            &op,
            &[1],
            &[0],
            false,
            &[&g1, &y1],
            &[false, false],
            &[(input_dtype, false)],
            |p, r| {
                let (g, y) = (p.cast(r[0], F), p.cast(r[1], F));
                vec![f(p, g, y)]
            },
        )?
        .remove(0);
        return Ok(r.with_layout(r.layout().squeeze(0)?));
    }
    Ok(rows(
        &op,
        grad.shape(),
        &[d],
        false,
        &[grad, output],
        &[false, false],
        &[(input_dtype, false)],
        |p, r| {
            let (g, y) = (p.cast(r[0], F), p.cast(r[1], F));
            vec![f(p, g, y)]
        },
    )?
    .remove(0))
}

/// `_softmax_backward_data(grad_output, output, dim, input_dtype)`: `y * (g - sum(g * y))`
/// along `dim`, as `input_dtype`.
#[aten(
    "aten::_softmax_backward_data",
    dtypes = DType::FLOATING,
    shard = Sharding::Special(Special::SoftmaxBackward),
    call = SoftmaxBackwardData(grad_output, output, dim, input_dtype)
)]
pub fn softmax_backward_data(
    grad: &Tensor,
    output: &Tensor,
    dim: i64,
    input_dtype: DType,
) -> Result<Tensor> {
    softmax_like_backward(
        SoftmaxBackwardData::NAME,
        grad,
        output,
        dim,
        input_dtype,
        |p, g, y| {
            let gy = mul(p, g, y);
            let s = p.reduce(RedKind::Sum, gy, F);
            let d = sub(p, g, s);
            mul(p, y, d)
        },
    )
}

/// `_log_softmax_backward_data(grad_output, output, dim, input_dtype)`: `g - exp(y) * sum(g)`
/// along `dim`, as `input_dtype`.
#[aten(
    "aten::_log_softmax_backward_data",
    dtypes = DType::FLOATING,
    shard = Sharding::Special(Special::SoftmaxBackward),
    call = LogSoftmaxBackwardData(grad_output, output, dim, input_dtype)
)]
pub fn log_softmax_backward_data(
    grad: &Tensor,
    output: &Tensor,
    dim: i64,
    input_dtype: DType,
) -> Result<Tensor> {
    softmax_like_backward(
        LogSoftmaxBackwardData::NAME,
        grad,
        output,
        dim,
        input_dtype,
        |p, g, y| {
            let s = p.reduce(RedKind::Sum, g, F);
            let e = p.un(UnOp::Exp, y, F);
            let es = mul(p, e, s);
            sub(p, g, es)
        },
    )
}

/// An `output_mask` (`bool[3]`) as an array; `i` is its argument's position, for the error.
fn mask3(name: &str, i: usize, m: &[bool]) -> Result<[bool; 3]> {
    match m {
        &[a, b, c] => Ok([a, b, c]),
        _ => Err(TpuError::BadArgs(format!(
            "{name}(): argument {i} must be a list of 3 bools"
        ))),
    }
}

/// Three optional gradients as the calling convention's values (`None` where not computed).
fn opt3((a, b, c): (Option<Tensor>, Option<Tensor>, Option<Tensor>)) -> Vec<Value> {
    [a, b, c]
        .into_iter()
        .map(|t| t.map_or(Value::None, Value::Tensor))
        .collect()
}
