//! The backward of view operators and the `*_scatter` forms: `slice_backward`,
//! `select_backward`, `diagonal_backward`, `unfold_backward`, `slice_scatter`,
//! `select_scatter`, `diagonal_scatter`, `as_strided_scatter`.
//!
//! Each writes a tensor into a view of a new one (zeros for the backwards, a copy of `self` for
//! the scatters) with one tile kernel; `unfold_backward`, whose windows may overlap, adds every
//! gradient element at its input position with one index-add kernel.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, Combine};
use crate::layout::{Layout, wrap_dim};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_contiguous, map_shape, write_into};
use crate::ops::prims::{self, fill, put_rows, reshaped};
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
    let op = OpScope::new(UnfoldBackward::NAME, &[grad])?;
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

/// A view's backward under the overload's name `name`: `grad` written into `view` of zeros of
/// `input_sizes`.
fn backward_into(
    name: &str,
    grad: &Tensor,
    input_sizes: &[i64],
    view: impl FnOnce(&Layout) -> Result<Layout>,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad])?;
    let shape = sizes(input_sizes)?;
    into_view(&op, Err((&shape, grad.dtype())), grad, view)
}

/// A `*_scatter` under the overload's name `name`: `src` written into `view` of a copy of `x`.
fn scatter_into(
    name: &str,
    x: &Tensor,
    src: &Tensor,
    view: impl FnOnce(&Layout) -> Result<Layout>,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x, src])?;
    into_view(&op, Ok(x), src, view)
}

/// Every operator's rule here.
const REP: Sharding = Sharding::Replicate("writes into a view of the global tensor");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::slice_backward", dtypes = DType::ALL_TPU, shard = REP)]
fn slice_backward_op(a: SliceBackward<'_>) -> Result<Tensor> {
    let (dim, start, end, step) = (a.dim, a.start, a.end, a.step);
    backward_into(SliceBackward::NAME, a.grad_output, &a.input_sizes, |l| {
        l.slice(dim, Some(start), Some(end), step)
    })
}

#[aten("aten::select_backward", dtypes = DType::ALL_TPU, shard = REP)]
fn select_backward_op(a: SelectBackward<'_>) -> Result<Tensor> {
    let (dim, index) = (a.dim, a.index);
    backward_into(SelectBackward::NAME, a.grad_output, &a.input_sizes, |l| {
        l.select(dim, index)
    })
}

#[aten("aten::diagonal_backward", dtypes = DType::ALL_TPU, shard = REP)]
fn diagonal_backward_op(a: DiagonalBackward<'_>) -> Result<Tensor> {
    let (off, d1, d2) = (a.offset, a.dim1, a.dim2);
    backward_into(DiagonalBackward::NAME, a.grad_output, &a.input_sizes, |l| {
        diagonal_layout(l, off, d1, d2)
    })
}

/// `size` is not needed: the windows' count and length are `grad_in`'s.
#[aten("aten::unfold_backward", dtypes = DType::ALL_TPU, shard = REP)]
fn unfold_backward_op(a: UnfoldBackward<'_>) -> Result<Tensor> {
    unfold_backward(a.grad_in, &a.input_sizes, a.dim, a.step)
}

#[aten("aten::slice_scatter", dtypes = DType::ALL_TPU, shard = REP)]
fn slice_scatter_op(a: SliceScatter<'_>) -> Result<Tensor> {
    let (dim, start, end, step) = (a.dim, a.start, a.end, a.step);
    scatter_into(SliceScatter::NAME, a.self_, a.src, |l| {
        l.slice(dim, start, end, step)
    })
}

#[aten("aten::select_scatter", dtypes = DType::ALL_TPU, shard = REP)]
fn select_scatter_op(a: SelectScatter<'_>) -> Result<Tensor> {
    let (dim, index) = (a.dim, a.index);
    scatter_into(SelectScatter::NAME, a.self_, a.src, |l| {
        l.select(dim, index)
    })
}

#[aten("aten::diagonal_scatter", dtypes = DType::ALL_TPU, shard = REP)]
fn diagonal_scatter_op(a: DiagonalScatter<'_>) -> Result<Tensor> {
    let (off, d1, d2) = (a.offset, a.dim1, a.dim2);
    scatter_into(DiagonalScatter::NAME, a.self_, a.src, |l| {
        diagonal_layout(l, off, d1, d2)
    })
}

#[aten("aten::as_strided_scatter", dtypes = DType::ALL_TPU, shard = REP)]
fn as_strided_scatter_op(a: AsStridedScatter<'_>) -> Result<Tensor> {
    let (x, size, stride, off) = (a.self_, &a.size, &a.stride, a.storage_offset);
    let base_off = x.storage_offset() as i64;
    scatter_into(AsStridedScatter::NAME, x, a.src, |l| {
        // `self`'s copy is contiguous at offset 0; the view addresses it as PyTorch
        // addresses `self`'s storage, relative to `self`'s own offset.
        let nl = Layout::as_strided(
            size,
            stride,
            off.unwrap_or(base_off) - base_off + l.offset as i64,
        )?;
        let (_, hi) = nl.storage_span();
        if nl.numel() > 0 && hi > l.numel() + l.offset {
            return Err(TpuError::BadArgs(format!(
                "as_strided_scatter: size {size:?}, stride {stride:?} and offset {:?} are out of bounds for self of {} elements",
                off,
                l.numel()
            )));
        }
        Ok(nl)
    })
}
