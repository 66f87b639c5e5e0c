//! Activation functions beyond `relu`/`gelu`/`silu`: `hardtanh`, `elu`/`celu`, `leaky_relu`,
//! `log_sigmoid_forward`, `hardswish`, `hardsigmoid`, `softplus`, `mish`, `hardshrink`,
//! `softshrink`, `threshold`, and the backward formulas autograd calls for `hardtanh`, `elu`,
//! `leaky_relu` and `log_sigmoid`.
//!
//! Each is ATen's CPU kernel formula, computed in f32 and rounded once to the dtype (bf16/f16
//! compute in their "opmath" f32): e.g. `elu(x) = x <= 0 ? expm1(x * input_scale) * alpha *
//! scale : x * scale`, `softplus(x) = x * beta > threshold ? x : log1p(exp(x * beta)) / beta`,
//! `log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))` (its forward also returns the buffer
//! `exp(-|x|)`). `hardtanh` and `threshold` also take integer tensors (in their dtype).

use super::{Arg, Ex, Number, float1, not_implemented, promoted_as};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// A number converted to dtype `d` (as `static_cast<scalar_t>` does), as an f32 value.
fn conv(v: f64, d: DType) -> f64 {
    f32::from_bits(Scalar::Float(v).lane_bits(d)) as f64
}

/// A float-only activation: `f` in f32, rounded to the input's dtype.
fn act(
    name: &str,
    kernel: &str,
    x: &Tensor,
    f: impl FnOnce(&mut Ex, PRef) -> PRef,
) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(not_implemented(kernel, x.dtype()));
    }
    float1(name, x, f)
}

/// A float-only backward formula of `(grad, x)`.
pub(super) fn grad2(
    name: &str,
    g: &Tensor,
    x: &Tensor,
    f: impl FnOnce(&mut Ex, PRef, PRef) -> PRef,
) -> Result<Tensor> {
    let d = g.dtype();
    if !d.is_float() {
        return Err(not_implemented(name, d));
    }
    promoted_as(
        name,
        &[Arg::Tensor(g), Arg::Tensor(x)],
        d,
        Number::Common,
        d,
        |p, v, _| {
            let (a, b) = (p.cast(v[0], DType::F32), p.cast(v[1], DType::F32));
            f(&mut Ex::new(p), a, b)
        },
    )
}

/// `hardtanh(x, min, max)`: `clamp(x, min, max)` with NaN kept; integers in their dtype.
#[aten(
    "aten::hardtanh",
    dtypes = DType::NUMERIC,
    shard = Sharding::pointwise(Lin::No),
    call = Hardtanh(self_, min_val.to_f64(), max_val.to_f64())
)]
pub fn hardtanh(x: &Tensor, lo: f64, hi: f64) -> Result<Tensor> {
    let d = x.dtype();
    if d == DType::Bool {
        return Err(not_implemented("hardtanh", d));
    }
    promoted_as(
        Hardtanh::NAME,
        &[Arg::Tensor(x)],
        d,
        Number::Common,
        d,
        move |p, v, _| {
            if d.is_float() {
                let mut e = Ex::new(p);
                let x = e.f(v[0]);
                let (l, h) = (e.k(conv(lo, d)), e.k(conv(hi, d)));
                let m = e.max(x, l);
                e.min(m, h)
            } else {
                let l = p.constant(Scalar::Int(lo as i64), DType::I32);
                let h = p.constant(Scalar::Int(hi as i64), DType::I32);
                let m = p.bin(BinOp::Max, v[0], l, DType::I32);
                p.bin(BinOp::Min, m, h, DType::I32)
            }
        },
    )
}

/// `threshold(x, threshold, value)`: `x <= threshold ? value : x`, in `x`'s dtype.
#[aten(
    "aten::threshold",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = Threshold(self_, threshold.to_f64(), value.to_f64())
)]
pub fn threshold(x: &Tensor, th: f64, value: f64) -> Result<Tensor> {
    let d = x.dtype();
    promoted_as(
        Threshold::NAME,
        &[Arg::Tensor(x)],
        d,
        Number::Common,
        d,
        move |p, v, _| {
            let ct = super::super::helpers::compute(d);
            let (t, val) = if d.is_float() {
                (Scalar::Float(conv(th, d)), Scalar::Float(conv(value, d)))
            } else {
                (Scalar::Int(th as i64), Scalar::Int(value as i64))
            };
            let x = p.cast(v[0], ct);
            let t = p.constant(t, ct);
            let val = p.constant(val, ct);
            let le = p.cmp(CmpKind::Le, x, t, ct);
            p.select(le, val, x, ct)
        },
    )
}

/// ELU's coefficients: `alpha`, `scale`, `input_scale`.
#[derive(Clone, Copy)]
struct EluCoefficients {
    alpha: f64,
    scale: f64,
    input_scale: f64,
}

fn elu(name: &str, x: &Tensor, c: EluCoefficients) -> Result<Tensor> {
    act(name, "elu", x, move |e, x| {
        let t = e.mulk(x, c.input_scale);
        let m = e.expm1(t);
        let neg = e.mulk(m, c.alpha * c.scale);
        let pos = e.mulk(x, c.scale);
        let le = e.lek(x, 0.0);
        e.sel(le, neg, pos)
    })
}

/// `log_sigmoid_forward(x)`: the output and the buffer `exp(-|x|)`.
#[aten(
    "aten::log_sigmoid_forward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No),
    call = LogSigmoidForward(self_)
)]
fn log_sigmoid_forward(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let d = x.dtype();
    if !d.is_float() {
        return Err(not_implemented("log_sigmoid_forward", d));
    }
    let op = OpScope::new(LogSigmoidForward::NAME, &[x])?;
    let mut outs = map(&op, &[x], &[d, d], |p, r| {
        let mut e = Ex::new(p);
        let x = e.f(r[0]);
        let a = e.abs(x);
        let na = e.neg(a);
        let z = e.exp(na);
        let l = e.log1p(z);
        let zero = e.k(0.0);
        let m = e.min(x, zero);
        vec![e.sub(m, l), z]
    })?;
    let buffer = outs.pop().expect("two outputs");
    Ok((outs.pop().expect("two outputs"), buffer))
}

/// `log_sigmoid_backward(grad, x, buffer)`: `grad * (max_deriv - sign * z / (1 + z))` with
/// `z = exp(-|x|)`, `max_deriv = x < 0`, `sign = x < 0 ? 1 : -1` (ATen's CPU kernel, which
/// recomputes `z` from `x`).
#[aten(
    "aten::log_sigmoid_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No),
    call = LogSigmoidBackward(grad_output, self_)
)]
fn log_sigmoid_backward(g: &Tensor, x: &Tensor) -> Result<Tensor> {
    grad2(LogSigmoidBackward::NAME, g, x, |e, g, x| {
        let a = e.abs(x);
        let na = e.neg(a);
        let z = e.exp(na);
        let z1 = e.addk(z, 1.0);
        let q = e.div(z, z1);
        let neg = e.ltk(x, 0.0);
        let one_m = e.ksub(1.0, q);
        let r = e.sel(neg, one_m, q);
        e.mul(g, r)
    })
}

/// `min(max(x + 3, 0), 6) / 6`.
fn hard01(e: &mut Ex, x: PRef) -> PRef {
    let t = e.addk(x, 3.0);
    let z = e.k(0.0);
    let t = e.max(t, z);
    let six = e.k(6.0);
    let t = e.min(t, six);
    e.div(t, six)
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::elu", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn elu_op(a: Elu<'_>) -> Result<Tensor> {
    let c = EluCoefficients {
        alpha: a.alpha.to_f64(),
        scale: a.scale.to_f64(),
        input_scale: a.input_scale.to_f64(),
    };
    elu(Elu::NAME, a.self_, c)
}

#[aten("aten::celu", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn celu_op(a: Celu<'_>) -> Result<Tensor> {
    let alpha = a.alpha.to_f64();
    let c = EluCoefficients {
        alpha,
        scale: 1.0,
        input_scale: 1.0 / alpha,
    };
    elu(Celu::NAME, a.self_, c)
}

#[aten("aten::leaky_relu", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn leaky_relu_op(a: LeakyRelu<'_>) -> Result<Tensor> {
    let s = a.negative_slope.to_f64();
    act(LeakyRelu::NAME, "leaky_relu", a.self_, move |e, x| {
        let m = e.mulk(x, s);
        let gt = e.gtk(x, 0.0);
        e.sel(gt, x, m)
    })
}

#[aten("aten::hardsigmoid", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn hardsigmoid_op(a: Hardsigmoid<'_>) -> Result<Tensor> {
    act(Hardsigmoid::NAME, "hardsigmoid", a.self_, hard01)
}

#[aten("aten::hardswish", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn hardswish_op(a: Hardswish<'_>) -> Result<Tensor> {
    act(Hardswish::NAME, "hardswish", a.self_, |e, x| {
        // x * min(max(x + 3, 0), 6) / 6
        let t = e.addk(x, 3.0);
        let z = e.k(0.0);
        let t = e.max(t, z);
        let six = e.k(6.0);
        let t = e.min(t, six);
        let m = e.mul(x, t);
        e.div(m, six)
    })
}

#[aten("aten::softplus", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn softplus_op(a: Softplus<'_>) -> Result<Tensor> {
    let (beta, th) = (a.beta.to_f64(), a.threshold.to_f64());
    act(Softplus::NAME, "softplus", a.self_, move |e, x| {
        let xb = e.mulk(x, beta);
        let ex = e.exp(xb);
        let l = e.log1p(ex);
        let l = e.mulk(l, 1.0 / beta);
        let over = e.gtk(xb, th);
        e.sel(over, x, l)
    })
}

#[aten("aten::mish", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn mish_op(a: Mish<'_>) -> Result<Tensor> {
    act(Mish::NAME, "mish", a.self_, |e, x| {
        let ex = e.exp(x);
        let sp = e.log1p(ex);
        let t = e.tanh(sp);
        e.mul(x, t)
    })
}

#[aten("aten::hardshrink", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn hardshrink_op(a: Hardshrink<'_>) -> Result<Tensor> {
    let l = a.lambd.to_f64();
    act(Hardshrink::NAME, "hardshrink", a.self_, move |e, x| {
        let lo = e.gek(x, -l);
        let hi = e.lek(x, l);
        let inside = e.and(lo, hi);
        e.selk(inside, 0.0, x)
    })
}

#[aten("aten::softshrink", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn softshrink_op(a: Softshrink<'_>) -> Result<Tensor> {
    let l = a.lambd.to_f64();
    act(Softshrink::NAME, "softshrink", a.self_, move |e, x| {
        // a > l ? a - l : (a < -l ? a + l : a * 0)
        let z = e.mulk(x, 0.0);
        let up = e.addk(x, -l);
        let dn = e.addk(x, l);
        let lt = e.ltk(x, -l);
        let r = e.sel(lt, dn, z);
        let gt = e.gtk(x, l);
        e.sel(gt, up, r)
    })
}

#[aten("aten::hardtanh_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn hardtanh_backward_op(a: HardtanhBackward<'_>) -> Result<Tensor> {
    let (lo, hi) = (a.min_val.to_f64(), a.max_val.to_f64());
    grad2(
        HardtanhBackward::NAME,
        a.grad_output,
        a.self_,
        move |e, g, x| {
            let l = e.lek(x, lo);
            let h = e.gek(x, hi);
            let out = e.or(l, h);
            e.selk(out, 0.0, g)
        },
    )
}

#[aten("aten::leaky_relu_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn leaky_relu_backward_op(a: LeakyReluBackward<'_>) -> Result<Tensor> {
    let s = a.negative_slope.to_f64();
    if a.self_is_result && s < 0.0 {
        // From the result, a negative slope cannot tell which side an element came from.
        return Err(TpuError::BadArgs(
            "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. This is caused by calling in-place forward function with a negative slope, please call out-of-place version instead.".into(),
        ));
    }
    grad2(
        LeakyReluBackward::NAME,
        a.grad_output,
        a.self_,
        move |e, g, x| {
            let m = e.mulk(g, s);
            let gt = e.gtk(x, 0.0);
            e.sel(gt, g, m)
        },
    )
}
