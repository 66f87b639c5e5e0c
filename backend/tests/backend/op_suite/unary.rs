//! Unary elementwise operators against f64 math rounded to the output dtype.
//!
//! Dtype rules (PyTorch's): *keeping* operators (`neg`, `abs`, `sign`, `floor`, `ceil`, `relu`)
//! keep the dtype; *floating* ones (the transcendentals, `reciprocal`, `sigmoid`) give float32
//! for integer and bool inputs; `silu` and `gelu` take floating inputs only. NaN: `relu(NaN)` is
//! NaN, `sign(NaN)` is 0 (ATen's `(0 < x) - (x < 0)`).
//!
//! Tolerances are `torch.testing`'s defaults: the device computes in f32 with libm-accurate
//! transcendentals (within an ulp or two), composites (`sigmoid`, `silu`, `gelu`) add a few
//! roundings of f32, all far inside f32's rtol of 1.3e-6 (about 11 ulp) for the magnitudes
//! drawn here.

use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Out, Sample, check, t, v};
use super::reference::zip_map;
use super::strategies::{Values, any_dtype, float_dtype, input, num_dtype, shape};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::neg", keeping),
    ("aten::abs", keeping),
    ("aten::sign", keeping),
    ("aten::floor", keeping),
    ("aten::ceil", keeping),
    ("aten::relu", keeping),
    ("aten::exp", floating),
    ("aten::log", floating),
    ("aten::log1p", floating),
    ("aten::sqrt", floating),
    ("aten::rsqrt", floating),
    ("aten::reciprocal", floating),
    ("aten::sin", floating),
    ("aten::cos", floating),
    ("aten::tanh", floating),
    ("aten::erf", floating),
    ("aten::sigmoid", floating),
    ("aten::silu", activations),
    ("aten::gelu", activations),
];

/// `sign` as ATen computes it: NaN gives 0.
fn sign(x: f64) -> f64 {
    ((0.0 < x) as i8 - (x < 0.0) as i8) as f64
}

/// `relu`: `max(x, 0)` with NaN kept.
fn relu(x: f64) -> f64 {
    if x.is_nan() { x } else { x.max(0.0) }
}

/// An operator and its f64 definition.
type Unary = (&'static str, fn(f64) -> f64);

const KEEPING: [Unary; 6] = [
    ("aten::neg", |x| -x),
    ("aten::abs", f64::abs),
    ("aten::sign", sign),
    ("aten::floor", f64::floor),
    ("aten::ceil", f64::ceil),
    ("aten::relu", relu),
];

#[test]
fn keeping() {
    for (op, f) in KEEPING {
        // `sign` also takes bool (the identity); the rest reject it (see `errors`).
        let dtypes = if op == "aten::sign" {
            any_dtype()
        } else {
            num_dtype()
        };
        check(
            op,
            (shape(), dtypes)
                .prop_flat_map(|(s, d)| input(s, d, Values::Special(6.0)))
                .prop_map(move |x| {
                    let want = zip_map(&[&x.host], x.host.dtype, |v| f(v[0]));
                    Sample::new(vec![t(x)], vec![Out::exact(want)])
                }),
        );
    }
}

/// `gelu(approximate='none')`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// `gelu(approximate='tanh')`.
pub fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// `sigmoid(x) = 1 / (1 + exp(-x))`.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const FLOATING: [Unary; 11] = [
    ("aten::exp", f64::exp),
    ("aten::log", f64::ln),
    ("aten::log1p", f64::ln_1p),
    ("aten::sqrt", f64::sqrt),
    ("aten::rsqrt", |x| 1.0 / x.sqrt()),
    ("aten::reciprocal", |x| 1.0 / x),
    ("aten::sin", f64::sin),
    ("aten::cos", f64::cos),
    ("aten::tanh", f64::tanh),
    ("aten::erf", libm::erf),
    ("aten::sigmoid", sigmoid),
];

/// Samples of a floating unary operator over inputs of any dtype with values from `vals`: `f`
/// in f64, rounded to the input's dtype where it is a float one, else to f32 (PyTorch's
/// integer-to-float promotion).
pub(super) fn float_unary(f: fn(f64) -> f64, vals: Values) -> impl Strategy<Value = Sample> {
    (shape(), any_dtype())
        .prop_flat_map(move |(s, d)| input(s, d, vals))
        .prop_map(move |x| {
            let out = if x.host.dtype.is_float() {
                x.host.dtype
            } else {
                DType::F32
            };
            let want = zip_map(&[&x.host], out, |v| f(v[0]));
            Sample::new(vec![t(x)], vec![Out::close(want)])
        })
}

#[test]
fn floating() {
    for (op, f) in FLOATING {
        check(op, float_unary(f, Values::Special(6.0)));
    }
}

#[test]
fn activations() {
    check(
        "aten::silu",
        (shape(), float_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(8.0)))
            .prop_map(|x| {
                let want = zip_map(&[&x.host], x.host.dtype, |v| v[0] * sigmoid(v[0]));
                Sample::new(vec![t(x)], vec![Out::close(want)])
            }),
    );
    check(
        "aten::gelu",
        (
            shape(),
            float_dtype(),
            prop_oneof![Just(None), Just(Some("none")), Just(Some("tanh"))],
        )
            .prop_flat_map(|(s, d, a)| (input(s, d, Values::Special(8.0)), Just(a)))
            .prop_map(|(x, approx)| {
                let f = if approx == Some("tanh") {
                    gelu_tanh
                } else {
                    gelu
                };
                let want = zip_map(&[&x.host], x.host.dtype, |v| f(v[0]));
                let mut args = vec![t(x)];
                args.extend(approx.map(|a| v(Value::Str(a.into()))));
                Sample::new(args, vec![Out::close(want)])
            }),
    );
}
