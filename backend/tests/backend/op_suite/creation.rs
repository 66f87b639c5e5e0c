//! Factories and copies: `zeros` (and `_efficientzerotensor`), `ones`, `full`, `empty`,
//! `scalar_tensor`, `arange`, `clone`, `_to_copy`, `copy_`, `fill_`.
//!
//! Reference rules (PyTorch's): `full` takes its dtype from the fill value (bool, int64 or the
//! default float32) unless told; `arange` is int64 when every bound is an integer, else
//! float32, has `ceil((end - start) / step)` elements, and for an integer dtype truncates
//! `start` and `step` before stepping (ATen's accumulate type is the integer); conversions to
//! integers truncate, to bool test for non-zero. `arange` of f32 computes `start + i * step` in
//! f32 on the device (in double on PyTorch's CPU): within the f32 tolerance.

use proptest::prelude::*;
use tpuemu_backend::{DType, Scalar};

use super::harness::{Out, Sample, check, dtype_arg, ints, scalar_value, t, v};
use super::reference::{HostTensor, numel, round, zip_map};
use super::strategies::{
    Values, any_dtype, broadcast_pair, input, input_no_expand, num_dtype, number, shape,
};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::zeros", factories),
    ("aten::_efficientzerotensor", factories),
    ("aten::ones", factories),
    ("aten::full", factories),
    ("aten::empty.memory_format", factories),
    ("aten::scalar_tensor", scalar_tensor),
    ("aten::arange", arange),
    ("aten::arange.start_step", arange),
    ("aten::clone", clone),
    ("aten::_to_copy", to_copy),
    ("aten::copy_", copy_),
    ("aten::fill_.Scalar", fill_),
];

fn opt_dtype() -> impl Strategy<Value = Option<DType>> {
    prop_oneof![1 => Just(None), 2 => any_dtype().prop_map(Some)]
}

#[test]
fn factories() {
    for (op, value) in [
        ("aten::zeros", 0.0),
        ("aten::_efficientzerotensor", 0.0),
        ("aten::ones", 1.0),
    ] {
        check(
            op,
            (shape(), opt_dtype()).prop_map(move |(s, d)| {
                let dt = d.unwrap_or(DType::F32);
                let want = HostTensor::new(&s, dt, vec![value; numel(&s)]);
                Sample::new(vec![v(ints(&s)), v(dtype_arg(d))], vec![Out::exact(want)])
            }),
        );
    }
    check(
        "aten::full",
        (shape(), number(), opt_dtype()).prop_map(|(s, x, d)| {
            let dt = d.unwrap_or(x.dtype());
            let want = HostTensor::new(&s, dt, vec![x.to_f64(); numel(&s)]);
            Sample::new(
                vec![v(ints(&s)), v(scalar_value(x)), v(dtype_arg(d))],
                vec![Out::exact(want)],
            )
        }),
    );
    check(
        "aten::empty.memory_format",
        (shape(), opt_dtype()).prop_map(|(s, d)| {
            let dt = d.unwrap_or(DType::F32);
            Sample::new(vec![v(ints(&s)), v(dtype_arg(d))], vec![Out::Meta(s, dt)])
        }),
    );
}

#[test]
fn scalar_tensor() {
    check(
        "aten::scalar_tensor",
        (number(), opt_dtype()).prop_map(|(x, d)| {
            let want = HostTensor::scalar(x.to_f64(), d.unwrap_or(DType::F32));
            Sample::new(
                vec![v(scalar_value(x)), v(dtype_arg(d))],
                vec![Out::exact(want)],
            )
        }),
    );
}

/// `torch.arange(start, end, step, dtype=dtype)`.
fn arange_ref(start: Scalar, end: Scalar, step: Scalar, dtype: Option<DType>) -> HostTensor {
    let all_int = [start, end, step]
        .iter()
        .all(|s| matches!(s, Scalar::Int(_)));
    let dt = dtype.unwrap_or(if all_int { DType::I64 } else { DType::F32 });
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    let n = ((e - s) / st).ceil().max(0.0) as usize;
    let (s, st) = if dt.is_float() {
        (s, st)
    } else {
        (s.trunc(), st.trunc())
    };
    HostTensor::new(&[n], dt, (0..n).map(|i| s + i as f64 * st).collect())
}

/// Bounds with the sign of `step` consistent with `start` and `end`.
fn bounds() -> impl Strategy<Value = (Scalar, Scalar, Scalar)> {
    let int = (-20i64..20, 0i64..40, 1i64..5, any::<bool>()).prop_map(|(s, len, st, down)| {
        if down {
            (Scalar::Int(s), Scalar::Int(s - len), Scalar::Int(-st))
        } else {
            (Scalar::Int(s), Scalar::Int(s + len), Scalar::Int(st))
        }
    });
    let float =
        (-5.0f64..5.0, 0.0f64..10.0, 0.25f64..2.0, any::<bool>()).prop_map(|(s, len, st, down)| {
            if down {
                (Scalar::Float(s), Scalar::Float(s - len), Scalar::Float(-st))
            } else {
                (
                    Scalar::Float(s),
                    Scalar::Int((s + len) as i64),
                    Scalar::Float(st),
                )
            }
        });
    prop_oneof![int, float]
}

#[test]
fn arange() {
    let dtypes = prop_oneof![
        2 => Just(None),
        1 => num_dtype().prop_map(Some),
    ];
    check(
        "aten::arange",
        (-3i64..40, dtypes.clone()).prop_map(|(end, d)| {
            let end = Scalar::Int(end.max(0));
            let want = arange_ref(Scalar::Int(0), end, Scalar::Int(1), d);
            Sample::new(
                vec![v(scalar_value(end)), v(dtype_arg(d))],
                vec![Out::close(want)],
            )
        }),
    );
    check(
        "aten::arange.start_step",
        (bounds(), dtypes).prop_map(|((s, e, st), d)| {
            let want = arange_ref(s, e, st, d);
            Sample::new(
                vec![
                    v(scalar_value(s)),
                    v(scalar_value(e)),
                    v(scalar_value(st)),
                    v(dtype_arg(d)),
                ],
                vec![Out::close(want)],
            )
        }),
    );
}

#[test]
fn clone() {
    check(
        "aten::clone",
        (shape(), any_dtype())
            .prop_flat_map(|(s, d)| input(s, d, Values::Special(4.0)))
            .prop_map(|x| {
                let want = x.host.clone();
                Sample::new(vec![t(x)], vec![Out::exact(want)])
            }),
    );
}

/// Values a conversion to `to` is defined for (no NaN or infinity to integers).
fn convertible(from: DType, to: DType) -> Values {
    if from.is_float() && !to.is_float() && to != DType::Bool {
        Values::Range(100.0)
    } else {
        Values::Special(100.0)
    }
}

#[test]
fn to_copy() {
    check(
        "aten::_to_copy",
        (shape(), any_dtype(), opt_dtype())
            .prop_flat_map(|(s, from, to)| {
                let vals = convertible(from, to.unwrap_or(from));
                (input(s, from, vals), Just(to))
            })
            .prop_map(|(x, to)| {
                let want = x.host.to(to.unwrap_or(x.host.dtype));
                Sample::new(vec![t(x), v(dtype_arg(to))], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn copy_() {
    // `src` broadcasts to `dst` (the larger of a broadcast pair) and converts to its dtype.
    check(
        "aten::copy_",
        (broadcast_pair(), any_dtype(), any_dtype())
            .prop_filter("src must broadcast to dst", |((a, b), _, _)| {
                super::reference::broadcast(&[a, b]).as_deref() == Some(a.as_slice())
            })
            .prop_flat_map(|((sd, ss), dd, ds)| {
                (
                    input_no_expand(sd, dd, Values::Range(4.0)),
                    input(ss, ds, convertible(ds, dd)),
                )
            })
            .prop_map(|(dst, src)| {
                let want = zip_map(&[&dst.host, &src.host], dst.host.dtype, |x| x[1]);
                Sample::new(vec![t(dst), t(src)], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn fill_() {
    check(
        "aten::fill_.Scalar",
        (shape(), any_dtype(), number())
            .prop_flat_map(|(s, d, x)| (input_no_expand(s, d, Values::Range(4.0)), Just(x)))
            .prop_map(|(dst, x)| {
                let want = HostTensor::new(
                    &dst.host.shape,
                    dst.host.dtype,
                    vec![round(x.to_f64(), dst.host.dtype); dst.host.numel()],
                );
                Sample::new(vec![t(dst), v(scalar_value(x))], vec![Out::exact(want)])
            }),
    );
}
