//! Sums and means over a tensor's leading dims on the matrix units: `ones[1, R] @ x[R, C]`.
//!
//! A reduction over the leading dims of a contiguous tensor (a bias gradient's `sum(0)`,
//! RMSNorm's weight gradient `(dy * xhat).sum(0)`) reduces along memory's outer axis. The rows
//! kernel reduces along lanes, so it would read such a tensor transposed, one element per HBM
//! burst (16 times the bytes of bf16 data on a v5e, and about ten times the time). As a matrix
//! product with a row of ones the tensor streams through the matrix units in its own layout,
//! read once, each column accumulated in f32 and rounded once to the result dtype, as
//! PyTorch's CPU sum does (the order of the f32 additions differs). bf16 only: a bf16 product
//! with a one is exact in one pass, while an f32 input would need the multi-pass split, whose
//! `inf - inf` parts turn an infinite element into NaN; f32 sums stay on the rows kernel.

use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{BinOp, MatmulPrecision};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape};
use crate::ops::matrix::product_at;
use crate::tensor::Tensor;

use super::reduced_shape;

/// Columns at least this many (one matrix-unit tile wide) and rows at least this many make
/// the product worth it; smaller reductions run in the rows kernel.
const MIN_COLS: usize = 128;
const MIN_ROWS: usize = 16;

/// `sum` (or `mean`) of `x` over `dims` into `out` as a matrix product, when `dims` are `x`'s
/// leading dims, `x` is contiguous and bf16 and `out` its dtype, and the reduction is large
/// enough; `None` otherwise.
pub(super) fn leading(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    out: DType,
    mean: bool,
) -> Result<Option<Tensor>> {
    let k = dims.len();
    let leading = k > 0 && k < x.dim() && dims.iter().enumerate().all(|(i, d)| *d == i);
    if !leading || out != x.dtype() || out != DType::BF16 {
        return Ok(None);
    }
    if !x.is_contiguous() {
        return Ok(None);
    }
    let rows: usize = x.shape()[..k].iter().product();
    let cols: usize = x.shape()[k..].iter().product();
    if rows < MIN_ROWS || cols < MIN_COLS {
        return Ok(None);
    }
    let ones = map_shape(op, &[1, 1, rows], &[], &[out], |p, _| {
        vec![p.constant(Scalar::Float(1.0), out)]
    })?
    .remove(0);
    let mut l = Layout::contiguous(&[1, rows, cols]);
    l.offset = x.layout().offset;
    let w = x.with_layout(l);
    let r = product_at(
        op,
        &ones,
        &w,
        out,
        &[],
        |p, prod, _| {
            if mean {
                let n = p.constant(Scalar::Float(rows as f64), DType::F32);
                p.bin(BinOp::Div, prod, n, DType::F32)
            } else {
                prod
            }
        },
        MatmulPrecision::Default,
    )?;
    let shape = reduced_shape(x.shape(), dims, keepdim);
    Ok(Some(r.with_layout(Layout::contiguous(&shape))))
}
