//! The backward formulas autograd calls for `hardsigmoid`, `softplus`, `hardshrink`,
//! `softshrink` and `logit`, each ATen's CPU kernel formula computed in f32 and rounded once
//! to the dtype (as [`super::activations`]):
//!
//! - `hardsigmoid_backward`: `-3 < x < 3 ? g / 6 : 0`;
//! - `softplus_backward`: `x * beta > threshold ? g : g * z / (z + 1)` with `z = exp(x * beta)`;
//! - `hardshrink_backward`, `softshrink_backward` (ATen's `shrink_backward`):
//!   `-lambd <= x <= lambd ? 0 : g`;
//! - `logit_backward`: outside `[lo, hi]` NaN (no `eps`: `[0, 1]`) or 0 (with `eps`:
//!   `[eps, 1 - eps]`), else `g / (x (1 - x))` (at 0 and 1 that is `g * inf`, as ATen's).

use super::activations::grad2;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

#[aten("aten::hardsigmoid_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn hardsigmoid_backward_op(a: HardsigmoidBackward<'_>) -> Result<Tensor> {
    grad2(
        HardsigmoidBackward::NAME,
        a.grad_output,
        a.self_,
        |e, g, x| {
            let lo = e.gtk(x, -3.0);
            let hi = e.ltk(x, 3.0);
            let inside = e.and(lo, hi);
            let s = e.mulk(g, 1.0 / 6.0);
            let z = e.k(0.0);
            e.sel(inside, s, z)
        },
    )
}

#[aten("aten::softplus_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn softplus_backward_op(a: SoftplusBackward<'_>) -> Result<Tensor> {
    let (beta, threshold) = (a.beta.to_f64(), a.threshold.to_f64());
    grad2(
        SoftplusBackward::NAME,
        a.grad_output,
        a.self_,
        move |e, g, x| {
            let xb = e.mulk(x, beta);
            let z = e.exp(xb);
            let z1 = e.addk(z, 1.0);
            let gz = e.mul(g, z);
            let soft = e.div(gz, z1);
            let linear = e.gtk(xb, threshold);
            e.sel(linear, g, soft)
        },
    )
}

/// ATen's `shrink_backward`: the gradient passes outside `[-lambd, lambd]`.
fn shrink_backward(name: &str, g: &Tensor, x: &Tensor, lambd: f64) -> Result<Tensor> {
    grad2(name, g, x, move |e, g, x| {
        let lo = e.gek(x, -lambd);
        let hi = e.lek(x, lambd);
        let inside = e.and(lo, hi);
        let z = e.k(0.0);
        e.sel(inside, z, g)
    })
}

#[aten("aten::hardshrink_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn hardshrink_backward_op(a: HardshrinkBackward<'_>) -> Result<Tensor> {
    shrink_backward(
        HardshrinkBackward::NAME,
        a.grad_out,
        a.self_,
        a.lambd.to_f64(),
    )
}

#[aten("aten::softshrink_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn softshrink_backward_op(a: SoftshrinkBackward<'_>) -> Result<Tensor> {
    shrink_backward(
        SoftshrinkBackward::NAME,
        a.grad_output,
        a.self_,
        a.lambd.to_f64(),
    )
}

#[aten("aten::logit_backward", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn logit_backward_op(a: LogitBackward<'_>) -> Result<Tensor> {
    let (lo, hi, outside) = match a.eps {
        Some(eps) if eps >= 0.0 => (eps, 1.0 - eps, 0.0),
        _ => (0.0, 1.0, f64::NAN),
    };
    grad2(
        LogitBackward::NAME,
        a.grad_output,
        a.self_,
        move |e, g, x| {
            let below = e.ltk(x, lo);
            let above = e.gtk(x, hi);
            let out = e.or(below, above);
            let one_m = e.ksub(1.0, x);
            let den = e.mul(x, one_m);
            let r = e.div(g, den);
            e.selk(out, outside, r)
        },
    )
}
