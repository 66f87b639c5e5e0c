//! More elementwise math (`ops::pointwise::math`) against f64 math (Rust's `f64` methods and
//! the `libm` crate) rounded to the output dtype, at `torch.testing`'s default tolerances.
//!
//! Dtype rules (PyTorch's): the floating operators give float32 for integer and bool inputs,
//! binary ones promote their operands first (`torch.result_type`); `round`/`trunc` keep the
//! dtype (the identity on integers); `fmax`/`fmin` keep the common dtype. Special values follow
//! C's `<math.h>`, which ATen's CPU kernels call, and which `f64`/`libm` implement.

use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Out, Sample, check, t, v};
use super::reference::{operand, result_type, zip_map};
use super::strategies::{Values, any_dtype, broadcast_pair, float_dtype, input, num_dtype, shape};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::atan", unary),
    ("aten::asin", unary),
    ("aten::acos", unary),
    ("aten::asinh", unary),
    ("aten::acosh", unary),
    ("aten::atanh", unary),
    ("aten::sinh", unary),
    ("aten::cosh", unary),
    ("aten::tan", unary),
    ("aten::exp2", unary),
    ("aten::expm1", unary),
    ("aten::log2", unary),
    ("aten::log10", unary),
    ("aten::erfc", unary),
    ("aten::sinc", unary),
    ("aten::rad2deg", unary),
    ("aten::deg2rad", unary),
    ("aten::angle", unary),
    ("aten::special_entr", unary),
    ("aten::logit", logit),
    ("aten::round", rounding),
    ("aten::round.decimals", rounding),
    ("aten::trunc", rounding),
    ("aten::frac", rounding),
    ("aten::atan2", binary),
    ("aten::xlogy.Tensor", binary),
    ("aten::xlogy.Scalar_Self", scalars),
    ("aten::xlogy.Scalar_Other", scalars),
    ("aten::special_xlog1py", binary),
    ("aten::special_xlog1py.other_scalar", scalars),
    ("aten::special_xlog1py.self_scalar", scalars),
    ("aten::logaddexp", binary),
    ("aten::logaddexp2", binary),
    ("aten::hypot", binary),
    ("aten::copysign.Tensor", binary),
    ("aten::copysign.Scalar", scalars),
    ("aten::fmax", fmax_fmin),
    ("aten::fmin", fmax_fmin),
    ("aten::heaviside", heaviside),
    ("aten::ldexp.Tensor", ldexp),
];

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let p = std::f64::consts::PI * x;
        p.sin() / p
    }
}

fn entr(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x > 0.0 {
        -x * x.ln()
    } else if x == 0.0 {
        0.0
    } else {
        f64::NEG_INFINITY
    }
}

fn angle(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x < 0.0 {
        std::f64::consts::PI
    } else {
        0.0
    }
}

/// An operator, its f64 definition and the range its inputs are drawn from.
type Unary = (&'static str, fn(f64) -> f64, Values);

const UNARY: [Unary; 19] = [
    ("aten::atan", f64::atan, Values::Special(20.0)),
    ("aten::asin", f64::asin, Values::Between(-1.1, 1.1)),
    ("aten::acos", f64::acos, Values::Between(-1.1, 1.1)),
    ("aten::asinh", f64::asinh, Values::Special(20.0)),
    ("aten::acosh", f64::acosh, Values::Between(0.5, 30.0)),
    ("aten::atanh", f64::atanh, Values::Between(-1.1, 1.1)),
    ("aten::sinh", f64::sinh, Values::Special(8.0)),
    ("aten::cosh", f64::cosh, Values::Special(8.0)),
    ("aten::tan", f64::tan, Values::Range(1.4)),
    ("aten::exp2", f64::exp2, Values::Special(8.0)),
    ("aten::expm1", f64::exp_m1, Values::Special(6.0)),
    ("aten::log2", f64::log2, Values::Special(50.0)),
    ("aten::log10", f64::log10, Values::Special(50.0)),
    ("aten::erfc", libm::erfc, Values::Special(4.0)),
    ("aten::sinc", sinc, Values::Special(6.0)),
    ("aten::rad2deg", f64::to_degrees, Values::Special(6.0)),
    ("aten::deg2rad", f64::to_radians, Values::Special(200.0)),
    ("aten::angle", angle, Values::Special(6.0)),
    ("aten::special_entr", entr, Values::Special(6.0)),
];

#[test]
fn unary() {
    for (op, f, vals) in UNARY {
        check(op, super::unary::float_unary(f, vals));
    }
}

#[test]
fn logit() {
    check(
        "aten::logit",
        (shape(), float_dtype(), prop::option::of(0.0f64..0.2))
            .prop_flat_map(|(s, d, eps)| (input(s, d, Values::Between(-0.1, 1.1)), Just(eps)))
            .prop_map(|(x, eps)| {
                // ATen's `scalar_t` arithmetic: each operation rounds to bf16/f16.
                let d = x.host.dtype;
                let r = |v: f64| super::reference::round(v, d);
                let want = zip_map(&[&x.host], d, |v| {
                    let z = match eps.map(r) {
                        Some(lo) => {
                            let hi = r(1.0 - lo);
                            if v[0] < lo {
                                lo
                            } else if v[0] > hi {
                                hi
                            } else {
                                v[0]
                            }
                        }
                        None => v[0],
                    };
                    r(z / r(1.0 - z)).ln()
                });
                let mut args = vec![t(x)];
                if let Some(e) = eps {
                    args.push(v(Value::Float(e)));
                }
                Sample::new(args, vec![Out::close(want)])
            }),
    );
}

#[test]
fn rounding() {
    for (op, f) in [
        ("aten::round", f64::round_ties_even as fn(f64) -> f64),
        ("aten::trunc", f64::trunc),
    ] {
        check(
            op,
            (shape(), num_dtype())
                .prop_flat_map(|(s, d)| input(s, d, Values::Special(6.0)))
                .prop_map(move |x| {
                    let want = zip_map(&[&x.host], x.host.dtype, |v| f(v[0]));
                    Sample::new(vec![t(x)], vec![Out::exact(want)])
                }),
        );
    }
    check(
        "aten::frac",
        (shape(), float_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(6.0)))
            .prop_map(|x| {
                let want = zip_map(&[&x.host], x.host.dtype, |v| v[0] - v[0].trunc());
                Sample::new(vec![t(x)], vec![Out::close(want)])
            }),
    );
    // ATen: nearbyint(x * 10^d) / 10^d in f32, or nearbyint(x / 10^-d) * 10^-d.
    check(
        "aten::round.decimals",
        (shape(), float_dtype(), -2i64..4)
            .prop_flat_map(|(s, d, dec)| (input(s, d, Values::Special(300.0)), Just(dec)))
            .prop_map(|(x, dec)| {
                let p = 10f64.powi(dec.unsigned_abs() as i32);
                let want = zip_map(&[&x.host], x.host.dtype, |v| {
                    let x = v[0] as f32;
                    let p = p as f32;
                    if dec >= 0 {
                        ((x * p).round_ties_even() / p) as f64
                    } else {
                        ((x / p).round_ties_even() * p) as f64
                    }
                });
                Sample::new(vec![t(x), v(Value::Int(dec))], vec![Out::close(want)])
            }),
    );
}

fn xlogy(x: f64, y: f64, log1p: bool) -> f64 {
    if y.is_nan() {
        y
    } else if x == 0.0 {
        0.0
    } else if log1p {
        x * y.ln_1p()
    } else {
        x * y.ln()
    }
}

fn logaddexp(a: f64, b: f64, base2: bool) -> f64 {
    if a.is_infinite() && a == b {
        return a;
    }
    let m = a.max(b);
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if base2 {
        m + (-(a - b).abs()).exp2().ln_1p() / std::f64::consts::LN_2
    } else {
        m + (-(a - b).abs()).exp().ln_1p()
    }
}

/// A binary operator, its f64 definition, its dtypes (float-only or any) and input range.
type Binary = (&'static str, fn(f64, f64) -> f64, bool, Values);

const BINARY: [Binary; 7] = [
    ("aten::atan2", f64::atan2, false, Values::Special(5.0)),
    (
        "aten::xlogy.Tensor",
        |x, y| xlogy(x, y, false),
        false,
        Values::Special(5.0),
    ),
    (
        "aten::special_xlog1py",
        |x, y| xlogy(x, y, true),
        false,
        Values::Special(5.0),
    ),
    (
        "aten::logaddexp",
        |a, b| logaddexp(a, b, false),
        true,
        Values::Special(20.0),
    ),
    (
        "aten::logaddexp2",
        |a, b| logaddexp(a, b, true),
        true,
        Values::Special(20.0),
    ),
    ("aten::hypot", f64::hypot, true, Values::Special(20.0)),
    (
        "aten::copysign.Tensor",
        f64::copysign,
        false,
        Values::Special(5.0),
    ),
];

#[test]
fn binary() {
    for (op, f, float_only, vals) in BINARY {
        let dtypes = if float_only {
            float_dtype()
        } else {
            any_dtype()
        };
        check(
            op,
            (broadcast_pair(), dtypes.clone(), dtypes)
                .prop_flat_map(move |((sa, sb), da, db)| {
                    // Float-only operators take one dtype (PyTorch's float-only kernels
                    // promote, but a bf16/f16 mix is covered by the other operators).
                    let db = if float_only { da } else { db };
                    (input(sa, da, vals), input(sb, db, vals))
                })
                .prop_map(move |(a, b)| {
                    let c = result_type(&[operand(&a.host), operand(&b.host)]);
                    let out = if c.is_float() { c } else { DType::F32 };
                    let want = zip_map(&[&a.host, &b.host], out, |x| f(x[0], x[1]));
                    Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
                }),
        );
    }
}

/// The overloads with a Python number: `xlogy(number, tensor)`, `xlogy(tensor, number)`,
/// `copysign(tensor, number)`; the number takes part as a float32 value.
#[test]
fn scalars() {
    // (operator, the number comes first, log1p of the second operand)
    for (op, number_first, log1p) in [
        ("aten::xlogy.Scalar_Self", true, false),
        ("aten::xlogy.Scalar_Other", false, false),
        ("aten::special_xlog1py.self_scalar", true, true),
        ("aten::special_xlog1py.other_scalar", false, true),
        ("aten::copysign.Scalar", false, false),
    ] {
        check(
            op,
            (shape(), float_dtype(), -3.0f64..3.0)
                .prop_flat_map(|(s, d, k)| (input(s, d, Values::Special(4.0)), Just(k)))
                .prop_map(move |(x, k)| {
                    let d = x.host.dtype;
                    let kr = super::reference::round(k, d);
                    let want = zip_map(&[&x.host], d, |v| match op {
                        "aten::copysign.Scalar" => v[0].copysign(kr),
                        _ if number_first => xlogy(kr, v[0], log1p),
                        _ => xlogy(v[0], kr, log1p),
                    });
                    let args = if number_first {
                        vec![v(Value::Float(k)), t(x)]
                    } else {
                        vec![t(x), v(Value::Float(k))]
                    };
                    Sample::new(args, vec![Out::close(want)])
                }),
        );
    }
}

#[test]
fn fmax_fmin() {
    for (op, max) in [("aten::fmax", true), ("aten::fmin", false)] {
        check(
            op,
            (broadcast_pair(), num_dtype(), num_dtype())
                .prop_flat_map(|((sa, sb), da, db)| {
                    (
                        input(sa, da, Values::Special(4.0)),
                        input(sb, db, Values::Special(4.0)),
                    )
                })
                .prop_map(move |(a, b)| {
                    let c = result_type(&[operand(&a.host), operand(&b.host)]);
                    // C's fmax/fmin: a NaN operand is ignored.
                    let want = zip_map(&[&a.host, &b.host], c, |x| {
                        if max { x[0].max(x[1]) } else { x[0].min(x[1]) }
                    });
                    Sample::new(vec![t(a), t(b)], vec![Out::exact(want)])
                }),
        );
    }
}

#[test]
fn heaviside() {
    check(
        "aten::heaviside",
        (broadcast_pair(), num_dtype())
            .prop_flat_map(|((sa, sb), d)| {
                (
                    input(sa, d, Values::Ties),
                    input(sb, d, Values::Special(4.0)),
                )
            })
            .prop_map(|(x, vals)| {
                let d = x.host.dtype;
                let want = zip_map(&[&x.host, &vals.host], d, |z| {
                    if z[0] == 0.0 {
                        z[1]
                    } else {
                        (z[0] > 0.0) as u8 as f64
                    }
                });
                Sample::new(vec![t(x), t(vals)], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn ldexp() {
    check(
        "aten::ldexp.Tensor",
        (broadcast_pair(), float_dtype())
            .prop_flat_map(|((sa, sb), d)| {
                (
                    input(sa, d, Values::Special(4.0)),
                    input(sb, DType::I32, Values::Range(10.0)),
                )
            })
            .prop_map(|(x, e)| {
                // `x * 2^e`: PyTorch 2.15 keeps a floating `x`'s dtype for an integer exponent.
                let out = x.host.dtype;
                let want = zip_map(&[&x.host, &e.host], out, |z| z[0] * z[1].exp2());
                Sample::new(vec![t(x), t(e)], vec![Out::exact(want)])
            }),
    );
}
