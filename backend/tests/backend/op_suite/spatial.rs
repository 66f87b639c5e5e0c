//! Spatial neural-network operators: convolution (plain, grouped, strided, dilated, padded,
//! transposed; forward and backward), pooling (max with indices, average, adaptive, unpool),
//! padding (replication, reflection), resampling (nearest, linear, cubic), batch and group
//! norm, pixel and channel shuffles, `_safe_softmax` and `native_dropout_backward`.
//!
//! The references are direct loops over the definitions (PyTorch's documented formulas, not
//! the backend's decompositions): a convolution sums `x[n, c, l·s - p + k·d]·w[o, c, k]` over
//! every in-bounds tap; its backward distributes the same products. Tolerances: the matrix
//! units' bound for convolutions (f32 at DEFAULT is one bf16 pass: `(2^-7 + k·u)·Σ|x||w|`,
//! bf16 operands `k·u·Σ|x||w|`), `torch.testing`'s defaults elsewhere plus an f32 summation
//! bound where the kernel sums.
//!
//! The tests are in one file per family (`conv`, `pool`, `resample`, `norm`); this file holds
//! the overload table and the helpers they share (sample values, taps, the matrix units' bound).

use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Arg, Out, Sample, Tol, check_samples, ints, tp, v};
use super::reference::{HostTensor, indices, numel, ravel};
use conv::{convolution, convolution_backward, im2col_col2im};
use norm::{batch_norms, dropout_backward, group_norm, safe_softmax};
use pool::{adaptive_pools, avg_pools, max_pools, pool_backwards, unpool};
use resample::{grid_sampler, pads, shuffles, upsample_backwards, upsamples};

#[path = "spatial/conv.rs"]
mod conv;

#[path = "spatial/pool.rs"]
mod pool;

#[path = "spatial/resample.rs"]
mod resample;

#[path = "spatial/norm.rs"]
mod norm;

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::convolution", convolution),
    ("aten::_convolution", convolution),
    ("aten::convolution_backward", convolution_backward),
    ("aten::max_pool1d_with_indices", max_pools),
    ("aten::max_pool2d_with_indices", max_pools),
    ("aten::max_pool3d_with_indices", max_pools),
    ("aten::max_pool1d", max_pools),
    ("aten::max_pool2d", max_pools),
    ("aten::max_pool3d", max_pools),
    ("aten::avg_pool1d", avg_pools),
    ("aten::avg_pool2d", avg_pools),
    ("aten::avg_pool3d", avg_pools),
    ("aten::_adaptive_avg_pool2d", adaptive_pools),
    ("aten::_adaptive_avg_pool3d", adaptive_pools),
    ("aten::adaptive_avg_pool1d", adaptive_pools),
    ("aten::adaptive_avg_pool2d", adaptive_pools),
    ("aten::adaptive_avg_pool3d", adaptive_pools),
    ("aten::adaptive_max_pool1d", adaptive_pools),
    ("aten::adaptive_max_pool2d", adaptive_pools),
    ("aten::adaptive_max_pool3d", adaptive_pools),
    ("aten::max_unpool2d", unpool),
    ("aten::max_unpool3d", unpool),
    ("aten::replication_pad1d", pads),
    ("aten::replication_pad2d", pads),
    ("aten::replication_pad3d", pads),
    ("aten::reflection_pad1d", pads),
    ("aten::reflection_pad2d", pads),
    ("aten::reflection_pad3d", pads),
    ("aten::upsample_nearest1d", upsamples),
    ("aten::upsample_nearest1d.vec", upsamples),
    ("aten::upsample_nearest2d", upsamples),
    ("aten::upsample_nearest2d.vec", upsamples),
    ("aten::upsample_nearest3d", upsamples),
    ("aten::upsample_nearest3d.vec", upsamples),
    ("aten::_upsample_nearest_exact1d", upsamples),
    ("aten::_upsample_nearest_exact1d.vec", upsamples),
    ("aten::_upsample_nearest_exact2d", upsamples),
    ("aten::_upsample_nearest_exact2d.vec", upsamples),
    ("aten::_upsample_nearest_exact3d", upsamples),
    ("aten::_upsample_nearest_exact3d.vec", upsamples),
    ("aten::upsample_linear1d", upsamples),
    ("aten::upsample_linear1d.vec", upsamples),
    ("aten::upsample_bilinear2d", upsamples),
    ("aten::upsample_bilinear2d.vec", upsamples),
    ("aten::upsample_trilinear3d", upsamples),
    ("aten::upsample_trilinear3d.vec", upsamples),
    ("aten::upsample_bicubic2d", upsamples),
    ("aten::upsample_bicubic2d.vec", upsamples),
    ("aten::upsample_nearest1d_backward", upsample_backwards),
    ("aten::upsample_nearest2d_backward", upsample_backwards),
    ("aten::upsample_nearest3d_backward", upsample_backwards),
    (
        "aten::_upsample_nearest_exact1d_backward",
        upsample_backwards,
    ),
    (
        "aten::_upsample_nearest_exact2d_backward",
        upsample_backwards,
    ),
    (
        "aten::_upsample_nearest_exact3d_backward",
        upsample_backwards,
    ),
    ("aten::upsample_linear1d_backward", upsample_backwards),
    ("aten::upsample_bilinear2d_backward", upsample_backwards),
    ("aten::upsample_trilinear3d_backward", upsample_backwards),
    ("aten::upsample_bicubic2d_backward", upsample_backwards),
    ("aten::native_batch_norm", batch_norms),
    ("aten::_native_batch_norm_legit", batch_norms),
    ("aten::_native_batch_norm_legit.no_stats", batch_norms),
    ("aten::_native_batch_norm_legit_no_training", batch_norms),
    ("aten::native_group_norm", group_norm),
    ("aten::pixel_shuffle", shuffles),
    ("aten::pixel_unshuffle", shuffles),
    ("aten::channel_shuffle", shuffles),
    ("aten::grid_sampler_2d", grid_sampler),
    ("aten::im2col", im2col_col2im),
    ("aten::col2im", im2col_col2im),
    ("aten::max_pool2d_with_indices_backward", pool_backwards),
    ("aten::max_pool3d_with_indices_backward", pool_backwards),
    ("aten::avg_pool2d_backward", pool_backwards),
    ("aten::avg_pool3d_backward", pool_backwards),
    ("aten::_adaptive_avg_pool2d_backward", pool_backwards),
    ("aten::_adaptive_avg_pool3d_backward", pool_backwards),
    ("aten::_safe_softmax", safe_softmax),
    ("aten::native_dropout_backward", dropout_backward),
];

const U: f64 = 1.0 / 16_777_216.0;

/// Deterministic values in `[-2, 2)` (a linear congruential generator seeded per tensor).
fn vals(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    let mut s = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    HostTensor::from_fn(shape, dtype, |_| {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 33) % 4096) as f64 / 1024.0 - 2.0
    })
}

/// Every (input index, weight index, output index) of a convolution's products: the plain
/// convolution's `y[n, g·og + o, l] += x[n, g·cg + c, l·s - p + k·d]·w[g·og + o, c, k]`.
#[allow(clippy::too_many_arguments)]
fn taps(
    xs: &[usize],
    ws: &[usize],
    ys: &[usize],
    s: &[usize],
    p: &[usize],
    d: &[usize],
    groups: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let nd = xs.len() - 2;
    let (cg, og) = (ws[1], ws[0] / groups);
    for yi in indices(ys) {
        let (n, oc) = (yi[0], yi[1]);
        let g = oc / og;
        for c in 0..cg {
            for k in indices(&ws[2..]) {
                let mut xi = vec![n, g * cg + c];
                let mut ok = true;
                for i in 0..nd {
                    let pos = (yi[2 + i] * s[i] + k[i] * d[i]) as i64 - p[i] as i64;
                    if pos < 0 || pos >= xs[2 + i] as i64 {
                        ok = false;
                    }
                    xi.push(pos.max(0) as usize);
                }
                if ok {
                    let mut wi = vec![oc, c];
                    wi.extend(&k);
                    f(ravel(&xi, xs), ravel(&wi, ws), ravel(&yi, ys));
                }
            }
        }
    }
}

fn out_size(i: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (i + 2 * p - d * (k - 1) - 1) / s + 1
}

/// The matrix-unit bound for `dtype` operands at DEFAULT precision, per unit of `Σ|x||w|`.
fn mxu_rel(dtype: DType, k: usize) -> f64 {
    let base = if dtype == DType::BF16 {
        0.0
    } else {
        f64::powi(2.0, -7) * 1.01
    };
    base + (k as f64 + 2.0) * U
}
