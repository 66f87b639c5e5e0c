//! More elementwise math: inverse trigonometric and hyperbolic functions (`asin`, `acos`,
//! `atan`, `atan2`, `asinh`, `acosh`, `atanh`), `sinh`, `cosh`, `tan`, `exp2`, `expm1`,
//! `log2`, `log10`, `erfc`, `sinc`, `logit`, `rad2deg`/`deg2rad`, `angle`, rounding (`round`,
//! `round.decimals`, `trunc`, `frac`), and binary ones: `xlogy`, `special_xlog1py`,
//! `special_entr`, `logaddexp`, `logaddexp2`, `fmax`/`fmin`, `hypot`, `copysign`, `heaviside`,
//! `ldexp`.
//!
//! The vector unit has `exp`, `log`, `log1p`, `expm1`, `sin`, `cos`, `tanh`, `erf`, `sqrt`; the
//! rest are written over them here; the inverse trigonometric and hyperbolic programs are in
//! [`super::inverse_trig`] (Cephes' single-precision ones, and `log1p` forms). Special values follow C's `<math.h>`, as ATen's CPU
//! kernels call it: `atan2(±0, +0) = ±0`, `atan2(±0, -0) = ±pi`, `xlogy(0, y) = 0` unless `y`
//! is NaN, `fmax`/`fmin` ignore a NaN operand.

use std::f64::consts::{LN_2, LN_10, PI};

use super::inverse_trig::{acos, acosh, asin, asinh, atan, atan2, atanh};
use super::predicates::sign_bit;
use super::{Arg, Ex, Number, float1, float2, not_implemented, promoted, promoted_as};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::PRef;
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `sinh(x)`: `(m + m / (m + 1)) / 2` with `m = expm1(|x|)` (accurate near 0), signed.
fn sinh(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let m = e.expm1(a);
    let m1 = e.addk(m, 1.0);
    let q = e.div(m, m1);
    let s = e.add(m, q);
    let r = e.mulk(s, 0.5);
    // Past exp's range, e^a / 2 = e^(a - ln 2).
    let sh = e.addk(a, -LN_2);
    let big = e.exp(sh);
    let over = e.gtk(a, 88.0);
    let r = e.sel(over, big, r);
    let neg = e.ltk(x, 0.0);
    let r = e.with_sign(r, neg);
    let isnan = e.isnan(x);
    e.sel(isnan, x, r)
}

/// `cosh(x) = (e^a + e^-a) / 2`, `e^(a - ln 2)` past exp's range.
fn cosh(e: &mut Ex, x: PRef) -> PRef {
    let a = e.abs(x);
    let p = e.exp(a);
    let r = e.kdiv(1.0, p);
    let s = e.add(p, r);
    let c = e.mulk(s, 0.5);
    let sh = e.addk(a, -LN_2);
    let big = e.exp(sh);
    let over = e.gtk(a, 88.0);
    e.sel(over, big, c)
}

/// `sinc(x) = sin(pi x) / (pi x)`, 1 at 0.
fn sinc(e: &mut Ex, x: PRef) -> PRef {
    let px = e.mulk(x, PI);
    let s = e.sin(px);
    let r = e.div(s, px);
    let z = e.eqk(x, 0.0);
    e.selk(z, 1.0, r)
}

/// `erfc(x)`: `1 - erf(x)`; past 0.5 from the continued `exp(-x^2)`-scaled form would be
/// more accurate for tiny results, which `torch.testing`'s absolute tolerance covers.
fn erfc(e: &mut Ex, x: PRef) -> PRef {
    let r = e.erf(x);
    e.ksub(1.0, r)
}

/// `v` rounded to `d` when `d` is bf16/f16 (ATen's `scalar_t` arithmetic rounds each
/// operation), back in f32.
fn rnd(e: &mut Ex, v: PRef, d: DType) -> PRef {
    if matches!(d, DType::BF16 | DType::F16) {
        let r = e.p.cast(v, d);
        e.f(r)
    } else {
        v
    }
}

/// `logit(x)`, ATen's `x < lo ? lo : (x > hi ? hi : x)` with `lo = eps`, `hi = 1 - eps` when
/// `eps` is given, then `log(x / (1 - x))`, each operation in the dtype `d`.
fn logit(e: &mut Ex, x: PRef, eps: Option<f64>, d: DType) -> PRef {
    let x = match eps {
        Some(eps) => {
            let lo = e.k(eps);
            let lo = rnd(e, lo, d);
            let one = e.k(1.0);
            let hi = e.sub(one, lo);
            let hi = rnd(e, hi, d);
            let h = e.gt(x, hi);
            let c = e.sel(h, hi, x);
            let l = e.lt(x, lo);
            e.sel(l, lo, c)
        }
        None => x,
    };
    let dn = e.ksub(1.0, x);
    let dn = rnd(e, dn, d);
    let q = e.div(x, dn);
    let q = rnd(e, q, d);
    e.log(q)
}

/// `xlogy` (`log1p`: `xlog1py`): NaN when `y` is, 0 when `x` is 0, else `x log(y)`.
fn xlogy(e: &mut Ex, x: PRef, y: PRef, log1p: bool) -> PRef {
    let l = if log1p { e.log1p(y) } else { e.log(y) };
    let r = e.mul(x, l);
    let z = e.eqk(x, 0.0);
    let r = e.selk(z, 0.0, r);
    let n = e.isnan(y);
    e.sel(n, y, r)
}

/// `special_entr(x)`: `-x ln x` for `x > 0`, 0 at 0, `-inf` below.
fn entr(e: &mut Ex, x: PRef) -> PRef {
    let l = e.log(x);
    let m = e.mul(x, l);
    let r = e.neg(m);
    let z = e.eqk(x, 0.0);
    let r = e.selk(z, 0.0, r);
    let n = e.ltk(x, 0.0);
    e.selk(n, f64::NEG_INFINITY, r)
}

/// `logaddexp(a, b) = max + log1p(exp(-|a - b|))` (`base2`: in base 2); equal infinities give
/// themselves.
fn logaddexp(e: &mut Ex, a: PRef, b: PRef, base2: bool) -> PRef {
    let m = e.max(a, b);
    let d = e.sub(a, b);
    let d = e.abs(d);
    let nd = e.neg(d);
    let r = if base2 {
        let t = e.mulk(nd, LN_2);
        let x = e.exp(t);
        let l = e.log1p(x);
        let l = e.mulk(l, 1.0 / LN_2);
        e.add(m, l)
    } else {
        let x = e.exp(nd);
        let l = e.log1p(x);
        e.add(m, l)
    };
    let ia = e.isinf(a);
    let same = e.eq(a, b);
    let keep = e.and(ia, same);
    e.sel(keep, a, r)
}

/// `tan(x) = sin(x) / cos(x)`.
fn tan(e: &mut Ex, x: PRef) -> PRef {
    let (s, c) = (e.sin(x), e.cos(x));
    e.div(s, c)
}

/// `2^x = e^(x ln 2)`.
fn exp2(e: &mut Ex, x: PRef) -> PRef {
    let t = e.mulk(x, LN_2);
    e.exp(t)
}

/// `log2(x) = ln(x) / ln 2`.
fn log2(e: &mut Ex, x: PRef) -> PRef {
    let l = e.log(x);
    e.mulk(l, 1.0 / LN_2)
}

/// `log10(x) = ln(x) / ln 10`.
fn log10(e: &mut Ex, x: PRef) -> PRef {
    let l = e.log(x);
    e.mulk(l, 1.0 / LN_10)
}

/// `angle(x)` of a real `x`: pi below 0, else 0; NaN stays.
fn angle(e: &mut Ex, x: PRef) -> PRef {
    let z = e.k(0.0);
    let n = e.ltk(x, 0.0);
    let r = e.selk(n, PI, z);
    let isnan = e.isnan(x);
    e.sel(isnan, x, r)
}

/// A dtype-keeping rounding operator: integers are the identity (bool is an error).
fn rounding(
    name: &str,
    kernel: &str,
    x: &Tensor,
    f: impl FnOnce(&mut Ex, PRef) -> PRef,
) -> Result<Tensor> {
    let d = x.dtype();
    if d == DType::Bool {
        return Err(not_implemented(kernel, d));
    }
    promoted_as(
        name,
        &[Arg::Tensor(x)],
        d,
        Number::Common,
        d,
        move |p, v, _| {
            if d.is_float() {
                let v = p.cast(v[0], DType::F32);
                f(&mut Ex::new(p), v)
            } else {
                v[0]
            }
        },
    )
}

/// `round(x, decimals)`: ATen's `nearbyint(x * 10^d) / 10^d` (for negative `d`,
/// `nearbyint(x / 10^-d) * 10^-d`) in f32.
#[aten(
    "aten::round.decimals",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No),
    call = RoundDecimals(self_, decimals)
)]
pub fn round_decimals(x: &Tensor, decimals: i64) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(not_implemented("round_cpu", x.dtype()));
    }
    let p10 = 10f64.powi(decimals.unsigned_abs().min(300) as i32) as f32 as f64;
    rounding(RoundDecimals::NAME, "round_cpu", x, move |e, v| {
        if decimals >= 0 {
            let s = e.mulk(v, p10);
            let r = e.round(s);
            let k = e.k(p10);
            e.div(r, k)
        } else {
            let k = e.k(p10);
            let s = e.div(v, k);
            let r = e.round(s);
            e.mulk(r, p10)
        }
    })
}

/// `fmax`/`fmin`: the larger/smaller, ignoring a NaN operand.
fn fmaxmin(name: &str, a: &Tensor, b: &Tensor, max: bool) -> Result<Tensor> {
    promoted(
        name,
        &[Arg::Tensor(a), Arg::Tensor(b)],
        Number::Common,
        |c| c,
        |p, v, c| {
            let ct = super::compute(c);
            if ct != DType::F32 {
                let op = if max {
                    crate::ir::BinOp::Max
                } else {
                    crate::ir::BinOp::Min
                };
                return p.bin(op, v[0], v[1], ct);
            }
            let mut e = Ex::new(p);
            let m = if max {
                e.max(v[0], v[1])
            } else {
                e.min(v[0], v[1])
            };
            let an = e.isnan(v[0]);
            let m = e.sel(an, v[1], m);
            let bn = e.isnan(v[1]);
            e.sel(bn, v[0], m)
        },
    )
}

/// `copysign(a, b)`: `|a|` with the sign bit of `b`, floating.
fn copysign(name: &str, a: Arg, b: Arg) -> Result<Tensor> {
    float2(name, a, b, |e, x, y| {
        let m = e.abs(x);
        let s = sign_bit(e.p, y);
        e.with_sign(m, s)
    })
}

/// `heaviside(x, values)`: `values` where `x == 0`, else `x > 0`, in the (common) dtype.
#[aten(
    "aten::heaviside",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = Heaviside(self_, values)
)]
fn heaviside(x: &Tensor, values: &Tensor) -> Result<Tensor> {
    if x.dtype() != values.dtype() {
        return Err(TpuError::DtypeMismatch(
            "heaviside is not yet implemented for tensors with different dtypes".into(),
        ));
    }
    let d = x.dtype();
    promoted_as(
        Heaviside::NAME,
        &[Arg::Tensor(x), Arg::Tensor(values)],
        d,
        Number::Common,
        d,
        move |p, v, _| {
            let ct = super::compute(d);
            let zero = p.constant(Scalar::Int(0), ct);
            let z = p.cmp(crate::ir::CmpKind::Eq, v[0], zero, ct);
            let pos = p.cmp(crate::ir::CmpKind::Gt, v[0], zero, ct);
            let pos = p.cast(pos, ct);
            p.select(z, v[1], pos, ct)
        },
    )
}

/// `ldexp(x, e) = x * 2^e`, as ATen's composite `mul(x, pow(2, e))`: the result is floating
/// (`torch.result_type(x, float32)`).
#[aten(
    "aten::ldexp.Tensor",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = LdexpTensor(self_, other)
)]
fn ldexp(x: &Tensor, ex: &Tensor) -> Result<Tensor> {
    use crate::dtype::{Operand, result_type};
    // PyTorch 2.15 keeps a floating `x`'s dtype for an integer exponent.
    let out = match (x.dtype().is_float(), ex.dtype().is_float()) {
        (true, false) => x.dtype(),
        (_, true) => result_type(&[crate::ops::binary::operand(x), Operand::Tensor(ex.dtype())]),
        (false, false) => DType::F32,
    };
    promoted_as(
        LdexpTensor::NAME,
        &[Arg::Tensor(x), Arg::Tensor(ex)],
        DType::F32,
        Number::Common,
        out,
        |p, v, _| {
            let mut e = Ex::new(p);
            let two = e.k(2.0);
            let pw = e.pow(two, v[1]);
            e.mul(v[0], pw)
        },
    )
}

// The registered overloads: one `#[aten]` function each (and, in `defs`, those taking a
// Python number where the schema says `Tensor`, which `#[aten]` cannot type yet).

#[aten("aten::atan", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn atan_op(a: Atan<'_>) -> Result<Tensor> {
    float1(Atan::NAME, a.self_, atan)
}

#[aten("aten::asin", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn asin_op(a: Asin<'_>) -> Result<Tensor> {
    float1(Asin::NAME, a.self_, asin)
}

#[aten("aten::acos", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn acos_op(a: Acos<'_>) -> Result<Tensor> {
    float1(Acos::NAME, a.self_, acos)
}

#[aten("aten::asinh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn asinh_op(a: Asinh<'_>) -> Result<Tensor> {
    float1(Asinh::NAME, a.self_, asinh)
}

#[aten("aten::acosh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn acosh_op(a: Acosh<'_>) -> Result<Tensor> {
    float1(Acosh::NAME, a.self_, acosh)
}

#[aten("aten::atanh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn atanh_op(a: Atanh<'_>) -> Result<Tensor> {
    float1(Atanh::NAME, a.self_, atanh)
}

#[aten("aten::sinh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn sinh_op(a: Sinh<'_>) -> Result<Tensor> {
    float1(Sinh::NAME, a.self_, sinh)
}

#[aten("aten::cosh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn cosh_op(a: Cosh<'_>) -> Result<Tensor> {
    float1(Cosh::NAME, a.self_, cosh)
}

#[aten("aten::tan", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn tan_op(a: Tan<'_>) -> Result<Tensor> {
    float1(Tan::NAME, a.self_, tan)
}

#[aten("aten::exp2", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn exp2_op(a: Exp2<'_>) -> Result<Tensor> {
    float1(Exp2::NAME, a.self_, exp2)
}

#[aten("aten::expm1", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn expm1_op(a: Expm1<'_>) -> Result<Tensor> {
    float1(Expm1::NAME, a.self_, |e, x| e.expm1(x))
}

#[aten("aten::log2", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn log2_op(a: Log2<'_>) -> Result<Tensor> {
    float1(Log2::NAME, a.self_, log2)
}

#[aten("aten::log10", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn log10_op(a: Log10<'_>) -> Result<Tensor> {
    float1(Log10::NAME, a.self_, log10)
}

#[aten("aten::erfc", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn erfc_op(a: Erfc<'_>) -> Result<Tensor> {
    float1(Erfc::NAME, a.self_, erfc)
}

#[aten("aten::sinc", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn sinc_op(a: Sinc<'_>) -> Result<Tensor> {
    float1(Sinc::NAME, a.self_, sinc)
}

#[aten("aten::rad2deg", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn rad2deg_op(a: Rad2deg<'_>) -> Result<Tensor> {
    float1(Rad2deg::NAME, a.self_, |e, x| e.mulk(x, 180.0 / PI))
}

#[aten("aten::deg2rad", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn deg2rad_op(a: Deg2rad<'_>) -> Result<Tensor> {
    float1(Deg2rad::NAME, a.self_, |e, x| e.mulk(x, PI / 180.0))
}

#[aten("aten::angle", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn angle_op(a: Angle<'_>) -> Result<Tensor> {
    float1(Angle::NAME, a.self_, angle)
}

#[aten("aten::logit", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn logit_op(a: Logit<'_>) -> Result<Tensor> {
    let (eps, d) = (a.eps, a.self_.dtype());
    float1(Logit::NAME, a.self_, move |e, v| logit(e, v, eps, d))
}

#[aten("aten::round", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn round_op(a: Round<'_>) -> Result<Tensor> {
    rounding(Round::NAME, "round_cpu", a.self_, |e, x| e.round(x))
}

#[aten("aten::trunc", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn trunc_op(a: Trunc<'_>) -> Result<Tensor> {
    rounding(Trunc::NAME, "trunc_cpu", a.self_, |e, x| e.trunc(x))
}

#[aten("aten::frac", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn frac_op(a: Frac<'_>) -> Result<Tensor> {
    let x = a.self_;
    if !x.dtype().is_float() {
        return Err(not_implemented("frac_cpu", x.dtype()));
    }
    rounding(Frac::NAME, "frac_cpu", x, |e, v| {
        let t = e.trunc(v);
        e.sub(v, t)
    })
}

#[aten("aten::special_entr", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn special_entr_op(a: SpecialEntr<'_>) -> Result<Tensor> {
    float1(SpecialEntr::NAME, a.self_, entr)
}

#[aten("aten::fmax", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn fmax_op(a: Fmax<'_>) -> Result<Tensor> {
    fmaxmin(Fmax::NAME, a.self_, a.other, true)
}

#[aten("aten::fmin", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn fmin_op(a: Fmin<'_>) -> Result<Tensor> {
    fmaxmin(Fmin::NAME, a.self_, a.other, false)
}

fn pw() -> Sharding {
    Sharding::pointwise(Lin::No)
}

// The overloads whose operands may be Python numbers where the schema says `Tensor` (the
// binder keeps a number there: `torch.atan2(x, 2.0)`): `numbers = "self, other"`.

#[aten("aten::atan2", dtypes = DType::ALL_TPU, numbers = "self, other", shard = pw())]
fn atan2_op(a: Atan2<'_>) -> Result<Tensor> {
    float2(Atan2::NAME, a.self_, a.other, atan2)
}

#[aten("aten::xlogy.Tensor", dtypes = DType::ALL_TPU, numbers = "self, other", shard = pw())]
fn xlogy_tensor_op(a: XlogyTensor<'_>) -> Result<Tensor> {
    float2(XlogyTensor::NAME, a.self_, a.other, |e, x, y| {
        xlogy(e, x, y, false)
    })
}

#[aten("aten::xlogy.Scalar_Self", dtypes = DType::ALL_TPU, numbers = "other", shard = pw())]
fn xlogy_scalar_self_op(a: XlogyScalarSelf<'_>) -> Result<Tensor> {
    float2(
        XlogyScalarSelf::NAME,
        Arg::Number(a.self_),
        a.other,
        |e, x, y| xlogy(e, x, y, false),
    )
}

#[aten("aten::xlogy.Scalar_Other", dtypes = DType::ALL_TPU, numbers = "self", shard = pw())]
fn xlogy_scalar_other_op(a: XlogyScalarOther<'_>) -> Result<Tensor> {
    float2(
        XlogyScalarOther::NAME,
        a.self_,
        Arg::Number(a.other),
        |e, x, y| xlogy(e, x, y, false),
    )
}

#[aten("aten::special_xlog1py", dtypes = DType::ALL_TPU, numbers = "self, other", shard = pw())]
fn special_xlog1py_op(a: SpecialXlog1py<'_>) -> Result<Tensor> {
    float2(SpecialXlog1py::NAME, a.self_, a.other, |e, x, y| {
        xlogy(e, x, y, true)
    })
}

#[aten("aten::special_xlog1py.other_scalar", dtypes = DType::ALL_TPU, numbers = "self", shard = pw())]
fn special_xlog1py_other_scalar_op(a: SpecialXlog1pyOtherScalar<'_>) -> Result<Tensor> {
    let name = SpecialXlog1pyOtherScalar::NAME;
    float2(name, a.self_, Arg::Number(a.other), |e, x, y| {
        xlogy(e, x, y, true)
    })
}

#[aten("aten::special_xlog1py.self_scalar", dtypes = DType::ALL_TPU, numbers = "other", shard = pw())]
fn special_xlog1py_self_scalar_op(a: SpecialXlog1pySelfScalar<'_>) -> Result<Tensor> {
    let name = SpecialXlog1pySelfScalar::NAME;
    float2(name, Arg::Number(a.self_), a.other, |e, x, y| {
        xlogy(e, x, y, true)
    })
}

#[aten("aten::logaddexp", dtypes = DType::FLOATING, numbers = "self, other", shard = pw())]
fn logaddexp_op(a: Logaddexp<'_>) -> Result<Tensor> {
    float2(Logaddexp::NAME, a.self_, a.other, |e, x, y| {
        logaddexp(e, x, y, false)
    })
}

#[aten("aten::logaddexp2", dtypes = DType::FLOATING, numbers = "self, other", shard = pw())]
fn logaddexp2_op(a: Logaddexp2<'_>) -> Result<Tensor> {
    float2(Logaddexp2::NAME, a.self_, a.other, |e, x, y| {
        logaddexp(e, x, y, true)
    })
}

#[aten("aten::hypot", dtypes = DType::FLOATING, numbers = "self, other", shard = pw())]
fn hypot_op(a: Hypot<'_>) -> Result<Tensor> {
    float2(Hypot::NAME, a.self_, a.other, |e, x, y| {
        // m sqrt(1 + (n / m)^2) with m = max(|x|, |y|): no overflow on the way.
        let (ax, ay) = (e.abs(x), e.abs(y));
        let m = e.max(ax, ay);
        let n = e.min(ax, ay);
        let q = e.div(n, m);
        let q2 = e.mul(q, q);
        let s = e.addk(q2, 1.0);
        let s = e.sqrt(s);
        let r = e.mul(m, s);
        let z = e.eqk(m, 0.0);
        let r = e.selk(z, 0.0, r);
        // C: an infinite operand gives +inf, even with a NaN one.
        let (xi, yi) = (e.isinf(x), e.isinf(y));
        let inf = e.or(xi, yi);
        e.selk(inf, f64::INFINITY, r)
    })
}

#[aten("aten::copysign.Tensor", dtypes = DType::ALL_TPU, numbers = "self, other", shard = pw())]
fn copysign_tensor_op(a: CopysignTensor<'_>) -> Result<Tensor> {
    copysign(CopysignTensor::NAME, a.self_, a.other)
}

#[aten("aten::copysign.Scalar", dtypes = DType::ALL_TPU, numbers = "self", shard = pw())]
fn copysign_scalar_op(a: CopysignScalar<'_>) -> Result<Tensor> {
    copysign(CopysignScalar::NAME, a.self_, Arg::Number(a.other))
}
