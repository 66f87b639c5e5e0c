//! Binary and ternary elementwise operators: arithmetic, comparisons, logic, `where`, `clamp`,
//! `remainder`, `pow`, over broadcast pairs of any dtypes (promotion by `torch.result_type`),
//! zero-dimensional operands and Python numbers, NaN and infinities included.
//!
//! PyTorch details the reference follows:
//! - `mul`/`div` with a Python number, or with a tensor that is one value broadcast over the
//!   iteration (0-d, all dims 1, or expanded: TensorIterator's `is_scalar`), and a bf16/f16
//!   common dtype compute in f32 with that value unrounded (ATen's `original_scalar_value`);
//!   `add`/`sub`, comparisons and `clamp` round a number to the common dtype first (measured on
//!   PyTorch 2.15: `torch.ops.aten.add.Scalar(x_f16, 0.93)` equals `x + f16(0.93)`);
//! - `div(rounding_mode='trunc')` truncates the quotient; `'floor'` is ATen's
//!   `div_floor_floating` (`(a - fmod(a, b)) / b`, corrected), which is what Python's `//`
//!   gives (`1 // 0.1 == 9`). For bf16/f16 tensor divisors that are not `is_scalar`, ATen
//!   computes on `Vectorized<BFloat16>`: the `trunc` quotient is rounded to the dtype before
//!   truncating, and every step of `div_floor_floating` rounds to the dtype;
//! - integer division and remainder by zero raise in PyTorch (ZeroDivisionError), so the integer
//!   samples have no zero divisors (a kernel cannot raise: that case is not checked).

use proptest::prelude::*;
use tpuemu_backend::ops::Value;
use tpuemu_backend::{DType, Scalar};

use super::division::nonzero_int;
use super::harness::{Input, Out, Sample, check, check_samples, t, tp, v};
use super::reference::{HostTensor, Operand, operand, result_type, round, zip_map};
use super::strategies::{
    Values, any_dtype, broadcast_pair, broadcast_triple, input, num_dtype, shape,
};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::add.Tensor", add_tensor),
    ("aten::add.Scalar", add_scalar),
    ("aten::sub.Tensor", sub_tensor),
    ("aten::mul.Tensor", mul_tensor),
    ("aten::mul.Scalar", mul_scalar),
    ("aten::pow.Tensor_Tensor", pow_tensor),
    ("aten::pow.Tensor_Scalar", pow_scalar),
    ("aten::pow.Scalar", pow_number_base),
    ("aten::maximum", maximum_minimum),
    ("aten::minimum", maximum_minimum),
    ("aten::where.self", where_self),
    ("aten::eq.Tensor", comparisons_tensor),
    ("aten::ne.Tensor", comparisons_tensor),
    ("aten::lt.Tensor", comparisons_tensor),
    ("aten::le.Tensor", comparisons_tensor),
    ("aten::gt.Tensor", comparisons_tensor),
    ("aten::ge.Tensor", comparisons_tensor),
    ("aten::eq.Scalar", comparisons_scalar),
    ("aten::eq.Scalar", number_rounding_edges),
    ("aten::ne.Scalar", comparisons_scalar),
    ("aten::lt.Scalar", comparisons_scalar),
    ("aten::le.Scalar", comparisons_scalar),
    ("aten::gt.Scalar", comparisons_scalar),
    ("aten::ge.Scalar", comparisons_scalar),
    ("aten::logical_and", logical_and_or),
    ("aten::logical_or", logical_and_or),
    ("aten::logical_not", logical_not),
    ("aten::clamp", clamp),
    ("aten::remainder.Tensor", remainder_tensor),
    ("aten::remainder.Scalar", remainder_scalar),
    ("aten::remainder.Scalar", number_rounding_edges),
];

/// Two inputs of broadcast-compatible shapes, of one dtype from `dtypes` or (a third of the
/// time) two.
pub(super) fn pair(
    dtypes: impl Strategy<Value = DType> + Clone,
    vals: Values,
) -> impl Strategy<Value = (Input, Input)> {
    (broadcast_pair(), dtypes.clone(), dtypes, 0u8..3).prop_flat_map(
        move |((sa, sb), da, db, same)| {
            let db = if same > 0 { da } else { db };
            (input(sa, da, vals), input(sb, db, vals))
        },
    )
}

/// A Python number of a kind that suits `dtype` (and sometimes of a higher kind).
pub(super) fn number(dtype: DType) -> BoxedStrategy<Scalar> {
    let float = (-3.0f64..3.0).prop_map(Scalar::Float);
    let int = (-3i64..=3).prop_map(Scalar::Int);
    match dtype {
        DType::Bool => prop_oneof![
            any::<bool>().prop_map(Scalar::Bool),
            (-3i64..=3).prop_map(Scalar::Int),
            float
        ]
        .boxed(),
        d if d.is_float() => prop_oneof![3 => float, 1 => int].boxed(),
        _ => prop_oneof![3 => int, 1 => float].boxed(),
    }
}

pub(super) fn value_of(s: Scalar) -> Value {
    match s {
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Int(i),
        Scalar::Float(f) => Value::Float(f),
    }
}

/// The value a number takes part in arithmetic with when the common dtype is `common`: an
/// opmath (f32) value for floats, the value itself otherwise.
fn opmath_number(s: Scalar, common: DType) -> f64 {
    if common.is_float() {
        s.to_f64() as f32 as f64
    } else {
        round(s.to_f64(), common)
    }
}

/// The second operand of `add`/`mul`/`div`: a tensor (converted to the common dtype) or a
/// Python number (in opmath precision).
pub(super) enum Rhs<'a> {
    T(&'a HostTensor),
    N(HostTensor),
}

impl Rhs<'_> {
    pub(super) fn parts(&self) -> (&HostTensor, bool) {
        match self {
            Rhs::T(t) => (t, false),
            Rhs::N(n) => (n, true),
        }
    }
}

/// A number as an operand holding its opmath value.
pub(super) fn opmath_tensor(s: Scalar, common: DType) -> Rhs<'static> {
    let d = if common.is_float() {
        DType::F32
    } else {
        common
    };
    Rhs::N(HostTensor::scalar(opmath_number(s, common), d))
}

/// A number rounded to the common dtype (how `add`/`sub` take it).
pub(super) fn common_tensor(s: Scalar, common: DType) -> Rhs<'static> {
    Rhs::N(HostTensor::scalar(s.to_f64(), common))
}

/// Whether an input is one value broadcast over any iteration (TensorIterator's `is_scalar`):
/// every dim has size 1 or stride 0.
pub(super) fn is_scalar(x: &Input) -> bool {
    x.host
        .shape
        .iter()
        .zip(&x.place.expanded)
        .all(|(n, e)| *n == 1 || *e)
}

/// The second operand of `mul`/`div`: its own value when it is a scalar operand of a bf16/f16
/// operation, else converted to the common dtype.
pub(super) fn tensor_rhs(b: &Input, common: DType) -> Rhs<'_> {
    if matches!(common, DType::BF16 | DType::F16) && is_scalar(b) {
        Rhs::N(b.host.clone())
    } else {
        Rhs::T(&b.host)
    }
}

/// The second operand's value: converted to the common dtype, unless it is an opmath number.
pub(super) fn b_value(x: f64, common: DType, opmath: bool) -> f64 {
    if opmath { x } else { round(x, common) }
}

/// `a + alpha * b` in the common dtype (`or` for bool).
fn add_ref(a: &HostTensor, b: Rhs, alpha: f64, common: DType) -> HostTensor {
    let (b, keep) = b.parts();
    zip_map(&[a, b], common, |x| {
        let (p, q) = (round(x[0], common), b_value(x[1], common, keep));
        if common == DType::Bool {
            ((p != 0.0) || (q != 0.0)) as u8 as f64
        } else if common.is_float() {
            // opmath: alpha * b rounded to f32, then the sum.
            p + (alpha * q) as f32 as f64
        } else {
            p + alpha * q
        }
    })
}

fn alpha_for(common: DType) -> BoxedStrategy<Option<Scalar>> {
    match common {
        DType::Bool => Just(None).boxed(),
        d if d.is_float() => prop_oneof![
            Just(None),
            Just(Some(Scalar::Int(2))),
            Just(Some(Scalar::Float(-0.5)))
        ]
        .boxed(),
        _ => prop_oneof![Just(None), Just(Some(Scalar::Int(-2)))].boxed(),
    }
}

fn add_like(op: &'static str, negate: bool) {
    let dtypes = if negate {
        num_dtype().boxed()
    } else {
        any_dtype().boxed()
    };
    check(
        op,
        pair(dtypes, Values::Special(4.0)).prop_flat_map(move |(a, b)| {
            let common = result_type(&[operand(&a.host), operand(&b.host)]);
            (Just((a, b)), alpha_for(common)).prop_map(move |((a, b), alpha)| {
                let al = alpha.map_or(1.0, Scalar::to_f64) * if negate { -1.0 } else { 1.0 };
                let want = add_ref(&a.host, Rhs::T(&b.host), al, common);
                let mut args = vec![t(a), t(b)];
                args.extend(alpha.map(|s| v(value_of(s))));
                Sample::new(args, vec![Out::close(want)])
            })
        }),
    );
}

#[test]
fn add_tensor() {
    add_like("aten::add.Tensor", false);
}

#[test]
fn sub_tensor() {
    add_like("aten::sub.Tensor", true);
}

/// `x op number` for the `.Scalar` overloads: the tensor, the number, the common dtype.
pub(super) fn with_number(
    dtypes: impl Strategy<Value = DType>,
    vals: Values,
) -> impl Strategy<Value = (Input, Scalar, DType)> {
    (shape(), dtypes).prop_flat_map(move |(s, d)| {
        (input(s, d, vals), number(d)).prop_map(|(x, n)| {
            let c = result_type(&[operand(&x.host), Operand::Number(n)]);
            (x, n, c)
        })
    })
}

#[test]
fn add_scalar() {
    check(
        "aten::add.Scalar",
        with_number(any_dtype(), Values::Special(4.0)).prop_map(|(x, n, c)| {
            let b = common_tensor(n, c);
            let want = add_ref(&x.host, b, 1.0, c);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
        }),
    );
}

/// `a * b` (`and` for bool).
pub(super) fn mul_ref(a: &HostTensor, b: Rhs, common: DType) -> HostTensor {
    let (b, keep) = b.parts();
    zip_map(&[a, b], common, |x| {
        let (p, q) = (round(x[0], common), b_value(x[1], common, keep));
        if common == DType::Bool {
            ((p != 0.0) && (q != 0.0)) as u8 as f64
        } else {
            p * q
        }
    })
}

#[test]
fn mul_tensor() {
    check(
        "aten::mul.Tensor",
        pair(any_dtype(), Values::Special(4.0)).prop_map(|(a, b)| {
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let want = mul_ref(&a.host, tensor_rhs(&b, c), c);
            Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
        }),
    );
}

#[test]
fn mul_scalar() {
    check(
        "aten::mul.Scalar",
        with_number(any_dtype(), Values::Special(4.0)).prop_map(|(x, n, c)| {
            let b = opmath_tensor(n, c);
            let want = mul_ref(&x.host, b, c);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
        }),
    );
}

/// `a ** b`: f64 `powf` of the values in the common dtype.
fn pow_ref(a: &HostTensor, b: &HostTensor, common: DType) -> HostTensor {
    zip_map(&[a, b], common, |x| {
        round(x[0], common).powf(round(x[1], common))
    })
}

/// Exponents: non-negative small integers for integer results (negative integer powers of
/// integers raise).
fn exponent(i: Input) -> Input {
    let mut i = i;
    if !i.host.dtype.is_float() {
        for v in &mut i.host.data {
            *v = v.abs().min(3.0);
        }
    }
    i
}

#[test]
fn pow_tensor() {
    check(
        "aten::pow.Tensor_Tensor",
        pair(num_dtype(), Values::Special(3.0)).prop_map(|(a, b)| {
            let b = exponent(b);
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let b = if c.is_float() {
                b
            } else {
                // Both integer: the exponent must be non-negative.
                exponent(b)
            };
            let want = pow_ref(&a.host, &b.host, c);
            Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
        }),
    );
}

/// `torch.pow(number, tensor)`: the number as the base, in the common dtype.
#[test]
fn pow_number_base() {
    check(
        "aten::pow.Scalar",
        with_number(num_dtype(), Values::Special(3.0)).prop_map(|(x, n, c)| {
            let x = exponent(x);
            let n = match n {
                Scalar::Int(i) if !c.is_float() => Scalar::Int(i.clamp(-3, 3)),
                other => other,
            };
            let base = HostTensor::scalar(round(n.to_f64(), c), c);
            let want = pow_ref(&base, &x.host, c);
            Sample::new(vec![v(value_of(n)), t(x)], vec![Out::close(want)])
        }),
    );
}

#[test]
fn pow_scalar() {
    check(
        "aten::pow.Tensor_Scalar",
        with_number(num_dtype(), Values::Special(3.0)).prop_map(|(x, n, c)| {
            let n = match n {
                Scalar::Int(i) if !c.is_float() => Scalar::Int(i.abs()),
                other => other,
            };
            // The exponent is converted to the common dtype (ATen's `exp_scalar.to<scalar_t>()`).
            let b = HostTensor::scalar(round(n.to_f64(), c), c);
            let want = pow_ref(&x.host, &b, c);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
        }),
    );
}

#[test]
fn maximum_minimum() {
    for (op, max) in [("aten::maximum", true), ("aten::minimum", false)] {
        check(
            op,
            pair(any_dtype(), Values::Special(4.0)).prop_map(move |(a, b)| {
                let c = result_type(&[operand(&a.host), operand(&b.host)]);
                let want = zip_map(&[&a.host, &b.host], c, |x| {
                    let (p, q) = (round(x[0], c), round(x[1], c));
                    if p.is_nan() || q.is_nan() {
                        f64::NAN
                    } else if max {
                        p.max(q)
                    } else {
                        p.min(q)
                    }
                });
                Sample::new(vec![t(a), t(b)], vec![Out::exact(want)])
            }),
        );
    }
}

#[test]
fn where_self() {
    check(
        "aten::where.self",
        (broadcast_triple(), any_dtype(), any_dtype())
            .prop_flat_map(|((sc, sa, sb), da, db)| {
                (
                    input(sc, DType::Bool, Values::Range(1.0)),
                    input(sa, da, Values::Special(4.0)),
                    input(sb, db, Values::Special(4.0)),
                )
            })
            .prop_map(|(c, a, b)| {
                let common = result_type(&[operand(&a.host), operand(&b.host)]);
                let want = zip_map(&[&c.host, &a.host, &b.host], common, |x| {
                    if x[0] != 0.0 {
                        round(x[1], common)
                    } else {
                        round(x[2], common)
                    }
                });
                Sample::new(vec![t(c), t(a), t(b)], vec![Out::exact(want)])
            }),
    );
}

const COMPARISONS: [(&str, &str); 6] = [
    ("eq", "=="),
    ("ne", "!="),
    ("lt", "<"),
    ("le", "<="),
    ("gt", ">"),
    ("ge", ">="),
];

fn compare_ref(a: &HostTensor, b: &HostTensor, common: DType, kind: &str) -> HostTensor {
    zip_map(&[a, b], DType::Bool, |x| {
        let (p, q) = (round(x[0], common), round(x[1], common));
        let r = match kind {
            "eq" => p == q,
            "ne" => p != q,
            "lt" => p < q,
            "le" => p <= q,
            "gt" => p > q,
            _ => p >= q,
        };
        r as u8 as f64
    })
}

#[test]
fn comparisons_tensor() {
    for (kind, _) in COMPARISONS {
        let op: &'static str = Box::leak(format!("aten::{kind}.Tensor").into_boxed_str());
        check(
            op,
            pair(any_dtype(), Values::Special(2.0)).prop_map(move |(a, b)| {
                let c = result_type(&[operand(&a.host), operand(&b.host)]);
                let want = compare_ref(&a.host, &b.host, c, kind);
                Sample::new(vec![t(a), t(b)], vec![Out::exact(want)])
            }),
        );
    }
}

#[test]
fn comparisons_scalar() {
    for (kind, _) in COMPARISONS {
        let op: &'static str = Box::leak(format!("aten::{kind}.Scalar").into_boxed_str());
        check(
            op,
            with_number(any_dtype(), Values::Special(2.0)).prop_map(move |(x, n, c)| {
                // Comparisons take the number in the common dtype.
                let b = HostTensor::scalar(round(n.to_f64(), c), c);
                let want = compare_ref(&x.host, &b, c, kind);
                Sample::new(vec![t(x), v(value_of(n))], vec![Out::exact(want)])
            }),
        );
    }
}

#[test]
fn logical_and_or() {
    for (op, or) in [("aten::logical_and", false), ("aten::logical_or", true)] {
        check(
            op,
            pair(any_dtype(), Values::Special(1.0)).prop_map(move |(a, b)| {
                let want = zip_map(&[&a.host, &b.host], DType::Bool, |x| {
                    let (p, q) = (x[0] != 0.0, x[1] != 0.0);
                    (if or { p || q } else { p && q }) as u8 as f64
                });
                Sample::new(vec![t(a), t(b)], vec![Out::exact(want)])
            }),
        );
    }
}

#[test]
fn logical_not() {
    check(
        "aten::logical_not",
        (shape(), any_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(1.0)))
            .prop_map(|x| {
                let want = zip_map(&[&x.host], DType::Bool, |v| (v[0] == 0.0) as u8 as f64);
                Sample::new(vec![t(x)], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn clamp() {
    let bound = |d: DType| {
        prop_oneof![
            2 => Just(None),
            3 => number(if d == DType::Bool { DType::I64 } else { d }).prop_map(Some),
        ]
    };
    check(
        "aten::clamp",
        (shape(), num_dtype())
            .prop_flat_map(move |(s, d)| (input(s, d, Values::Special(4.0)), bound(d), bound(d)))
            .prop_map(|(x, lo, hi)| {
                let lo = if lo.is_none() && hi.is_none() {
                    Some(Scalar::Int(0))
                } else {
                    lo
                };
                let mut ops = vec![operand(&x.host)];
                ops.extend(lo.iter().chain(hi.iter()).map(|s| Operand::Number(*s)));
                let c = result_type(&ops);
                let (l, h) = (
                    lo.map(|s| round(s.to_f64(), c)),
                    hi.map(|s| round(s.to_f64(), c)),
                );
                let want = zip_map(&[&x.host], c, |v| {
                    let mut r = round(v[0], c);
                    if r.is_nan() {
                        return r;
                    }
                    if let Some(l) = l {
                        r = r.max(l);
                    }
                    if let Some(h) = h {
                        r = r.min(h);
                    }
                    r
                });
                let opt = |s: Option<Scalar>| s.map_or(Value::None, value_of);
                Sample::new(vec![t(x), v(opt(lo)), v(opt(hi))], vec![Out::exact(want)])
            }),
    );
}

/// Python's `%`: the result has the sign of the divisor.
fn remainder_ref(a: &HostTensor, b: &HostTensor, common: DType) -> HostTensor {
    zip_map(&[a, b], common, |x| {
        let (p, q) = (round(x[0], common), round(x[1], common));
        let m = p % q;
        if m != 0.0 && ((q < 0.0) != (m < 0.0)) {
            m + q
        } else {
            m
        }
    })
}

#[test]
fn remainder_tensor() {
    check(
        "aten::remainder.Tensor",
        pair(num_dtype(), Values::Special(6.0)).prop_map(|(a, b)| {
            let b = nonzero_int(b);
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let want = remainder_ref(&a.host, &b.host, c);
            Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
        }),
    );
}

#[test]
fn remainder_scalar() {
    check(
        "aten::remainder.Scalar",
        with_number(num_dtype(), Values::Special(6.0)).prop_map(|(x, n, c)| {
            let n = if n.to_f64() == 0.0 { Scalar::Int(2) } else { n };
            let b = HostTensor::scalar(round(n.to_f64(), c), c);
            let want = remainder_ref(&x.host, &b, c);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
        }),
    );
}

/// A number that bf16 cannot hold: comparisons and `remainder` see it rounded to bf16
/// (`bf16(1.0) == 1.001` is true), `mul` sees it in f32.
#[test]
fn number_rounding_edges() {
    let x = HostTensor::new(&[3], DType::BF16, vec![1.0, -2.78125, 0.5]);
    let n = 1.001;
    let eq = compare_ref(&x, &HostTensor::scalar(n, DType::BF16), DType::BF16, "eq");
    assert_eq!(eq.data[0], 1.0);
    check_samples(
        "aten::eq.Scalar",
        vec![Sample::new(
            vec![tp(x.clone()), v(Value::Float(n))],
            vec![Out::exact(eq)],
        )],
    );
    let m = 0.23117503107199822;
    let rem = remainder_ref(&x, &HostTensor::scalar(m, DType::BF16), DType::BF16);
    check_samples(
        "aten::remainder.Scalar",
        vec![Sample::new(
            vec![tp(x.clone()), v(Value::Float(m))],
            vec![Out::close(rem)],
        )],
    );
    let mul = mul_ref(
        &x,
        opmath_tensor(Scalar::Float(n), DType::BF16),
        DType::BF16,
    );
    check_samples(
        "aten::mul.Scalar",
        vec![Sample::new(
            vec![tp(x), v(Value::Float(n))],
            vec![Out::exact(mul)],
        )],
    );
}
