//! Operators PyTorch writes as compositions of others, composed here from registered operators
//! (each is `OpImpl::Decomposition` in `tpuemu ops` unless it is one elementwise kernel):
//!
//! - `products`: `addr`, `addmv`, `addbmm`, `_trilinear`, `linalg_cross`, and the vector-unit
//!   contraction [`contract`] they share with the integer matrix products (the matrix units
//!   have no integer path; PyTorch's CPU kernels accumulate integers exactly, and so does a
//!   multiply followed by an integer sum);
//! - `loss_grads`: the backward kernels of `smooth_l1_loss`, `huber_loss` and
//!   `binary_cross_entropy`;
//! - `losses`: `mse_loss` (and its backward), `huber_loss`, `smooth_l1_loss`,
//!   `soft_margin_loss`, `binary_cross_entropy`, `binary_cross_entropy_with_logits`: one
//!   elementwise kernel computing the loss in f32 and rounding once, then PyTorch's reduction
//!   (`0` none, `1` mean, `2` sum);
//! - `compare`: `equal` and `allclose` (a host-side answer: they read one bool back, so they
//!   synchronise and break a compiled graph, as in PyTorch), `dist`, `renorm`, `glu`,
//!   `_prelu_kernel`;
//! - `distances`: `_euclidean_dist`, `_cdist_forward`, `_pdist_forward`, `multi_margin_loss`;
//! - `multilabel`: `multilabel_margin_loss_forward` and its backward;
//! - `segment`: `segment_reduce` and its backward;
//! - `embedding_bag`: `_embedding_bag` and `_embedding_bag_forward_only`; `embedding_bag_grad`:
//!   their backwards.

pub(crate) mod compare;
pub(crate) mod distances;
pub(crate) mod embedding_bag;
pub(crate) mod embedding_bag_grad;
pub(crate) mod fractional_pool;
pub(crate) mod loss_grads;
pub(crate) mod losses;
pub(crate) mod multilabel;
pub(crate) mod products;
pub(crate) mod segment;

use super::{Value, call};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

pub(crate) use products::{axpby, contract};

/// A tensor argument.
pub(crate) fn tv(t: &Tensor) -> Value {
    Value::Tensor(t.clone())
}

/// A number argument.
pub(crate) fn sv(s: Scalar) -> Value {
    match s {
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Int(i),
        Scalar::Float(f) => Value::Float(f),
    }
}

/// Runs a registered operator and returns its first output, a tensor.
pub(crate) fn op(rt: &Runtime, name: &str, args: Vec<Value>) -> Result<Tensor> {
    match call(rt, name, args)?.into_iter().next() {
        Some(Value::Tensor(t)) => Ok(t),
        other => Err(TpuError::BadArgs(format!(
            "{name}: expected a tensor result, got {}",
            other.map_or("nothing", |v| v.kind())
        ))),
    }
}

/// `t` converted to `d` (itself when it already is).
pub(crate) fn cast(t: &Tensor, d: DType) -> Result<Tensor> {
    if t.dtype() == d {
        Ok(t.clone())
    } else {
        t.to_dtype(d)
    }
}
