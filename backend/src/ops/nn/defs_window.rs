//! The registered convolution, pooling and padding overloads (`aten::convolution`,
//! `aten::max_pool2d`, `aten::avg_pool3d_backward`, `aten::reflection_pad1d`, ...): one
//! `#[aten]` function each, calling the kernels in `conv.rs`, `pool.rs`, `adaptive.rs` and
//! `pad.rs`; all of them run replicated when sharded, since windows cross shard bounds.

use super::{
    ConvParams, WINDOWS, adaptive_avg_pool, adaptive_avg_pool_backward, adaptive_max_pool,
    avg_pool, avg_pool_backward, convolution, convolution_backward, max_pool_backward,
    max_pool_with_indices, max_unpool, pad_nd, pad_nd_backward,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::{Value, aten};
use crate::tensor::Tensor;

fn opt(t: Option<Tensor>) -> Value {
    t.map_or(Value::None, Value::Tensor)
}

#[aten("aten::convolution", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn convolution_op(a: Convolution<'_>) -> Result<Tensor> {
    let p = ConvParams {
        stride: a.stride,
        padding: a.padding,
        dilation: a.dilation,
        transposed: a.transposed,
        output_padding: a.output_padding,
        groups: a.groups,
    };
    convolution(a.input, a.weight, a.bias, &p)
}

/// `convolution` with cuDNN's flags (ignored).
#[aten("aten::_convolution", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn private_convolution_op(a: PrivateConvolution<'_>) -> Result<Tensor> {
    let p = ConvParams {
        stride: a.stride,
        padding: a.padding,
        dilation: a.dilation,
        transposed: a.transposed,
        output_padding: a.output_padding,
        groups: a.groups,
    };
    convolution(a.input, a.weight, a.bias, &p)
}

/// The gradients `output_mask` asks for (all three unless it holds three flags), `None` for
/// the others.
#[aten("aten::convolution_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn convolution_backward_op(a: ConvolutionBackward<'_>) -> Result<Vec<Value>> {
    let mask = match a.output_mask[..] {
        [i, w, b] => [i, w, b],
        _ => [true, true, true],
    };
    let p = ConvParams {
        stride: a.stride,
        padding: a.padding,
        dilation: a.dilation,
        transposed: a.transposed,
        output_padding: a.output_padding,
        groups: a.groups,
    };
    let (gi, gw, gb) = convolution_backward(a.grad_output, a.input, a.weight, &p, mask)?;
    Ok(vec![opt(gi), opt(gw), opt(gb)])
}

// Max pooling: the maxima and their indices (`_with_indices`), or the maxima alone.

#[aten("aten::max_pool1d_with_indices", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_pool1d_with_indices_op(a: MaxPool1dWithIndices<'_>) -> Result<(Tensor, Tensor)> {
    let name = MaxPool1dWithIndices::NAME;
    let (k, s, p, d) = (&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    max_pool_with_indices(name, 1, a.self_, k, s, p, d, a.ceil_mode)
}

#[aten("aten::max_pool1d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_pool1d_op(a: MaxPool1d<'_>) -> Result<Tensor> {
    let (k, s, p, d) = (&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    Ok(max_pool_with_indices(MaxPool1d::NAME, 1, a.self_, k, s, p, d, a.ceil_mode)?.0)
}

#[aten("aten::max_pool2d_with_indices", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_pool2d_with_indices_op(a: MaxPool2dWithIndices<'_>) -> Result<(Tensor, Tensor)> {
    let name = MaxPool2dWithIndices::NAME;
    let (k, s, p, d) = (&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    max_pool_with_indices(name, 2, a.self_, k, s, p, d, a.ceil_mode)
}

#[aten("aten::max_pool2d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_pool2d_op(a: MaxPool2d<'_>) -> Result<Tensor> {
    let (k, s, p, d) = (&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    Ok(max_pool_with_indices(MaxPool2d::NAME, 2, a.self_, k, s, p, d, a.ceil_mode)?.0)
}

#[aten("aten::max_pool3d_with_indices", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_pool3d_with_indices_op(a: MaxPool3dWithIndices<'_>) -> Result<(Tensor, Tensor)> {
    let name = MaxPool3dWithIndices::NAME;
    let (k, s, p, d) = (&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    max_pool_with_indices(name, 3, a.self_, k, s, p, d, a.ceil_mode)
}

#[aten("aten::max_pool3d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_pool3d_op(a: MaxPool3d<'_>) -> Result<Tensor> {
    let (k, s, p, d) = (&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    Ok(max_pool_with_indices(MaxPool3d::NAME, 3, a.self_, k, s, p, d, a.ceil_mode)?.0)
}

// Average pooling (`avg_pool1d` has no `divisor_override`).

#[aten("aten::avg_pool1d", dtypes = DType::FLOATING_AND_I64, shard = WINDOWS)]
fn avg_pool1d_op(a: AvgPool1d<'_>) -> Result<Tensor> {
    let (k, s, p) = (&a.kernel_size, &a.stride, &a.padding);
    let (ceil, count_pad) = (a.ceil_mode, a.count_include_pad);
    avg_pool(AvgPool1d::NAME, 1, a.self_, k, s, p, ceil, count_pad, None)
}

#[aten("aten::avg_pool2d", dtypes = DType::FLOATING_AND_I64, shard = WINDOWS)]
fn avg_pool2d_op(a: AvgPool2d<'_>) -> Result<Tensor> {
    let (k, s, p) = (&a.kernel_size, &a.stride, &a.padding);
    let (ceil, count_pad, div) = (a.ceil_mode, a.count_include_pad, a.divisor_override);
    avg_pool(AvgPool2d::NAME, 2, a.self_, k, s, p, ceil, count_pad, div)
}

#[aten("aten::avg_pool3d", dtypes = DType::FLOATING_AND_I64, shard = WINDOWS)]
fn avg_pool3d_op(a: AvgPool3d<'_>) -> Result<Tensor> {
    let (k, s, p) = (&a.kernel_size, &a.stride, &a.padding);
    let (ceil, count_pad, div) = (a.ceil_mode, a.count_include_pad, a.divisor_override);
    avg_pool(AvgPool3d::NAME, 3, a.self_, k, s, p, ceil, count_pad, div)
}

// Adaptive pooling.

#[aten("aten::adaptive_max_pool1d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn adaptive_max_pool1d_op(a: AdaptiveMaxPool1d<'_>) -> Result<(Tensor, Tensor)> {
    adaptive_max_pool(AdaptiveMaxPool1d::NAME, 1, a.self_, &a.output_size)
}

#[aten("aten::adaptive_max_pool2d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn adaptive_max_pool2d_op(a: AdaptiveMaxPool2d<'_>) -> Result<(Tensor, Tensor)> {
    adaptive_max_pool(AdaptiveMaxPool2d::NAME, 2, a.self_, &a.output_size)
}

#[aten("aten::adaptive_max_pool3d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn adaptive_max_pool3d_op(a: AdaptiveMaxPool3d<'_>) -> Result<(Tensor, Tensor)> {
    adaptive_max_pool(AdaptiveMaxPool3d::NAME, 3, a.self_, &a.output_size)
}

// An adaptive max pool's indices are flat positions in each input plane, as a max pool's:
// the same backward (each gradient added at its index).

#[aten("aten::adaptive_max_pool2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_max_pool2d_backward_op(a: AdaptiveMaxPool2dBackward<'_>) -> Result<Tensor> {
    let name = AdaptiveMaxPool2dBackward::NAME;
    max_pool_backward(name, 2, a.grad_output, a.self_, a.indices)
}

#[aten("aten::adaptive_max_pool3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_max_pool3d_backward_op(a: AdaptiveMaxPool3dBackward<'_>) -> Result<Tensor> {
    let name = AdaptiveMaxPool3dBackward::NAME;
    max_pool_backward(name, 3, a.grad_output, a.self_, a.indices)
}

#[aten("aten::adaptive_avg_pool1d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_avg_pool1d_op(a: AdaptiveAvgPool1d<'_>) -> Result<Tensor> {
    adaptive_avg_pool(AdaptiveAvgPool1d::NAME, 1, a.self_, &a.output_size)
}

#[aten("aten::adaptive_avg_pool2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_avg_pool2d_op(a: AdaptiveAvgPool2d<'_>) -> Result<Tensor> {
    adaptive_avg_pool(AdaptiveAvgPool2d::NAME, 2, a.self_, &a.output_size)
}

#[aten("aten::adaptive_avg_pool3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_avg_pool3d_op(a: AdaptiveAvgPool3d<'_>) -> Result<Tensor> {
    adaptive_avg_pool(AdaptiveAvgPool3d::NAME, 3, a.self_, &a.output_size)
}

#[aten("aten::_adaptive_avg_pool2d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn private_adaptive_avg_pool2d_op(a: PrivateAdaptiveAvgPool2d<'_>) -> Result<Tensor> {
    adaptive_avg_pool(PrivateAdaptiveAvgPool2d::NAME, 2, a.self_, &a.output_size)
}

#[aten("aten::_adaptive_avg_pool3d", dtypes = DType::FLOATING, shard = WINDOWS)]
fn private_adaptive_avg_pool3d_op(a: PrivateAdaptiveAvgPool3d<'_>) -> Result<Tensor> {
    adaptive_avg_pool(PrivateAdaptiveAvgPool3d::NAME, 3, a.self_, &a.output_size)
}

// Unpooling (`max_unpool3d`'s `stride` and `padding` are not needed: the indices say where
// each value goes).

#[aten("aten::max_unpool2d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_unpool2d_op(a: MaxUnpool2d<'_>) -> Result<Tensor> {
    max_unpool(MaxUnpool2d::NAME, 2, a.self_, a.indices, &a.output_size)
}

#[aten("aten::max_unpool3d", dtypes = DType::NUMERIC, shard = WINDOWS)]
fn max_unpool3d_op(a: MaxUnpool3d<'_>) -> Result<Tensor> {
    max_unpool(MaxUnpool3d::NAME, 3, a.self_, a.indices, &a.output_size)
}

// Pooling backward. The max-pooling gradient takes the float gradients and their int64
// indices (an integer gradient is refused by the kernel); it needs only the indices, not the
// window's shape.

#[aten("aten::max_pool2d_with_indices_backward", dtypes = DType::FLOATING_AND_I64, shard = WINDOWS)]
fn max_pool2d_with_indices_backward_op(a: MaxPool2dWithIndicesBackward<'_>) -> Result<Tensor> {
    let name = MaxPool2dWithIndicesBackward::NAME;
    max_pool_backward(name, 2, a.grad_output, a.self_, a.indices)
}

#[aten("aten::max_pool3d_with_indices_backward", dtypes = DType::FLOATING_AND_I64, shard = WINDOWS)]
fn max_pool3d_with_indices_backward_op(a: MaxPool3dWithIndicesBackward<'_>) -> Result<Tensor> {
    let name = MaxPool3dWithIndicesBackward::NAME;
    max_pool_backward(name, 3, a.grad_output, a.self_, a.indices)
}

#[aten("aten::avg_pool2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn avg_pool2d_backward_op(a: AvgPool2dBackward<'_>) -> Result<Tensor> {
    let (g, x) = (a.grad_output, a.self_);
    let (k, s, p) = (&a.kernel_size, &a.stride, &a.padding);
    let (ceil, count_pad, div) = (a.ceil_mode, a.count_include_pad, a.divisor_override);
    let name = AvgPool2dBackward::NAME;
    avg_pool_backward(name, 2, g, x, k, s, p, ceil, count_pad, div)
}

#[aten("aten::avg_pool3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn avg_pool3d_backward_op(a: AvgPool3dBackward<'_>) -> Result<Tensor> {
    let (g, x) = (a.grad_output, a.self_);
    let (k, s, p) = (&a.kernel_size, &a.stride, &a.padding);
    let (ceil, count_pad, div) = (a.ceil_mode, a.count_include_pad, a.divisor_override);
    let name = AvgPool3dBackward::NAME;
    avg_pool_backward(name, 3, g, x, k, s, p, ceil, count_pad, div)
}

#[aten("aten::_adaptive_avg_pool2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_avg_pool2d_backward_op(a: AdaptiveAvgPool2dBackward<'_>) -> Result<Tensor> {
    let name = AdaptiveAvgPool2dBackward::NAME;
    adaptive_avg_pool_backward(name, 2, a.grad_output, a.self_)
}

#[aten("aten::_adaptive_avg_pool3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn adaptive_avg_pool3d_backward_op(a: AdaptiveAvgPool3dBackward<'_>) -> Result<Tensor> {
    let name = AdaptiveAvgPool3dBackward::NAME;
    adaptive_avg_pool_backward(name, 3, a.grad_output, a.self_)
}

// Padding by replicating the edge or reflecting about it.

#[aten("aten::replication_pad1d", dtypes = DType::ALL_TPU, shard = WINDOWS)]
fn replication_pad1d_op(a: ReplicationPad1d<'_>) -> Result<Tensor> {
    pad_nd(ReplicationPad1d::NAME, 1, a.self_, &a.padding, false)
}

#[aten("aten::reflection_pad1d", dtypes = DType::ALL_TPU, shard = WINDOWS)]
fn reflection_pad1d_op(a: ReflectionPad1d<'_>) -> Result<Tensor> {
    pad_nd(ReflectionPad1d::NAME, 1, a.self_, &a.padding, true)
}

#[aten("aten::replication_pad2d", dtypes = DType::ALL_TPU, shard = WINDOWS)]
fn replication_pad2d_op(a: ReplicationPad2d<'_>) -> Result<Tensor> {
    pad_nd(ReplicationPad2d::NAME, 2, a.self_, &a.padding, false)
}

#[aten("aten::reflection_pad2d", dtypes = DType::ALL_TPU, shard = WINDOWS)]
fn reflection_pad2d_op(a: ReflectionPad2d<'_>) -> Result<Tensor> {
    pad_nd(ReflectionPad2d::NAME, 2, a.self_, &a.padding, true)
}

#[aten("aten::replication_pad3d", dtypes = DType::ALL_TPU, shard = WINDOWS)]
fn replication_pad3d_op(a: ReplicationPad3d<'_>) -> Result<Tensor> {
    pad_nd(ReplicationPad3d::NAME, 3, a.self_, &a.padding, false)
}

#[aten("aten::reflection_pad3d", dtypes = DType::ALL_TPU, shard = WINDOWS)]
fn reflection_pad3d_op(a: ReflectionPad3d<'_>) -> Result<Tensor> {
    pad_nd(ReflectionPad3d::NAME, 3, a.self_, &a.padding, true)
}

// Their gradients: each output element's gradient added where it was read from.

#[aten("aten::replication_pad1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn replication_pad1d_backward_op(a: ReplicationPad1dBackward<'_>) -> Result<Tensor> {
    let name = ReplicationPad1dBackward::NAME;
    pad_nd_backward(name, 1, a.grad_output, a.self_, &a.padding, false)
}

#[aten("aten::reflection_pad1d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn reflection_pad1d_backward_op(a: ReflectionPad1dBackward<'_>) -> Result<Tensor> {
    let name = ReflectionPad1dBackward::NAME;
    pad_nd_backward(name, 1, a.grad_output, a.self_, &a.padding, true)
}

#[aten("aten::replication_pad2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn replication_pad2d_backward_op(a: ReplicationPad2dBackward<'_>) -> Result<Tensor> {
    let name = ReplicationPad2dBackward::NAME;
    pad_nd_backward(name, 2, a.grad_output, a.self_, &a.padding, false)
}

#[aten("aten::reflection_pad2d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn reflection_pad2d_backward_op(a: ReflectionPad2dBackward<'_>) -> Result<Tensor> {
    let name = ReflectionPad2dBackward::NAME;
    pad_nd_backward(name, 2, a.grad_output, a.self_, &a.padding, true)
}

#[aten("aten::replication_pad3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn replication_pad3d_backward_op(a: ReplicationPad3dBackward<'_>) -> Result<Tensor> {
    let name = ReplicationPad3dBackward::NAME;
    pad_nd_backward(name, 3, a.grad_output, a.self_, &a.padding, false)
}

#[aten("aten::reflection_pad3d_backward", dtypes = DType::FLOATING, shard = WINDOWS)]
fn reflection_pad3d_backward_op(a: ReflectionPad3dBackward<'_>) -> Result<Tensor> {
    let name = ReflectionPad3dBackward::NAME;
    pad_nd_backward(name, 3, a.grad_output, a.self_, &a.padding, true)
}
