//! `aten::_scaled_dot_product_flash_attention_for_cpu_backward`: the gradients of attention
//! from the forward's output and logsumexp. On the flash-attention backward kernel when it can
//! take the operands (see [`super::flash`]); otherwise as a decomposition that recomputes the
//! weights `P = exp(scale Q K^T + mask - lse)` in f32 and applies `dV = P^T dO`,
//! `dS = P (dO V^T - rowsum(dO * O))`, `dQ = scale dS K`, `dK = scale dS^T Q`.

use super::flash;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::creation;
use crate::ops::helpers::OpScope;
use crate::ops::sharding::Sharding;
use crate::ops::{Value, aten};
use crate::tensor::Tensor;

/// The gradients `(dq, dk, dv)`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward(
    grad_out: &Tensor,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    dropout_p: f64,
    is_causal: bool,
    attn_mask: Option<&Tensor>,
    scale: Option<f64>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let mut ins = vec![grad_out, q, k, v, out, lse];
    ins.extend(attn_mask);
    let op = OpScope::new(
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        &ins,
    )?;
    if dropout_p != 0.0 {
        return Err(TpuError::Unsupported(
            "attention backward with dropout is not supported on TPU".into(),
        ));
    }
    if [grad_out, q, k, v, out].iter().any(|t| t.dim() != 4) || lse.dim() != 3 {
        return Err(op.err(
            "expected 4-D query, key, value, out and grad_out [B, H, L, E] and a 3-D logsumexp",
        ));
    }
    let e = q.shape()[3];
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    if attn_mask.is_none()
        && lse.dtype() == DType::F32
        && grad_out.shape() == out.shape()
        && let Some(r) = flash::backward(&op, [q, k, v, out, grad_out, lse], is_causal, scale)?
    {
        return Ok(r);
    }
    decomposed(grad_out, q, k, v, out, lse, is_causal, attn_mask, scale)
}

/// The backward as a decomposition, in f32.
#[allow(clippy::too_many_arguments)]
fn decomposed(
    grad_out: &Tensor,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    is_causal: bool,
    attn_mask: Option<&Tensor>,
    scale: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let f = DType::F32;
    // Grouped key/value heads serve `g` query heads each: repeated for the products, their
    // gradients summed over the group.
    let (hq, hk) = (q.shape()[1], k.shape()[1]);
    if hk == 0 || hq % hk != 0 || v.shape()[1] != hk {
        return Err(TpuError::ShapeMismatch(format!(
            "attention backward: key/value heads ({hk}, {}) must divide the query heads ({hq})",
            v.shape()[1]
        )));
    }
    let g = hq / hk;
    let (kr, vr) = (
        super::attention::repeat_heads(q, k)?,
        super::attention::repeat_heads(q, v)?,
    );
    let (qf, kf, vf) = (q.to_dtype(f)?, kr.to_dtype(f)?, vr.to_dtype(f)?);
    let (dof, of) = (grad_out.to_dtype(f)?, out.to_dtype(f)?);
    let mut s = qf.matmul(&kf.transpose(-2, -1)?)?.mul_scalar(scale)?;
    let (l, sk) = (q.shape()[2], k.shape()[2]);
    if is_causal {
        let above = creation::ones(q.runtime(), &[l, sk], DType::Bool)?.triu(1)?;
        s = s.masked_fill(&above, f64::NEG_INFINITY)?;
    }
    if let Some(m) = attn_mask {
        s = if m.dtype() == DType::Bool {
            let ninf = creation::full(q.runtime(), &[], Scalar::Float(f64::NEG_INFINITY), f)?;
            let zero = creation::full(q.runtime(), &[], Scalar::Float(0.0), f)?;
            s.add(&crate::ops::binary::where_(m, &zero, &ninf)?)?
        } else {
            s.add(&m.to_dtype(f)?)?
        };
    }
    let p = s.sub(&lse.to_dtype(f)?.unsqueeze(-1)?)?.exp()?;
    let dv = p.transpose(-2, -1)?.matmul(&dof)?;
    let dp = dof.matmul(&vf.transpose(-2, -1)?)?;
    let d = dof.mul(&of)?.sum(&[-1], true)?;
    let ds = p.mul(&dp.sub(&d)?)?;
    let dq = ds.matmul(&kf)?.mul_scalar(scale)?;
    let mut dk = ds.transpose(-2, -1)?.matmul(&qf)?.mul_scalar(scale)?;
    let mut dv = dv;
    if g > 1 {
        let grouped = |t: &Tensor| -> Result<Tensor> {
            let sh: Vec<i64> = t.shape().iter().map(|x| *x as i64).collect();
            t.reshape(&[sh[0], hk as i64, g as i64, sh[2], sh[3]])?
                .sum(&[2], false)
        };
        dk = grouped(&dk)?;
        dv = grouped(&dv)?;
    }
    Ok((
        dq.to_dtype(q.dtype())?,
        dk.to_dtype(k.dtype())?,
        dv.to_dtype(v.dtype())?,
    ))
}

// The registered backward overloads: one `#[aten]` function each.

#[aten(
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    dtypes = DType::FLOATING_AND_BOOL,
    shard = Sharding::Replicate(
        "the attention backward runs on whole heads (DTensor shards attention by its forward's rule)",
    ),
    kind = Decomposition
)]
fn scaled_dot_product_flash_attention_for_cpu_backward_op(
    a: ScaledDotProductFlashAttentionForCpuBackward<'_>,
) -> Result<(Tensor, Tensor, Tensor)> {
    flash_attention_backward(
        a.grad_out,
        a.query,
        a.key,
        a.value,
        a.out,
        a.logsumexp,
        a.dropout_p,
        a.is_causal,
        a.attn_mask,
        a.scale,
    )
}

/// The fused attention's backward. The tensors it does not read (`cum_seq_*`, `philox_*`) and
/// `attn_bias` are optional here: PyTorch's autograd passes undefined ones (an unmasked call's
/// bias; the sequence offsets and the RNG state of a call without nested tensors or dropout).
#[aten(
    "aten::_scaled_dot_product_fused_attention_overrideable_backward",
    dtypes = DType::FLOATING_AND_BOOL,
    kind = Decomposition,
    optional = "attn_bias, cum_seq_q, cum_seq_k, philox_seed, philox_offset",
    shard = Sharding::Replicate(
        "the attention backward runs on whole heads (DTensor shards attention by its forward's rule)",
    )
)]
fn scaled_dot_product_fused_attention_overrideable_backward_op(
    a: ScaledDotProductFusedAttentionOverrideableBackward<'_>,
) -> Result<Vec<Value>> {
    let (dq, dk, dv) = flash_attention_backward(
        a.grad_out,
        a.query,
        a.key,
        a.value,
        a.out,
        a.logsumexp,
        a.dropout_p,
        a.is_causal,
        a.attn_bias,
        a.scale,
    )?;
    // The bias is never a leaf the tpu's choice of backend differentiates: masked calls take
    // the math path.
    Ok(vec![
        Value::Tensor(dq),
        Value::Tensor(dk),
        Value::Tensor(dv),
        Value::None,
    ])
}
