//! `equal` and `allclose`, which answer a Python bool: checked against what `torch.equal` and
//! `torch.allclose` return by their documented rules (same shape and elements; NaN unequal to
//! itself unless `equal_nan`; `|a - b| <= atol + rtol |b|`), in every mode.

use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Tensor};

use super::harness::{MODES, runtime};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[("aten::equal", equal), ("aten::allclose", equal)];

fn answer(rt: &tpuemu_backend::Runtime, op: &str, args: Vec<Value>) -> bool {
    match ops::call(rt, op, args).expect("runs").remove(0) {
        Value::Bool(b) => b,
        other => panic!("{op} returned {other:?}"),
    }
}

#[test]
fn equal() {
    for mode in MODES {
        let rt = runtime(mode);
        let t = |v: &[f64], shape: &[usize], d: DType| {
            Value::Tensor(
                Tensor::from_f64s(&rt, v.iter().copied(), v.len(), shape, d).expect("upload"),
            )
        };
        let (f, i) = (DType::F32, DType::I64);
        let nan = f64::NAN;
        let eq = |a, b| answer(&rt, "aten::equal", vec![a, b]);
        assert!(
            eq(t(&[1.0, 2.0], &[2], f), t(&[1.0, 2.0], &[2], f)),
            "{mode:?}"
        );
        assert!(
            !eq(t(&[1.0, 2.0], &[2], f), t(&[1.0, 2.5], &[2], f)),
            "{mode:?}"
        );
        assert!(
            !eq(t(&[1.0, 2.0], &[2], f), t(&[1.0, 2.0], &[1, 2], f)),
            "{mode:?}"
        );
        assert!(!eq(t(&[nan], &[1], f), t(&[nan], &[1], f)), "{mode:?}");
        // Dtypes promote: 1.0 == 1.
        assert!(
            eq(t(&[1.0, 3.0], &[2], f), t(&[1.0, 3.0], &[2], i)),
            "{mode:?}"
        );
        assert!(eq(
            t(&[1.0, 0.0], &[2], DType::Bool),
            t(&[1.0, 0.0], &[2], DType::Bool)
        ));
        let close = |a, b, rtol: f64, atol: f64, nan_eq: bool| {
            answer(
                &rt,
                "aten::allclose",
                vec![
                    a,
                    b,
                    Value::Float(rtol),
                    Value::Float(atol),
                    Value::Bool(nan_eq),
                ],
            )
        };
        let a = || t(&[1.0, 100.0, f64::INFINITY], &[3], f);
        assert!(close(a(), a(), 0.0, 0.0, false), "{mode:?}");
        // |100.05 - 100| = 0.05 <= 1e-8 + 1e-3 * 100.
        let b = || t(&[1.0, 100.05, f64::INFINITY], &[3], f);
        assert!(close(b(), a(), 1e-3, 1e-8, false), "{mode:?}");
        assert!(!close(b(), a(), 1e-4, 1e-8, false), "{mode:?}");
        assert!(close(b(), a(), 0.0, 0.06, false), "{mode:?}");
        let n = || t(&[nan, 1.0], &[2], f);
        assert!(!close(n(), n(), 1e-5, 1e-8, false), "{mode:?}");
        assert!(close(n(), n(), 1e-5, 1e-8, true), "{mode:?}");
        let ninf = t(&[1.0, 100.0, f64::NEG_INFINITY], &[3], f);
        assert!(!close(ninf, a(), 1.0, 1.0, false), "{mode:?}");
    }
}
