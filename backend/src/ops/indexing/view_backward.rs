//! The backward of view operators and the `*_scatter` forms: `slice_backward`,
//! `select_backward`, `diagonal_backward`, `unfold_backward`, `slice_scatter`,
//! `select_scatter`, `diagonal_scatter`, `as_strided_scatter`.
//!
//! Each writes a tensor into a view of a new one (zeros for the backwards, a copy of `self` for
//! the scatters) with one tile kernel; `unfold_backward`, whose windows may overlap, adds every
//! gradient element at its input position with one index-add kernel.

use super::t1;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, Combine};
use crate::layout::{Layout, wrap_dim};
use crate::ops::helpers::{OpScope, map_contiguous, map_shape, write_into};
use crate::ops::prims::{self, fill, put_rows, reshaped};
use crate::ops::registry::{OpDef, OpImpl};
use crate::ops::shape::diagonal_layout;
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

fn sizes(s: &[i64]) -> Result<Vec<usize>> {
    s.iter()
        .map(|v| {
            usize::try_from(*v)
                .map_err(|_| TpuError::BadArgs(format!("negative size {v} in {s:?}")))
        })
        .collect()
}

/// `src` written into `view(base)` of a new tensor that is `base` (zeros of `shape`, or a copy
/// of `self`).
fn into_view(
    op: &OpScope,
    base: Result<&Tensor, (&[usize], DType)>,
    src: &Tensor,
    view: impl FnOnce(&Layout) -> Result<Layout>,
) -> Result<Tensor> {
    let out = match base {
        Ok(x) => map_contiguous(op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0),
        Err((shape, dt)) => fill(op, shape, Scalar::Int(0), dt)?,
    };
    let l = view(out.layout())?;
    let dst = out.with_layout(l);
    if src.shape() != dst.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "{}: expected src to have a size equal to the slice of self. src size = {:?}, slice size = {:?}",
            op.tag().name.trim_start_matches("aten::"),
            src.shape(),
            dst.shape()
        )));
    }
    if dst.numel() > 0 {
        write_into(op, &dst, &[src], |_, r| r[0])?;
    }
    Ok(out)
}

/// `unfold_backward(grad, input_sizes, dim, size, step)`: the sum of the windows' gradients at
/// their input positions.
fn unfold_backward(grad: &Tensor, input_sizes: &[i64], dim: i64, step: i64) -> Result<Tensor> {
    let op = OpScope::new("aten::unfold_backward", &[grad])?;
    let shape = sizes(input_sizes)?;
    let d = wrap_dim(dim, shape.len())?;
    let dt = grad.dtype();
    let acc = if dt.is_float() { DType::F32 } else { dt };
    let out = fill(&op, &shape, Scalar::Int(0), acc)?;
    let n = grad.numel();
    if n > 0 {
        prims::fits_i32(out.numel())?;
        let gshape = grad.shape().to_vec();
        let nd = shape.len();
        let strides = crate::layout::contiguous_strides(&shape);
        let flat = map_shape(&op, &gshape, &[], &[DType::I32], |p, _| {
            let i = DType::I32;
            let mut f = p.constant(Scalar::Int(0), i);
            for (k, &stride) in strides.iter().enumerate().take(nd) {
                let c = p.index(k as u32);
                let c = if k == d {
                    let st = p.constant(Scalar::Int(step), i);
                    let w = p.bin(BinOp::Mul, c, st, i);
                    let e = p.index(nd as u32);
                    p.bin(BinOp::Add, w, e, i)
                } else {
                    c
                };
                let s = p.constant(Scalar::Int(stride as i64), i);
                let t = p.bin(BinOp::Mul, c, s, i);
                f = p.bin(BinOp::Add, f, t, i);
            }
            vec![f]
        })?
        .remove(0);
        let src = map_contiguous(&op, &[grad], &[acc], |_, r| vec![r[0]])?.remove(0);
        let table = reshaped(&out, &[out.numel(), 1]);
        put_rows(
            &op,
            &table,
            &reshaped(&flat, &[n]),
            &reshaped(&src, &[n, 1]),
            Combine::Add,
            true,
        )?;
    }
    Ok(map_contiguous(&op, &[&out], &[dt], |_, r| vec![r[0]])?.remove(0))
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let all = crate::ops::data::ALL;
    let k = OpImpl::Kernel;
    let rep = Sharding::Replicate("writes into a view of the global tensor");
    vec![
        OpDef::new("aten::slice_backward", k, all, |_, a| {
            let g = a.tensor(0)?;
            let op = OpScope::new("aten::slice_backward", &[g])?;
            let shape = sizes(&a.ints(1)?)?;
            let (dim, start, end, step) = (a.int(2)?, a.int(3)?, a.int(4)?, a.int(5)?);
            t1(into_view(&op, Err((&shape, g.dtype())), g, |l| l.slice(dim, Some(start), Some(end), step)))
        })
        .shard(rep),
        OpDef::new("aten::select_backward", k, all, |_, a| {
            let g = a.tensor(0)?;
            let op = OpScope::new("aten::select_backward", &[g])?;
            let shape = sizes(&a.ints(1)?)?;
            let (dim, index) = (a.int(2)?, a.int(3)?);
            t1(into_view(&op, Err((&shape, g.dtype())), g, |l| l.select(dim, index)))
        })
        .shard(rep),
        OpDef::new("aten::diagonal_backward", k, all, |_, a| {
            let g = a.tensor(0)?;
            let op = OpScope::new("aten::diagonal_backward", &[g])?;
            let shape = sizes(&a.ints(1)?)?;
            let (off, d1, d2) = (a.int(2)?, a.int(3)?, a.int(4)?);
            t1(into_view(&op, Err((&shape, g.dtype())), g, |l| diagonal_layout(l, off, d1, d2)))
        })
        .shard(rep),
        OpDef::new("aten::unfold_backward", k, all, |_, a| {
            a.int(3)?;
            t1(unfold_backward(a.tensor(0)?, &a.ints(1)?, a.int(2)?, a.int(4)?))
        })
        .shard(rep),
        OpDef::new("aten::slice_scatter", k, all, |_, a| {
            let (x, s) = (a.tensor(0)?, a.tensor(1)?);
            let op = OpScope::new("aten::slice_scatter", &[x, s])?;
            let (dim, start, end, step) = (a.int(2)?, a.opt_int(3)?, a.opt_int(4)?, a.int(5)?);
            t1(into_view(&op, Ok(x), s, |l| l.slice(dim, start, end, step)))
        })
        .shard(rep),
        OpDef::new("aten::select_scatter", k, all, |_, a| {
            let (x, s) = (a.tensor(0)?, a.tensor(1)?);
            let op = OpScope::new("aten::select_scatter", &[x, s])?;
            let (dim, index) = (a.int(2)?, a.int(3)?);
            t1(into_view(&op, Ok(x), s, |l| l.select(dim, index)))
        })
        .shard(rep),
        OpDef::new("aten::diagonal_scatter", k, all, |_, a| {
            let (x, s) = (a.tensor(0)?, a.tensor(1)?);
            let op = OpScope::new("aten::diagonal_scatter", &[x, s])?;
            let (off, d1, d2) = (a.int(2)?, a.int(3)?, a.int(4)?);
            t1(into_view(&op, Ok(x), s, |l| diagonal_layout(l, off, d1, d2)))
        })
        .shard(rep),
        OpDef::new("aten::as_strided_scatter", k, all, |_, a| {
            let (x, s) = (a.tensor(0)?, a.tensor(1)?);
            let op = OpScope::new("aten::as_strided_scatter", &[x, s])?;
            let (size, stride, off) = (a.ints(2)?, a.ints(3)?, a.opt_int(4)?);
            let base_off = x.storage_offset() as i64;
            t1(into_view(&op, Ok(x), s, |l| {
                // `self`'s copy is contiguous at offset 0; the view addresses it as PyTorch
                // addresses `self`'s storage, relative to `self`'s own offset.
                let nl = Layout::as_strided(&size, &stride, off.unwrap_or(base_off) - base_off + l.offset as i64)?;
                let (_, hi) = nl.storage_span();
                if nl.numel() > 0 && hi > l.numel() + l.offset {
                    return Err(TpuError::BadArgs(format!(
                        "as_strided_scatter: size {size:?}, stride {stride:?} and offset {:?} are out of bounds for self of {} elements",
                        off,
                        l.numel()
                    )));
                }
                Ok(nl)
            }))
        })
        .shard(rep),
    ]
}
