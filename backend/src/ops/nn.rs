//! Neural-network forward operators: `_softmax`, `_log_softmax`, `native_layer_norm`,
//! `rms_norm`, `nll_loss_forward` and `nll_loss2d_forward`.
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

mod loss;
mod norm;
mod softmax;

use super::Value;
use super::args::Args;
use super::registry::{OpDef, OpImpl};
use super::{t1, t2};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::sharding::{Sharding, Special};
use crate::tensor::Tensor;

pub use loss::{Reduction, nll_loss_forward, nll_loss2d_forward};
pub use norm::{native_layer_norm, rms_norm};
pub use softmax::{log_softmax_, softmax_};

/// The type the operators compute in.
const F: DType = DType::F32;

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

fn nll_args(a: &Args) -> Result<(&Tensor, &Tensor, Option<&Tensor>, Reduction, i64)> {
    Ok((
        a.tensor(0)?,
        a.tensor(1)?,
        a.opt_tensor(2)?,
        Reduction::from_i64(a.int(3)?)?,
        a.int(4)?,
    ))
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let float = &[DType::F32, DType::BF16, DType::F16];
    // Float inputs with int64 targets.
    let loss = &[DType::F32, DType::BF16, DType::F16, DType::I64];
    let k = OpImpl::Kernel;
    vec![
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
