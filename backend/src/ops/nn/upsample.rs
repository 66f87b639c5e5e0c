//! Resampling: `upsample_nearest{1,2,3}d`, `_upsample_nearest_exact{1,2,3}d`,
//! `upsample_linear1d`, `upsample_bilinear2d`, `upsample_trilinear3d`, `upsample_bicubic2d`
//! (and their `.vec` forms).
//!
//! Every mode is separable: the output is one pass per spatial dim, last dim first (the order
//! PyTorch's CPU kernels interpolate in), each a rows kernel whose row is the input dim and
//! whose program computes, from the output coordinate `o` and the input coordinate `i`, the
//! weight of `x[i]` in `y[o]` with PyTorch's source-index rules (`area_pixel_compute_scale`,
//! `area_pixel_compute_source_index`, the cubic convolution with `A = -0.75`, clamped taps).
//! Intermediates stay in f32; the last pass rounds to the input's dtype once.

use super::F;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::tensor::Tensor;

/// How an output coordinate draws on the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Interp {
    /// `floor(o·scale)`.
    Nearest,
    /// `floor((o + 0.5)·scale)`.
    NearestExact,
    /// Two taps.
    Linear,
    /// Four taps, cubic convolution.
    Cubic,
}

const I: DType = DType::I32;

fn f(p: &mut ProgBuilder, v: f64) -> PRef {
    p.constant(Scalar::Float(v), F)
}

/// `PyTorch`'s `area_pixel_compute_scale` (and for nearest, `compute_scales_value`).
fn scale_of(input: usize, out: usize, align: bool, scale: Option<f64>, mode: Interp) -> f64 {
    let linear = matches!(mode, Interp::Linear | Interp::Cubic);
    if linear && align {
        if out > 1 {
            (input as f64 - 1.0) / (out as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => (1.0 / s) as f32 as f64,
            _ => (input as f32 / out as f32) as f64,
        }
    }
}

/// Keys' cubic convolution at distance `x` within 1 of the tap: `((A+2)·x - (A+3))·x·x + 1`.
pub(super) fn cubic_near(p: &mut ProgBuilder, x: PRef, a: f64) -> PRef {
    let a2 = f(p, a + 2.0);
    let r = p.bin(BinOp::Mul, a2, x, F);
    let a3 = f(p, a + 3.0);
    let r = p.bin(BinOp::Sub, r, a3, F);
    let r = p.bin(BinOp::Mul, r, x, F);
    let r = p.bin(BinOp::Mul, r, x, F);
    let one = f(p, 1.0);
    p.bin(BinOp::Add, r, one, F)
}

/// Keys' cubic convolution at distance `x` between 1 and 2: `((A·x - 5A)·x + 8A)·x - 4A`.
pub(super) fn cubic_far(p: &mut ProgBuilder, x: PRef, a: f64) -> PRef {
    let ac = f(p, a);
    let ax = p.bin(BinOp::Mul, ac, x, F);
    let c5 = f(p, 5.0 * a);
    let r = p.bin(BinOp::Sub, ax, c5, F);
    let r = p.bin(BinOp::Mul, r, x, F);
    let c8 = f(p, 8.0 * a);
    let r = p.bin(BinOp::Add, r, c8, F);
    let r = p.bin(BinOp::Mul, r, x, F);
    let c4 = f(p, 4.0 * a);
    p.bin(BinOp::Sub, r, c4, F)
}

/// `[w]` where `cond`, else 0.
fn tap(p: &mut ProgBuilder, i: PRef, at: PRef, w: PRef) -> PRef {
    let hit = p.cmp(CmpKind::Eq, i, at, I);
    let zero = f(p, 0.0);
    p.select(hit, w, zero, F)
}

/// The weight of input coordinate `i` in output coordinate `o`.
fn weight(
    p: &mut ProgBuilder,
    o: PRef,
    i: PRef,
    input: usize,
    sc: f64,
    align: bool,
    mode: Interp,
) -> PRef {
    let last = p.constant(Scalar::Int(input as i64 - 1), I);
    let of = p.cast(o, F);
    let s = f(p, sc);
    match mode {
        Interp::Nearest | Interp::NearestExact => {
            let base = if mode == Interp::NearestExact {
                let h = f(p, 0.5);
                p.bin(BinOp::Add, of, h, F)
            } else {
                of
            };
            let src = p.bin(BinOp::Mul, base, s, F);
            let fl = p.un(UnOp::Floor, src, F);
            let si = p.cast(fl, I);
            let si = p.bin(BinOp::Min, si, last, I);
            let one = f(p, 1.0);
            tap(p, i, si, one)
        }
        Interp::Linear => {
            let src = if align {
                p.bin(BinOp::Mul, of, s, F)
            } else {
                let h = f(p, 0.5);
                let oh = p.bin(BinOp::Add, of, h, F);
                let m = p.bin(BinOp::Mul, oh, s, F);
                let r = p.bin(BinOp::Sub, m, h, F);
                let zero = f(p, 0.0);
                p.bin(BinOp::Max, r, zero, F)
            };
            let i0 = p.cast(src, I);
            let i0f = p.cast(i0, F);
            let l1 = p.bin(BinOp::Sub, src, i0f, F);
            let one = f(p, 1.0);
            let l0 = p.bin(BinOp::Sub, one, l1, F);
            let lt = p.cmp(CmpKind::Lt, i0, last, I);
            let onei = p.constant(Scalar::Int(1), I);
            let zeroi = p.constant(Scalar::Int(0), I);
            let step = p.select(lt, onei, zeroi, I);
            let i1 = p.bin(BinOp::Add, i0, step, I);
            let a = tap(p, i, i0, l0);
            let b = tap(p, i, i1, l1);
            p.bin(BinOp::Add, a, b, F)
        }
        Interp::Cubic => {
            let src = if align {
                p.bin(BinOp::Mul, of, s, F)
            } else {
                let h = f(p, 0.5);
                let oh = p.bin(BinOp::Add, of, h, F);
                let m = p.bin(BinOp::Mul, oh, s, F);
                p.bin(BinOp::Sub, m, h, F)
            };
            let fl = p.un(UnOp::Floor, src, F);
            let t = p.bin(BinOp::Sub, src, fl, F);
            let i0 = p.cast(fl, I);
            let a = -0.75;
            // Coefficients for taps at distance t+1, t, 1-t, 2-t.
            let one = f(p, 1.0);
            let two = f(p, 2.0);
            let t1 = p.bin(BinOp::Add, t, one, F);
            let u = p.bin(BinOp::Sub, one, t, F);
            let u2 = p.bin(BinOp::Sub, two, t, F);
            let cs = [
                cubic_far(p, t1, a),
                cubic_near(p, t, a),
                cubic_near(p, u, a),
                cubic_far(p, u2, a),
            ];
            let zeroi = p.constant(Scalar::Int(0), I);
            let mut acc = f(p, 0.0);
            for (k, c) in cs.into_iter().enumerate() {
                let off = p.constant(Scalar::Int(k as i64 - 1), I);
                let at = p.bin(BinOp::Add, i0, off, I);
                let at = p.bin(BinOp::Max, at, zeroi, I);
                let at = p.bin(BinOp::Min, at, last, I);
                let w = tap(p, i, at, c);
                acc = p.bin(BinOp::Add, acc, w, F);
            }
            acc
        }
    }
}

/// One pass along `dim`: `y[..o..] = Σ_i weight(o, i)·t[..i..]`, in f32.
fn pass(
    op: &OpScope,
    t: &Tensor,
    dim: usize,
    out: usize,
    sc: f64,
    align: bool,
    mode: Interp,
) -> Result<Tensor> {
    let input = t.shape()[dim];
    contract(op, t, dim, out, input, sc, align, mode, false)
}

/// `t` seen with its `dim` moved to a new last dim (the row of a contraction) and a dim of
/// `len` broadcast in its place (the contraction's result dim), and that shape.
pub(super) fn dim_as_row(t: &Tensor, dim: usize, len: usize) -> (Tensor, Vec<usize>) {
    let mut shape = t.shape().to_vec();
    shape[dim] = len;
    shape.push(t.shape()[dim]);
    let l = t.layout();
    let mut strides = l.strides.clone();
    strides[dim] = 0;
    strides.push(l.strides[dim]);
    let tv = t.with_layout(Layout {
        shape: shape.clone(),
        strides,
        offset: l.offset,
    });
    (tv, shape)
}

/// Contracts `t`'s `dim` against the interpolation weights into a dim of `len`, in f32: forward
/// (`adjoint` false: the new dim is the output's, `t`'s the input's) or its adjoint (the new dim
/// is the input's, `t`'s the output's). `input` is the forward input's length either way. A
/// rows kernel whose row is `t`'s dim.
#[allow(clippy::too_many_arguments)]
fn contract(
    op: &OpScope,
    t: &Tensor,
    dim: usize,
    len: usize,
    input: usize,
    sc: f64,
    align: bool,
    mode: Interp,
    adjoint: bool,
) -> Result<Tensor> {
    let n = t.dim();
    let (tv, shape) = dim_as_row(t, dim, len);
    Ok(rows(
        op,
        &shape,
        &[n],
        false,
        &[&tv],
        &[false],
        &[(F, true)],
        |p, r| {
            let (new, row) = (p.index(dim as u32), p.index(n as u32));
            let (o, i) = if adjoint { (row, new) } else { (new, row) };
            let w = weight(p, o, i, input, sc, align, mode);
            let v = p.cast(r[0], F);
            let prod = p.bin(BinOp::Mul, w, v, F);
            vec![p.reduce(RedKind::Sum, prod, F)]
        },
    )?
    .remove(0))
}

/// Resolves `output_size` or `scale_factors` (the `.vec` forms) to sizes and scales.
pub fn sizes_of(
    name: &str,
    x: &Tensor,
    nd: usize,
    output_size: Option<&[i64]>,
    scale_factors: Option<&[f64]>,
) -> Result<(Vec<i64>, Vec<Option<f64>>)> {
    let spatial = &x.shape()[x.dim().saturating_sub(nd)..];
    match (output_size, scale_factors) {
        (Some(o), None) => Ok((o.to_vec(), vec![None; nd])),
        (None, Some(s)) if s.len() == nd => Ok((
            spatial
                .iter()
                .zip(s)
                .map(|(&i, &f)| (i as f64 * f).floor() as i64)
                .collect(),
            s.iter().map(|&f| Some(f)).collect(),
        )),
        _ => Err(TpuError::BadArgs(format!(
            "{name}: Must specify exactly one of output_size and scale_factors"
        ))),
    }
}

/// Resamples the last `nd` dims of `x` (`[N, C, spatial...]`) to `output_size`.
pub fn upsample(
    name: &str,
    nd: usize,
    x: &Tensor,
    output_size: &[i64],
    align: bool,
    scales: &[Option<f64>],
    mode: Interp,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    if x.dim() != nd + 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected {}D input (got {}D input)",
            nd + 2,
            x.dim()
        )));
    }
    if output_size.len() != nd || output_size.iter().any(|&o| o <= 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: Input and output sizes should be greater than 0, but got input {:?} and output {output_size:?}",
            &x.shape()[2..]
        )));
    }
    if x.shape()[2..].contains(&0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: Input and output sizes should be greater than 0, but got input {:?} and output {output_size:?}",
            &x.shape()[2..]
        )));
    }
    let dt = x.dtype();
    let mut shape = x.shape()[..2].to_vec();
    shape.extend(output_size.iter().map(|&o| o as usize));
    if shape.iter().product::<usize>() == 0 {
        return Tensor::empty(op.rt(), &shape, dt);
    }
    let mut cur = x.clone();
    for i in (0..nd).rev() {
        let d = 2 + i;
        let (input, out) = (x.shape()[d], output_size[i] as usize);
        let sc = scale_of(input, out, align, scales.get(i).copied().flatten(), mode);
        cur = pass(&op, &cur, d, out, sc, align, mode)?;
    }
    Ok(map_shape(&op, &shape, &[&cur], &[dt], |_, r| vec![r[0]])?.remove(0))
}

/// One backward pass along `dim`: `gx[..i..] = Σ_o weight(o, i)·g[..o..]` (the adjoint of
/// [`pass`]).
fn back_pass(
    op: &OpScope,
    g: &Tensor,
    dim: usize,
    input: usize,
    sc: f64,
    align: bool,
    mode: Interp,
) -> Result<Tensor> {
    contract(op, g, dim, input, input, sc, align, mode, true)
}

/// A resampling backward's `grad_output` must be `input_size`'s batch and channels over
/// `output_size`.
pub(super) fn grad_shape_check(
    name: &str,
    grad: &Tensor,
    input_size: &[i64],
    output_size: &[i64],
) -> Result<()> {
    let mut want = input_size[..2].to_vec();
    want.extend_from_slice(output_size);
    let gs: Vec<i64> = grad.shape().iter().map(|&s| s as i64).collect();
    if gs != want {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: Expected grad_output to have the shape {want:?}, but got {:?}",
            grad.shape()
        )));
    }
    Ok(())
}

/// `upsample_*_backward(grad_output, output_size, input_size, [align_corners,] scales...)`:
/// the gradient of [`upsample`], one adjoint pass per spatial dim (f32 between passes).
#[allow(clippy::too_many_arguments)]
pub fn upsample_backward(
    name: &str,
    nd: usize,
    grad: &Tensor,
    output_size: &[i64],
    input_size: &[i64],
    align: bool,
    scales: &[Option<f64>],
    mode: Interp,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad])?;
    if input_size.len() != nd + 2 || output_size.len() != nd || input_size.iter().any(|&s| s < 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: expected output_size of {nd} and input_size of {} values, got {output_size:?} and {input_size:?}",
            nd + 2
        )));
    }
    grad_shape_check(name, grad, input_size, output_size)?;
    let dt = grad.dtype();
    let shape: Vec<usize> = input_size.iter().map(|&s| s as usize).collect();
    if grad.numel() == 0 || shape.iter().product::<usize>() == 0 {
        return Ok(map_shape(&op, &shape, &[], &[dt], |p, _| {
            vec![p.constant(Scalar::Int(0), dt)]
        })?
        .remove(0));
    }
    let mut cur = grad.clone();
    for (i, &o) in output_size.iter().enumerate() {
        let d = 2 + i;
        let (input, out) = (shape[d], o as usize);
        let sc = scale_of(input, out, align, scales.get(i).copied().flatten(), mode);
        cur = back_pass(&op, &cur, d, input, sc, align, mode)?;
    }
    Ok(map_shape(&op, &shape, &[&cur], &[dt], |_, r| vec![r[0]])?.remove(0))
}
