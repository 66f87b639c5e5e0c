//! Bessel and Airy functions as ATen computes them (its Cephes-derived `Math.h`), in f32 lanes
//! with every branch computed and the right one selected (a vector unit has no per-lane
//! branches); integer and bool inputs compute as float32, bf16 and f16 upcast and round once:
//!
//! - `i0`, `special_i0e`, `special_i1`, `special_i1e`: Chebyshev series (`chbevl`) on [0, 8] and
//!   on the inverted interval (8, inf), scaled by `exp(|x|)` and `1 / sqrt(|x|)`; `i1`/`i1e` use
//!   ATen's shorter float32 tables;
//! - `special_modified_bessel_i0/i1/k0/k1`, `special_scaled_modified_bessel_k0/k1`: the same
//!   series (`k` on [0, 2] and (2, inf), with `log(x/2) i(x)` below 2);
//! - `special_bessel_j0/j1/y0/y1`: a rational function of `x^2` up to 5, the asymptotic
//!   Hankel form (`P cos - Q sin` over `sqrt x`) above;
//! - `special_airy_ai`: the power series for `-2.09 <= x < 2.09` (ten terms: ATen sums until a
//!   term drops below float32's epsilon, which ten terms always reach there), the asymptotic
//!   rational forms outside, 0 above 103.892, NaN at the infinities;
//! - `special_spherical_bessel_j0`: `sin(x) / x`, its Taylor series below 0.5, 0 at infinity.

use std::f64::consts::{FRAC_PI_4, PI};

use super::cephes::*;
use super::{Ex, float1};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `sqrt(2 / pi)`.
const SQRT_2_PI: f64 = 0.797_884_560_802_865_4;
/// `2 / pi`.
const TWO_PI: f64 = 0.636_619_772_367_581_3;

/// The Chebyshev arguments and the branch of the `i` functions at `a = |x|`: `(a <= 8, a / 2 - 2,
/// 32 / a - 2)`.
fn i_args(e: &mut Ex, a: PRef) -> (PRef, PRef, PRef) {
    let small = e.lek(a, 8.0);
    let h = e.mulk(a, 0.5);
    let ya = e.addk(h, -2.0);
    let r = e.kdiv(32.0, a);
    let yb = e.addk(r, -2.0);
    (small, ya, yb)
}

/// `exp(-|x|) I0(x)`.
fn i0e(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let (small, ya, yb) = i_args(e, a);
    let ca = e.chbevl(ya, &I0E_A);
    let cb = e.chbevl(yb, &I0E_B);
    let s = e.sqrt(a);
    let cb = e.div(cb, s);
    e.sel(small, ca, cb)
}

/// `I0(x)`.
fn i0(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let (small, ya, yb) = i_args(e, a);
    let ex = e.exp(a);
    let ca = e.chbevl(ya, &I0E_A);
    let ca = e.mul(ex, ca);
    let cb = e.chbevl(yb, &I0E_B);
    let cb = e.mul(ex, cb);
    let s = e.sqrt(a);
    let cb = e.div(cb, s);
    e.sel(small, ca, cb)
}

/// `I1(x)` (`scaled`: `exp(-|x|) I1(x)`) with the given tables.
fn i1_with(e: &mut Ex, x: PRef, ta: &[f64], tb: &[f64], scaled: bool) -> PRef {
    let a = e.abs(x);
    let (small, ya, yb) = i_args(e, a);
    let ca = e.chbevl(ya, ta);
    let cb = e.chbevl(yb, tb);
    let (ca, cb) = if scaled {
        (e.mul(ca, a), cb)
    } else {
        let ex = e.exp(a);
        let t = e.mul(ex, a);
        (e.mul(t, ca), e.mul(ex, cb))
    };
    let s = e.sqrt(a);
    let cb = e.div(cb, s);
    let out = e.sel(small, ca, cb);
    let neg = e.ltk(x, 0.0);
    e.with_sign(out, neg)
}

/// `K0(x)` (`scaled`: `exp(x) K0(x)`).
fn k0(e: &mut Ex, x: PRef, scaled: bool) -> PRef {
    let (small, ca, l) = k_small(e, x, &K0_A);
    let i = i0(e, x);
    let li = e.mul(l, i);
    let lo = e.sub(ca, li);
    k_join(e, x, small, lo, &K0_B, scaled)
}

/// `K1(x)` (`scaled`: `exp(x) K1(x)`).
fn k1(e: &mut Ex, x: PRef, scaled: bool) -> PRef {
    let (small, ca, l) = k_small(e, x, &K1_A);
    let i = i1_with(e, x, &I1E_A, &I1E_B, false);
    let li = e.mul(l, i);
    let cx = e.div(ca, x);
    let lo = e.add(li, cx);
    k_join(e, x, small, lo, &K1_B, scaled)
}

/// The start of `K0`/`K1` below 2: `x <= 2`, the series `chbevl(x² - 2, a)` and `log(x / 2)`.
fn k_small(e: &mut Ex, x: PRef, a: &[f64]) -> (PRef, PRef, PRef) {
    let small = e.lek(x, 2.0);
    let xx = e.mul(x, x);
    let ya = e.addk(xx, -2.0);
    let ca = e.chbevl(ya, a);
    let h = e.mulk(x, 0.5);
    let l = e.log(h);
    (small, ca, l)
}

/// The rest of `K0`/`K1`: above 2, `chbevl(8 / x - 2, b) / sqrt(x)` times `exp(-x)`
/// (`scaled`: `lo`, the value below 2, times `exp(x)` instead); `lo` where `small`; the edges.
fn k_join(e: &mut Ex, x: PRef, small: PRef, lo: PRef, b: &[f64], scaled: bool) -> PRef {
    let mut lo = lo;
    let r = e.kdiv(8.0, x);
    let yb = e.addk(r, -2.0);
    let mut hi = e.chbevl(yb, b);
    let s = e.sqrt(x);
    if scaled {
        let ex = e.exp(x);
        lo = e.mul(lo, ex);
    } else {
        let nx = e.neg(x);
        let ex = e.exp(nx);
        hi = e.mul(ex, hi);
    }
    let hi = e.div(hi, s);
    let out = e.sel(small, lo, hi);
    k_edges(e, x, out)
}

/// `K(0) = inf`, `K(x < 0) = NaN`.
fn k_edges(e: &mut Ex, x: PRef, out: PRef) -> PRef {
    let zero = e.eqk(x, 0.0);
    let neg = e.ltk(x, 0.0);
    let out = e.selk(neg, f64::NAN, out);
    e.selk(zero, f64::INFINITY, out)
}

/// The Hankel asymptotic form of `J`/`Y` above 5: `(P/Q cos(a - phase) - 5/a (R/S) sin(a -
/// phase)) sqrt(2/pi) / sqrt(a)`; for `Y`, sin and cos trade places and the sign turns.
struct Hankel {
    pp: &'static [f64],
    pq: &'static [f64],
    qp: &'static [f64],
    qq: &'static [f64],
    phase: f64,
    /// `25 / a^2` (order 0) or `(5 / a)^2` (order 1), as ATen writes each.
    square_first: bool,
}

fn hankel(e: &mut Ex, a: PRef, h: &Hankel, y: bool) -> PRef {
    let w = if h.square_first {
        let aa = e.mul(a, a);
        e.kdiv(25.0, aa)
    } else {
        let f = e.kdiv(5.0, a);
        e.mul(f, f)
    };
    let pp = e.poly(w, h.pp);
    let pq = e.poly(w, h.pq);
    let qp = e.poly(w, h.qp);
    let qq = e.poly(w, h.qq);
    let t = e.addk(a, -h.phase);
    let (c, s) = (e.cos(t), e.sin(t));
    let p = e.div(pp, pq);
    let f = e.kdiv(5.0, a);
    let q = e.div(qp, qq);
    let fq = e.mul(f, q);
    let r = if y {
        let u = e.mul(p, s);
        let v = e.mul(fq, c);
        e.add(u, v)
    } else {
        let u = e.mul(p, c);
        let v = e.mul(fq, s);
        e.sub(u, v)
    };
    let r = e.mulk(r, SQRT_2_PI);
    let sa = e.sqrt(a);
    e.div(r, sa)
}

const H0: Hankel = Hankel {
    pp: &J0_PP,
    pq: &J0_PQ,
    qp: &J0_QP,
    qq: &J0_QQ,
    phase: FRAC_PI_4,
    square_first: true,
};

const H1: Hankel = Hankel {
    pp: &J1_PP,
    pq: &J1_PQ,
    qp: &J1_QP,
    qq: &J1_QQ,
    phase: 3.0 * FRAC_PI_4,
    square_first: false,
};

/// `J0(x)`.
fn j0(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let z = e.mul(a, a);
    let rp = e.poly(z, &J0_RP);
    let rq = e.poly(z, &J0_RQ);
    let u = e.addk(z, -5.783_185_962_946_784);
    let v = e.addk(z, -30.471_262_343_662_087);
    let uv = e.mul(u, v);
    let uvr = e.mul(uv, rp);
    let mid = e.div(uvr, rq);
    let z4 = e.mulk(z, 0.25);
    let tiny = e.ksub(1.0, z4);
    let is_tiny = e.ltk(a, 1e-5);
    let lo = e.sel(is_tiny, tiny, mid);
    let hi = hankel(e, a, &H0, false);
    let small = e.lek(a, 5.0);
    e.sel(small, lo, hi)
}

/// `J1(x)` (odd).
fn j1(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let z = e.mul(a, a);
    let rp = e.poly(z, &J1_RP);
    let rq = e.poly(z, &J1_RQ);
    let r = e.div(rp, rq);
    let r = e.mul(r, a);
    let u = e.addk(z, -14.681_970_642_123_893);
    let r = e.mul(r, u);
    let v = e.addk(z, -49.218_456_321_694_6);
    let lo = e.mul(r, v);
    let hi = hankel(e, a, &H1, false);
    let small = e.lek(a, 5.0);
    let out = e.sel(small, lo, hi);
    let neg = e.ltk(x, 0.0);
    e.with_sign(out, neg)
}

/// `Y(0) = -inf`, `Y(x < 0) = NaN`.
fn y_edges(e: &mut Ex, x: PRef, out: PRef) -> PRef {
    let zero = e.eqk(x, 0.0);
    let neg = e.ltk(x, 0.0);
    let out = e.selk(neg, f64::NAN, out);
    e.selk(zero, f64::NEG_INFINITY, out)
}

/// `Y0(x)`.
fn y0(e: &mut Ex, x: PRef) -> PRef {
    let z = e.mul(x, x);
    let yp = e.poly(z, &Y0_YP);
    let yq = e.poly(z, &Y0_YQ);
    let r = e.div(yp, yq);
    let l = e.log(x);
    let l = e.mulk(l, TWO_PI);
    let j = j0(e, x);
    let lj = e.mul(l, j);
    let lo = e.add(r, lj);
    let hi = hankel(e, x, &H0, true);
    let small = e.lek(x, 5.0);
    let out = e.sel(small, lo, hi);
    y_edges(e, x, out)
}

/// `Y1(x)`.
fn y1(e: &mut Ex, x: PRef) -> PRef {
    let z = e.mul(x, x);
    let yp = e.poly(z, &Y1_YP);
    let yq = e.poly(z, &Y1_YQ);
    let r = e.div(yp, yq);
    let r = e.mul(x, r);
    let j = j1(e, x);
    let l = e.log(x);
    let jl = e.mul(j, l);
    let ix = e.kdiv(1.0, x);
    let d = e.sub(jl, ix);
    let d = e.mulk(d, TWO_PI);
    let lo = e.add(r, d);
    let hi = hankel(e, x, &H1, true);
    let small = e.lek(x, 5.0);
    let out = e.sel(small, lo, hi);
    y_edges(e, x, out)
}

/// `Ai(x)`.
fn airy_ai(e: &mut Ex, x: PRef) -> PRef {
    const C: f64 = 0.564_189_583_547_756_3; // 1 / sqrt(pi)
    // x < -2.09: the oscillating asymptotic form.
    let nx = e.neg(x);
    let sn = e.sqrt(nx);
    let xs = e.mul(x, sn);
    let zt = e.mulk(xs, -2.0 / 3.0);
    let z = e.kdiv(1.0, zt);
    let zz = e.mul(z, z);
    let afn = e.poly(zz, &AIRY_AFN);
    let afd = e.poly(zz, &AIRY_AFD);
    let agn = e.poly(zz, &AIRY_AGN);
    let agd = e.poly(zz, &AIRY_AGD);
    let t = e.addk(zt, 0.25 * PI);
    let (st, ct) = (e.sin(t), e.cos(t));
    let f = e.mul(zz, afn);
    let f = e.div(f, afd);
    let f = e.addk(f, 1.0);
    let f = e.mul(st, f);
    let g = e.mul(z, agn);
    let g = e.div(g, agd);
    let g = e.mul(ct, g);
    let fg = e.sub(f, g);
    let q = e.sqrt(sn);
    let c = e.kdiv(C, q);
    let neg_far = e.mul(c, fg);
    // x >= 2.09: the decaying form.
    let sx = e.sqrt(x);
    let xs = e.mul(x, sx);
    let zeta = e.mulk(xs, 2.0 / 3.0);
    let iz = e.kdiv(1.0, zeta);
    let an = e.poly(iz, &AIRY_AN);
    let ad = e.poly(iz, &AIRY_AD);
    let r = e.div(an, ad);
    let r = e.mulk(r, C);
    let q = e.sqrt(sx);
    let q = e.mulk(q, 2.0);
    let ez = e.exp(zeta);
    let d = e.mul(q, ez);
    let pos_far = e.div(r, d);
    // Between: the power series f - c g.
    let z3 = e.mul(x, x);
    let z3 = e.mul(z3, x);
    let (mut f, mut g) = (e.k(1.0), x);
    let (mut m, mut n) = (e.k(1.0), x);
    let mut k = 1.0;
    for _ in 0..10 {
        m = e.mul(m, z3);
        k += 1.0;
        m = e.mulk(m, 1.0 / k);
        n = e.mul(n, z3);
        k += 1.0;
        n = e.mulk(n, 1.0 / k);
        m = e.mulk(m, 1.0 / k);
        f = e.add(f, m);
        k += 1.0;
        n = e.mulk(n, 1.0 / k);
        g = e.add(g, n);
    }
    let f = e.mulk(f, 0.355_028_053_887_817_2);
    let g = e.mulk(g, 0.258_819_403_792_806_8);
    let mid = e.sub(f, g);
    let lo = e.ltk(x, -2.09);
    let hi = e.gek(x, 2.09);
    let out = e.sel(hi, pos_far, mid);
    let out = e.sel(lo, neg_far, out);
    let big = e.gtk(x, 103.892);
    let out = e.selk(big, 0.0, out);
    let inf = e.isinf(x);
    e.selk(inf, f64::NAN, out)
}

/// `j0(x) = sin(x) / x` (spherical).
fn spherical_j0(e: &mut Ex, x: PRef) -> PRef {
    let z = e.mul(x, x);
    let p = e.poly(
        z,
        &[
            1.0 / 6_227_020_800.0,
            -1.0 / 39_916_800.0,
            1.0 / 362_880.0,
            -1.0 / 5040.0,
            1.0 / 120.0,
            -1.0 / 6.0,
        ],
    );
    let p = e.mul(z, p);
    let taylor = e.addk(p, 1.0);
    let s = e.sin(x);
    let q = e.div(s, x);
    let a = e.abs(x);
    let small = e.ltk(a, 0.5);
    let out = e.sel(small, taylor, q);
    let inf = e.isinf(x);
    e.selk(inf, 0.0, out)
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::i0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn i0_op(a: I0<'_>) -> Result<Tensor> {
    float1(I0::NAME, a.self_, i0)
}

#[aten("aten::special_i0e", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_i0e_op(a: SpecialI0e<'_>) -> Result<Tensor> {
    float1(SpecialI0e::NAME, a.self_, i0e)
}

#[aten("aten::special_i1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_i1_op(a: SpecialI1<'_>) -> Result<Tensor> {
    float1(SpecialI1::NAME, a.self_, |e, x| {
        i1_with(e, x, &I1E_A_F32, &I1E_B_F32, false)
    })
}

#[aten("aten::special_i1e", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_i1e_op(a: SpecialI1e<'_>) -> Result<Tensor> {
    float1(SpecialI1e::NAME, a.self_, |e, x| {
        i1_with(e, x, &I1E_A_F32, &I1E_B_F32, true)
    })
}

#[aten("aten::special_modified_bessel_i0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_modified_bessel_i0_op(a: SpecialModifiedBesselI0<'_>) -> Result<Tensor> {
    float1(SpecialModifiedBesselI0::NAME, a.self_, i0)
}

#[aten("aten::special_modified_bessel_i1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_modified_bessel_i1_op(a: SpecialModifiedBesselI1<'_>) -> Result<Tensor> {
    float1(SpecialModifiedBesselI1::NAME, a.self_, |e, x| {
        i1_with(e, x, &I1E_A, &I1E_B, false)
    })
}

#[aten("aten::special_modified_bessel_k0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_modified_bessel_k0_op(a: SpecialModifiedBesselK0<'_>) -> Result<Tensor> {
    float1(SpecialModifiedBesselK0::NAME, a.self_, |e, x| {
        k0(e, x, false)
    })
}

#[aten("aten::special_modified_bessel_k1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_modified_bessel_k1_op(a: SpecialModifiedBesselK1<'_>) -> Result<Tensor> {
    float1(SpecialModifiedBesselK1::NAME, a.self_, |e, x| {
        k1(e, x, false)
    })
}

#[aten("aten::special_scaled_modified_bessel_k0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_scaled_modified_bessel_k0_op(a: SpecialScaledModifiedBesselK0<'_>) -> Result<Tensor> {
    float1(SpecialScaledModifiedBesselK0::NAME, a.x, |e, x| {
        k0(e, x, true)
    })
}

#[aten("aten::special_scaled_modified_bessel_k1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_scaled_modified_bessel_k1_op(a: SpecialScaledModifiedBesselK1<'_>) -> Result<Tensor> {
    float1(SpecialScaledModifiedBesselK1::NAME, a.x, |e, x| {
        k1(e, x, true)
    })
}

#[aten("aten::special_bessel_j0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_bessel_j0_op(a: SpecialBesselJ0<'_>) -> Result<Tensor> {
    float1(SpecialBesselJ0::NAME, a.self_, j0)
}

#[aten("aten::special_bessel_j1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_bessel_j1_op(a: SpecialBesselJ1<'_>) -> Result<Tensor> {
    float1(SpecialBesselJ1::NAME, a.self_, j1)
}

#[aten("aten::special_bessel_y0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_bessel_y0_op(a: SpecialBesselY0<'_>) -> Result<Tensor> {
    float1(SpecialBesselY0::NAME, a.self_, y0)
}

#[aten("aten::special_bessel_y1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_bessel_y1_op(a: SpecialBesselY1<'_>) -> Result<Tensor> {
    float1(SpecialBesselY1::NAME, a.self_, y1)
}

#[aten("aten::special_airy_ai", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_airy_ai_op(a: SpecialAiryAi<'_>) -> Result<Tensor> {
    float1(SpecialAiryAi::NAME, a.x, airy_ai)
}

#[aten("aten::special_spherical_bessel_j0", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_spherical_bessel_j0_op(a: SpecialSphericalBesselJ0<'_>) -> Result<Tensor> {
    float1(SpecialSphericalBesselJ0::NAME, a.x, spherical_j0)
}
