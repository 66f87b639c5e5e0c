//! Unary operators: every dtype (promotion to float32, dtype-keeping ops, bool errors), special
//! values (signed zeros, NaN, infinities), non-contiguous, zero-size and zero-dim inputs, fusion,
//! calls by overload name.

use super::*;

type UnaryFn = fn(&Tensor) -> tpuemu_backend::Result<Tensor>;

/// Float inputs with the awkward values: signed zeros, halves, NaN, infinities.
const SPECIAL: [f64; 20] = [
    -3.5,
    -2.0,
    -1.25,
    -0.5,
    -0.0,
    0.0,
    0.3,
    0.5,
    1.0,
    1.75,
    2.5,
    4.0,
    7.25,
    -7.5,
    0.125,
    3.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.3,
];
const INTS: [f64; 10] = [-7.0, -3.0, -1.0, 0.0, 1.0, 2.0, 5.0, 9.0, 100.0, -100.0];
const BOOLS: [f64; 6] = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0];

/// Runs `f` on every dtype it accepts (and checks the error where PyTorch errors), in every
/// mode: `float_op` says whether integer inputs promote to float32; `accepts(d)` whether the
/// dtype is defined at all.
fn check_unary(
    name: &str,
    f: UnaryFn,
    reference: fn(f64) -> f64,
    float_op: bool,
    accepts: fn(DType) -> bool,
) {
    for mode in MODES {
        let rt = rt(mode);
        // The byte dtypes are storage and conversion dtypes here (checked by the op suite's
        // `_to_copy` samples); the unary operators are checked on the others.
        for d in DType::ALL
            .into_iter()
            .filter(|d| !matches!(d, DType::U8 | DType::I8))
        {
            let vals: &[f64] = match d {
                DType::Bool => &BOOLS,
                DType::I32 | DType::I64 => &INTS,
                _ => &SPECIAL,
            };
            let x = tensor(&rt, vals, &[vals.len()], d);
            if !accepts(d) {
                assert!(f(&x).is_err(), "{name} should reject {d}");
                continue;
            }
            let out = if float_op && !d.is_float() {
                DType::F32
            } else {
                d
            };
            let want: Vec<f64> = vals
                .iter()
                .map(|v| round(reference(round(*v, d)), out))
                .collect();
            let y = f(&x).unwrap();
            check(
                &y,
                out,
                &[vals.len()],
                &want,
                &format!("{name} {d} {mode:?}"),
            );
        }
        // Non-contiguous f32 inputs: a transposed view and a strided slice.
        let v = values(24, 3);
        let x = tensor(&rt, &v, &[4, 6], DType::F32);
        let want: Vec<f64> = transposed(&v, 4, 6)
            .iter()
            .map(|a| round(reference(*a), DType::F32))
            .collect();
        check(
            &f(&x.t().unwrap()).unwrap(),
            DType::F32,
            &[6, 4],
            &want,
            &format!("{name} transposed {mode:?}"),
        );
        let s = layout_ops::slice(&x, 1, Some(1), None, 2).unwrap();
        let want: Vec<f64> = (0..4)
            .flat_map(|i| [1, 3, 5].map(|j| v[i * 6 + j]))
            .map(|a| round(reference(a), DType::F32))
            .collect();
        check(
            &f(&s).unwrap(),
            DType::F32,
            &[4, 3],
            &want,
            &format!("{name} sliced {mode:?}"),
        );
        // Zero-size and zero-dim.
        let z = tensor(&rt, &[], &[1, 0, 3], DType::F32);
        check(&f(&z).unwrap(), DType::F32, &[1, 0, 3], &[], name);
        let s = tensor(&rt, &[0.75], &[], DType::F32);
        let want = round(reference(0.75), DType::F32);
        check(&f(&s).unwrap(), DType::F32, &[], &[want], name);
    }
}

fn any(_: DType) -> bool {
    true
}

fn numeric(d: DType) -> bool {
    d != DType::Bool
}

fn floats(d: DType) -> bool {
    d.is_float()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn neg_keeps_dtype_and_rejects_bool() {
    check_unary("neg", unary::neg, |x| -x, false, numeric);
    let rt = rt(Mode::Strict);
    let b = tensor(&rt, &BOOLS, &[6], DType::Bool);
    let e = b.neg().unwrap_err().to_string();
    assert!(e.contains("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."), "{e}");
}

#[test]
fn abs_and_sign() {
    check_unary("abs", unary::abs, f64::abs, false, numeric);
    // ATen's sign is (0 < x) - (x < 0): NaN gives 0; bool is the identity.
    let sign = |x: f64| ((0.0 < x) as i32 - (x < 0.0) as i32) as f64;
    check_unary("sign", unary::sign, sign, false, any);
}

#[test]
fn floor_ceil_are_identity_on_integers() {
    check_unary("floor", unary::floor, f64::floor, false, numeric);
    check_unary("ceil", unary::ceil, f64::ceil, false, numeric);
}

#[test]
fn relu_keeps_dtype_and_propagates_nan() {
    let relu = |x: f64| if x.is_nan() { x } else { x.max(0.0) };
    check_unary("relu", unary::relu, relu, false, numeric);
    let rt = rt(Mode::Strict);
    let e = tensor(&rt, &BOOLS, &[6], DType::Bool)
        .relu()
        .unwrap_err()
        .to_string();
    assert!(e.contains("Boolean inputs not supported for relu"), "{e}");
}

#[test]
fn exp_log_log1p() {
    check_unary("exp", unary::exp, f64::exp, true, any);
    check_unary("log", unary::log, f64::ln, true, any);
    check_unary("log1p", unary::log1p, f64::ln_1p, true, any);
}

#[test]
fn sqrt_rsqrt_reciprocal() {
    check_unary("sqrt", unary::sqrt, f64::sqrt, true, any);
    check_unary("rsqrt", unary::rsqrt, |x| 1.0 / x.sqrt(), true, any);
    check_unary("reciprocal", unary::reciprocal, |x| 1.0 / x, true, any);
}

#[test]
fn sin_cos_tanh_erf() {
    check_unary("sin", unary::sin, f64::sin, true, any);
    check_unary("cos", unary::cos, f64::cos, true, any);
    check_unary("tanh", unary::tanh, f64::tanh, true, any);
    check_unary("erf", unary::erf, libm::erf, true, any);
}

#[test]
fn sigmoid_and_silu() {
    check_unary("sigmoid", unary::sigmoid, sigmoid, true, any);
    check_unary(
        "silu",
        unary::silu,
        |x| x / (1.0 + (-x).exp()),
        true,
        floats,
    );
}

#[test]
fn gelu_both_approximations() {
    check_unary("gelu", |x| x.gelu("none"), gelu_erf, true, floats);
    check_unary("gelu_tanh", |x| x.gelu("tanh"), gelu_tanh, true, floats);
    let rt = rt(Mode::Strict);
    let x = tensor(&rt, &[1.0], &[1], DType::F32);
    let e = x.gelu("fast").unwrap_err().to_string();
    assert!(
        e.contains("approximate argument must be either none or tanh"),
        "{e}"
    );
}

#[test]
fn unary_on_expanded_input_and_chains_fuse() {
    let rt = rt(Mode::DeferAndFuse);
    let v = [-1.5, 0.25, 2.0];
    let x = tensor(&rt, &v, &[3], DType::F32).expand(&[2, 3]).unwrap();
    rt.reset_metrics();
    let y = x
        .neg()
        .unwrap()
        .exp()
        .unwrap()
        .sigmoid()
        .unwrap()
        .relu()
        .unwrap();
    let want: Vec<f64> = v
        .iter()
        .chain(&v)
        .map(|a| round(sigmoid((-a).exp()), DType::F32))
        .collect();
    check(&y, DType::F32, &[2, 3], &want, "chain");
    assert_eq!(
        rt.metrics().kernels_launched,
        1,
        "{}",
        rt.metrics().report()
    );
}

#[test]
fn unary_calls_by_overload_name() {
    let rt = rt(Mode::Strict);
    let x = tensor(&rt, &[-1.0, 0.5, 2.0], &[3], DType::BF16);
    for name in [
        "aten::neg",
        "aten::abs",
        "aten::exp",
        "aten::log",
        "aten::log1p",
        "aten::sqrt",
        "aten::rsqrt",
        "aten::reciprocal",
        "aten::sin",
        "aten::cos",
        "aten::tanh",
        "aten::sigmoid",
        "aten::relu",
        "aten::silu",
        "aten::erf",
        "aten::floor",
        "aten::ceil",
        "aten::sign",
    ] {
        let out = ops::call(&rt, name, vec![Value::Tensor(x.clone())]).unwrap();
        let [Value::Tensor(t)] = &out[..] else {
            panic!("{name}: {out:?}")
        };
        assert_eq!(
            (t.dtype(), t.shape()),
            (DType::BF16, &[3usize][..]),
            "{name}"
        );
    }
    // As recorded: aten::gelu(Tensor self, *, str approximate="none").
    let out = ops::call(
        &rt,
        "aten::gelu",
        vec![Value::Tensor(x.clone()), Value::Str("tanh".into())],
    )
    .unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    let want: Vec<f64> = [-1.0, 0.5, 2.0]
        .iter()
        .map(|v| round(gelu_tanh(*v), DType::BF16))
        .collect();
    check(t, DType::BF16, &[3], &want, "gelu by name");
    let out = ops::call(&rt, "aten::gelu", vec![Value::Tensor(x.clone())]).unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    let want: Vec<f64> = [-1.0, 0.5, 2.0]
        .iter()
        .map(|v| round(gelu_erf(*v), DType::BF16))
        .collect();
    check(t, DType::BF16, &[3], &want, "gelu default");
    // int64 -> float32 through the registry, too.
    let i = tensor(&rt, &[1.0, 2.0], &[2], DType::I64);
    let out = ops::call(&rt, "aten::exp", vec![Value::Tensor(i)]).unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    assert_eq!(t.dtype(), DType::F32);
}
