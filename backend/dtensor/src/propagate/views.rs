//! Views: the shard dimension is mapped through the view (`permute`, `transpose`, `t`,
//! `unsqueeze`, `squeeze`, `select` and `slice` along other dimensions, `expand` of other
//! dimensions, and `view`/`reshape` where the sharded dimension is the outermost non-trivial
//! one of the dimensions it merges with or splits into, and the piece count divides the new
//! outer dimension). When the sharded dimension cannot be mapped (a `select` or partial
//! `slice` of it, a reshape that would interleave shards) the input is gathered first. Views
//! are linear: a partial input gives a partial view. The local call gets local sizes
//! (`view`, `reshape`, `expand`).

use super::super::placement::{self, Placement};
use super::{Chosen, OpCtx, P, R, Rule, Strategy, s, st};
use crate::error::Result;
use crate::layout::{infer_size, wrap_dim};
use tpuemu_backend::ops::Value;
use tpuemu_backend::ops::sharding::{Sharding, ViewKind};

pub(crate) fn rule(kind: ViewKind) -> Rule {
    let r = Rule::new("view", candidates).out_shape(out_shape);
    match kind {
        ViewKind::Reshape | ViewKind::Expand => r.local(local_sizes),
        ViewKind::Slice => r.local(local_slice),
        _ => r,
    }
}

fn kind(ctx: &OpCtx) -> Option<ViewKind> {
    match ctx.sharding {
        Sharding::View(k) => Some(k),
        _ => None,
    }
}

/// Pairs of (input dimension, output dimension) that a view maps one to one.
fn mapping(ctx: &OpCtx) -> Result<Vec<(usize, usize)>> {
    let shape = ctx.shape(0);
    let nd = shape.len();
    let a = &ctx.plain;
    Ok(match kind(ctx) {
        Some(ViewKind::Reshape) => {
            let out = infer_size(&a.ints(1)?, shape.iter().product())?;
            reshape_map(shape, &out)
        }
        Some(ViewKind::Permute) => {
            let perm: Vec<usize> = a
                .ints(1)?
                .iter()
                .map(|d| wrap_dim(*d, nd))
                .collect::<Result<_>>()?;
            perm.iter().enumerate().map(|(j, d)| (*d, j)).collect()
        }
        Some(ViewKind::Transpose | ViewKind::T) => {
            let (x, y) = if kind(ctx) == Some(ViewKind::T) {
                (0, nd.min(2).saturating_sub(1))
            } else {
                (wrap_dim(a.int(1)?, nd)?, wrap_dim(a.int(2)?, nd)?)
            };
            (0..nd)
                .map(|d| match d {
                    d if d == x => (d, y),
                    d if d == y => (d, x),
                    d => (d, d),
                })
                .collect()
        }
        Some(ViewKind::Expand) => {
            let size = a.ints(1)?;
            let new = size.len().saturating_sub(nd);
            (0..nd)
                .filter(|d| size[d + new] == -1 || size[d + new] as usize == shape[*d])
                .map(|d| (d, d + new))
                .collect()
        }
        Some(ViewKind::Slice) => {
            let dim = wrap_dim(a.int_or(1, 0)?, nd)?;
            let n = shape[dim] as i64;
            let start = a.opt_int(2)?.unwrap_or(0);
            let end = a.opt_int(3)?.unwrap_or(n);
            let full = (start == 0 || start <= -n) && end >= n && a.int_or(4, 1)? == 1;
            (0..nd)
                .filter(|d| *d != dim || full)
                .map(|d| (d, d))
                .collect()
        }
        Some(ViewKind::Select) => {
            let dim = wrap_dim(a.int(1)?, nd)?;
            (0..nd)
                .filter(|d| *d != dim)
                .map(|d| (d, if d > dim { d - 1 } else { d }))
                .collect()
        }
        Some(ViewKind::Unsqueeze) => {
            let dim = wrap_dim(a.int(1)?, nd + 1)?;
            (0..nd)
                .map(|d| (d, if d >= dim { d + 1 } else { d }))
                .collect()
        }
        Some(ViewKind::SqueezeDim) => {
            let dim = wrap_dim(a.int(1)?, nd)?;
            let gone = nd > 0 && shape[dim] == 1;
            (0..nd)
                .filter(|d| !(gone && *d == dim))
                .map(|d| (d, if gone && d > dim { d - 1 } else { d }))
                .collect()
        }
        _ => Vec::new(),
    })
}

/// For a reshape of `a` into `b`: each input dimension that is the outermost non-trivial
/// dimension of its group, paired with the group's outermost non-trivial output dimension.
fn reshape_map(a: &[usize], b: &[usize]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if a.contains(&0) {
        return out;
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let (si, sj) = (i, j);
        let mut pa = a.get(i).copied().unwrap_or(1);
        i = (i + 1).min(a.len().max(i));
        let mut pb = b.get(j).copied().unwrap_or(1);
        j = (j + 1).min(b.len().max(j));
        while pa != pb {
            if pa < pb && i < a.len() {
                pa *= a[i];
                i += 1;
            } else if pb < pa && j < b.len() {
                pb *= b[j];
                j += 1;
            } else {
                return out;
            }
        }
        let fa = (si..i.min(a.len())).find(|d| a[*d] > 1);
        let fb = (sj..j.min(b.len())).find(|d| b[*d] > 1);
        if let (Some(x), Some(y)) = (fa, fb) {
            out.push((x, y));
        }
    }
    out
}

/// The view's shape (for the shard arithmetic of its output).
fn out_shape(ctx: &OpCtx) -> Result<Vec<usize>> {
    let x = ctx.shape(0);
    let nd = x.len();
    let a = &ctx.plain;
    Ok(match kind(ctx) {
        Some(ViewKind::Reshape) => infer_size(&a.ints(1)?, x.iter().product())?,
        Some(ViewKind::Expand) => {
            let size = a.ints(1)?;
            let new = size.len().saturating_sub(nd);
            size.iter()
                .enumerate()
                .map(|(j, v)| {
                    if *v == -1 && j >= new {
                        x[j - new]
                    } else {
                        *v as usize
                    }
                })
                .collect()
        }
        _ => {
            // The other views only move, drop or add dimensions that are mapped one to one
            // (or slice ones that are then gathered): the mapped sizes are the input's.
            let m = mapping(ctx)?;
            let n = m.iter().map(|(_, o)| o + 1).max().unwrap_or(0);
            let mut out = vec![1; n];
            for (d, o) in m {
                out[o] = x[d];
            }
            out
        }
    })
}

fn candidates(ctx: &OpCtx) -> Result<Vec<Strategy>> {
    let shape = ctx.shape(0).to_vec();
    let mut c: Vec<Strategy> = mapping(ctx)?
        .into_iter()
        .filter(|(d, _)| shape[*d] > 1)
        .map(|(d, o)| st(&[s(d)], &[s(o)]))
        .collect();
    c.push(st(&[P], &[P]));
    c.push(st(&[R], &[R]));
    Ok(c)
}

/// `view`/`reshape`/`expand` with the sizes of the local output.
fn local_sizes(ch: &Chosen, rank: usize, mut args: Vec<Value>) -> Result<Vec<Value>> {
    let ctx = ch.ctx;
    let x = &ctx.inputs[0];
    let out_p = ch.output(0);
    let size = ctx.plain.ints(1)?;
    let global: Vec<i64> = if kind(ctx) == Some(ViewKind::Expand) {
        let new = size.len().saturating_sub(x.shape.len());
        size.iter()
            .enumerate()
            .map(|(j, v)| {
                if *v == -1 && j >= new {
                    x.shape[j - new] as i64
                } else {
                    *v
                }
            })
            .collect()
    } else {
        infer_size(&size, x.shape.iter().product())?
            .into_iter()
            .map(|v| v as i64)
            .collect()
    };
    let counts = placement::shard_counts(&out_p, ctx.mesh.shape(), global.len());
    let mut local = Vec::with_capacity(global.len());
    for (d, (g, k)) in global.iter().zip(&counts).enumerate() {
        if !(*g as usize).is_multiple_of(*k) {
            return Err(ctx.err(&format!(
                "the sharded output dimension {d} of size {g} does not split into {k} pieces"
            )));
        }
        local.push(g / *k as i64);
    }
    args[1] = Value::Ints(local);
    ch.call(rank, args)
}

/// A full slice of a sharded dimension: the whole local dimension.
fn local_slice(ch: &Chosen, rank: usize, mut args: Vec<Value>) -> Result<Vec<Value>> {
    let x = &ch.inputs[0];
    let dim = wrap_dim(ch.ctx.plain.int_or(1, 0)?, x.shape.len())?;
    if x.placements.contains(&Placement::Shard(dim)) {
        args.resize(5.max(args.len()), Value::None);
        args[2] = Value::None;
        args[3] = Value::None;
    }
    ch.call(rank, args)
}
