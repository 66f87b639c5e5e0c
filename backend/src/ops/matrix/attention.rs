//! Scaled dot-product attention as a decomposition: `Q @ K^T` on the matrix units with the
//! scale in its epilogue (f32 scores, also for bf16 inputs), one rows kernel for the masked
//! softmax (explicit mask, or a causal mask built from the row and column indices; fully masked rows give
//! zeros as PyTorch's math backend does), then `P @ V` with `P` in the inputs' dtype.
//!
//! `aten::scaled_dot_product_attention` (the composite PyTorch users call) and
//! `aten::_scaled_dot_product_flash_attention_for_cpu` (what it dispatches to on the CPU, also
//! returning the rows' logsumexp) share this implementation. Dropout is not supported (it needs
//! a random generator): `dropout_p` must be 0.

use super::{batch_operands, meta_name, product, relayout, reshaped};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::ops::layout_ops;
use crate::ops::sharding::{Sharding, Special};
use crate::tensor::Tensor;

/// `torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p,
/// is_causal, scale, enable_gqa)`: `q [..., L, E]`, `k [..., S, E]`, `v [..., S, Ev]` (batch
/// dims broadcast) give `[..., L, Ev]`. A bool mask keeps the positions where it is true, a
/// float mask is added to the scores; `is_causal` keeps key `j <= i` for query `i`.
#[allow(clippy::too_many_arguments)]
#[aten(
    "aten::scaled_dot_product_attention",
    dtypes = DType::FLOATING_AND_BOOL,
    shard = Sharding::Special(Special::Attention),
    kind = Decomposition,
    call = ScaledDotProductAttention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
)]
pub fn scaled_dot_product_attention(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
) -> Result<Tensor> {
    let mut ins = vec![query, key, value];
    ins.extend(attn_mask);
    let op = OpScope::new(ScaledDotProductAttention::NAME, &ins)?;
    let a = Attention {
        mask: attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        lse: false,
        dense_out: false,
    };
    Ok(attention(&op, query, key, value, &a)?.0)
}

/// [`scaled_dot_product_attention`] without a mask, also returning the logsumexp of each row
/// of scaled scores (`[.., H, L]`, f32) that its backward
/// ([`super::attention_backward::flash_attention_backward`]) takes: what a training step calls
/// (on the flash-attention kernel when it can take the operands).
pub fn scaled_dot_product_attention_lse(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(ScaledDotProductAttention::NAME, &[query, key, value])?;
    let a = Attention {
        mask: None,
        dropout_p: 0.0,
        is_causal,
        scale,
        enable_gqa,
        lse: true,
        dense_out: false,
    };
    let (o, lse) = attention(&op, query, key, value, &a)?;
    Ok((o, lse.ok_or_else(|| op.err("internal: no logsumexp"))?))
}

/// `aten::_scaled_dot_product_flash_attention_for_cpu`: 4-D `[B, H, L, E]` inputs; returns the
/// output and the logsumexp of each row of scaled, masked scores (`[B, H, L]`, float32).
#[aten(
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    dtypes = DType::FLOATING_AND_BOOL,
    shard = Sharding::Special(Special::FlashAttention),
    kind = Decomposition,
    call = ScaledDotProductFlashAttentionForCpu(query, key, value, dropout_p, is_causal, attn_mask, scale)
)]
pub fn flash_attention_for_cpu(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    dropout_p: f64,
    is_causal: bool,
    attn_mask: Option<&Tensor>,
    scale: Option<f64>,
) -> Result<(Tensor, Tensor)> {
    let mut ins = vec![query, key, value];
    ins.extend(attn_mask);
    let op = OpScope::new(ScaledDotProductFlashAttentionForCpu::NAME, &ins)?;
    if [query, key, value].iter().any(|t| t.dim() != 4) {
        return Err(TpuError::BadArgs(
            "scaled_dot_product_attention_flash_attention: Accept only 4 dims inputs shape of {B, H, T, K}".into(),
        ));
    }
    let a = Attention {
        mask: attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa: false,
        lse: true,
        dense_out: false,
    };
    let (out, lse) = attention(&op, query, key, value, &a)?;
    let lse = lse.ok_or_else(|| op.err("internal: no logsumexp"))?;
    Ok((out, lse))
}

/// `aten::_scaled_dot_product_fused_attention_overrideable`: what PyTorch's
/// `scaled_dot_product_attention` calls on a PrivateUse1 device when the device's
/// `_fused_sdp_choice` picks the "overrideable" backend (the Python bridge picks it for
/// unmasked, dropout-free bf16/f32 calls): the output and the rows' logsumexp (on the
/// flash-attention kernels when they can take the operands), the query and key lengths, and
/// for the fields it has no use for what PyTorch's meta function gives: no sequence offsets
/// and no debug mask, zero-dimensional dropout seed and offset. Key and value may have fewer heads than the query (they
/// serve groups of query heads).
#[aten(
    "aten::_scaled_dot_product_fused_attention_overrideable",
    dtypes = DType::FLOATING_AND_BOOL,
    shard = Sharding::Replicate("the fused attention runs on whole heads (DTensor shards scaled_dot_product_attention by its own rule)", ),
    kind = Decomposition,
    call = ScaledDotProductFusedAttentionOverrideable(query, key, value, attn_bias, dropout_p, is_causal, scale)
)]
pub fn fused_attention_overrideable(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    attn_bias: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Vec<Value>> {
    let mut ins = vec![query, key, value];
    ins.extend(attn_bias);
    let op = OpScope::new(ScaledDotProductFusedAttentionOverrideable::NAME, &ins)?;
    if [query, key, value].iter().any(|t| t.dim() != 4) {
        return Err(TpuError::BadArgs(
            "_scaled_dot_product_fused_attention_overrideable: expected 4-D query, key and value [B, H, L, E]".into(),
        ));
    }
    // The output is laid out in the query's dimension order, as PyTorch's meta function for
    // this operator allocates it (compiled graphs rely on it): the flash kernel writes either
    // order a model's queries come in — `[B, H, L, E]` contiguous, or heads split from a
    // projection (`[B, L, H, E]` memory); any other order is copied into place.
    let mut out_shape = query.shape().to_vec();
    out_shape[3] = value.shape()[3];
    let want = matching_layout(query.layout(), &out_shape);
    let heads_split =
        super::flash::heads_split_layout([out_shape[0], out_shape[1], out_shape[2], out_shape[3]]);
    let a = Attention {
        mask: attn_bias,
        dropout_p,
        is_causal,
        scale,
        enable_gqa: query.shape()[1] != key.shape()[1],
        lse: true,
        dense_out: want.strides != heads_split.strides,
    };
    let (out, lse) = attention(&op, query, key, value, &a)?;
    let lse = lse.ok_or_else(|| op.err("internal: no logsumexp"))?;
    let out = if out.layout().strides == want.strides {
        out
    } else {
        let dst = Tensor::empty(query.runtime(), &[want.numel()], out.dtype())?.with_layout(want);
        crate::ops::creation::copy_(&dst, &out)?
    };
    let rt = query.runtime();
    // As PyTorch's meta function: no sequence offsets or debug mask (undefined tensors), and
    // zero-dimensional dropout seed and offset.
    let scalar = || Tensor::empty(rt, &[], DType::I64).map(Value::Tensor);
    Ok(vec![
        Value::Tensor(out),
        Value::Tensor(lse),
        Value::None,
        Value::None,
        Value::Int(query.shape()[2] as i64),
        Value::Int(key.shape()[2] as i64),
        scalar()?,
        scalar()?,
        Value::None,
    ])
}

/// A dense layout of `shape` in the dimension order of `like`, as PyTorch's
/// `alloc_with_matching_layout` makes it: the dims ordered by `like`'s strides, ascending (a
/// broadcast dim last; ties keep their order); with `like`'s shape, `empty_like`'s (a dense
/// `like`'s own strides).
fn matching_layout(like: &Layout, shape: &[usize]) -> Layout {
    let ordered = |strides_of: &[isize]| {
        let mut order: Vec<usize> = (0..shape.len()).collect();
        order.sort_by_key(|&d| match strides_of[d] {
            0 => usize::MAX,
            s => s.unsigned_abs(),
        });
        let mut strides = vec![0isize; shape.len()];
        let mut stride = 1usize;
        for d in order {
            strides[d] = stride as isize;
            stride *= shape[d];
        }
        strides
    };
    let mut strides = ordered(&like.strides);
    if like.shape == shape {
        // `empty_like`: a dense `like`'s own strides (those of size-1 dims included), else the
        // dense strides of its order (`infer_dense_strides`).
        let dense = (0..shape.len()).all(|d| shape[d] == 1 || strides[d] == like.strides[d]);
        if dense {
            strides = like.strides.clone();
        }
    }
    Layout {
        shape: shape.to_vec(),
        strides,
        offset: 0,
    }
}

/// The options of one attention call.
struct Attention<'a> {
    mask: Option<&'a Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
    /// Also return the rows' logsumexp.
    lse: bool,
    /// The flash kernel's output contiguous (not `[B, L, H, E]` memory seen transposed).
    dense_out: bool,
}

fn check(q: &Tensor, k: &Tensor, v: &Tensor, a: &Attention) -> Result<()> {
    if a.dropout_p != 0.0 {
        return Err(TpuError::Unsupported(format!(
            "scaled_dot_product_attention with dropout_p={} is not supported on TPU (dropout needs a random generator); pass dropout_p=0.0",
            a.dropout_p
        )));
    }
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "Expected query, key, and value to have the same dtype, but got query.dtype: {} key.dtype: {} and value.dtype: {} instead.",
            meta_name(q.dtype()),
            meta_name(k.dtype()),
            meta_name(v.dtype())
        )));
    }
    if !q.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "scaled_dot_product_attention: {} inputs are not supported on TPU",
            q.dtype().name()
        )));
    }
    if let Some(m) = a.mask {
        if a.is_causal {
            return Err(TpuError::BadArgs(
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True".into(),
            ));
        }
        if !(m.dtype() == DType::Bool || m.dtype().is_float()) {
            return Err(TpuError::DtypeMismatch(format!(
                "Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: {} and  query.dtype: {} instead.",
                meta_name(m.dtype()),
                meta_name(q.dtype())
            )));
        }
    }
    if q.dim() < 2 || k.dim() < 2 || v.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "scaled_dot_product_attention: expected query, key and value of at least 2 dims, but got {}D, {}D and {}D",
            q.dim(),
            k.dim(),
            v.dim()
        )));
    }
    let (e, ek) = (q.shape()[q.dim() - 1], k.shape()[k.dim() - 1]);
    let (sk, sv) = (k.shape()[k.dim() - 2], v.shape()[v.dim() - 2]);
    if e != ek || sk != sv {
        return Err(TpuError::ShapeMismatch(format!(
            "scaled_dot_product_attention: query {:?}, key {:?} and value {:?} do not fit: expected query [..., L, E], key [..., S, E], value [..., S, Ev]",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    Ok(())
}

/// `repeat_interleave(t, Hq / Hkv, dim=-3)`: key/value heads repeated for grouped-query
/// attention.
pub(super) fn repeat_heads(q: &Tensor, t: &Tensor) -> Result<Tensor> {
    if q.dim() < 3 || t.dim() < 3 {
        return Ok(t.clone());
    }
    let (hq, hk) = (q.shape()[q.dim() - 3], t.shape()[t.dim() - 3]);
    if hq == hk {
        return Ok(t.clone());
    }
    if hk == 0 || hq % hk != 0 {
        return Err(TpuError::ShapeMismatch(format!(
            "scaled_dot_product_attention: the number of heads in key/value ({hk}) must divide the number of heads in query ({hq})"
        )));
    }
    let nd = t.dim();
    let mut shape = t.shape().to_vec();
    shape.insert(nd - 2, hq / hk);
    let e = relayout(t, |l| l.unsqueeze((nd - 2) as i64)?.broadcast_to(&shape))?;
    let c = layout_ops::contiguous(&e)?;
    let mut out = t.shape().to_vec();
    out[nd - 3] = hq;
    Ok(reshaped(&c, &out))
}

/// Whether `q` and `k` have as many heads (dim -3), or no heads dim.
fn same_heads(q: &Tensor, k: &Tensor) -> bool {
    q.dim() < 3 || k.dim() < 3 || q.shape()[q.dim() - 3] == k.shape()[k.dim() - 3]
}

/// The attention of one call: the output (and the logsumexp when asked).
fn attention(
    op: &OpScope,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    a: &Attention,
) -> Result<(Tensor, Option<Tensor>)> {
    check(q, k, v, a)?;
    let e = q.shape()[q.dim() - 1];
    let scale = a.scale.unwrap_or(1.0 / (e as f64).sqrt());
    if a.mask.is_none()
        && (a.enable_gqa || same_heads(q, k))
        && let Some((n, qkv)) = super::flash::node(op, q, k, v, a.is_causal, scale)
    {
        let mut shape = q.shape().to_vec();
        let d = shape.len();
        shape[d - 1] = v.shape()[v.dim() - 1];
        let (o, lse) = super::flash::forward(op, n, &qkv, &shape, a.dense_out)?;
        return Ok((o, a.lse.then_some(lse)));
    }
    let (k, v) = if a.enable_gqa {
        (repeat_heads(q, k)?, repeat_heads(q, v)?)
    } else {
        (k.clone(), v.clone())
    };
    // bf16 stays bf16 on the matrix units; f32 uses the runtime precision; f16 goes via f32.
    let cd = if q.dtype() == DType::BF16 {
        DType::BF16
    } else {
        DType::F32
    };
    let (qc, kc, vc) = (q.to_dtype(cd)?, k.to_dtype(cd)?, v.to_dtype(cd)?);
    let kt = relayout(&kc, |l| l.transpose(-2, -1))?;
    // Scores, scaled in the epilogue, in f32.
    let (q3, k3, mut batch) = batch_operands(&qc, &kt)?;
    let s = product(op, &q3, &k3, DType::F32, &[], |p, x, _| {
        let c = p.constant(Scalar::Float(scale), DType::F32);
        p.bin(BinOp::Mul, x, c, DType::F32)
    })?;
    let (l, sl) = (q3.shape()[1], k3.shape()[2]);
    batch.extend([l, sl]);
    let s = reshaped(&s, &batch);
    let (probs, lse) = weights(op, &s, a.mask, a.is_causal, cd, a.lse)?;
    // Output.
    let (p3, v3, mut obatch) = batch_operands(&probs, &vc)?;
    let o = product(op, &p3, &v3, q.dtype(), &[], |_, x, _| x)?;
    obatch.extend([p3.shape()[1], v3.shape()[2]]);
    Ok((reshaped(&o, &obatch), lse))
}

/// Softmax of the scores along the last dim after masking, as `dtype`, with the rows'
/// logsumexp (f32) when `want_lse`: one rows kernel.
fn weights(
    op: &OpScope,
    s: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    dtype: DType,
    want_lse: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let n = s.dim();
    let f = DType::F32;
    if s.shape()[n - 1] == 0 {
        // No keys: the weights are empty; logsumexp of nothing is -inf.
        let probs = Tensor::empty(op.rt(), s.shape(), dtype)?;
        let lse = if want_lse {
            let shape = &s.shape()[..n - 1];
            Some(
                map_shape(op, shape, &[], &[f], |p, _| {
                    vec![p.constant(Scalar::Float(f64::NEG_INFINITY), f)]
                })?
                .remove(0),
            )
        } else {
            None
        };
        return Ok((probs, lse));
    }
    // The causal mask as a bool [L, S] tensor (the rows kernel reads no row coordinates).
    let causal_mask = if causal {
        let shape = [s.shape()[n - 2], s.shape()[n - 1]];
        Some(
            map_shape(op, &shape, &[], &[DType::Bool], |p, _| {
                let (i, j) = (p.index(0), p.index(1));
                vec![p.cmp(CmpKind::Le, j, i, DType::I32)]
            })?
            .remove(0),
        )
    } else {
        None
    };
    let mask = mask.or(causal_mask.as_ref());
    let mut inputs = vec![s];
    inputs.extend(mask);
    let mask_dtype = mask.map(|m| m.dtype());
    let mut outs = vec![(dtype, false)];
    if want_lse {
        outs.push((f, true));
    }
    let mut r = rows(
        op,
        s.shape(),
        &[n - 1],
        false,
        &inputs,
        &[false, false],
        &outs,
        |p, r| {
            let ninf = p.constant(Scalar::Float(f64::NEG_INFINITY), f);
            let mut x = p.cast(r[0], f);
            match mask_dtype {
                Some(DType::Bool) => x = p.select(r[1], x, ninf, f),
                Some(_) => {
                    let m = p.cast(r[1], f);
                    x = p.bin(BinOp::Add, x, m, f);
                }
                None => {}
            }
            // A fully masked row has max -inf: shift by 0 instead, so that its weights are 0.
            let m = p.reduce(RedKind::Max, x, f);
            let all_masked = p.cmp(CmpKind::Eq, m, ninf, f);
            let zero = p.constant(Scalar::Float(0.0), f);
            let shift = p.select(all_masked, zero, m, f);
            let d = p.bin(BinOp::Sub, x, shift, f);
            let ex = p.un(UnOp::Exp, d, f);
            let sum = p.reduce(RedKind::Sum, ex, f);
            let empty = p.cmp(CmpKind::Eq, sum, zero, f);
            let w = p.bin(BinOp::Div, ex, sum, f);
            let w = p.select(empty, zero, w, f);
            let mut outs = vec![w];
            if want_lse {
                let lg = p.un(UnOp::Log, sum, f);
                outs.push(p.bin(BinOp::Add, shift, lg, f));
            }
            outs
        },
    )?;
    let lse = if want_lse { r.pop() } else { None };
    Ok((r.remove(0), lse))
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).
