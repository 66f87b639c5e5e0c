//! The registered row-wise overloads: softmaxes, layer/RMS/batch/group norms, `nll_loss`
//! and `native_dropout_backward`; the sharding rules of the row kernels are `Special`.

use super::*;

fn nll_args(a: &Args) -> Result<(&Tensor, &Tensor, Option<&Tensor>, Reduction, i64)> {
    Ok((
        a.tensor(0)?,
        a.tensor(1)?,
        a.opt_tensor(2)?,
        Reduction::from_i64(a.int(3)?)?,
        a.int(4)?,
    ))
}

/// The registered softmax, norm, loss and dropout overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let float = DType::FLOATING;
    // Float inputs with int64 targets.
    let loss = DType::FLOATING_AND_I64;
    let k = OpImpl::Kernel;
    // bf16 is left to the CPU: PyTorch's bf16 kernel rounds its statistics in a way the golden
    // instance-norm case shows and this kernel does not yet follow (off by up to 5 ulps).
    let bn = &[DType::F32, DType::F16];
    let stats = "batch statistics span every dim but the channels";
    vec![
        OpDef::new("aten::native_group_norm", k, float, |_, a| {
            let (y, m, r) = native_group_norm(
                a.tensor(0)?,
                a.opt_tensor(1)?,
                a.opt_tensor(2)?,
                a.int(3)?,
                a.int(4)?,
                a.int(5)?,
                a.int(6)?,
                a.float(7)?,
            )?;
            Ok(vec![Value::Tensor(y), Value::Tensor(m), Value::Tensor(r)])
        })
        .shard(Sharding::Replicate(
            "group statistics span channels and positions",
        )),
        OpDef::new("aten::native_batch_norm", k, bn, |_, a| {
            t3(native_batch_norm(
                "aten::native_batch_norm",
                a.tensor(0)?,
                a.opt_tensor(1)?,
                a.opt_tensor(2)?,
                a.opt_tensor(3)?,
                a.opt_tensor(4)?,
                a.bool(5)?,
                a.float(6)?,
                a.float(7)?,
            ))
        })
        .shard(Sharding::Replicate(stats)),
        OpDef::new("aten::_native_batch_norm_legit", k, bn, |_, a| {
            t3(native_batch_norm(
                "aten::_native_batch_norm_legit",
                a.tensor(0)?,
                a.opt_tensor(1)?,
                a.opt_tensor(2)?,
                Some(a.tensor(3)?),
                Some(a.tensor(4)?),
                a.bool(5)?,
                a.float(6)?,
                a.float(7)?,
            ))
        })
        .shard(Sharding::Replicate(stats)),
        OpDef::new("aten::_native_batch_norm_legit.no_stats", k, bn, |_, a| {
            t3(native_batch_norm(
                "aten::_native_batch_norm_legit.no_stats",
                a.tensor(0)?,
                a.opt_tensor(1)?,
                a.opt_tensor(2)?,
                None,
                None,
                a.bool(3)?,
                a.float(4)?,
                a.float(5)?,
            ))
        })
        .shard(Sharding::Replicate(stats)),
        OpDef::new(
            "aten::_native_batch_norm_legit_no_training",
            k,
            bn,
            |_, a| {
                t3(native_batch_norm(
                    "aten::_native_batch_norm_legit_no_training",
                    a.tensor(0)?,
                    a.opt_tensor(1)?,
                    a.opt_tensor(2)?,
                    Some(a.tensor(3)?),
                    Some(a.tensor(4)?),
                    false,
                    a.float(5)?,
                    a.float(6)?,
                ))
            },
        )
        .shard(Sharding::Replicate(stats)),
        OpDef::new("aten::_safe_softmax", k, float, |_, a| {
            t1(safe_softmax(a.tensor(0)?, a.int(1)?, a.opt_dtype(2)?))
        })
        .shard(Sharding::Special(Special::Softmax)),
        OpDef::new("aten::_softmax", k, float, |_, a| {
            t1(softmax_(a.tensor(0)?, a.int(1)?, a.bool(2)?))
        })
        .shard(Sharding::Special(Special::Softmax)),
        OpDef::new("aten::_log_softmax", k, float, |_, a| {
            t1(log_softmax_(a.tensor(0)?, a.int(1)?, a.bool(2)?))
        })
        .shard(Sharding::Special(Special::Softmax)),
        OpDef::new("aten::native_layer_norm", k, float, |_, a| {
            let (y, m, r) = native_layer_norm(
                a.tensor(0)?,
                &a.ints(1)?,
                a.opt_tensor(2)?,
                a.opt_tensor(3)?,
                a.float(4)?,
            )?;
            Ok(vec![Value::Tensor(y), Value::Tensor(m), Value::Tensor(r)])
        })
        .shard(Sharding::Special(Special::LayerNorm)),
        OpDef::new("aten::rms_norm", k, float, |_, a| {
            let eps = a.opt_float(3)?;
            t1(rms_norm(a.tensor(0)?, &a.ints(1)?, a.opt_tensor(2)?, eps))
        })
        .shard(Sharding::Special(Special::RmsNorm)),
        OpDef::new("aten::nll_loss_forward", k, loss, |_, a| {
            let (x, t, w, r, ig) = nll_args(a)?;
            t2(nll_loss_forward(x, t, w, r, ig))
        })
        .shard(Sharding::Special(Special::NllLoss)),
        OpDef::new("aten::nll_loss2d_forward", k, loss, |_, a| {
            let (x, t, w, r, ig) = nll_args(a)?;
            t2(nll_loss2d_forward(x, t, w, r, ig))
        })
        .shard(Sharding::Special(Special::NllLoss)),
    ]
}
