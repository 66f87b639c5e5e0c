//! Pointwise families: ternary arithmetic (`addcmul`, `addcdiv`, `lerp`), `clamp` and `where`
//! forms, `rsub`/`sub.Scalar`, predicates (`isnan`, ..., `signbit`, `nan_to_num`), logic and
//! bitwise operators with shifts.
//!
//! Reference rules (PyTorch's): `addcmul`/`addcdiv`/`lerp` compute in the opmath type (f32 for
//! float dtypes) with the Python `value`/`weight` unrounded, `lerp` by ATen's two-sided formula;
//! integer `addcmul` truncates `value` to an integer; `addcdiv` of two integer tensors is an
//! error. `clamp` bounds and `where` numbers are converted to the common dtype
//! (`torch.result_type` of every operand). A left shift by a negative amount or the dtype's
//! width or more is 0; a right shift by a negative amount or `width - 1` or more fills with the
//! sign. Tolerances: `torch.testing`'s; the f32 device results round two or three times where
//! the f64 reference rounds once, far inside f32's rtol for the magnitudes drawn.

use proptest::prelude::*;
use tpuemu_backend::ops::Value;
use tpuemu_backend::{DType, Scalar};

use super::binary::{number, value_of};
use super::harness::{Input, Out, Sample, check, t, v};
use super::reference::{HostTensor, Operand, operand, result_type, round, zip_map};
use super::strategies::{
    Values, any_dtype, broadcast_pair, broadcast_triple, float_dtype, input, num_dtype, shape,
};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::addcmul", addcmul_addcdiv),
    ("aten::addcdiv", addcmul_addcdiv),
    ("aten::lerp.Scalar", lerp),
    ("aten::lerp.Tensor", lerp),
    ("aten::clamp.Tensor", clamp_tensor),
    ("aten::clamp_min", clamp_one_sided),
    ("aten::clamp_max", clamp_one_sided),
    ("aten::clamp_min.Tensor", clamp_one_sided),
    ("aten::clamp_max.Tensor", clamp_one_sided),
    ("aten::where.ScalarOther", where_numbers),
    ("aten::where.ScalarSelf", where_numbers),
    ("aten::where.Scalar", where_numbers),
    ("aten::rsub.Tensor", rsub_sub),
    ("aten::rsub.Scalar", rsub_sub),
    ("aten::sub.Scalar", rsub_sub),
    ("aten::isnan", predicates),
    ("aten::isinf", predicates),
    ("aten::isposinf", predicates),
    ("aten::isneginf", predicates),
    ("aten::isfinite", predicates),
    ("aten::signbit", predicates),
    ("aten::sgn", predicates),
    ("aten::nan_to_num", nan_to_num),
    ("aten::logical_xor", logical_xor),
    ("aten::bitwise_and.Tensor", bitwise_logic),
    ("aten::bitwise_or.Tensor", bitwise_logic),
    ("aten::bitwise_xor.Tensor", bitwise_logic),
    ("aten::bitwise_and.Scalar", bitwise_logic),
    ("aten::bitwise_or.Scalar", bitwise_logic),
    ("aten::bitwise_xor.Scalar", bitwise_logic),
    ("aten::bitwise_and.Scalar_Tensor", bitwise_logic),
    ("aten::bitwise_or.Scalar_Tensor", bitwise_logic),
    ("aten::bitwise_xor.Scalar_Tensor", bitwise_logic),
    ("aten::bitwise_not", bitwise_not),
    ("aten::bitwise_left_shift.Tensor", shifts),
    ("aten::bitwise_left_shift.Tensor_Scalar", shifts),
    ("aten::bitwise_left_shift.Scalar_Tensor", shifts),
    ("aten::bitwise_right_shift.Tensor", shifts),
    ("aten::bitwise_right_shift.Tensor_Scalar", shifts),
    ("aten::bitwise_right_shift.Scalar_Tensor", shifts),
];

/// Three inputs of broadcast-compatible shapes and dtypes from `dtypes`.
fn triple(
    dtypes: impl Strategy<Value = DType> + Clone,
    vals: Values,
) -> impl Strategy<Value = (Input, Input, Input)> {
    (broadcast_triple(), dtypes.clone(), dtypes.clone(), dtypes).prop_flat_map(
        move |((sa, sb, sc), da, db, dc)| {
            (
                input(sa, da, vals),
                input(sb, db, vals),
                input(sc, dc, vals),
            )
        },
    )
}

fn common3(a: &Input, b: &Input, c: &Input) -> DType {
    result_type(&[operand(&a.host), operand(&b.host), operand(&c.host)])
}

#[test]
fn addcmul_addcdiv() {
    for (op, div) in [("aten::addcmul", false), ("aten::addcdiv", true)] {
        let dtypes = if div { float_dtype() } else { num_dtype() };
        check(
            op,
            (
                triple(dtypes, Values::Special(4.0)),
                -2.0f64..2.0,
                any::<bool>(),
            )
                .prop_map(move |((a, b, c), value, given)| {
                    let cd = common3(&a, &b, &c);
                    let value = if given { value } else { 1.0 };
                    let k = if cd.is_float() {
                        value as f32 as f64
                    } else {
                        value.trunc()
                    };
                    let want = zip_map(&[&a.host, &b.host, &c.host], cd, |x| {
                        let (s, p, q) = (round(x[0], cd), round(x[1], cd), round(x[2], cd));
                        if div { s + k * p / q } else { s + k * p * q }
                    });
                    let mut args = vec![t(a), t(b), t(c)];
                    if given {
                        let value = if cd.is_float() {
                            Value::Float(value)
                        } else {
                            Value::Int(value.trunc() as i64)
                        };
                        args.push(v(value));
                    }
                    Sample::new(args, vec![Out::close(want)])
                }),
        );
    }
}

/// ATen's `lerp`.
fn lerp_ref(s: f64, e: f64, w: f64) -> f64 {
    if w.abs() < 0.5 {
        s + w * (e - s)
    } else {
        e - (e - s) * (1.0 - w)
    }
}

#[test]
fn lerp() {
    check(
        "aten::lerp.Scalar",
        (broadcast_pair(), float_dtype(), -1.5f64..1.5)
            .prop_flat_map(|((sa, sb), d, w)| {
                (
                    input(sa, d, Values::Special(4.0)),
                    input(sb, d, Values::Range(4.0)),
                    Just(w),
                )
            })
            .prop_map(|(a, b, w)| {
                let d = a.host.dtype;
                let wf = w as f32 as f64;
                let want = zip_map(&[&a.host, &b.host], d, |x| lerp_ref(x[0], x[1], wf));
                Sample::new(vec![t(a), t(b), v(Value::Float(w))], vec![Out::close(want)])
            }),
    );
    check(
        "aten::lerp.Tensor",
        (broadcast_triple(), float_dtype())
            .prop_flat_map(|((sa, sb, sc), d)| {
                (
                    input(sa, d, Values::Range(4.0)),
                    input(sb, d, Values::Range(4.0)),
                    input(sc, d, Values::Between(-1.5, 1.5)),
                )
            })
            .prop_map(|(a, b, w)| {
                let d = a.host.dtype;
                let want = zip_map(&[&a.host, &b.host, &w.host], d, |x| {
                    lerp_ref(x[0], x[1], x[2])
                });
                Sample::new(vec![t(a), t(b), t(w)], vec![Out::close(want)])
            }),
    );
}

/// `min(max(x, lo), hi)` with NaN propagating from any operand.
fn clamp_ref(x: f64, lo: Option<f64>, hi: Option<f64>) -> f64 {
    let mut r = x;
    for (b, is_lo) in [(lo, true), (hi, false)] {
        if let Some(b) = b {
            r = if r.is_nan() || b.is_nan() {
                f64::NAN
            } else if is_lo {
                r.max(b)
            } else {
                r.min(b)
            };
        }
    }
    r
}

#[test]
fn clamp_tensor() {
    check(
        "aten::clamp.Tensor",
        (triple(num_dtype(), Values::Special(4.0)), 0u8..3).prop_map(|((x, lo, hi), which)| {
            let (use_lo, use_hi) = (which != 1, which != 2);
            let mut hosts = vec![&x.host];
            let mut ops = vec![operand(&x.host)];
            for (used, b) in [(use_lo, &lo), (use_hi, &hi)] {
                if used {
                    hosts.push(&b.host);
                    ops.push(operand(&b.host));
                }
            }
            let c = result_type(&ops);
            let want = zip_map(&hosts, c, |v| {
                let mut k = 1;
                let mut bound = |used: bool| {
                    used.then(|| {
                        k += 1;
                        round(v[k - 1], c)
                    })
                };
                let (l, h) = (bound(use_lo), bound(use_hi));
                clamp_ref(round(v[0], c), l, h)
            });
            let opt = |used: bool, i: Input| if used { t(i) } else { v(Value::None) };
            let args = vec![t(x), opt(use_lo, lo), opt(use_hi, hi)];
            Sample::new(args, vec![Out::exact(want)])
        }),
    );
}

#[test]
fn clamp_one_sided() {
    for (op, lo) in [("aten::clamp_min", true), ("aten::clamp_max", false)] {
        check(
            op,
            (shape(), num_dtype())
                .prop_flat_map(|(s, d)| (input(s, d, Values::Special(4.0)), number(d)))
                .prop_map(move |(x, n)| {
                    let c = result_type(&[operand(&x.host), Operand::Number(n)]);
                    let b = round(n.to_f64(), c);
                    let want = zip_map(&[&x.host], c, |v| {
                        let r = round(v[0], c);
                        if lo {
                            clamp_ref(r, Some(b), None)
                        } else {
                            clamp_ref(r, None, Some(b))
                        }
                    });
                    Sample::new(vec![t(x), v(value_of(n))], vec![Out::exact(want)])
                }),
        );
    }
    for (op, lo) in [
        ("aten::clamp_min.Tensor", true),
        ("aten::clamp_max.Tensor", false),
    ] {
        check(
            op,
            (broadcast_pair(), num_dtype(), num_dtype())
                .prop_flat_map(|((sa, sb), da, db)| {
                    (
                        input(sa, da, Values::Special(4.0)),
                        input(sb, db, Values::Special(4.0)),
                    )
                })
                .prop_map(move |(x, b)| {
                    let c = result_type(&[operand(&x.host), operand(&b.host)]);
                    let want = zip_map(&[&x.host, &b.host], c, |v| {
                        let (r, b) = (round(v[0], c), round(v[1], c));
                        if lo {
                            clamp_ref(r, Some(b), None)
                        } else {
                            clamp_ref(r, None, Some(b))
                        }
                    });
                    Sample::new(vec![t(x), t(b)], vec![Out::exact(want)])
                }),
        );
    }
}

#[test]
fn where_numbers() {
    let cond_and = |d: DType| {
        (broadcast_pair(), Just(d)).prop_flat_map(|((sc, sx), d)| {
            (
                input(sc, DType::Bool, Values::Range(1.0)),
                input(sx, d, Values::Special(4.0)),
                number(d),
                number(d),
            )
        })
    };
    for op in ["aten::where.ScalarOther", "aten::where.ScalarSelf"] {
        check(
            op,
            any_dtype()
                .prop_flat_map(cond_and)
                .prop_map(move |(c, x, n, _)| {
                    let cd = result_type(&[operand(&x.host), Operand::Number(n)]);
                    let nv = round(n.to_f64(), cd);
                    let other_first = op.ends_with("ScalarSelf");
                    let want = zip_map(&[&c.host, &x.host], cd, |e| {
                        let xv = round(e[1], cd);
                        match (e[0] != 0.0, other_first) {
                            (true, false) | (false, true) => xv,
                            _ => nv,
                        }
                    });
                    let args = if other_first {
                        vec![t(c), v(value_of(n)), t(x)]
                    } else {
                        vec![t(c), t(x), v(value_of(n))]
                    };
                    Sample::new(args, vec![Out::exact(want)])
                }),
        );
    }
    check(
        "aten::where.Scalar",
        any_dtype()
            .prop_flat_map(cond_and)
            .prop_map(|(c, _, a, b)| {
                let cd = result_type(&[Operand::Number(a), Operand::Number(b)]);
                let want = zip_map(&[&c.host], cd, |e| {
                    round(if e[0] != 0.0 { a.to_f64() } else { b.to_f64() }, cd)
                });
                Sample::new(
                    vec![t(c), v(value_of(a)), v(value_of(b))],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn rsub_sub() {
    check(
        "aten::rsub.Tensor",
        (
            broadcast_pair(),
            num_dtype(),
            num_dtype(),
            prop_oneof![Just(1i64), Just(2), Just(-3)],
        )
            .prop_flat_map(|((sa, sb), da, db, al)| {
                (
                    input(sa, da, Values::Special(4.0)),
                    input(sb, db, Values::Special(4.0)),
                    Just(al),
                )
            })
            .prop_map(|(a, b, alpha)| {
                let c = result_type(&[operand(&a.host), operand(&b.host)]);
                let want = zip_map(&[&a.host, &b.host], c, |x| {
                    round(x[1], c) - alpha as f64 * round(x[0], c)
                });
                Sample::new(
                    vec![t(a), t(b), v(Value::Int(alpha))],
                    vec![Out::close(want)],
                )
            }),
    );
    for (op, reverse) in [("aten::rsub.Scalar", true), ("aten::sub.Scalar", false)] {
        check(
            op,
            (shape(), num_dtype())
                .prop_flat_map(|(s, d)| (input(s, d, Values::Special(4.0)), number(d)))
                .prop_map(move |(x, n)| {
                    let c = result_type(&[operand(&x.host), Operand::Number(n)]);
                    // The number converted to the common dtype (both measured on PyTorch 2.15).
                    let nv = round(n.to_f64(), c);
                    let want = zip_map(&[&x.host], c, |e| {
                        let xv = round(e[0], c);
                        if reverse { nv - xv } else { xv - nv }
                    });
                    Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
                }),
        );
    }
}

/// The IEEE sign bit of a value held as f64 (NaNs drawn here are positive).
fn sign_bit(x: f64) -> bool {
    x.is_sign_negative()
}

type Pred = (&'static str, fn(f64, DType) -> f64);

const PREDICATES: [Pred; 7] = [
    ("aten::isnan", |x, _| x.is_nan() as u8 as f64),
    ("aten::isinf", |x, _| x.is_infinite() as u8 as f64),
    ("aten::isposinf", |x, _| (x == f64::INFINITY) as u8 as f64),
    ("aten::isneginf", |x, _| {
        (x == f64::NEG_INFINITY) as u8 as f64
    }),
    ("aten::isfinite", |x, _| x.is_finite() as u8 as f64),
    ("aten::signbit", |x, d| {
        (if d.is_float() { sign_bit(x) } else { x < 0.0 }) as u8 as f64
    }),
    ("aten::sgn", |x, _| {
        ((0.0 < x) as i8 - (x < 0.0) as i8) as f64
    }),
];

#[test]
fn predicates() {
    for (op, f) in PREDICATES {
        check(
            op,
            (shape(), any_dtype())
                .prop_flat_map(|(s, d)| input(s, d, Values::Special(4.0)))
                .prop_map(move |x| {
                    let d = x.host.dtype;
                    let out = if op == "aten::sgn" { d } else { DType::Bool };
                    let want = zip_map(&[&x.host], out, |v| f(v[0], d));
                    Sample::new(vec![t(x)], vec![Out::exact(want)])
                }),
        );
    }
}

#[test]
fn nan_to_num() {
    let repl = || prop_oneof![Just(None), (-1e3f64..1e3).prop_map(Some)];
    check(
        "aten::nan_to_num",
        (shape(), any_dtype(), repl(), repl(), repl())
            .prop_flat_map(|(s, d, a, b, c)| (input(s, d, Values::Special(4.0)), Just((a, b, c))))
            .prop_map(|(x, (nan, pos, neg))| {
                let d = x.host.dtype;
                let big = match d {
                    DType::BF16 => half::bf16::MAX.to_f64(),
                    DType::F16 => half::f16::MAX.to_f64(),
                    _ => f32::MAX as f64,
                };
                let want = zip_map(&[&x.host], d, |v| {
                    let v = v[0];
                    if v.is_nan() {
                        nan.unwrap_or(0.0)
                    } else if v == f64::INFINITY {
                        pos.unwrap_or(big)
                    } else if v == f64::NEG_INFINITY {
                        neg.unwrap_or(-big)
                    } else {
                        v
                    }
                });
                let f = |o: Option<f64>| o.map_or(Value::None, Value::Float);
                Sample::new(
                    vec![t(x), v(f(nan)), v(f(pos)), v(f(neg))],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn logical_xor() {
    check(
        "aten::logical_xor",
        (broadcast_pair(), any_dtype(), any_dtype())
            .prop_flat_map(|((sa, sb), da, db)| {
                (
                    input(sa, da, Values::Special(2.0)),
                    input(sb, db, Values::Special(2.0)),
                )
            })
            .prop_map(|(a, b)| {
                let want = zip_map(&[&a.host, &b.host], DType::Bool, |x| {
                    ((x[0] != 0.0) != (x[1] != 0.0)) as u8 as f64
                });
                Sample::new(vec![t(a), t(b)], vec![Out::exact(want)])
            }),
    );
}

/// An integer or bool dtype.
fn integral() -> BoxedStrategy<DType> {
    prop_oneof![Just(DType::I32), Just(DType::I64), Just(DType::Bool)].boxed()
}

/// Where the number goes in a two-operand integer operator.
#[derive(Clone, Copy, Debug)]
enum Form {
    Tensors,
    Number,
    NumberFirst,
}

fn int_number(d: DType, lo: i64, hi: i64) -> BoxedStrategy<Scalar> {
    if d == DType::Bool {
        any::<bool>().prop_map(Scalar::Bool).boxed()
    } else {
        (lo..=hi).prop_map(Scalar::Int).boxed()
    }
}

/// Builds the sample of a two-operand integer operator in `form`; `f(a, b, common)`.
fn int_binary(
    base: &'static str,
    suffixes: [&'static str; 3],
    dtypes: BoxedStrategy<DType>,
    vals_b: Values,
    numbers: [(i64, i64); 2],
    f: fn(f64, f64, DType) -> f64,
) {
    for (k, fm) in [Form::Tensors, Form::Number, Form::NumberFirst]
        .into_iter()
        .enumerate()
    {
        let op: &'static str = Box::leak(format!("{base}.{}", suffixes[k]).into_boxed_str());
        check(
            op,
            (broadcast_pair(), dtypes.clone(), dtypes.clone())
                .prop_flat_map(move |((sa, sb), da, db)| {
                    // A number stands for the operand it replaces.
                    let (lo, hi) = numbers[usize::from(matches!(fm, Form::NumberFirst))];
                    (
                        input(sa, da, Values::Range(300.0)),
                        input(sb, db, vals_b),
                        int_number(db, lo, hi),
                    )
                })
                .prop_map(move |(a, b, n)| {
                    let (ops, args, hosts): (Vec<Operand>, _, Vec<HostTensor>) = match fm {
                        Form::Tensors => (
                            vec![operand(&a.host), operand(&b.host)],
                            vec![t(a.clone()), t(b.clone())],
                            vec![a.host.clone(), b.host.clone()],
                        ),
                        Form::Number => (
                            vec![operand(&a.host), Operand::Number(n)],
                            vec![t(a.clone()), v(value_of(n))],
                            vec![a.host.clone(), HostTensor::scalar(n.to_f64(), DType::I64)],
                        ),
                        Form::NumberFirst => (
                            vec![Operand::Number(n), operand(&b.host)],
                            vec![v(value_of(n)), t(b.clone())],
                            vec![HostTensor::scalar(n.to_f64(), DType::I64), b.host.clone()],
                        ),
                    };
                    let c = result_type(&ops);
                    let want = zip_map(&[&hosts[0], &hosts[1]], c, |x| {
                        f(round(x[0], c), round(x[1], c), c)
                    });
                    Sample::new(args, vec![Out::exact(want)])
                }),
        );
    }
}

#[test]
fn bitwise_logic() {
    let and: fn(f64, f64, DType) -> f64 = |a, b, _| ((a as i64) & (b as i64)) as f64;
    let or: fn(f64, f64, DType) -> f64 = |a, b, _| ((a as i64) | (b as i64)) as f64;
    let xor: fn(f64, f64, DType) -> f64 = |a, b, _| ((a as i64) ^ (b as i64)) as f64;
    let forms = ["Tensor", "Scalar", "Scalar_Tensor"];
    let r = Values::Range(300.0);
    let n = [(-300, 300), (-300, 300)];
    int_binary("aten::bitwise_and", forms, integral(), r, n, and);
    int_binary("aten::bitwise_or", forms, integral(), r, n, or);
    int_binary("aten::bitwise_xor", forms, integral(), r, n, xor);
}

#[test]
fn bitwise_not() {
    check(
        "aten::bitwise_not",
        (shape(), integral())
            .prop_flat_map(|(s, d)| input(s, d, Values::Range(1000.0)))
            .prop_map(|x| {
                let d = x.host.dtype;
                let want = zip_map(&[&x.host], d, |e| {
                    if d == DType::Bool {
                        1.0 - e[0]
                    } else {
                        !(e[0] as i64) as f64
                    }
                });
                Sample::new(vec![t(x)], vec![Out::exact(want)])
            }),
    );
}

/// Bits of an integer dtype.
fn width(d: DType) -> i64 {
    if d == DType::I64 { 64 } else { 32 }
}

/// ATen's `lshift`: 0 outside `[0, width)`; wraps to the dtype.
fn lshift(a: f64, b: f64, d: DType) -> f64 {
    let (a, b) = (a as i64, b as i64);
    if b < 0 || b >= width(d) {
        return 0.0;
    }
    let r = a.wrapping_shl(b as u32);
    round(r as f64, d)
}

/// ATen's `rshift`: the sign fill outside `[0, width - 1)`.
fn rshift(a: f64, b: f64, d: DType) -> f64 {
    let (a, b) = (a as i64, b as i64);
    let b = if b < 0 || b >= width(d) - 1 {
        width(d) - 1
    } else {
        b
    };
    (a >> b.min(63)) as f64
}

#[test]
fn shifts() {
    let ints = prop_oneof![Just(DType::I32), Just(DType::I64)].boxed();
    let forms = ["Tensor", "Tensor_Scalar", "Scalar_Tensor"];
    // Left shifts of int64 stay within 32 bits here (values up to 300, amounts up to 20).
    let (l, r) = (Values::Between(-3.0, 20.0), Values::Between(-3.0, 70.0));
    int_binary(
        "aten::bitwise_left_shift",
        forms,
        ints.clone(),
        l,
        [(-3, 20), (-300, 300)],
        lshift,
    );
    int_binary(
        "aten::bitwise_right_shift",
        forms,
        ints,
        r,
        [(-3, 70), (-300, 300)],
        rshift,
    );
}
