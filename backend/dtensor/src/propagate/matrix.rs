//! Matrix products and attention.
//!
//! | operator | strategies (inputs → output) |
//! |---|---|
//! | `mm(a [M,K], b [K,N])` | `Shard(0) × Replicate → Shard(0)` (data/sequence parallel), `Replicate × Shard(1) → Shard(1)` (column parallel), `Shard(1) × Shard(0) → Partial` (row parallel), `Partial × Replicate` and `Replicate × Partial → Partial` |
//! | `addmm(bias, a, b)` | as `mm`; the bias follows the output through broadcasting, and is made partial (kept on one rank) for a partial output |
//! | `bmm`, `baddbmm` | the batch dimension sharded on both; then as `mm` on the last two dimensions |
//! | `mv`, `dot` | `Shard(0) × Replicate → Shard(0)`, `Shard(1) × Shard(0) → Partial`; `dot`: `Shard(0) × Shard(0) → Partial` |
//! | `scaled_dot_product_attention`, `_scaled_dot_product_flash_attention_for_cpu` | batch and head dimensions sharded on q, k, v (and the mask where it has them); the query sequence sharded with k and v replicated when not causal |

use super::super::placement::Placement;
use super::pointwise::broadcast_input;
use super::{OpCtx, P, R, Rule, Strategy, s, st};
use crate::error::Result;
use tpuemu_backend::ops::sharding::{Sharding, Special};

pub(crate) fn rule(special: Special) -> Option<Rule> {
    let c: super::Candidates = match special {
        Special::Mm => mm,
        Special::Addmm => addmm,
        Special::Bmm => bmm,
        Special::Baddbmm => baddbmm,
        Special::Mv => mv,
        Special::Dot => dot,
        Special::Attention | Special::FlashAttention => attention,
        _ => return None,
    };
    Some(Rule::new("matrix", c))
}

/// The product strategies over the last two dimensions, with `lead` batch placements in front.
fn product(batch: Option<usize>) -> Vec<(Placement, Placement, Placement)> {
    let o = batch.map_or(0, |_| 1);
    let mut v = vec![
        (s(o), R, s(o)),
        (R, s(o + 1), s(o + 1)),
        (s(o + 1), s(o), P),
        (P, R, P),
        (R, P, P),
    ];
    if batch.is_some() {
        v.insert(0, (s(0), s(0), s(0)));
    }
    v
}

fn mm(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let mut c: Vec<Strategy> = product(None)
        .into_iter()
        .map(|(a, b, o)| st(&[a, b], &[o]))
        .collect();
    c.push(ctx.replicate(1));
    Ok(c)
}

fn bmm(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let mut c: Vec<Strategy> = product(Some(0))
        .into_iter()
        .map(|(a, b, o)| st(&[a, b], &[o]))
        .collect();
    c.push(ctx.replicate(1));
    Ok(c)
}

/// `addmm`/`baddbmm`: the bias (input 0) follows the output.
fn with_bias(ctx: &OpCtx, batch: bool) -> Result<Vec<Strategy>> {
    let (a, b) = (ctx.shape(1), ctx.shape(2));
    let mut out: Vec<usize> = a[..a.len() - 1].to_vec();
    out.push(b[b.len() - 1]);
    let mut c: Vec<Strategy> = product(batch.then_some(0))
        .into_iter()
        .map(|(x, y, o)| {
            let bias = match o {
                Placement::Shard(d) => broadcast_input(&out, ctx.shape(0), d),
                other => other,
            };
            st(&[bias, x, y], &[o])
        })
        .collect();
    c.push(ctx.replicate(1));
    Ok(c)
}

fn addmm(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    with_bias(ctx, false)
}

fn baddbmm(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    with_bias(ctx, true)
}

fn mv(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    Ok(vec![
        st(&[s(0), R], &[s(0)]),
        st(&[s(1), s(0)], &[P]),
        st(&[P, R], &[P]),
        st(&[R, P], &[P]),
        ctx.replicate(1),
    ])
}

fn dot(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    Ok(vec![
        st(&[s(0), s(0)], &[P]),
        st(&[P, R], &[P]),
        st(&[R, P], &[P]),
        ctx.replicate(1),
    ])
}

fn attention(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let flash = ctx.sharding == Sharding::Special(Special::FlashAttention);
    let causal = ctx.plain.bool_or(if flash { 4 } else { 5 }, false)?;
    let outs = if flash { 2 } else { 1 };
    let (q, k, v) = (ctx.shape(0), ctx.shape(1), ctx.shape(2));
    let nd = q.len();
    // The scores' shape, which a mask broadcasts to.
    let mut scores: Vec<usize> = q[..nd - 1].to_vec();
    scores.push(k[k.len() - 2]);
    let mask = |d: usize| -> Vec<Placement> {
        ctx.inputs
            .get(3)
            .map(|m| broadcast_input(&scores, &m.shape, d))
            .into_iter()
            .collect()
    };
    let mut c = Vec::new();
    for d in 0..nd.saturating_sub(2) {
        if k.len() == nd && v.len() == nd && q[d] == k[d] && q[d] == v[d] && q[d] > 1 {
            let mut ins = vec![s(d), s(d), s(d)];
            ins.extend(mask(d));
            c.push(st(&ins, &vec![s(d); outs]));
        }
    }
    if !causal && nd >= 2 {
        let l = nd - 2;
        let mut ins = vec![s(l), R, R];
        ins.extend(mask(l));
        c.push(st(&ins, &vec![s(l); outs]));
    }
    c.push(ctx.replicate(outs));
    Ok(c)
}
