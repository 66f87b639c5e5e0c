//! Tensors made from another tensor's metadata, and aliases: `zeros_like`, `ones_like`,
//! `empty_like`, `full_like`, the `new_*` factories, `empty_strided`, `empty_permuted`,
//! `fill`, `zero`, `alias`/`detach`/`lift_fresh` (the same storage and view: autograd and
//! functionalization wrappers mean nothing to a backend), their `_copy` forms, and
//! `_local_scalar_dense` (`.item()`).
//!
//! `*_like` results are contiguous (PyTorch's `preserve_format` would keep a permuted input's
//! strides; values and shapes are the same); their dtype defaults to the input's.

use super::Value;
use super::args::Args;
use super::creation::{empty, full};
use super::helpers::{OpScope, map_shape};
use super::pointwise::{ALL, t1};
use super::registry::{OpDef, OpImpl};
use super::sharding::{Lin, Sharding};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

fn shape_of(size: &[i64]) -> Result<Vec<usize>> {
    size.iter()
        .map(|d| {
            usize::try_from(*d).map_err(|_| {
                TpuError::BadArgs(format!(
                    "Trying to create tensor with negative dimension {d}: {size:?}"
                ))
            })
        })
        .collect()
}

/// A tensor of `x`'s shape filled with `value` (`full_like`; `zeros_like`, `ones_like`).
pub fn full_like(x: &Tensor, value: Scalar, dtype: Option<DType>) -> Result<Tensor> {
    full(x.runtime(), x.shape(), value, dtype.unwrap_or(x.dtype()))
}

/// `torch.empty_like`.
pub fn empty_like(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    empty(x.runtime(), x.shape(), dtype.unwrap_or(x.dtype()))
}

/// `torch.empty_strided(size, stride)`: storage for every element the strides reach.
pub fn empty_strided(rt: &Runtime, size: &[i64], stride: &[i64], dtype: DType) -> Result<Tensor> {
    let shape = shape_of(size)?;
    if stride.len() != shape.len() {
        return Err(TpuError::BadArgs(format!(
            "mismatch in length of strides and shape: {} vs {}",
            stride.len(),
            shape.len()
        )));
    }
    let strides: Vec<isize> = stride
        .iter()
        .map(|&s| {
            isize::try_from(s)
                .ok()
                .filter(|s| *s >= 0)
                .ok_or_else(|| TpuError::BadArgs(format!("negative stride {s}")))
        })
        .collect::<Result<_>>()?;
    let layout = Layout {
        shape: shape.clone(),
        strides,
        offset: 0,
    };
    let span = if layout.numel() == 0 {
        0
    } else {
        layout.storage_span().1
    };
    let base = empty(rt, &[span], dtype)?;
    Ok(base.with_layout(layout))
}

/// `torch.empty_permuted(size, physical_layout)`: dims laid out in memory in the order
/// `physical_layout` gives (outermost first).
pub fn empty_permuted(
    rt: &Runtime,
    size: &[i64],
    physical: &[i64],
    dtype: DType,
) -> Result<Tensor> {
    let shape = shape_of(size)?;
    let n = shape.len();
    let mut seen = vec![false; n];
    for &p in physical {
        match usize::try_from(p).ok().filter(|p| *p < n) {
            Some(p) if !seen[p] => seen[p] = true,
            _ => {
                return Err(TpuError::BadArgs(format!(
                    "physical_layout {physical:?} is not a permutation of the {n} dims"
                )));
            }
        }
    }
    if physical.len() != n {
        return Err(TpuError::BadArgs(format!(
            "Number of dimensions in size does not match the length of the physical_layout; i.e. len(size) = {n} is not equal to len(physical_layout) = {}",
            physical.len()
        )));
    }
    let phys_shape: Vec<usize> = physical.iter().map(|&p| shape[p as usize]).collect();
    let t = empty(rt, &phys_shape, dtype)?;
    let mut inv = vec![0i64; n];
    for (i, &p) in physical.iter().enumerate() {
        inv[p as usize] = i as i64;
    }
    let l = t.layout().permute(&inv)?;
    Ok(t.with_layout(l))
}

/// `torch.fill(x, value)` with a zero-dimensional tensor value (converted to `x`'s dtype).
pub fn fill_tensor(x: &Tensor, value: &Tensor) -> Result<Tensor> {
    if value.dim() != 0 {
        return Err(TpuError::BadArgs(format!(
            "fill_ only supports 0-dimension value tensor but got tensor with {} dimensions.",
            value.dim()
        )));
    }
    let op = OpScope::new("aten::fill.Tensor", &[x, value])?;
    Ok(map_shape(&op, x.shape(), &[value], &[x.dtype()], |_, r| vec![r[0]])?.remove(0))
}

/// `x.item()` as an operator result.
pub fn local_scalar_dense(x: &Tensor) -> Result<Value> {
    let _op = OpScope::new("aten::_local_scalar_dense", &[x])?;
    Ok(match x.item()? {
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Int(i),
        Scalar::Float(f) => Value::Float(f),
    })
}

/// The same storage and view (`alias`, `detach`, `lift_fresh`).
fn alias(name: &str, x: &Tensor) -> Result<Vec<Value>> {
    let _op = OpScope::view(name, &[x])?;
    Ok(vec![Value::Tensor(x.clone())])
}

fn like_dtype(a: &Args, i: usize) -> Result<Option<DType>> {
    a.opt_dtype(i)
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let k = OpImpl::Kernel;
    let v = OpImpl::View;
    let pw = Sharding::pointwise(Lin::No);
    let same = Sharding::pointwise(Lin::All);
    vec![
        OpDef::new("aten::alias", v, ALL, |_, a| {
            alias("aten::alias", a.tensor(0)?)
        })
        .shard(same),
        OpDef::new("aten::detach", v, ALL, |_, a| {
            alias("aten::detach", a.tensor(0)?)
        })
        .shard(same),
        OpDef::new("aten::lift_fresh", v, ALL, |_, a| {
            alias("aten::lift_fresh", a.tensor(0)?)
        })
        .shard(same),
        OpDef::new("aten::lift", v, ALL, |_, a| {
            alias("aten::lift", a.tensor(0)?)
        })
        .shard(same),
        OpDef::new("aten::alias_copy", k, ALL, |_, a| {
            t1(super::creation::clone(a.tensor(0)?))
        })
        .shard(same),
        OpDef::new("aten::detach_copy", k, ALL, |_, a| {
            t1(super::creation::clone(a.tensor(0)?))
        })
        .shard(same),
        OpDef::new("aten::lift_fresh_copy", k, ALL, |_, a| {
            t1(super::creation::clone(a.tensor(0)?))
        })
        .shard(same),
        OpDef::new("aten::zeros_like", k, ALL, |_, a| {
            t1(full_like(a.tensor(0)?, Scalar::Int(0), like_dtype(a, 1)?))
        })
        .shard(pw),
        OpDef::new("aten::ones_like", k, ALL, |_, a| {
            t1(full_like(a.tensor(0)?, Scalar::Int(1), like_dtype(a, 1)?))
        })
        .shard(pw),
        OpDef::new("aten::full_like", k, ALL, |_, a| {
            t1(full_like(a.tensor(0)?, a.scalar(1)?, like_dtype(a, 2)?))
        })
        .shard(pw),
        OpDef::new("aten::empty_like", v, ALL, |_, a| {
            Ok(vec![Value::Tensor(empty_like(
                a.tensor(0)?,
                like_dtype(a, 1)?,
            )?)])
        })
        .shard(pw),
        OpDef::new("aten::new_zeros", k, ALL, |rt, a| {
            let x = a.tensor(0)?;
            let d = like_dtype(a, 2)?.unwrap_or(x.dtype());
            t1(full(rt, &shape_of(&a.ints(1)?)?, Scalar::Int(0), d))
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::new_ones", k, ALL, |rt, a| {
            let x = a.tensor(0)?;
            let d = like_dtype(a, 2)?.unwrap_or(x.dtype());
            t1(full(rt, &shape_of(&a.ints(1)?)?, Scalar::Int(1), d))
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::new_full", k, ALL, |rt, a| {
            let x = a.tensor(0)?;
            let d = like_dtype(a, 3)?.unwrap_or(x.dtype());
            t1(full(rt, &shape_of(&a.ints(1)?)?, a.scalar(2)?, d))
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::new_empty", v, ALL, |rt, a| {
            let x = a.tensor(0)?;
            let d = like_dtype(a, 2)?.unwrap_or(x.dtype());
            Ok(vec![Value::Tensor(empty(rt, &shape_of(&a.ints(1)?)?, d)?)])
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::new_empty_strided", v, ALL, |rt, a| {
            let x = a.tensor(0)?;
            let d = like_dtype(a, 3)?.unwrap_or(x.dtype());
            t1(empty_strided(rt, &a.ints(1)?, &a.ints(2)?, d))
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::empty_strided", v, ALL, |rt, a| {
            let d = like_dtype(a, 2)?.unwrap_or(DType::F32);
            t1(empty_strided(rt, &a.ints(0)?, &a.ints(1)?, d))
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::empty_permuted", v, ALL, |rt, a| {
            let d = like_dtype(a, 2)?.unwrap_or(DType::F32);
            t1(empty_permuted(rt, &a.ints(0)?, &a.ints(1)?, d))
        })
        .shard(Sharding::Creation),
        OpDef::new("aten::fill.Scalar", k, ALL, |_, a| {
            let x = a.tensor(0)?;
            t1(full_like(x, a.scalar(1)?, None))
        })
        .shard(pw),
        OpDef::new("aten::fill.Tensor", k, ALL, |_, a| {
            t1(fill_tensor(a.tensor(0)?, a.tensor(1)?))
        })
        .shard(pw),
        OpDef::new("aten::zero", k, ALL, |_, a| {
            t1(full_like(a.tensor(0)?, Scalar::Int(0), None))
        })
        .shard(pw),
        OpDef::new(
            "aten::_local_scalar_dense",
            OpImpl::Decomposition,
            ALL,
            |_, a| Ok(vec![local_scalar_dense(a.tensor(0)?)?]),
        )
        .shard(Sharding::Replicate("reads a value back to the host")),
    ]
}
