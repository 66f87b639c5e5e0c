//! Scaled dot-product attention on the flash-attention kernel
//! ([`crate::kernels::attention`]): one kernel forward, one backward, the `L x S` scores never
//! in HBM. Taken when the kernel can: no explicit mask (causal or none), no dropout, bf16 or
//! f32 operands of up to 4 dims whose rows are dense, and one head's keys and values fitting
//! VMEM; otherwise attention runs as its decomposition ([`super::attention`]).

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{AttentionNode, NodeKind};
use crate::kernels::attention::check_fits;
use crate::layout::{Layout, elementwise_layout};
use crate::ops::helpers::OpScope;
use crate::tensor::Tensor;

/// A 2- to 4-dim operand seen as `[B, H, rows, width]`, if its rows are dense.
fn as4(t: &Tensor) -> Option<Tensor> {
    let mut l = t.layout().clone();
    while l.shape.len() < 4 {
        l = l.unsqueeze(0).ok()?;
    }
    let inner = *l.strides.last()?;
    (l.shape.len() == 4 && (inner == 1 || l.shape[3] == 1)).then(|| t.with_layout(l))
}

/// The attention node for `q`, `k`, `v` when the flash kernel takes them.
pub(super) fn node(
    op: &OpScope,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
    scale: f64,
) -> Option<(AttentionNode, [Tensor; 3])> {
    let dt = q.dtype();
    if (dt != DType::BF16 && dt != DType::F32) || k.dtype() != dt || v.dtype() != dt {
        return None;
    }
    let (q4, k4, v4) = (as4(q)?, as4(k)?, as4(v)?);
    let (qs, ks, vs) = (q4.shape(), k4.shape(), v4.shape());
    if qs[0] != ks[0] || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] || qs[3] != ks[3] {
        return None;
    }
    if ks[1] == 0 || qs[1] % ks[1] != 0 || qs.iter().chain(ks).chain(vs).any(|d| *d == 0) {
        return None;
    }
    let n = AttentionNode {
        batch: qs[0],
        heads: qs[1],
        kv_heads: ks[1],
        l: qs[2],
        s: ks[2],
        e: qs[3],
        ev: vs[3],
        causal,
        scale,
        precision: op.rt().precision(),
        backward: false,
    };
    check_fits(&n, dt, op.rt().chip_info()).ok()?;
    Some((n, [q4, k4, v4]))
}

/// The forward kernel: the output `[.., L, Ev]` (shaped as `q`'s leading dims) and the rows'
/// `[B, H, L, Ev]` over `[B, L, H, Ev]` memory: the layout the forward kernel writes its
/// output in (PyTorch's CPU flash kernel's), where merging the heads back is a view.
pub(super) fn heads_split_layout([b, h, l, ev]: [usize; 4]) -> Layout {
    Layout {
        shape: vec![b, h, l, ev],
        strides: vec![(l * h * ev) as isize, ev as isize, (h * ev) as isize, 1],
        offset: 0,
    }
}

/// logsumexp `[B, H, L]` (f32). `dense`: the output contiguous as `[B, H, L, Ev]`.
pub(super) fn forward(
    op: &OpScope,
    n: AttentionNode,
    qkv: &[Tensor; 3],
    out_shape: &[usize],
    dense: bool,
) -> Result<(Tensor, Tensor)> {
    let rt = op.rt();
    // As PyTorch's CPU flash kernel: the output's memory is `[B, L, H, Ev]`, seen transposed
    // (so merging the heads back is a view); 2- and 3-dim calls, and `dense` ones, get a
    // contiguous output.
    let (b, h, l, ev) = (n.batch, n.heads, n.l, n.ev);
    let o = Tensor::empty(rt, &[b, h, l, ev], qkv[0].dtype())?;
    let o = if out_shape.len() == 4 && !dense {
        o.with_layout(heads_split_layout([b, h, l, ev]))
    } else {
        o
    };
    let lse = Tensor::empty(rt, &[b, h, l], DType::F32)?;
    op.submit(
        NodeKind::Attention(n),
        qkv.iter().map(|t| t.view()).collect(),
        vec![o.view(), lse.view()],
    )?;
    let o = if out_shape.len() == 4 {
        o
    } else {
        o.with_layout(Layout::contiguous(out_shape))
    };
    Ok((o, lse))
}

/// The backward kernel for `[q, k, v, out, grad_out, lse]`, if it takes them: `(dq, dk, dv)`
/// shaped as `q`, `k`, `v`.
pub(super) fn backward(
    op: &OpScope,
    t: [&Tensor; 6],
    causal: bool,
    scale: f64,
) -> Result<Option<(Tensor, Tensor, Tensor)>> {
    let [q, k, v, out, dout, lse] = t;
    let Some((mut n, qkv)) = node(op, q, k, v, causal, scale) else {
        return Ok(None);
    };
    n.backward = true;
    let dt = q.dtype();
    let o_shape = [n.batch, n.heads, n.l, n.ev];
    // The output gradient is often a broadcast (the gradient of a sum): its rows are copied
    // dense for the kernel, which costs far less than the decomposition.
    let dense;
    let dout = if as4(dout).is_none() && dout.dim() == 4 {
        dense = crate::ops::layout_ops::contiguous(dout)?;
        &dense
    } else {
        dout
    };
    let (Some(o4), Some(do4)) = (as4(out), as4(dout)) else {
        return Ok(None);
    };
    let lse_ok = lse.shape() == [n.batch, n.heads, n.l] && (n.l == 1 || lse.strides()[2] == 1);
    if o4.shape() != o_shape
        || do4.shape() != o_shape
        || out.dtype() != dt
        || dout.dtype() != dt
        || !lse_ok
        || check_fits(&n, dt, op.rt().chip_info()).is_err()
    {
        return Ok(None);
    }
    let rt = op.rt();
    // As `zeros_like` (PyTorch's CPU flash backward): each gradient laid out as its input.
    let like = |t: &Tensor| {
        Tensor::empty(rt, t.shape(), dt)
            .map(|e| e.with_layout(elementwise_layout(t.shape(), &[t.layout()])))
    };
    let (dq, dk, dv) = (like(&qkv[0])?, like(&qkv[1])?, like(&qkv[2])?);
    let inputs = [&qkv[0], &qkv[1], &qkv[2], &o4, &do4, lse]
        .iter()
        .map(|t| t.view())
        .collect();
    op.submit(
        NodeKind::Attention(n),
        inputs,
        vec![dq.view(), dk.view(), dv.view()],
    )?;
    // Back to the callers' dims (the leading ones `as4` added are size 1).
    let shaped = |t: Tensor, like: &Tensor| -> Result<Tensor> {
        let mut l = t.layout().clone();
        while l.shape.len() > like.dim() {
            l = l.squeeze(0)?;
        }
        Ok(t.with_layout(l))
    };
    Ok(Some((shaped(dq, q)?, shaped(dk, k)?, shaped(dv, v)?)))
}
