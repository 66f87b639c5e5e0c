//! Factories and copies: `zeros`, `ones`, `full`, `empty`, `arange`, `scalar_tensor`, `clone`,
//! `_to_copy`, `copy_`, `fill_`.

use super::aten;
use super::checks::{Pending, check_float_ranges};
use super::helpers::{OpScope, map_contiguous, map_into_layout, map_shape, write_into};
use super::value::MemoryFormat;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::BinOp;
use crate::ir::Shapes;
use crate::layout::Layout;
use crate::ops::helpers::shape_of;
use crate::ops::sharding::{Lin, Sharding};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// A tensor of `shape` filled with `value` (`torch.full`).
pub fn full(rt: &Runtime, shape: &[usize], value: Scalar, dtype: DType) -> Result<Tensor> {
    let op = OpScope::on(rt, Full::NAME, Shapes::sizes(shape));
    Ok(map_shape(&op, shape, &[], &[dtype], |p, _| {
        vec![p.constant(value, dtype)]
    })?
    .remove(0))
}

/// `torch.zeros`.
pub fn zeros(rt: &Runtime, shape: &[usize], dtype: DType) -> Result<Tensor> {
    full(rt, shape, Scalar::Int(0), dtype)
}

/// `torch.ones`.
pub fn ones(rt: &Runtime, shape: &[usize], dtype: DType) -> Result<Tensor> {
    full(rt, shape, Scalar::Int(1), dtype)
}

/// A zero-dimensional tensor holding `value`, computed on the device.
pub fn scalar_tensor(rt: &Runtime, value: Scalar, dtype: DType) -> Result<Tensor> {
    full(rt, &[], value, dtype)
}

/// `torch.arange(start, end, step)`: int64 when every argument is an integer, else float32
/// (unless `dtype` says otherwise).
#[aten(
    "aten::arange.start_step",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Creation,
    call = ArangeStartStep(rt, start, end, step, dtype)
)]
pub fn arange(
    rt: &Runtime,
    start: Scalar,
    end: Scalar,
    step: Scalar,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let all_int = [start, end, step]
        .iter()
        .all(|s| matches!(s, Scalar::Int(_) | Scalar::Bool(_)));
    let dtype = dtype.unwrap_or(if all_int { DType::I64 } else { DType::F32 });
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    if !(s.is_finite() && e.is_finite() && st.is_finite()) {
        return Err(TpuError::BadArgs(format!(
            "arange: start {s}, end {e} and step {st} must be finite"
        )));
    }
    if st == 0.0 {
        return Err(TpuError::BadArgs("step must be nonzero".into()));
    }
    if (st > 0.0 && e < s) || (st < 0.0 && e > s) {
        return Err(TpuError::BadArgs(
            "upper bound and larger bound inconsistent with step sign".into(),
        ));
    }
    let n = ((e - s) / st).ceil().max(0.0);
    // The device counts elements in 32-bit lanes.
    if n > i32::MAX as f64 {
        return Err(TpuError::BadArgs(format!(
            "arange: from {s} to {e} by {st} is {n} elements; at most {}",
            i32::MAX
        )));
    }
    let n = n as usize;
    let op = OpScope::on(
        rt,
        ArangeStartStep::NAME,
        Shapes::text(format!("[{s}, {e}, {st}]")),
    );
    Ok(map_shape(&op, &[n], &[], &[dtype], |p, _| {
        let i = p.index(0);
        if dtype.is_float() {
            let fi = p.cast(i, DType::F32);
            let k = p.constant(step, DType::F32);
            let a = p.constant(start, DType::F32);
            let m = p.bin(BinOp::Mul, fi, k, DType::F32);
            vec![p.bin(BinOp::Add, m, a, DType::F32)]
        } else {
            let k = p.constant(Scalar::Int(step.to_i64()), DType::I32);
            let a = p.constant(Scalar::Int(start.to_i64()), DType::I32);
            let m = p.bin(BinOp::Mul, i, k, DType::I32);
            vec![p.bin(BinOp::Add, m, a, DType::I32)]
        }
    })?
    .remove(0))
}

/// `x.clone()`: a contiguous copy.
pub fn clone(x: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(AtenClone::NAME, &[x])?;
    Ok(map_contiguous(&op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0))
}

/// `x.to(dtype)`: a contiguous copy converted to `dtype`.
pub fn to_copy(x: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    to_copy_as(x, dtype, Some(MemoryFormat::Contiguous))
}

/// `aten::_to_copy(x, dtype, memory_format)`: a copy converted to `dtype`, laid out as
/// PyTorch lays it out: `preserve_format` (the default) keeps the strides of an input that is
/// non-overlapping and dense (a transposed view's copy is transposed too: a compiled graph's
/// later `view` counts on it, as PyTorch's meta function says), otherwise contiguous.
#[aten(
    "aten::_to_copy",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::All),
    call = ToCopy(self_, dtype, memory_format)
)]
pub fn to_copy_as(
    x: &Tensor,
    dtype: Option<DType>,
    format: Option<MemoryFormat>,
) -> Result<Tensor> {
    let op = OpScope::new(ToCopy::NAME, &[x])?;
    let d = dtype.unwrap_or(x.dtype());
    let check = wide_cast_check(&op, x, d)?;
    let keep = matches!(format, None | Some(MemoryFormat::Preserve))
        && x.layout().is_non_overlapping_and_dense()
        && !x.layout().is_contiguous();
    let r = if keep {
        let layout = Layout {
            shape: x.shape().to_vec(),
            strides: x.strides().to_vec(),
            offset: 0,
        };
        map_into_layout(&op, layout, &[x], &[d], |_, r| vec![r[0]])?
    } else {
        map_contiguous(&op, &[x], &[d], |_, r| vec![r[0]])?
    }
    .remove(0);
    check.guards(op.rt(), &[&r]);
    Ok(r)
}

/// A float cast to int64 is exact on the CPU for finite values of magnitude below 2^63 (the
/// others — NaN, infinities, beyond 2^63 — have no defined result: the device saturates them
/// at int32's bounds, as it always did). The device holds int64 in 32-bit lanes, so a defined
/// value outside int32's range is refused, checked on the device, never saturated (see
/// `ops::checks`).
fn wide_cast_check(op: &OpScope, x: &Tensor, to: DType) -> Result<Pending> {
    if to != DType::I64 || !x.dtype().is_float() {
        return Ok(Pending::none());
    }
    let (i31, i63) = (2f64.powi(31), 2f64.powi(63));
    // Defined on the CPU but not int32: [2^31, 2^63) and [-2^63, -2^31).
    let refused = [(i31, i63), (-i63, -i31)];
    check_float_ranges(op, x, &refused, || {
        TpuError::BadArgs(
            "a float value outside int32's range cast to int64: the tpu computes int64 in \
             32-bit lanes and would saturate it; cast on the CPU instead (x.cpu().long())"
                .into(),
        )
    })
}

/// `dst.copy_(src)`: converts and broadcasts `src` into `dst`'s storage.
#[aten(
    "aten::copy_",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Pointwise { lin: Lin::All, inplace: true, },
    call = CopyInplace(self_, src)
)]
pub fn copy_(dst: &Tensor, src: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(CopyInplace::NAME, &[dst, src])?;
    crate::layout::broadcast_shapes(dst.shape(), src.shape())
        .ok()
        .filter(|s| s == dst.shape())
        .ok_or_else(|| {
            TpuError::ShapeMismatch(format!(
                "output with shape {:?} doesn't match the broadcast shape of {:?}",
                dst.shape(),
                src.shape()
            ))
        })?;
    let check = wide_cast_check(&op, src, dst.dtype())?;
    write_into(&op, dst, &[src], |_, r| r[0])?;
    check.guards(op.rt(), &[dst]);
    Ok(dst.clone())
}

/// `x.fill_(value)`.
#[aten(
    "aten::fill_.Scalar",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Pointwise { lin: Lin::No, inplace: true, },
    call = FillInplaceScalar(self_, value)
)]
pub fn fill_(x: &Tensor, value: Scalar) -> Result<Tensor> {
    let op = OpScope::new(FillInplaceScalar::NAME, &[x])?;
    let d = x.dtype();
    write_into(&op, x, &[], |p, _| p.constant(value, d))?;
    Ok(x.clone())
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).
// The factories ignore `layout`, `device` and `pin_memory`.

#[aten("aten::zeros", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn zeros_op(rt: &Runtime, a: Zeros<'_>) -> Result<Tensor> {
    zeros(rt, &shape_of(&a.size)?, a.dtype.unwrap_or(DType::F32))
}

/// What autograd makes for a gradient known to be zero (`sgn`'s of a real input): PyTorch's
/// CPU and CUDA give a `ZeroTensor` that holds no storage; here it is a tensor of zeros (the
/// same values; `_is_zerotensor()` is false).
#[aten("aten::_efficientzerotensor", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn efficientzerotensor_op(rt: &Runtime, a: Efficientzerotensor<'_>) -> Result<Tensor> {
    zeros(rt, &shape_of(&a.size)?, a.dtype.unwrap_or(DType::F32))
}

#[aten("aten::ones", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn ones_op(rt: &Runtime, a: Ones<'_>) -> Result<Tensor> {
    ones(rt, &shape_of(&a.size)?, a.dtype.unwrap_or(DType::F32))
}

/// The dtype defaults to the fill value's.
#[aten("aten::full", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn full_op(rt: &Runtime, a: Full<'_>) -> Result<Tensor> {
    let v = a.fill_value;
    full(rt, &shape_of(&a.size)?, v, a.dtype.unwrap_or(v.dtype()))
}

#[aten("aten::empty.memory_format", dtypes = DType::ALL_TPU, shard = Sharding::Creation, kind = View)]
fn empty_memory_format_op(rt: &Runtime, a: EmptyMemoryFormat<'_>) -> Result<Tensor> {
    empty(rt, &shape_of(&a.size)?, a.dtype.unwrap_or(DType::F32))
}

#[aten("aten::scalar_tensor", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn scalar_tensor_op(rt: &Runtime, a: ScalarTensor<'_>) -> Result<Tensor> {
    scalar_tensor(rt, a.s, a.dtype.unwrap_or(DType::F32))
}

#[aten("aten::arange", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn arange_op(rt: &Runtime, a: Arange<'_>) -> Result<Tensor> {
    arange(rt, Scalar::Int(0), a.end, Scalar::Int(1), a.dtype)
}

#[aten("aten::clone", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All))]
fn clone_op(a: AtenClone<'_>) -> Result<Tensor> {
    clone(a.self_)
}

/// `torch.empty`: storage whose contents are unspecified (no kernel runs).
pub fn empty(rt: &Runtime, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let _op = OpScope::on(rt, EmptyMemoryFormat::NAME, Shapes::sizes(shape));
    Tensor::empty(rt, shape, dtype)
}
