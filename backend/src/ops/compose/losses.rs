//! Pointwise losses: the loss of each element is one elementwise kernel (computed in f32,
//! rounded once to the inputs' dtype, as PyTorch's CPU loss kernels compute in their opmath
//! type), then PyTorch's reduction: `0` none, `1` the mean, `2` the sum (`mean` and `sum`
//! accumulate in f32).
//!
//! - `mse_loss`: `(x - y)^2`; `mse_loss_backward`: `norm (x - y) g`, `norm = 2 / numel` for the
//!   mean, else 2;
//! - `huber_loss`: `z = |x - y|`, `z < delta ? z^2 / 2 : delta (z - delta / 2)`;
//! - `smooth_l1_loss`: `z < beta ? z^2 / (2 beta) : z - beta / 2` (`beta = 0`: `z`);
//! - `soft_margin_loss`: `log1p(exp(-y x))`;
//! - `binary_cross_entropy`: `(y - 1) max(log1p(-x), -100) - y max(log x, -100)`, times the
//!   weight (PyTorch checks that the inputs lie in [0, 1]; that check would read them back, so
//!   here other inputs give what the formula gives);
//! - `binary_cross_entropy_with_logits`: `(1 - y) x - w_p log_sigmoid(x)` with `w_p = (p - 1) y
//!   + 1` for a `pos_weight` `p`, times the weight.

use super::{op, tv};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::pointwise::{Arg, Ex, Number, float_out, promoted};
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// One elementwise kernel over `ts` (promoted together, computed in f32); `f` also gets the
/// common dtype, to round where PyTorch's composite rounds.
pub(super) fn elementwise(
    name: &str,
    ts: &[&Tensor],
    f: impl FnOnce(&mut Ex, &[PRef], DType) -> PRef,
) -> Result<Tensor> {
    let args: Vec<Arg> = ts.iter().map(|t| Arg::Tensor(t)).collect();
    promoted(name, &args, Number::Common, float_out, |p, v, c| {
        let v: Vec<PRef> = v.iter().map(|x| p.cast(*x, DType::F32)).collect();
        f(&mut Ex::new(p), &v, c)
    })
}

/// `v` rounded to `d` and back to f32: one operator of a composite that PyTorch runs in `d`.
fn rnd(e: &mut Ex, v: PRef, d: DType) -> PRef {
    if d == DType::F32 {
        return v;
    }
    let r = e.p.cast(v, d);
    e.p.cast(r, DType::F32)
}

/// PyTorch's `apply_loss_reduction`.
fn reduce(rt: &Runtime, l: Tensor, reduction: i64) -> Result<Tensor> {
    match reduction {
        0 => Ok(l),
        1 => op(rt, "aten::mean", vec![tv(&l)]),
        2 => op(rt, "aten::sum", vec![tv(&l)]),
        r => Err(TpuError::BadArgs(format!(
            "{r} is not a valid value for reduction"
        ))),
    }
}

pub(super) fn need_float(name: &str, ts: &[&Tensor]) -> Result<()> {
    match ts.iter().find(|t| !t.dtype().is_float()) {
        Some(t) => Err(TpuError::Unsupported(format!(
            "{name}: expected a floating tensor, got {}",
            t.dtype().name()
        ))),
        None => Ok(()),
    }
}

/// `|x - y|`.
fn absdiff(e: &mut Ex, v: &[PRef]) -> PRef {
    let d = e.sub(v[0], v[1]);
    e.abs(d)
}

/// `mse_loss(x, y, reduction)`.
#[aten(
    "aten::mse_loss",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(REDUCED),
    kind = Decomposition,
    call = MseLoss(rt, self_, target, reduction)
)]
pub fn mse_loss(rt: &Runtime, x: &Tensor, y: &Tensor, reduction: i64) -> Result<Tensor> {
    need_float(MseLoss::NAME, &[x, y])?;
    let l = elementwise(MseLoss::NAME, &[x, y], |e, v, _| {
        let d = e.sub(v[0], v[1]);
        e.mul(d, d)
    })?;
    reduce(rt, l, reduction)
}

/// `mse_loss_backward(grad, x, y, reduction)`.
#[aten(
    "aten::mse_loss_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("the mean's scale needs the global count: no sharding rule yet"),
    call = MseLossBackward(grad_output, self_, target, reduction)
)]
pub fn mse_loss_backward(g: &Tensor, x: &Tensor, y: &Tensor, reduction: i64) -> Result<Tensor> {
    need_float(MseLossBackward::NAME, &[g, x, y])?;
    let norm = if reduction == 1 {
        2.0 / x.numel() as f64
    } else {
        2.0
    };
    elementwise(MseLossBackward::NAME, &[g, x, y], |e, v, _| {
        let d = e.sub(v[1], v[2]);
        let d = e.mulk(d, norm);
        e.mul(d, v[0])
    })
}

/// `huber_loss(x, y, reduction, delta)`.
#[aten(
    "aten::huber_loss",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(REDUCED),
    kind = Decomposition,
    call = HuberLoss(rt, self_, target, reduction, delta)
)]
pub fn huber_loss(
    rt: &Runtime,
    x: &Tensor,
    y: &Tensor,
    reduction: i64,
    delta: f64,
) -> Result<Tensor> {
    need_float(HuberLoss::NAME, &[x, y])?;
    let l = elementwise(HuberLoss::NAME, &[x, y], |e, v, _| {
        let z = absdiff(e, v);
        let small = e.ltk(z, delta);
        let zz = e.mul(z, z);
        let q = e.mulk(zz, 0.5);
        let lin = e.addk(z, -0.5 * delta);
        let lin = e.mulk(lin, delta);
        e.sel(small, q, lin)
    })?;
    reduce(rt, l, reduction)
}

/// `smooth_l1_loss(x, y, reduction, beta)`.
#[aten(
    "aten::smooth_l1_loss",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(REDUCED),
    kind = Decomposition,
    call = SmoothL1Loss(rt, self_, target, reduction, beta)
)]
pub fn smooth_l1_loss(
    rt: &Runtime,
    x: &Tensor,
    y: &Tensor,
    reduction: i64,
    beta: f64,
) -> Result<Tensor> {
    need_float(SmoothL1Loss::NAME, &[x, y])?;
    if beta < 0.0 {
        return Err(TpuError::BadArgs(
            "smooth_l1_loss does not support negative values for beta.".into(),
        ));
    }
    let l = elementwise(SmoothL1Loss::NAME, &[x, y], |e, v, _| {
        let z = absdiff(e, v);
        if beta == 0.0 {
            return z;
        }
        let small = e.ltk(z, beta);
        let zz = e.mul(z, z);
        let q = e.mulk(zz, 0.5 / beta);
        let lin = e.addk(z, -0.5 * beta);
        e.sel(small, q, lin)
    })?;
    reduce(rt, l, reduction)
}

/// `soft_margin_loss(x, y, reduction)`.
#[aten(
    "aten::soft_margin_loss",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(REDUCED),
    kind = Decomposition,
    call = SoftMarginLoss(rt, self_, target, reduction)
)]
pub fn soft_margin_loss(rt: &Runtime, x: &Tensor, y: &Tensor, reduction: i64) -> Result<Tensor> {
    need_float(SoftMarginLoss::NAME, &[x, y])?;
    // PyTorch's composite, `log1p(exp(-x * y))`, rounds after each operator.
    let l = elementwise(SoftMarginLoss::NAME, &[x, y], |e, v, d| {
        let m = e.neg(v[0]);
        let m = e.mul(m, v[1]);
        let m = rnd(e, m, d);
        let x = e.exp(m);
        let x = rnd(e, x, d);
        e.log1p(x)
    })?;
    reduce(rt, l, reduction)
}

/// `binary_cross_entropy(x, y, weight, reduction)`.
#[aten(
    "aten::binary_cross_entropy",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(REDUCED),
    kind = Decomposition,
    call = BinaryCrossEntropy(rt, self_, target, weight, reduction)
)]
pub fn binary_cross_entropy(
    rt: &Runtime,
    x: &Tensor,
    y: &Tensor,
    w: Option<&Tensor>,
    reduction: i64,
) -> Result<Tensor> {
    let mut ts = vec![x, y];
    ts.extend(w);
    need_float(BinaryCrossEntropy::NAME, &ts)?;
    if x.shape() != y.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "Using a target size ({:?}) that is different to the input size ({:?}) is deprecated. Please ensure they have the same size.",
            y.shape(),
            x.shape()
        )));
    }
    let l = elementwise(BinaryCrossEntropy::NAME, &ts, |e, v, _| {
        let lo = e.k(-100.0);
        let nx = e.neg(v[0]);
        let l1 = e.log1p(nx);
        let l1 = e.max(l1, lo);
        let l0 = e.log(v[0]);
        let l0 = e.max(l0, lo);
        let ym = e.addk(v[1], -1.0);
        let a = e.mul(ym, l1);
        let b = e.mul(v[1], l0);
        let r = e.sub(a, b);
        if v.len() > 2 { e.mul(r, v[2]) } else { r }
    })?;
    reduce(rt, l, reduction)
}

/// `log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))`.
fn log_sigmoid(e: &mut Ex, x: PRef) -> PRef {
    let zero = e.k(0.0);
    let m = e.min(x, zero);
    let a = e.abs(x);
    let a = e.neg(a);
    let ex = e.exp(a);
    let l = e.log1p(ex);
    e.sub(m, l)
}

/// `binary_cross_entropy_with_logits(x, y, weight, pos_weight, reduction)`.
#[aten(
    "aten::binary_cross_entropy_with_logits",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(REDUCED),
    kind = Decomposition,
    call = BinaryCrossEntropyWithLogits(rt, self_, target, weight, pos_weight, reduction)
)]
pub fn bce_with_logits(
    rt: &Runtime,
    x: &Tensor,
    y: &Tensor,
    w: Option<&Tensor>,
    pw: Option<&Tensor>,
    reduction: i64,
) -> Result<Tensor> {
    let name = BinaryCrossEntropyWithLogits::NAME;
    let mut ts = vec![x, y];
    ts.extend(w);
    ts.extend(pw);
    need_float(name, &ts)?;
    let (has_w, has_pw) = (w.is_some(), pw.is_some());
    // PyTorch's composite rounds after each operator: `log_sigmoid(x)`, then `(p - 1) * y + 1`
    // and the product with it, `(1 - y) * x`, the difference, the weight.
    let l = elementwise(name, &ts, |e, v, d| {
        let mut ls = log_sigmoid(e, v[0]);
        ls = rnd(e, ls, d);
        if has_pw {
            let p = v[if has_w { 3 } else { 2 }];
            let pm = e.addk(p, -1.0);
            let pm = rnd(e, pm, d);
            let lw = e.mul(pm, v[1]);
            let lw = rnd(e, lw, d);
            let lw = e.addk(lw, 1.0);
            let lw = rnd(e, lw, d);
            ls = e.mul(ls, lw);
            ls = rnd(e, ls, d);
        }
        let om = e.ksub(1.0, v[1]);
        let om = rnd(e, om, d);
        let a = e.mul(om, v[0]);
        let a = rnd(e, a, d);
        let r = e.sub(a, ls);
        if has_w {
            let r = rnd(e, r, d);
            e.mul(r, v[2])
        } else {
            r
        }
    })?;
    reduce(rt, l, reduction)
}

/// Why the losses replicate.
const REDUCED: &str = "a loss reduced over every element: no sharding rule yet";
