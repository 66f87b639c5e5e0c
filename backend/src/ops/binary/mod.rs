//! Binary and ternary elementwise operators with PyTorch's broadcasting and type promotion,
//! by concept: [`arith`] (`add`, `sub`, `mul`, `pow`, `remainder`), [`compare`] (comparisons,
//! `maximum`/`minimum`, the logical operators), [`select`] (`where`, `clamp`); the kernel they
//! share (a promoted binary program over a tensor and a tensor or a number) is here.

pub(crate) mod arith;
pub(crate) mod compare;
pub(crate) mod select;

use super::Value;
use super::args::Args;
use super::checks::Pending;
use super::helpers::{OpScope, map};
use super::pointwise::Arg;
use super::pointwise::division::int_divisor_check;
use super::registry::{OpDef, OpImpl};
use super::t1;
use super::wide::exact_int64;
use crate::dtype::{DType, Operand, Scalar, result_type};
use crate::error::{Result, TpuError};
use crate::ir::{CmpKind, PRef, ProgBuilder};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

pub use arith::{add, mul, pow, remainder, sub};
pub use compare::{compare, logical, logical_not, max_min};
pub use select::{clamp, where_};

/// The promotion operand of a tensor (zero-dim tensors rank below dimensioned ones).
pub(crate) fn operand(t: &Tensor) -> Operand {
    if t.dim() == 0 {
        Operand::ZeroDim(t.dtype())
    } else {
        Operand::Tensor(t.dtype())
    }
}

/// The lane-precision type an operation on `d` computes in.
pub(crate) fn compute(d: DType) -> DType {
    if d.is_float() { DType::F32 } else { DType::I32 }
}

/// A binary operand: a tensor or a Python number.
#[derive(Clone, Debug)]
pub enum Rhs<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A number.
    Scalar(Scalar),
}

impl Rhs<'_> {
    fn operand(&self) -> Operand {
        match self {
            Rhs::Tensor(t) => operand(t),
            Rhs::Scalar(s) => Operand::Number(*s),
        }
    }
}

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
    let common = result_type(&[operand(a), b.operand()]);
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
            exact_int64(op, &[Arg::T(a), y], r, |p, v| f(p, v[0], v[1], DType::F32))
        } else {
            Ok(Pending::none())
        }
    };
    match b {
        Rhs::Tensor(t) => {
            let op = OpScope::new(name, &[a, t])?;
            let check = check(&op, Arg::T(t))?;
            // A divisor or factor that is one value broadcast over the iteration keeps its
            // own value in opmath (ATen's `is_scalar` fast path for bf16/f16).
            let raw = number == NumberAs::Opmath
                && common.is_float()
                && super::pointwise::is_scalar(&super::pointwise::Arg::T(t));
            let r = map(&op, &[a, t], &[out_dtype], |p, r| {
                let x = p.cast(r[0], common);
                let y = if raw { r[1] } else { p.cast(r[1], common) };
                vec![f(p, x, y, common)]
            })?
            .remove(0);
            check.guards(op.rt(), &[&r]);
            outgrows(&op, Arg::T(t), &r)?.guards(op.rt(), &[&r]);
            Ok(r)
        }
        Rhs::Scalar(s) => {
            let op = OpScope::new(name, &[a])?;
            fits_lanes(name, s, common)?;
            check(&op, Arg::N(s))?.guards(op.rt(), &[]);
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
            outgrows(&op, Arg::N(s), &r)?.guards(op.rt(), &[&r]);
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

fn rhs<'a>(a: &'a Args, i: usize) -> Result<Rhs<'a>> {
    match a.get(i) {
        Some(Value::Tensor(t)) => Ok(Rhs::Tensor(t)),
        _ => Ok(Rhs::Scalar(a.scalar(i)?)),
    }
}

/// The overloads whose `other` may be a Python number where the schema says `Tensor` (the
/// binder keeps a number there: `x + 2` reaches `add.Tensor`), which `#[aten]` cannot type yet;
/// every other overload here is an `#[aten]` function.
pub(super) fn defs() -> Vec<OpDef> {
    let (all, f) = (DType::ALL_TPU, DType::NUMERIC);
    let k = OpImpl::Kernel;
    let pw = Sharding::pointwise(Lin::No);
    vec![
        OpDef::new("aten::add.Tensor", k, all, |_, a| {
            t1(arith::add_like(
                "aten::add.Tensor",
                a.tensor(0)?,
                rhs(a, 1)?,
                a.scalar(2)?,
                false,
            ))
        })
        .shard(Sharding::pointwise(Lin::All)),
        OpDef::new("aten::sub.Tensor", k, f, |_, a| {
            t1(arith::add_like(
                "aten::sub.Tensor",
                a.tensor(0)?,
                rhs(a, 1)?,
                a.scalar(2)?,
                true,
            ))
        })
        .shard(Sharding::pointwise(Lin::All)),
        OpDef::new("aten::mul.Tensor", k, all, |_, a| {
            t1(mul(a.tensor(0)?, rhs(a, 1)?))
        })
        .shard(Sharding::pointwise(Lin::Either)),
        OpDef::new("aten::pow.Tensor_Tensor", k, f, |_, a| {
            t1(pow(a.tensor(0)?, rhs(a, 1)?))
        })
        .shard(pw),
        OpDef::new("aten::eq.Tensor", k, all, |_, a| {
            t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Eq))
        })
        .shard(pw),
        OpDef::new("aten::ne.Tensor", k, all, |_, a| {
            t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Ne))
        })
        .shard(pw),
        OpDef::new("aten::lt.Tensor", k, all, |_, a| {
            t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Lt))
        })
        .shard(pw),
        OpDef::new("aten::le.Tensor", k, all, |_, a| {
            t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Le))
        })
        .shard(pw),
        OpDef::new("aten::gt.Tensor", k, all, |_, a| {
            t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Gt))
        })
        .shard(pw),
        OpDef::new("aten::ge.Tensor", k, all, |_, a| {
            t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Ge))
        })
        .shard(pw),
        OpDef::new("aten::remainder.Tensor", k, f, |_, a| {
            t1(remainder(a.tensor(0)?, rhs(a, 1)?))
        })
        .shard(pw),
    ]
}
