//! Division: `div` (true, `trunc`, `floor`), `floor_divide`, `fmod`, `true_divide`.
//!
//! Reference rules (PyTorch 2.15's CPU kernels, measured): true division gives the common
//! float dtype (float32 for integers); a divisor that is one value broadcast over the
//! iteration (a number, a 0-d or all-size-1 tensor, an expanded view) keeps its own value in
//! f32 when the common dtype is bf16/f16, and the quotient rounds once; other bf16/f16
//! divisions run on vectors of the dtype, so `trunc` rounds the quotient to the dtype before
//! truncating and every step of `div_floor_floating` rounds to the dtype. `fmod` is exact in
//! floating point (C `fmod`) and truncating for integers; a number divisor of `fmod` is
//! converted to the common dtype. Integer division by zero raises in PyTorch and is not drawn.

use proptest::prelude::*;
use tpuemu_backend::ops::Value;
use tpuemu_backend::{DType, Scalar};

use super::binary::{
    Rhs, b_value, is_scalar, opmath_tensor, pair, tensor_rhs, value_of, with_number,
};
use super::harness::{Input, Out, Sample, check, check_samples, t, tp, v};
use super::reference::{HostTensor, operand, result_type, round, zip_map};
use super::strategies::{Values, any_dtype, num_dtype};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::div.Tensor", div_tensor),
    ("aten::div.Scalar", div_scalar),
    ("aten::div.Tensor_mode", div_mode),
    ("aten::div.Tensor_mode", div_floor_edges),
    ("aten::div.Scalar_mode", div_scalar_mode),
    ("aten::floor_divide", floor_divide),
    ("aten::floor_divide.Scalar", floor_divide_scalar),
    ("aten::fmod.Tensor", fmod_tensor),
    ("aten::fmod.Scalar", fmod_scalar),
    ("aten::true_divide.Tensor", true_divide),
    ("aten::div.Tensor_mode", div_reduced_precision_edges),
];

/// True division: float result (the default float for integer inputs).
pub(super) fn div_ref(a: &HostTensor, b: Rhs, common: DType) -> HostTensor {
    let out = if common.is_float() {
        common
    } else {
        DType::F32
    };
    let (b, keep) = b.parts();
    zip_map(&[a, b], out, |x| {
        round(x[0], common) / b_value(x[1], common, keep)
    })
}

#[test]
fn div_tensor() {
    check(
        "aten::div.Tensor",
        pair(any_dtype(), Values::Special(4.0)).prop_map(|(a, b)| {
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let want = div_ref(&a.host, tensor_rhs(&b, c), c);
            Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
        }),
    );
}

#[test]
fn div_scalar() {
    check(
        "aten::div.Scalar",
        with_number(any_dtype(), Values::Special(4.0)).prop_map(|(x, n, c)| {
            let b = opmath_tensor(n, c);
            let want = div_ref(&x.host, b, c);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
        }),
    );
}

/// ATen's `div_floor_floating` in f32 arithmetic with `r` applied to every step (identity for
/// f32, rounding to bf16/f16 for their vectorised kernels): what Python's `//` computes.
fn floor_div_steps(a: f64, b: f64, r: impl Fn(f32) -> f32) -> f64 {
    let (a, b) = (a as f32, b as f32);
    if b == 0.0 {
        return r(a / b) as f64;
    }
    let m = r(a % b);
    let mut div = r(r(a - m) / b);
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        div = r(div - 1.0);
    }
    let out = if div != 0.0 {
        let mut f = div.floor();
        if r(div - f) > 0.5 {
            f = r(f + 1.0);
        }
        f
    } else {
        0.0f32.copysign(r(a / b))
    };
    out as f64
}

/// `div(a, b, rounding_mode)`: trunc or floor; `scalar`: `b` is a scalar operand (kept in
/// opmath), else reduced-precision steps round to the common dtype.
fn div_mode_ref(
    a: &HostTensor,
    b: &HostTensor,
    common: DType,
    floor: bool,
    scalar: bool,
) -> HostTensor {
    let steps = if scalar { DType::F32 } else { common };
    zip_map(&[a, b], common, |x| {
        let p = round(x[0], common);
        let q = if scalar && common.is_float() {
            x[1]
        } else {
            round(x[1], common)
        };
        let r = |v: f32| round(v as f64, steps) as f32;
        match (common.is_float(), floor) {
            (true, false) => r((p as f32) / (q as f32)).trunc() as f64,
            (true, true) => floor_div_steps(p, q, r),
            (false, false) => (p / q).trunc(),
            (false, true) => (p / q).floor(),
        }
    })
}

/// Divisor values: no zeros for integers (PyTorch raises).
pub(super) fn nonzero_int(i: Input) -> Input {
    if i.host.dtype.is_float() {
        return i;
    }
    let mut i = i;
    for v in &mut i.host.data {
        if *v == 0.0 {
            *v = if i.host.dtype == DType::Bool {
                1.0
            } else {
                2.0
            };
        }
    }
    i
}

#[test]
fn div_mode() {
    check(
        "aten::div.Tensor_mode",
        (
            pair(num_dtype(), Values::Special(6.0)),
            prop_oneof![Just(None), Just(Some("trunc")), Just(Some("floor"))],
        )
            .prop_map(|((a, b), mode)| {
                let c = result_type(&[operand(&a.host), operand(&b.host)]);
                let b = if mode.is_some() { nonzero_int(b) } else { b };
                let scalar = is_scalar(&b);
                let want = match mode {
                    None => div_ref(&a.host, tensor_rhs(&b, c), c),
                    Some(m) => div_mode_ref(&a.host, &b.host, c, m == "floor", scalar),
                };
                let m = mode.map_or(Value::None, |m| Value::Str(m.into()));
                Sample::new(vec![t(a), t(b), v(m)], vec![Out::close(want)])
            }),
    );
}

/// Floor division where the f32 quotient rounds up to an integer: `1 // 0.1 == 9`, as in
/// Python and PyTorch.
#[test]
fn div_floor_edges() {
    let a = HostTensor::new(&[4], DType::F32, vec![1.0, -1.0, 0.3, 7.0]);
    let b = HostTensor::new(&[4], DType::F32, vec![0.1, 0.1, 0.1, -0.7]);
    let want = div_mode_ref(&a, &b, DType::F32, true, false);
    check_samples(
        "aten::div.Tensor_mode",
        vec![Sample::new(
            vec![tp(a), tp(b), v(Value::Str("floor".into()))],
            vec![Out::exact(want)],
        )],
    );
}

/// A divisor number: no zeros for integer common dtypes.
fn nonzero_number(n: Scalar, c: DType) -> Scalar {
    if !c.is_float() && round(n.to_f64(), c) == 0.0 {
        Scalar::Int(2)
    } else {
        n
    }
}

fn mode() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("trunc"), Just("floor")]
}

#[test]
fn div_scalar_mode() {
    check(
        "aten::div.Scalar_mode",
        (with_number(num_dtype(), Values::Special(6.0)), mode()).prop_map(|((x, n, c), m)| {
            let n = nonzero_number(n, c);
            let d = if c.is_float() { DType::F32 } else { c };
            let b = HostTensor::scalar(n.to_f64(), d);
            let want = div_mode_ref(&x.host, &b, c, m == "floor", true);
            Sample::new(
                vec![t(x), v(value_of(n)), v(Value::Str(m.into()))],
                vec![Out::close(want)],
            )
        }),
    );
}

#[test]
fn floor_divide() {
    check(
        "aten::floor_divide",
        pair(num_dtype(), Values::Special(6.0)).prop_map(|(a, b)| {
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let b = nonzero_int(b);
            let want = div_mode_ref(&a.host, &b.host, c, true, is_scalar(&b));
            Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
        }),
    );
}

#[test]
fn floor_divide_scalar() {
    check(
        "aten::floor_divide.Scalar",
        with_number(num_dtype(), Values::Special(6.0)).prop_map(|(x, n, c)| {
            let n = nonzero_number(n, c);
            let d = if c.is_float() { DType::F32 } else { c };
            let b = HostTensor::scalar(n.to_f64(), d);
            let want = div_mode_ref(&x.host, &b, c, true, true);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::close(want)])
        }),
    );
}

/// C `fmod` of the values in the common dtype (exact: the result is representable).
fn fmod_ref(a: &HostTensor, b: &HostTensor, c: DType) -> HostTensor {
    zip_map(&[a, b], c, |x| round(x[0], c) % round(x[1], c))
}

#[test]
fn fmod_tensor() {
    check(
        "aten::fmod.Tensor",
        pair(num_dtype(), Values::Special(6.0)).prop_map(|(a, b)| {
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let b = nonzero_int(b);
            let want = fmod_ref(&a.host, &b.host, c);
            Sample::new(vec![t(a), t(b)], vec![Out::exact(want)])
        }),
    );
}

#[test]
fn fmod_scalar() {
    check(
        "aten::fmod.Scalar",
        with_number(num_dtype(), Values::Special(6.0)).prop_map(|(x, n, c)| {
            let n = nonzero_number(n, c);
            let want = fmod_ref(&x.host, &HostTensor::scalar(n.to_f64(), c), c);
            Sample::new(vec![t(x), v(value_of(n))], vec![Out::exact(want)])
        }),
    );
}

#[test]
fn true_divide() {
    check(
        "aten::true_divide.Tensor",
        pair(any_dtype(), Values::Special(4.0)).prop_map(|(a, b)| {
            let c = result_type(&[operand(&a.host), operand(&b.host)]);
            let want = div_ref(&a.host, tensor_rhs(&b, c), c);
            Sample::new(vec![t(a), t(b)], vec![Out::close(want)])
        }),
    );
}

/// bf16 quotients that round up to the next integer: `trunc` of the rounded quotient differs
/// from `trunc` of the exact one (`1.0 / 0.33398438 = 2.994` rounds to 3.0 in bf16).
#[test]
fn div_reduced_precision_edges() {
    let a = HostTensor::new(&[3], DType::BF16, vec![1.0, 2.703125, -3.296875]);
    let b = HostTensor::new(&[3], DType::BF16, vec![0.333984375, 0.30078125, 0.69921875]);
    let want = div_mode_ref(&a, &b, DType::BF16, false, false);
    assert_eq!(want.data[0], 3.0, "the bf16 quotient rounds to 3");
    check_samples(
        "aten::div.Tensor_mode",
        vec![Sample::new(
            vec![tp(a), tp(b), v(Value::Str("trunc".into()))],
            vec![Out::exact(want)],
        )],
    );
}
