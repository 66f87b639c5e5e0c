//! The backward kernels autograd calls for the pointwise losses of [`super::losses`], each
//! ATen's CPU formula in f32, rounded once to the dtype (`norm` is `1 / numel` for the mean,
//! else 1; `x = input - target`; `g` the incoming gradient, a scalar for a reduced loss):
//!
//! - `smooth_l1_loss_backward`: `x <= -beta ? -norm g : x >= beta ? norm g : norm x g / beta`
//!   (`beta <= 0`: `l1_loss`'s, `norm sign(x) g`);
//! - `huber_loss_backward`: `x <= -delta ? -norm g delta : x >= delta ? norm g delta : norm x g`;
//! - `binary_cross_entropy_backward`: `g (input - target) / max((1 - input) input, 1e-12)`,
//!   times the weight, times `norm`.

use super::losses::{elementwise, need_float};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::pointwise::Ex;
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

const SCALE: Sharding =
    Sharding::Replicate("the mean's scale needs the global count: no sharding rule yet");

/// `1 / numel` for the mean (reduction 1), else 1.
fn norm(x: &Tensor, reduction: i64) -> f64 {
    if reduction == 1 {
        1.0 / x.numel().max(1) as f64
    } else {
        1.0
    }
}

/// A pointwise loss's gradient: `f(z, ng)` of `z = input - target` and `ng = norm g`.
fn loss_grad(
    name: &str,
    (g, x, y): (&Tensor, &Tensor, &Tensor),
    reduction: i64,
    f: impl FnOnce(&mut Ex, PRef, PRef) -> PRef,
) -> Result<Tensor> {
    need_float(name, &[g, x, y])?;
    let n = norm(x, reduction);
    elementwise(name, &[g, x, y], move |e, v, _| {
        let z = e.sub(v[1], v[2]);
        let ng = e.mulk(v[0], n);
        f(e, z, ng)
    })
}

#[aten("aten::smooth_l1_loss_backward", dtypes = DType::FLOATING, shard = SCALE)]
fn smooth_l1_loss_backward_op(a: SmoothL1LossBackward<'_>) -> Result<Tensor> {
    let beta = a.beta;
    let args = (a.grad_output, a.self_, a.target);
    loss_grad(
        SmoothL1LossBackward::NAME,
        args,
        a.reduction,
        move |e, z, ng| {
            let minus = e.mulk(ng, -1.0);
            if beta <= 0.0 {
                let pos = e.gtk(z, 0.0);
                let neg = e.ltk(z, 0.0);
                let zero = e.k(0.0);
                let r = e.sel(neg, minus, zero);
                return e.sel(pos, ng, r);
            }
            let lo = e.lek(z, -beta);
            let hi = e.gek(z, beta);
            let zg = e.mul(z, ng);
            let mid = e.mulk(zg, 1.0 / beta);
            let r = e.sel(hi, ng, mid);
            e.sel(lo, minus, r)
        },
    )
}

#[aten("aten::huber_loss_backward", dtypes = DType::FLOATING, shard = SCALE)]
fn huber_loss_backward_op(a: HuberLossBackward<'_>) -> Result<Tensor> {
    let delta = a.delta;
    let args = (a.grad_output, a.self_, a.target);
    loss_grad(
        HuberLossBackward::NAME,
        args,
        a.reduction,
        move |e, z, ng| {
            let lo = e.lek(z, -delta);
            let hi = e.gek(z, delta);
            let up = e.mulk(ng, delta);
            let dn = e.mulk(ng, -delta);
            let mid = e.mul(z, ng);
            let r = e.sel(hi, up, mid);
            e.sel(lo, dn, r)
        },
    )
}

#[aten("aten::binary_cross_entropy_backward", dtypes = DType::FLOATING, shard = SCALE)]
fn binary_cross_entropy_backward_op(a: BinaryCrossEntropyBackward<'_>) -> Result<Tensor> {
    let (g, x, y) = (a.grad_output, a.self_, a.target);
    let mut ts = vec![g, x, y];
    ts.extend(a.weight);
    need_float(BinaryCrossEntropyBackward::NAME, &ts)?;
    let n = norm(x, a.reduction);
    elementwise(BinaryCrossEntropyBackward::NAME, &ts, move |e, v, _| {
        let d = e.sub(v[1], v[2]);
        let num = e.mul(v[0], d);
        let one_m = e.ksub(1.0, v[1]);
        let den = e.mul(one_m, v[1]);
        let floor = e.k(1e-12);
        let den = e.max(den, floor);
        let r = e.div(num, den);
        let r = if v.len() == 4 { e.mul(r, v[3]) } else { r };
        e.mulk(r, n)
    })
}
