//! Binary and ternary elementwise operators with PyTorch's broadcasting and type promotion,
//! by concept: [`arith`] (`add`, `sub`, `mul`, `pow`, `remainder`), [`compare`] (comparisons,
//! `maximum`/`minimum`, the logical operators), [`select`] (`where`, `clamp`); the kernel they
//! share (a promoted binary program over a tensor and a tensor or a number) is here.

pub(crate) mod arith;
pub(crate) mod compare;
pub(crate) mod select;

use super::args::TensorOrNumber as Arg;
use super::aten;
use super::checks::Pending;
use super::helpers::{OpScope, compute, map};
use super::pointwise::division::int_divisor_check;
use super::wide::exact_int64;
use crate::dtype::{DType, Scalar, result_type};
use crate::error::{Result, TpuError};
use crate::ir::{CmpKind, PRef, ProgBuilder};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

pub use arith::{add, mul, pow, remainder, sub};
pub use compare::{compare, logical, logical_not, max_min};
pub use select::{clamp, where_};

pub(crate) use super::args::operand;

/// A binary operand: a tensor or a Python number.
pub type Rhs<'a> = crate::ops::TensorOrNumber<'a>;

/// How a Python number takes part in a binary operator whose common dtype is bf16/f16.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NumberAs {
    /// Unrounded, in f32 (ATen's `original_scalar_value` in `mul`), also for a tensor that
    /// is one value broadcast over the iteration.
    Opmath,
    /// Rounded to the common dtype first, as the operand conversion does (comparisons,
    /// `remainder`, `pow`).
    Common,
}

/// What a binary operator checks on the device about its values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Nothing.
    None,
    /// `b` divides: an integer division by zero is PyTorch's `ZeroDivisionError`.
    Divisor,
    /// An int64 result may leave int32: refused, never wrapped (`ops::wide`), the operator
    /// computed again in f32 to tell.
    Outgrows,
}

/// Runs `f(a, b)` elementwise in the promoted dtype (`out` overrides the result dtype, for
/// comparisons and true division).
fn binary(
    name: &str,
    a: &Tensor,
    b: Rhs,
    out: impl FnOnce(DType) -> DType,
    f: impl Fn(&mut ProgBuilder, PRef, PRef, DType) -> PRef,
) -> Result<Tensor> {
    binary_with(name, a, b, NumberAs::Opmath, out, f)
}

/// [`binary`] with the number's rounding chosen.
fn binary_with(
    name: &str,
    a: &Tensor,
    b: Rhs,
    number: NumberAs,
    out: impl FnOnce(DType) -> DType,
    f: impl Fn(&mut ProgBuilder, PRef, PRef, DType) -> PRef,
) -> Result<Tensor> {
    binary_checked(name, a, b, number, out, f, Guard::None)
}

/// [`binary_with`], with what `guard` checks on the device.
fn binary_checked(
    name: &str,
    a: &Tensor,
    b: Rhs,
    number: NumberAs,
    out: impl FnOnce(DType) -> DType,
    f: impl Fn(&mut ProgBuilder, PRef, PRef, DType) -> PRef,
    guard: Guard,
) -> Result<Tensor> {
    let common = result_type(&[operand(a), b.promotion()]);
    let out_dtype = out(common);
    let check = |op: &OpScope, arg| {
        if guard == Guard::Divisor && !common.is_float() {
            int_divisor_check(op, arg)
        } else {
            Ok(Pending::none())
        }
    };
    // The operator again in f32, for an int64 result that may outgrow int32.
    let outgrows = |op: &OpScope, y: Arg, r: &Tensor| {
        if guard == Guard::Outgrows && common == DType::I64 {
            exact_int64(op, &[Arg::Tensor(a), y], r, |p, v| {
                f(p, v[0], v[1], DType::F32)
            })
        } else {
            Ok(Pending::none())
        }
    };
    match b {
        Rhs::Tensor(t) => {
            let op = OpScope::new(name, &[a, t])?;
            let check = check(&op, Arg::Tensor(t))?;
            // A divisor or factor that is one value broadcast over the iteration keeps its
            // own value in opmath (ATen's `is_scalar` fast path for bf16/f16).
            let raw = number == NumberAs::Opmath
                && common.is_float()
                && super::pointwise::is_scalar(&super::pointwise::Arg::Tensor(t));
            let r = map(&op, &[a, t], &[out_dtype], |p, r| {
                let x = p.cast(r[0], common);
                let y = if raw { r[1] } else { p.cast(r[1], common) };
                vec![f(p, x, y, common)]
            })?
            .remove(0);
            check.guards(op.rt(), &[&r]);
            outgrows(&op, Arg::Tensor(t), &r)?.guards(op.rt(), &[&r]);
            Ok(r)
        }
        Rhs::Number(s) => {
            let op = OpScope::new(name, &[a])?;
            fits_lanes(name, s, common)?;
            check(&op, Arg::Number(s))?.guards(op.rt(), &[]);
            let r = map(&op, &[a], &[out_dtype], |p, r| {
                let x = p.cast(r[0], common);
                // Program constants of float dtypes hold f32 values: round on the host.
                let s = if number == NumberAs::Common && common.is_float() {
                    Scalar::Float(f32::from_bits(s.lane_bits(common)) as f64)
                } else {
                    s
                };
                let y = p.constant(s, compute(common));
                vec![f(p, x, y, common)]
            })?
            .remove(0);
            outgrows(&op, Arg::Number(s), &r)?.guards(op.rt(), &[&r]);
            Ok(r)
        }
    }
}

/// A number computed with in an int64 operation must fit the device's 32-bit lanes: larger
/// ones are refused as unsupported (the bridge runs such a call on the CPU, exactly), never
/// truncated (`x * 2**40` on int64).
pub(crate) fn fits_lanes(name: &str, s: Scalar, common: DType) -> Result<()> {
    match s {
        Scalar::Int(v) if common == DType::I64 && i32::try_from(v).is_err() => {
            Err(TpuError::Unsupported(format!(
                "{name}: the int64 value {v} needs more than 32 bits, and the tpu computes int64 \
                 in 32-bit lanes"
            )))
        }
        _ => Ok(()),
    }
}

// The overloads whose `other` may be a Python number where the schema says `Tensor` (the
// binder keeps a number there: `x + 2` reaches `add.Tensor`): `numbers = "other"`.

#[aten("aten::add.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::All))]
fn add_tensor_op(a: AddTensor<'_>) -> Result<Tensor> {
    arith::add_like(AddTensor::NAME, a.self_, a.other, a.alpha, false)
}

#[aten("aten::sub.Tensor", dtypes = DType::NUMERIC, numbers = "other", shard = Sharding::pointwise(Lin::All))]
fn sub_tensor_op(a: SubTensor<'_>) -> Result<Tensor> {
    arith::add_like(SubTensor::NAME, a.self_, a.other, a.alpha, true)
}

#[aten("aten::mul.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::Either))]
fn mul_tensor_op(a: MulTensor<'_>) -> Result<Tensor> {
    mul(a.self_, a.other)
}

#[aten("aten::pow.Tensor_Tensor", dtypes = DType::NUMERIC, numbers = "exponent", shard = Sharding::pointwise(Lin::No))]
fn pow_tensor_tensor_op(a: PowTensorTensor<'_>) -> Result<Tensor> {
    pow(a.self_, a.exponent)
}

/// `torch.pow(2, x)`: a number to a tensor's powers, as `pow.Tensor_Tensor` of the number as a
/// zero-dimensional tensor of the promoted dtype (broadcast, not filled).
#[aten("aten::pow.Scalar", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn pow_scalar_op(rt: &crate::runtime::Runtime, a: PowScalar<'_>) -> Result<Tensor> {
    let d = result_type(&[
        Arg::Number(a.self_).promotion(),
        super::args::operand(a.exponent),
    ]);
    let base = super::creation::scalar_tensor(rt, a.self_, d)?;
    pow(&base, Rhs::Tensor(a.exponent))
}

#[aten("aten::remainder.Tensor", dtypes = DType::NUMERIC, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn remainder_tensor_op(a: RemainderTensor<'_>) -> Result<Tensor> {
    remainder(a.self_, a.other)
}

#[aten("aten::eq.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn eq_tensor_op(a: EqTensor<'_>) -> Result<Tensor> {
    compare(a.self_, a.other, CmpKind::Eq)
}

#[aten("aten::ne.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn ne_tensor_op(a: NeTensor<'_>) -> Result<Tensor> {
    compare(a.self_, a.other, CmpKind::Ne)
}

#[aten("aten::lt.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn lt_tensor_op(a: LtTensor<'_>) -> Result<Tensor> {
    compare(a.self_, a.other, CmpKind::Lt)
}

#[aten("aten::le.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn le_tensor_op(a: LeTensor<'_>) -> Result<Tensor> {
    compare(a.self_, a.other, CmpKind::Le)
}

#[aten("aten::gt.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn gt_tensor_op(a: GtTensor<'_>) -> Result<Tensor> {
    compare(a.self_, a.other, CmpKind::Gt)
}

#[aten("aten::ge.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn ge_tensor_op(a: GeTensor<'_>) -> Result<Tensor> {
    compare(a.self_, a.other, CmpKind::Ge)
}
