//! The vector unit's elementwise math, on the 32-bit lanes of a register.
//!
//! Lanes are `u32` bit patterns read as f32 or i32 per the instruction's type. f32 results are
//! IEEE single precision; transcendentals use `libm` (deterministic on every host); integer
//! arithmetic wraps; integer division by zero gives 0 instead of trapping.

use tpuemu_isa::ops::{CmpOp, CvtOp, RedOp, VBinOp, VType, VUnOp};

use super::float::{round_bf16, round_f16};

/// `torch.minimum`/`maximum` semantics: NaN wins; otherwise the smaller/larger, `a` on ties.
#[inline]
fn fmin(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b < a {
        b
    } else {
        a
    }
}

#[inline]
fn fmax(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

/// One f32 binary operation.
#[inline]
pub fn f32_bin(op: VBinOp, a: f32, b: f32) -> f32 {
    match op {
        VBinOp::Add => a + b,
        VBinOp::Sub => a - b,
        VBinOp::Mul => a * b,
        VBinOp::Div => a / b,
        VBinOp::Min => fmin(a, b),
        VBinOp::Max => fmax(a, b),
        VBinOp::Pow => libm::powf(a, b),
        VBinOp::Rem => libm::fmodf(a, b),
        // Integer-only operations never reach here (the decoder checks types).
        _ => f32::NAN,
    }
}

/// One i32 binary operation.
#[inline]
pub fn i32_bin(op: VBinOp, a: i32, b: i32) -> i32 {
    match op {
        VBinOp::Add => a.wrapping_add(b),
        VBinOp::Sub => a.wrapping_sub(b),
        VBinOp::Mul => a.wrapping_mul(b),
        VBinOp::Div => a.checked_div(b).unwrap_or(0),
        VBinOp::Rem => a.checked_rem(b).unwrap_or(0),
        VBinOp::Min => a.min(b),
        VBinOp::Max => a.max(b),
        VBinOp::And => a & b,
        VBinOp::Or => a | b,
        VBinOp::Xor => a ^ b,
        VBinOp::Shl => a.wrapping_shl(b as u32 & 31),
        VBinOp::Sra => a.wrapping_shr(b as u32 & 31),
        VBinOp::Shr => ((a as u32) >> (b as u32 & 31)) as i32,
        VBinOp::Pow => 0,
    }
}

/// Applies a binary operation to every lane: `out[i] = a[i] op b(i)`.
pub fn bin(op: VBinOp, ty: VType, a: &[u32], b: impl Fn(usize) -> u32, out: &mut [u32]) {
    match ty {
        VType::F32 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f32_bin(op, f32::from_bits(a[i]), f32::from_bits(b(i))).to_bits();
            }
        }
        VType::I32 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = i32_bin(op, a[i] as i32, b(i) as i32) as u32;
            }
        }
    }
}

/// One f32 unary operation.
#[inline]
pub fn f32_un(op: VUnOp, x: f32) -> f32 {
    match op {
        VUnOp::Neg => -x,
        VUnOp::Abs => x.abs(),
        VUnOp::Sign => {
            if x.is_nan() {
                x
            } else if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        VUnOp::Exp => libm::expf(x),
        VUnOp::Log => libm::logf(x),
        VUnOp::Log1p => libm::log1pf(x),
        VUnOp::Expm1 => libm::expm1f(x),
        VUnOp::Sqrt => libm::sqrtf(x),
        VUnOp::Rsqrt => 1.0 / libm::sqrtf(x),
        VUnOp::Rcp => 1.0 / x,
        VUnOp::Sin => libm::sinf(x),
        VUnOp::Cos => libm::cosf(x),
        VUnOp::Tanh => libm::tanhf(x),
        VUnOp::Erf => libm::erff(x),
        VUnOp::Sigmoid => 1.0 / (1.0 + libm::expf(-x)),
        VUnOp::Floor => libm::floorf(x),
        VUnOp::Ceil => libm::ceilf(x),
        VUnOp::Round => libm::rintf(x),
        VUnOp::Trunc => libm::truncf(x),
        VUnOp::Not => f32::NAN,
    }
}

/// One i32 unary operation.
#[inline]
pub fn i32_un(op: VUnOp, x: i32) -> i32 {
    match op {
        VUnOp::Neg => x.wrapping_neg(),
        VUnOp::Abs => x.wrapping_abs(),
        VUnOp::Sign => x.signum(),
        VUnOp::Not => !x,
        _ => 0,
    }
}

/// Applies a unary operation to every lane.
pub fn un(op: VUnOp, ty: VType, a: &[u32], out: &mut [u32]) {
    match ty {
        VType::F32 => {
            for (o, x) in out.iter_mut().zip(a) {
                *o = f32_un(op, f32::from_bits(*x)).to_bits();
            }
        }
        VType::I32 => {
            for (o, x) in out.iter_mut().zip(a) {
                *o = i32_un(op, *x as i32) as u32;
            }
        }
    }
}

/// One comparison.
#[inline]
pub fn cmp(op: CmpOp, ty: VType, a: u32, b: u32) -> bool {
    match ty {
        VType::F32 => {
            let (a, b) = (f32::from_bits(a), f32::from_bits(b));
            match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                CmpOp::Lt | CmpOp::LtU => a < b,
                CmpOp::Le => a <= b,
                CmpOp::Gt => a > b,
                CmpOp::Ge | CmpOp::GeU => a >= b,
            }
        }
        VType::I32 => {
            let (sa, sb) = (a as i32, b as i32);
            match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                CmpOp::Lt => sa < sb,
                CmpOp::Le => sa <= sb,
                CmpOp::Gt => sa > sb,
                CmpOp::Ge => sa >= sb,
                CmpOp::LtU => a < b,
                CmpOp::GeU => a >= b,
            }
        }
    }
}

/// One lane conversion.
#[inline]
pub fn cvt(op: CvtOp, x: u32) -> u32 {
    match op {
        CvtOp::F2I => {
            let f = f32::from_bits(x);
            // `as` saturates and maps NaN to 0.
            (f as i32) as u32
        }
        CvtOp::I2F => (x as i32 as f32).to_bits(),
        CvtOp::Bf16 => round_bf16(f32::from_bits(x)).to_bits(),
        CvtOp::F16 => round_f16(f32::from_bits(x)).to_bits(),
    }
}

/// Combines two lanes for a reduction.
#[inline]
pub fn red(op: RedOp, ty: VType, a: u32, b: u32) -> u32 {
    match (ty, op) {
        (VType::F32, RedOp::Add) => (f32::from_bits(a) + f32::from_bits(b)).to_bits(),
        (VType::F32, RedOp::Max) => fmax(f32::from_bits(a), f32::from_bits(b)).to_bits(),
        (VType::F32, RedOp::Min) => fmin(f32::from_bits(a), f32::from_bits(b)).to_bits(),
        (VType::I32, RedOp::Add) => (a as i32).wrapping_add(b as i32) as u32,
        (VType::I32, RedOp::Max) => (a as i32).max(b as i32) as u32,
        (VType::I32, RedOp::Min) => (a as i32).min(b as i32) as u32,
    }
}

/// Reduces `v` (length a power of two) in place as a pairwise tree: at each level element `i`
/// combines with element `i + half`. Returns `v[0]`.
pub fn tree_reduce(op: RedOp, ty: VType, v: &mut [u32]) -> u32 {
    let mut n = v.len();
    while n > 1 {
        n /= 2;
        for i in 0..n {
            v[i] = red(op, ty, v[i], v[i + n]);
        }
    }
    v[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_propagates_through_min_max() {
        assert!(f32_bin(VBinOp::Max, f32::NAN, 1.0).is_nan());
        assert!(f32_bin(VBinOp::Min, 1.0, f32::NAN).is_nan());
        assert_eq!(f32_bin(VBinOp::Min, 1.0, 2.0), 1.0);
    }

    #[test]
    fn integer_division_by_zero_is_zero() {
        assert_eq!(i32_bin(VBinOp::Div, 7, 0), 0);
        assert_eq!(i32_bin(VBinOp::Div, i32::MIN, -1), 0);
        assert_eq!(i32_bin(VBinOp::Rem, -7, 2), -1);
    }

    #[test]
    fn conversions() {
        assert_eq!(cvt(CvtOp::F2I, f32::NAN.to_bits()), 0);
        assert_eq!(cvt(CvtOp::F2I, 1e20f32.to_bits()) as i32, i32::MAX);
        assert_eq!(cvt(CvtOp::F2I, (-2.7f32).to_bits()) as i32, -2);
        assert_eq!(f32::from_bits(cvt(CvtOp::I2F, (-3i32) as u32)), -3.0);
    }

    #[test]
    fn tree_sum_order_is_pairwise() {
        // With a pairwise tree, 1e8 + 1 + ... cancels differently from a left fold.
        let mut v: Vec<u32> = [1e8f32, 1.0, -1e8, 1.0]
            .iter()
            .map(|x| x.to_bits())
            .collect();
        // Level 1: [1e8 + -1e8, 1 + 1] = [0, 2]; level 2: 2.
        assert_eq!(
            f32::from_bits(tree_reduce(RedOp::Add, VType::F32, &mut v)),
            2.0
        );
    }
}
