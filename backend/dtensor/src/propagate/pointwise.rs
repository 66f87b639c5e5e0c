//! Elementwise operators: every input broadcasts to the output, so the output can be sharded
//! along any of its dimensions with each input sharded along the matching dimension (or
//! replicated where it broadcasts). Linear operators also keep `Partial(sum)`:
//!
//! - `add`, `sub`, `neg`, `clone`, `_to_copy`, `contiguous`, `mul`/`div` by a number: all
//!   partial inputs give a partial output (a replicated operand of `add`/`sub` becomes partial
//!   by keeping it on one rank, which costs nothing);
//! - `mul.Tensor`: one operand partial, the other replicated;
//! - `div.Tensor` and the activation backwards (`gelu_backward`, `threshold_backward`, ...):
//!   the first operand (the numerator, the incoming gradient) partial, the rest replicated.

use super::{OpCtx, R, Rule, Strategy, st};
use crate::error::Result;
use crate::layout::broadcast_shapes;
use tpuemu_backend::ops::sharding::{Lin, Sharding};

use super::super::placement::Placement;

pub(crate) fn rule(inplace: bool) -> Rule {
    let r = Rule::new("pointwise", candidates);
    if inplace { r.inplace() } else { r }
}

/// The placement an input of `shape` needs for an output of `out` sharded along `d`.
pub(crate) fn broadcast_input(out: &[usize], shape: &[usize], d: usize) -> Placement {
    let off = out.len() - shape.len().min(out.len());
    if d >= off && shape[d - off] == out[d] {
        Placement::Shard(d - off)
    } else {
        R
    }
}

/// The broadcast shape of every input.
pub(crate) fn out_shape(ctx: &OpCtx) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::new();
    for t in &ctx.inputs {
        out = broadcast_shapes(&out, &t.shape)?;
    }
    // An in-place operator writes its first input: the output has its shape.
    if matches!(ctx.sharding, Sharding::Pointwise { inplace: true, .. }) {
        out = ctx.inputs[0].shape.clone();
    }
    Ok(out)
}

/// The output sharded along each of its dimensions (of size above 1), inputs following.
pub(crate) fn shard_strategies(ctx: &OpCtx, out: &[usize]) -> Vec<Strategy> {
    (0..out.len())
        .filter(|d| out[*d] > 1)
        .map(|d| {
            let ins: Vec<Placement> = ctx
                .inputs
                .iter()
                .map(|t| broadcast_input(out, &t.shape, d))
                .collect();
            st(&ins, &[Placement::Shard(d)])
        })
        .collect()
}

fn candidates(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let out = out_shape(ctx)?;
    let mut c = shard_strategies(ctx, &out);
    let n = ctx.inputs.len();
    let p = Placement::PARTIAL;
    let mut l = match ctx.sharding {
        Sharding::Pointwise { lin, .. } => lin,
        _ => Lin::No,
    };
    // A cast to an integer type is not linear (it truncates each term).
    if ctx.name == "aten::_to_copy" && ctx.plain.opt_dtype(1)?.is_some_and(|d| !d.is_float()) {
        l = Lin::No;
    }
    match l {
        Lin::No => {}
        Lin::All => c.push(st(&vec![p; n], &[p])),
        Lin::First => c.push(ctx.first_only(p, &[p])),
        Lin::Either => {
            c.push(ctx.first_only(p, &[p]));
            if n == 2 {
                c.push(st(&[R, p], &[p]));
            }
        }
    }
    c.push(ctx.replicate(1));
    Ok(c)
}
