//! Comparing an executor's outputs with the expected ones, as `torch.testing.assert_close` does.
//!
//! * Floats pass when `|actual - expected| <= atol + rtol * |expected|`, with the dtype's default
//!   tolerance (below) unless the call carries an exception. NaN equals NaN (`equal_nan=True`:
//!   PyTorch's own outputs hold NaN where the math does, e.g. `log(-1)`); an infinity must match
//!   exactly.
//! * Integers and bools must be equal.
//! * A dtype or shape mismatch fails, whatever the values.
//!
//! Every comparison reports the greatest absolute and relative error, so a report can show how
//! close a passing case came and how far a failing one was.

use crate::format::CompareMode;
use crate::tensor::{DType, HostTensor};
use crate::value::Value;

/// `|actual - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// `torch.testing` defaults: float32 (1.3e-6, 1e-5), float16 (1e-3, 1e-5), bfloat16
    /// (1.6e-2, 1e-5), float64 (1e-7, 1e-7). `None` (exact) for integers and bool.
    pub fn for_dtype(dtype: DType) -> Option<Tolerance> {
        let (rtol, atol) = match dtype {
            DType::F32 => (1.3e-6, 1e-5),
            DType::F16 => (1e-3, 1e-5),
            DType::BF16 => (1.6e-2, 1e-5),
            DType::F64 => (1e-7, 1e-7),
            _ => return None,
        };
        Some(Tolerance { rtol, atol })
    }
}

/// The outcome of comparing one value (or all outputs of a call).
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Everything matched.
    pub passed: bool,
    /// Greatest `|actual - expected|` over the elements compared (0 when none).
    pub max_abs: f64,
    /// Greatest `|actual - expected| / |expected|` (infinite where expected is 0 and actual is not).
    pub max_rel: f64,
    /// Why it failed.
    pub reason: Option<String>,
}

impl Comparison {
    fn pass() -> Comparison {
        Comparison {
            passed: true,
            max_abs: 0.0,
            max_rel: 0.0,
            reason: None,
        }
    }

    fn fail(reason: String) -> Comparison {
        Comparison {
            passed: false,
            max_abs: 0.0,
            max_rel: 0.0,
            reason: Some(reason),
        }
    }

    /// Folds `other` into `self`: fails if either failed, keeps the greatest errors and the first
    /// reason (prefixed with `label`).
    pub fn merge(&mut self, other: Comparison, label: &str) {
        self.max_abs = max_err(self.max_abs, other.max_abs);
        self.max_rel = max_err(self.max_rel, other.max_rel);
        if !other.passed {
            if self.passed {
                self.reason = other.reason.map(|r| format!("{label}: {r}"));
            }
            self.passed = false;
        }
    }
}

fn max_err(a: f64, b: f64) -> f64 {
    if a.is_nan() || b > a { b } else { a }
}

/// Compares the outputs of one call. `tolerance` overrides the dtype default.
pub fn compare_outputs(
    expected: &[Value],
    actual: &[Value],
    mode: CompareMode,
    tolerance: Option<Tolerance>,
) -> Comparison {
    if expected.len() != actual.len() {
        return Comparison::fail(format!(
            "expected {} outputs, got {}",
            expected.len(),
            actual.len()
        ));
    }
    let mut total = Comparison::pass();
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        total.merge(compare_value(e, a, mode, tolerance), &format!("output {i}"));
    }
    total
}

/// Compares one value. Floats outside tensors use `tolerance`, else float32's default.
pub fn compare_value(
    expected: &Value,
    actual: &Value,
    mode: CompareMode,
    tolerance: Option<Tolerance>,
) -> Comparison {
    match (expected, actual) {
        (Value::Tensor(e), Value::Tensor(a)) => compare_tensors(e, a, mode, tolerance),
        (Value::None, Value::None) => Comparison::pass(),
        (Value::Float(e), Value::Float(a)) => {
            let tol = tolerance.or(Tolerance::for_dtype(DType::F32));
            compare_floats(&[*e], &[*a], tol, &[])
        }
        (Value::Float(e), Value::Int(a)) => compare_floats(
            &[*e],
            &[*a as f64],
            tolerance.or(Tolerance::for_dtype(DType::F32)),
            &[],
        ),
        (Value::TensorList(e), Value::TensorList(a)) => compare_lists(
            &e.iter().cloned().map(Some).collect::<Vec<_>>(),
            &a.iter().cloned().map(Some).collect::<Vec<_>>(),
            mode,
            tolerance,
        ),
        (Value::OptionalTensorList(e), Value::OptionalTensorList(a)) => {
            compare_lists(e, a, mode, tolerance)
        }
        (Value::TensorList(e), Value::OptionalTensorList(a)) => compare_lists(
            &e.iter().cloned().map(Some).collect::<Vec<_>>(),
            a,
            mode,
            tolerance,
        ),
        (e, a) if e.kind() == a.kind() => {
            if e == a {
                Comparison::pass()
            } else {
                Comparison::fail(format!("expected {e}, got {a}"))
            }
        }
        (e, a) => Comparison::fail(format!(
            "expected a {} ({e}), got a {} ({a})",
            e.kind(),
            a.kind()
        )),
    }
}

fn compare_lists(
    expected: &[Option<HostTensor>],
    actual: &[Option<HostTensor>],
    mode: CompareMode,
    tolerance: Option<Tolerance>,
) -> Comparison {
    if expected.len() != actual.len() {
        return Comparison::fail(format!(
            "expected {} tensors, got {}",
            expected.len(),
            actual.len()
        ));
    }
    let mut total = Comparison::pass();
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        let c = match (e, a) {
            (Some(e), Some(a)) => compare_tensors(e, a, mode, tolerance),
            (None, None) => Comparison::pass(),
            (Some(_), None) => Comparison::fail("expected a tensor, got None".into()),
            (None, Some(_)) => Comparison::fail("expected None, got a tensor".into()),
        };
        total.merge(c, &format!("element {i}"));
    }
    total
}

/// Compares two tensors: dtype, shape, then values (unless `mode` is shape-only).
pub fn compare_tensors(
    expected: &HostTensor,
    actual: &HostTensor,
    mode: CompareMode,
    tolerance: Option<Tolerance>,
) -> Comparison {
    if expected.dtype() != actual.dtype() {
        return Comparison::fail(format!(
            "dtype: expected {}, got {}",
            expected.dtype(),
            actual.dtype()
        ));
    }
    if expected.shape() != actual.shape() {
        return Comparison::fail(format!(
            "shape: expected {:?}, got {:?}",
            expected.shape(),
            actual.shape()
        ));
    }
    if mode == CompareMode::Shape {
        return Comparison::pass();
    }
    match tolerance.or(Tolerance::for_dtype(expected.dtype())) {
        Some(tol) if expected.dtype().is_float() => compare_floats(
            &expected.to_f64_vec(),
            &actual.to_f64_vec(),
            Some(tol),
            expected.shape(),
        ),
        _ => compare_exact(
            &expected.to_i64_vec(),
            &actual.to_i64_vec(),
            expected.shape(),
        ),
    }
}

fn compare_exact(expected: &[i64], actual: &[i64], shape: &[usize]) -> Comparison {
    let mut max_abs = 0.0f64;
    let mut max_rel = 0.0f64;
    let mut mismatches = 0usize;
    let mut first = None;
    for (i, (&e, &a)) in expected.iter().zip(actual).enumerate() {
        if e != a {
            mismatches += 1;
            first.get_or_insert(i);
            let abs = (a as f64 - e as f64).abs();
            max_abs = max_abs.max(abs);
            max_rel = max_rel.max(if e == 0 {
                f64::INFINITY
            } else {
                abs / (e as f64).abs()
            });
        }
    }
    let reason = first.map(|i| {
        format!(
            "{mismatches}/{} elements differ (exact comparison); first at {:?}: expected {}, got {}",
            expected.len(),
            unravel(i, shape),
            expected[i],
            actual[i]
        )
    });
    Comparison {
        passed: mismatches == 0,
        max_abs,
        max_rel,
        reason,
    }
}

fn compare_floats(
    expected: &[f64],
    actual: &[f64],
    tol: Option<Tolerance>,
    shape: &[usize],
) -> Comparison {
    let tol = tol.unwrap_or(Tolerance {
        rtol: 0.0,
        atol: 0.0,
    });
    let mut max_abs = 0.0f64;
    let mut max_rel = 0.0f64;
    let mut mismatches = 0usize;
    let mut worst: Option<(usize, f64)> = None; // index and excess over the allowed error
    for (i, (&e, &a)) in expected.iter().zip(actual).enumerate() {
        if (e.is_nan() && a.is_nan()) || e == a {
            continue;
        }
        let abs = if e.is_nan() || a.is_nan() {
            f64::INFINITY
        } else {
            (a - e).abs()
        };
        let rel = if e == 0.0 {
            f64::INFINITY
        } else {
            abs / e.abs()
        };
        max_abs = max_err(max_abs, abs);
        max_rel = max_err(max_rel, rel);
        let allowed = tol.atol + tol.rtol * e.abs();
        let within = abs <= allowed; // false for NaN
        if !within || e.is_infinite() || a.is_infinite() {
            mismatches += 1;
            let excess = if abs.is_finite() {
                abs - allowed
            } else {
                f64::INFINITY
            };
            if worst.is_none_or(|(_, w)| excess > w) {
                worst = Some((i, excess));
            }
        }
    }
    let reason = worst.map(|(i, _)| {
        format!(
            "{mismatches}/{} elements differ; worst at {:?}: expected {}, got {} (allowed atol {:e} + rtol {:e} * |expected|); greatest abs error {:e}, rel error {:e}",
            expected.len(),
            unravel(i, shape),
            expected[i],
            actual[i],
            tol.atol,
            tol.rtol,
            max_abs,
            max_rel
        )
    });
    Comparison {
        passed: mismatches == 0,
        max_abs,
        max_rel,
        reason,
    }
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &d) in index.iter_mut().zip(shape).rev() {
        if d > 0 {
            *slot = flat % d;
            flat /= d;
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32t(v: &[f64]) -> HostTensor {
        HostTensor::from_f64s(DType::F32, vec![v.len()], v).unwrap()
    }

    #[test]
    fn within_default_tolerance_passes_and_reports_errors() {
        let c = compare_tensors(
            &f32t(&[1.0, 100.0]),
            &f32t(&[1.0, 100.0001]),
            CompareMode::Values,
            None,
        );
        assert!(c.passed, "{c:?}");
        assert!(c.max_abs > 0.0 && c.max_abs < 2e-4);
    }

    #[test]
    fn outside_tolerance_fails_with_location() {
        let c = compare_tensors(
            &f32t(&[1.0, 2.0]),
            &f32t(&[1.0, 2.5]),
            CompareMode::Values,
            None,
        );
        assert!(!c.passed);
        assert_eq!(c.max_abs, 0.5);
        assert_eq!(c.max_rel, 0.25);
        assert!(
            c.reason
                .unwrap()
                .contains("1/2 elements differ; worst at [1]")
        );
    }

    #[test]
    fn nan_equals_nan_but_not_a_number() {
        let nan = f64::NAN;
        assert!(compare_tensors(&f32t(&[nan]), &f32t(&[nan]), CompareMode::Values, None).passed);
        let c = compare_tensors(&f32t(&[nan]), &f32t(&[0.0]), CompareMode::Values, None);
        assert!(!c.passed);
        assert!(c.max_abs.is_infinite());
        assert!(
            !compare_tensors(
                &f32t(&[f64::INFINITY]),
                &f32t(&[f64::NEG_INFINITY]),
                CompareMode::Values,
                None
            )
            .passed
        );
        assert!(
            compare_tensors(
                &f32t(&[f64::INFINITY]),
                &f32t(&[f64::INFINITY]),
                CompareMode::Values,
                None
            )
            .passed
        );
    }

    #[test]
    fn bf16_tolerance_is_looser() {
        let e = HostTensor::from_f64s(DType::BF16, vec![1], &[1.0]).unwrap();
        let a = HostTensor::from_f64s(DType::BF16, vec![1], &[1.0078125]).unwrap(); // one ulp
        assert!(compare_tensors(&e, &a, CompareMode::Values, None).passed);
    }

    #[test]
    fn dtype_and_shape_mismatch_fail() {
        let e = f32t(&[1.0]);
        let a = HostTensor::from_f64s(DType::BF16, vec![1], &[1.0]).unwrap();
        assert!(
            compare_tensors(&e, &a, CompareMode::Values, None)
                .reason
                .unwrap()
                .starts_with("dtype")
        );
        let b = f32t(&[1.0, 1.0]);
        assert!(
            compare_tensors(&e, &b, CompareMode::Shape, None)
                .reason
                .unwrap()
                .starts_with("shape")
        );
    }

    #[test]
    fn integers_are_exact_and_shape_only_ignores_values() {
        let e = HostTensor::from_i64s(DType::I64, vec![2, 2], &[1, 2, 3, 4]).unwrap();
        let a = HostTensor::from_i64s(DType::I64, vec![2, 2], &[1, 2, 3, 5]).unwrap();
        let c = compare_tensors(&e, &a, CompareMode::Values, None);
        assert!(!c.passed);
        assert!(c.reason.unwrap().contains("first at [1, 1]"));
        assert!(compare_tensors(&e, &a, CompareMode::Shape, None).passed);
    }

    #[test]
    fn tolerance_override_applies() {
        let tol = Some(Tolerance {
            rtol: 0.0,
            atol: 0.6,
        });
        assert!(compare_tensors(&f32t(&[2.0]), &f32t(&[2.5]), CompareMode::Values, tol).passed);
    }

    #[test]
    fn output_count_and_kinds() {
        assert!(!compare_outputs(&[Value::None], &[], CompareMode::Values, None).passed);
        assert!(
            compare_outputs(
                &[Value::Int(3)],
                &[Value::Int(3)],
                CompareMode::Values,
                None
            )
            .passed
        );
        assert!(
            !compare_outputs(
                &[Value::Int(3)],
                &[Value::Bool(true)],
                CompareMode::Values,
                None
            )
            .passed
        );
    }
}
