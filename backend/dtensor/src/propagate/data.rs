//! Data movement: concatenation, splitting, gathers, embedding, masks and padding.
//!
//! - `cat`/`stack`/`split`: sharded along any dimension but the one they join or cut (`stack`
//!   shifts it); linear, so all-partial inputs stay partial.
//! - `index_select`, `gather`: the source sharded along a dimension not indexed (with the index
//!   alike for `gather`), or `index_select`'s index sharded (the output sharded along the
//!   indexed dimension); a partial source stays partial.
//! - `embedding`: a replicated table with sharded indices (the output sharded alike); a table
//!   sharded by columns (the output sharded along its last dimension); a table sharded by rows
//!   (vocabulary parallel): each rank looks up the indices that fall in its rows and zeros the
//!   rest, giving a partial output. `embedding_dense_backward` with the gradient and indices
//!   sharded alike gives a partial table gradient.
//! - `tril`/`triu`, `flip`, `constant_pad_nd`: sharded along dimensions they leave alone.

use super::super::placement::{self, Placement};
use super::super::trace::{local_call, local1};
use super::{Chosen, OpCtx, P, R, Rule, Strategy, s, st};
use crate::error::Result;
use crate::layout::wrap_dim;
use tpuemu_backend::ops::Value;
use tpuemu_backend::ops::sharding::Special;

pub(crate) fn rule(special: Special) -> Option<Rule> {
    let c: super::Candidates = match special {
        Special::Cat => cat,
        Special::Stack => stack,
        Special::Split => split,
        Special::IndexSelect => index_select,
        Special::Gather => gather,
        Special::Embedding => return Some(Rule::new("data", embedding).local(embedding_local)),
        Special::EmbeddingBackward => embedding_backward,
        Special::Tril => tril,
        Special::Flip => flip,
        Special::Pad => pad,
        _ => return None,
    };
    Some(Rule::new("data", c))
}

/// Every input sharded along `d` (for each `d` in `dims`), all partial, all replicated.
fn along(ctx: &OpCtx, dims: impl Iterator<Item = (usize, usize)>, partial: bool) -> Vec<Strategy> {
    let n = ctx.inputs.len();
    let mut c: Vec<Strategy> = dims.map(|(d, o)| st(&vec![s(d); n], &[s(o)])).collect();
    if partial {
        c.push(st(&vec![P; n], &[P]));
    }
    c.push(ctx.replicate(1));
    c
}

fn cat(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.inputs.iter().map(|t| t.shape.len()).max().unwrap_or(0);
    let dim = wrap_dim(ctx.plain.int_or(1, 0)?, nd)?;
    let same = |d: usize| {
        ctx.inputs
            .iter()
            .all(|t| t.shape.len() == nd && t.shape[d] > 1)
    };
    Ok(along(
        ctx,
        (0..nd).filter(|d| *d != dim && same(*d)).map(|d| (d, d)),
        true,
    ))
}

fn stack(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    let dim = wrap_dim(ctx.plain.int_or(1, 0)?, nd + 1)?;
    Ok(along(
        ctx,
        (0..nd)
            .filter(|d| ctx.shape(0)[*d] > 1)
            .map(|d| (d, if d >= dim { d + 1 } else { d })),
        true,
    ))
}

fn split(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    let dim = wrap_dim(ctx.plain.int_or(2, 0)?, nd)?;
    Ok(along(
        ctx,
        (0..nd)
            .filter(|d| *d != dim && ctx.shape(0)[*d] > 1)
            .map(|d| (d, d)),
        true,
    ))
}

fn index_select(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    let dim = wrap_dim(ctx.plain.int(1)?, nd)?;
    let mut c: Vec<Strategy> = (0..nd)
        .filter(|d| *d != dim && ctx.shape(0)[*d] > 1)
        .map(|d| st(&[s(d), R], &[s(d)]))
        .collect();
    if ctx.ndim(1) == 1 {
        c.push(st(&[R, s(0)], &[s(dim)]));
    }
    c.push(st(&[P, R], &[P]));
    c.push(ctx.replicate(1));
    Ok(c)
}

fn gather(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    let dim = wrap_dim(ctx.plain.int(1)?, nd)?;
    let (x, i) = (ctx.shape(0), ctx.shape(1));
    let mut c: Vec<Strategy> = (0..nd)
        .filter(|d| *d != dim && i.len() == nd && x[*d] == i[*d] && x[*d] > 1)
        .map(|d| st(&[s(d), s(d)], &[s(d)]))
        .collect();
    c.push(st(&[P, R], &[P]));
    c.push(ctx.replicate(1));
    Ok(c)
}

fn embedding(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let ni = ctx.ndim(1);
    let mut c: Vec<Strategy> = (0..ni)
        .filter(|d| ctx.shape(1)[*d] > 1)
        .map(|d| st(&[R, s(d)], &[s(d)]))
        .collect();
    c.push(st(&[s(1), R], &[s(ni)]));
    c.push(st(&[P, R], &[P]));
    c.push(st(&[s(0), R], &[P]));
    c.push(ctx.replicate(1));
    Ok(c)
}

/// A table sharded by rows: indices outside this rank's rows look up row 0 and are zeroed.
fn embedding_local(ch: &Chosen, rank: usize, args: Vec<Value>) -> Result<Vec<Value>> {
    let w = &ch.inputs[0];
    if !w.placements.contains(&Placement::Shard(0)) {
        return ch.call(rank, args);
    }
    let mesh = ch.ctx.mesh;
    let region = placement::local_region(&w.placements, mesh.shape(), &mesh.coords(rank), &w.shape);
    let (start, rows) = region[0];
    let Some(Value::Tensor(idx)) = args.get(1) else {
        return Err(ch.ctx.err("embedding expects (weight, indices)"));
    };
    let t = |v: &crate::tensor::Tensor| Value::Tensor(v.clone());
    let shifted = local1(
        mesh,
        rank,
        "aten::add.Scalar",
        vec![t(idx), Value::Int(-(start as i64)), Value::Int(1)],
    )?;
    let lo = local1(
        mesh,
        rank,
        "aten::ge.Scalar",
        vec![t(&shifted), Value::Int(0)],
    )?;
    let hi = local1(
        mesh,
        rank,
        "aten::lt.Scalar",
        vec![t(&shifted), Value::Int(rows as i64)],
    )?;
    let inside = local1(mesh, rank, "aten::logical_and", vec![t(&lo), t(&hi)])?;
    let outside = local1(mesh, rank, "aten::logical_not", vec![t(&inside)])?;
    let safe = local1(
        mesh,
        rank,
        "aten::clamp",
        vec![t(&shifted), Value::Int(0), Value::Int(rows as i64 - 1)],
    )?;
    let mut a = args.clone();
    a[1] = t(&safe);
    let rows_out = local1(mesh, rank, "aten::embedding", a)?;
    let mask = local1(
        mesh,
        rank,
        "aten::unsqueeze",
        vec![t(&outside), Value::Int(-1)],
    )?;
    local_call(
        mesh,
        rank,
        "aten::masked_fill.Scalar",
        vec![t(&rows_out), t(&mask), Value::Float(0.0)],
    )
}

fn embedding_backward(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let ni = ctx.ndim(1);
    let by_freq = ctx.plain.bool_or(4, false)?;
    let mut c = Vec::new();
    if !by_freq {
        c.extend(
            (0..ni)
                .filter(|d| ctx.shape(1)[*d] > 1)
                .map(|d| st(&[s(d), s(d)], &[P])),
        );
        c.push(st(&[P, R], &[P]));
    }
    c.push(st(&[s(ni), R], &[s(1)]));
    c.push(ctx.replicate(1));
    Ok(c)
}

/// Sharded along each dimension not in `skip`.
fn except(ctx: &OpCtx, skip: &[usize], partial: bool) -> Vec<Strategy> {
    let shape = ctx.shape(0);
    let mut c: Vec<Strategy> = (0..shape.len())
        .filter(|d| !skip.contains(d) && shape[*d] > 1)
        .map(|d| ctx.first_only(s(d), &[s(d)]))
        .collect();
    if partial {
        c.push(ctx.first_only(P, &[P]));
    }
    c.push(ctx.replicate(1));
    c
}

fn tril(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    Ok(except(
        ctx,
        &[nd.saturating_sub(2), nd.saturating_sub(1)],
        true,
    ))
}

fn flip(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    let dims = tpuemu_backend::ops::helpers::dims_of(&ctx.plain.ints(1)?, nd, false)?;
    Ok(except(ctx, &dims, true))
}

fn pad(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let nd = ctx.ndim(0);
    let pads = ctx.plain.ints(1)?.len() / 2;
    let dims: Vec<usize> = (nd.saturating_sub(pads)..nd).collect();
    let zero = ctx
        .plain
        .scalar_or(2, crate::dtype::Scalar::Int(0))?
        .to_f64()
        == 0.0;
    Ok(except(ctx, &dims, zero))
}
