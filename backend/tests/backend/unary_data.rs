//! Unary elementwise and data-movement operators against host references (f64 math rounded
//! to the output dtype), in Strict, Debug and DeferAndFuse: dtypes, promotion, non-contiguous
//! inputs, zero-size tensors, errors, and calls by overload name with the argument lists
//! PyTorch passes (as recorded in `golden/cases`).

use crate::host::{MODES, ravel, round, rt, tol, unravel};
use tpuemu_backend::ops::{self, Value, data, layout_ops, unary};
use tpuemu_backend::{DType, Mode, Runtime, Scalar, Tensor};

/// `assert_close` with `equal_nan`: infinities and NaN positions must match exactly.
fn close(got: &[f64], want: &[f64], d: DType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (rtol, atol) = tol(d);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}: element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// Checks a result's dtype, shape and values.
fn check(t: &Tensor, d: DType, shape: &[usize], want: &[f64], what: &str) {
    assert_eq!(t.dtype(), d, "{what}: dtype");
    assert_eq!(t.shape(), shape, "{what}: shape");
    close(&t.to_f64_vec().unwrap(), want, d, what);
}

fn tensor(rt: &Runtime, v: &[f64], shape: &[usize], d: DType) -> Tensor {
    Tensor::from_f64s(rt, v.iter().copied(), v.len(), shape, d).unwrap()
}

/// Deterministic test values in [-4, 4) (steps of 1/8, some repeats).
fn values(n: usize, seed: u64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| ((i * 37 + seed * 11) % 64) as f64 / 8.0 - 4.0)
        .collect()
}

// Host arrays

/// Transposes a row-major `[r, c]` array.
fn transposed(v: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c)
        .flat_map(|j| (0..r).map(move |i| (i, j)))
        .map(|(i, j)| v[i * c + j])
        .collect()
}

#[path = "unary_data/unary.rs"]
mod unary_ops;

#[path = "unary_data/join.rs"]
mod join;

#[path = "unary_data/index.rs"]
mod index;

#[path = "unary_data/regions.rs"]
mod regions;
