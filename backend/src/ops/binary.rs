//! Binary and ternary elementwise operators: arithmetic, comparisons, logic, `where`, `clamp`,
//! `remainder`, `pow`, with PyTorch's broadcasting and type promotion.

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
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

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

/// `a + alpha * b` (also `sub` with `-alpha`).
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

fn add_like(name: &str, a: &Tensor, b: Rhs, alpha: Scalar, negate: bool) -> Result<Tensor> {
    let common = result_type(&[operand(a), b.operand()]);
    if negate && common == DType::Bool {
        return Err(TpuError::BadArgs(
            "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.".into(),
        ));
    }
    if !common.is_float() && matches!(alpha, Scalar::Float(f) if f.fract() != 0.0) {
        return Err(TpuError::BadArgs(format!(
            "For integral input tensors, argument alpha must not be a floating point number (result type {common})"
        )));
    }
    fits_lanes(name, alpha, common)?;
    let one = alpha.to_f64() == 1.0;
    // The number is rounded to a bf16/f16 common dtype first (PyTorch 2.15's `add` kernel).
    binary_checked(
        name,
        a,
        b,
        NumberAs::Common,
        |c| c,
        move |p, x, y, c| {
            let ct = compute(c);
            let y = if one {
                y
            } else {
                let k = p.constant(alpha, ct);
                p.bin(BinOp::Mul, y, k, ct)
            };
            if c == DType::Bool {
                // bool + bool is logical or.
                p.bin(BinOp::Or, x, y, ct)
            } else {
                p.bin(if negate { BinOp::Sub } else { BinOp::Add }, x, y, ct)
            }
        },
        Guard::Outgrows,
    )
}

/// `torch.add(a, b, alpha=alpha)`.
pub fn add(a: &Tensor, b: &Tensor, alpha: Scalar) -> Result<Tensor> {
    add_like("aten::add.Tensor", a, Rhs::Tensor(b), alpha, false)
}

/// `torch.sub(a, b, alpha=alpha)`.
pub fn sub(a: &Tensor, b: &Tensor, alpha: Scalar) -> Result<Tensor> {
    add_like("aten::sub.Tensor", a, Rhs::Tensor(b), alpha, true)
}

/// `a * b`.
pub fn mul(a: &Tensor, b: Rhs) -> Result<Tensor> {
    let name = if matches!(b, Rhs::Tensor(_)) {
        "aten::mul.Tensor"
    } else {
        "aten::mul.Scalar"
    };
    binary_checked(
        name,
        a,
        b,
        NumberAs::Opmath,
        |c| c,
        |p, x, y, c| {
            if c == DType::Bool {
                p.bin(BinOp::And, x, y, compute(c))
            } else {
                p.bin(BinOp::Mul, x, y, compute(c))
            }
        },
        Guard::Outgrows,
    )
}

/// `a ** b`. An integer (or bool) tensor to a negative integer power is an error, as on
/// PyTorch's CPU (a float exponent makes the result float instead); to a negative power from
/// a tensor it is 0, or 1 and -1 for bases 1 and -1 (ATen's `powi`).
pub fn pow(a: &Tensor, b: Rhs) -> Result<Tensor> {
    if let Rhs::Scalar(Scalar::Int(e)) = b
        && e < 0
        && !a.dtype().is_float()
    {
        return Err(TpuError::BadArgs(
            "Integers to negative integer powers are not allowed.".into(),
        ));
    }
    let name = if matches!(b, Rhs::Tensor(_)) {
        "aten::pow.Tensor_Tensor"
    } else {
        "aten::pow.Tensor_Scalar"
    };
    let known = match b {
        Rhs::Scalar(Scalar::Int(e)) => Some(e),
        _ => None,
    };
    let integral = !result_type(&[operand(a), b.operand()]).is_float();
    binary_checked(
        name,
        a,
        b,
        NumberAs::Common,
        |c| c,
        move |p, x, y, c| {
            if c.is_float() && integral {
                // The int64 check's f32 shadow: a negative exponent gives 0 there (the exact
                // result is 0, 1 or -1, within the check's margin), not 1/x (inf for x = 0).
                let z = p.constant(Scalar::Float(0.0), DType::F32);
                let negative = p.cmp(CmpKind::Lt, y, z, DType::F32);
                let r = p.bin(BinOp::Pow, x, y, DType::F32);
                p.select(negative, z, r, DType::F32)
            } else if c.is_float() {
                p.bin(BinOp::Pow, x, y, DType::F32)
            } else {
                int_pow(p, x, y, known)
            }
        },
        // x ** 0 and x ** 1 cannot outgrow x.
        if matches!(known, Some(0 | 1)) {
            Guard::None
        } else {
            Guard::Outgrows
        },
    )
}

/// `x ** y` in 32-bit integer lanes, exactly modulo 2^32 (as ATen's `powi` wraps in int32;
/// an int64 result beyond int32 is caught by the operator's check): square and multiply over
/// the exponent's bits (`known`: a number's, unrolled), and for a negative exponent 0, or 1 and
/// -1 for bases 1 and -1.
fn int_pow(p: &mut ProgBuilder, x: PRef, y: PRef, known: Option<i64>) -> PRef {
    let i = DType::I32;
    let one = p.constant(Scalar::Int(1), i);
    let mut r = one;
    let mut base = x;
    if let Some(e) = known {
        // Non-negative (checked by the caller); beyond bit 31 the base's square is 0 or 1 mod
        // 2^32 only for even or unit bases, so every bit counts.
        let mut e = e as u64;
        while e > 0 {
            if e & 1 == 1 {
                r = p.bin(BinOp::Mul, r, base, i);
            }
            e >>= 1;
            if e > 0 {
                base = p.bin(BinOp::Mul, base, base, i);
            }
        }
        return r;
    }
    let zero = p.constant(Scalar::Int(0), i);
    for k in 0..31 {
        let sh = p.constant(Scalar::Int(k), i);
        let bit = p.bin(BinOp::Shr, y, sh, i);
        let bit = p.bin(BinOp::And, bit, one, i);
        let set = p.cmp(CmpKind::Ne, bit, zero, i);
        let times = p.bin(BinOp::Mul, r, base, i);
        r = p.select(set, times, r, i);
        if k < 30 {
            base = p.bin(BinOp::Mul, base, base, i);
        }
    }
    // A negative exponent: 1 ** y = 1, (-1) ** y = -1 for odd y, else 0.
    let negative = p.cmp(CmpKind::Lt, y, zero, i);
    let odd = p.bin(BinOp::And, y, one, i);
    let odd = p.cmp(CmpKind::Ne, odd, zero, i);
    let minus = p.constant(Scalar::Int(-1), i);
    let is_one = p.cmp(CmpKind::Eq, x, one, i);
    let is_minus = p.cmp(CmpKind::Eq, x, minus, i);
    let sign = p.select(odd, minus, one, i);
    let unit = p.select(is_minus, sign, zero, i);
    let unit = p.select(is_one, one, unit, i);
    p.select(negative, unit, r, i)
}

/// `torch.maximum` / `torch.minimum`.
pub fn max_min(a: &Tensor, b: &Tensor, max: bool) -> Result<Tensor> {
    let name = if max {
        "aten::maximum"
    } else {
        "aten::minimum"
    };
    binary(
        name,
        a,
        Rhs::Tensor(b),
        |c| c,
        move |p, x, y, c| p.bin(if max { BinOp::Max } else { BinOp::Min }, x, y, compute(c)),
    )
}

/// Comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`), giving bool.
pub fn compare(a: &Tensor, b: Rhs, kind: CmpKind) -> Result<Tensor> {
    let short = match kind {
        CmpKind::Eq => "eq",
        CmpKind::Ne => "ne",
        CmpKind::Lt => "lt",
        CmpKind::Le => "le",
        CmpKind::Gt => "gt",
        CmpKind::Ge => "ge",
    };
    let name = format!(
        "aten::{short}.{}",
        if matches!(b, Rhs::Tensor(_)) {
            "Tensor"
        } else {
            "Scalar"
        }
    );
    binary_with(
        &name,
        a,
        b,
        NumberAs::Common,
        |_| DType::Bool,
        move |p, x, y, c| p.cmp(kind, x, y, compute(c)),
    )
}

/// `logical_and`, `logical_or` (bool result; non-zero is true).
pub fn logical(a: &Tensor, b: &Tensor, or: bool) -> Result<Tensor> {
    let name = if or {
        "aten::logical_or"
    } else {
        "aten::logical_and"
    };
    let op = OpScope::new(name, &[a, b])?;
    Ok(map(&op, &[a, b], &[DType::Bool], |p, r| {
        let (x, y) = (p.cast(r[0], DType::Bool), p.cast(r[1], DType::Bool));
        vec![p.bin(if or { BinOp::Or } else { BinOp::And }, x, y, DType::I32)]
    })?
    .remove(0))
}

/// `logical_not`.
pub fn logical_not(a: &Tensor) -> Result<Tensor> {
    let op = OpScope::new("aten::logical_not", &[a])?;
    Ok(map(&op, &[a], &[DType::Bool], |p, r| {
        let x = p.cast(r[0], DType::Bool);
        let one = p.constant(Scalar::Int(1), DType::I32);
        vec![p.bin(BinOp::Xor, x, one, DType::I32)]
    })?
    .remove(0))
}

/// `torch.where(cond, a, b)`.
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = OpScope::new("aten::where.self", &[cond, a, b])?;
    if cond.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(format!(
            "where expected condition to be a boolean tensor, but got a tensor with dtype {}",
            cond.dtype().name()
        )));
    }
    let common = result_type(&[operand(a), operand(b)]);
    Ok(map(&op, &[cond, a, b], &[common], |p, r| {
        vec![p.select(r[0], r[1], r[2], common)]
    })?
    .remove(0))
}

/// `torch.clamp(x, min, max)` (NaN stays NaN; `min > max` gives `max`).
pub fn clamp(x: &Tensor, lo: Option<Scalar>, hi: Option<Scalar>) -> Result<Tensor> {
    if lo.is_none() && hi.is_none() {
        return Err(TpuError::BadArgs(
            "torch.clamp: At least one of 'min' or 'max' must not be None".into(),
        ));
    }
    let mut ops = vec![operand(x)];
    ops.extend(lo.iter().chain(hi.iter()).map(|s| Operand::Number(*s)));
    let common = result_type(&ops);
    for s in lo.iter().chain(hi.iter()) {
        fits_lanes("aten::clamp", *s, common)?;
    }
    let op = OpScope::new("aten::clamp", &[x])?;
    Ok(map(&op, &[x], &[common], |p, r| {
        let ct = compute(common);
        let mut v = p.cast(r[0], common);
        if let Some(l) = lo {
            let c = p.constant(l, ct);
            v = p.bin(BinOp::Max, v, c, ct);
        }
        if let Some(h) = hi {
            let c = p.constant(h, ct);
            v = p.bin(BinOp::Min, v, c, ct);
        }
        vec![v]
    })?
    .remove(0))
}

/// `torch.remainder(a, b)`: the result has the sign of `b` (Python's `%`).
pub fn remainder(a: &Tensor, b: Rhs) -> Result<Tensor> {
    let name = if matches!(b, Rhs::Tensor(_)) {
        "aten::remainder.Tensor"
    } else {
        "aten::remainder.Scalar"
    };
    binary_checked(
        name,
        a,
        b,
        NumberAs::Common,
        |c| c,
        |p, x, y, c| {
            let ct = compute(c);
            let m = p.bin(BinOp::Rem, x, y, ct);
            let zero = p.constant(Scalar::Int(0), ct);
            let nz = p.cmp(CmpKind::Ne, m, zero, ct);
            let mneg = p.cmp(CmpKind::Lt, m, zero, ct);
            let yneg = p.cmp(CmpKind::Lt, y, zero, ct);
            let differ = p.cmp(CmpKind::Ne, mneg, yneg, DType::I32);
            let fix = p.bin(BinOp::And, nz, differ, DType::I32);
            let plus = p.bin(BinOp::Add, m, y, ct);
            p.select(fix, plus, m, ct)
        },
        Guard::Divisor,
    )
}

impl Tensor {
    /// `self + other`.
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        add(self, other, Scalar::Int(1))
    }

    /// `self - other`.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        sub(self, other, Scalar::Int(1))
    }

    /// `self * other`.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        mul(self, Rhs::Tensor(other))
    }

    /// `self + s`.
    pub fn add_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        add_like(
            "aten::add.Scalar",
            self,
            Rhs::Scalar(s.into()),
            Scalar::Int(1),
            false,
        )
    }

    /// `self * s`.
    pub fn mul_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        mul(self, Rhs::Scalar(s.into()))
    }

    /// `self ** e`.
    pub fn pow_scalar(&self, e: impl Into<Scalar>) -> Result<Tensor> {
        pow(self, Rhs::Scalar(e.into()))
    }

    /// `torch.maximum(self, other)`.
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        max_min(self, other, true)
    }

    /// `torch.minimum(self, other)`.
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        max_min(self, other, false)
    }

    /// `self == other` (bool).
    pub fn eq(&self, other: &Tensor) -> Result<Tensor> {
        compare(self, Rhs::Tensor(other), CmpKind::Eq)
    }

    /// `self < other` (bool).
    pub fn lt(&self, other: &Tensor) -> Result<Tensor> {
        compare(self, Rhs::Tensor(other), CmpKind::Lt)
    }

    /// `self > other` (bool).
    pub fn gt(&self, other: &Tensor) -> Result<Tensor> {
        compare(self, Rhs::Tensor(other), CmpKind::Gt)
    }

    /// `torch.clamp(self, min, max)`.
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        clamp(self, min.map(Scalar::Float), max.map(Scalar::Float))
    }
}

fn rhs<'a>(a: &'a Args, i: usize) -> Result<Rhs<'a>> {
    match a.get(i) {
        Some(Value::Tensor(t)) => Ok(Rhs::Tensor(t)),
        _ => Ok(Rhs::Scalar(a.scalar(i)?)),
    }
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let f = DType::NUMERIC;
    let all = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    let cmp = |name: &'static str, kind: CmpKind, tensor: bool| {
        OpDef::new(
            name,
            OpImpl::Kernel,
            all,
            match (kind, tensor) {
                (CmpKind::Eq, true) => |_, a| t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Eq)),
                (CmpKind::Ne, true) => |_, a| t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Ne)),
                (CmpKind::Lt, true) => |_, a| t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Lt)),
                (CmpKind::Le, true) => |_, a| t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Le)),
                (CmpKind::Gt, true) => |_, a| t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Gt)),
                (CmpKind::Ge, true) => |_, a| t1(compare(a.tensor(0)?, rhs(a, 1)?, CmpKind::Ge)),
                (CmpKind::Eq, false) => |_, a| {
                    t1(compare(
                        a.tensor(0)?,
                        Rhs::Scalar(a.scalar(1)?),
                        CmpKind::Eq,
                    ))
                },
                (CmpKind::Ne, false) => |_, a| {
                    t1(compare(
                        a.tensor(0)?,
                        Rhs::Scalar(a.scalar(1)?),
                        CmpKind::Ne,
                    ))
                },
                (CmpKind::Lt, false) => |_, a| {
                    t1(compare(
                        a.tensor(0)?,
                        Rhs::Scalar(a.scalar(1)?),
                        CmpKind::Lt,
                    ))
                },
                (CmpKind::Le, false) => |_, a| {
                    t1(compare(
                        a.tensor(0)?,
                        Rhs::Scalar(a.scalar(1)?),
                        CmpKind::Le,
                    ))
                },
                (CmpKind::Gt, false) => |_, a| {
                    t1(compare(
                        a.tensor(0)?,
                        Rhs::Scalar(a.scalar(1)?),
                        CmpKind::Gt,
                    ))
                },
                (CmpKind::Ge, false) => |_, a| {
                    t1(compare(
                        a.tensor(0)?,
                        Rhs::Scalar(a.scalar(1)?),
                        CmpKind::Ge,
                    ))
                },
            },
        )
    };
    let k = OpImpl::Kernel;
    vec![
        OpDef::new("aten::add.Tensor", k, all, |_, a| {
            t1(add_like(
                "aten::add.Tensor",
                a.tensor(0)?,
                rhs(a, 1)?,
                a.scalar(2)?,
                false,
            ))
        })
        .shard(Sharding::pointwise(Lin::All)),
        OpDef::new("aten::add.Scalar", k, all, |_, a| {
            t1(add_like(
                "aten::add.Scalar",
                a.tensor(0)?,
                Rhs::Scalar(a.scalar(1)?),
                a.scalar(2)?,
                false,
            ))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::sub.Tensor", k, f, |_, a| {
            t1(add_like(
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
        OpDef::new("aten::mul.Scalar", k, all, |_, a| {
            t1(mul(a.tensor(0)?, Rhs::Scalar(a.scalar(1)?)))
        })
        .shard(Sharding::pointwise(Lin::All)),
        OpDef::new("aten::pow.Tensor_Scalar", k, f, |_, a| {
            t1(pow(a.tensor(0)?, Rhs::Scalar(a.scalar(1)?)))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::pow.Tensor_Tensor", k, f, |_, a| {
            t1(pow(a.tensor(0)?, rhs(a, 1)?))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::maximum", k, all, |_, a| {
            t1(max_min(a.tensor(0)?, a.tensor(1)?, true))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::minimum", k, all, |_, a| {
            t1(max_min(a.tensor(0)?, a.tensor(1)?, false))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::where.self", k, all, |_, a| {
            t1(where_(a.tensor(0)?, a.tensor(1)?, a.tensor(2)?))
        })
        .shard(Sharding::pointwise(Lin::No)),
        cmp("aten::eq.Tensor", CmpKind::Eq, true).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::ne.Tensor", CmpKind::Ne, true).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::lt.Tensor", CmpKind::Lt, true).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::le.Tensor", CmpKind::Le, true).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::gt.Tensor", CmpKind::Gt, true).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::ge.Tensor", CmpKind::Ge, true).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::eq.Scalar", CmpKind::Eq, false).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::ne.Scalar", CmpKind::Ne, false).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::lt.Scalar", CmpKind::Lt, false).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::le.Scalar", CmpKind::Le, false).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::gt.Scalar", CmpKind::Gt, false).shard(Sharding::pointwise(Lin::No)),
        cmp("aten::ge.Scalar", CmpKind::Ge, false).shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::logical_and", k, all, |_, a| {
            t1(logical(a.tensor(0)?, a.tensor(1)?, false))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::logical_or", k, all, |_, a| {
            t1(logical(a.tensor(0)?, a.tensor(1)?, true))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::logical_not", k, all, |_, a| {
            t1(logical_not(a.tensor(0)?))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::clamp", k, f, |_, a| {
            t1(clamp(
                a.tensor(0)?,
                a.get(1).map(|_| a.scalar(1)).transpose()?,
                a.get(2).map(|_| a.scalar(2)).transpose()?,
            ))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::remainder.Tensor", k, f, |_, a| {
            t1(remainder(a.tensor(0)?, rhs(a, 1)?))
        })
        .shard(Sharding::pointwise(Lin::No)),
        OpDef::new("aten::remainder.Scalar", k, f, |_, a| {
            t1(remainder(a.tensor(0)?, Rhs::Scalar(a.scalar(1)?)))
        })
        .shard(Sharding::pointwise(Lin::No)),
    ]
}
