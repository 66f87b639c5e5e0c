//! The gamma family against f64 references: `lgamma` from `libm`; `digamma` and the Hurwitz
//! zeta (for `polygamma`) summed in f64 far past f32's precision (200 terms of the series, then
//! the Euler-Maclaurin tail), with the reflection formulas for negative arguments; spot checks
//! of published values (`digamma(1) = -gamma`, `polygamma(1, 1) = pi^2 / 6`, `polygamma(2, 1)
//! = -2 zeta(3)`). Integer and bool inputs compute as float32, as PyTorch's.

use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Out, Sample, check, check_samples, t, tp, v};
use super::reference::{HostTensor, zip_map};
use super::strategies::{Values, any_dtype, float_dtype, input, num_dtype, shape};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::lgamma", lgamma),
    ("aten::mvlgamma", lgamma),
    ("aten::digamma", polygamma),
    ("aten::polygamma", polygamma),
    ("aten::igamma", igamma),
    ("aten::igammac", igamma),
];

const PI: f64 = std::f64::consts::PI;

/// `digamma` in f64: recurrence to `x >= 30`, then the asymptotic series.
fn digamma_ref(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
    }
    if x < 0.0 {
        if x == x.trunc() {
            return f64::NAN;
        }
        return digamma_ref(1.0 - x) - PI / (PI * x).tan();
    }
    let (mut x, mut acc) = (x, 0.0);
    while x < 30.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let z = 1.0 / (x * x);
    acc + x.ln() - 0.5 / x - z * (1.0 / 12.0 - z * (1.0 / 120.0 - z * (1.0 / 252.0 - z / 240.0)))
}

/// The Hurwitz zeta `zeta(s, q)` in f64 (integer `s >= 2`).
fn zeta_ref(s: i32, q: f64) -> f64 {
    if q <= 0.0 && q == q.trunc() {
        return f64::INFINITY;
    }
    let n = 200.0;
    let mut sum = 0.0;
    for k in 0..200 {
        sum += (q + k as f64).powi(-s);
    }
    let w = q + n;
    let sf = s as f64;
    sum + w.powf(1.0 - sf) / (sf - 1.0) + 0.5 * w.powi(-s) + sf / 12.0 * w.powi(-s - 1)
}

fn polygamma_ref(n: i64, x: f64) -> f64 {
    match n {
        0 => digamma_ref(x),
        // ATen's `calc_trigamma` reflects below 1/2 with `sin(pi * x)` of the float32 product
        // `pi * x` (rounded: off by up to ~1e-6 relative for |x| near 8, which is PyTorch's
        // value); the rest is exact.
        1 if x < 0.5 => {
            let s = ((PI as f32) * (x as f32)) as f64;
            PI * PI / (s.sin() * s.sin()) - zeta_ref(2, 1.0 - x)
        }
        _ => {
            let fact: f64 = (1..=n).map(|k| k as f64).product();
            let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
            sign * fact * zeta_ref(n as i32 + 1, x)
        }
    }
}

fn float_out(d: DType) -> DType {
    if d.is_float() { d } else { DType::F32 }
}

#[test]
fn polygamma() {
    check(
        "aten::polygamma",
        (shape(), any_dtype(), 0i64..5)
            .prop_flat_map(|(s, d, n)| (input(s, d, Values::Between(-8.5, 8.5)), Just(n)))
            .prop_map(|(x, n)| {
                let want = zip_map(&[&x.host], float_out(x.host.dtype), |v| {
                    polygamma_ref(n, v[0])
                });
                Sample::new(vec![v(Value::Int(n)), t(x)], vec![Out::close(want)])
            }),
    );
    check(
        "aten::digamma",
        (shape(), any_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(9.0)))
            .prop_map(|x| {
                let want = zip_map(&[&x.host], float_out(x.host.dtype), |v| digamma_ref(v[0]));
                Sample::new(vec![t(x)], vec![Out::close(want)])
            }),
    );
    // Published values: psi(1) = -0.5772156649 (Euler's constant), psi'(1) = pi^2/6,
    // psi''(1) = -2 zeta(3) = -2.4041138063, psi(1/2) = -gamma - 2 ln 2.
    let one = HostTensor::new(&[2], DType::F32, vec![1.0, 0.5]);
    let s = |n: i64, want: [f64; 2]| {
        Sample::new(
            vec![v(Value::Int(n)), tp(one.clone())],
            vec![Out::close(HostTensor::new(&[2], DType::F32, want.to_vec()))],
        )
    };
    check_samples(
        "aten::polygamma",
        vec![
            s(0, [-0.577_215_664_9, -1.963_510_026_0]),
            s(1, [PI * PI / 6.0, PI * PI / 2.0]),
            s(2, [-2.404_113_806_3, -16.828_796_644_2]),
        ],
    );
}

#[test]
fn lgamma() {
    check(
        "aten::lgamma",
        (shape(), any_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(9.0)))
            .prop_map(|x| {
                let want = zip_map(&[&x.host], float_out(x.host.dtype), |v| {
                    if v[0] <= 0.0 && v[0] == v[0].trunc() {
                        f64::INFINITY
                    } else {
                        libm::lgamma(v[0])
                    }
                });
                Sample::new(vec![t(x)], vec![Out::close(want)])
            }),
    );
    check(
        "aten::mvlgamma",
        (shape(), num_dtype(), 1i64..6)
            .prop_flat_map(|(s, d, p)| {
                let lo = (p - 1) as f64 / 2.0 + 0.05;
                (input(s, d, Values::Between(lo.max(1.0), 9.0)), Just(p))
            })
            .prop_map(|(x, p)| {
                let want = zip_map(&[&x.host], float_out(x.host.dtype), |v| {
                    let c = (p * (p - 1)) as f64 / 4.0 * PI.ln();
                    c + (0..p)
                        .map(|i| libm::lgamma(v[0] - i as f64 / 2.0))
                        .sum::<f64>()
                });
                Sample::new(vec![t(x), v(Value::Int(p))], vec![Out::close(want)])
            }),
    );
}

/// `P(a, x)` in f64, summed to convergence (Numerical Recipes' split: the series below
/// `x = a + 1`, Lentz's continued fraction for `Q` above), with ATen's special values.
fn igamma_ref(a: f64, x: f64) -> f64 {
    if a.is_nan() || x.is_nan() || a < 0.0 || x < 0.0 {
        return f64::NAN;
    }
    if a == 0.0 {
        return if x > 0.0 { 1.0 } else { f64::NAN };
    }
    if x == 0.0 {
        return 0.0;
    }
    if a.is_infinite() {
        return if x.is_infinite() { f64::NAN } else { 0.0 };
    }
    if x.is_infinite() {
        return 1.0;
    }
    let front = (a * x.ln() - x - libm::lgamma(a)).exp();
    if x < a + 1.0 {
        let (mut ap, mut del, mut sum) = (a, 1.0 / a, 1.0 / a);
        for _ in 0..100_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-17 {
                break;
            }
        }
        sum * front
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..100_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - front * h
    }
}

#[test]
fn igamma() {
    for (op, q) in [("aten::igamma", false), ("aten::igammac", true)] {
        check(
            op,
            (shape(), float_dtype())
                .prop_flat_map(|(s, d)| {
                    (
                        input(s.clone(), d, Values::Between(0.05, 9.0)),
                        input(s, d, Values::Between(0.0, 14.0)),
                    )
                })
                .prop_map(move |(a, x)| {
                    let want = zip_map(&[&a.host, &x.host], a.host.dtype, |v| {
                        let p = igamma_ref(v[0], v[1]);
                        if q { 1.0 - p } else { p }
                    });
                    Sample::new(vec![t(a), t(x)], vec![Out::close(want)])
                }),
        );
    }
    // ATen's special values: a negative argument, a = x = 0, P(0, x > 0) = 1, P(a, 0) = 0,
    // P(inf, x) = 0, P(inf, inf) = NaN, P(a, inf) = 1, NaN in.
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let a = HostTensor::new(
        &[9],
        DType::F32,
        vec![-1.0, 0.0, 0.0, 2.0, inf, inf, 2.0, nan, 1.0],
    );
    let x = HostTensor::new(
        &[9],
        DType::F32,
        vec![1.0, 0.0, 3.0, 0.0, 5.0, inf, inf, 1.0, nan],
    );
    let p = vec![nan, nan, 1.0, 0.0, 0.0, nan, 1.0, nan, nan];
    let q: Vec<f64> = vec![nan, nan, 0.0, 1.0, 1.0, nan, 0.0, nan, nan];
    for (op, want) in [("aten::igamma", p), ("aten::igammac", q)] {
        check_samples(
            op,
            vec![Sample::new(
                vec![tp(a.clone()), tp(x.clone())],
                vec![Out::close(HostTensor::new(&[9], DType::F32, want))],
            )],
        );
    }
}
