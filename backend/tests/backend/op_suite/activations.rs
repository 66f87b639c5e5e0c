//! Activation functions (`ops::pointwise::activations`) and their backward formulas against
//! f64 definitions from PyTorch's documentation (`torch.nn.functional`), rounded to the
//! dtype, at `torch.testing`'s default tolerances. The backward formulas are checked against
//! the derivative of the forward definition.

use proptest::prelude::*;
use tpuemu_backend::ops::Value;

use super::harness::{Out, Sample, check, t, v};
use super::reference::zip_map;
use super::strategies::{Values, broadcast_pair, float_dtype, input, num_dtype, shape};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::hardtanh", hardtanh_threshold),
    ("aten::threshold", hardtanh_threshold),
    ("aten::elu", with_parameter),
    ("aten::celu", with_parameter),
    ("aten::leaky_relu", with_parameter),
    ("aten::softplus", softplus),
    ("aten::hardshrink", with_parameter),
    ("aten::softshrink", with_parameter),
    ("aten::hardsigmoid", plain),
    ("aten::hardswish", plain),
    ("aten::mish", plain),
    ("aten::log_sigmoid_forward", log_sigmoid),
    ("aten::log_sigmoid_backward", log_sigmoid),
    ("aten::hardtanh_backward", backward),
    ("aten::elu_backward", backward),
    ("aten::leaky_relu_backward", backward),
    ("aten::hardsigmoid_backward", derivatives),
    ("aten::softplus_backward", derivatives),
    ("aten::hardshrink_backward", derivatives),
    ("aten::softshrink_backward", derivatives),
    ("aten::logit_backward", derivatives),
];

fn softplus_ref(x: f64, beta: f64, th: f64) -> f64 {
    if x * beta > th {
        x
    } else {
        (x * beta).exp().ln_1p() / beta
    }
}

fn elu_ref(x: f64, alpha: f64, scale: f64, input_scale: f64) -> f64 {
    if x <= 0.0 {
        (x * input_scale).exp_m1() * alpha * scale
    } else {
        x * scale
    }
}

#[test]
fn hardtanh_threshold() {
    check(
        "aten::hardtanh",
        (shape(), num_dtype(), -3i64..0, 0i64..3)
            .prop_flat_map(|(s, d, lo, hi)| (input(s, d, Values::Special(5.0)), Just((lo, hi))))
            .prop_map(|(x, (lo, hi))| {
                let (l, h) = (lo as f64, hi as f64);
                let want = zip_map(&[&x.host], x.host.dtype, |v| {
                    if v[0].is_nan() {
                        v[0]
                    } else {
                        v[0].clamp(l, h)
                    }
                });
                let args = vec![t(x), v(Value::Int(lo)), v(Value::Int(hi))];
                Sample::new(args, vec![Out::exact(want)])
            }),
    );
    check(
        "aten::threshold",
        (shape(), num_dtype(), -2i64..2, -9i64..9)
            .prop_flat_map(|(s, d, th, val)| (input(s, d, Values::Special(4.0)), Just((th, val))))
            .prop_map(|(x, (th, val))| {
                let want = zip_map(&[&x.host], x.host.dtype, |v| {
                    if v[0] <= th as f64 { val as f64 } else { v[0] }
                });
                let args = vec![t(x), v(Value::Int(th)), v(Value::Int(val))];
                Sample::new(args, vec![Out::exact(want)])
            }),
    );
}

#[test]
fn with_parameter() {
    type Param = (&'static str, fn(f64, f64) -> f64);
    const OPS: [Param; 5] = [
        ("aten::elu", |x, a| elu_ref(x, a, 1.0, 1.0)),
        ("aten::celu", |x, a| elu_ref(x, a, 1.0, 1.0 / a)),
        ("aten::leaky_relu", |x, s| if x > 0.0 { x } else { x * s }),
        (
            "aten::hardshrink",
            |x, l| {
                if x >= -l && x <= l { 0.0 } else { x }
            },
        ),
        ("aten::softshrink", |x, l| {
            if x > l {
                x - l
            } else if x < -l {
                x + l
            } else {
                x * 0.0
            }
        }),
    ];
    for (op, f) in OPS {
        check(
            op,
            (shape(), float_dtype(), 0.25f64..2.0)
                .prop_flat_map(|(s, d, k)| (input(s, d, Values::Special(4.0)), Just(k)))
                .prop_map(move |(x, k)| {
                    let want = zip_map(&[&x.host], x.host.dtype, |v| f(v[0], k));
                    Sample::new(vec![t(x), v(Value::Float(k))], vec![Out::close(want)])
                }),
        );
    }
}

#[test]
fn softplus() {
    check(
        "aten::softplus",
        (shape(), float_dtype(), 0.5f64..3.0, 1.0f64..20.0)
            .prop_flat_map(|(s, d, b, th)| (input(s, d, Values::Special(10.0)), Just((b, th))))
            .prop_map(|(x, (b, th))| {
                let want = zip_map(&[&x.host], x.host.dtype, |v| softplus_ref(v[0], b, th));
                let args = vec![t(x), v(Value::Float(b)), v(Value::Float(th))];
                Sample::new(args, vec![Out::close(want)])
            }),
    );
}

#[test]
fn plain() {
    type F = (&'static str, fn(f64) -> f64);
    const OPS: [F; 3] = [
        ("aten::hardsigmoid", |x| (x + 3.0).clamp(0.0, 6.0) / 6.0),
        ("aten::hardswish", |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0),
        ("aten::mish", |x| {
            x * softplus_ref(x, 1.0, f64::INFINITY).tanh()
        }),
    ];
    for (op, f) in OPS {
        check(
            op,
            (shape(), float_dtype())
                .prop_flat_map(|(s, d)| input(s, d, Values::Range(8.0)))
                .prop_map(move |x| {
                    let want = zip_map(&[&x.host], x.host.dtype, |v| f(v[0]));
                    Sample::new(vec![t(x)], vec![Out::close(want)])
                }),
        );
    }
}

/// `log(sigmoid(x))` and its derivative `1 - sigmoid(x)`; the forward's buffer is
/// `exp(-|x|)`.
#[test]
fn log_sigmoid() {
    check(
        "aten::log_sigmoid_forward",
        (shape(), float_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(30.0)))
            .prop_map(|x| {
                let d = x.host.dtype;
                let want = zip_map(&[&x.host], d, |v| {
                    let x = v[0];
                    x.min(0.0) - (-x.abs()).exp().ln_1p()
                });
                let buf = zip_map(&[&x.host], d, |v| (-v[0].abs()).exp());
                Sample::new(vec![t(x)], vec![Out::close(want), Out::close(buf)])
            }),
    );
    check(
        "aten::log_sigmoid_backward",
        (broadcast_pair(), float_dtype())
            .prop_flat_map(|((sg, sx), d)| {
                (
                    input(sg.clone(), d, Values::Range(3.0)),
                    input(sx, d, Values::Range(30.0)),
                )
            })
            .prop_filter("grad has the broadcast shape", |(g, x)| {
                super::reference::broadcast(&[&g.host.shape, &x.host.shape])
                    .is_some_and(|s| s == g.host.shape)
            })
            .prop_map(|(g, x)| {
                let d = g.host.dtype;
                let want = zip_map(&[&g.host, &x.host], d, |v| v[0] / (1.0 + v[1].exp()));
                let buf = x.host.clone();
                Sample::new(
                    vec![t(g), t(x), super::harness::tp(buf)],
                    vec![Out::close(want)],
                )
            }),
    );
}

#[test]
fn backward() {
    let same_shape = |n| {
        (shape(), float_dtype()).prop_flat_map(move |(s, d)| {
            (
                input(s.clone(), d, Values::Range(3.0)),
                input(s, d, Values::Range(n)),
            )
        })
    };
    check(
        "aten::hardtanh_backward",
        same_shape(3.0).prop_map(|(g, x)| {
            let want = zip_map(&[&g.host, &x.host], g.host.dtype, |v| {
                if v[1] > -1.0 && v[1] < 1.0 { v[0] } else { 0.0 }
            });
            let args = vec![t(g), t(x), v(Value::Float(-1.0)), v(Value::Float(1.0))];
            Sample::new(args, vec![Out::close(want)])
        }),
    );
    check(
        "aten::leaky_relu_backward",
        same_shape(3.0).prop_map(|(g, x)| {
            let want = zip_map(&[&g.host, &x.host], g.host.dtype, |v| {
                if v[1] > 0.0 {
                    v[0]
                } else {
                    v[0] * 0.2f32 as f64
                }
            });
            let args = vec![t(g), t(x), v(Value::Float(0.2)), v(Value::Bool(false))];
            Sample::new(args, vec![Out::close(want)])
        }),
    );
    // d/dx elu(x) = scale (x > 0), alpha scale input_scale e^(x input_scale) (x <= 0); from
    // the result y <= 0: input_scale (y + alpha scale).
    check(
        "aten::elu_backward",
        (same_shape(3.0), any::<bool>()).prop_map(|((g, x), is_result)| {
            let (alpha, scale, iscale) = (1.5, 1.25, 0.5);
            let d = g.host.dtype;
            let other = if is_result {
                zip_map(&[&x.host], d, |v| elu_ref(v[0], alpha, scale, iscale))
            } else {
                x.host.clone()
            };
            let want = zip_map(&[&g.host, &other], d, |v| {
                let b = v[1];
                if b > 0.0 {
                    v[0] * scale
                } else if is_result {
                    v[0] * iscale * (b + alpha * scale)
                } else {
                    v[0] * alpha * scale * iscale * (b * iscale).exp()
                }
            });
            let args = vec![
                t(g),
                v(Value::Float(alpha)),
                v(Value::Float(scale)),
                v(Value::Float(iscale)),
                v(Value::Bool(is_result)),
                super::harness::tp(other),
            ];
            Sample::new(args, vec![Out::close(want)])
        }),
    );
}

/// The backward formulas of `hardsigmoid`, `softplus`, `hardshrink`, `softshrink` and
/// `logit` against the derivatives of the forward definitions (PyTorch's documentation), times
/// the incoming gradient; at the kinks, ATen's side (the flat one).
#[test]
fn derivatives() {
    let pair = |r: f64| {
        (shape(), float_dtype()).prop_flat_map(move |(s, d)| {
            (
                input(s.clone(), d, Values::Range(3.0)),
                input(s, d, Values::Range(r)),
            )
        })
    };
    check(
        "aten::hardsigmoid_backward",
        pair(5.0).prop_map(|(g, x)| {
            let want = zip_map(&[&g.host, &x.host], g.host.dtype, |v| {
                if v[1] > -3.0 && v[1] < 3.0 {
                    v[0] / 6.0
                } else {
                    0.0
                }
            });
            Sample::new(vec![t(g), t(x)], vec![Out::close(want)])
        }),
    );
    check(
        "aten::softplus_backward",
        (pair(10.0), 0.5f64..3.0, 1.0f64..20.0).prop_map(|((g, x), b, th)| {
            // d/dx log1p(e^(bx)) / b = sigmoid(bx); linear (slope 1) past the threshold.
            let want = zip_map(&[&g.host, &x.host], g.host.dtype, |v| {
                if v[1] * b > th {
                    v[0]
                } else {
                    v[0] / (1.0 + (-v[1] * b).exp())
                }
            });
            let args = vec![t(g), t(x), v(Value::Float(b)), v(Value::Float(th))];
            Sample::new(args, vec![Out::close(want)])
        }),
    );
    for op in ["aten::hardshrink_backward", "aten::softshrink_backward"] {
        check(
            op,
            (pair(4.0), 0.25f64..2.0).prop_map(|((g, x), l)| {
                let want = zip_map(&[&g.host, &x.host], g.host.dtype, |v| {
                    if v[1] >= -l && v[1] <= l { 0.0 } else { v[0] }
                });
                Sample::new(vec![t(g), t(x), v(Value::Float(l))], vec![Out::close(want)])
            }),
        );
    }
    check(
        "aten::logit_backward",
        (pair(1.5), prop::option::of(0.01f64..0.2)).prop_map(|((g, x), eps)| {
            // d/dx log(x / (1 - x)) = 1 / (x (1 - x)) inside [lo, hi]; outside NaN without
            // eps (logit is undefined there), 0 with it (the clamped input is constant).
            let (lo, hi, out) = match eps {
                Some(e) => (e, 1.0 - e, 0.0),
                None => (0.0, 1.0, f64::NAN),
            };
            let want = zip_map(&[&g.host, &x.host], g.host.dtype, |v| {
                if v[1] < lo || v[1] > hi {
                    out
                } else {
                    v[0] / (v[1] * (1.0 - v[1]))
                }
            });
            let e = eps.map_or(Value::None, Value::Float);
            Sample::new(vec![t(g), t(x), v(e)], vec![Out::close(want)])
        }),
    );
}
