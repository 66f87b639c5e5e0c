//! Matrix products, attention and backward operators against host f64 references, in Strict,
//! Debug and DeferAndFuse.

use std::sync::Arc;

use half::bf16;
use tpuemu_backend::ops::{self, Value, backward, matrix};
use tpuemu_backend::{DType, MatmulPrecision, Mode, Runtime, Scalar, Tensor};
use tpuemu_emulator::{Emulator, builtin};

const MODES: [Mode; 3] = [Mode::Strict, Mode::Debug, Mode::DeferAndFuse];

fn rt(mode: Mode) -> Runtime {
    let emu = Emulator::new(builtin("v5e").unwrap()).unwrap();
    let rt = Runtime::new(Arc::new(emu)).unwrap();
    rt.set_mode(mode).unwrap();
    rt
}

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
    v.iter()
        .map(|&x| match dtype {
            DType::BF16 => bf16::from_f64(x).to_f64(),
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::F32 => x as f32 as f64,
            _ => x,
        })
        .collect()
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

#[test]
fn mm_bf16_matches_a_bf16_reference() {
    for mode in MODES {
        let rt = rt(mode);
        for &(m, k, n) in &[(5, 10, 5), (130, 200, 70), (1, 257, 3)] {
            let (a, av) = tensor(&rt, &rand(m * k, 1), &[m, k], DType::BF16);
            let (b, bv) = tensor(&rt, &rand(k * n, 2), &[k, n], DType::BF16);
            let c = a.mm(&b).unwrap();
            assert_eq!((c.shape(), c.dtype()), (&[m, n][..], DType::BF16));
            let (want, abs) = matmul_ref(&av, &bv, 1, m, k, n);
            // Exact products, f32 accumulation, one rounding to bf16.
            let got = c.to_f64_vec().unwrap();
            let bound: Vec<f64> = want
                .iter()
                .zip(&abs)
                .map(|(w, s)| U * w.abs() + k as f64 * 2f64.powi(-24) * s)
                .collect();
            assert_bound(
                &got,
                &want,
                &bound,
                1.0,
                1e-30,
                &format!("{mode:?} {m}x{k}x{n}"),
            );
        }
    }
}

#[test]
fn f32_precisions_default_high_highest() {
    let (m, k, n) = (33, 300, 20);
    let av = round(&rand(m * k, 3), DType::F32);
    let bv = round(&rand(k * n, 4), DType::F32);
    let (want, abs) = matmul_ref(&av, &bv, 1, m, k, n);
    let acc = k as f64 * 2f64.powi(-24);
    for mode in MODES {
        let rt = rt(mode);
        let (a, _) = tensor(&rt, &av, &[m, k], DType::F32);
        let (b, _) = tensor(&rt, &bv, &[k, n], DType::F32);
        let mut errs = Vec::new();
        for (p, rel) in [
            // One bf16 pass: each input rounded to bf16.
            (MatmulPrecision::Default, 2.0 * U + U * U + acc),
            // Three passes: about 16 bits of each input.
            (MatmulPrecision::High, 2f64.powi(-14) + acc),
            // Six passes: f32 products, f32 accumulation.
            (MatmulPrecision::Highest, 2f64.powi(-22) + acc),
        ] {
            rt.set_precision(p);
            let c = a.mm(&b).unwrap();
            let got = c.to_f64_vec().unwrap();
            assert_bound(&got, &want, &abs, rel, 1e-30, &format!("{mode:?} {p:?}"));
            errs.push(max_err(&got, &want));
        }
        // DEFAULT is bf16-level, HIGHEST is f32-level.
        assert!(errs[0] > 1e-4, "DEFAULT error {}", errs[0]);
        assert!(errs[1] < errs[0] / 50.0, "{errs:?}");
        assert!(errs[2] < 1e-4 && errs[2] <= errs[1], "{errs:?}");
        // HIGHEST passes torch.testing's float32 tolerance against the exact product rounded
        // to f32 where the sum is well conditioned.
        rt.set_precision(MatmulPrecision::Highest);
        let got = a.mm(&b).unwrap().to_f64_vec().unwrap();
        let f32_want = round(&want, DType::F32);
        assert_close(&got, &f32_want, 1.3e-6, 1e-5 + acc * 4.0, "HIGHEST vs f32");
    }
}

#[test]
fn transposed_and_strided_operands() {
    for mode in MODES {
        let rt = rt(mode);
        rt.set_precision(MatmulPrecision::Highest);
        for dtype in [DType::F32, DType::BF16] {
            let (m, k, n) = (20, 37, 150);
            // a = at.t() with at [k, m]; b = every other column of bb [k, 2n].
            let (at, atv) = tensor(&rt, &rand(k * m, 5), &[k, m], dtype);
            let (bb, bbv) = tensor(&rt, &rand(k * 2 * n, 6), &[k, 2 * n], dtype);
            let a = at.t().unwrap();
            let b = ops::layout_ops::slice(&bb, 1, None, None, 2).unwrap();
            assert!(!a.is_contiguous() && !b.is_contiguous());
            let av = transpose(&atv, k, m);
            let bv: Vec<f64> = (0..k)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .map(|(i, j)| bbv[i * 2 * n + 2 * j])
                .collect();
            let (want, abs) = matmul_ref(&av, &bv, 1, m, k, n);
            let got = a.mm(&b).unwrap().to_f64_vec().unwrap();
            let rel = if dtype == DType::BF16 {
                U
            } else {
                2f64.powi(-22)
            };
            let bound: Vec<f64> = want
                .iter()
                .zip(&abs)
                .map(|(w, s)| rel * w.abs() + (k as f64 * 2f64.powi(-24) + 2f64.powi(-22)) * s)
                .collect();
            assert_bound(
                &got,
                &want,
                &bound,
                1.0,
                1e-30,
                &format!("{mode:?} {dtype}"),
            );
            // Both transposed: (b^T a^T)^T.
            let bt = b.t().unwrap();
            let got2 = bt.mm(&a.t().unwrap()).unwrap();
            assert_eq!(got2.shape(), &[n, m]);
            let got2 = transpose(&got2.to_f64_vec().unwrap(), n, m);
            let bound: Vec<f64> = bound.iter().map(|b| b * 2.0).collect();
            assert_bound(&got2, &want, &bound, 1.0, 1e-30, "transposed both");
        }
    }
}

#[test]
fn addmm_and_baddbmm_fold_bias_and_scales() {
    for mode in MODES {
        let rt = rt(mode);
        rt.set_precision(MatmulPrecision::Highest);
        for dtype in [DType::F32, DType::BF16] {
            let (bs, m, k, n) = (3, 9, 17, 130);
            let (x, xv) = tensor(&rt, &rand(bs * m * k, 7), &[bs, m, k], dtype);
            let (w, wv) = tensor(&rt, &rand(bs * k * n, 8), &[bs, k, n], dtype);
            let (bias, biasv) = tensor(&rt, &rand(n, 9), &[n], dtype);
            let (prod, abs) = matmul_ref(&xv, &wv, bs, m, k, n);
            let (beta, alpha) = (0.5, -2.0);
            let got =
                matrix::baddbmm(&bias, &x, &w, Scalar::Float(beta), Scalar::Float(alpha)).unwrap();
            assert_eq!((got.shape(), got.dtype()), (&[bs, m, n][..], dtype));
            let want: Vec<f64> = prod
                .iter()
                .enumerate()
                .map(|(i, p)| alpha * p + beta * biasv[i % n])
                .collect();
            let rel = if dtype == DType::BF16 { U } else { 1e-6 };
            let bound_of = |want: &[f64], scale: f64| -> Vec<f64> {
                want.iter()
                    .zip(&abs)
                    .map(|(w, s)| rel * w.abs() + scale * (k as f64 * 2f64.powi(-24)) * s + 1e-6)
                    .collect()
            };
            let bound = bound_of(&want, 2.0);
            assert_bound(
                &got.to_f64_vec().unwrap(),
                &want,
                &bound,
                1.0,
                0.0,
                "baddbmm",
            );
            // addmm on the first batch, bias as a column [m, 1].
            let x0 = x.select0(0);
            let w0 = w.select0(0);
            let (col, colv) = tensor(&rt, &rand(m, 10), &[m, 1], dtype);
            let got = matrix::addmm(&col, &x0, &w0, Scalar::Int(1), Scalar::Int(1)).unwrap();
            let want: Vec<f64> = (0..m * n).map(|i| prod[i] + colv[i / n]).collect();
            let bound = bound_of(&want, 1.0);
            assert_bound(&got.to_f64_vec().unwrap(), &want, &bound, 1.0, 0.0, "addmm");
        }
    }
}

trait Select0 {
    fn select0(&self, i: i64) -> Tensor;
}

impl Select0 for Tensor {
    fn select0(&self, i: i64) -> Tensor {
        ops::layout_ops::select(self, 0, i).unwrap()
    }
}

#[test]
fn beta_zero_ignores_nan_self_and_empty_k_gives_bias() {
    for mode in MODES {
        let rt = rt(mode);
        let nan = Tensor::from_slice(&rt, &[f32::NAN; 4], &[4]).unwrap();
        let (a, av) = tensor(&rt, &rand(6, 11), &[2, 3], DType::F32);
        let (b, bv) = tensor(&rt, &rand(12, 12), &[3, 4], DType::F32);
        let got = matrix::addmm(&nan, &a, &b, Scalar::Int(0), Scalar::Float(2.0)).unwrap();
        let (prod, abs) = matmul_ref(&av, &bv, 1, 2, 3, 4);
        let want: Vec<f64> = prod.iter().map(|p| 2.0 * p).collect();
        assert_bound(
            &got.to_f64_vec().unwrap(),
            &want,
            &abs,
            4.0 * U,
            1e-7,
            "beta=0",
        );
        // K = 0: zeros, plus beta * bias for addmm/baddbmm.
        let e1 = Tensor::from_slice(&rt, &[0f32; 0], &[5, 0]).unwrap();
        let e2 = Tensor::from_slice(&rt, &[0f32; 0], &[0, 10]).unwrap();
        let z = e1.mm(&e2).unwrap();
        assert_eq!(z.shape(), &[5, 10]);
        assert_eq!(z.to_f64_vec().unwrap(), vec![0.0; 50]);
        let (bias, biasv) = tensor(&rt, &rand(10, 13), &[10], DType::BF16);
        let e1b = e1.to_dtype(DType::BF16).unwrap();
        let e2b = e2.to_dtype(DType::BF16).unwrap();
        let got = matrix::addmm(&bias, &e1b, &e2b, Scalar::Float(0.2), Scalar::Float(0.6)).unwrap();
        let want: Vec<f64> = (0..50)
            .map(|i| bf16::from_f64((0.2f32 * biasv[i % 10] as f32) as f64).to_f64())
            .collect();
        assert_eq!(got.to_f64_vec().unwrap(), want);
        let z3 = Tensor::from_slice(&rt, &[0f32; 0], &[2, 3, 0]).unwrap();
        let w3 = Tensor::from_slice(&rt, &[0f32; 0], &[2, 0, 4]).unwrap();
        assert_eq!(z3.bmm(&w3).unwrap().to_f64_vec().unwrap(), vec![0.0; 24]);
        // Empty outputs.
        let r = Tensor::from_slice(&rt, &[0f32; 0], &[0, 5]).unwrap();
        let (c, _) = tensor(&rt, &rand(50, 14), &[5, 10], DType::F32);
        assert_eq!(r.mm(&c).unwrap().shape(), &[0, 10]);
    }
}

#[test]
fn addmm_is_one_kernel_in_strict_mode() {
    let rt = rt(Mode::Strict);
    let (x, _) = tensor(&rt, &rand(64 * 32, 15), &[64, 32], DType::BF16);
    let (w, _) = tensor(&rt, &rand(32 * 48, 16), &[48, 32], DType::BF16);
    let (b, _) = tensor(&rt, &rand(48, 17), &[48], DType::BF16);
    rt.sync().unwrap();
    rt.reset_metrics();
    // A linear layer: x @ w.t() + b.
    let y = matrix::addmm(&b, &x, &w.t().unwrap(), Scalar::Int(1), Scalar::Int(1)).unwrap();
    let m = rt.metrics();
    assert_eq!(m.kernels_launched, 1, "{}", m.report());
    assert_eq!(y.shape(), &[64, 48]);
    // DeferAndFuse: the bias and a following activation fuse into the same kernel.
    let rt = self::rt(Mode::DeferAndFuse);
    let (x, _) = tensor(&rt, &rand(64 * 32, 15), &[64, 32], DType::F32);
    let (w, _) = tensor(&rt, &rand(32 * 48, 16), &[32, 48], DType::F32);
    let (b, _) = tensor(&rt, &rand(48, 17), &[48], DType::F32);
    rt.sync().unwrap();
    rt.reset_metrics();
    let y = matrix::addmm(&b, &x, &w, Scalar::Int(1), Scalar::Int(1))
        .unwrap()
        .mul_scalar(2.0)
        .unwrap();
    y.to_f64_vec().unwrap();
    let m = rt.metrics();
    assert_eq!(m.kernels_launched, 1, "{}", m.report());
}

#[test]
fn matmul_broadcasting_rules() {
    for mode in MODES {
        let rt = rt(mode);
        rt.set_precision(MatmulPrecision::Highest);
        let d = DType::F32;
        let check = |ashape: &[usize], bshape: &[usize], want_shape: &[usize], seed: u64| {
            let na: usize = ashape.iter().product();
            let nb: usize = bshape.iter().product();
            let (a, av) = tensor(&rt, &rand(na, seed), ashape, d);
            let (b, bv) = tensor(&rt, &rand(nb, seed + 1), bshape, d);
            let c = a.matmul(&b).unwrap();
            assert_eq!(c.shape(), want_shape, "{ashape:?} @ {bshape:?}");
            // Reference: promote to batched matrices, broadcast, multiply.
            let a2: Vec<usize> = if ashape.len() == 1 {
                vec![1, ashape[0]]
            } else {
                ashape.to_vec()
            };
            let b2: Vec<usize> = if bshape.len() == 1 {
                vec![bshape[0], 1]
            } else {
                bshape.to_vec()
            };
            let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
            let n = b2[b2.len() - 1];
            let ab = &a2[..a2.len() - 2];
            let bb = &b2[..b2.len() - 2];
            let nbat = ab.len().max(bb.len());
            let pad = |s: &[usize]| {
                let mut v = vec![1; nbat - s.len()];
                v.extend_from_slice(s);
                v
            };
            let (pa, pb) = (pad(ab), pad(bb));
            let batch: Vec<usize> = pa.iter().zip(&pb).map(|(x, y)| *x.max(y)).collect();
            let total: usize = batch.iter().product();
            let mut want = Vec::new();
            for bi in 0..total {
                let (mut ia, mut ib, mut rem, mut sa, mut sb) = (0, 0, bi, 1, 1);
                for dd in (0..nbat).rev() {
                    let idx = rem % batch[dd];
                    rem /= batch[dd];
                    ia += if pa[dd] == 1 { 0 } else { idx * sa };
                    ib += if pb[dd] == 1 { 0 } else { idx * sb };
                    sa *= pa[dd];
                    sb *= pb[dd];
                }
                let am = &av[ia * m * k..(ia + 1) * m * k];
                let bm = &bv[ib * k * n..(ib + 1) * k * n];
                want.extend(matmul_ref(am, bm, 1, m, k, n).0);
            }
            assert_close(
                &c.to_f64_vec().unwrap(),
                &want,
                1e-5,
                1e-5,
                &format!("{ashape:?} @ {bshape:?}"),
            );
        };
        check(&[7], &[7], &[], 20);
        check(&[5, 7], &[7], &[5], 21);
        check(&[7], &[7, 3], &[3], 22);
        check(&[5, 7], &[7, 3], &[5, 3], 23);
        check(&[2, 5, 7], &[7, 3], &[2, 5, 3], 24);
        check(&[2, 5, 7], &[7], &[2, 5], 25);
        check(&[7], &[2, 7, 3], &[2, 3], 26);
        check(&[5, 7], &[2, 7, 3], &[2, 5, 3], 27);
        check(&[2, 1, 5, 7], &[3, 7, 4], &[2, 3, 5, 4], 28);
        // A batched operand that does not fold (transposed batch): broadcast bmm.
        let (a, av) = tensor(&rt, &rand(5 * 2 * 7, 29), &[5, 2, 7], d);
        let at = a.transpose(0, 1).unwrap(); // [2, 5, 7], not foldable
        let (b, bv) = tensor(&rt, &rand(7 * 3, 30), &[7, 3], d);
        let c = at.matmul(&b).unwrap();
        assert_eq!(c.shape(), &[2, 5, 3]);
        let mut want = Vec::new();
        for bi in 0..2 {
            let am: Vec<f64> = (0..5)
                .flat_map(|i| (0..7).map(move |j| (i, j)))
                .map(|(i, j)| av[(i * 2 + bi) * 7 + j])
                .collect();
            want.extend(matmul_ref(&am, &bv, 1, 5, 7, 3).0);
        }
        assert_close(&c.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "unfoldable");
        let e = a
            .matmul(&Tensor::scalar(&rt, Scalar::Float(1.0), d).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("at least 1D"), "{e}");
    }
}

#[test]
fn dot_mv_and_f16() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let (a, av) = tensor(&rt, &rand(20, 31), &[20], dtype);
            let (b, bv) = tensor(&rt, &rand(20, 32), &[20], dtype);
            let (m, mvv) = tensor(&rt, &rand(5 * 20, 33), &[5, 20], dtype);
            let d = a.dot(&b).unwrap();
            assert_eq!((d.shape(), d.dtype()), (&[][..], dtype));
            let (want, abs) = matmul_ref(&av, &bv, 1, 1, 20, 1);
            // f32 at DEFAULT rounds inputs to bf16; f16 converts to f32 first.
            let tol = 2.0 * U + 20.0 * 2f64.powi(-24);
            let out_u = match dtype {
                DType::BF16 => U,
                DType::F16 => 2f64.powi(-11),
                _ => 2f64.powi(-24),
            };
            let bound = |w: &[f64], s: &[f64]| -> Vec<f64> {
                w.iter()
                    .zip(s)
                    .map(|(w, s)| tol * s + out_u * w.abs())
                    .collect()
            };
            assert_bound(
                &d.to_f64_vec().unwrap(),
                &want,
                &bound(&want, &abs),
                1.0,
                1e-6,
                "dot",
            );
            let r = m.mv(&b).unwrap();
            assert_eq!((r.shape(), r.dtype()), (&[5][..], dtype));
            let (want, abs) = matmul_ref(&mvv, &bv, 1, 5, 20, 1);
            assert_bound(
                &r.to_f64_vec().unwrap(),
                &want,
                &bound(&want, &abs),
                1.0,
                1e-6,
                "mv",
            );
            let r = m.mm(&m.t().unwrap()).unwrap();
            assert_eq!(r.dtype(), dtype);
            let (want, abs) = matmul_ref(&mvv, &transpose(&mvv, 5, 20), 1, 5, 20, 5);
            assert_bound(
                &r.to_f64_vec().unwrap(),
                &want,
                &bound(&want, &abs),
                1.0,
                1e-6,
                "mm",
            );
        }
    }
}

#[test]
fn errors_read_like_pytorch() {
    let rt = rt(Mode::Strict);
    let (a, _) = tensor(&rt, &rand(6, 40), &[2, 3], DType::F32);
    let (b, _) = tensor(&rt, &rand(20, 41), &[4, 5], DType::F32);
    let e = a.mm(&b).unwrap_err().to_string();
    assert!(
        e.contains("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
        "{e}"
    );
    let bb = a.t().unwrap().to_dtype(DType::BF16).unwrap();
    let e = a.mm(&bb).unwrap_err().to_string();
    assert!(
        e.contains("expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16"),
        "{e}"
    );
    let e = matrix::addmm(&a, &a, &bb, Scalar::Int(1), Scalar::Int(1)).unwrap_err();
    assert!(
        e.to_string()
            .contains("self and mat2 must have the same dtype, but got Float and BFloat16"),
        "{e}"
    );
    let ai = a.to_dtype(DType::I64).unwrap();
    let e = ai.mm(&ai.t().unwrap()).unwrap_err();
    assert!(matches!(e, tpuemu_backend::TpuError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("not supported on TPU"), "{e}");
    let e = a.bmm(&a).unwrap_err().to_string();
    assert!(e.contains("batch1 must be a 3D tensor"), "{e}");
    let (x, _) = tensor(&rt, &rand(24, 42), &[2, 3, 4], DType::F32);
    let e = x.bmm(&x).unwrap_err().to_string();
    assert!(
        e.contains(
            "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [2, 3]."
        ),
        "{e}"
    );
    let (v, _) = tensor(&rt, &rand(4, 43), &[4], DType::F32);
    let e = a.mv(&v).unwrap_err().to_string();
    assert!(
        e.contains("size mismatch, got input (2), mat (2x3), vec (4)"),
        "{e}"
    );
    let (v3, _) = tensor(&rt, &rand(3, 44), &[3], DType::F32);
    let e = v.dot(&v3).unwrap_err().to_string();
    assert!(e.contains("inconsistent tensor size"), "{e}");
    let (bias, _) = tensor(&rt, &rand(4, 45), &[4], DType::F32);
    let e = matrix::addmm(&bias, &a, &a.t().unwrap(), Scalar::Int(1), Scalar::Int(1)).unwrap_err();
    assert!(e.to_string().contains("expanded size"), "{e}");
    // Nothing was launched for the failed calls; the runtime still works.
    assert_eq!(a.mm(&a.t().unwrap()).unwrap().shape(), &[2, 2]);
}

// ---------------------------------------------------------------------------------------
// Attention.

/// Reference attention over `[batch, L, E]` x `[batch, S, E]` x `[batch, S, Ev]`.
#[allow(clippy::too_many_arguments)]
fn sdpa_ref(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    batch: usize,
    (l, s, e, ev): (usize, usize, usize, usize),
    mask: Option<&dyn Fn(usize, usize) -> Option<f64>>,
    causal: bool,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; batch * l * ev];
    let mut lse = vec![0.0; batch * l];
    for b in 0..batch {
        for i in 0..l {
            let mut sc: Vec<f64> = (0..s)
                .map(|j| {
                    let d: f64 = (0..e)
                        .map(|x| q[(b * l + i) * e + x] * k[(b * s + j) * e + x])
                        .sum();
                    let mut x = d * scale;
                    if let Some(m) = mask {
                        match m(i, j) {
                            None => x = f64::NEG_INFINITY,
                            Some(add) => x += add,
                        }
                    }
                    if causal && j > i {
                        x = f64::NEG_INFINITY;
                    }
                    x
                })
                .collect();
            let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let shift = if mx == f64::NEG_INFINITY { 0.0 } else { mx };
            for x in sc.iter_mut() {
                *x = (*x - shift).exp();
            }
            let sum: f64 = sc.iter().sum();
            lse[b * l + i] = shift + sum.ln();
            for c in 0..ev {
                out[(b * l + i) * ev + c] = if sum == 0.0 {
                    0.0
                } else {
                    (0..s).map(|j| sc[j] / sum * v[(b * s + j) * ev + c]).sum()
                };
            }
        }
    }
    (out, lse)
}

#[test]
fn sdpa_plain_causal_and_masked() {
    let (b, h, l, s, e) = (2, 2, 7, 9, 16);
    for mode in MODES {
        let rt = rt(mode);
        rt.set_precision(MatmulPrecision::Highest);
        for dtype in [DType::F32, DType::BF16] {
            let (q, qv) = tensor(&rt, &rand(b * h * l * e, 50), &[b, h, l, e], dtype);
            let (k, kv) = tensor(&rt, &rand(b * h * s * e, 51), &[b, h, s, e], dtype);
            let (v, vv) = tensor(&rt, &rand(b * h * s * e, 52), &[b, h, s, e], dtype);
            let (rtol, atol) = if dtype == DType::BF16 {
                (3.0 * U, 3.0 * U)
            } else {
                (1e-5, 1e-5)
            };
            let scale = 1.0 / (e as f64).sqrt();
            let dims = (l, s, e, e);
            // Plain.
            let o = matrix::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None, false)
                .unwrap();
            assert_eq!((o.shape(), o.dtype()), (&[b, h, l, e][..], dtype));
            let (want, _) = sdpa_ref(&qv, &kv, &vv, b * h, dims, None, false, scale);
            assert_close(
                &o.to_f64_vec().unwrap(),
                &want,
                rtol,
                atol,
                &format!("{mode:?} {dtype} plain"),
            );
            // Causal (top-left aligned: key j <= query i).
            let o = matrix::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, false)
                .unwrap();
            let (want, _) = sdpa_ref(&qv, &kv, &vv, b * h, dims, None, true, scale);
            assert_close(&o.to_f64_vec().unwrap(), &want, rtol, atol, "causal");
            // Bool mask [L, S] with a fully masked row (gives zeros), explicit scale.
            let keep: Vec<bool> = (0..l * s).map(|i| i / s != 3 && (i * 7) % 5 != 0).collect();
            let mask = Tensor::from_slice(&rt, &keep, &[l, s]).unwrap();
            let o = matrix::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(&mask),
                0.0,
                false,
                Some(0.5),
                false,
            )
            .unwrap();
            let f = |i: usize, j: usize| if keep[i * s + j] { Some(0.0) } else { None };
            let (want, _) = sdpa_ref(&qv, &kv, &vv, b * h, dims, Some(&f), false, 0.5);
            assert_close(&o.to_f64_vec().unwrap(), &want, rtol, atol, "bool mask");
            // Float mask broadcast over heads [B, 1, L, S].
            let mv = round(&rand(b * l * s, 53), dtype);
            let (fm, _) = tensor(&rt, &mv, &[b, 1, l, s], dtype);
            let o = matrix::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(&fm),
                0.0,
                false,
                None,
                false,
            )
            .unwrap();
            let mut want = Vec::new();
            for bh in 0..b * h {
                let bi = bh / h;
                let f = |i: usize, j: usize| Some(mv[(bi * l + i) * s + j]);
                let sl = |x: &[f64], n: usize| x[bh * n * e..(bh + 1) * n * e].to_vec();
                want.extend(
                    sdpa_ref(
                        &sl(&qv, l),
                        &sl(&kv, s),
                        &sl(&vv, s),
                        1,
                        dims,
                        Some(&f),
                        false,
                        scale,
                    )
                    .0,
                );
            }
            assert_close(&o.to_f64_vec().unwrap(), &want, rtol, atol, "float mask");
        }
    }
}

#[test]
fn sdpa_gqa_flash_logsumexp_and_errors() {
    let rt = rt(Mode::Strict);
    rt.set_precision(MatmulPrecision::Highest);
    let (hq, hk, l, s, e) = (4, 2, 3, 6, 8);
    let (q, qv) = tensor(&rt, &rand(hq * l * e, 60), &[1, hq, l, e], DType::F32);
    let (k, kv) = tensor(&rt, &rand(hk * s * e, 61), &[1, hk, s, e], DType::F32);
    let (v, vv) = tensor(&rt, &rand(hk * s * e, 62), &[1, hk, s, e], DType::F32);
    let o = matrix::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, true).unwrap();
    assert_eq!(o.shape(), &[1, hq, l, e]);
    let mut want = Vec::new();
    for h in 0..hq {
        let kh = h / (hq / hk);
        let sl = |x: &[f64], i: usize, n: usize| x[i * n * e..(i + 1) * n * e].to_vec();
        want.extend(
            sdpa_ref(
                &sl(&qv, h, l),
                &sl(&kv, kh, s),
                &sl(&vv, kh, s),
                1,
                (l, s, e, e),
                None,
                true,
                1.0 / (e as f64).sqrt(),
            )
            .0,
        );
    }
    assert_close(&o.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "gqa");
    // The flash-attention overload also returns the rows' logsumexp.
    let (k2, kv2) = tensor(&rt, &rand(hq * s * e, 63), &[1, hq, s, e], DType::F32);
    let (v2, vv2) = tensor(&rt, &rand(hq * s * e, 64), &[1, hq, s, e], DType::F32);
    let (o, lse) =
        matrix::flash_attention_for_cpu(&q, &k2, &v2, 0.0, false, None, Some(0.3)).unwrap();
    let (want, wlse) = sdpa_ref(&qv, &kv2, &vv2, hq, (l, s, e, e), None, false, 0.3);
    assert_eq!((lse.shape(), lse.dtype()), (&[1, hq, l][..], DType::F32));
    assert_close(&o.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "flash out");
    assert_close(&lse.to_f64_vec().unwrap(), &wlse, 1e-5, 1e-5, "flash lse");
    // Errors.
    let e1 = matrix::scaled_dot_product_attention(&q, &k2, &v2, None, 0.1, false, None, false)
        .unwrap_err();
    assert!(e1.to_string().contains("dropout"), "{e1}");
    let m = Tensor::from_slice(&rt, &[true; 18], &[3, 6]).unwrap();
    let e2 = matrix::scaled_dot_product_attention(&q, &k2, &v2, Some(&m), 0.0, true, None, false)
        .unwrap_err();
    assert!(
        e2.to_string()
            .contains("Explicit attn_mask should not be set when is_causal=True"),
        "{e2}"
    );
    let kb = k2.to_dtype(DType::BF16).unwrap();
    let e3 = matrix::scaled_dot_product_attention(&q, &kb, &v2, None, 0.0, false, None, false)
        .unwrap_err();
    assert!(e3.to_string().contains("same dtype"), "{e3}");
    // Through the registry, as PyTorch passes the composite's arguments.
    let out = ops::call(
        &rt,
        "aten::scaled_dot_product_attention",
        vec![
            Value::Tensor(q.clone()),
            Value::Tensor(k2.clone()),
            Value::Tensor(v2.clone()),
            Value::None,
            Value::Float(0.0),
            Value::Bool(false),
            Value::Float(0.3),
            Value::Bool(false),
        ],
    )
    .unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    assert_close(&t.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "registry sdpa");
}

// ---------------------------------------------------------------------------------------
// Backward operators.

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// Runs `f` on f32 and bf16 inputs in every mode and compares with `want(g, x)` computed on the
/// values the tensors hold.
fn check_binary_backward(
    name: &str,
    x_of: impl Fn(f64) -> f64,
    f: impl Fn(&Tensor, &Tensor) -> tpuemu_backend::Result<Tensor>,
    want: impl Fn(f64, f64) -> f64,
) {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let shape = [13, 150];
            let n = 13 * 150;
            let xs: Vec<f64> = rand(n, 70).iter().map(|v| x_of(v * 4.0)).collect();
            let (g, gv) = tensor(&rt, &rand(n, 71), &shape, dtype);
            let (x, xv) = tensor(&rt, &xs, &shape, dtype);
            // Transposed operands too.
            for (gt, xt, transposed) in [
                (g.clone(), x.clone(), false),
                (g.t().unwrap(), x.t().unwrap(), true),
            ] {
                let r = f(&gt, &xt).unwrap();
                assert_eq!(r.dtype(), dtype);
                let mut w: Vec<f64> = gv.iter().zip(&xv).map(|(g, x)| want(*g, *x)).collect();
                if transposed {
                    w = transpose(&w, 13, 150);
                }
                let (rtol, atol) = if dtype == DType::BF16 {
                    (1.6e-2, 1e-5)
                } else {
                    (1e-5, 1e-6)
                };
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &w,
                    rtol,
                    atol,
                    &format!("{name} {mode:?} {dtype}"),
                );
            }
        }
    }
}

#[test]
fn activation_backwards_match_their_formulas() {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    check_binary_backward(
        "threshold",
        |x| if x.abs() < 0.3 { 0.0 } else { x },
        |g, x| backward::threshold_backward(g, x, Scalar::Int(0)),
        |g, x| if x <= 0.0 { 0.0 } else { g },
    );
    check_binary_backward(
        "gelu",
        |x| x,
        |g, x| backward::gelu_backward(g, x, "none"),
        |g, x| {
            let cdf = 0.5 * (1.0 + erf(x / 2f64.sqrt()));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            g * (cdf + x * pdf)
        },
    );
    check_binary_backward(
        "gelu tanh",
        |x| x,
        |g, x| backward::gelu_backward(g, x, "tanh"),
        |g, x| {
            let b = (2.0 / std::f64::consts::PI).sqrt();
            let inner = b * (x + 0.044715 * x * x * x);
            let t = inner.tanh();
            g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * b * (1.0 + 3.0 * 0.044715 * x * x))
        },
    );
    check_binary_backward(
        "silu",
        |x| x,
        backward::silu_backward,
        move |g, x| g * sig(x) * (1.0 + x * (1.0 - sig(x))),
    );
    check_binary_backward("sigmoid", sig, backward::sigmoid_backward, |g, y| {
        g * (1.0 - y) * y
    });
    check_binary_backward(
        "tanh",
        |x| x.tanh(),
        backward::tanh_backward,
        |g, y| g * (1.0 - y * y),
    );
}

#[test]
fn threshold_backward_details() {
    let rt = rt(Mode::Strict);
    // NaN input passes the gradient; promotion of bf16 grad with f32 input gives f32.
    let g = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0, 4.0], &[4])
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let x = Tensor::from_slice(&rt, &[f32::NAN, -1.0, 0.5, 0.25], &[4]).unwrap();
    let r = backward::threshold_backward(&g, &x, Scalar::Float(0.5)).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(r.to_f64_vec().unwrap(), vec![1.0, 0.0, 0.0, 0.0]);
    // Integers work as in PyTorch (relu on int tensors).
    let gi = Tensor::from_slice(&rt, &[5i64, 6, 7], &[3]).unwrap();
    let xi = Tensor::from_slice(&rt, &[-1i64, 0, 2], &[3]).unwrap();
    let r = backward::threshold_backward(&gi, &xi, Scalar::Int(0)).unwrap();
    assert_eq!(r.dtype(), DType::I64);
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![0, 0, 7]);
    let e = backward::gelu_backward(&g, &x, "fast").unwrap_err();
    assert!(e.to_string().contains("approximate"), "{e}");
}

/// Softmax along `dim` of a row-major `shape`, in f64 (and its log).
fn softmax_ref(x: &[f64], shape: &[usize], dim: usize) -> Vec<f64> {
    let inner: usize = shape[dim + 1..].iter().product();
    let len = shape[dim];
    let outer: usize = shape[..dim].iter().product();
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let idx = |j: usize| (o * len + j) * inner + i;
            let m = (0..len)
                .map(|j| x[idx(j)])
                .fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..len).map(|j| (x[idx(j)] - m).exp()).sum();
            for j in 0..len {
                y[idx(j)] = (x[idx(j)] - m).exp() / s;
            }
        }
    }
    y
}

/// `f(g, y)` for each position, with the sums along `dim` of `g * y` and of `g`.
fn along(
    shape: &[usize],
    dim: usize,
    g: &[f64],
    y: &[f64],
    f: impl Fn(f64, f64, f64, f64) -> f64,
) -> Vec<f64> {
    let inner: usize = shape[dim + 1..].iter().product();
    let len = shape[dim];
    let outer: usize = shape[..dim].iter().product();
    let mut out = vec![0.0; g.len()];
    for o in 0..outer {
        for i in 0..inner {
            let idx = |j: usize| (o * len + j) * inner + i;
            let sgy: f64 = (0..len).map(|j| g[idx(j)] * y[idx(j)]).sum();
            let sg: f64 = (0..len).map(|j| g[idx(j)]).sum();
            for j in 0..len {
                out[idx(j)] = f(g[idx(j)], y[idx(j)], sgy, sg);
            }
        }
    }
    out
}

#[test]
fn softmax_backwards_match_their_formulas() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            for (shape, dim) in [
                (vec![5usize, 10, 5], 2usize),
                (vec![6, 300], 0),
                (vec![5], 0),
            ] {
                let n: usize = shape.iter().product();
                let y = round(&softmax_ref(&rand(n, 80), &shape, dim), dtype);
                let (yt, yv) = tensor(&rt, &y, &shape, dtype);
                let (gt, gv) = tensor(&rt, &rand(n, 81), &shape, dtype);
                let (rtol, atol) = if dtype == DType::BF16 {
                    (1.6e-2, 1e-4)
                } else {
                    (1e-5, 1e-6)
                };
                let r = backward::softmax_backward_data(&gt, &yt, dim as i64, dtype).unwrap();
                assert_eq!((r.shape(), r.dtype()), (&shape[..], dtype));
                let want = along(&shape, dim, &gv, &yv, |g, y, sgy, _| y * (g - sgy));
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    rtol,
                    atol,
                    &format!("softmax {mode:?} {dtype} {shape:?}"),
                );
                // log_softmax: output holds log-probabilities.
                let ly = round(&y.iter().map(|p| p.ln()).collect::<Vec<_>>(), dtype);
                let (lyt, lyv) = tensor(&rt, &ly, &shape, dtype);
                let r = backward::log_softmax_backward_data(
                    &gt,
                    &lyt,
                    dim as i64 - shape.len() as i64,
                    dtype,
                )
                .unwrap();
                let want = along(&shape, dim, &gv, &lyv, |g, y, _, sg| g - y.exp() * sg);
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    rtol,
                    atol * 10.0,
                    "log_softmax",
                );
            }
        }
    }
}

#[test]
fn layer_norm_backward_matches_the_formula() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let (m1, m2, nn) = (3, 4, 24);
            let shape = [m1, m2, nn];
            let rows = m1 * m2;
            let xs: Vec<f64> = rand(rows * nn, 90).iter().map(|v| v * 3.0 + 0.5).collect();
            let (x, xv) = tensor(&rt, &xs, &shape, dtype);
            let (dy, dyv) = tensor(&rt, &rand(rows * nn, 91), &shape, dtype);
            let (w, wv) = tensor(&rt, &rand(nn, 92), &[nn], dtype);
            let (b, _) = tensor(&rt, &rand(nn, 93), &[nn], dtype);
            // mean and rstd as the forward computes them, [m1, m2, 1] in f32.
            let mut mean = vec![0.0; rows];
            let mut rstd = vec![0.0; rows];
            for r in 0..rows {
                let row = &xv[r * nn..(r + 1) * nn];
                let mu = row.iter().sum::<f64>() / nn as f64;
                let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / nn as f64;
                mean[r] = mu as f32 as f64;
                rstd[r] = (1.0 / (var + 1e-5).sqrt()) as f32 as f64;
            }
            let (mt, _) = tensor(&rt, &mean, &[m1, m2, 1], DType::F32);
            let (rs, _) = tensor(&rt, &rstd, &[m1, m2, 1], DType::F32);
            let (dx, dw, db) = backward::native_layer_norm_backward(
                &dy,
                &x,
                &[nn as i64],
                &mt,
                &rs,
                Some(&w),
                Some(&b),
                [true, true, true],
            )
            .unwrap();
            let (dx, dw, db) = (dx.unwrap(), dw.unwrap(), db.unwrap());
            assert_eq!(
                (dx.shape(), dw.shape(), db.shape()),
                (&shape[..], &[nn][..], &[nn][..])
            );
            assert_eq!((dx.dtype(), dw.dtype()), (dtype, dtype));
            let mut want_dx = vec![0.0; rows * nn];
            let (mut want_dw, mut want_db) = (vec![0.0; nn], vec![0.0; nn]);
            for r in 0..rows {
                let (mu, a) = (mean[r], rstd[r]);
                let xh: Vec<f64> = (0..nn).map(|j| (xv[r * nn + j] - mu) * a).collect();
                let g: Vec<f64> = (0..nn).map(|j| dyv[r * nn + j] * wv[j]).collect();
                let mg = g.iter().sum::<f64>() / nn as f64;
                let mgx = g.iter().zip(&xh).map(|(g, x)| g * x).sum::<f64>() / nn as f64;
                for j in 0..nn {
                    want_dx[r * nn + j] = a * (g[j] - mg - xh[j] * mgx);
                    want_dw[j] += dyv[r * nn + j] * xh[j];
                    want_db[j] += dyv[r * nn + j];
                }
            }
            let (rtol, atol) = if dtype == DType::BF16 {
                (1.6e-2, 2e-2)
            } else {
                (1e-4, 1e-5)
            };
            let what = format!("{mode:?} {dtype}");
            assert_close(
                &dx.to_f64_vec().unwrap(),
                &want_dx,
                rtol,
                atol,
                &format!("dx {what}"),
            );
            assert_close(
                &dw.to_f64_vec().unwrap(),
                &want_dw,
                rtol,
                atol,
                &format!("dw {what}"),
            );
            assert_close(
                &db.to_f64_vec().unwrap(),
                &want_db,
                rtol,
                atol,
                &format!("db {what}"),
            );
            // Only some outputs, no weight; through the registry with PyTorch's arguments.
            let out = ops::call(
                &rt,
                "aten::native_layer_norm_backward",
                vec![
                    Value::Tensor(dy.clone()),
                    Value::Tensor(x.clone()),
                    Value::Ints(vec![nn as i64]),
                    Value::Tensor(mt.clone()),
                    Value::Tensor(rs.clone()),
                    Value::None,
                    Value::None,
                    Value::Bools(vec![true, false, false]),
                ],
            )
            .unwrap();
            assert!(matches!(out[1], Value::None) && matches!(out[2], Value::None));
            let Value::Tensor(dx2) = &out[0] else {
                panic!()
            };
            let mut want = vec![0.0; rows * nn];
            for r in 0..rows {
                let a = rstd[r];
                let xh: Vec<f64> = (0..nn).map(|j| (xv[r * nn + j] - mean[r]) * a).collect();
                let g = &dyv[r * nn..(r + 1) * nn];
                let mg = g.iter().sum::<f64>() / nn as f64;
                let mgx = g.iter().zip(&xh).map(|(g, x)| g * x).sum::<f64>() / nn as f64;
                for j in 0..nn {
                    want[r * nn + j] = a * (g[j] - mg - xh[j] * mgx);
                }
            }
            assert_close(
                &dx2.to_f64_vec().unwrap(),
                &want,
                rtol,
                atol,
                "dx without weight",
            );
        }
    }
}

#[test]
fn nll_loss_backward_matches_the_formula() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let (n, c) = (6, 5);
            let (x, _) = tensor(&rt, &rand(n * c, 100), &[n, c], dtype);
            let targets = [1i64, 0, 4, -100, 2, 4];
            let t = Tensor::from_slice(&rt, &targets, &[n]).unwrap();
            let (w, wv) = tensor(&rt, &[0.5, 2.0, 1.0, 0.25, 3.0], &[c], dtype);
            let tw_value: f64 = targets
                .iter()
                .filter(|t| **t >= 0)
                .map(|t| wv[*t as usize])
                .sum();
            let (tw, twv) = tensor(&rt, &[tw_value], &[], dtype);
            let (g, gv) = tensor(&rt, &[0.7], &[], dtype);
            for (reduction, weighted) in [(1, true), (1, false), (2, true), (0, true), (0, false)] {
                let (go, gov) = if reduction == 0 {
                    tensor(&rt, &rand(n, 101), &[n], dtype)
                } else {
                    (g.clone(), vec![gv[0]; n])
                };
                let r = backward::nll_loss_backward(
                    &go,
                    &x,
                    &t,
                    if weighted { Some(&w) } else { None },
                    reduction,
                    -100,
                    &tw,
                )
                .unwrap();
                assert_eq!((r.shape(), r.dtype()), (&[n, c][..], dtype));
                let mut want = vec![0.0; n * c];
                for (i, &ti) in targets.iter().enumerate() {
                    if ti == -100 {
                        continue;
                    }
                    let wt = if weighted { wv[ti as usize] } else { 1.0 };
                    let gi = if reduction == 1 {
                        round(&[gov[i] / twv[0]], dtype)[0]
                    } else {
                        gov[i]
                    };
                    want[i * c + ti as usize] = -wt * gi;
                }
                let want = round(&want, dtype);
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    1e-6,
                    1e-7,
                    &format!("nll {mode:?} {dtype} {reduction} {weighted}"),
                );
            }
            // A single sample (no batch dim).
            let x1 = ops::layout_ops::select(&x, 0, 0).unwrap();
            let t1 = Tensor::from_slice(&rt, &[3i64], &[]).unwrap();
            let r = backward::nll_loss_backward(&g, &x1, &t1, None, 2, -100, &tw).unwrap();
            let mut want = vec![0.0; c];
            want[3] = -gv[0];
            assert_eq!(r.to_f64_vec().unwrap(), want);
        }
    }
}

#[test]
fn embedding_dense_backward_accumulates_in_index_order() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let (num, d) = (10usize, 8);
            let idx = [3i64, 1, 3, 7, 0, 3];
            let it = Tensor::from_slice(&rt, &idx, &[2, 3]).unwrap();
            let (g, gv) = tensor(&rt, &rand(6 * d, 110), &[2, 3, d], dtype);
            for (pad, scale) in [(-1i64, false), (3, false), (-1, true)] {
                let r =
                    backward::embedding_dense_backward(&g, &it, num as i64, pad, scale).unwrap();
                assert_eq!((r.shape(), r.dtype()), (&[num, d][..], dtype));
                let mut want = vec![0.0; num * d];
                let count = |k: i64| idx.iter().filter(|&&x| x == k).count() as f64;
                for (i, &k) in idx.iter().enumerate() {
                    if k == pad {
                        continue;
                    }
                    for j in 0..d {
                        let s = if scale {
                            gv[i * d + j] / count(k)
                        } else {
                            gv[i * d + j]
                        };
                        let acc = want[k as usize * d + j] + s;
                        // Each addition rounds to the gradient's dtype, as PyTorch's does.
                        want[k as usize * d + j] = round(&[acc], dtype)[0];
                    }
                }
                let (rtol, atol) = if dtype == DType::BF16 {
                    (1.6e-2, 1e-5)
                } else {
                    (1e-6, 1e-7)
                };
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    rtol,
                    atol,
                    &format!("embedding {mode:?} {dtype} {pad} {scale}"),
                );
            }
        }
    }
}

/// A slice of a training step: linear, causal attention, and backward operators.
fn step(xs: &[Tensor]) -> tpuemu_backend::Result<Vec<Tensor>> {
    let (x, w, b, dy, idx) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4]);
    let h = matrix::addmm(b, x, w, Scalar::Int(1), Scalar::Float(0.5))?; // [16, 32]
    let q = h.reshape(&[2, 8, 32])?;
    let a = matrix::scaled_dot_product_attention(&q, &q, &q, None, 0.0, true, None, false)?;
    let g = backward::gelu_backward(dy, &h, "tanh")?;
    let dx = g.mm(&w.t()?)?;
    let sm = backward::softmax_backward_data(&g, &h, -1, h.dtype())?;
    let emb = backward::embedding_dense_backward(&g, idx, 20, 0, false)?;
    Ok(vec![a, dx, sm, emb])
}

#[test]
fn compiled_graph_matches_eager() {
    use tpuemu_backend::compile::compile;
    for dtype in [DType::F32, DType::BF16] {
        let rt = rt(Mode::Strict);
        let (x, _) = tensor(&rt, &rand(16 * 24, 120), &[16, 24], dtype);
        let (w, _) = tensor(&rt, &rand(24 * 32, 121), &[24, 32], dtype);
        let (b, _) = tensor(&rt, &rand(32, 122), &[32], dtype);
        let (dy, _) = tensor(&rt, &rand(16 * 32, 123), &[16, 32], dtype);
        let idx: Vec<i64> = (0..16).map(|i| (i * 7) % 20).collect();
        let idx = Tensor::from_slice(&rt, &idx, &[16]).unwrap();
        let inputs = [x, w, b, dy, idx];
        let want: Vec<Vec<f64>> = step(&inputs)
            .unwrap()
            .iter()
            .map(|t| t.to_f64_vec().unwrap())
            .collect();
        let mut g = compile(&rt, "step", step);
        let got = g.call(&inputs).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(&g.to_f64_vec().unwrap(), w, "{dtype} output {i}");
        }
    }
}
