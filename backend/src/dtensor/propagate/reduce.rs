//! Reductions. Sharding along a kept dimension stays (shifted past removed dimensions). Along
//! a reduced dimension: `sum` and `mean` give `Partial(sum)` (`mean` scales each rank's term by
//! `1/shards`), `amax`/`max` give `Partial(max)` and `amin`/`min` `Partial(min)`; the others
//! (`prod`, `max.dim`/`min.dim` and their indices, `argmax`/`argmin`, `var`, `std`) need the
//! reduced dimensions whole, so those are gathered first. A `Partial(sum)` input stays partial
//! through `sum` and `mean`, a `Partial(max)` through `amax`/`max` (and min alike).

use super::super::placement::{Placement, Reduce};
use super::{Chosen, OpCtx, R, Rule, Strategy, st};
use crate::error::Result;
use crate::ops::Value;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Other,
}

/// What a call reduces: its kind, the reduced dimensions (sorted), keepdim, outputs.
type Reduction = (Kind, Vec<usize>, bool, usize);

/// What the call reduces (`None`: not a reduction this module shards).
fn parse(ctx: &OpCtx) -> Result<Option<Reduction>> {
    let nd = ctx.ndim(0);
    let a = &ctx.plain;
    let all: Vec<usize> = (0..nd).collect();
    let dims = |v: Option<Vec<i64>>| -> Result<Vec<usize>> {
        match v {
            None => Ok(all.clone()),
            Some(v) if v.is_empty() => Ok(all.clone()),
            Some(v) => crate::ops::helpers::dims_of(&v, nd, true),
        }
    };
    let one =
        |i: usize| -> Result<Vec<usize>> { Ok(vec![crate::layout::wrap_dim(a.int(i)?, nd)?]) };
    let (kind, mut d, keep, outs) = match ctx.name {
        "aten::sum" => (Kind::Sum, all.clone(), false, 1),
        "aten::mean" => (Kind::Mean, all.clone(), false, 1),
        "aten::sum.dim_IntList" => (Kind::Sum, dims(a.opt_ints(1)?)?, a.bool_or(2, false)?, 1),
        "aten::mean.dim" => (Kind::Mean, dims(a.opt_ints(1)?)?, a.bool_or(2, false)?, 1),
        "aten::prod" => (Kind::Other, all.clone(), false, 1),
        "aten::prod.dim_int" => (Kind::Other, one(1)?, a.bool_or(2, false)?, 1),
        "aten::amax" => (Kind::Max, dims(a.opt_ints(1)?)?, a.bool_or(2, false)?, 1),
        "aten::amin" => (Kind::Min, dims(a.opt_ints(1)?)?, a.bool_or(2, false)?, 1),
        "aten::max" => (Kind::Max, all.clone(), false, 1),
        "aten::min" => (Kind::Min, all.clone(), false, 1),
        "aten::max.dim" | "aten::min.dim" => (Kind::Other, one(1)?, a.bool_or(2, false)?, 2),
        "aten::argmax" | "aten::argmin" => match a.opt_int(1)? {
            // Without a dimension: the index into the flattened tensor.
            None => (Kind::Other, all.clone(), false, 1),
            Some(_) => (Kind::Other, one(1)?, a.bool_or(2, false)?, 1),
        },
        "aten::var.correction" | "aten::std.correction" => {
            (Kind::Other, dims(a.opt_ints(1)?)?, a.bool_or(3, false)?, 1)
        }
        _ => return Ok(None),
    };
    d.sort_unstable();
    d.dedup();
    Ok(Some((kind, d, keep, outs)))
}

const NAMES: &[&str] = &[
    "aten::sum",
    "aten::sum.dim_IntList",
    "aten::mean",
    "aten::mean.dim",
    "aten::prod",
    "aten::prod.dim_int",
    "aten::amax",
    "aten::amin",
    "aten::max",
    "aten::min",
    "aten::max.dim",
    "aten::min.dim",
    "aten::argmax",
    "aten::argmin",
    "aten::var.correction",
    "aten::std.correction",
];

pub(crate) fn rule(name: &str) -> Option<Rule> {
    NAMES
        .contains(&name)
        .then_some(Rule::new("reduction", candidates).local(local))
}

fn candidates(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let Some((kind, red, keep, outs)) = parse(ctx)? else {
        return Ok(vec![ctx.replicate(1)]);
    };
    let shape = ctx.shape(0);
    let mut c = Vec::new();
    for (d, &size) in shape.iter().enumerate() {
        if size <= 1 {
            continue;
        }
        if !red.contains(&d) {
            let od = if keep {
                d
            } else {
                d - red.iter().filter(|r| **r < d).count()
            };
            c.push(st(
                &[Placement::Shard(d)],
                &vec![Placement::Shard(od); outs],
            ));
        } else {
            let p = match kind {
                Kind::Sum | Kind::Mean => Placement::Partial(Reduce::Sum),
                Kind::Max => Placement::Partial(Reduce::Max),
                Kind::Min => Placement::Partial(Reduce::Min),
                Kind::Other => continue,
            };
            c.push(st(&[Placement::Shard(d)], &[p]));
        }
    }
    let keeps = match kind {
        Kind::Sum | Kind::Mean => Some(Reduce::Sum),
        Kind::Max => Some(Reduce::Max),
        Kind::Min => Some(Reduce::Min),
        Kind::Other => None,
    };
    if let Some(r) = keeps {
        c.push(st(&[Placement::Partial(r)], &[Placement::Partial(r)]));
    }
    c.push(st(&[R], &vec![R; outs]));
    Ok(c)
}

/// A mean over sharded dimensions: each rank's mean of its shard, divided by the number of
/// shards, so that the partial terms sum to the mean.
fn local(ch: &Chosen, rank: usize, args: Vec<Value>) -> Result<Vec<Value>> {
    let out = ch.call(rank, args)?;
    let is_mean = matches!(ch.ctx.name, "aten::mean" | "aten::mean.dim");
    let shards: usize = ch
        .per_dim
        .iter()
        .zip(ch.ctx.mesh.shape())
        .filter(|(s, _)| s.inputs[0].is_shard() && s.outputs[0].is_partial())
        .map(|(_, k)| *k)
        .product();
    if !is_mean || shards == 1 {
        return Ok(out);
    }
    let Some(Value::Tensor(t)) = out.into_iter().next() else {
        return Err(ch.ctx.err("mean returned no tensor"));
    };
    super::super::trace::local_call(
        ch.ctx.mesh,
        rank,
        "aten::div.Scalar",
        vec![Value::Tensor(t), Value::Float(shards as f64)],
    )
}
