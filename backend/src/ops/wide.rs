//! int64 results that the device's 32-bit lanes cannot hold are refused on the device, never
//! wrapped.
//!
//! The device computes int64 in 32-bit lanes, and every int64 tensor it holds is inside int32
//! (an input beyond it is refused before it reaches the device: `binary::fits_lanes`, the
//! bridge's upload). Integer arithmetic in 32-bit lanes wraps modulo 2^32, so a result is exact
//! exactly when the true result lies inside int32. An operator whose int64 result may leave
//! int32 (`+`, `-`, `*`, `**`, `//`, `cumsum`, `prod`, a matrix product, ...) checks that on the
//! device (see `ops::checks`): a wrong value is raised at the next synchronisation that reads
//! it, as PyTorch raises its own errors, and the good path waits for nothing.
//!
//! The rule for an elementwise result `r`: the same expression computed again in f32 from the
//! operands, `e`, lies within 2^30 of `r`. When the true value `t` fits int32, `r = t` and
//! `|e - t|` is a few roundings of at most 2^33 (|t| < 2^31 and each operand < 2^31): under 2^12.
//! When it does not, `r = t - k 2^32` with `k != 0`: for |t| < 2^33 that puts `r` at least
//! 2^32 - 2^12 from `e`, and for a larger |t| (a product), `|e| > 2^32` against |r| <= 2^31.

use super::args::TensorOrNumber as Arg;
use super::checks::{Pending, check_float_ranges, checks_on};
use super::helpers::{OpScope, map, map_contiguous};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, PRef, ProgBuilder, UnOp};
use crate::tensor::Tensor;

/// The error of an int64 result beyond int32.
pub(crate) fn beyond_int32() -> TpuError {
    TpuError::BadArgs(
        "an int64 result beyond int32's range: the tpu computes int64 in 32-bit lanes and would \
         wrap it; compute it on the CPU instead (.cpu())"
            .into(),
    )
}

/// Checks on the device that `result`, an int64 computed in 32-bit lanes from `operands`, is
/// the true value: `shadow` computes it again in f32 from the operands (each given as f32);
/// see the module docs. Nothing to check for another dtype. Give the operator's outputs to
/// [`Pending::guards`].
pub(crate) fn exact_int64(
    op: &OpScope,
    operands: &[Arg],
    result: &Tensor,
    shadow: impl FnOnce(&mut ProgBuilder, &[PRef]) -> PRef,
) -> Result<Pending> {
    let f = DType::F32;
    let tensors: Vec<&Tensor> = operands
        .iter()
        .filter_map(|a| match a {
            Arg::Tensor(t) => Some(*t),
            Arg::Number(_) => None,
        })
        .collect();
    exact_int64_raw(op, &tensors, result, |p, raw| {
        let mut next = 0;
        let mut fs = Vec::new();
        for a in operands {
            fs.push(match a {
                Arg::Tensor(_) => {
                    next += 1;
                    p.cast(raw[next - 1], f)
                }
                Arg::Number(s) => p.constant(Scalar::Float(s.to_f64()), f),
            });
        }
        shadow(p, &fs)
    })
}

/// [`exact_int64`] with a shadow that takes the tensors' own values (in their dtypes, as
/// loaded) and returns the f32 estimate: for an operator whose estimate needs exact integer
/// steps first (`lcm`: the quotient by the gcd).
pub(crate) fn exact_int64_raw(
    op: &OpScope,
    tensors: &[&Tensor],
    result: &Tensor,
    shadow: impl FnOnce(&mut ProgBuilder, &[PRef]) -> PRef,
) -> Result<Pending> {
    if result.dtype() != DType::I64 || result.numel() == 0 || !checks_on(op) {
        return Ok(Pending::none());
    }
    let mut all = tensors.to_vec();
    all.push(result);
    let n = tensors.len();
    let distance = map(op, &all, &[DType::F32], |p, r| {
        let e = shadow(p, &r[..n]);
        vec![distance_to(p, r[n], e)]
    })?
    .remove(0);
    within_2_30(op, &distance)
}

/// `|f32(got) - e|`, at most 2^31 (an infinite `e`, a power, is as far as 2^31).
fn distance_to(p: &mut ProgBuilder, got: PRef, e: PRef) -> PRef {
    let f = DType::F32;
    let got = p.cast(got, f);
    let d = p.bin(BinOp::Sub, got, e, f);
    let d = p.un(UnOp::Abs, d, f);
    let cap = p.constant(Scalar::Float(2f64.powi(31)), f);
    p.bin(BinOp::Min, d, cap, f)
}

/// Refuses (on the device) a distance of 2^30 or more between a result and its f32 shadow.
fn within_2_30(op: &OpScope, distance: &Tensor) -> Result<Pending> {
    check_float_ranges(
        op,
        distance,
        &[(2f64.powi(30), f64::INFINITY)],
        beyond_int32,
    )
}

/// Checks on the device that no element of the int64 tensor `x` is `-2^31`, whose negation
/// and magnitude (2^31) int32 cannot hold (`neg`, `abs`); call it before the operator's
/// kernels.
pub(crate) fn negatable(op: &OpScope, x: &Tensor) -> Result<Pending> {
    if x.dtype() != DType::I64 {
        return Ok(Pending::none());
    }
    super::checks::check_values(
        op,
        x,
        |p, v| {
            let min = p.constant(Scalar::Int(i32::MIN as i64), DType::I32);
            p.cmp(crate::ir::CmpKind::Ne, v, min, DType::I32)
        },
        |_| beyond_int32(),
    )
}

/// Checks on the device that int64 sums are exact: `sums` holds them computed in f32 and
/// `magnitudes` the sums of the terms' magnitudes, `n` terms each at most. Wrap-around addition
/// is exact modulo 2^32, so a sum is exact exactly when the true sum fits int32, and the true
/// sum is within `n u s` of the f32 one (`u` = 2^-24: each term's rounding and each addition's,
/// in any order); a sum not provably inside int32 is refused.
pub(crate) fn sums_fit(
    op: &OpScope,
    sums: &Tensor,
    magnitudes: &Tensor,
    n: usize,
) -> Result<Pending> {
    let f = DType::F32;
    // A little over n u, for the rounding of this bound itself.
    let k = n.max(1) as f64 * 2f64.powi(-24) * (1.0 + 2f64.powi(-10));
    let bound = map_contiguous(op, &[sums, magnitudes], &[f], |p, r| {
        let e = p.un(UnOp::Abs, r[0], f);
        let k = p.constant(Scalar::Float(k), f);
        let err = p.bin(BinOp::Mul, r[1], k, f);
        vec![p.bin(BinOp::Add, e, err, f)]
    })?
    .remove(0);
    check_float_ranges(op, &bound, &[(2f64.powi(31), f64::INFINITY)], beyond_int32)
}

/// The most factors an int64 product may have for its f32 shadow to tell (`n u` of 2^31 under
/// 2^29): a longer product is refused as unsupported (the CPU fallback computes it).
pub(crate) const MAX_PRODUCT_FACTORS: usize = 1 << 22;

/// Refuses, as unsupported, an int64 product of more than [`MAX_PRODUCT_FACTORS`] factors.
pub(crate) fn checkable_product(n: usize) -> Result<()> {
    if n <= MAX_PRODUCT_FACTORS {
        return Ok(());
    }
    Err(TpuError::Unsupported(format!(
        "an int64 product of {n} factors: the tpu computes int64 in 32-bit lanes and checks a \
         product of at most {MAX_PRODUCT_FACTORS} factors"
    )))
}

/// Checks on the device that `result`, int64 products computed in 32-bit lanes, equals
/// `shadow`, the same products in f32, to within 2^30 (as [`exact_int64`]; wrap-around
/// multiplication is exact modulo 2^32, and `n` factors put the f32 product within `n u` of
/// the true one). A zero after an overflowing f32 partial product makes NaN, which passes: the
/// true product is then 0, as the lanes' is.
pub(crate) fn products_fit(op: &OpScope, result: &Tensor, shadow: &Tensor) -> Result<Pending> {
    let f = DType::F32;
    let distance = map_contiguous(op, &[result, shadow], &[f], |p, r| {
        vec![distance_to(p, r[0], r[1])]
    })?
    .remove(0);
    within_2_30(op, &distance)
}
