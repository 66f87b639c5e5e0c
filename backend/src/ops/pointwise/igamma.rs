//! The regularized incomplete gamma functions `igamma(a, x) = P(a, x)` and
//! `igammac(a, x) = Q(a, x) = 1 - P(a, x)`, as ATen's `calc_igamma` / `calc_igammac` (Cephes,
//! with the regions of DiDonato and Morris, section 3) choose between three expansions:
//! - the power series `P = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))`;
//! - the continued fraction for `Q` when `x > 1.1` and `x >= a`;
//! - for small `x` (at most 1.1), `Q = -expm1(a ln x - lgamma(1 + a)) - x^a / Gamma(a) *
//!   sum_n (-x)^n / (n! (a + n))`, which keeps `Q`'s accuracy where `P` is near 1.
//!
//! A vector unit has no per-lane trip counts: each expansion runs a fixed number of steps
//! (`SERIES` terms, `FRACTION` steps, `SMALL` terms), past where the loops of ATen stop for
//! `a` up to about 200 (a term below float32's epsilon changes nothing), and every region is
//! computed and selected. ATen's asymptotic expansion for `a` above 20 with `x` near `a`
//! (Temme's) is not used: there the series and the fraction still converge within the steps
//! for `a` up to about 200, to float32 accuracy. The special values are ATen's: NaN for a
//! negative argument or `a = x = 0`, `P(0, x > 0) = 1`, `P(a, 0) = 0`, `P(inf, x) = 0` (NaN at
//! `x = inf`), `P(a, inf) = 1`; NaN in, NaN out.

use super::gamma::lgamma;
use super::{Arg, Ex, float2};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// Terms of the power series.
const SERIES: u32 = 96;
/// Steps of the continued fraction.
const FRACTION: u32 = 64;
/// Terms of the small-`x` series for `Q`.
const SMALL: u32 = 24;
/// The continued fraction's rescaling threshold (Cephes' `big` for float: 2^24).
const BIG: f64 = 16_777_216.0;

/// `x^a e^-x / Gamma(a)`, as `exp(a ln x - x - lgamma(a))`.
fn fac(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let lx = e.log(x);
    let t = e.mul(a, lx);
    let t = e.sub(t, x);
    let lg = lgamma(e, a);
    let t = e.sub(t, lg);
    e.exp(t)
}

/// `P(a, x)` by the power series.
fn p_series(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let mut r = a;
    let mut c = e.k(1.0);
    let mut sum = e.k(1.0);
    for _ in 0..SERIES {
        r = e.addk(r, 1.0);
        let q = e.div(x, r);
        c = e.mul(c, q);
        sum = e.add(sum, c);
    }
    let f = fac(e, a, x);
    let t = e.mul(sum, f);
    e.div(t, a)
}

/// `Q(a, x)` by the continued fraction (for `x > 1.1`, `x >= a`).
fn q_fraction(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let mut y = e.ksub(1.0, a);
    let xy = e.add(x, y);
    let mut z = e.addk(xy, 1.0);
    let mut c = e.k(0.0);
    let mut pkm2 = e.k(1.0);
    let mut qkm2 = x;
    let mut pkm1 = e.addk(x, 1.0);
    let mut qkm1 = e.mul(z, x);
    let mut ans = e.div(pkm1, qkm1);
    for _ in 0..FRACTION {
        c = e.addk(c, 1.0);
        y = e.addk(y, 1.0);
        z = e.addk(z, 2.0);
        let yc = e.mul(y, c);
        let a1 = e.mul(pkm1, z);
        let b1 = e.mul(pkm2, yc);
        let pk = e.sub(a1, b1);
        let a2 = e.mul(qkm1, z);
        let b2 = e.mul(qkm2, yc);
        let qk = e.sub(a2, b2);
        let r = e.div(pk, qk);
        let zero = e.eqk(qk, 0.0);
        ans = e.sel(zero, ans, r);
        pkm2 = pkm1;
        pkm1 = pk;
        qkm2 = qkm1;
        qkm1 = qk;
        // Rescaled together when they grow large (the ratios are unchanged).
        let ap = e.abs(pk);
        let big = e.gtk(ap, BIG);
        let s = e.k(1.0 / BIG);
        let one = e.k(1.0);
        let s = e.sel(big, s, one);
        pkm2 = e.mul(pkm2, s);
        pkm1 = e.mul(pkm1, s);
        qkm2 = e.mul(qkm2, s);
        qkm1 = e.mul(qkm1, s);
    }
    let f = fac(e, a, x);
    e.mul(ans, f)
}

/// `Q(a, x)` for small `x` (at most 1.1).
fn q_small(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let mut f = e.k(1.0);
    let mut sum = e.k(0.0);
    let nx = e.neg(x);
    for n in 1..=SMALL {
        let q = e.mulk(nx, 1.0 / n as f64);
        f = e.mul(f, q);
        let an = e.addk(a, n as f64);
        let term = e.div(f, an);
        sum = e.add(sum, term);
    }
    let lx = e.log(x);
    let alx = e.mul(a, lx);
    let a1 = e.addk(a, 1.0);
    let lg1 = lgamma(e, a1);
    let t = e.sub(alx, lg1);
    let t = e.expm1(t);
    let head = e.neg(t);
    let lg = lgamma(e, a);
    let u = e.sub(alx, lg);
    let u = e.exp(u);
    let tail = e.mul(u, sum);
    e.sub(head, tail)
}

/// `Q(a, x)` away from the special values, by region (ATen's `calc_igammac`).
fn q_regions(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let p = p_series(e, a, x);
    let one_m_p = e.ksub(1.0, p);
    let cf = q_fraction(e, a, x);
    let small = q_small(e, a, x);
    // x > 1.1: x < a ? 1 - P : fraction.
    let x_lt_a = e.lt(x, a);
    let above = e.sel(x_lt_a, one_m_p, cf);
    // x <= 0.5: -0.4 / ln x < a ? 1 - P : small series.
    let lx = e.log(x);
    let r = e.kdiv(-0.4, lx);
    let r_lt_a = e.lt(r, a);
    let low = e.sel(r_lt_a, one_m_p, small);
    // otherwise: 1.1 x < a ? 1 - P : small series.
    let x11 = e.mulk(x, 1.1);
    let x11_lt_a = e.lt(x11, a);
    let mid = e.sel(x11_lt_a, one_m_p, small);
    let gt11 = e.gtk(x, 1.1);
    let le05 = e.lek(x, 0.5);
    let below = e.sel(le05, low, mid);
    e.sel(gt11, above, below)
}

/// The special values, `P`'s way (`q = false`) or `Q`'s.
fn special(e: &mut Ex, a: PRef, x: PRef, v: PRef, q: bool) -> PRef {
    let (zero, one) = if q { (1.0, 0.0) } else { (0.0, 1.0) };
    let nan = f64::NAN;
    // Checked from the last to the first, so that the first that holds wins (ATen's order).
    let xinf = e.isinf(x);
    let v = e.selk(xinf, one, v);
    let ainf = e.isinf(a);
    let both = e.and(ainf, xinf);
    let zero_k = e.k(zero);
    let at_inf = e.selk(both, nan, zero_k);
    let v = e.sel(ainf, at_inf, v);
    let x0 = e.eqk(x, 0.0);
    let v = e.selk(x0, zero, v);
    let a0 = e.eqk(a, 0.0);
    let xpos = e.gtk(x, 0.0);
    let nan_k = e.k(nan);
    let at_a0 = e.selk(xpos, one, nan_k);
    let v = e.sel(a0, at_a0, v);
    let xneg = e.ltk(x, 0.0);
    let aneg = e.ltk(a, 0.0);
    let neg = e.or(xneg, aneg);
    let v = e.selk(neg, nan, v);
    let xn = e.isnan(x);
    let an = e.isnan(a);
    let n = e.or(xn, an);
    e.selk(n, nan, v)
}

/// `P(a, x)`: `1 - Q` where `x > 1` and `x > a`, else the series.
pub(super) fn igamma(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let q = q_regions(e, a, x);
    let one_m_q = e.ksub(1.0, q);
    let p = p_series(e, a, x);
    let gt1 = e.gtk(x, 1.0);
    let gta = e.gt(x, a);
    let upper = e.and(gt1, gta);
    let v = e.sel(upper, one_m_q, p);
    special(e, a, x, v, false)
}

/// `Q(a, x)`.
pub(super) fn igammac(e: &mut Ex, a: PRef, x: PRef) -> PRef {
    let v = q_regions(e, a, x);
    special(e, a, x, v, true)
}

#[aten("aten::igamma", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn igamma_op(a: Igamma<'_>) -> Result<Tensor> {
    float2(
        Igamma::NAME,
        Arg::Tensor(a.self_),
        Arg::Tensor(a.other),
        igamma,
    )
}

#[aten("aten::igammac", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn igammac_op(a: Igammac<'_>) -> Result<Tensor> {
    float2(
        Igammac::NAME,
        Arg::Tensor(a.self_),
        Arg::Tensor(a.other),
        igammac,
    )
}
