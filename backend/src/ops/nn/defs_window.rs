//! The registered convolution, pooling and padding overloads (`aten::convolution`,
//! `aten::max_pool2d`, `aten::avg_pool3d_backward`, `aten::reflection_pad1d`, ...): each
//! parses its ATen arguments and calls the kernels in `conv.rs`, `pool.rs`, `adaptive.rs`
//! and `pad.rs`; all of them run replicated when sharded, since windows cross shard bounds.

use super::*;

fn conv_params(a: &Args, first: usize) -> Result<ConvParams> {
    Ok(ConvParams {
        stride: a.ints(first)?,
        padding: a.ints(first + 1)?,
        dilation: a.ints(first + 2)?,
        transposed: a.bool(first + 3)?,
        output_padding: a.ints(first + 4)?,
        groups: a.int(first + 5)?,
    })
}

fn opt(t: Option<Tensor>) -> Value {
    t.map_or(Value::None, Value::Tensor)
}

/// The registered convolution, pooling and padding overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let float = DType::FLOATING;
    // The float gradients and their int64 indices (an integer gradient is refused by the
    // kernel).
    let float_idx = DType::FLOATING_AND_I64;
    let k = OpImpl::Kernel;
    let all = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    let num = DType::NUMERIC;
    let windows = "spatial windows cross shard boundaries";
    vec![
        OpDef::new("aten::convolution", k, float, |_, a| {
            t1(convolution(
                a.tensor(0)?,
                a.tensor(1)?,
                a.opt_tensor(2)?,
                &conv_params(a, 3)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_convolution", k, float, |_, a| {
            t1(convolution(
                a.tensor(0)?,
                a.tensor(1)?,
                a.opt_tensor(2)?,
                &conv_params(a, 3)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::convolution_backward", k, float, |_, a| {
            let m = match a.get(10) {
                Some(Value::Bools(b)) if b.len() == 3 => [b[0], b[1], b[2]],
                _ => [true, true, true],
            };
            let (gi, gw, gb) = convolution_backward(
                a.tensor(0)?,
                a.tensor(1)?,
                a.tensor(2)?,
                &conv_params(a, 4)?,
                m,
            )?;
            Ok(vec![opt(gi), opt(gw), opt(gb)])
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_pool1d_with_indices", k, num, |_, a| {
            t2(max_pool_with_indices(
                "aten::max_pool1d_with_indices",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_pool1d", k, num, |_, a| {
            t1(max_pool_with_indices(
                "aten::max_pool1d",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
            )
            .map(|r| r.0))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::adaptive_max_pool1d", k, num, |_, a| {
            t2(adaptive_max_pool(
                "aten::adaptive_max_pool1d",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::avg_pool1d", k, float, |_, a| {
            t1(avg_pool(
                "aten::avg_pool1d",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                a.bool(4)?,
                a.bool(5)?,
                None,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_pool2d_with_indices", k, num, |_, a| {
            t2(max_pool_with_indices(
                "aten::max_pool2d_with_indices",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_pool2d", k, num, |_, a| {
            t1(max_pool_with_indices(
                "aten::max_pool2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
            )
            .map(|r| r.0))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::adaptive_max_pool2d", k, num, |_, a| {
            t2(adaptive_max_pool(
                "aten::adaptive_max_pool2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::avg_pool2d", k, float, |_, a| {
            t1(avg_pool(
                "aten::avg_pool2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                a.bool(4)?,
                a.bool(5)?,
                a.opt_int(6)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_pool3d_with_indices", k, num, |_, a| {
            t2(max_pool_with_indices(
                "aten::max_pool3d_with_indices",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_pool3d", k, num, |_, a| {
            t1(max_pool_with_indices(
                "aten::max_pool3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
            )
            .map(|r| r.0))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::adaptive_max_pool3d", k, num, |_, a| {
            t2(adaptive_max_pool(
                "aten::adaptive_max_pool3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::avg_pool3d", k, float, |_, a| {
            t1(avg_pool(
                "aten::avg_pool3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                a.bool(4)?,
                a.bool(5)?,
                a.opt_int(6)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_adaptive_avg_pool2d", k, float, |_, a| {
            t1(adaptive_avg_pool(
                "aten::_adaptive_avg_pool2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_adaptive_avg_pool3d", k, float, |_, a| {
            t1(adaptive_avg_pool(
                "aten::_adaptive_avg_pool3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::adaptive_avg_pool1d", k, float, |_, a| {
            t1(adaptive_avg_pool(
                "aten::adaptive_avg_pool1d",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::adaptive_avg_pool2d", k, float, |_, a| {
            t1(adaptive_avg_pool(
                "aten::adaptive_avg_pool2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::adaptive_avg_pool3d", k, float, |_, a| {
            t1(adaptive_avg_pool(
                "aten::adaptive_avg_pool3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_unpool2d", k, num, |_, a| {
            t1(max_unpool(
                "aten::max_unpool2d",
                2,
                a.tensor(0)?,
                a.tensor(1)?,
                &a.ints(2)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::max_unpool3d", k, num, |_, a| {
            t1(max_unpool(
                "aten::max_unpool3d",
                3,
                a.tensor(0)?,
                a.tensor(1)?,
                &a.ints(2)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new(
            "aten::max_pool2d_with_indices_backward",
            k,
            float_idx,
            |_, a| {
                t1(max_pool_backward(
                    "aten::max_pool2d_with_indices_backward",
                    2,
                    a.tensor(0)?,
                    a.tensor(1)?,
                    a.tensor(7)?,
                ))
            },
        )
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::avg_pool2d_backward", k, float, |_, a| {
            t1(avg_pool_backward(
                "aten::avg_pool2d_backward",
                2,
                a.tensor(0)?,
                a.tensor(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
                a.bool(6)?,
                a.opt_int(7)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_adaptive_avg_pool2d_backward", k, float, |_, a| {
            t1(adaptive_avg_pool_backward(
                "aten::_adaptive_avg_pool2d_backward",
                2,
                a.tensor(0)?,
                a.tensor(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new(
            "aten::max_pool3d_with_indices_backward",
            k,
            float_idx,
            |_, a| {
                t1(max_pool_backward(
                    "aten::max_pool3d_with_indices_backward",
                    3,
                    a.tensor(0)?,
                    a.tensor(1)?,
                    a.tensor(7)?,
                ))
            },
        )
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::avg_pool3d_backward", k, float, |_, a| {
            t1(avg_pool_backward(
                "aten::avg_pool3d_backward",
                3,
                a.tensor(0)?,
                a.tensor(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                a.bool(5)?,
                a.bool(6)?,
                a.opt_int(7)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_adaptive_avg_pool3d_backward", k, float, |_, a| {
            t1(adaptive_avg_pool_backward(
                "aten::_adaptive_avg_pool3d_backward",
                3,
                a.tensor(0)?,
                a.tensor(1)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::replication_pad1d", k, all, |_, a| {
            t1(pad_nd(
                "aten::replication_pad1d",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
                false,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::reflection_pad1d", k, all, |_, a| {
            t1(pad_nd(
                "aten::reflection_pad1d",
                1,
                a.tensor(0)?,
                &a.ints(1)?,
                true,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::replication_pad2d", k, all, |_, a| {
            t1(pad_nd(
                "aten::replication_pad2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
                false,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::reflection_pad2d", k, all, |_, a| {
            t1(pad_nd(
                "aten::reflection_pad2d",
                2,
                a.tensor(0)?,
                &a.ints(1)?,
                true,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::replication_pad3d", k, all, |_, a| {
            t1(pad_nd(
                "aten::replication_pad3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
                false,
            ))
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::reflection_pad3d", k, all, |_, a| {
            t1(pad_nd(
                "aten::reflection_pad3d",
                3,
                a.tensor(0)?,
                &a.ints(1)?,
                true,
            ))
        })
        .shard(Sharding::Replicate(windows)),
    ]
}
