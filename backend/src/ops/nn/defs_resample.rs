//! The registered resampling overloads: `upsample_*` forward and backward (plain and `.vec`
//! forms) and `grid_sampler_2d`, one `#[aten]` function each; all of them run replicated when
//! sharded, since windows cross shard bounds.

use super::{Interp, WINDOWS, grid_sampler_2d, sizes_of, upsample, upsample_backward};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::aten;
use crate::tensor::Tensor;

/// A `.vec` overload: the output size from `output_size` or from `scale_factors` (one per
/// spatial dim), then [`upsample`].
fn upsample_vec(
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

// Upsampling: `output_size` and an optional scale per spatial dim, or (`.vec`) either
// `output_size` or `scale_factors`.

#[aten("aten::upsample_nearest1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest1d_op(a: UpsampleNearest1d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleNearest1d::NAME,
        1,
        a.self_,
        &a.output_size,
        false,
        &[a.scales],
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest1d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest1d_vec_op(a: UpsampleNearest1dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleNearest1dVec::NAME,
        1,
        a.input,
        a.output_size,
        false,
        a.scale_factors,
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest2d_op(a: UpsampleNearest2d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleNearest2d::NAME,
        2,
        a.self_,
        &a.output_size,
        false,
        &[a.scales_h, a.scales_w],
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest2d_vec_op(a: UpsampleNearest2dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleNearest2dVec::NAME,
        2,
        a.input,
        a.output_size,
        false,
        a.scale_factors,
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest3d_op(a: UpsampleNearest3d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleNearest3d::NAME,
        3,
        a.self_,
        &a.output_size,
        false,
        &[a.scales_d, a.scales_h, a.scales_w],
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest3d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest3d_vec_op(a: UpsampleNearest3dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleNearest3dVec::NAME,
        3,
        a.input,
        a.output_size,
        false,
        a.scale_factors,
        Interp::Nearest,
    )
}

#[aten("aten::_upsample_nearest_exact1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact1d_op(a: _UpsampleNearestExact1d<'_>) -> Result<Tensor> {
    upsample(
        _UpsampleNearestExact1d::NAME,
        1,
        a.self_,
        &a.output_size,
        false,
        &[a.scales],
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact1d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact1d_vec_op(a: _UpsampleNearestExact1dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        _UpsampleNearestExact1dVec::NAME,
        1,
        a.input,
        a.output_size,
        false,
        a.scale_factors,
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact2d_op(a: _UpsampleNearestExact2d<'_>) -> Result<Tensor> {
    upsample(
        _UpsampleNearestExact2d::NAME,
        2,
        a.self_,
        &a.output_size,
        false,
        &[a.scales_h, a.scales_w],
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact2d_vec_op(a: _UpsampleNearestExact2dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        _UpsampleNearestExact2dVec::NAME,
        2,
        a.input,
        a.output_size,
        false,
        a.scale_factors,
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact3d_op(a: _UpsampleNearestExact3d<'_>) -> Result<Tensor> {
    upsample(
        _UpsampleNearestExact3d::NAME,
        3,
        a.self_,
        &a.output_size,
        false,
        &[a.scales_d, a.scales_h, a.scales_w],
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact3d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact3d_vec_op(a: _UpsampleNearestExact3dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        _UpsampleNearestExact3dVec::NAME,
        3,
        a.input,
        a.output_size,
        false,
        a.scale_factors,
        Interp::NearestExact,
    )
}

#[aten("aten::upsample_linear1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_linear1d_op(a: UpsampleLinear1d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleLinear1d::NAME,
        1,
        a.self_,
        &a.output_size,
        a.align_corners,
        &[a.scales],
        Interp::Linear,
    )
}

#[aten("aten::upsample_linear1d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_linear1d_vec_op(a: UpsampleLinear1dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleLinear1dVec::NAME,
        1,
        a.input,
        a.output_size,
        a.align_corners,
        a.scale_factors,
        Interp::Linear,
    )
}

#[aten("aten::upsample_bilinear2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bilinear2d_op(a: UpsampleBilinear2d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleBilinear2d::NAME,
        2,
        a.self_,
        &a.output_size,
        a.align_corners,
        &[a.scales_h, a.scales_w],
        Interp::Linear,
    )
}

#[aten("aten::upsample_bilinear2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bilinear2d_vec_op(a: UpsampleBilinear2dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleBilinear2dVec::NAME,
        2,
        a.input,
        a.output_size,
        a.align_corners,
        a.scale_factors,
        Interp::Linear,
    )
}

#[aten("aten::upsample_trilinear3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_trilinear3d_op(a: UpsampleTrilinear3d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleTrilinear3d::NAME,
        3,
        a.self_,
        &a.output_size,
        a.align_corners,
        &[a.scales_d, a.scales_h, a.scales_w],
        Interp::Linear,
    )
}

#[aten("aten::upsample_trilinear3d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_trilinear3d_vec_op(a: UpsampleTrilinear3dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleTrilinear3dVec::NAME,
        3,
        a.input,
        a.output_size,
        a.align_corners,
        a.scale_factors,
        Interp::Linear,
    )
}

#[aten("aten::upsample_bicubic2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bicubic2d_op(a: UpsampleBicubic2d<'_>) -> Result<Tensor> {
    upsample(
        UpsampleBicubic2d::NAME,
        2,
        a.self_,
        &a.output_size,
        a.align_corners,
        &[a.scales_h, a.scales_w],
        Interp::Cubic,
    )
}

#[aten("aten::upsample_bicubic2d.vec", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bicubic2d_vec_op(a: UpsampleBicubic2dVec<'_>) -> Result<Tensor> {
    upsample_vec(
        UpsampleBicubic2dVec::NAME,
        2,
        a.input,
        a.output_size,
        a.align_corners,
        a.scale_factors,
        Interp::Cubic,
    )
}

// The gradients of upsampling.

#[aten("aten::upsample_nearest1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest1d_backward_op(a: UpsampleNearest1dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleNearest1dBackward::NAME,
        1,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        false,
        &[a.scales],
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest2d_backward_op(a: UpsampleNearest2dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleNearest2dBackward::NAME,
        2,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        false,
        &[a.scales_h, a.scales_w],
        Interp::Nearest,
    )
}

#[aten("aten::upsample_nearest3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest3d_backward_op(a: UpsampleNearest3dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleNearest3dBackward::NAME,
        3,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        false,
        &[a.scales_d, a.scales_h, a.scales_w],
        Interp::Nearest,
    )
}

#[aten("aten::_upsample_nearest_exact1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact1d_backward_op(a: _UpsampleNearestExact1dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        _UpsampleNearestExact1dBackward::NAME,
        1,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        false,
        &[a.scales],
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact2d_backward_op(a: _UpsampleNearestExact2dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        _UpsampleNearestExact2dBackward::NAME,
        2,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        false,
        &[a.scales_h, a.scales_w],
        Interp::NearestExact,
    )
}

#[aten("aten::_upsample_nearest_exact3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_nearest_exact3d_backward_op(a: _UpsampleNearestExact3dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        _UpsampleNearestExact3dBackward::NAME,
        3,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        false,
        &[a.scales_d, a.scales_h, a.scales_w],
        Interp::NearestExact,
    )
}

#[aten("aten::upsample_linear1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_linear1d_backward_op(a: UpsampleLinear1dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleLinear1dBackward::NAME,
        1,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        a.align_corners,
        &[a.scales],
        Interp::Linear,
    )
}

#[aten("aten::upsample_bilinear2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bilinear2d_backward_op(a: UpsampleBilinear2dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleBilinear2dBackward::NAME,
        2,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        a.align_corners,
        &[a.scales_h, a.scales_w],
        Interp::Linear,
    )
}

#[aten("aten::upsample_trilinear3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_trilinear3d_backward_op(a: UpsampleTrilinear3dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleTrilinear3dBackward::NAME,
        3,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        a.align_corners,
        &[a.scales_d, a.scales_h, a.scales_w],
        Interp::Linear,
    )
}

#[aten("aten::upsample_bicubic2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn upsample_bicubic2d_backward_op(a: UpsampleBicubic2dBackward<'_>) -> Result<Tensor> {
    upsample_backward(
        UpsampleBicubic2dBackward::NAME,
        2,
        a.grad_output,
        &a.output_size,
        &a.input_size,
        a.align_corners,
        &[a.scales_h, a.scales_w],
        Interp::Cubic,
    )
}

/// Float32 only: half-precision grids fall back to the CPU (see `grid.rs`).
#[aten("aten::grid_sampler_2d", dtypes = &[DType::F32], shard = WINDOWS)]
fn grid_sampler_2d_op(a: GridSampler2d<'_>) -> Result<Tensor> {
    let (mode, padding) = (a.interpolation_mode, a.padding_mode);
    grid_sampler_2d(a.input, a.grid, mode, padding, a.align_corners)
}
