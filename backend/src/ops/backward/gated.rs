//! Backward operators of the gated and parametric activations: `glu_backward` and
//! `_prelu_kernel_backward`, each computed in f32 and rounded once to the input's dtype, as
//! PyTorch's CPU kernels compute bfloat16 and float16.

use super::super::aten;
use super::super::compose::{op, tv};
use super::super::helpers::{OpScope, map, write_into};
use super::{F, k, mul, sub};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::{CmpKind, UnOp};
use crate::layout::wrap_dim;
use crate::ops::Value;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `glu_backward(grad_output, self, dim)`: with `self = [a, b]` halved along `dim` and
/// `s = sigmoid(b)` rounded to the dtype, the gradient `[g s, g a s (1 - s)]`.
#[aten(
    "aten::glu_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::First),
    call = GluBackward(grad_output, self_, dim)
)]
pub fn glu_backward(grad: &Tensor, x: &Tensor, dim: i64) -> Result<Tensor> {
    let name = GluBackward::NAME;
    let op_scope = OpScope::new(name, &[grad, x])?;
    if x.dim() == 0 {
        return Err(TpuError::Verbatim(
            "glu does not support scalars because halving size must be even".into(),
        ));
    }
    let d = wrap_dim(dim, x.dim())?;
    let n = x.shape()[d];
    if !n.is_multiple_of(2) {
        return Err(TpuError::Verbatim(format!(
            "Halving dimension must be even, but dimension {d} is size {n}"
        )));
    }
    let h = n / 2;
    let mut half = x.shape().to_vec();
    half[d] = h;
    if grad.shape() != half.as_slice() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_output has shape {:?}, expected {half:?} (the input {:?} halved along dimension {d})",
            grad.shape(),
            x.shape()
        )));
    }
    let rt = x.runtime();
    let narrow = |t: &Tensor, start: usize| {
        op(
            rt,
            "aten::narrow",
            vec![
                tv(t),
                Value::Int(d as i64),
                Value::Int(start as i64),
                Value::Int(h as i64),
            ],
        )
    };
    let (a, b) = (narrow(x, 0)?, narrow(x, h)?);
    let out = Tensor::empty(rt, x.shape(), x.dtype())?;
    let dt = x.dtype();
    for (part, start) in [(0usize, 0usize), (1, h)] {
        let dst = narrow(&out, start)?;
        write_into(&op_scope, &dst, &[grad, &a, &b], move |p, r| {
            let (g, a, b) = (p.cast(r[0], F), p.cast(r[1], F), p.cast(r[2], F));
            // PyTorch writes sigmoid(b) into the result's first half (rounded to its dtype)
            // and computes both halves from that rounded value.
            let s = p.un(UnOp::Sigmoid, b, F);
            let s = p.round(s, dt);
            let gs = mul(p, g, s);
            let v = if part == 0 {
                gs
            } else {
                let one = k(p, 1.0);
                let oms = sub(p, one, s);
                let t = mul(p, gs, a);
                mul(p, t, oms)
            };
            p.cast(v, dt)
        })?;
    }
    Ok(out)
}

/// `_prelu_kernel_backward(grad_output, self, weight)`: `(x > 0 ? g : w g, x > 0 ? 0 : x g)`,
/// both of the broadcast shape (autograd sums the weight's gradient to its shape).
#[aten(
    "aten::_prelu_kernel_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No)
)]
fn prelu_kernel_backward_op(a: PreluKernelBackward<'_>) -> Result<Vec<Value>> {
    let (g, x, w) = (a.grad_output, a.self_, a.weight);
    let op_scope = OpScope::new(PreluKernelBackward::NAME, &[g, x, w])?;
    let dt = x.dtype();
    let outs = map(&op_scope, &[x, w, g], &[dt, w.dtype()], |p, r| {
        let (x, w, g) = (p.cast(r[0], F), p.cast(r[1], F), p.cast(r[2], F));
        let zero = k(p, 0.0);
        let pos = p.cmp(CmpKind::Gt, x, zero, F);
        let wg = mul(p, w, g);
        let gi = p.select(pos, g, wg, F);
        let xg = mul(p, x, g);
        let gw = p.select(pos, zero, xg, F);
        vec![p.cast(gi, dt), p.cast(gw, dt)]
    })?;
    Ok(outs.into_iter().map(Value::Tensor).collect())
}
