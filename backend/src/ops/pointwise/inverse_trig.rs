//! Inverse trigonometric and hyperbolic functions as tile programs: Cephes' single-precision
//! `asinf.c`, `acosf.c` and `atanf.c` (range reduction, then a minimax polynomial; peak
//! relative error about 2e-7 in f32), `atan2` with C's signed zeros, and `log1p` forms of
//! `asinh`, `acosh`, `atanh` that keep relative accuracy near 0 and 1. Registered in
//! [`super::math`].

use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, LN_2, PI};

use super::Ex;
use super::predicates::sign_bit;
use crate::ir::PRef;

/// Cephes `atanf` of `x >= 0` (no sign handling): reduced to `|t| <= tan(pi/8)`.
fn atan_pos(e: &mut Ex, x: PRef) -> PRef {
    let big = e.gtk(x, 2.414_213_562_373_095);
    let mid = e.gtk(x, 0.414_213_562_373_095);
    let inv = e.kdiv(-1.0, x);
    let xm1 = e.addk(x, -1.0);
    let xp1 = e.addk(x, 1.0);
    let red = e.div(xm1, xp1);
    let t = e.sel(mid, red, x);
    let t = e.sel(big, inv, t);
    let y0 = e.k(0.0);
    let q = e.k(FRAC_PI_4);
    let y0 = e.sel(mid, q, y0);
    let h = e.k(FRAC_PI_2);
    let y0 = e.sel(big, h, y0);
    let z = e.mul(t, t);
    let p = e.poly(
        z,
        &[
            8.053_744_495_38e-2,
            -1.387_768_560_32e-1,
            1.997_771_064_78e-1,
            -3.333_294_915_39e-1,
        ],
    );
    let pz = e.mul(p, z);
    let pzt = e.mul(pz, t);
    let r = e.add(pzt, t);
    e.add(y0, r)
}

/// `atan(x)`.
pub(super) fn atan(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let r = atan_pos(e, a);
    let neg = e.ltk(x, 0.0);
    let r = e.with_sign(r, neg);
    // NaN stays NaN (the comparisons above pick a branch for it, the arithmetic keeps it).
    let nan = e.isnan(x);
    e.sel(nan, x, r)
}

/// Cephes `asinf`'s polynomial for `0 <= a <= 0.5`.
fn asin_small(e: &mut Ex, a: PRef) -> PRef {
    let z = e.mul(a, a);
    let p = e.poly(
        z,
        &[
            4.216_319_904_8e-2,
            2.418_131_104_9e-2,
            4.547_002_599_8e-2,
            7.495_300_268_6e-2,
            1.666_675_242_2e-1,
        ],
    );
    let pz = e.mul(p, z);
    let pza = e.mul(pz, a);
    e.add(pza, a)
}

/// What `asin` and `acos` start from: `|x|`, whether it is above 1/2, and `r = asin(s)` with
/// `s = sqrt((1 - |x|) / 2)` there (else `asin(|x|)`), and `2r`.
fn asin_halves(e: &mut Ex, x: PRef) -> (PRef, PRef, PRef, PRef) {
    let a = e.abs(x);
    let big = e.gtk(a, 0.5);
    let one_m = e.ksub(1.0, a);
    let half = e.mulk(one_m, 0.5);
    let s = e.sqrt(half);
    let arg = e.sel(big, s, a);
    let r = asin_small(e, arg);
    let r2 = e.add(r, r);
    (a, big, r, r2)
}

/// `r` with `x`'s sign, then [`nan_off_unit`]: how the odd functions of `[-1, 1]` end.
fn odd_on_unit(e: &mut Ex, x: PRef, a: PRef, r: PRef) -> PRef {
    let neg = e.ltk(x, 0.0);
    let r = e.with_sign(r, neg);
    nan_off_unit(e, x, a, r)
}

/// `r`, NaN where `|x|` (`a`) is above 1, and `x` where `x` is NaN.
fn nan_off_unit(e: &mut Ex, x: PRef, a: PRef, r: PRef) -> PRef {
    let out = e.gtk(a, 1.0);
    let nan = e.k(f64::NAN);
    let r = e.sel(out, nan, r);
    let isnan = e.isnan(x);
    e.sel(isnan, x, r)
}

/// `asin(x)`; NaN outside `[-1, 1]`.
pub(super) fn asin(e: &mut Ex, x: PRef) -> PRef {
    let (a, big, r, r2) = asin_halves(e, x);
    let rb = e.ksub(FRAC_PI_2, r2);
    let r = e.sel(big, rb, r);
    odd_on_unit(e, x, a, r)
}

/// `acos(x)` (Cephes `acosf`): `pi - 2 asin(sqrt((1 + x) / 2))` below -1/2, `2 asin(sqrt((1 -
/// x) / 2))` above 1/2, `pi/2 - asin(x)` between.
pub(super) fn acos(e: &mut Ex, x: PRef) -> PRef {
    let (a, big, r, r2) = asin_halves(e, x);
    let neg = e.ltk(x, 0.0);
    // |x| > 1/2: 2 asin(s), or pi - 2 asin(s) for negative x.
    let pi_m = e.ksub(PI, r2);
    let rbig = e.sel(neg, pi_m, r2);
    // |x| <= 1/2: pi/2 - asin(x).
    let sr = e.with_sign(r, neg);
    let rsmall = e.ksub(FRAC_PI_2, sr);
    let r = e.sel(big, rbig, rsmall);
    nan_off_unit(e, x, a, r)
}

/// `atan2(y, x)` with C's special cases for zeros and infinities.
pub(super) fn atan2(e: &mut Ex, y: PRef, x: PRef) -> PRef {
    let (ay, ax) = (e.abs(y), e.abs(x));
    // atan(|y| / |x|) in [0, pi/2]; both infinite: pi/4; both zero: 0.
    let q = e.div(ay, ax);
    let r = atan_pos(e, q);
    let yinf = e.isinf(y);
    let xinf = e.isinf(x);
    let both_inf = e.and(yinf, xinf);
    let r = e.selk(both_inf, FRAC_PI_4, r);
    let yz = e.eqk(y, 0.0);
    let r = e.selk(yz, 0.0, r);
    // x < 0 (or -0): the angle is measured from pi.
    let xneg = sign_bit(e.p, x);
    let flipped = e.ksub(PI, r);
    let r = e.sel(xneg, flipped, r);
    let yneg = sign_bit(e.p, y);
    let r = e.with_sign(r, yneg);
    let ynan = e.isnan(y);
    let xnan = e.isnan(x);
    let r = e.sel(xnan, x, r);
    e.sel(ynan, y, r)
}

/// `asinh(x) = sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2)))`, `log(2a)` for huge `a`.
pub(super) fn asinh(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let a2 = e.mul(a, a);
    let s = e.addk(a2, 1.0);
    let s = e.sqrt(s);
    let d = e.addk(s, 1.0);
    let q = e.div(a2, d);
    let t = e.add(a, q);
    let small = e.log1p(t);
    let l = e.log(a);
    let large = e.addk(l, LN_2);
    let huge = e.gtk(a, 1e9);
    let r = e.sel(huge, large, small);
    let neg = e.ltk(x, 0.0);
    let r = e.with_sign(r, neg);
    let isnan = e.isnan(x);
    e.sel(isnan, x, r)
}

/// `acosh(x)`: `log1p(t + sqrt(2t + t^2))` with `t = x - 1` below 2, `log(x + sqrt(x^2 -
/// 1))` above, `log(2x)` for huge `x`; NaN below 1.
pub(super) fn acosh(e: &mut Ex, x: PRef) -> PRef {
    let t = e.addk(x, -1.0);
    let t2 = e.mul(t, t);
    let tt = e.add(t, t);
    let u = e.add(tt, t2);
    let su = e.sqrt(u);
    let v = e.add(t, su);
    let near = e.log1p(v);
    let x2 = e.mul(x, x);
    let w = e.addk(x2, -1.0);
    let sw = e.sqrt(w);
    let z = e.add(x, sw);
    let far = e.log(z);
    let l = e.log(x);
    let huge = e.addk(l, LN_2);
    let lt2 = e.ltk(x, 2.0);
    let r = e.sel(lt2, near, far);
    let big = e.gtk(x, 1e9);
    let r = e.sel(big, huge, r);
    let below = e.ltk(x, 1.0);
    let nan = e.k(f64::NAN);
    e.sel(below, nan, r)
}

/// `atanh(x) = sign(x) log1p(2a / (1 - a)) / 2`.
pub(super) fn atanh(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let n = e.add(a, a);
    let d = e.ksub(1.0, a);
    let q = e.div(n, d);
    let l = e.log1p(q);
    let r = e.mulk(l, 0.5);
    odd_on_unit(e, x, a, r)
}
