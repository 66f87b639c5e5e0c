//! The registered resampling overloads: `upsample_*` forward and backward (plain and `.vec`
//! forms), `grid_sampler_2d` and `grid_sampler_3d`, one `#[aten]` function each; all of them
//! run replicated when sharded, since windows cross shard bounds.

use super::Interp::{Cubic, Linear, Nearest, NearestExact};
use super::{
    Interp, WINDOWS, grid_sampler_2d, grid_sampler_3d, sizes_of, upsample, upsample_backward,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::aten;
use crate::tensor::Tensor;

/// A plain overload: `output_size` and one optional scale per spatial dim.
fn resample(
    name: &str,
    x: &Tensor,
    output_size: &[i64],
    align: bool,
    scales: &[Option<f64>],
    mode: Interp,
) -> Result<Tensor> {
    upsample(name, scales.len(), x, output_size, align, scales, mode)
}

/// A `.vec` overload: the output size from `output_size` or from `scale_factors` (one per
/// spatial dim).
fn resample_vec(
    name: &str,
    nd: usize,
    x: &Tensor,
    output_size: Option<Vec<i64>>,
    align: bool,
    scale_factors: Option<Vec<f64>>,
    mode: Interp,
) -> Result<Tensor> {
    let (size, scales) = sizes_of(
        name,
        x,
        nd,
        output_size.as_deref(),
        scale_factors.as_deref(),
    )?;
    upsample(name, nd, x, &size, align, &scales, mode)
}

/// A backward overload: the gradient of [`resample`].
fn resample_grad(
    name: &str,
    grad: &Tensor,
    output_size: &[i64],
    input_size: &[i64],
    align: bool,
    scales: &[Option<f64>],
    mode: Interp,
) -> Result<Tensor> {
    let nd = scales.len();
    upsample_backward(name, nd, grad, output_size, input_size, align, scales, mode)
}

// Upsampling: `output_size` and an optional scale per spatial dim, or (`.vec`) either
// `output_size` or `scale_factors`.

#[aten("aten::upsample_nearest1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest1d_op(a: UpsampleNearest1d<'_>) -> Result<Tensor> {
    let name = UpsampleNearest1d::NAME;
    let s = [a.scales];
    resample(name, a.self_, &a.output_size, false, &s, Nearest)
}

#[aten("aten::upsample_nearest1d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest1d_vec_op(a: UpsampleNearest1dVec<'_>) -> Result<Tensor> {
    let name = UpsampleNearest1dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 1, a.input, size, false, s, Nearest)
}

#[aten("aten::upsample_nearest2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest2d_op(a: UpsampleNearest2d<'_>) -> Result<Tensor> {
    let name = UpsampleNearest2d::NAME;
    let s = [a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, false, &s, Nearest)
}

#[aten("aten::upsample_nearest2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest2d_vec_op(a: UpsampleNearest2dVec<'_>) -> Result<Tensor> {
    let name = UpsampleNearest2dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 2, a.input, size, false, s, Nearest)
}

#[aten("aten::upsample_nearest3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest3d_op(a: UpsampleNearest3d<'_>) -> Result<Tensor> {
    let name = UpsampleNearest3d::NAME;
    let s = [a.scales_d, a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, false, &s, Nearest)
}

#[aten("aten::upsample_nearest3d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest3d_vec_op(a: UpsampleNearest3dVec<'_>) -> Result<Tensor> {
    let name = UpsampleNearest3dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 3, a.input, size, false, s, Nearest)
}

#[aten("aten::_upsample_nearest_exact1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact1d_op(a: UpsampleNearestExact1d<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact1d::NAME;
    let s = [a.scales];
    resample(name, a.self_, &a.output_size, false, &s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact1d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact1d_vec_op(a: UpsampleNearestExact1dVec<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact1dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 1, a.input, size, false, s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact2d_op(a: UpsampleNearestExact2d<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact2d::NAME;
    let s = [a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, false, &s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact2d_vec_op(a: UpsampleNearestExact2dVec<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact2dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 2, a.input, size, false, s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact3d_op(a: UpsampleNearestExact3d<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact3d::NAME;
    let s = [a.scales_d, a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, false, &s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact3d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact3d_vec_op(a: UpsampleNearestExact3dVec<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact3dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 3, a.input, size, false, s, NearestExact)
}

#[aten("aten::upsample_linear1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_linear1d_op(a: UpsampleLinear1d<'_>) -> Result<Tensor> {
    let name = UpsampleLinear1d::NAME;
    let s = [a.scales];
    resample(name, a.self_, &a.output_size, a.align_corners, &s, Linear)
}

#[aten("aten::upsample_linear1d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_linear1d_vec_op(a: UpsampleLinear1dVec<'_>) -> Result<Tensor> {
    let name = UpsampleLinear1dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 1, a.input, size, a.align_corners, s, Linear)
}

#[aten("aten::upsample_bilinear2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bilinear2d_op(a: UpsampleBilinear2d<'_>) -> Result<Tensor> {
    let name = UpsampleBilinear2d::NAME;
    let s = [a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, a.align_corners, &s, Linear)
}

#[aten("aten::upsample_bilinear2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bilinear2d_vec_op(a: UpsampleBilinear2dVec<'_>) -> Result<Tensor> {
    let name = UpsampleBilinear2dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 2, a.input, size, a.align_corners, s, Linear)
}

#[aten("aten::upsample_trilinear3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_trilinear3d_op(a: UpsampleTrilinear3d<'_>) -> Result<Tensor> {
    let name = UpsampleTrilinear3d::NAME;
    let s = [a.scales_d, a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, a.align_corners, &s, Linear)
}

#[aten("aten::upsample_trilinear3d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_trilinear3d_vec_op(a: UpsampleTrilinear3dVec<'_>) -> Result<Tensor> {
    let name = UpsampleTrilinear3dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 3, a.input, size, a.align_corners, s, Linear)
}

#[aten("aten::upsample_bicubic2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bicubic2d_op(a: UpsampleBicubic2d<'_>) -> Result<Tensor> {
    let name = UpsampleBicubic2d::NAME;
    let s = [a.scales_h, a.scales_w];
    resample(name, a.self_, &a.output_size, a.align_corners, &s, Cubic)
}

#[aten("aten::upsample_bicubic2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bicubic2d_vec_op(a: UpsampleBicubic2dVec<'_>) -> Result<Tensor> {
    let name = UpsampleBicubic2dVec::NAME;
    let (size, s) = (a.output_size, a.scale_factors);
    resample_vec(name, 2, a.input, size, a.align_corners, s, Cubic)
}

// The gradients of upsampling.

#[aten("aten::upsample_nearest1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest1d_backward_op(a: UpsampleNearest1dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleNearest1dBackward::NAME;
    let s = [a.scales];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, false, &s, Nearest)
}

#[aten("aten::upsample_nearest2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest2d_backward_op(a: UpsampleNearest2dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleNearest2dBackward::NAME;
    let s = [a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, false, &s, Nearest)
}

#[aten("aten::upsample_nearest3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest3d_backward_op(a: UpsampleNearest3dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleNearest3dBackward::NAME;
    let s = [a.scales_d, a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, false, &s, Nearest)
}

#[aten("aten::_upsample_nearest_exact1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact1d_backward_op(a: UpsampleNearestExact1dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact1dBackward::NAME;
    let s = [a.scales];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, false, &s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact2d_backward_op(a: UpsampleNearestExact2dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact2dBackward::NAME;
    let s = [a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, false, &s, NearestExact)
}

#[aten("aten::_upsample_nearest_exact3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact3d_backward_op(a: UpsampleNearestExact3dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleNearestExact3dBackward::NAME;
    let s = [a.scales_d, a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, false, &s, NearestExact)
}

#[aten("aten::upsample_linear1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_linear1d_backward_op(a: UpsampleLinear1dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleLinear1dBackward::NAME;
    let s = [a.scales];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, a.align_corners, &s, Linear)
}

#[aten("aten::upsample_bilinear2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bilinear2d_backward_op(a: UpsampleBilinear2dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleBilinear2dBackward::NAME;
    let s = [a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, a.align_corners, &s, Linear)
}

#[aten("aten::upsample_trilinear3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_trilinear3d_backward_op(a: UpsampleTrilinear3dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleTrilinear3dBackward::NAME;
    let s = [a.scales_d, a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, a.align_corners, &s, Linear)
}

#[aten("aten::upsample_bicubic2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bicubic2d_backward_op(a: UpsampleBicubic2dBackward<'_>) -> Result<Tensor> {
    let name = UpsampleBicubic2dBackward::NAME;
    let s = [a.scales_h, a.scales_w];
    let (out, inp) = (&a.output_size, &a.input_size);
    resample_grad(name, a.grad_output, out, inp, a.align_corners, &s, Cubic)
}

/// Float32 only: half-precision grids fall back to the CPU (see `grid.rs`).
#[aten("aten::grid_sampler_2d", dtypes = &[DType::F32], shard = WINDOWS)]
fn grid_sampler_2d_op(a: GridSampler2d<'_>) -> Result<Tensor> {
    let (mode, padding) = (a.interpolation_mode, a.padding_mode);
    grid_sampler_2d(a.input, a.grid, mode, padding, a.align_corners)
}

#[aten("aten::grid_sampler_3d", dtypes = &[DType::F32], shard = WINDOWS)]
fn grid_sampler_3d_op(a: GridSampler3d<'_>) -> Result<Tensor> {
    let (mode, padding) = (a.interpolation_mode, a.padding_mode);
    grid_sampler_3d(a.input, a.grid, mode, padding, a.align_corners)
}
