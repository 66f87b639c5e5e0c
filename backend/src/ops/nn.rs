//! Neural-network operators: `_softmax`, `_log_softmax`, `_safe_softmax`, `native_layer_norm`,
//! `rms_norm`, `native_batch_norm` (and `_native_batch_norm_legit*`), `native_group_norm`,
//! `nll_loss_forward` and `nll_loss2d_forward` here; convolution and its backward, `im2col` and
//! `col2im` in `conv.rs` and `im2col.rs` (im2col + the matrix units; integer convolutions,
//! exact on the vector unit, in `conv_int.rs`); pooling and its backward
//! in `pool.rs` (fixed windows, `max_unpool`) and `adaptive.rs` (adaptive pooling); replication
//! and reflection padding in `pad.rs`; resampling and its backward in `upsample.rs`;
//! `grid_sampler_2d` in `grid.rs`; pixel and channel shuffles in `shuffle.rs`; the
//! sliding-window views they share in `window.rs`; weight normalisation in `weight_norm.rs`
//! (with its two registered overloads). The other registered overloads, one `#[aten]` function
//! each, are in `defs_window.rs` (convolution, pooling, padding), `defs_resample.rs`
//! (upsampling, grid sampling) and `defs_rows.rs` (softmaxes, norms, losses).
//!
//! Softmax, log-softmax and the norms are each one tile kernel: one [`rows`] call whose program
//! computes the row statistics (max and sum of exponentials, mean and variance, mean square) and
//! the normalised output in phases over the row, without writing intermediates to HBM. They
//! compute in f32 for bf16/f16 inputs and round each output once, except where PyTorch rounds
//! an intermediate and the golden cases show it: log-softmax along the last dim keeps the log of
//! the sum in the input's dtype, and `rms_norm` rounds before its weight.
//!
//! `nll_loss` picks each sample's target column with a comparison of the column index against
//! the per-row target inside one rows kernel (a sum over the row of `col == target ? x : 0`);
//! the `mean`/`sum` reductions over the batch take a second, small kernel. A target outside
//! `[0, C)` (and not `ignore_index`) makes its loss NaN, since a kernel cannot raise; in Debug
//! mode the targets are also checked on the host first and raise PyTorch's `IndexError`.

mod adaptive;
mod conv;
mod conv_int;
pub(crate) mod defs_resample;
pub(crate) mod defs_rows;
pub(crate) mod defs_window;
mod grid;
mod im2col;
mod loss;
mod norm;
mod pad;
mod pool;
mod shuffle;
mod softmax;
mod upsample;
pub(crate) mod upsample_aa;
pub(crate) mod weight_norm;
mod window;

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

pub use adaptive::{adaptive_avg_pool, adaptive_avg_pool_backward, adaptive_max_pool};
pub use conv::{ConvParams, convolution, convolution_backward};
pub use grid::{grid_sampler_2d, grid_sampler_3d};
pub use im2col::{col2im_op, im2col_op};
pub(crate) use loss::spatial_shapes;
pub use loss::{Reduction, nll_loss_forward, nll_loss2d_forward};
pub use norm::{native_batch_norm, native_group_norm, native_layer_norm, rms_norm};
pub use pad::{pad_nd, pad_nd_backward};
pub use pool::{avg_pool, avg_pool_backward, max_pool_backward, max_pool_with_indices, max_unpool};
pub use shuffle::{channel_shuffle, pixel_shuffle, pixel_unshuffle};
pub use softmax::{log_softmax_, safe_softmax, softmax_};
pub use upsample::{Interp, sizes_of, upsample, upsample_backward};

/// The type the operators compute in.
const F: DType = DType::F32;

/// The sharding of the windowed operators (convolution, pooling, padding, resampling).
const WINDOWS: Sharding = Sharding::Replicate("spatial windows cross shard boundaries");

impl Tensor {
    /// `self.softmax(dim)`.
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        softmax_(self, dim, false)
    }

    /// `self.log_softmax(dim)`.
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        log_softmax_(self, dim, false)
    }

    /// `F.layer_norm(self, normalized_shape, weight, bias, eps)`: the normalised output.
    pub fn layer_norm(
        &self,
        normalized_shape: &[i64],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        Ok(native_layer_norm(self, normalized_shape, weight, bias, eps)?.0)
    }

    /// `F.rms_norm(self, normalized_shape, weight, eps)`.
    pub fn rms_norm(
        &self,
        normalized_shape: &[i64],
        weight: Option<&Tensor>,
        eps: Option<f64>,
    ) -> Result<Tensor> {
        rms_norm(self, normalized_shape, weight, eps)
    }

    /// `F.nll_loss(self, target, weight, reduction=reduction, ignore_index=ignore_index)`: the
    /// loss (`self` is `[C]`, `[N, C]` or `[N, C, H, W]`).
    pub fn nll_loss(
        &self,
        target: &Tensor,
        weight: Option<&Tensor>,
        reduction: Reduction,
        ignore_index: i64,
    ) -> Result<Tensor> {
        let r = if self.dim() == 4 {
            nll_loss2d_forward(self, target, weight, reduction, ignore_index)
        } else {
            nll_loss_forward(self, target, weight, reduction, ignore_index)
        };
        Ok(r?.0)
    }
}

/// `native_dropout_backward(grad, mask, scale)`: `grad · mask · scale` in f32, rounded once.
pub fn native_dropout_backward(grad: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    use crate::ir::BinOp;
    let op = super::helpers::OpScope::new("aten::native_dropout_backward", &[grad, mask])?;
    let d = grad.dtype();
    Ok(super::helpers::map(&op, &[grad, mask], &[d], |p, r| {
        let g = p.cast(r[0], F);
        let m = p.cast(r[1], F);
        let s = p.constant(crate::dtype::Scalar::Float(scale), F);
        let gm = p.bin(BinOp::Mul, g, m, F);
        vec![p.bin(BinOp::Mul, gm, s, F)]
    })?
    .remove(0))
}
