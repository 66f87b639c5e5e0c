//! Orthogonal polynomials of `torch.special` (binary: `x`, `n`): Chebyshev `T`/`U`/`V`/`W`,
//! their shifted forms, Hermite `H`/`He`, Laguerre `L`, Legendre `P`, as ATen's `Math.h`
//! computes them: `n` truncated to an integer (non-finite `n` as a negative one, 0 out), the
//! special cases for `n < 0`, `|x| == 1` (shifted: `x == 0`, `x == 1`), the trigonometric forms
//! for `|x| < 1` past ATen's degree thresholds, else the three-term recurrence in f32.
//!
//! The recurrence runs on the chip unrolled to the largest degree in `n` (read back once: a
//! synchronisation point); each step updates only the elements whose degree reaches it.

use super::inverse_trig::acos;
use super::{Arg, Ex, float2};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// The largest degree the unrolled recurrence serves.
const MAX_DEGREE: f64 = 1024.0;

/// The polynomial families.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    T,
    U,
    V,
    W,
    ShiftedT,
    ShiftedU,
    ShiftedV,
    ShiftedW,
    H,
    He,
    L,
    P,
}

/// The largest degree among `n`'s finite elements (0 when none). The recurrence is unrolled to
/// it, so the degrees must be read: where they cannot be (a meta tensor, a compiled function)
/// this is that error — a compiled graph breaks here and runs the call eagerly, as it does for
/// other value-dependent operators — never a guess that would be wrong for larger degrees.
fn max_degree(name: &str, n: &Tensor) -> Result<usize> {
    let values = n.to_f64_vec()?;
    let m = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.trunc()));
    if m > MAX_DEGREE {
        return Err(TpuError::Unsupported(format!(
            "{name}: degree {m} past {MAX_DEGREE}, the most the unrolled recurrence serves"
        )));
    }
    Ok(m as usize)
}

/// `c ? 1 : (even ? 1 : -1)`-style signed constants: `even ? a : -a`.
fn alt(e: &mut Ex, even: PRef, a: PRef) -> PRef {
    let na = e.neg(a);
    e.sel(even, a, na)
}

/// The special cases and the trigonometric form of the Chebyshev kinds at `y` (`x`, or
/// `2x - 1` for the shifted ones), over the recurrence's result `r`.
fn chebyshev(e: &mut Ex, k: Kind, x: PRef, y: PRef, n: PRef, even: PRef, r: PRef) -> PRef {
    let one = e.k(1.0);
    let n1 = e.addk(n, 1.0);
    let n2 = e.add(n, n);
    let n21 = e.addk(n2, 1.0);
    let ay = e.abs(y);
    let inside = e.ltk(ay, 1.0);
    let t = acos(e, y);
    let threshold = match k {
        Kind::T | Kind::ShiftedT | Kind::ShiftedU | Kind::ShiftedV => 6.0,
        Kind::ShiftedW => 4.0,
        _ => 8.0,
    };
    let big = e.gtk(n, threshold);
    let trig_on = e.and(big, inside);
    let nh = e.addk(n, 0.5);
    let nht = e.mul(nh, t);
    let half = e.mulk(t, 0.5);
    let trig = match k {
        Kind::T | Kind::ShiftedT => {
            let a = e.mul(n, t);
            e.cos(a)
        }
        Kind::U | Kind::ShiftedU => {
            let s = e.sin(t);
            let a = e.mul(n1, t);
            let sa = e.sin(a);
            let q = e.div(sa, s);
            let ca = e.cos(a);
            let c = e.mul(n1, ca);
            let c = e.div(c, y);
            let z = e.eqk(s, 0.0);
            e.sel(z, c, q)
        }
        Kind::V | Kind::ShiftedV => {
            let c = e.cos(nht);
            let ch = e.cos(half);
            let q = e.div(c, ch);
            let sh = e.sin(half);
            let at1 = e.eqk(sh, 1.0);
            let f = alt(e, even, n21);
            e.sel(at1, f, q)
        }
        _ => {
            let s = e.sin(nht);
            let sh = e.sin(half);
            let q = e.div(s, sh);
            let ch = e.cos(half);
            let at1 = e.eqk(ch, 1.0);
            let f = alt(e, even, one);
            let f = if k == Kind::W {
                let pos = e.gtk(x, 0.0);
                e.sel(pos, n21, f)
            } else {
                f
            };
            e.sel(at1, f, q)
        }
    };
    let r = e.sel(trig_on, trig, r);
    if matches!(k, Kind::T | Kind::U | Kind::V | Kind::W) {
        // |x| == 1.
        let ax = e.abs(x);
        let edge = e.eqk(ax, 1.0);
        let pos = e.gtk(x, 0.0);
        let v = match k {
            Kind::T => {
                let a = alt(e, even, one);
                e.sel(pos, one, a)
            }
            Kind::U => {
                let a = alt(e, even, n1);
                e.sel(pos, n1, a)
            }
            Kind::V => {
                let a = alt(e, even, n21);
                e.sel(pos, one, a)
            }
            _ => {
                let a = alt(e, even, one);
                e.sel(pos, n21, a)
            }
        };
        e.sel(edge, v, r)
    } else {
        // x == 1, then x == 0.
        let at1 = e.eqk(x, 1.0);
        let at0 = e.eqk(x, 0.0);
        let (v1, v0) = match k {
            Kind::ShiftedT => (one, alt(e, even, one)),
            Kind::ShiftedU => (n1, alt(e, even, n1)),
            Kind::ShiftedV => (one, alt(e, even, n21)),
            _ => (n21, alt(e, even, one)),
        };
        let r = e.sel(at0, v0, r);
        e.sel(at1, v1, r)
    }
}

/// `P_n(x)` of kind `k`, ATen's algorithm.
fn polynomial(e: &mut Ex, k: Kind, x: PRef, nf: PRef, degree: usize) -> PRef {
    // n = (int64) nf; a non-finite one (x86 gives INT64_MIN) reads as negative.
    let tn = e.trunc(nf);
    let nan = e.isnan(nf);
    let inf = e.isinf(nf);
    let bad = e.or(nan, inf);
    let n = e.selk(bad, -1.0, tn);
    let hn = e.mulk(n, 0.5);
    let hn = e.trunc(hn);
    let hn2 = e.add(hn, hn);
    let even = e.eq(hn2, n);
    let shifted = matches!(
        k,
        Kind::ShiftedT | Kind::ShiftedU | Kind::ShiftedV | Kind::ShiftedW
    );
    // y: the argument of the Chebyshev recurrence.
    let y = if shifted {
        let x2 = e.add(x, x);
        e.addk(x2, -1.0)
    } else {
        x
    };
    let y2 = e.add(y, y);
    let one = e.k(1.0);
    // The degree-1 value.
    let q1 = match k {
        Kind::T | Kind::ShiftedT | Kind::He | Kind::P => y,
        Kind::U | Kind::ShiftedU | Kind::H => y2,
        Kind::V | Kind::ShiftedV => e.addk(y2, -1.0),
        Kind::W | Kind::ShiftedW => e.addk(y2, 1.0),
        Kind::L => e.ksub(1.0, x),
    };
    // The step counter j lives in a register (one shared constant, no constant per step).
    let (mut p, mut q, mut j) = (one, q1, one);
    let omx = e.ksub(1.0, x);
    for _ in 1..degree.max(1) {
        let j1 = e.add(j, one);
        let j2 = e.add(j, j);
        let r = match k {
            Kind::H => {
                let a = e.mul(y2, q);
                let b = e.mul(p, j2);
                e.sub(a, b)
            }
            Kind::He => {
                let a = e.mul(x, q);
                let b = e.mul(p, j);
                e.sub(a, b)
            }
            Kind::L => {
                let c = e.add(j2, omx);
                let a = e.mul(c, q);
                let b = e.mul(j, p);
                let d = e.sub(a, b);
                e.div(d, j1)
            }
            Kind::P => {
                let c = e.add(j2, one);
                let c = e.mul(c, x);
                let a = e.mul(c, q);
                let b = e.mul(j, p);
                let d = e.sub(a, b);
                e.div(d, j1)
            }
            _ => {
                let a = e.mul(y2, q);
                e.sub(a, p)
            }
        };
        let on = e.ge(n, j1);
        p = e.sel(on, q, p);
        q = e.sel(on, r, q);
        j = j1;
    }
    let mut r = q;
    match k {
        Kind::H | Kind::He => {}
        Kind::L => {
            let n1 = e.eqk(n, 1.0);
            r = e.sel(n1, q1, r);
        }
        Kind::P => {
            let ax = e.abs(x);
            let edge = e.eqk(ax, 1.0);
            let pos = e.gtk(x, 0.0);
            let a = alt(e, even, one);
            let v = e.sel(pos, one, a);
            r = e.sel(edge, v, r);
        }
        _ => r = chebyshev(e, k, x, y, n, even, r),
    }
    if k == Kind::L {
        // |x| == 0 comes before n == 0 and n == 1, after n < 0.
        let z = e.eqk(x, 0.0);
        r = e.sel(z, one, r);
    }
    if matches!(k, Kind::H | Kind::He) {
        let is1 = e.eqk(n, 1.0);
        r = e.sel(is1, q1, r);
    }
    let is0 = e.eqk(n, 0.0);
    // Chebyshev/Legendre: the edge cases precede n == 0 / n == 1 (their values agree there).
    r = e.sel(is0, one, r);
    let neg = e.ltk(n, 0.0);
    e.selk(neg, 0.0, r)
}

/// The polynomial of kind `k` at `x` of degrees `n`, as operator `name`.
fn run(name: &str, k: Kind, x: &Tensor, n: &Tensor) -> Result<Tensor> {
    let degree = max_degree(name, n)?;
    float2(name, Arg::Tensor(x), Arg::Tensor(n), |e, x, n| {
        polynomial(e, k, x, n, degree)
    })
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::special_chebyshev_polynomial_t", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_chebyshev_polynomial_t_op(a: SpecialChebyshevPolynomialT<'_>) -> Result<Tensor> {
    run(SpecialChebyshevPolynomialT::NAME, Kind::T, a.x, a.n)
}

#[aten("aten::special_chebyshev_polynomial_u", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_chebyshev_polynomial_u_op(a: SpecialChebyshevPolynomialU<'_>) -> Result<Tensor> {
    run(SpecialChebyshevPolynomialU::NAME, Kind::U, a.x, a.n)
}

#[aten("aten::special_chebyshev_polynomial_v", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_chebyshev_polynomial_v_op(a: SpecialChebyshevPolynomialV<'_>) -> Result<Tensor> {
    run(SpecialChebyshevPolynomialV::NAME, Kind::V, a.x, a.n)
}

#[aten("aten::special_chebyshev_polynomial_w", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_chebyshev_polynomial_w_op(a: SpecialChebyshevPolynomialW<'_>) -> Result<Tensor> {
    run(SpecialChebyshevPolynomialW::NAME, Kind::W, a.x, a.n)
}

#[aten("aten::special_shifted_chebyshev_polynomial_t", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_shifted_chebyshev_polynomial_t_op(
    a: SpecialShiftedChebyshevPolynomialT<'_>,
) -> Result<Tensor> {
    run(
        SpecialShiftedChebyshevPolynomialT::NAME,
        Kind::ShiftedT,
        a.x,
        a.n,
    )
}

#[aten("aten::special_shifted_chebyshev_polynomial_u", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_shifted_chebyshev_polynomial_u_op(
    a: SpecialShiftedChebyshevPolynomialU<'_>,
) -> Result<Tensor> {
    run(
        SpecialShiftedChebyshevPolynomialU::NAME,
        Kind::ShiftedU,
        a.x,
        a.n,
    )
}

#[aten("aten::special_shifted_chebyshev_polynomial_v", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_shifted_chebyshev_polynomial_v_op(
    a: SpecialShiftedChebyshevPolynomialV<'_>,
) -> Result<Tensor> {
    run(
        SpecialShiftedChebyshevPolynomialV::NAME,
        Kind::ShiftedV,
        a.x,
        a.n,
    )
}

#[aten("aten::special_shifted_chebyshev_polynomial_w", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_shifted_chebyshev_polynomial_w_op(
    a: SpecialShiftedChebyshevPolynomialW<'_>,
) -> Result<Tensor> {
    run(
        SpecialShiftedChebyshevPolynomialW::NAME,
        Kind::ShiftedW,
        a.x,
        a.n,
    )
}

#[aten("aten::special_hermite_polynomial_h", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_hermite_polynomial_h_op(a: SpecialHermitePolynomialH<'_>) -> Result<Tensor> {
    run(SpecialHermitePolynomialH::NAME, Kind::H, a.x, a.n)
}

#[aten("aten::special_hermite_polynomial_he", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_hermite_polynomial_he_op(a: SpecialHermitePolynomialHe<'_>) -> Result<Tensor> {
    run(SpecialHermitePolynomialHe::NAME, Kind::He, a.x, a.n)
}

#[aten("aten::special_laguerre_polynomial_l", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_laguerre_polynomial_l_op(a: SpecialLaguerrePolynomialL<'_>) -> Result<Tensor> {
    run(SpecialLaguerrePolynomialL::NAME, Kind::L, a.x, a.n)
}

#[aten("aten::special_legendre_polynomial_p", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_legendre_polynomial_p_op(a: SpecialLegendrePolynomialP<'_>) -> Result<Tensor> {
    run(SpecialLegendrePolynomialP::NAME, Kind::P, a.x, a.n)
}
