//! Tensors made from another tensor's metadata and aliases: `*_like`, `new_*`, `empty_strided`,
//! `empty_permuted`, `fill`, `zero`, `alias`/`detach`/`lift_fresh`/`lift` and their `_copy`
//! forms, `_local_scalar_dense`.
//!
//! Reference rules (PyTorch's): `*_like` and `new_*` take the input's dtype unless told;
//! `full_like`/`new_full`/`fill` convert the value to that dtype; `empty*` values are
//! unspecified (shape and dtype only); an alias holds the input's values.

use proptest::prelude::*;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Tensor};

use super::binary::value_of;
use super::harness::{MODES, Out, Sample, check, ints, runtime, t, v};
use super::reference::{HostTensor, numel, zip_map};
use super::strategies::{Values, any_dtype, input, number, shape};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::alias", aliases),
    ("aten::detach", aliases),
    ("aten::lift_fresh", aliases),
    ("aten::lift", aliases),
    ("aten::alias_copy", aliases),
    ("aten::detach_copy", aliases),
    ("aten::lift_fresh_copy", aliases),
    ("aten::zeros_like", like),
    ("aten::ones_like", like),
    ("aten::full_like", like),
    ("aten::empty_like", like),
    ("aten::fill.Scalar", like),
    ("aten::zero", like),
    ("aten::fill.Tensor", fill_tensor),
    ("aten::new_zeros", new_factories),
    ("aten::new_ones", new_factories),
    ("aten::new_full", new_factories),
    ("aten::new_empty", new_factories),
    ("aten::new_empty_strided", strided),
    ("aten::empty_strided", strided),
    ("aten::empty_permuted", strided),
    ("aten::_local_scalar_dense", local_scalar_dense),
];

fn opt_dtype() -> impl Strategy<Value = Option<DType>> {
    prop_oneof![Just(None), any_dtype().prop_map(Some)]
}

#[test]
fn aliases() {
    for op in [
        "aten::alias",
        "aten::detach",
        "aten::lift_fresh",
        "aten::lift",
        "aten::alias_copy",
        "aten::detach_copy",
        "aten::lift_fresh_copy",
    ] {
        check(
            op,
            (shape(), any_dtype())
                .prop_flat_map(|(s, d)| input(s, d, Values::Special(4.0)))
                .prop_map(|x| {
                    let want = x.host.clone();
                    Sample::new(vec![t(x)], vec![Out::exact(want)])
                }),
        );
    }
}

#[test]
fn like() {
    let base = || (shape(), any_dtype()).prop_flat_map(|(s, d)| input(s, d, Values::Range(3.0)));
    for (op, value) in [("aten::zeros_like", 0.0), ("aten::ones_like", 1.0)] {
        check(
            op,
            (base(), opt_dtype()).prop_map(move |(x, d)| {
                let dt = d.unwrap_or(x.host.dtype);
                let want = HostTensor::new(&x.host.shape, dt, vec![value; x.host.numel()]);
                Sample::new(
                    vec![t(x), v(d.map_or(Value::None, Value::Dtype))],
                    vec![Out::exact(want)],
                )
            }),
        );
    }
    check(
        "aten::full_like",
        (base(), number(), opt_dtype()).prop_map(|(x, f, d)| {
            let dt = d.unwrap_or(x.host.dtype);
            let want = HostTensor::new(&x.host.shape, dt, vec![f.to_f64(); x.host.numel()]);
            let dv = d.map_or(Value::None, Value::Dtype);
            Sample::new(vec![t(x), v(value_of(f)), v(dv)], vec![Out::exact(want)])
        }),
    );
    check(
        "aten::empty_like",
        (base(), opt_dtype()).prop_map(|(x, d)| {
            let dt = d.unwrap_or(x.host.dtype);
            let s = x.host.shape.clone();
            Sample::new(
                vec![t(x), v(d.map_or(Value::None, Value::Dtype))],
                vec![Out::Meta(s, dt)],
            )
        }),
    );
    check(
        "aten::fill.Scalar",
        (base(), number()).prop_map(|(x, f)| {
            let want = zip_map(&[&x.host], x.host.dtype, |_| f.to_f64());
            Sample::new(vec![t(x), v(value_of(f))], vec![Out::exact(want)])
        }),
    );
    check(
        "aten::zero",
        base().prop_map(|x| {
            let want = zip_map(&[&x.host], x.host.dtype, |_| 0.0);
            Sample::new(vec![t(x)], vec![Out::exact(want)])
        }),
    );
}

#[test]
fn fill_tensor() {
    check(
        "aten::fill.Tensor",
        (shape(), any_dtype(), any_dtype())
            .prop_flat_map(|(s, d, dv)| {
                (
                    input(s, d, Values::Range(3.0)),
                    input(vec![], dv, Values::Special(5.0)),
                )
            })
            .prop_map(|(x, val)| {
                let f = val.host.data[0];
                let want = zip_map(&[&x.host], x.host.dtype, |_| f);
                Sample::new(vec![t(x), t(val)], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn new_factories() {
    let base = || (shape(), any_dtype()).prop_flat_map(|(s, d)| input(s, d, Values::Range(3.0)));
    for (op, value) in [
        ("aten::new_zeros", Some(0.0)),
        ("aten::new_ones", Some(1.0)),
        ("aten::new_empty", None),
    ] {
        check(
            op,
            (base(), shape(), opt_dtype()).prop_map(move |(x, s, d)| {
                let dt = d.unwrap_or(x.host.dtype);
                let out = match value {
                    Some(k) => Out::exact(HostTensor::new(&s, dt, vec![k; numel(&s)])),
                    None => Out::Meta(s.clone(), dt),
                };
                let dv = d.map_or(Value::None, Value::Dtype);
                Sample::new(vec![t(x), v(ints(&s)), v(dv)], vec![out])
            }),
        );
    }
    check(
        "aten::new_full",
        (base(), shape(), number(), opt_dtype()).prop_map(|(x, s, f, d)| {
            let dt = d.unwrap_or(x.host.dtype);
            let want = HostTensor::new(&s, dt, vec![f.to_f64(); numel(&s)]);
            let dv = d.map_or(Value::None, Value::Dtype);
            Sample::new(
                vec![t(x), v(ints(&s)), v(value_of(f)), v(dv)],
                vec![Out::exact(want)],
            )
        }),
    );
}

/// Strides of `shape` in the memory order `perm` (outermost first), each dim `step` apart.
fn strides_for(shape: &[usize], perm: &[usize], step: usize) -> Vec<i64> {
    let mut st = vec![0i64; shape.len()];
    let mut acc = step as i64;
    for &d in perm.iter().rev() {
        st[d] = acc;
        acc *= shape[d].max(1) as i64;
    }
    st
}

#[test]
fn strided() {
    let layout = || {
        shape().prop_flat_map(|s| {
            let n = s.len();
            (
                Just(s),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                1usize..3,
                opt_dtype(),
            )
        })
    };
    check(
        "aten::empty_strided",
        layout().prop_map(|(s, perm, step, d)| {
            let st = strides_for(&s, &perm, step);
            let dv = d.map_or(Value::None, Value::Dtype);
            Sample::new(
                vec![v(ints(&s)), v(Value::Ints(st)), v(dv)],
                vec![Out::Meta(s, d.unwrap_or(DType::F32))],
            )
        }),
    );
    check(
        "aten::new_empty_strided",
        (layout(), any_dtype())
            .prop_flat_map(|(l, dx)| (Just(l), input(vec![2], dx, Values::Range(1.0))))
            .prop_map(|((s, perm, step, d), x)| {
                let st = strides_for(&s, &perm, step);
                let dt = d.unwrap_or(x.host.dtype);
                let dv = d.map_or(Value::None, Value::Dtype);
                Sample::new(
                    vec![t(x), v(ints(&s)), v(Value::Ints(st)), v(dv)],
                    vec![Out::Meta(s, dt)],
                )
            }),
    );
    check(
        "aten::empty_permuted",
        layout().prop_map(|(s, perm, _, d)| {
            let p = Value::Ints(perm.iter().map(|x| *x as i64).collect());
            let dv = d.map_or(Value::None, Value::Dtype);
            Sample::new(
                vec![v(ints(&s)), v(p), v(dv)],
                vec![Out::Meta(s, d.unwrap_or(DType::F32))],
            )
        }),
    );
}

/// `.item()` of one-element tensors of every dtype, in every mode: the value and its kind.
#[test]
fn local_scalar_dense() {
    let cases: [(DType, f64, Value); 6] = [
        (DType::F32, -2.5, Value::Float(-2.5)),
        (DType::BF16, 0.375, Value::Float(0.375)),
        (DType::F16, 3.0, Value::Float(3.0)),
        (DType::I32, -7.0, Value::Int(-7)),
        (DType::I64, 123456.0, Value::Int(123456)),
        (DType::Bool, 1.0, Value::Bool(true)),
    ];
    for mode in MODES {
        let rt = runtime(mode);
        for (d, x, want) in &cases {
            let t = Tensor::from_f64s(&rt, std::iter::once(*x), 1, &[1, 1], *d).expect("upload");
            let out =
                ops::call(&rt, "aten::_local_scalar_dense", vec![Value::Tensor(t)]).expect("item");
            let ok = match (&out[0], want) {
                (Value::Float(a), Value::Float(b)) => a == b,
                (Value::Int(a), Value::Int(b)) => a == b,
                (Value::Bool(a), Value::Bool(b)) => a == b,
                _ => false,
            };
            assert!(ok, "{mode:?} {d}: got {:?}, want {want:?}", out[0]);
        }
    }
}
