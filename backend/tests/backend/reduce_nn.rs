//! Reductions (`sum`, `mean`, `prod`, `amax`/`amin`, `max.dim`, `argmax`, `var`) and the
//! neural-net forward operators (`_softmax`, `_log_softmax`, `native_layer_norm`, `rms_norm`,
//! `nll_loss_forward`) against host f64 references, with `torch.testing`'s tolerances, in
//! Strict, Debug and DeferAndFuse.

#[path = "reduce_nn/sums.rs"]
mod sums;

#[path = "reduce_nn/extremes.rs"]
mod extremes;

#[path = "reduce_nn/edges.rs"]
mod edges;

#[path = "reduce_nn/softmax_norm.rs"]
mod softmax_norm;

#[path = "reduce_nn/loss.rs"]
mod loss;

#[path = "reduce_nn/kernels.rs"]
mod kernels;

use crate::host::{MODES, ravel, reduced_shape, round, rt, tol, unravel};
use tpuemu_backend::ops::nn::Reduction;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Mode, Runtime, Scalar, Tensor, TpuError};

fn data(n: usize, seed: u32) -> Vec<f64> {
    crate::inputs::lcg(n, seed.wrapping_mul(2_654_435_761).wrapping_add(12345))
}

/// A tensor of `dt` from `vals`, and the values it holds.
fn tensor(rt: &Runtime, vals: &[f64], shape: &[usize], dt: DType) -> (Tensor, Vec<f64>) {
    let held: Vec<f64> = vals.iter().map(|v| round(*v, dt)).collect();
    let t = Tensor::from_f64s(rt, held.iter().copied(), held.len(), shape, dt).unwrap();
    (t, held)
}

/// The same logical tensor as [`tensor`], but a non-contiguous view (a permutation of a
/// storage laid out with the dims reversed).
fn transposed(rt: &Runtime, vals: &[f64], shape: &[usize], dt: DType) -> (Tensor, Vec<f64>) {
    let n = shape.len();
    let rev: Vec<usize> = shape.iter().rev().copied().collect();
    let mut storage = vec![0.0; vals.len()];
    for (flat, v) in vals.iter().enumerate() {
        let idx = unravel(flat, shape);
        let ridx: Vec<usize> = idx.iter().rev().copied().collect();
        storage[ravel(&ridx, &rev)] = *v;
    }
    let (s, _) = tensor(rt, &storage, &rev, dt);
    let perm: Vec<i64> = (0..n as i64).rev().collect();
    let t = s.permute(&perm).unwrap();
    assert_eq!(t.shape(), shape);
    if n > 1 {
        assert!(!t.is_contiguous());
    }
    (t, vals.iter().map(|v| round(*v, dt)).collect())
}

/// Checks shape, dtype and values (`equal_nan`; infinities exact).
fn check(got: &Tensor, want: &[f64], shape: &[usize], dt: DType, what: &str) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    assert_eq!(got.dtype(), dt, "{what}: dtype");
    let g = got.to_f64_vec().unwrap();
    assert_eq!(g.len(), want.len(), "{what}: element count");
    let (rtol, atol) = tol(dt);
    for (i, (a, e)) in g.iter().zip(want).enumerate() {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= atol + rtol * e.abs()
        };
        assert!(ok, "{what}: element {i}: got {a}, want {e}");
    }
}

/// The rows of a reduction: for each kept index (row-major), the reduced elements in order.
fn ref_rows(x: &[f64], shape: &[usize], dims: &[usize]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|d| shape[*d]).collect();
    let mut rows = vec![Vec::new(); kshape.iter().product()];
    for (flat, v) in x.iter().enumerate() {
        let idx = unravel(flat, shape);
        let k: Vec<usize> = kept.iter().map(|d| idx[*d]).collect();
        rows[ravel(&k, &kshape)].push(*v);
    }
    rows
}

/// Applies `f` to each row and puts the results back where the row's elements were.
fn ref_full(
    x: &[f64],
    shape: &[usize],
    dims: &[usize],
    f: impl Fn(&[f64]) -> Vec<f64>,
) -> Vec<f64> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|d| shape[*d]).collect();
    let mut pos: Vec<Vec<usize>> = vec![Vec::new(); kshape.iter().product()];
    for flat in 0..x.len() {
        let idx = unravel(flat, shape);
        let k: Vec<usize> = kept.iter().map(|d| idx[*d]).collect();
        pos[ravel(&k, &kshape)].push(flat);
    }
    let mut out = vec![0.0; x.len()];
    for p in pos {
        let row: Vec<f64> = p.iter().map(|i| x[*i]).collect();
        for (i, v) in p.iter().zip(f(&row)) {
            out[*i] = v;
        }
    }
    out
}

fn wrap(dims: &[i64], n: usize) -> Vec<usize> {
    if dims.is_empty() {
        return (0..n).collect();
    }
    let mut d: Vec<usize> = dims
        .iter()
        .map(|d| {
            if *d < 0 {
                (*d + n as i64) as usize
            } else {
                *d as usize
            }
        })
        .collect();
    d.sort();
    d
}

fn sum(r: &[f64]) -> f64 {
    r.iter().sum()
}

fn nan_max(r: &[f64]) -> f64 {
    r.iter().fold(f64::NEG_INFINITY, |m, v| {
        if v.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(*v)
        }
    })
}

fn nan_min(r: &[f64]) -> f64 {
    -nan_max(&r.iter().map(|v| -v).collect::<Vec<_>>())
}

fn first_argmax(r: &[f64]) -> f64 {
    if let Some(i) = r.iter().position(|v| v.is_nan()) {
        return i as f64;
    }
    let m = nan_max(r);
    r.iter().position(|v| *v == m).unwrap() as f64
}

fn variance(r: &[f64], c: f64) -> f64 {
    let n = r.len() as f64;
    let m = sum(r) / n;
    r.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - c).max(0.0)
}

fn softmax_ref(r: &[f64]) -> Vec<f64> {
    let m = nan_max(r);
    let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
    r.iter().map(|v| (v - m).exp() / s).collect()
}

fn log_softmax_ref(r: &[f64]) -> Vec<f64> {
    log_softmax_ref_in(r, DType::F32)
}

/// PyTorch's last-dim log-softmax of a bf16/f16 tensor holds the sum and its log in `dt`.
fn log_softmax_ref_in(r: &[f64], dt: DType) -> Vec<f64> {
    let m = nan_max(r);
    let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
    let lse = if dt == DType::F32 {
        s.ln()
    } else {
        round(round(s, dt).ln(), dt)
    };
    r.iter().map(|v| v - m - lse).collect()
}

fn layer_norm_ref(r: &[f64], eps: f64) -> (Vec<f64>, f64, f64) {
    let n = r.len() as f64;
    let m = sum(r) / n;
    let var = r.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    (r.iter().map(|v| (v - m) * rstd).collect(), m, rstd)
}

/// PyTorch's `nll_loss_forward` on the host: `(output, total_weight)`.
fn nll_ref(
    x: &[f64],
    c: usize,
    t: &[i64],
    w: Option<&[f64]>,
    red: Reduction,
    ignore: i64,
) -> (Vec<f64>, f64) {
    let mut losses = Vec::new();
    let (mut sl, mut sw) = (0.0, 0.0);
    for (i, &ti) in t.iter().enumerate() {
        if ti == ignore {
            losses.push(0.0);
            continue;
        }
        let wt = w.map_or(1.0, |w| w[ti as usize]);
        let l = -x[i * c + ti as usize] * wt;
        losses.push(l);
        sl += l;
        sw += wt;
    }
    match red {
        Reduction::None => (losses, 0.0),
        Reduction::Sum => (vec![sl], sw),
        Reduction::Mean => (vec![sl / sw], sw),
    }
}
