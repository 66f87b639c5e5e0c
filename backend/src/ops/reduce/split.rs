//! Whole-tensor reductions of large tensors in two kernels: partial reductions of equal chunks,
//! then their combination.
//!
//! One row per reduction puts a single row in each group of 8 vector sublanes (7/8 of the vector
//! unit idle) and needs the whole row in VMEM (about 1M f32 elements at most on a v5e). Above
//! [`SPLIT_ABOVE`] elements, a reduction over every dim instead reduces rows of equal length to
//! partials (in f32 for floats, so they are not rounded to bf16), then the partials in a second
//! kernel. The rows are the tensor's trailing dims when they hold between 1K and 64K elements
//! (the first kernel then iterates over the tensor's own shape and layout, so DeferAndFuse still
//! fuses an elementwise producer into it); otherwise the elements are read as `[k, c]` in memory
//! order (the order does not matter for these reductions; a layout with gaps is made contiguous
//! first).

use super::reduced_shape;
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{BinOp, PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, rows};
use crate::ops::layout_ops;
use crate::tensor::Tensor;

/// Rows longer than this are split (when every dim is reduced).
pub(super) const SPLIT_ABOVE: usize = 1 << 16;

/// How a reduction over every element splits into chunks.
#[derive(Clone, Copy, Debug)]
pub(super) enum Split {
    /// Each chunk reduced by `kind` after converting the input to `pre`, the partials (of dtype
    /// `acc`) reduced by `kind` again; `mean` divides the total by the element count.
    Assoc {
        kind: RedKind,
        pre: DType,
        acc: DType,
        mean: bool,
    },
    /// The variance from each chunk's mean and sum of squared deviations (Chan, Golub and
    /// LeVeque's pairwise formula for equal chunks); `sqrt` gives the standard deviation.
    Var { correction: f64, sqrt: bool },
}

/// A chunk length dividing `n`: the largest in `[1K, 16K]`, else the smallest in `(16K, 64K]`,
/// else the largest in `[128, 1K)`.
fn chunk_len(n: usize) -> Option<usize> {
    (1024..=16384)
        .rev()
        .chain(16385..=65536)
        .chain((128..1024).rev())
        .find(|c| n.is_multiple_of(*c) && n / c > 1)
}

/// The elements of `x` as one dense run in memory, when its layout is a permutation of a
/// contiguous one (no gaps, no broadcasting, no negative strides).
fn dense_run(x: &Tensor) -> Option<Layout> {
    let l = x.layout();
    let mut dims: Vec<(usize, isize)> = l
        .shape
        .iter()
        .zip(&l.strides)
        .filter(|(s, _)| **s != 1)
        .map(|(s, st)| (*s, *st))
        .collect();
    dims.sort_by_key(|d| d.1);
    let mut expected = 1isize;
    for (s, st) in dims {
        if st != expected {
            return None;
        }
        expected *= s as isize;
    }
    Some(Layout {
        shape: vec![l.numel()],
        strides: vec![1],
        offset: l.offset,
    })
}

/// The first dim of the trailing dims that form the rows: the longest suffix of at most 64K
/// elements, if it holds at least 1K and leaves more than one row.
fn trailing_rows(shape: &[usize]) -> Option<usize> {
    let mut j = shape.len();
    let mut len = 1usize;
    while j > 0 && len * shape[j - 1] <= 1 << 16 {
        j -= 1;
        len *= shape[j];
    }
    (len >= 1024 && j > 0 && shape[..j].iter().product::<usize>() > 1).then_some(j)
}

/// Reduces every element of `x` in two kernels, to `out` (shaped as PyTorch's result with
/// `keepdim`); `None` when no split into equal rows suits.
pub(super) fn reduce_all(
    op: &OpScope,
    x: &Tensor,
    keepdim: bool,
    out: DType,
    split: Split,
) -> Result<Option<Tensor>> {
    let n = x.numel();
    // The rows: trailing dims of `x` itself, or a `[k, c]` view of its elements.
    let (src, shape, first_row) = match trailing_rows(x.shape()) {
        Some(j) => (x.clone(), x.shape().to_vec(), j),
        None => {
            let Some(c) = chunk_len(n) else {
                return Ok(None);
            };
            let run = match dense_run(x) {
                Some(l) => x.with_layout(l),
                None => {
                    let y = layout_ops::contiguous(x)?;
                    let offset = y.layout().offset;
                    y.with_layout(Layout {
                        offset,
                        ..Layout::contiguous(&[n])
                    })
                }
            };
            let offset = run.layout().offset;
            let chunks = run.with_layout(Layout {
                shape: vec![n / c, c],
                strides: vec![c as isize, 1],
                offset,
            });
            (chunks, vec![n / c, c], 1)
        }
    };
    let row_dims: Vec<usize> = (first_row..shape.len()).collect();
    let c: usize = shape[first_row..].iter().product();
    let k = n / c;
    let f = DType::F32;
    let stage1 = |outs: &[(DType, bool)], g: &dyn Fn(&mut ProgBuilder, PRef) -> Vec<PRef>| {
        rows(
            op,
            &shape,
            &row_dims,
            false,
            &[&src],
            &[false],
            outs,
            |p, r| g(p, r[0]),
        )
    };
    let total = match split {
        Split::Assoc {
            kind,
            pre,
            acc,
            mean,
        } => {
            let part = stage1(&[(acc, true)], &|p, v| {
                let v = p.cast(v, pre);
                vec![p.reduce(kind, v, acc)]
            })?
            .remove(0);
            let pshape = part.shape().to_vec();
            let all: Vec<usize> = (0..pshape.len()).collect();
            rows(
                op,
                &pshape,
                &all,
                false,
                &[&part],
                &[false],
                &[(out, true)],
                |p, r| {
                    let t = p.reduce(kind, r[0], acc);
                    if mean {
                        let nn = p.constant(Scalar::Float(n as f64), f);
                        vec![p.bin(BinOp::Div, t, nn, f)]
                    } else {
                        vec![t]
                    }
                },
            )?
            .remove(0)
        }
        Split::Var { correction, sqrt } => {
            let mut parts = stage1(&[(f, true), (f, true)], &|p, v| {
                let v = p.cast(v, f);
                let s = p.reduce(RedKind::Sum, v, f);
                let cc = p.constant(Scalar::Float(c as f64), f);
                let m = p.bin(BinOp::Div, s, cc, f);
                let d = p.bin(BinOp::Sub, v, m, f);
                let d2 = p.bin(BinOp::Mul, d, d, f);
                vec![m, p.reduce(RedKind::Sum, d2, f)]
            })?;
            let (means, m2s) = (parts.remove(0), parts.remove(0));
            let pshape = means.shape().to_vec();
            let all: Vec<usize> = (0..pshape.len()).collect();
            rows(
                op,
                &pshape,
                &all,
                false,
                &[&means, &m2s],
                &[false, false],
                &[(out, true)],
                |p, r| {
                    let s = p.reduce(RedKind::Sum, r[0], f);
                    let kk = p.constant(Scalar::Float(k as f64), f);
                    let mean = p.bin(BinOp::Div, s, kk, f);
                    let d = p.bin(BinOp::Sub, r[0], mean, f);
                    let d2 = p.bin(BinOp::Mul, d, d, f);
                    let between = p.reduce(RedKind::Sum, d2, f);
                    let cc = p.constant(Scalar::Float(c as f64), f);
                    let between = p.bin(BinOp::Mul, between, cc, f);
                    let within = p.reduce(RedKind::Sum, r[1], f);
                    let m2 = p.bin(BinOp::Add, within, between, f);
                    let denom = (n as f64 - correction).max(0.0);
                    let dn = p.constant(Scalar::Float(denom), f);
                    let var = p.bin(BinOp::Div, m2, dn, f);
                    vec![if sqrt { p.un(UnOp::Sqrt, var, f) } else { var }]
                },
            )?
            .remove(0)
        }
    };
    let all: Vec<usize> = (0..x.dim()).collect();
    let shape = reduced_shape(x.shape(), &all, keepdim);
    Ok(Some(total.with_layout(Layout::contiguous(&shape))))
}
