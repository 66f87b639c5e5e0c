//! `cat`, `stack` and `split`: joining tensors along a dim, and splitting one into views.

use super::super::aten;
use super::super::helpers::{OpScope, write_into};
use crate::dtype::{DType, promote_types};
use crate::error::{Result, TpuError};
use crate::layout::wrap_dim;
use crate::ops::sharding::{Sharding, Special};
use crate::tensor::Tensor;

/// PyTorch's legacy rule: a 1-D tensor with no elements takes no part in `cat`'s shape checks
/// (it still takes part in type promotion).
fn skipped(t: &Tensor) -> bool {
    t.dim() == 1 && t.numel() == 0
}

/// `torch.cat(tensors, dim)`: the inputs promoted to their common dtype, joined along `dim`.
#[aten("aten::cat", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Cat), call = Cat(&tensors, dim))]
pub fn cat(tensors: &[Tensor], dim: i64) -> Result<Tensor> {
    if tensors.is_empty() {
        return Err(TpuError::BadArgs(
            "torch.cat(): expected a non-empty list of Tensors".into(),
        ));
    }
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let op = OpScope::new(Cat::NAME, &refs)?;
    cat_in(&op, tensors, dim)
}

/// `cat` inside an operator call (`stack` uses it under its own name).
fn cat_in(op: &OpScope, tensors: &[Tensor], dim: i64) -> Result<Tensor> {
    let dtype = tensors
        .iter()
        .map(Tensor::dtype)
        .reduce(promote_types)
        .unwrap_or(DType::F32);
    if let Some(i) = tensors.iter().position(|t| t.dim() == 0) {
        return Err(TpuError::BadArgs(format!(
            "zero-dimensional tensor (at position {i}) cannot be concatenated"
        )));
    }
    let Some(first) = tensors.iter().position(|t| !skipped(t)) else {
        // Only empty 1-D tensors: the result is one too.
        return Tensor::empty(op.rt(), &[0], dtype);
    };
    let r = &tensors[first];
    let d = wrap_dim(dim, r.dim())?;
    let mut shape = r.shape().to_vec();
    shape[d] = 0;
    for (i, t) in tensors.iter().enumerate() {
        if skipped(t) {
            continue;
        }
        if t.dim() != r.dim() {
            return Err(TpuError::ShapeMismatch(format!(
                "Tensors must have same number of dimensions: got {} and {}",
                r.dim(),
                t.dim()
            )));
        }
        for k in (0..r.dim()).filter(|k| *k != d) {
            if t.shape()[k] != r.shape()[k] {
                return Err(TpuError::ShapeMismatch(format!(
                    "Sizes of tensors must match except in dimension {d}. Expected size {} but got size {} for tensor number {i} in the list.",
                    r.shape()[k],
                    t.shape()[k]
                )));
            }
        }
        shape[d] += t.shape()[d];
    }
    let out = Tensor::empty(op.rt(), &shape, dtype)?;
    let mut at = 0usize;
    for t in tensors.iter().filter(|t| !skipped(t)) {
        let n = t.shape()[d];
        if n > 0 {
            let dst = out.with_layout(out.layout().slice(
                d as i64,
                Some(at as i64),
                Some((at + n) as i64),
                1,
            )?);
            write_into(op, &dst, &[t], |_, r| r[0])?;
        }
        at += n;
    }
    Ok(out)
}

/// `torch.stack(tensors, dim)`: equal-shaped tensors joined along a new dim.
#[aten("aten::stack", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Stack), call = Stack(&tensors, dim))]
pub fn stack(tensors: &[Tensor], dim: i64) -> Result<Tensor> {
    let Some(first) = tensors.first() else {
        return Err(TpuError::BadArgs(
            "stack expects a non-empty TensorList".into(),
        ));
    };
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let op = OpScope::new(Stack::NAME, &refs)?;
    let d = wrap_dim(dim, first.dim() + 1)?;
    for (i, t) in tensors.iter().enumerate() {
        if t.shape() != first.shape() {
            return Err(TpuError::ShapeMismatch(format!(
                "stack expects each tensor to be equal size, but got {:?} at entry 0 and {:?} at entry {i}",
                first.shape(),
                t.shape()
            )));
        }
    }
    let unsqueezed = tensors
        .iter()
        .map(|t| Ok(t.with_layout(t.layout().unsqueeze(d as i64)?)))
        .collect::<Result<Vec<_>>>()?;
    cat_in(&op, &unsqueezed, d as i64)
}

/// `torch.split(x, split_size, dim)`: views of `split_size` along `dim` (the last one may be
/// shorter).
pub fn split(x: &Tensor, split_size: i64, dim: i64) -> Result<Vec<Tensor>> {
    let _op = OpScope::view(SplitTensor::NAME, &[x])?;
    if x.dim() == 0 {
        return Err(TpuError::BadArgs(
            "split expects at least a 1-dimensional tensor".into(),
        ));
    }
    let d = wrap_dim(dim, x.dim())?;
    let n = x.shape()[d] as i64;
    if split_size < 0 {
        return Err(TpuError::BadArgs(format!(
            "split expects split_size be non-negative, but got split_size={split_size}"
        )));
    }
    if split_size == 0 && n != 0 {
        return Err(TpuError::BadArgs(format!(
            "split_size can only be 0 if dimension size is 0, but got dimension size of {n}"
        )));
    }
    let count = if split_size == 0 {
        1
    } else {
        ((n + split_size - 1) / split_size).max(1)
    };
    let last = split_size - (split_size * count - n);
    (0..count)
        .map(|i| {
            let len = if i + 1 < count { split_size } else { last };
            let start = i * split_size;
            Ok(x.with_layout(
                x.layout()
                    .slice(d as i64, Some(start), Some(start + len), 1)?,
            ))
        })
        .collect()
}

impl Tensor {
    /// `self.split(split_size, dim)` (views).
    pub fn split(&self, split_size: i64, dim: i64) -> Result<Vec<Tensor>> {
        split(self, split_size, dim)
    }
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::split.Tensor", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Split), kind = View)]
fn split_tensor_op(a: SplitTensor<'_>) -> Result<Vec<Tensor>> {
    split(a.self_, a.split_size, a.dim)
}
