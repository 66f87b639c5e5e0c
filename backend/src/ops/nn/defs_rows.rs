//! The registered row-wise overloads: softmaxes, layer/RMS/batch/group norms and `nll_loss`,
//! one `#[aten]` function each; the sharding rules of the row kernels are `Special`.

use super::{
    Reduction, log_softmax_, native_batch_norm, native_group_norm, native_layer_norm,
    nll_loss_forward, nll_loss2d_forward, rms_norm, safe_softmax, softmax_,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::compose::{op, tv};
use crate::ops::sharding::{Sharding, Special};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// The batch norms' dtypes. bf16 is left to the CPU: PyTorch's bf16 kernel rounds its
/// statistics in a way the golden instance-norm case shows and this kernel does not yet follow
/// (off by up to 5 ulps).
const BATCH_NORM: &[DType] = &[DType::F32, DType::F16];

/// The batch norms' sharding.
const STATS: Sharding = Sharding::Replicate("batch statistics span every dim but the channels");

/// The group norm's sharding.
const GROUPS: Sharding = Sharding::Replicate("group statistics span channels and positions");

type Three = (Tensor, Tensor, Tensor);

#[aten("aten::native_group_norm", dtypes = DType::FLOATING, shard = GROUPS)]
fn native_group_norm_op(a: NativeGroupNorm<'_>) -> Result<Three> {
    let (n, c, hxw) = (a.N, a.C, a.HxW);
    native_group_norm(a.input, a.weight, a.bias, n, c, hxw, a.group, a.eps)
}

#[aten("aten::native_batch_norm", dtypes = BATCH_NORM, shard = STATS)]
fn native_batch_norm_op(a: NativeBatchNorm<'_>) -> Result<Three> {
    let (w, b, mean, var) = (a.weight, a.bias, a.running_mean, a.running_var);
    let (training, momentum, eps) = (a.training, a.momentum, a.eps);
    native_batch_norm(
        NativeBatchNorm::NAME,
        a.input,
        w,
        b,
        mean,
        var,
        training,
        momentum,
        eps,
    )
}

#[aten("aten::_native_batch_norm_legit", dtypes = BATCH_NORM, shard = STATS)]
fn native_batch_norm_legit_op(a: NativeBatchNormLegit<'_>) -> Result<Three> {
    let (w, b, mean, var) = (a.weight, a.bias, Some(a.running_mean), Some(a.running_var));
    let (training, momentum, eps) = (a.training, a.momentum, a.eps);
    native_batch_norm(
        NativeBatchNormLegit::NAME,
        a.input,
        w,
        b,
        mean,
        var,
        training,
        momentum,
        eps,
    )
}

/// The `reserve` output of the batch norms with update: cuDNN's workspace elsewhere; PyTorch's
/// CPU kernel returns an empty byte tensor, and so does this one.
fn no_reserve(rt: &Runtime) -> Result<Tensor> {
    op(
        rt,
        "aten::zeros",
        vec![Value::Ints(vec![0]), Value::Dtype(DType::U8)],
    )
}

/// Batch norm in training, torch 2.15's path for `nn.BatchNorm*` (`_batch_norm_with_update`):
/// `(out, save_mean, save_invstd, reserve)`, `running_mean` and `running_var` updated in place
/// (the unbiased batch variance, `momentum` of the new statistics).
#[aten("aten::_batch_norm_with_update", dtypes = BATCH_NORM, shard = STATS)]
fn batch_norm_with_update_op(
    rt: &Runtime,
    a: BatchNormWithUpdate<'_>,
) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let (mean, var) = (Some(a.running_mean), Some(a.running_var));
    let (x, w, b, momentum, eps) = (a.input, a.weight, a.bias, a.momentum, a.eps);
    let name = BatchNormWithUpdate::NAME;
    let (y, m, inv) = native_batch_norm(name, x, w, b, mean, var, true, momentum, eps)?;
    Ok((y, m, inv, no_reserve(rt)?))
}

/// `_batch_norm_with_update`'s functional form (what `torch.compile`'s functionalisation
/// records): the updated running statistics are new tensors, the inputs unchanged.
#[aten("aten::_batch_norm_with_update_functional", dtypes = BATCH_NORM, shard = STATS)]
fn batch_norm_with_update_functional_op(
    rt: &Runtime,
    a: BatchNormWithUpdateFunctional<'_>,
) -> Result<Vec<Value>> {
    let rm = op(rt, "aten::clone", vec![tv(a.running_mean)])?;
    let rv = op(rt, "aten::clone", vec![tv(a.running_var)])?;
    let (x, w, b, momentum, eps) = (a.input, a.weight, a.bias, a.momentum, a.eps);
    let name = BatchNormWithUpdateFunctional::NAME;
    let (y, m, inv) = native_batch_norm(name, x, w, b, Some(&rm), Some(&rv), true, momentum, eps)?;
    Ok([y, m, inv, no_reserve(rt)?, rm, rv]
        .into_iter()
        .map(Value::Tensor)
        .collect())
}

#[aten("aten::_native_batch_norm_legit.no_stats", dtypes = BATCH_NORM, shard = STATS)]
fn native_batch_norm_legit_no_stats_op(a: NativeBatchNormLegitNoStats<'_>) -> Result<Three> {
    let name = NativeBatchNormLegitNoStats::NAME;
    let (x, w, b) = (a.input, a.weight, a.bias);
    native_batch_norm(name, x, w, b, None, None, a.training, a.momentum, a.eps)
}

#[aten("aten::_native_batch_norm_legit_no_training", dtypes = BATCH_NORM, shard = STATS)]
fn native_batch_norm_legit_no_training_op(a: NativeBatchNormLegitNoTraining<'_>) -> Result<Three> {
    let (w, b, mean, var) = (a.weight, a.bias, Some(a.running_mean), Some(a.running_var));
    let name = NativeBatchNormLegitNoTraining::NAME;
    native_batch_norm(name, a.input, w, b, mean, var, false, a.momentum, a.eps)
}

#[aten("aten::_safe_softmax", dtypes = DType::FLOATING, shard = Sharding::Special(Special::Softmax))]
fn safe_softmax_op(a: SafeSoftmax<'_>) -> Result<Tensor> {
    safe_softmax(a.self_, a.dim, a.dtype)
}

#[aten("aten::_softmax", dtypes = DType::FLOATING, shard = Sharding::Special(Special::Softmax))]
fn softmax_op(a: Softmax<'_>) -> Result<Tensor> {
    softmax_(a.self_, a.dim, a.half_to_float)
}

#[aten("aten::_log_softmax", dtypes = DType::FLOATING, shard = Sharding::Special(Special::Softmax))]
fn log_softmax_op(a: LogSoftmax<'_>) -> Result<Tensor> {
    log_softmax_(a.self_, a.dim, a.half_to_float)
}

#[aten("aten::native_layer_norm", dtypes = DType::FLOATING, shard = Sharding::Special(Special::LayerNorm))]
fn native_layer_norm_op(a: NativeLayerNorm<'_>) -> Result<Three> {
    native_layer_norm(a.input, &a.normalized_shape, a.weight, a.bias, a.eps)
}

#[aten("aten::rms_norm", dtypes = DType::FLOATING, shard = Sharding::Special(Special::RmsNorm))]
fn rms_norm_op(a: RmsNorm<'_>) -> Result<Tensor> {
    rms_norm(a.input, &a.normalized_shape, a.weight, a.eps)
}

// The losses take float inputs with int64 targets.

#[aten("aten::nll_loss_forward", dtypes = DType::FLOATING_AND_I64, shard = Sharding::Special(Special::NllLoss))]
fn nll_loss_forward_op(a: NllLossForward<'_>) -> Result<(Tensor, Tensor)> {
    let r = Reduction::from_i64(a.reduction)?;
    nll_loss_forward(a.self_, a.target, a.weight, r, a.ignore_index)
}

#[aten("aten::nll_loss2d_forward", dtypes = DType::FLOATING_AND_I64, shard = Sharding::Special(Special::NllLoss))]
fn nll_loss2d_forward_op(a: NllLoss2dForward<'_>) -> Result<(Tensor, Tensor)> {
    let r = Reduction::from_i64(a.reduction)?;
    nll_loss2d_forward(a.self_, a.target, a.weight, r, a.ignore_index)
}
