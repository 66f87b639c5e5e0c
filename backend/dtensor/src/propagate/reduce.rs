//! Reductions. Sharding along a kept dimension stays (shifted past removed dimensions). Along
//! a reduced dimension: `sum` and `mean` give `Partial(sum)` (`mean` scales each rank's term by
//! `1/shards`), `amax`/`max` give `Partial(max)` and `amin`/`min` `Partial(min)`; the others
//! (`prod`, `max.dim`/`min.dim` and their indices, `argmax`/`argmin`, `var`, `std`) need the
//! reduced dimensions whole, so those are gathered first. A `Partial(sum)` input stays partial
//! through `sum` and `mean`, a `Partial(max)` through `amax`/`max` (and min alike).

use super::super::placement::{Placement, Reduce};
use super::{Chosen, OpCtx, R, Rule, Strategy, st};
use crate::error::Result;
use tpuemu_backend::ops::Value;
use tpuemu_backend::ops::sharding::{Dims, RedOp, Sharding};

/// What a call reduces: its kind, the reduced dimensions (sorted), keepdim, outputs.
type Reduction = (RedOp, Vec<usize>, bool, usize);

/// What the call reduces (`None`: not a reduction this module shards).
fn parse(ctx: &OpCtx) -> Result<Option<Reduction>> {
    let nd = ctx.ndim(0);
    let a = &ctx.plain;
    let all: Vec<usize> = (0..nd).collect();
    let dims = |v: Option<Vec<i64>>| -> Result<Vec<usize>> {
        match v {
            None => Ok(all.clone()),
            Some(v) if v.is_empty() => Ok(all.clone()),
            Some(v) => tpuemu_backend::ops::helpers::dims_of(&v, nd, true),
        }
    };
    let one =
        |i: usize| -> Result<Vec<usize>> { Ok(vec![crate::layout::wrap_dim(a.int(i)?, nd)?]) };
    let Sharding::Reduction {
        kind,
        dims: which,
        keepdim,
        outputs,
    } = ctx.sharding
    else {
        return Ok(None);
    };
    let mut keep = match keepdim {
        Some(i) => a.bool_or(i, false)?,
        None => false,
    };
    let mut d = match which {
        Dims::All => all.clone(),
        Dims::List(i) => dims(a.opt_ints(i)?)?,
        Dims::One(i) => one(i)?,
        // Without a dimension: the index into the flattened tensor.
        Dims::OptOne(i) => match a.opt_int(i)? {
            None => {
                keep = false;
                all.clone()
            }
            Some(_) => one(i)?,
        },
    };
    d.sort_unstable();
    d.dedup();
    Ok(Some((kind, d, keep, outputs)))
}

pub(crate) fn rule() -> Rule {
    Rule::new("reduction", candidates).local(local)
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
                RedOp::Sum | RedOp::Mean => Placement::Partial(Reduce::Sum),
                RedOp::Max => Placement::Partial(Reduce::Max),
                RedOp::Min => Placement::Partial(Reduce::Min),
                RedOp::Other => continue,
            };
            c.push(st(&[Placement::Shard(d)], &[p]));
        }
    }
    let keeps = match kind {
        RedOp::Sum | RedOp::Mean => Some(Reduce::Sum),
        RedOp::Max => Some(Reduce::Max),
        RedOp::Min => Some(Reduce::Min),
        RedOp::Other => None,
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
    let is_mean = matches!(
        ch.ctx.sharding,
        Sharding::Reduction {
            kind: RedOp::Mean,
            ..
        }
    );
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
