//! Antialiased resampling: `_upsample_bilinear2d_aa`, `_upsample_bicubic2d_aa` and their
//! backward (what `F.interpolate(..., antialias=True)` calls).
//!
//! PyTorch's CPU kernel (`_compute_weights_aa`): along each dim, output `o` draws on the input
//! window `[xmin, xmin + xsize)` around `center = scale (o + 0.5)`, `support` wide on each side
//! (`interp_size / 2`, times `scale` when shrinking), with weights `filter((i - center + 0.5) /
//! max(scale, 1))` divided by their sum: the triangle for bilinear, Keys' cubic with `a = -0.5`
//! for bicubic. The constants are f32 as PyTorch's (float) kernel computes them, the weights in
//! f32 on the device. The dims are resampled last first, and a dim whose size does not change is
//! left as it is, as in PyTorch's forward kernel (whatever the scale); its backward kernel
//! applies every dim's weights, and so does the backward here.
//!
//! Each dim is two rows kernels: the weights' sums per output coordinate (`[out, in]`, one
//! over the window), then the contraction of the data with the weights, divided by the sum
//! (forward), or the gradient over the sum contracted with the weights (backward, the adjoint).
//! Registered for float32 (PyTorch computes bfloat16 weights in bfloat16; such calls fall back
//! to the CPU).

use super::F;
use super::upsample::{cubic_far, cubic_near, dim_as_row, grad_shape_check};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

const I: DType = DType::I32;

/// The antialiasing filter.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Filter {
    /// `1 - |x|` inside `|x| < 1`.
    Triangle,
    /// Keys' cubic convolution, `a = -0.5`.
    Cubic,
}

impl Filter {
    /// PyTorch's `interp_size`.
    fn size(self) -> f32 {
        match self {
            Filter::Triangle => 2.0,
            Filter::Cubic => 4.0,
        }
    }

    /// The filter at `x`.
    fn at(self, p: &mut ProgBuilder, x: PRef) -> PRef {
        let x = p.un(UnOp::Abs, x, F);
        let one = p.constant(Scalar::Float(1.0), F);
        let zero = p.constant(Scalar::Float(0.0), F);
        let inner = p.cmp(CmpKind::Lt, x, one, F);
        match self {
            Filter::Triangle => {
                let w = p.bin(BinOp::Sub, one, x, F);
                p.select(inner, w, zero, F)
            }
            Filter::Cubic => {
                let a = -0.5;
                let near = cubic_near(p, x, a);
                let far = cubic_far(p, x, a);
                let two = p.constant(Scalar::Float(2.0), F);
                let middle = p.cmp(CmpKind::Lt, x, two, F);
                let outer = p.select(middle, far, zero, F);
                p.select(inner, near, outer, F)
            }
        }
    }
}

/// One dim's resampling: its input and output lengths and PyTorch's f32 constants.
#[derive(Clone, Copy, Debug)]
struct Axis {
    input: usize,
    out: usize,
    scale: f32,
    support: f32,
    invscale: f32,
    /// The widest window (`ceil(support) * 2 + 1`).
    widest: i64,
    filter: Filter,
}

impl Axis {
    /// PyTorch's `area_pixel_compute_scale` (in float) and the window's constants.
    fn new(input: usize, out: usize, align: bool, scale: Option<f64>, filter: Filter) -> Axis {
        let scale = if align {
            if out > 1 {
                (input as f32 - 1.0) / (out as f32 - 1.0)
            } else {
                0.0
            }
        } else {
            match scale {
                Some(s) if s > 0.0 => (1.0 / s) as f32,
                _ => input as f32 / out as f32,
            }
        };
        let support = if scale >= 1.0 {
            filter.size() * 0.5 * scale
        } else {
            filter.size() * 0.5
        };
        Axis {
            input,
            out,
            scale,
            support,
            invscale: if scale >= 1.0 { 1.0 / scale } else { 1.0 },
            widest: support.ceil() as i64 * 2 + 1,
            filter,
        }
    }

    /// The unnormalised weight of input coordinate `i` in output coordinate `o` (0 outside
    /// the window).
    fn weight(&self, p: &mut ProgBuilder, o: PRef, i: PRef) -> PRef {
        let c = |p: &mut ProgBuilder, v: f32| p.constant(Scalar::Float(v as f64), F);
        let of = p.cast(o, F);
        let half = c(p, 0.5);
        let s = c(p, self.scale);
        let oh = p.bin(BinOp::Add, of, half, F);
        let center = p.bin(BinOp::Mul, s, oh, F);
        let support = c(p, self.support);
        // xmin = max(trunc(center - support + 0.5), 0); the end min(trunc(center + support +
        // 0.5), input), at most `widest` after xmin.
        let lo = p.bin(BinOp::Sub, center, support, F);
        let lo = p.bin(BinOp::Add, lo, half, F);
        let lo = p.cast(lo, I);
        let zero_i = p.constant(Scalar::Int(0), I);
        let lo = p.bin(BinOp::Max, lo, zero_i, I);
        let hi = p.bin(BinOp::Add, center, support, F);
        let hi = p.bin(BinOp::Add, hi, half, F);
        let hi = p.cast(hi, I);
        let len = p.constant(Scalar::Int(self.input as i64), I);
        let hi = p.bin(BinOp::Min, hi, len, I);
        let widest = p.constant(Scalar::Int(self.widest), I);
        let cap = p.bin(BinOp::Add, lo, widest, I);
        let hi = p.bin(BinOp::Min, hi, cap, I);
        let from = p.cmp(CmpKind::Ge, i, lo, I);
        let before = p.cmp(CmpKind::Lt, i, hi, I);
        let inside = p.bin(BinOp::And, from, before, DType::Bool);
        // filter((i - center + 0.5) * invscale), PyTorch's order.
        let fi = p.cast(i, F);
        let x = p.bin(BinOp::Sub, fi, center, F);
        let x = p.bin(BinOp::Add, x, half, F);
        let inv = c(p, self.invscale);
        let x = p.bin(BinOp::Mul, x, inv, F);
        let w = self.filter.at(p, x);
        let zero = c(p, 0.0);
        p.select(inside, w, zero, F)
    }

    /// `1 / (sum of o's weights)` for each output coordinate (1 where they sum to 0: PyTorch
    /// leaves such weights as they are), `[out]` f32.
    fn norms(&self, op: &OpScope) -> Result<Tensor> {
        let me = *self;
        let r = rows(
            op,
            &[self.out, self.input],
            &[1],
            false,
            &[],
            &[],
            &[(F, true)],
            move |p, _| {
                let (o, i) = (p.index(0), p.index(1));
                let w = me.weight(p, o, i);
                let total = p.reduce(RedKind::Sum, w, F);
                let zero = p.constant(Scalar::Float(0.0), F);
                let one = p.constant(Scalar::Float(1.0), F);
                let none = p.cmp(CmpKind::Eq, total, zero, F);
                let safe = p.select(none, one, total, F);
                vec![p.bin(BinOp::Div, one, safe, F)]
            },
        )?;
        Ok(r.into_iter().next().expect("one output"))
    }

    /// Contracts `t`'s `dim` with the normalised weights: forward (`t`'s dim is the input's,
    /// the new one the output's) or the adjoint (the other way round). A rows kernel whose row
    /// is `t`'s dim; the norms enter per output coordinate.
    fn contract(&self, op: &OpScope, t: &Tensor, dim: usize, adjoint: bool) -> Result<Tensor> {
        let norms = self.norms(op)?;
        let len = if adjoint { self.input } else { self.out };
        let n = t.dim();
        let (tv, shape) = dim_as_row(t, dim, len);
        // The norm of the output coordinate: the new dim (forward) or the row (adjoint).
        let mut nstrides = vec![0isize; n + 1];
        nstrides[if adjoint { n } else { dim }] = 1;
        let nv = norms.with_layout(Layout {
            shape: shape.clone(),
            strides: nstrides,
            offset: 0,
        });
        let me = *self;
        let r = rows(
            op,
            &shape,
            &[n],
            false,
            &[&tv, &nv],
            &[false, false],
            &[(F, true)],
            move |p, r| {
                let (new, row) = (p.index(dim as u32), p.index(n as u32));
                let (o, i) = if adjoint { (row, new) } else { (new, row) };
                let w = me.weight(p, o, i);
                let w = p.bin(BinOp::Mul, w, r[1], F);
                let v = p.cast(r[0], F);
                let prod = p.bin(BinOp::Mul, w, v, F);
                vec![p.reduce(RedKind::Sum, prod, F)]
            },
        )?;
        Ok(r.into_iter().next().expect("one output"))
    }
}

/// The axes of a 2-d resampling from `input [N, C, H, W]` sizes to `output_size`.
fn axes(
    input: &[usize],
    output_size: &[i64],
    align: bool,
    scales: [Option<f64>; 2],
    filter: Filter,
) -> Vec<Axis> {
    (0..2)
        .map(|k| {
            Axis::new(
                input[2 + k],
                output_size[k] as usize,
                align,
                scales[k],
                filter,
            )
        })
        .collect()
}

/// The argument checks PyTorch's `upsample_2d_common_check` makes.
fn check_sizes(name: &str, input: &[usize], output_size: &[i64]) -> Result<()> {
    if output_size.len() != 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: It is expected output_size equals to 2, but got size {}",
            output_size.len()
        )));
    }
    if input.len() != 4 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected 4D input (got {}D input)",
            input.len()
        )));
    }
    if input[2..].contains(&0) || output_size.iter().any(|&o| o <= 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: Input and output sizes should be greater than 0, but got input (H: {}, W: {}) output (H: {}, W: {})",
            input[2], input[3], output_size[0], output_size[1]
        )));
    }
    Ok(())
}

/// Float32 only: other dtypes are PyTorch's to compute (see the module docs).
fn float32_only(name: &str, dt: DType) -> Result<()> {
    if dt == F {
        Ok(())
    } else {
        Err(TpuError::Unsupported(format!(
            "{name}: {} is computed by PyTorch's CPU kernel (its weights in that dtype)",
            dt.name()
        )))
    }
}

/// The antialiased resampling of `x [N, C, H, W]` to `output_size`.
fn upsample_aa(
    name: &str,
    x: &Tensor,
    output_size: &[i64],
    align: bool,
    scales: [Option<f64>; 2],
    filter: Filter,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    float32_only(name, x.dtype())?;
    check_sizes(name, x.shape(), output_size)?;
    let dt = x.dtype();
    let mut shape = x.shape()[..2].to_vec();
    shape.extend(output_size.iter().map(|&o| o as usize));
    if shape.iter().product::<usize>() == 0 {
        return Tensor::empty(op.rt(), &shape, dt);
    }
    let mut cur = x.clone();
    for (k, ax) in axes(x.shape(), output_size, align, scales, filter)
        .iter()
        .enumerate()
        .rev()
    {
        if ax.input != ax.out {
            cur = ax.contract(&op, &cur, 2 + k, false)?;
        }
    }
    Ok(map_shape(&op, &shape, &[&cur], &[dt], |_, r| vec![r[0]])?.remove(0))
}

/// The gradient of [`upsample_aa`]: the adjoint of each dim's contraction.
fn upsample_aa_backward(
    name: &str,
    grad: &Tensor,
    output_size: &[i64],
    input_size: &[i64],
    align: bool,
    scales: [Option<f64>; 2],
    filter: Filter,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad])?;
    float32_only(name, grad.dtype())?;
    if input_size.iter().any(|&s| s < 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: negative input_size {input_size:?}"
        )));
    }
    let shape: Vec<usize> = input_size.iter().map(|&s| s as usize).collect();
    check_sizes(name, &shape, output_size)?;
    grad_shape_check(name, grad, input_size, output_size)?;
    let dt = grad.dtype();
    if grad.numel() == 0 || shape.iter().product::<usize>() == 0 {
        return Ok(map_shape(&op, &shape, &[], &[dt], |p, _| {
            vec![p.constant(Scalar::Int(0), dt)]
        })?
        .remove(0));
    }
    // Every dim, whether its size changed or not (PyTorch's backward kernel skips none).
    let mut cur = grad.clone();
    for (k, ax) in axes(&shape, output_size, align, scales, filter)
        .iter()
        .enumerate()
    {
        cur = ax.contract(&op, &cur, 2 + k, true)?;
    }
    Ok(map_shape(&op, &shape, &[&cur], &[dt], |_, r| vec![r[0]])?.remove(0))
}

/// Why antialiased resampling replicates.
const WINDOWS: Sharding = Sharding::Replicate("resampling windows cross shard bounds");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::_upsample_bilinear2d_aa", dtypes = &[DType::F32], shard = WINDOWS)]
fn upsample_bilinear2d_aa_op(a: UpsampleBilinear2dAa<'_>) -> Result<Tensor> {
    let s = [a.scales_h, a.scales_w];
    let name = UpsampleBilinear2dAa::NAME;
    upsample_aa(
        name,
        a.self_,
        &a.output_size,
        a.align_corners,
        s,
        Filter::Triangle,
    )
}

#[aten("aten::_upsample_bicubic2d_aa", dtypes = &[DType::F32], shard = WINDOWS)]
fn upsample_bicubic2d_aa_op(a: UpsampleBicubic2dAa<'_>) -> Result<Tensor> {
    let s = [a.scales_h, a.scales_w];
    let name = UpsampleBicubic2dAa::NAME;
    upsample_aa(
        name,
        a.self_,
        &a.output_size,
        a.align_corners,
        s,
        Filter::Cubic,
    )
}

#[aten("aten::_upsample_bilinear2d_aa_backward", dtypes = &[DType::F32], shard = WINDOWS)]
fn upsample_bilinear2d_aa_backward_op(a: UpsampleBilinear2dAaBackward<'_>) -> Result<Tensor> {
    let s = [a.scales_h, a.scales_w];
    let name = UpsampleBilinear2dAaBackward::NAME;
    let (o, i) = (&a.output_size, &a.input_size);
    upsample_aa_backward(
        name,
        a.grad_output,
        o,
        i,
        a.align_corners,
        s,
        Filter::Triangle,
    )
}

#[aten("aten::_upsample_bicubic2d_aa_backward", dtypes = &[DType::F32], shard = WINDOWS)]
fn upsample_bicubic2d_aa_backward_op(a: UpsampleBicubic2dAaBackward<'_>) -> Result<Tensor> {
    let s = [a.scales_h, a.scales_w];
    let name = UpsampleBicubic2dAaBackward::NAME;
    let (o, i) = (&a.output_size, &a.input_size);
    upsample_aa_backward(name, a.grad_output, o, i, a.align_corners, s, Filter::Cubic)
}
