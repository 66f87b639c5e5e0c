//! A transformer block with a language-model head, forward and backward, written with the
//! backend's operators as PyTorch's autograd would call them: embedding, RMSNorm, causal
//! multi-head attention, SwiGLU MLP, residuals, logits, cross-entropy (log_softmax + nll_loss),
//! then the backward of each in reverse.

use super::{Init, linear};
use tpuemu_backend::dtype::{DType, Scalar};
use tpuemu_backend::error::Result;
use tpuemu_backend::ops::matrix::attention::scaled_dot_product_attention_lse as attention_lse;
use tpuemu_backend::ops::matrix::attention_backward::flash_attention_backward;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;

/// Sizes of the block.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct TransformerConfig {
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// MLP hidden width.
    pub d_ff: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Parameter and activation dtype.
    pub dtype: DType,
}

impl TransformerConfig {
    /// The demo's size: 512 tokens of width 512, 8 heads, SwiGLU of 1408, 8192-token
    /// vocabulary, bf16.
    pub fn demo() -> Self {
        TransformerConfig {
            batch: 2,
            seq: 256,
            d_model: 512,
            heads: 8,
            d_ff: 1408,
            vocab: 8192,
            dtype: DType::BF16,
        }
    }

    /// A small block for quick checks: 2 x 32 tokens of width 128, 4 heads, SwiGLU of 256,
    /// 512-token vocabulary, bf16.
    pub fn small() -> Self {
        TransformerConfig {
            batch: 2,
            seq: 32,
            d_model: 128,
            heads: 4,
            d_ff: 256,
            vocab: 512,
            dtype: DType::BF16,
        }
    }

    /// A block of `width` and `seq` tokens (one sequence): heads of 128 (the matrix unit's
    /// width), SwiGLU of 2.75x the width rounded up to 128 (the demo's ratio), the demo's
    /// 8192-token vocabulary, bf16. `tpuemu bench eager --width 2048 --seq 2048`.
    pub fn shaped(width: usize, seq: usize) -> Result<Self> {
        if width == 0 || !width.is_multiple_of(128) || seq == 0 {
            return Err(tpuemu_backend::error::TpuError::BadArgs(format!(
                "the block's width must be a positive multiple of 128 and its sequence positive, got width {width}, sequence {seq}"
            )));
        }
        let d_ff = width
            .checked_mul(11)
            .map(|x| (x / 4).div_ceil(128) * 128)
            .ok_or_else(|| {
                tpuemu_backend::error::TpuError::BadArgs(format!(
                    "the block's width {width} is too large"
                ))
            })?;
        Ok(TransformerConfig {
            batch: 1,
            seq,
            d_model: width,
            heads: width / 128,
            d_ff,
            vocab: 8192,
            dtype: DType::BF16,
        })
    }

    /// Bytes the parameters, the token ids and one activation of `[tokens, width]` take on the
    /// chip, at least (`None` past `u128`): what must fit before a step can start.
    pub fn min_bytes(&self) -> Option<u128> {
        let (d, f, v) = (self.d_model as u128, self.d_ff as u128, self.vocab as u128);
        let n = (self.batch as u128).checked_mul(self.seq as u128)?;
        let esz = self.dtype.size() as u128;
        let params = (2 * v)
            .checked_mul(d)?
            .checked_add(3 * d)?
            .checked_add(d.checked_mul(d)?.checked_mul(4)?)?
            .checked_add(d.checked_mul(f)?.checked_mul(3)?)?
            .checked_mul(esz)?;
        params
            .checked_add(n.checked_mul(16)?)?
            .checked_add(n.checked_mul(d)?.checked_mul(esz)?)
    }

    /// Matrix-unit FLOPs of one training step (forward and backward).
    pub fn flops(&self) -> f64 {
        let n = (self.batch * self.seq) as f64;
        let (d, f, v, s) = (
            self.d_model as f64,
            self.d_ff as f64,
            self.vocab as f64,
            self.seq as f64,
        );
        let fwd =
            2.0 * n * d * d * 4.0 + 2.0 * 2.0 * n * s * d + 2.0 * n * d * f * 3.0 + 2.0 * n * d * v;
        3.0 * fwd
    }
}

/// The parameters, and the inputs of a step.
pub struct Transformer {
    /// Sizes.
    pub cfg: TransformerConfig,
    embed: Tensor,
    g1: Tensor,
    g2: Tensor,
    g3: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    w_out: Tensor,
    /// Token ids `[batch * seq]`.
    pub tokens: Tensor,
    /// Next-token targets `[batch * seq]`.
    pub targets: Tensor,
}

/// What a step returns: the loss and a gradient per parameter.
pub struct StepResult {
    /// Mean cross-entropy.
    pub loss: Tensor,
    /// Gradients, in parameter order (embedding, norms, attention, MLP, head).
    pub grads: Vec<Tensor>,
}

/// RMSNorm's backward through PyTorch's decomposition: returns (dx, dweight).
fn rms_backward(dy: &Tensor, x: &Tensor, g: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let ms = x.mul(x)?.mean(&[-1], true)?;
    let rstd = ms.add_scalar(eps)?.rsqrt()?;
    let xhat = x.mul(&rstd)?;
    let dg = dy.mul(&xhat)?.sum(&[0], false)?;
    let dxhat = dy.mul(g)?;
    let proj = dxhat.mul(&xhat)?.mean(&[-1], true)?;
    let dx = rstd.mul(&dxhat.sub(&xhat.mul(&proj)?)?)?;
    Ok((dx, dg))
}

impl Transformer {
    /// Random parameters (deterministic) and a batch of tokens.
    pub fn new(rt: &Runtime, cfg: TransformerConfig) -> Result<Self> {
        // Refused before anything is generated on the host (which would hold as many values).
        let hbm = rt.chip_info().hbm_bytes as u128;
        match cfg.min_bytes() {
            Some(b) if b <= hbm => {}
            need => {
                return Err(tpuemu_backend::error::TpuError::OutOfMemory(format!(
                    "the block of width {}, {} tokens needs at least {} bytes for its parameters, token ids and one activation, and the chip has {hbm}",
                    cfg.d_model,
                    cfg.batch.saturating_mul(cfg.seq),
                    need.map_or("more than 2^128".into(), |b| b.to_string())
                )));
            }
        }
        let mut init = Init::new(7);
        let (d, f, v, n) = (cfg.d_model, cfg.d_ff, cfg.vocab, cfg.batch * cfg.seq);
        let dt = cfg.dtype;
        let w = |init: &mut Init, out: usize, inp: usize| {
            init.normal(rt, &[out, inp], 1.0 / (inp as f64).sqrt(), dt)
        };
        let embed = init.normal(rt, &[v, d], 1.0, dt)?;
        let ones = |rt: &Runtime| ops::creation::ones(rt, &[d], dt);
        let tokens = init.tokens(rt, n, v)?;
        let targets = init.tokens(rt, n, v)?;
        Ok(Transformer {
            g1: ones(rt)?,
            g2: ones(rt)?,
            g3: ones(rt)?,
            wq: w(&mut init, d, d)?,
            wk: w(&mut init, d, d)?,
            wv: w(&mut init, d, d)?,
            wo: w(&mut init, d, d)?,
            w_gate: w(&mut init, f, d)?,
            w_up: w(&mut init, f, d)?,
            w_down: w(&mut init, d, f)?,
            w_out: w(&mut init, v, d)?,
            embed,
            tokens,
            targets,
            cfg,
        })
    }

    /// `[N, D]` to `[B, H, S, Dh]`: a view (`x.view(B, S, H, Dh).transpose(1, 2)`).
    fn heads(&self, x: &Tensor) -> Result<Tensor> {
        let c = &self.cfg;
        let dh = c.d_model / c.heads;
        x.view_shape(&[c.batch as i64, c.seq as i64, c.heads as i64, dh as i64])?
            .permute(&[0, 2, 1, 3])
    }

    /// `[B, H, S, Dh]` back to `[N, D]` (a view when the memory is `[B, S, H, Dh]`, as the
    /// attention kernels lay out what they return; a copy otherwise).
    fn merge(&self, x: &Tensor) -> Result<Tensor> {
        let c = &self.cfg;
        x.permute(&[0, 2, 1, 3])?
            .reshape(&[(c.batch * c.seq) as i64, c.d_model as i64])
    }

    /// One training step: forward, loss, backward. `tokens` and `targets` are `[batch * seq]`
    /// int64.
    pub fn step(&self, tokens: &Tensor, targets: &Tensor) -> Result<StepResult> {
        let c = &self.cfg;
        let eps = 1e-6;
        let d = c.d_model as i64;
        let dh = c.d_model / c.heads;
        let scale = 1.0 / (dh as f64).sqrt();
        // Forward.
        let x0 = ops::data::embedding(&self.embed, tokens)?;
        let h1 = x0.rms_norm(&[d], Some(&self.g1), Some(eps))?;
        let (q, k, v) = (
            linear(&h1, &self.wq)?,
            linear(&h1, &self.wk)?,
            linear(&h1, &self.wv)?,
        );
        let (qh, kh, vh) = (self.heads(&q)?, self.heads(&k)?, self.heads(&v)?);
        drop((q, k, v));
        // Causal attention as models call it (`F.scaled_dot_product_attention(is_causal=True)`):
        // the flash-attention kernel, which keeps each row's logsumexp for the backward and
        // never writes the `S x S` weights to HBM.
        let (o, lse) = attention_lse(&qh, &kh, &vh, true, Some(scale), false)?;
        let o2 = self.merge(&o)?;
        let x1 = x0.add(&linear(&o2, &self.wo)?)?;
        let h2 = x1.rms_norm(&[d], Some(&self.g2), Some(eps))?;
        let gate = linear(&h2, &self.w_gate)?;
        let up = linear(&h2, &self.w_up)?;
        let sg = gate.silu()?;
        let act = sg.mul(&up)?;
        let x2 = x1.add(&linear(&act, &self.w_down)?)?;
        let h3 = x2.rms_norm(&[d], Some(&self.g3), Some(eps))?;
        let logits = linear(&h3, &self.w_out)?;
        let logp = logits.log_softmax(-1)?;
        // As autograd does, each value is released after its last use (a saved tensor when
        // its backward has run): what the graph still holds at a flush is written to HBM.
        drop(logits);
        let nll = ops::call(
            logp.runtime(),
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
        drop(nll);

        // Backward.
        let rt = loss.runtime().clone();
        let one = ops::creation::scalar_tensor(&rt, Scalar::Float(1.0), loss.dtype())?;
        let g = ops::call(
            &rt,
            "aten::nll_loss_backward",
            vec![
                Value::Tensor(one),
                Value::Tensor(logp.clone()),
                Value::Tensor(targets.clone()),
                Value::None,
                Value::Int(1),
                Value::Int(-100),
                Value::Tensor(total),
            ],
        )?;
        let g_logp = tensor(&g[0]);
        drop(g);
        let g_logits = ops::backward::log_softmax_backward_data(&g_logp, &logp, -1, c.dtype)?;
        drop((g_logp, logp));
        let dw_out = g_logits.t()?.mm(&h3)?;
        let g_h3 = g_logits.mm(&self.w_out)?;
        drop((g_logits, h3));
        let (g_x2, dg3) = rms_backward(&g_h3, &x2, &self.g3, eps)?;
        drop((g_h3, x2));
        let dw_down = g_x2.t()?.mm(&act)?;
        let g_act = g_x2.mm(&self.w_down)?;
        drop(act);
        let g_up = g_act.mul(&sg)?;
        let g_sg = g_act.mul(&up)?;
        drop((g_act, sg, up));
        let g_gate = ops::backward::silu_backward(&g_sg, &gate)?;
        drop((g_sg, gate));
        let dw_gate = g_gate.t()?.mm(&h2)?;
        let dw_up = g_up.t()?.mm(&h2)?;
        let g_h2 = g_gate.mm(&self.w_gate)?.add(&g_up.mm(&self.w_up)?)?;
        drop((g_gate, g_up, h2));
        let (g_x1m, dg2) = rms_backward(&g_h2, &x1, &self.g2, eps)?;
        drop((g_h2, x1));
        let g_x1 = g_x2.add(&g_x1m)?;
        drop((g_x2, g_x1m));
        let dwo = g_x1.t()?.mm(&o2)?;
        let g_o = self.heads(&g_x1.mm(&self.wo)?)?;
        drop(o2);
        let (g_qh, g_kh, g_vh) =
            flash_attention_backward(&g_o, &qh, &kh, &vh, &o, &lse, 0.0, true, None, Some(scale))?;
        drop((g_o, qh, kh, vh, o, lse));
        let (g_q, g_k, g_v) = (self.merge(&g_qh)?, self.merge(&g_kh)?, self.merge(&g_vh)?);
        drop((g_qh, g_kh, g_vh));
        let dwq = g_q.t()?.mm(&h1)?;
        let dwk = g_k.t()?.mm(&h1)?;
        let dwv = g_v.t()?.mm(&h1)?;
        drop(h1);
        let g_h1 = g_q
            .mm(&self.wq)?
            .add(&g_k.mm(&self.wk)?)?
            .add(&g_v.mm(&self.wv)?)?;
        drop((g_q, g_k, g_v));
        let (g_x0a, dg1) = rms_backward(&g_h1, &x0, &self.g1, eps)?;
        drop((g_h1, x0));
        let g_x0 = g_x1.add(&g_x0a)?;
        drop((g_x1, g_x0a));
        let de = ops::call(
            &rt,
            "aten::embedding_dense_backward",
            vec![
                Value::Tensor(g_x0),
                Value::Tensor(tokens.clone()),
                Value::Int(c.vocab as i64),
                Value::Int(-1),
                Value::Bool(false),
            ],
        )?;
        Ok(StepResult {
            loss,
            grads: vec![
                tensor(&de[0]),
                dg1,
                dg2,
                dg3,
                dwq,
                dwk,
                dwv,
                dwo,
                dw_gate,
                dw_up,
                dw_down,
                dw_out,
            ],
        })
    }
}

fn tensor(v: &Value) -> Tensor {
    match v {
        Value::Tensor(t) => t.clone(),
        _ => unreachable!("the operator returns tensors"),
    }
}

#[cfg(test)]
mod tests {
    use super::TransformerConfig;

    #[test]
    fn a_shaped_block_has_heads_of_128_and_the_demo_s_mlp_ratio() {
        // 2048 / 128 = 16 heads; 2.75 x 2048 = 5632 (a multiple of 128 already); the demo's
        // width 512 gives its 1408.
        let c = TransformerConfig::shaped(2048, 2048).unwrap();
        assert_eq!((c.batch, c.seq, c.heads, c.d_ff), (1, 2048, 16, 5632));
        assert_eq!(TransformerConfig::shaped(512, 256).unwrap().d_ff, 1408);
        assert!(TransformerConfig::shaped(100, 256).is_err());
    }
}
