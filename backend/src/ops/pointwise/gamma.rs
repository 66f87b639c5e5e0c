//! The gamma family: `lgamma`, `digamma`, `polygamma`, `mvlgamma`, `special_zeta`.
//!
//! Written over the vector unit's `log`, `sin`, `cos` with loops unrolled to a fixed length
//! (a vector unit has no per-lane trip counts):
//! - `lgamma(x)`: for `x >= 0.5`, Stirling's series at `z = x + 8` minus `sum ln(x + k)`; below,
//!   the reflection `ln(pi / |sin(pi x)|) - lgamma(1 - x)`;
//! - `digamma(x)`: ATen's `calc_digamma` (asymptotic series at `z >= 10`, reached by the
//!   recurrence `psi(x) = psi(x + 1) - 1/x`, here always ten steps; the reflection
//!   `psi(1 - x) - pi / tan(pi r)` with `r` the fractional part below 0; `±0` gives `∓inf`,
//!   negative integers NaN);
//! - `polygamma(1, x)`: ATen's `calc_trigamma` exactly (six recurrence steps, then its series);
//! - `polygamma(n >= 2, x) = (-1)^(n+1) n! zeta(n + 1, x)`, the Hurwitz zeta as ATen (Cephes)
//!   computes it: a direct sum, then the Euler-Maclaurin tail with 12 Bernoulli terms; the sum
//!   runs over 20 terms so the tail starts past 9 for every `x > -11`;
//! - `mvlgamma(x, p) = p (p - 1) / 4 ln(pi) + sum_i lgamma(x - i / 2)`, a decomposition into
//!   `lgamma` kernels and additions, as PyTorch's composite is. PyTorch checks that
//!   every element exceeds `(p - 1) / 2`; reading the values back to check would synchronise,
//!   so here smaller elements give what the formula gives.

use std::f64::consts::PI;

use super::{Ex, float1};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `ln Gamma(x)` for `x >= 0.5`: Stirling at `z = x + 8`.
fn lgamma_pos(e: &mut Ex, x: PRef) -> PRef {
    let mut logs = e.log(x);
    for k in 1..8 {
        let t = e.addk(x, k as f64);
        let l = e.log(t);
        logs = e.add(logs, l);
    }
    let z = e.addk(x, 8.0);
    let lz = e.log(z);
    let zh = e.addk(z, -0.5);
    let a = e.mul(zh, lz);
    let a = e.sub(a, z);
    let a = e.addk(a, 0.5 * (2.0 * PI).ln());
    let iz = e.kdiv(1.0, z);
    let iz2 = e.mul(iz, iz);
    // 1/(12 z) - 1/(360 z^3) + 1/(1260 z^5) - 1/(1680 z^7)
    let s = e.poly(
        iz2,
        &[-1.0 / 1680.0, 1.0 / 1260.0, -1.0 / 360.0, 1.0 / 12.0],
    );
    let s = e.mul(s, iz);
    let a = e.add(a, s);
    e.sub(a, logs)
}

/// `ln |Gamma(x)|`.
pub(super) fn lgamma(e: &mut Ex, x: PRef) -> PRef {
    let small = e.ltk(x, 0.5);
    let one_m = e.ksub(1.0, x);
    let arg = e.sel(small, one_m, x);
    let g = lgamma_pos(e, arg);
    // Reflection: ln(pi / |sin(pi x)|) - lgamma(1 - x), with sin(pi x) of the fractional part.
    let t = e.trunc(x);
    // |sin(pi x)| has period 1: x - round(x) in [-1/2, 1/2] is exact in f32.
    let rn = e.round(x);
    let r = e.sub(x, rn);
    let pr = e.mulk(r, PI);
    let s = e.sin(pr);
    let s = e.abs(s);
    let q = e.kdiv(PI, s);
    let l = e.log(q);
    let refl = e.sub(l, g);
    let out = e.sel(small, refl, g);
    // Poles (0 and the negative integers) are +inf; +-inf give +inf.
    let pole = e.eq(x, t);
    let le0 = e.lek(x, 0.0);
    let pole = e.and(pole, le0);
    let out = e.selk(pole, f64::INFINITY, out);
    let inf = e.isinf(x);
    let out = e.selk(inf, f64::INFINITY, out);
    let nan = e.isnan(x);
    e.sel(nan, x, out)
}

/// `digamma(x)` for `x > 0` (no special values): ten recurrence steps, then the series.
fn digamma_pos(e: &mut Ex, x: PRef) -> PRef {
    let mut acc = e.kdiv(1.0, x);
    for k in 1..10 {
        let t = e.addk(x, k as f64);
        let r = e.kdiv(1.0, t);
        acc = e.add(acc, r);
    }
    let z = e.addk(x, 10.0);
    let iz = e.kdiv(1.0, z);
    let iz2 = e.mul(iz, iz);
    let y = e.poly(
        iz2,
        &[
            8.333_333_333_333_333e-2,
            -2.109_279_609_279_609e-2,
            7.575_757_575_757_576e-3,
            -4.166_666_666_666_667e-3,
            3.968_253_968_253_968e-3,
            -8.333_333_333_333_333e-3,
            8.333_333_333_333_333e-2,
        ],
    );
    let y = e.mul(y, iz2);
    let l = e.log(z);
    let h = e.mulk(iz, 0.5);
    let r = e.sub(l, h);
    let r = e.sub(r, y);
    e.sub(r, acc)
}

/// `digamma(x)`.
fn digamma(e: &mut Ex, x: PRef) -> PRef {
    let neg = e.ltk(x, 0.0);
    let one_m = e.ksub(1.0, x);
    let arg = e.sel(neg, one_m, x);
    let p = digamma_pos(e, arg);
    let t = e.trunc(x);
    // pi / tan(pi x) has period 1: take x - round(x) in [-1/2, 1/2], exact in f32.
    let rn = e.round(x);
    let r = e.sub(x, rn);
    let pr = e.mulk(r, PI);
    let (s, c) = (e.sin(pr), e.cos(pr));
    let pc = e.mulk(c, PI);
    let cot = e.div(pc, s);
    let refl = e.sub(p, cot);
    let out = e.sel(neg, refl, p);
    let int = e.eq(x, t);
    let negint = e.and(neg, int);
    let out = e.selk(negint, f64::NAN, out);
    // +0 -> -inf, -0 -> +inf.
    let zero = e.eqk(x, 0.0);
    let ninf = e.kdiv(-1.0, x);
    let out = e.sel(zero, ninf, out);
    let pinf = e.eqk(x, f64::INFINITY);
    let out = e.selk(pinf, f64::INFINITY, out);
    let nan = e.isnan(x);
    e.sel(nan, x, out)
}

/// ATen's `calc_trigamma` (float).
fn trigamma(e: &mut Ex, x: PRef) -> PRef {
    let small = e.ltk(x, 0.5);
    let px = e.mulk(x, PI);
    let s = e.sin(px);
    let s2 = e.mul(s, s);
    let refl = e.kdiv(-PI * PI, s2);
    let zero = e.k(0.0);
    let mut result = e.sel(small, refl, zero);
    let one_m = e.ksub(1.0, x);
    let mut x = e.sel(small, one_m, x);
    for _ in 0..6 {
        let xx = e.mul(x, x);
        let r = e.kdiv(1.0, xx);
        result = e.add(result, r);
        x = e.addk(x, 1.0);
    }
    let xx = e.mul(x, x);
    let ixx = e.kdiv(1.0, xx);
    // (1 + 1/(2x) + ixx (1/6 - ixx (1/30 - ixx / 42))) / x
    let a = e.mulk(ixx, 1.0 / 42.0);
    let a = e.ksub(1.0 / 30.0, a);
    let a = e.mul(ixx, a);
    let a = e.ksub(1.0 / 6.0, a);
    let a = e.mul(ixx, a);
    let h = e.kdiv(0.5, x);
    let b = e.addk(h, 1.0);
    let b = e.add(b, a);
    let b = e.div(b, x);
    let result = e.add(result, b);
    e.with_sign(result, small)
}

/// `a^-s` for a whole `s >= 1`, by repeated multiplication (exact signs for negative `a`).
fn inv_pow(e: &mut Ex, a: PRef, s: u32) -> PRef {
    let mut acc = a;
    for _ in 1..s {
        acc = e.mul(acc, a);
    }
    e.kdiv(1.0, acc)
}

/// The Euler-Maclaurin coefficients of Cephes' `zeta` (`A[]`).
const ZETA_A: [f64; 12] = [
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.892_437_580_318_379_2e9,
    7.472_424_96e10,
    -2.950_130_727_918_164e12,
    1.164_678_281_435_006_7e14,
    -4.597_978_722_407_473e15,
    1.815_210_540_194_354_7e17,
    -7.166_165_256_175_667e18,
];

/// Terms of the direct sum before the Euler-Maclaurin tail.
const ZETA_TERMS: u32 = 20;

/// The Hurwitz zeta `zeta(s, q)` for a whole `s >= 2` (ATen's/Cephes' algorithm, unrolled).
fn zeta_int(e: &mut Ex, s: u32, q: PRef) -> PRef {
    let mut sum = inv_pow(e, q, s);
    let mut a = q;
    let mut b = sum;
    for _ in 1..ZETA_TERMS {
        a = e.addk(a, 1.0);
        b = inv_pow(e, a, s);
        sum = e.add(sum, b);
    }
    let w = a;
    let sf = s as f64;
    // s += b w / (s - 1) - b / 2
    let bw = e.mul(b, w);
    let t = e.mulk(bw, 1.0 / (sf - 1.0));
    sum = e.add(sum, t);
    let hb = e.mulk(b, 0.5);
    sum = e.sub(sum, hb);
    // The tail: a and k are numbers known here; b /= w each step.
    let mut ak = 1.0f64;
    let mut k = 0.0f64;
    for coeff in ZETA_A {
        ak *= sf + k;
        b = e.div(b, w);
        let t = e.mulk(b, ak / coeff);
        sum = e.add(sum, t);
        k += 1.0;
        ak *= sf + k;
        b = e.div(b, w);
        k += 1.0;
    }
    // q a pole (0 or a negative integer): +inf.
    let t = e.trunc(q);
    let int = e.eq(q, t);
    let le0 = e.lek(q, 0.0);
    let pole = e.and(int, le0);
    e.selk(pole, f64::INFINITY, sum)
}

/// `polygamma(n, x)`.
#[aten("aten::polygamma", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), call = Polygamma(n, self_))]
pub fn polygamma(n: i64, x: &Tensor) -> Result<Tensor> {
    let name = Polygamma::NAME;
    match n {
        i64::MIN..=-1 => Err(TpuError::BadArgs(
            "polygamma(n, x) does not support negative n.".into(),
        )),
        0 => float1(name, x, digamma),
        1 => float1(name, x, trigamma),
        n if n > 40 => Err(TpuError::Unsupported(format!(
            "polygamma of order {n}: orders above 40 are not implemented on the device"
        ))),
        n => {
            let s = n as u32 + 1;
            let fact: f64 = (1..=n).map(|k| k as f64).product();
            let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
            float1(name, x, move |e, v| {
                let z = zeta_int(e, s, v);
                e.mulk(z, sign * fact)
            })
        }
    }
}

/// `mvlgamma(x, p)`.
#[aten(
    "aten::mvlgamma",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    kind = Decomposition,
    call = Mvlgamma(self_, p)
)]
pub fn mvlgamma(x: &Tensor, p: i64) -> Result<Tensor> {
    if p < 1 {
        return Err(TpuError::BadArgs(
            "p has to be greater than or equal to 1".into(),
        ));
    }
    // As PyTorch's composite: lgamma of `x - i/2` for each `i`, summed, plus the constant (in
    // the input's dtype, float32 for integers), one lgamma kernel per term.
    let x = if x.dtype().is_float() {
        x.clone()
    } else {
        x.to_dtype(DType::F32)?
    };
    let mut acc = float1(Lgamma::NAME, &x, lgamma)?;
    for i in 1..p {
        let t = x.add_scalar(-(i as f64) / 2.0)?;
        acc = acc.add(&float1(Lgamma::NAME, &t, lgamma)?)?;
    }
    acc.add_scalar((p * (p - 1)) as f64 / 4.0 * PI.ln())
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::lgamma", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn lgamma_op(a: Lgamma<'_>) -> Result<Tensor> {
    float1(Lgamma::NAME, a.self_, lgamma)
}

#[aten("aten::digamma", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn digamma_op(a: Digamma<'_>) -> Result<Tensor> {
    float1(Digamma::NAME, a.self_, digamma)
}
