//! Adaptive pooling: `_adaptive_avg_pool{2,3}d`, `adaptive_avg_pool{1,2,3}d`,
//! `adaptive_max_pool{1,2,3}d` and `_adaptive_avg_pool{2,3}d_backward`.
//!
//! Adaptive pooling has windows of varying start and size (`[⌊o·in/out⌋, ⌈(o+1)·in/out⌉)`), so
//! each spatial dim is pooled separately by a rows kernel whose row is the whole input dim with
//! the window's elements selected by their coordinates: one kernel per dim, the intermediate in
//! f32. Max pooling carries the argmax of the earlier dims along. The fixed-window pools are in
//! `pool.rs`, whose helpers (batching, the lowest value, integer constants) this module shares.

use super::F;
use super::pool::{I, ic, lowest};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::tensor::Tensor;

/// `[⌊o·in/out⌋, ⌈(o+1)·in/out⌉)`: whether input coordinate `i` is in output `o`'s window.
fn in_adaptive(p: &mut ProgBuilder, o: PRef, i: PRef, input: usize, out: usize) -> PRef {
    let inn = ic(p, input as i64);
    let on = ic(p, out as i64);
    let oi = p.bin(BinOp::Mul, o, inn, I);
    let start = p.bin(BinOp::Div, oi, on, I);
    let o1 = p.bin(BinOp::Add, oi, inn, I);
    let om = ic(p, out as i64 - 1);
    let o1 = p.bin(BinOp::Add, o1, om, I);
    let end = p.bin(BinOp::Div, o1, on, I);
    let ge = p.cmp(CmpKind::Ge, i, start, I);
    let lt = p.cmp(CmpKind::Lt, i, end, I);
    let gi = p.cast(ge, I);
    let li = p.cast(lt, I);
    let both = p.bin(BinOp::And, gi, li, I);
    p.cast(both, DType::Bool)
}

fn adaptive_sizes(name: &str, x: &Tensor, nd: usize, output_size: &[i64]) -> Result<Vec<usize>> {
    if output_size.len() != nd {
        return Err(TpuError::BadArgs(format!(
            "{name}: output_size must be {nd}, but got {output_size:?}"
        )));
    }
    for d in 1..x.dim() {
        if x.shape()[d] == 0 {
            return Err(TpuError::BadArgs(format!(
                "{name}: Expected input to have non-zero size for non-batch dimensions, but input has sizes {:?} with dimension {d} being empty",
                x.shape()
            )));
        }
    }
    output_size
        .iter()
        .map(|&o| {
            if o < 0 {
                Err(TpuError::BadArgs(format!(
                    "{name}: elements of output_size must be greater than or equal to 0 but received {output_size:?}"
                )))
            } else {
                Ok(o as usize)
            }
        })
        .collect()
}

/// One adaptive pass along `dim` of `t` (`[..., in, ...]`) to `out` positions: the iteration
/// space is `[..., out, ..., in]` with the row the input dim. Averages (f32) or maxima with the
/// argmax (an index along `dim`), combined with `carried` indices of earlier passes (flat
/// indices over the dims already pooled, aligned with `t`).
fn adaptive_pass(
    op: &OpScope,
    t: &Tensor,
    dim: usize,
    out: usize,
    max: bool,
    carried: Option<&Tensor>,
    flat_size: usize,
) -> Result<(Tensor, Option<Tensor>)> {
    let n = t.dim();
    let input = t.shape()[dim];
    // Iteration shape: t's shape with `dim` replaced by `out`, plus the input dim last.
    let mut shape: Vec<usize> = t.shape().to_vec();
    shape[dim] = out;
    shape.push(input);
    let see = |x: &Tensor| {
        let l = x.layout();
        let mut strides = l.strides.clone();
        strides[dim] = 0;
        strides.push(l.strides[dim]);
        x.with_layout(Layout {
            shape: shape.clone(),
            strides,
            offset: l.offset,
        })
    };
    let tv = see(t);
    let cv = carried.map(see);
    let mut ins: Vec<&Tensor> = vec![&tv];
    ins.extend(cv.as_ref());
    let dt = t.dtype();
    let ct = if dt.is_float() { F } else { dt };
    let outs: Vec<(DType, bool)> = if max {
        vec![(ct, true), (DType::I64, true)]
    } else {
        vec![(F, true)]
    };
    let mut r = rows(
        op,
        &shape,
        &[n],
        false,
        &ins,
        &[false, false],
        &outs,
        |p, r| {
            let o = p.index(dim as u32);
            let i = p.index(n as u32);
            let inside = in_adaptive(p, o, i, input, out);
            let v = p.cast(r[0], ct);
            if max {
                let low = p.constant(lowest(ct), ct);
                let mv = p.select(inside, v, low, ct);
                let m = p.reduce(RedKind::Max, mv, ct);
                let a = p.arg(true, mv);
                let a = p.cast(a, I);
                // The flat index: earlier dims' index (carried) · in + this dim's argmax. The
                // carried index is picked at the argmax row element.
                let idx = match carried {
                    Some(_) => {
                        let hit = p.cmp(CmpKind::Eq, i, a, I);
                        let c = p.cast(r[1], I);
                        let zero = ic(p, 0);
                        let pick = p.select(hit, c, zero, I);
                        let c_at = p.reduce(RedKind::Sum, pick, I);
                        let sz = ic(p, flat_size as i64);
                        let ca = p.bin(BinOp::Mul, a, sz, I);
                        p.bin(BinOp::Add, ca, c_at, I)
                    }
                    None => a,
                };
                vec![m, idx]
            } else {
                let zero = p.constant(Scalar::Float(0.0), F);
                let mv = p.select(inside, v, zero, F);
                let s = p.reduce(RedKind::Sum, mv, F);
                let one = p.constant(Scalar::Float(1.0), F);
                let cnt = p.select(inside, one, zero, F);
                let c = p.reduce(RedKind::Sum, cnt, F);
                vec![p.bin(BinOp::Div, s, c, F)]
            }
        },
    )?;
    let idx = if max { Some(r.remove(1)) } else { None };
    Ok((r.remove(0), idx))
}

/// Adaptive pooling over the last `nd` dims: one pass per dim, last dim first.
fn adaptive(
    name: &str,
    nd: usize,
    x: &Tensor,
    output_size: &[i64],
    max: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let op = OpScope::new(name, &[x])?;
    if x.dim() != nd + 1 && x.dim() != nd + 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected {}D or {}D tensor, but got {:?}",
            nd + 1,
            nd + 2,
            x.shape()
        )));
    }
    let outs = adaptive_sizes(name, x, nd, output_size)?;
    let dt = x.dtype();
    if !max && !dt.is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"adaptive_avg_pool{nd}d\" not implemented for '{}'",
            dt.scalar_type_name()
        )));
    }
    let lead = x.dim() - nd;
    let mut out_shape = x.shape()[..lead].to_vec();
    out_shape.extend_from_slice(&outs);
    if out_shape.iter().product::<usize>() == 0 {
        let v = Tensor::empty(op.rt(), &out_shape, dt)?;
        let i = max
            .then(|| Tensor::empty(op.rt(), &out_shape, DType::I64))
            .transpose()?;
        return Ok((v, i));
    }
    let spatial = &x.shape()[lead..];
    if !max
        && nd == 3
        && dt != DType::F32
        && spatial
            .iter()
            .zip(&outs)
            .all(|(&i, &o)| o > 0 && i % o == 0)
    {
        return Ok((sequential_avg(&op, x, &out_shape, nd)?, None));
    }
    let mut cur = x.clone();
    let mut idx: Option<Tensor> = None;
    let mut flat = 1usize;
    for i in (0..nd).rev() {
        let d = lead + i;
        let (v, ix) = adaptive_pass(&op, &cur, d, outs[i], max, idx.as_ref(), flat)?;
        flat *= x.shape()[d];
        cur = v;
        idx = ix;
    }
    let v = map_shape(&op, cur.shape(), &[&cur], &[dt], |_, r| vec![r[0]])?.remove(0);
    Ok((v, idx))
}

/// `_adaptive_avg_pool{nd}d(x, output_size)`.
pub fn adaptive_avg_pool(name: &str, nd: usize, x: &Tensor, output_size: &[i64]) -> Result<Tensor> {
    Ok(adaptive(name, nd, x, output_size, false)?.0)
}

/// `adaptive_max_pool{nd}d(x, output_size)`: the maxima and their flat indices per plane.
pub fn adaptive_max_pool(
    name: &str,
    nd: usize,
    x: &Tensor,
    output_size: &[i64],
) -> Result<(Tensor, Tensor)> {
    let (v, i) = adaptive(name, nd, x, output_size, true)?;
    let i = i.ok_or_else(|| TpuError::Device("internal: adaptive max without indices".into()))?;
    Ok((v, i))
}

/// `_adaptive_avg_pool{nd}d_backward(grad, x)`: per spatial dim (first dim first), each input
/// position sums `grad[o] / |window(o)|` over the windows `o` that hold it — a rows kernel whose
/// row is the output dim.
pub fn adaptive_avg_pool_backward(
    name: &str,
    nd: usize,
    grad: &Tensor,
    x: &Tensor,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad, x])?;
    if grad.dim() != x.dim() || x.dim() < nd + 1 {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_output of shape {:?} for an input of shape {:?}",
            grad.shape(),
            x.shape()
        )));
    }
    let dt = x.dtype();
    let lead = x.dim() - nd;
    if x.numel() == 0 || grad.numel() == 0 {
        return Ok(map_shape(&op, x.shape(), &[], &[dt], |p, _| {
            vec![p.constant(Scalar::Int(0), dt)]
        })?
        .remove(0));
    }
    let mut cur = grad.clone();
    for i in 0..nd {
        let d = lead + i;
        let (input, out) = (x.shape()[d], grad.shape()[d]);
        let n = cur.dim();
        let mut shape = cur.shape().to_vec();
        shape[d] = input;
        shape.push(out);
        let l = cur.layout();
        let mut strides = l.strides.clone();
        strides[d] = 0;
        strides.push(l.strides[d]);
        let gv = cur.with_layout(Layout {
            shape: shape.clone(),
            strides,
            offset: l.offset,
        });
        cur = rows(
            &op,
            &shape,
            &[n],
            false,
            &[&gv],
            &[false],
            &[(F, true)],
            |p, r| {
                let iv = p.index(d as u32);
                let o = p.index(n as u32);
                let inside = in_adaptive(p, o, iv, input, out);
                // The window's size from its bounds.
                let inn = ic(p, input as i64);
                let on = ic(p, out as i64);
                let oi = p.bin(BinOp::Mul, o, inn, I);
                let start = p.bin(BinOp::Div, oi, on, I);
                let o1 = p.bin(BinOp::Add, oi, inn, I);
                let om = ic(p, out as i64 - 1);
                let o1 = p.bin(BinOp::Add, o1, om, I);
                let end = p.bin(BinOp::Div, o1, on, I);
                let size = p.bin(BinOp::Sub, end, start, I);
                let size = p.cast(size, F);
                let g = p.cast(r[0], F);
                let q = p.bin(BinOp::Div, g, size, F);
                let zero = p.constant(Scalar::Float(0.0), F);
                let v = p.select(inside, q, zero, F);
                vec![p.reduce(RedKind::Sum, v, F)]
            },
        )?
        .remove(0);
    }
    Ok(map_shape(&op, x.shape(), &[&cur], &[dt], |_, r| vec![r[0]])?.remove(0))
}

/// Adaptive average pooling of a half-precision input whose sizes divide evenly (windows of
/// `in/out` at stride `in/out`), summed as PyTorch's CPU 3-D kernel does: one element at a
/// time in the input's dtype, in row-major window order, then divided. One tile kernel over the
/// output reading one strided view per window offset.
fn sequential_avg(op: &OpScope, x: &Tensor, out_shape: &[usize], nd: usize) -> Result<Tensor> {
    let lead = x.dim() - nd;
    let k: Vec<usize> = (0..nd)
        .map(|i| x.shape()[lead + i] / out_shape[lead + i])
        .collect();
    let l = x.layout();
    let views: Vec<Tensor> = super::window::positions(&k)
        .into_iter()
        .map(|off| {
            let mut strides = l.strides[..lead].to_vec();
            let mut o = l.offset as isize;
            for i in 0..nd {
                strides.push(l.strides[lead + i] * k[i] as isize);
                o += l.strides[lead + i] * off[i] as isize;
            }
            x.with_layout(Layout {
                shape: out_shape.to_vec(),
                strides,
                offset: o as usize,
            })
        })
        .collect();
    let refs: Vec<&Tensor> = views.iter().collect();
    let dt = x.dtype();
    let n = views.len();
    Ok(map_shape(op, out_shape, &refs, &[dt], |p, r| {
        let mut acc = p.constant(Scalar::Float(0.0), F);
        for v in r {
            let vf = p.cast(*v, F);
            let s = p.bin(BinOp::Add, acc, vf, F);
            let s = p.round(s, dt);
            acc = p.cast(s, F);
        }
        let c = p.constant(Scalar::Float(n as f64), F);
        vec![p.bin(BinOp::Div, acc, c, F)]
    })?
    .remove(0))
}
