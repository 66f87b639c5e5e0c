//! A two-layer MLP classifier, forward and backward: `addmm`, GELU, `addmm`, cross-entropy,
//! then the gradients of both layers.

use super::{Init, one};
use tpuemu_backend::dtype::{DType, Scalar};
use tpuemu_backend::error::Result;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;

/// Sizes of the MLP.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct MlpConfig {
    /// Rows of a batch.
    pub batch: usize,
    /// Input width.
    pub d_in: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Classes.
    pub classes: usize,
    /// Parameter dtype.
    pub dtype: DType,
}

impl MlpConfig {
    /// The benchmark's size.
    pub fn bench() -> Self {
        MlpConfig {
            batch: 256,
            d_in: 512,
            hidden: 2048,
            classes: 512,
            dtype: DType::BF16,
        }
    }

    /// A small MLP for quick checks (batch 32, 64 -> 128 -> 16, bf16).
    pub fn small() -> Self {
        MlpConfig {
            batch: 32,
            d_in: 64,
            hidden: 128,
            classes: 16,
            dtype: DType::BF16,
        }
    }

    /// Matrix-unit FLOPs of one step.
    pub fn flops(&self) -> f64 {
        let (b, i, h, c) = (
            self.batch as f64,
            self.d_in as f64,
            self.hidden as f64,
            self.classes as f64,
        );
        3.0 * 2.0 * b * (i * h + h * c)
    }
}

/// Parameters and a batch.
pub struct Mlp {
    /// Sizes.
    pub cfg: MlpConfig,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    /// Inputs `[batch, d_in]`.
    pub x: Tensor,
    /// Class targets `[batch]`.
    pub targets: Tensor,
}

fn tensor(v: &Value) -> Tensor {
    match v {
        Value::Tensor(t) => t.clone(),
        _ => unreachable!("the operator returns tensors"),
    }
}

impl Mlp {
    /// Random parameters (deterministic) and a batch.
    pub fn new(rt: &Runtime, cfg: MlpConfig) -> Result<Self> {
        let mut init = Init::new(3);
        let dt = cfg.dtype;
        Ok(Mlp {
            w1: init.normal(
                rt,
                &[cfg.hidden, cfg.d_in],
                1.0 / (cfg.d_in as f64).sqrt(),
                dt,
            )?,
            b1: init.normal(rt, &[cfg.hidden], 0.1, dt)?,
            w2: init.normal(
                rt,
                &[cfg.classes, cfg.hidden],
                1.0 / (cfg.hidden as f64).sqrt(),
                dt,
            )?,
            b2: init.normal(rt, &[cfg.classes], 0.1, dt)?,
            x: init.normal(rt, &[cfg.batch, cfg.d_in], 1.0, dt)?,
            targets: init.tokens(rt, cfg.batch, cfg.classes)?,
            cfg,
        })
    }

    /// One training step; returns the loss and the gradients (w1, b1, w2, b2).
    pub fn step(&self, x: &Tensor, targets: &Tensor) -> Result<super::StepResult> {
        let one_s = Scalar::Int(1);
        let h = ops::matrix::addmm(&self.b1, x, &self.w1.t()?, one_s, one_s)?;
        let a = h.gelu("none")?;
        let logits = ops::matrix::addmm(&self.b2, &a, &self.w2.t()?, one_s, one_s)?;
        let logp = logits.log_softmax(-1)?;
        let rt = logp.runtime().clone();
        let nll = ops::call(
            &rt,
            "aten::nll_loss_forward",
            vec![
                Value::Tensor(logp.clone()),
                Value::Tensor(targets.clone()),
                Value::None,
                Value::Int(1),
                Value::Int(-100),
            ],
        )?;
        let (loss, total) = (tensor(&nll[0]), tensor(&nll[1]));
        let g = ops::call(
            &rt,
            "aten::nll_loss_backward",
            vec![
                Value::Tensor(one(&rt, loss.dtype())?),
                Value::Tensor(logp.clone()),
                Value::Tensor(targets.clone()),
                Value::None,
                Value::Int(1),
                Value::Int(-100),
                Value::Tensor(total),
            ],
        )?;
        let g_logits =
            ops::backward::log_softmax_backward_data(&tensor(&g[0]), &logp, -1, self.cfg.dtype)?;
        let dw2 = g_logits.t()?.mm(&a)?;
        let db2 = g_logits.sum(&[0], false)?;
        let g_a = g_logits.mm(&self.w2)?;
        let g_h = ops::backward::gelu_backward(&g_a, &h, "none")?;
        let dw1 = g_h.t()?.mm(x)?;
        let db1 = g_h.sum(&[0], false)?;
        Ok(super::StepResult {
            loss,
            grads: vec![dw1, db1, dw2, db2],
        })
    }
}
