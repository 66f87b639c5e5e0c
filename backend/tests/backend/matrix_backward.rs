//! Matrix products, attention and backward operators against host f64 references, in Strict,
//! Debug and DeferAndFuse: `matmul`, `attention` and `backward_ops`, with the runtimes, references
//! and comparisons they share here.

use crate::host::{MODES, rt};
use half::bf16;
use tpuemu_backend::ops::{self, Value, backward, matrix};
use tpuemu_backend::{DType, MatmulPrecision, Mode, Runtime, Scalar, Tensor};

#[path = "matrix_backward/matmul.rs"]
mod matmul;

#[path = "matrix_backward/attention.rs"]
mod attention;

#[path = "matrix_backward/backward_ops.rs"]
mod backward_ops;

/// Deterministic values in [-1, 1) (xorshift).
fn rand(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// `v` as `dtype` holds it (the values a tensor of that dtype really contains).
fn round(v: &[f64], dtype: DType) -> Vec<f64> {
    v.iter().map(|&x| crate::host::round(x, dtype)).collect()
}

/// A tensor of `dtype` holding `v` rounded to it, and the rounded values.
fn tensor(rt: &Runtime, v: &[f64], shape: &[usize], dtype: DType) -> (Tensor, Vec<f64>) {
    let r = round(v, dtype);
    let t = Tensor::from_f64s(rt, r.iter().copied(), r.len(), shape, dtype).unwrap();
    (t, r)
}

/// `[batch, m, k] @ [batch, k, n]` in f64, row-major; also `sum |a||b|` per element.
fn matmul_ref(
    a: &[f64],
    b: &[f64],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; batch * m * n];
    let mut abs = vec![0.0; batch * m * n];
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut sa) = (0.0, 0.0);
                for kk in 0..k {
                    let p = a[(bi * m + i) * k + kk] * b[(bi * k + kk) * n + j];
                    s += p;
                    sa += p.abs();
                }
                out[(bi * m + i) * n + j] = s;
                abs[(bi * m + i) * n + j] = sa;
            }
        }
    }
    (out, abs)
}

/// Row-major transpose of a `[r, c]` matrix.
fn transpose(v: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; v.len()];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = v[i * c + j];
        }
    }
    out
}

/// `|got - want| <= atol + rtol |want|` everywhere (NaN matches NaN).
#[track_caller]
fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w} (rtol {rtol}, atol {atol})"
        );
    }
}

/// Per-element bound: `|got - want| <= rel * bound[i] + atol`.
#[track_caller]
fn assert_bound(got: &[f64], want: &[f64], bound: &[f64], rel: f64, atol: f64, what: &str) {
    for (i, ((g, w), s)) in got.iter().zip(want).zip(bound).enumerate() {
        assert!(
            (g - w).abs() <= rel * s + atol,
            "{what}: element {i}: got {g}, want {w}, error {} > {} ",
            (g - w).abs(),
            rel * s + atol
        );
    }
}

fn max_err(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max)
}

const U: f64 = 1.0 / 256.0; // bf16 unit roundoff 2^-8
