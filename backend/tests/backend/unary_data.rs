//! Unary elementwise and data-movement operators against host references (f64 math rounded
//! to the output dtype), in Strict, Debug and DeferAndFuse: dtypes, promotion, non-contiguous
//! inputs, zero-size tensors, errors, and calls by overload name with the argument lists
//! PyTorch passes (as recorded in `golden/cases`).

use std::sync::Arc;

use half::{bf16, f16};
use tpuemu_backend::ops::{self, Value, data, layout_ops, unary};
use tpuemu_backend::{DType, Mode, Runtime, Scalar, Tensor};
use tpuemu_emulator::{Emulator, builtin};

const MODES: [Mode; 3] = [Mode::Strict, Mode::Debug, Mode::DeferAndFuse];

fn rt(mode: Mode) -> Runtime {
    let emu = Emulator::new(builtin("v5e").unwrap()).unwrap();
    let rt = Runtime::new(Arc::new(emu)).unwrap();
    rt.set_mode(mode).unwrap();
    rt
}

/// A value as PyTorch stores it in `d`.
fn round(v: f64, d: DType) -> f64 {
    match d {
        DType::F32 => v as f32 as f64,
        DType::BF16 => bf16::from_f64(v).to_f64(),
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::I32 | DType::I64 => v.trunc(),
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::U8 => v.trunc() as i64 as u8 as f64,
        DType::I8 => v.trunc() as i64 as i8 as f64,
    }
}

/// `torch.testing` tolerances.
fn tol(d: DType) -> (f64, f64) {
    match d {
        DType::F32 => (1.3e-6, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F16 => (1e-3, 1e-5),
        _ => (0.0, 0.0),
    }
}

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

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The multi-index of flat position `i`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

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
