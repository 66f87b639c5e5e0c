//! Tensors made from another tensor's metadata, and aliases: `zeros_like`, `ones_like`,
//! `empty_like`, `full_like`, the `new_*` factories, `empty_strided`, `empty_permuted`,
//! `fill`, `zero`, `alias`/`detach`/`lift_fresh` (the same storage and view: autograd and
//! functionalization wrappers mean nothing to a backend), their `_copy` forms, and
//! `_local_scalar_dense` (`.item()`).
//!
//! `*_like` results are contiguous (PyTorch's `preserve_format` would keep a permuted input's
//! strides; values and shapes are the same); their dtype defaults to the input's.

use super::creation::{clone, empty, full};
use super::helpers::{OpScope, map_shape};
use super::sharding::{Lin, Sharding};
use super::{Value, aten};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::ops::helpers::shape_of;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// A tensor of `x`'s shape filled with `value` (`full_like`; `zeros_like`, `ones_like`).
#[aten(
    "aten::full_like",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = FullLike(self_, fill_value, dtype)
)]
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
#[aten(
    "aten::fill.Tensor",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = FillTensor(self_, value)
)]
pub fn fill_tensor(x: &Tensor, value: &Tensor) -> Result<Tensor> {
    if value.dim() != 0 {
        return Err(TpuError::BadArgs(format!(
            "fill_ only supports 0-dimension value tensor but got tensor with {} dimensions.",
            value.dim()
        )));
    }
    let op = OpScope::new(FillTensor::NAME, &[x, value])?;
    Ok(map_shape(&op, x.shape(), &[value], &[x.dtype()], |_, r| vec![r[0]])?.remove(0))
}

/// `x.item()` as an operator result.
#[aten(
    "aten::_local_scalar_dense",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate("reads a value back to the host"),
    kind = Decomposition,
    call = LocalScalarDense(self_)
)]
pub fn local_scalar_dense(x: &Tensor) -> Result<Value> {
    let _op = OpScope::new(LocalScalarDense::NAME, &[x])?;
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

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).
// The factories ignore `layout`, `device`, `pin_memory` and `memory_format`.

#[aten("aten::alias", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All), kind = View)]
fn alias_op(a: Alias<'_>) -> Result<Vec<Value>> {
    alias(Alias::NAME, a.self_)
}

#[aten("aten::detach", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All), kind = View)]
fn detach_op(a: Detach<'_>) -> Result<Vec<Value>> {
    alias(Detach::NAME, a.self_)
}

#[aten("aten::lift_fresh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All), kind = View)]
fn lift_fresh_op(a: LiftFresh<'_>) -> Result<Vec<Value>> {
    alias(LiftFresh::NAME, a.self_)
}

#[aten("aten::lift", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All), kind = View)]
fn lift_op(a: Lift<'_>) -> Result<Vec<Value>> {
    alias(Lift::NAME, a.self_)
}

#[aten("aten::alias_copy", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All))]
fn alias_copy_op(a: AliasCopy<'_>) -> Result<Tensor> {
    clone(a.self_)
}

#[aten("aten::detach_copy", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All))]
fn detach_copy_op(a: DetachCopy<'_>) -> Result<Tensor> {
    clone(a.self_)
}

#[aten("aten::lift_fresh_copy", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All))]
fn lift_fresh_copy_op(a: LiftFreshCopy<'_>) -> Result<Tensor> {
    clone(a.self_)
}

#[aten("aten::zeros_like", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn zeros_like_op(a: ZerosLike<'_>) -> Result<Tensor> {
    full_like(a.self_, Scalar::Int(0), a.dtype)
}

#[aten("aten::ones_like", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn ones_like_op(a: OnesLike<'_>) -> Result<Tensor> {
    full_like(a.self_, Scalar::Int(1), a.dtype)
}

#[aten("aten::empty_like", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), kind = View)]
fn empty_like_op(a: EmptyLike<'_>) -> Result<Tensor> {
    empty_like(a.self_, a.dtype)
}

#[aten("aten::new_zeros", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn new_zeros_op(rt: &Runtime, a: NewZeros<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(a.self_.dtype());
    full(rt, &shape_of(&a.size)?, Scalar::Int(0), d)
}

#[aten("aten::new_ones", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn new_ones_op(rt: &Runtime, a: NewOnes<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(a.self_.dtype());
    full(rt, &shape_of(&a.size)?, Scalar::Int(1), d)
}

#[aten("aten::new_full", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn new_full_op(rt: &Runtime, a: NewFull<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(a.self_.dtype());
    full(rt, &shape_of(&a.size)?, a.fill_value, d)
}

#[aten("aten::new_empty", dtypes = DType::ALL_TPU, shard = Sharding::Creation, kind = View)]
fn new_empty_op(rt: &Runtime, a: NewEmpty<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(a.self_.dtype());
    empty(rt, &shape_of(&a.size)?, d)
}

#[aten("aten::new_empty_strided", dtypes = DType::ALL_TPU, shard = Sharding::Creation, kind = View)]
fn new_empty_strided_op(rt: &Runtime, a: NewEmptyStrided<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(a.self_.dtype());
    empty_strided(rt, &a.size, &a.stride, d)
}

#[aten("aten::empty_strided", dtypes = DType::ALL_TPU, shard = Sharding::Creation, kind = View)]
fn empty_strided_op(rt: &Runtime, a: EmptyStrided<'_>) -> Result<Tensor> {
    empty_strided(rt, &a.size, &a.stride, a.dtype.unwrap_or(DType::F32))
}

#[aten("aten::empty_permuted", dtypes = DType::ALL_TPU, shard = Sharding::Creation, kind = View)]
fn empty_permuted_op(rt: &Runtime, a: EmptyPermuted<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(DType::F32);
    empty_permuted(rt, &a.size, &a.physical_layout, d)
}

#[aten("aten::fill.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn fill_scalar_op(a: FillScalar<'_>) -> Result<Tensor> {
    full_like(a.self_, a.value, None)
}

#[aten("aten::zero", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn zero_op(a: Zero<'_>) -> Result<Tensor> {
    full_like(a.self_, Scalar::Int(0), None)
}
