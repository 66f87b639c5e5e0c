//! `nll_loss_forward` and `nll_loss2d_forward`.

use super::*;

#[test]
fn nll_loss_reductions_weights_and_ignore_index() {
    for mode in MODES {
        let rt = rt(mode);
        // Classes within one lane chunk, over 128 and not a multiple of it, and a single class.
        for (nb, c) in [(6usize, 5usize), (4, 300), (9, 1)] {
            let xv0 = data(nb * c, 7);
            let tv: Vec<i64> = (0..nb).map(|i| ((i * 7 + 3) % c) as i64).collect();
            let ignore = tv[1];
            let wv0: Vec<f64> = data(c, 8).iter().map(|v| v.abs() + 0.1).collect();
            for dt in [DType::F32, DType::BF16] {
                let (x, xv) = tensor(&rt, &xv0, &[nb, c], dt);
                let t = Tensor::from_slice(&rt, &tv, &[nb]).unwrap();
                let (w, wv) = tensor(&rt, &wv0, &[c], dt);
                for red in [Reduction::None, Reduction::Mean, Reduction::Sum] {
                    let variants = [
                        (None, -100),
                        (Some(&w), -100),
                        (Some(&w), ignore),
                        (None, ignore),
                    ];
                    for (wopt, ig) in variants {
                        let (lo, tw) = ops::nn::nll_loss_forward(&x, &t, wopt, red, ig).unwrap();
                        let (want, wtw) = nll_ref(&xv, c, &tv, wopt.map(|_| &wv[..]), red, ig);
                        let what = format!(
                            "nll {nb}x{c} {dt:?} {red:?} w={} ignore={ig} {mode:?}",
                            wopt.is_some()
                        );
                        let shape: &[usize] = if red == Reduction::None { &[nb] } else { &[] };
                        check(&lo, &want, shape, dt, &what);
                        check(&tw, &[wtw], &[], dt, &what);
                    }
                }
            }
        }
        // One sample without a batch dim (reduction none then still gives a scalar).
        let (x, xv) = tensor(&rt, &data(4, 2), &[4], DType::F32);
        let t = Tensor::from_slice(&rt, &[2i64], &[]).unwrap();
        for red in [Reduction::None, Reduction::Mean, Reduction::Sum] {
            let (lo, tw) = ops::nn::nll_loss_forward(&x, &t, None, red, -100).unwrap();
            check(&lo, &[-xv[2]], &[], DType::F32, "nll 1-d");
            check(&tw, &[1.0], &[], DType::F32, "nll 1-d total weight");
        }
        // Every target ignored: the mean is 0/0.
        let (x, _) = tensor(&rt, &data(6, 2), &[2, 3], DType::F32);
        let t = Tensor::from_slice(&rt, &[1i64, 1], &[2]).unwrap();
        let (lo, tw) = ops::nn::nll_loss_forward(&x, &t, None, Reduction::Mean, 1).unwrap();
        check(&lo, &[f64::NAN], &[], DType::F32, "all ignored");
        check(&tw, &[0.0], &[], DType::F32, "all ignored total weight");
        // An empty batch.
        let (x, _) = tensor(&rt, &[], &[0, 3], DType::F32);
        let t = Tensor::from_slice::<i64>(&rt, &[], &[0]).unwrap();
        let (lo, _) = ops::nn::nll_loss_forward(&x, &t, None, Reduction::Mean, -100).unwrap();
        check(&lo, &[f64::NAN], &[], DType::F32, "empty mean");
        let (lo, tw) = ops::nn::nll_loss_forward(&x, &t, None, Reduction::Sum, -100).unwrap();
        check(&lo, &[0.0], &[], DType::F32, "empty sum");
        check(&tw, &[0.0], &[], DType::F32, "empty total weight");
        let (lo, _) = ops::nn::nll_loss_forward(&x, &t, None, Reduction::None, -100).unwrap();
        check(&lo, &[], &[0], DType::F32, "empty none");
    }
}

#[test]
fn nll_loss2d_and_spatial_targets() {
    for mode in MODES {
        let rt = rt(mode);
        let (n, c, h, wd) = (2usize, 3usize, 2usize, 4usize);
        let (x, xv) = tensor(&rt, &data(n * c * h * wd, 3), &[n, c, h, wd], DType::F32);
        // -1 is the ignored index here.
        let tv: Vec<i64> = (0..n * h * wd).map(|i| (i % 4) as i64 - 1).collect();
        let t = Tensor::from_slice(&rt, &tv, &[n, h, wd]).unwrap();
        let (w, wv) = tensor(&rt, &[0.5, 2.0, 1.5], &[3], DType::F32);
        // Host reference with the class dim moved last.
        let mut moved = vec![0.0; xv.len()];
        for (flat, v) in xv.iter().enumerate() {
            let i = unravel(flat, &[n, c, h, wd]);
            moved[ravel(&[i[0], i[2], i[3], i[1]], &[n, h, wd, c])] = *v;
        }
        for red in [Reduction::None, Reduction::Mean, Reduction::Sum] {
            let (lo, tw) = ops::nn::nll_loss2d_forward(&x, &t, Some(&w), red, -1).unwrap();
            let (want, wtw) = nll_ref(&moved, c, &tv, Some(&wv), red, -1);
            let shape: &[usize] = if red == Reduction::None {
                &[n, h, wd]
            } else {
                &[]
            };
            check(
                &lo,
                &want,
                shape,
                DType::F32,
                &format!("nll2d {red:?} {mode:?}"),
            );
            check(&tw, &[wtw], &[], DType::F32, "nll2d total weight");
        }
        let l = x.nll_loss(&t, None, Reduction::Sum, -1).unwrap();
        let want = nll_ref(&moved, c, &tv, None, Reduction::Sum, -1).0;
        check(&l, &want, &[], DType::F32, "nll method");
        let t2 = Tensor::from_slice(&rt, &tv, &[n, wd, h]).unwrap();
        let e = ops::nn::nll_loss2d_forward(&x, &t2, None, Reduction::Sum, -1).unwrap_err();
        assert!(e.to_string().starts_with("size mismatch"), "{e}");
    }
}

#[test]
fn nll_loss_bad_targets_and_shapes() {
    for mode in MODES {
        let rt = rt(mode);
        let (x, _) = tensor(&rt, &data(6, 2), &[2, 3], DType::F32);
        let bad = Tensor::from_slice(&rt, &[0i64, 3], &[2]).unwrap();
        let r = ops::nn::nll_loss_forward(&x, &bad, None, Reduction::Sum, -100);
        // Checked on the device: Debug raises at the operator, the other modes at the read of
        // the loss (or of the total weight), as PyTorch's CPU kernel raises.
        let want = "IndexError: aten::nll_loss_forward: Target 3 is out of bounds.";
        let e = match r {
            Err(e) => {
                assert_eq!(mode, Mode::Debug);
                e
            }
            Ok((lo, total)) => {
                assert_ne!(mode, Mode::Debug);
                assert_eq!(total.to_f64_vec().unwrap_err().to_string(), want);
                lo.to_f64_vec().unwrap_err()
            }
        };
        assert_eq!(e.to_string(), want);
        let t32 = Tensor::from_slice(&rt, &[0i32, 1], &[2]).unwrap();
        let e = ops::nn::nll_loss_forward(&x, &t32, None, Reduction::Mean, -100).unwrap_err();
        assert_eq!(e.to_string(), "expected scalar type Long but found Int");
        let t3 = Tensor::from_slice(&rt, &[0i64, 1, 2], &[3]).unwrap();
        let e = ops::nn::nll_loss_forward(&x, &t3, None, Reduction::Mean, -100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "size mismatch (got input: [2, 3], target: [3])"
        );
        let t = Tensor::from_slice(&rt, &[0i64, 1], &[2]).unwrap();
        let (w, _) = tensor(&rt, &[1.0; 4], &[4], DType::F32);
        let e = ops::nn::nll_loss_forward(&x, &t, Some(&w), Reduction::Mean, -100).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("weight tensor should be defined either for all 3 classes"),
            "{e}"
        );
        assert!(Reduction::from_i64(3).is_err());
        let (x3, _) = tensor(&rt, &data(8, 2), &[2, 2, 2], DType::F32);
        assert!(ops::nn::nll_loss_forward(&x3, &t, None, Reduction::Mean, -100).is_err());
    }
}
