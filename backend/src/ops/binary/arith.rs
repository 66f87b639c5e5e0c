//! Arithmetic: `add`, `sub`, `mul`, `pow` (integer powers exactly, as ATen's `powi`),
//! `remainder` (the sign of the divisor, Python's `%`).

use super::{Guard, NumberAs, Rhs, binary_checked, fits_lanes, operand};
use crate::dtype::{DType, Scalar, result_type};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};
use crate::ops::aten;
use crate::ops::helpers::compute;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `a + alpha * b` (`negate`: `a - alpha * b`), as operator `name`.
pub(super) fn add_like(
    name: &str,
    a: &Tensor,
    b: Rhs,
    alpha: Scalar,
    negate: bool,
) -> Result<Tensor> {
    let common = result_type(&[operand(a), b.promotion()]);
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
        MulScalar::NAME
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
    if let Rhs::Number(Scalar::Int(e)) = b
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
        PowTensorScalar::NAME
    };
    let known = match b {
        Rhs::Number(Scalar::Int(e)) => Some(e),
        _ => None,
    };
    let integral = !result_type(&[operand(a), b.promotion()]).is_float();
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

/// `torch.remainder(a, b)`: the result has the sign of `b` (Python's `%`).
pub fn remainder(a: &Tensor, b: Rhs) -> Result<Tensor> {
    let name = if matches!(b, Rhs::Tensor(_)) {
        "aten::remainder.Tensor"
    } else {
        RemainderScalar::NAME
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
            AddScalar::NAME,
            self,
            Rhs::Number(s.into()),
            Scalar::Int(1),
            false,
        )
    }

    /// `self * s`.
    pub fn mul_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        mul(self, Rhs::Number(s.into()))
    }

    /// `self ** e`.
    pub fn pow_scalar(&self, e: impl Into<Scalar>) -> Result<Tensor> {
        pow(self, Rhs::Number(e.into()))
    }
}

// The registered overloads: one `#[aten]` function each (the `Tensor` ones, whose `other` may
// be a number, are in the parent's `defs`).

#[aten("aten::add.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn add_scalar_op(a: AddScalar<'_>) -> Result<Tensor> {
    add_like(
        AddScalar::NAME,
        a.self_,
        Rhs::Number(a.other),
        a.alpha,
        false,
    )
}

#[aten("aten::mul.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All))]
fn mul_scalar_op(a: MulScalar<'_>) -> Result<Tensor> {
    mul(a.self_, Rhs::Number(a.other))
}

#[aten("aten::pow.Tensor_Scalar", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn pow_tensor_scalar_op(a: PowTensorScalar<'_>) -> Result<Tensor> {
    pow(a.self_, Rhs::Number(a.exponent))
}

#[aten("aten::remainder.Scalar", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn remainder_scalar_op(a: RemainderScalar<'_>) -> Result<Tensor> {
    remainder(a.self_, Rhs::Number(a.other))
}
