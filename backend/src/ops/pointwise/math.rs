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
use super::{
    ALL, Arg, Ex, FLOAT, NUM, Number, arg, float1, float2, not_implemented, promoted, promoted_as,
    t1,
};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::PRef;
use crate::ops::args::Args;
use crate::ops::registry::{OpDef, OpImpl};
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

/// Runs the floating unary operator `name` (its function is looked up in [`UNARY`]).
fn run_unary(a: &Args) -> Result<Vec<crate::ops::Value>> {
    // A derived form (`atan_`, `atan.out`) runs this with its own name.
    let name = crate::ops::registry::registry()
        .get(a.op())
        .and_then(|d| d.derived_from())
        .unwrap_or(a.op());
    let f = UNARY
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| TpuError::Device(format!("{name}: no unary function")))?;
    t1(float1(name, a.tensor(0)?, f))
}

/// The floating unary operators of this file and their f32 programs.
/// An f32 program of one value.
type Fn1 = fn(&mut Ex, PRef) -> PRef;

const UNARY: &[(&str, Fn1)] = &[
    ("aten::atan", atan),
    ("aten::asin", asin),
    ("aten::acos", acos),
    ("aten::asinh", asinh),
    ("aten::acosh", acosh),
    ("aten::atanh", atanh),
    ("aten::sinh", sinh),
    ("aten::cosh", cosh),
    ("aten::tan", |e, x| {
        let (s, c) = (e.sin(x), e.cos(x));
        e.div(s, c)
    }),
    ("aten::exp2", |e, x| {
        let t = e.mulk(x, LN_2);
        e.exp(t)
    }),
    ("aten::expm1", |e, x| e.expm1(x)),
    ("aten::log2", |e, x| {
        let l = e.log(x);
        e.mulk(l, 1.0 / LN_2)
    }),
    ("aten::log10", |e, x| {
        let l = e.log(x);
        e.mulk(l, 1.0 / LN_10)
    }),
    ("aten::erfc", erfc),
    ("aten::sinc", sinc),
    ("aten::rad2deg", |e, x| e.mulk(x, 180.0 / PI)),
    ("aten::deg2rad", |e, x| e.mulk(x, PI / 180.0)),
    ("aten::angle", |e, x| {
        // Real inputs: pi below 0, else 0; NaN stays.
        let z = e.k(0.0);
        let n = e.ltk(x, 0.0);
        let r = e.selk(n, PI, z);
        let isnan = e.isnan(x);
        e.sel(isnan, x, r)
    }),
];

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
    promoted_as(name, &[Arg::T(x)], d, Number::Common, d, move |p, v, _| {
        if d.is_float() {
            let v = p.cast(v[0], DType::F32);
            f(&mut Ex::new(p), v)
        } else {
            v[0]
        }
    })
}

/// `round(x, decimals)`: ATen's `nearbyint(x * 10^d) / 10^d` (for negative `d`,
/// `nearbyint(x / 10^-d) * 10^-d`) in f32.
pub fn round_decimals(x: &Tensor, decimals: i64) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(not_implemented("round_cpu", x.dtype()));
    }
    let p10 = 10f64.powi(decimals.unsigned_abs().min(300) as i32) as f32 as f64;
    rounding("aten::round.decimals", "round_cpu", x, move |e, v| {
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
        &[Arg::T(a), Arg::T(b)],
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
fn heaviside(x: &Tensor, values: &Tensor) -> Result<Tensor> {
    if x.dtype() != values.dtype() {
        return Err(TpuError::DtypeMismatch(
            "heaviside is not yet implemented for tensors with different dtypes".into(),
        ));
    }
    let d = x.dtype();
    promoted_as(
        "aten::heaviside",
        &[Arg::T(x), Arg::T(values)],
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
fn ldexp(x: &Tensor, ex: &Tensor) -> Result<Tensor> {
    use crate::dtype::{Operand, result_type};
    // PyTorch 2.15 keeps a floating `x`'s dtype for an integer exponent.
    let out = match (x.dtype().is_float(), ex.dtype().is_float()) {
        (true, false) => x.dtype(),
        (_, true) => result_type(&[crate::ops::binary::operand(x), Operand::Tensor(ex.dtype())]),
        (false, false) => DType::F32,
    };
    promoted_as(
        "aten::ldexp.Tensor",
        &[Arg::T(x), Arg::T(ex)],
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

fn pw() -> Sharding {
    Sharding::pointwise(Lin::No)
}

fn unary_defs() -> Vec<OpDef> {
    UNARY
        .iter()
        .map(|(name, _)| OpDef::new(name, OpImpl::Kernel, ALL, |_, a| run_unary(a)).shard(pw()))
        .collect()
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let k = OpImpl::Kernel;
    let mut v = unary_defs();
    v.extend([
        OpDef::new("aten::atan2", k, ALL, |_, a| {
            t1(float2("aten::atan2", arg(a, 0)?, arg(a, 1)?, atan2))
        })
        .shard(pw()),
        OpDef::new("aten::logit", k, ALL, |_, a| {
            let (x, eps) = (a.tensor(0)?, a.opt_float(1)?);
            let d = x.dtype();
            t1(float1("aten::logit", x, move |e, v| logit(e, v, eps, d)))
        })
        .shard(pw()),
        OpDef::new("aten::round", k, NUM, |_, a| {
            t1(rounding(
                "aten::round",
                "round_cpu",
                a.tensor(0)?,
                |e, x| e.round(x),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::round.decimals", k, FLOAT, |_, a| {
            t1(round_decimals(a.tensor(0)?, a.int_or(1, 0)?))
        })
        .shard(pw()),
        OpDef::new("aten::trunc", k, NUM, |_, a| {
            t1(rounding(
                "aten::trunc",
                "trunc_cpu",
                a.tensor(0)?,
                |e, x| e.trunc(x),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::frac", k, FLOAT, |_, a| {
            let x = a.tensor(0)?;
            if !x.dtype().is_float() {
                return Err(not_implemented("frac_cpu", x.dtype()));
            }
            t1(rounding("aten::frac", "frac_cpu", x, |e, v| {
                let t = e.trunc(v);
                e.sub(v, t)
            }))
        })
        .shard(pw()),
        OpDef::new("aten::xlogy.Tensor", k, ALL, |_, a| {
            t1(float2(
                "aten::xlogy.Tensor",
                arg(a, 0)?,
                arg(a, 1)?,
                |e, x, y| xlogy(e, x, y, false),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::xlogy.Scalar_Self", k, ALL, |_, a| {
            t1(float2(
                "aten::xlogy.Scalar_Self",
                arg(a, 0)?,
                arg(a, 1)?,
                |e, x, y| xlogy(e, x, y, false),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::xlogy.Scalar_Other", k, ALL, |_, a| {
            t1(float2(
                "aten::xlogy.Scalar_Other",
                arg(a, 0)?,
                arg(a, 1)?,
                |e, x, y| xlogy(e, x, y, false),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::special_xlog1py", k, ALL, |_, a| {
            t1(float2(
                "aten::special_xlog1py",
                arg(a, 0)?,
                arg(a, 1)?,
                |e, x, y| xlogy(e, x, y, true),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::special_entr", k, ALL, |_, a| {
            t1(float1("aten::special_entr", a.tensor(0)?, entr))
        })
        .shard(pw()),
        OpDef::new("aten::logaddexp", k, FLOAT, |_, a| {
            t1(float2(
                "aten::logaddexp",
                arg(a, 0)?,
                arg(a, 1)?,
                |e, x, y| logaddexp(e, x, y, false),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::logaddexp2", k, FLOAT, |_, a| {
            t1(float2(
                "aten::logaddexp2",
                arg(a, 0)?,
                arg(a, 1)?,
                |e, x, y| logaddexp(e, x, y, true),
            ))
        })
        .shard(pw()),
        OpDef::new("aten::fmax", k, ALL, |_, a| {
            t1(fmaxmin("aten::fmax", a.tensor(0)?, a.tensor(1)?, true))
        })
        .shard(pw()),
        OpDef::new("aten::fmin", k, ALL, |_, a| {
            t1(fmaxmin("aten::fmin", a.tensor(0)?, a.tensor(1)?, false))
        })
        .shard(pw()),
        OpDef::new("aten::hypot", k, FLOAT, |_, a| {
            t1(float2("aten::hypot", arg(a, 0)?, arg(a, 1)?, |e, x, y| {
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
            }))
        })
        .shard(pw()),
        OpDef::new("aten::copysign.Tensor", k, ALL, |_, a| {
            t1(copysign("aten::copysign.Tensor", arg(a, 0)?, arg(a, 1)?))
        })
        .shard(pw()),
        OpDef::new("aten::copysign.Scalar", k, ALL, |_, a| {
            t1(copysign("aten::copysign.Scalar", arg(a, 0)?, arg(a, 1)?))
        })
        .shard(pw()),
        OpDef::new("aten::heaviside", k, ALL, |_, a| {
            t1(heaviside(a.tensor(0)?, a.tensor(1)?))
        })
        .shard(pw()),
        OpDef::new("aten::ldexp.Tensor", k, ALL, |_, a| {
            t1(ldexp(a.tensor(0)?, a.tensor(1)?))
        })
        .shard(pw()),
    ]);
    v
}
