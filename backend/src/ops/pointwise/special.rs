//! `erfinv`, `special_ndtri`, `special_erfcx`, `special_log_ndtr` and `special_zeta` as ATen
//! computes them (`Math.h`), in f32 lanes, every branch computed and selected:
//!
//! - `erfinv(y)`: a rational first guess (central for `|y| <= 0.7`, tail in `sqrt(-log((1 -
//!   |y|) / 2))` outside), then two Newton steps on the vector unit's `erf`; `±1` give `±inf`,
//!   `|y| > 1` NaN;
//! - `special_ndtri(p)`: Cephes' `ndtri`, a rational function of `p - 1/2` in the centre and of
//!   `1 / sqrt(-2 log p)` in the tails (two tables, split at 8); 0 and 1 give `∓inf`, outside
//!   [0, 1] NaN;
//! - `special_erfcx(x) = exp(x^2) erfc(x)`: for `x >= 1` Cephes' rational approximations of
//!   `erfc(x) exp(x^2)` (`P/Q` below 8, `R/S` above: the same functions ATen's Faddeeva code
//!   approximates, to float32 precision), below 1 `exp(x^2) (1 - erf(x))` with Cephes' `erf`,
//!   for `x < 0` the reflection `2 exp(x^2) - erfcx(-x)` (infinite below about -9.3);
//! - `special_log_ndtr(x)`: ATen's formula, `log(erfcx(-t) / 2) - t^2` for `x < -1`, else
//!   `log1p(-erfc(t) / 2)`, `t = x / sqrt 2`;
//! - `special_zeta(x, q)`: the Hurwitz zeta as Cephes sums it, here always 20 direct terms then
//!   the 12-term Euler-Maclaurin tail (Cephes stops early once a term falls below its epsilon;
//!   the terms after that do not change an f32 result); `x == 1` is `inf`, `x < 1` NaN, `q` a
//!   pole (0 or a negative integer) `inf`, and a negative non-integer `q` with a non-integer
//!   `x` NaN.

use super::cephes::*;
use super::{Arg, Ex, float1, float2};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `erfinv(y)`.
fn erfinv(e: &mut Ex, y: PRef) -> PRef {
    let a = e.abs(y);
    let z = e.mul(y, y);
    let num = e.poly(
        z,
        &[-0.140_543_331, 0.914_624_893, -1.645_349_621, 0.886_226_899],
    );
    let dem = e.poly(
        z,
        &[
            0.012_229_801,
            -0.329_097_515,
            1.442_710_462,
            -2.118_377_725,
            1.0,
        ],
    );
    let c = e.mul(y, num);
    let central = e.div(c, dem);
    let om = e.ksub(1.0, a);
    let h = e.mulk(om, 0.5);
    let l = e.log(h);
    let l = e.neg(l);
    let t = e.sqrt(l);
    let num = e.poly(
        t,
        &[1.641_345_311, 3.429_567_803, -1.624_906_493, -1.970_840_454],
    );
    let dem = e.poly(t, &[1.637_067_8, 3.543_889_2, 1.0]);
    let neg = e.ltk(y, 0.0);
    let num = e.with_sign(num, neg);
    let tail = e.div(num, dem);
    let inner = e.lek(a, 0.7);
    let mut x = e.sel(inner, central, tail);
    // Two Newton steps: x -= (erf(x) - y) / (2/sqrt(pi) exp(-x^2)).
    for _ in 0..2 {
        let er = e.erf(x);
        let d = e.sub(er, y);
        let xx = e.mul(x, x);
        let nxx = e.neg(xx);
        let ex = e.exp(nxx);
        let s = e.mulk(ex, std::f64::consts::FRAC_2_SQRT_PI);
        let q = e.div(d, s);
        x = e.sub(x, q);
    }
    let one = e.eqk(a, 1.0);
    let inf = e.k(f64::INFINITY);
    let inf = e.with_sign(inf, neg);
    let x = e.sel(one, inf, x);
    let out = e.gtk(a, 1.0);
    e.selk(out, f64::NAN, x)
}

/// `ndtri(p)`.
fn ndtri(e: &mut Ex, y0: PRef) -> PRef {
    const EXP_M2: f64 = 0.135_335_283_236_612_7;
    const S2PI: f64 = 2.506_628_274_631_000_7;
    let upper = e.gtk(y0, 1.0 - EXP_M2);
    let flip = e.ksub(1.0, y0);
    let y = e.sel(upper, flip, y0);
    // Centre: y in (exp(-2), 1 - exp(-2)].
    let c = e.addk(y, -0.5);
    let c2 = e.mul(c, c);
    let p = e.poly(c2, &NDTRI_P0);
    let q = e.poly(c2, &NDTRI_Q0);
    let r = e.mul(c2, p);
    let r = e.div(r, q);
    let r = e.mul(c, r);
    let centre = e.add(c, r);
    let centre = e.mulk(centre, S2PI);
    // Tails.
    let l = e.log(y);
    let l = e.mulk(l, -2.0);
    let x = e.sqrt(l);
    let lx = e.log(x);
    let lxx = e.div(lx, x);
    let x0 = e.sub(x, lxx);
    let z = e.kdiv(1.0, x);
    let p1 = e.poly(z, &NDTRI_P1);
    let q1 = e.poly(z, &NDTRI_Q1);
    let p2 = e.poly(z, &NDTRI_P2);
    let q2 = e.poly(z, &NDTRI_Q2);
    let near = e.ltk(x, 8.0);
    let p = e.sel(near, p1, p2);
    let q = e.sel(near, q1, q2);
    let x1 = e.mul(z, p);
    let x1 = e.div(x1, q);
    let t = e.sub(x0, x1);
    // `code` (the lower tail) negates.
    let nt = e.neg(t);
    let tail = e.sel(upper, t, nt);
    let mid = e.gtk(y, EXP_M2);
    let out = e.sel(mid, centre, tail);
    let zero = e.eqk(y0, 0.0);
    let out = e.selk(zero, f64::NEG_INFINITY, out);
    let one = e.eqk(y0, 1.0);
    let out = e.selk(one, f64::INFINITY, out);
    let lo = e.ltk(y0, 0.0);
    let hi = e.gtk(y0, 1.0);
    let bad = e.or(lo, hi);
    e.selk(bad, f64::NAN, out)
}

/// `erf(x)` for `|x| < 1` (Cephes: `x T(x^2) / U(x^2)`).
fn erf_small(e: &mut Ex, x: PRef) -> PRef {
    let z = e.mul(x, x);
    let t = e.poly(z, &ERF_T);
    let u = e.poly1(z, &ERF_U);
    let n = e.mul(x, t);
    e.div(n, u)
}

/// `erfcx(a)` for `a >= 0` (and `+inf`: 0).
fn erfcx_pos(e: &mut Ex, a: PRef) -> PRef {
    let er = erf_small(e, a);
    let c = e.ksub(1.0, er);
    let aa = e.mul(a, a);
    let ex = e.exp(aa);
    let below1 = e.mul(ex, c);
    let p = e.poly(a, &ERFC_P);
    let q = e.poly1(a, &ERFC_Q);
    let mid = e.div(p, q);
    let r = e.poly(a, &ERFC_R);
    let s = e.poly1(a, &ERFC_S);
    let far = e.div(r, s);
    let lt8 = e.ltk(a, 8.0);
    let out = e.sel(lt8, mid, far);
    let lt1 = e.ltk(a, 1.0);
    let out = e.sel(lt1, below1, out);
    let inf = e.isinf(a);
    e.selk(inf, 0.0, out)
}

/// `erfcx(x)`.
fn erfcx(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let c = erfcx_pos(e, a);
    let xx = e.mul(x, x);
    let ex = e.exp(xx);
    let two = e.mulk(ex, 2.0);
    let refl = e.sub(two, c);
    let neg = e.ltk(x, 0.0);
    e.sel(neg, refl, c)
}

/// `erfc(t)` for `t > -1`.
fn erfc_above_m1(e: &mut Ex, t: PRef) -> PRef {
    let er = erf_small(e, t);
    let near = e.ksub(1.0, er);
    let a = e.abs(t);
    let c = erfcx_pos(e, a);
    let tt = e.mul(t, t);
    let ntt = e.neg(tt);
    let ex = e.exp(ntt);
    let far = e.mul(ex, c);
    let lt1 = e.ltk(a, 1.0);
    e.sel(lt1, near, far)
}

/// `log_ndtr(x)`.
fn log_ndtr(e: &mut Ex, x: PRef) -> PRef {
    let t = e.mulk(x, std::f64::consts::FRAC_1_SQRT_2);
    let nt = e.neg(t);
    let c = erfcx_pos(e, nt);
    let h = e.mulk(c, 0.5);
    let l = e.log(h);
    let tt = e.mul(t, t);
    let lo = e.sub(l, tt);
    let ec = erfc_above_m1(e, t);
    let h = e.mulk(ec, -0.5);
    let hi = e.log1p(h);
    let low = e.ltk(x, -1.0);
    e.sel(low, lo, hi)
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

/// `a^-x`.
fn pow_neg(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let nx = e.neg(x);
    e.pow(a, nx)
}

/// The Hurwitz zeta `zeta(x, q)`.
fn zeta(e: &mut Ex, x: PRef, q: PRef) -> PRef {
    let mut s = pow_neg(e, q, x);
    let mut a = q;
    let mut b = s;
    for _ in 0..20 {
        a = e.addk(a, 1.0);
        b = pow_neg(e, a, x);
        s = e.add(s, b);
    }
    let w = a;
    let bw = e.mul(b, w);
    let xm = e.addk(x, -1.0);
    let t = e.div(bw, xm);
    s = e.add(s, t);
    let hb = e.mulk(b, 0.5);
    s = e.sub(s, hb);
    let mut ak = e.k(1.0);
    let mut k = 0.0;
    for coeff in ZETA_A {
        let xk = e.addk(x, k);
        ak = e.mul(ak, xk);
        b = e.div(b, w);
        let t = e.mul(ak, b);
        let t = e.mulk(t, 1.0 / coeff);
        s = e.add(s, t);
        k += 1.0;
        let xk = e.addk(x, k);
        ak = e.mul(ak, xk);
        b = e.div(b, w);
        k += 1.0;
    }
    // Domain: x == 1 -> inf; x < 1 -> NaN; q <= 0: a pole when whole, else NaN unless x whole.
    let qle0 = e.lek(q, 0.0);
    let qf = e.floor(q);
    let qint = e.eq(q, qf);
    let pole = e.and(qle0, qint);
    let xf = e.floor(x);
    let xint = e.eq(x, xf);
    let xfrac = e.not(xint);
    let qbad = e.and(qle0, xfrac);
    let out = e.selk(qbad, f64::NAN, s);
    let out = e.selk(pole, f64::INFINITY, out);
    let lt1 = e.ltk(x, 1.0);
    let out = e.selk(lt1, f64::NAN, out);
    let one = e.eqk(x, 1.0);
    e.selk(one, f64::INFINITY, out)
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::erfinv", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn erfinv_op(a: Erfinv<'_>) -> Result<Tensor> {
    float1(Erfinv::NAME, a.self_, erfinv)
}

#[aten("aten::special_ndtri", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_ndtri_op(a: SpecialNdtri<'_>) -> Result<Tensor> {
    float1(SpecialNdtri::NAME, a.self_, ndtri)
}

#[aten("aten::special_erfcx", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_erfcx_op(a: SpecialErfcx<'_>) -> Result<Tensor> {
    float1(SpecialErfcx::NAME, a.self_, erfcx)
}

#[aten("aten::special_log_ndtr", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_log_ndtr_op(a: SpecialLogNdtr<'_>) -> Result<Tensor> {
    float1(SpecialLogNdtr::NAME, a.self_, log_ndtr)
}

#[aten("aten::special_zeta", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_zeta_op(a: SpecialZeta<'_>) -> Result<Tensor> {
    float2(
        SpecialZeta::NAME,
        Arg::Tensor(a.self_),
        Arg::Tensor(a.other),
        zeta,
    )
}
