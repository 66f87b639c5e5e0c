//! Softmaxes, norms and losses.
//!
//! - `_softmax`, `_log_softmax`: sharded along any dimension but the softmax one (a shard of
//!   that dimension is gathered first); their backwards also keep a partial gradient partial
//!   (they are linear in it).
//! - `native_layer_norm`, `rms_norm`: sharded along the leading (not normalised) dimensions,
//!   weight and bias replicated; `native_layer_norm_backward` then gives partial weight and
//!   bias gradients (each rank's rows' contribution), and is linear in the incoming gradient.
//! - `nll_loss_forward`, `nll_loss2d_forward`: sharded along the batch (and spatial)
//!   dimensions with the target alike: `reduction="none"` keeps the shard, `"sum"` gives a
//!   partial loss, and `"mean"` is computed as the partial sum divided by the all-reduced total
//!   weight. Linear in the log-probabilities: a partial input gives a partial loss.
//!   `nll_loss_backward` follows the same shards and is linear in the incoming gradient.

use super::super::api::DTensor;
use super::super::placement::Placement;
use super::super::value::DValue;
use super::{OpCtx, P, R, Rule, Strategy, s, st};
use crate::error::Result;
use crate::layout::wrap_dim;
use tpuemu_backend::ops::Value;
use tpuemu_backend::ops::sharding::{Sharding, Special};

pub(crate) fn rule(special: Special) -> Option<Rule> {
    Some(match special {
        Special::Softmax => Rule::new("nn", softmax),
        Special::SoftmaxBackward => Rule::new("nn", softmax_backward),
        Special::LayerNorm | Special::RmsNorm => Rule::new("nn", norm),
        Special::LayerNormBackward => Rule::new("nn", norm_backward),
        Special::NllLoss => Rule::new("nn", nll).special(nll_mean),
        Special::NllLossBackward => Rule::new("nn", nll_backward),
        _ => return None,
    })
}

fn softmax(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let dim = wrap_dim(ctx.plain.int(1)?, ctx.ndim(0))?;
    let mut c: Vec<Strategy> = (0..ctx.ndim(0))
        .filter(|d| *d != dim && ctx.shape(0)[*d] > 1)
        .map(|d| st(&[s(d)], &[s(d)]))
        .collect();
    c.push(ctx.replicate(1));
    Ok(c)
}

fn softmax_backward(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let dim = wrap_dim(ctx.plain.int(2)?, ctx.ndim(0))?;
    let mut c: Vec<Strategy> = (0..ctx.ndim(0))
        .filter(|d| *d != dim && ctx.shape(0)[*d] > 1)
        .map(|d| st(&[s(d), s(d)], &[s(d)]))
        .collect();
    c.push(st(&[P, R], &[P]));
    c.push(ctx.replicate(1));
    Ok(c)
}

/// Leading (not normalised) dimensions of a norm's input.
fn leading(ctx: &OpCtx, input: usize) -> Result<Vec<usize>> {
    // normalized_shape: argument 2 of the backward, 1 of the forwards.
    let at = if ctx.sharding == Sharding::Special(Special::LayerNormBackward) {
        2
    } else {
        1
    };
    let n = ctx.plain.ints(at)?.len();
    let nd = ctx.ndim(input);
    Ok((0..nd.saturating_sub(n))
        .filter(|d| ctx.shape(input)[*d] > 1)
        .collect())
}

fn norm(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let outs = if ctx.sharding == Sharding::Special(Special::RmsNorm) {
        1
    } else {
        3
    };
    let mut c: Vec<Strategy> = leading(ctx, 0)?
        .into_iter()
        .map(|d| ctx.first_only(s(d), &vec![s(d); outs]))
        .collect();
    c.push(ctx.replicate(outs));
    Ok(c)
}

fn norm_backward(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    // Inputs: grad_out, input, mean, rstd, [weight], [bias].
    let n = ctx.inputs.len();
    let mut c: Vec<Strategy> = leading(ctx, 1)?
        .into_iter()
        .map(|d| {
            let mut ins = vec![s(d); 4];
            ins.resize(n, R);
            st(&ins, &[s(d), P, P])
        })
        .collect();
    c.push(ctx.first_only(P, &[P, P, P]));
    c.push(ctx.replicate(3));
    Ok(c)
}

/// `(self dim, target dim)` pairs a loss can shard along: every dimension but the class one.
fn loss_dims(x: &[usize]) -> Vec<(usize, usize)> {
    match x.len() {
        0 | 1 => Vec::new(),
        _ => (0..x.len())
            .filter(|d| *d != 1 && x[*d] > 1)
            .map(|d| (d, if d == 0 { 0 } else { d - 1 }))
            .collect(),
    }
}

fn nll(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let reduction = ctx.plain.int(3)?;
    let n = ctx.inputs.len();
    let mut c = Vec::new();
    for (d, td) in loss_dims(ctx.shape(0)) {
        let mut ins = vec![s(d), s(td)];
        ins.resize(n, R);
        match reduction {
            0 => c.push(st(&ins, &[s(td), R])),
            2 => c.push(st(&ins, &[P, P])),
            _ => {}
        }
    }
    c.push(ctx.first_only(P, &[P, R]));
    c.push(ctx.replicate(2));
    Ok(c)
}

/// `reduction="mean"` over a sharded batch: the partial sum over the local samples, divided by
/// the total weight of all of them.
fn nll_mean(ctx: &OpCtx) -> Result<Option<Vec<DValue>>> {
    if ctx.plain.int(3)? != 1 {
        return Ok(None);
    }
    let dims = loss_dims(ctx.shape(0));
    let sharded = ctx.inputs[0]
        .placements
        .iter()
        .any(|p| p.shard_dim().is_some_and(|d| dims.iter().any(|x| x.0 == d)));
    if !sharded {
        return Ok(None);
    }
    let mut args: Vec<DValue> = ctx.args.to_vec();
    args[3] = DValue::Value(Value::Int(2));
    let out = (ctx.call)(ctx.mesh, ctx.name, args)?;
    let (sum, total) = (tensor(&out[0])?, tensor(&out[1])?);
    let total = total.redistribute(&vec![Placement::Replicate; ctx.mesh.ndim()])?;
    let loss = (ctx.call)(
        ctx.mesh,
        "aten::div.Tensor",
        vec![DValue::Tensor(sum), DValue::Tensor(total.clone())],
    )?;
    Ok(Some(vec![loss[0].clone(), DValue::Tensor(total)]))
}

fn tensor(v: &DValue) -> Result<DTensor> {
    match v {
        DValue::Tensor(t) => Ok(t.clone()),
        _ => Err(crate::error::TpuError::Device(
            "expected a DTensor result".into(),
        )),
    }
}

fn nll_backward(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    // Inputs: grad_output, self, target, [weight], total_weight.
    let reduction = ctx.plain.int(4)?;
    let n = ctx.inputs.len();
    let mut c = Vec::new();
    for (d, td) in loss_dims(ctx.shape(1)) {
        let g = if reduction == 0 { s(td) } else { R };
        let mut ins = vec![g, s(d), s(td)];
        ins.resize(n, R);
        c.push(st(&ins, &[s(d)]));
    }
    c.push(ctx.first_only(P, &[P]));
    c.push(ctx.replicate(1));
    Ok(c)
}
