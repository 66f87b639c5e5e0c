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

use super::{ALL, Arg, Ex, FLOAT, NUM, Number, float1, not_implemented, promoted_as, t1};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{BinOp, CmpKind, PRef};
use crate::ops::Value;
use crate::ops::args::Args;
use crate::ops::helpers::{OpScope, map};
use crate::ops::registry::{OpDef, OpImpl};
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
fn grad2(
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
        &[Arg::T(g), Arg::T(x)],
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
pub fn hardtanh(x: &Tensor, lo: f64, hi: f64) -> Result<Tensor> {
    let d = x.dtype();
    if d == DType::Bool {
        return Err(not_implemented("hardtanh", d));
    }
    promoted_as(
        "aten::hardtanh",
        &[Arg::T(x)],
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
pub fn threshold(x: &Tensor, th: f64, value: f64) -> Result<Tensor> {
    let d = x.dtype();
    promoted_as(
        "aten::threshold",
        &[Arg::T(x)],
        d,
        Number::Common,
        d,
        move |p, v, _| {
            let ct = super::super::binary::compute(d);
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
struct Elu {
    alpha: f64,
    scale: f64,
    input_scale: f64,
}

fn elu(name: &str, x: &Tensor, c: Elu) -> Result<Tensor> {
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
fn log_sigmoid_forward(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let d = x.dtype();
    if !d.is_float() {
        return Err(not_implemented("log_sigmoid_forward", d));
    }
    let op = OpScope::new("aten::log_sigmoid_forward", &[x])?;
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
fn log_sigmoid_backward(g: &Tensor, x: &Tensor) -> Result<Tensor> {
    grad2("aten::log_sigmoid_backward", g, x, |e, g, x| {
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

fn pw() -> Sharding {
    Sharding::pointwise(Lin::No)
}

fn elu_args(a: &Args, i: usize) -> Result<Elu> {
    Ok(Elu {
        alpha: a.float_or(i, 1.0)?,
        scale: a.float_or(i + 1, 1.0)?,
        input_scale: a.float_or(i + 2, 1.0)?,
    })
}

fn forward_defs() -> Vec<OpDef> {
    let k = OpImpl::Kernel;
    vec![
        OpDef::new("aten::hardtanh", k, NUM, |_, a| {
            t1(hardtanh(
                a.tensor(0)?,
                a.float_or(1, -1.0)?,
                a.float_or(2, 1.0)?,
            ))
        })
        .shard(pw()),
        OpDef::new("aten::threshold", k, ALL, |_, a| {
            t1(threshold(a.tensor(0)?, a.float(1)?, a.float(2)?))
        })
        .shard(pw()),
        OpDef::new("aten::elu", k, FLOAT, |_, a| {
            t1(elu("aten::elu", a.tensor(0)?, elu_args(a, 1)?))
        })
        .shard(pw()),
        OpDef::new("aten::celu", k, FLOAT, |_, a| {
            let alpha = a.float_or(1, 1.0)?;
            let c = Elu {
                alpha,
                scale: 1.0,
                input_scale: 1.0 / alpha,
            };
            t1(elu("aten::celu", a.tensor(0)?, c))
        })
        .shard(pw()),
        OpDef::new("aten::leaky_relu", k, FLOAT, |_, a| {
            let s = a.float_or(1, 0.01)?;
            t1(act(
                "aten::leaky_relu",
                "leaky_relu",
                a.tensor(0)?,
                move |e, x| {
                    let m = e.mulk(x, s);
                    let gt = e.gtk(x, 0.0);
                    e.sel(gt, x, m)
                },
            ))
        })
        .shard(pw()),
        OpDef::new("aten::hardsigmoid", k, FLOAT, |_, a| {
            t1(act(
                "aten::hardsigmoid",
                "hardsigmoid",
                a.tensor(0)?,
                hard01,
            ))
        })
        .shard(pw()),
        OpDef::new("aten::hardswish", k, FLOAT, |_, a| {
            t1(act("aten::hardswish", "hardswish", a.tensor(0)?, |e, x| {
                // x * min(max(x + 3, 0), 6) / 6
                let t = e.addk(x, 3.0);
                let z = e.k(0.0);
                let t = e.max(t, z);
                let six = e.k(6.0);
                let t = e.min(t, six);
                let m = e.mul(x, t);
                e.div(m, six)
            }))
        })
        .shard(pw()),
        OpDef::new("aten::softplus", k, FLOAT, |_, a| {
            let (beta, th) = (a.float_or(1, 1.0)?, a.float_or(2, 20.0)?);
            t1(act(
                "aten::softplus",
                "softplus",
                a.tensor(0)?,
                move |e, x| {
                    let xb = e.mulk(x, beta);
                    let ex = e.exp(xb);
                    let l = e.log1p(ex);
                    let l = e.mulk(l, 1.0 / beta);
                    let over = e.gtk(xb, th);
                    e.sel(over, x, l)
                },
            ))
        })
        .shard(pw()),
        OpDef::new("aten::mish", k, FLOAT, |_, a| {
            t1(act("aten::mish", "mish", a.tensor(0)?, |e, x| {
                let ex = e.exp(x);
                let sp = e.log1p(ex);
                let t = e.tanh(sp);
                e.mul(x, t)
            }))
        })
        .shard(pw()),
        OpDef::new("aten::hardshrink", k, FLOAT, |_, a| {
            let l = a.float_or(1, 0.5)?;
            t1(act(
                "aten::hardshrink",
                "hardshrink",
                a.tensor(0)?,
                move |e, x| {
                    let lo = e.gek(x, -l);
                    let hi = e.lek(x, l);
                    let inside = e.and(lo, hi);
                    e.selk(inside, 0.0, x)
                },
            ))
        })
        .shard(pw()),
        OpDef::new("aten::softshrink", k, FLOAT, |_, a| {
            let l = a.float_or(1, 0.5)?;
            t1(act(
                "aten::softshrink",
                "softshrink",
                a.tensor(0)?,
                move |e, x| {
                    // a > l ? a - l : (a < -l ? a + l : a * 0)
                    let z = e.mulk(x, 0.0);
                    let up = e.addk(x, -l);
                    let dn = e.addk(x, l);
                    let lt = e.ltk(x, -l);
                    let r = e.sel(lt, dn, z);
                    let gt = e.gtk(x, l);
                    e.sel(gt, up, r)
                },
            ))
        })
        .shard(pw()),
        OpDef::new("aten::log_sigmoid_forward", k, FLOAT, |_, a| {
            let (o, b) = log_sigmoid_forward(a.tensor(0)?)?;
            Ok(vec![Value::Tensor(o), Value::Tensor(b)])
        })
        .shard(pw()),
    ]
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

fn backward_defs() -> Vec<OpDef> {
    let k = OpImpl::Kernel;
    vec![
        OpDef::new("aten::hardtanh_backward", k, FLOAT, |_, a| {
            let (lo, hi) = (a.float(2)?, a.float(3)?);
            t1(grad2(
                "aten::hardtanh_backward",
                a.tensor(0)?,
                a.tensor(1)?,
                move |e, g, x| {
                    let l = e.lek(x, lo);
                    let h = e.gek(x, hi);
                    let out = e.or(l, h);
                    e.selk(out, 0.0, g)
                },
            ))
        })
        .shard(pw()),
        OpDef::new("aten::leaky_relu_backward", k, FLOAT, |_, a| {
            let s = a.float(2)?;
            t1(grad2(
                "aten::leaky_relu_backward",
                a.tensor(0)?,
                a.tensor(1)?,
                move |e, g, x| {
                    let m = e.mulk(g, s);
                    let gt = e.gtk(x, 0.0);
                    e.sel(gt, g, m)
                },
            ))
        })
        .shard(pw()),
        OpDef::new("aten::log_sigmoid_backward", k, FLOAT, |_, a| {
            t1(log_sigmoid_backward(a.tensor(0)?, a.tensor(1)?))
        })
        .shard(pw()),
    ]
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let mut v = forward_defs();
    v.extend(backward_defs());
    v
}
