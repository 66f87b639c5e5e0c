//! Host-side helpers shared by the test modules that call the backend eagerly
//! (`matrix_backward`, `reduce_nn`, `unary_data`, `strides`) and by the op suite's reference:
//! the eager modes and a runtime in each, values as a dtype holds them, `torch.testing`'s
//! tolerances, and row-major index arithmetic (one definition instead of a copy per module).

use std::sync::Arc;

use tpuemu_backend::{DType, Mode, Runtime};
use tpuemu_emulator::{Emulator, builtin};

/// The eager modes.
pub const MODES: [Mode; 3] = [Mode::Strict, Mode::Debug, Mode::DeferAndFuse];

/// A runtime on an emulated v5e in `mode`.
pub fn rt(mode: Mode) -> Runtime {
    let emu = Emulator::new(builtin("v5e").unwrap()).unwrap();
    let rt = Runtime::new(Arc::new(emu)).unwrap();
    rt.set_mode(mode).unwrap();
    rt
}

/// `v` as a tensor of `dtype` holds it: rounded to the float format, or truncated and wrapped
/// to the integer type.
pub fn round(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::I32 => (v.trunc() as i64) as i32 as f64,
        DType::I64 => v.trunc(),
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::U8 => (v.trunc() as i64) as u8 as f64,
        DType::I8 => (v.trunc() as i64) as i8 as f64,
    }
}

/// `torch.testing.assert_close`'s default `(rtol, atol)` for `dtype` (exact for integers and
/// bool).
pub fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (1.3e-6, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F16 => (1e-3, 1e-5),
        _ => (0.0, 0.0),
    }
}

/// The element count of `shape`.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major position of `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (i, s)| acc * s + i)
}

/// The index of row-major position `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// The shape of a reduction's result: the kept dims, with the reduced ones as 1 for `keepdim`.
pub fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| match (dims.contains(&d), keepdim) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}
