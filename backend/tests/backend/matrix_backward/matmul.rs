//! Matrix products (`mm`, `addmm`, `baddbmm`, `matmul`, `dot`, `mv`): dtypes, precisions,
//! strided operands, bias folding and PyTorch's errors.

use super::*;

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
