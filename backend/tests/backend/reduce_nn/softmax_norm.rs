//! `_softmax`, `_log_softmax`, `native_layer_norm` and `rms_norm`.

use super::*;

#[test]
fn softmax_and_log_softmax() {
    let cases: &[(&[usize], i64)] = &[
        (&[4, 5, 6], 0),
        (&[4, 5, 6], 1),
        (&[4, 5, 6], -1),
        (&[3, 300], 1),
        (&[130, 3], 0),
        (&[9], 0),
    ];
    for mode in MODES {
        let rt = rt(mode);
        for (ci, (shape, dim)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let d = wrap(&[*dim], shape.len());
            let v: Vec<f64> = data(n, 70 + ci as u32).iter().map(|x| 3.0 * x).collect();
            for dt in [DType::F32, DType::BF16] {
                let (x, xv) = if ci % 2 == 1 {
                    transposed(&rt, &v, shape, dt)
                } else {
                    tensor(&rt, &v, shape, dt)
                };
                let what = format!("softmax {shape:?} dim {dim} {dt:?} {mode:?}");
                let sm = ref_full(&xv, shape, &d, softmax_ref);
                check(&x.softmax(*dim).unwrap(), &sm, shape, dt, &what);
                let last = d[0] + 1 == shape.len();
                let ls = ref_full(&xv, shape, &d, |r| {
                    log_softmax_ref_in(r, if last { dt } else { DType::F32 })
                });
                check(&x.log_softmax(*dim).unwrap(), &ls, shape, dt, &what);
            }
        }
        // bf16 with half_to_float gives f32 (computed in f32, one rounding).
        let (x, xv) = tensor(&rt, &data(40, 1), &[4, 10], DType::BF16);
        let y = ops::nn::softmax_(&x, 1, true).unwrap();
        let want = ref_full(&xv, &[4, 10], &[1], softmax_ref);
        check(&y, &want, &[4, 10], DType::F32, "half_to_float");
        let (f, _) = tensor(&rt, &data(4, 1), &[4], DType::F32);
        assert!(ops::nn::softmax_(&f, 0, true).is_err());
        // A zero-dimensional input; a row of -inf gives NaN as in PyTorch, and so does NaN.
        let (s, _) = tensor(&rt, &[-3.0], &[], DType::F32);
        check(
            &s.softmax(0).unwrap(),
            &[1.0],
            &[],
            DType::F32,
            "0-d softmax",
        );
        check(
            &s.log_softmax(-1).unwrap(),
            &[0.0],
            &[],
            DType::F32,
            "0-d log_softmax",
        );
        let ninf = f64::NEG_INFINITY;
        let nan = f64::NAN;
        let (x, _) = tensor(&rt, &[ninf, ninf, 1.0, ninf, 0.0, nan], &[3, 2], DType::F32);
        let want = [nan, nan, 1.0, 0.0, nan, nan];
        check(
            &x.softmax(1).unwrap(),
            &want,
            &[3, 2],
            DType::F32,
            "inf/nan",
        );
        let want = [nan, nan, 0.0, ninf, nan, nan];
        check(
            &x.log_softmax(1).unwrap(),
            &want,
            &[3, 2],
            DType::F32,
            "log inf/nan",
        );
        // Integers are not supported, as on PyTorch's CPU.
        let (i, _) = tensor(&rt, &[1.0, 2.0], &[2], DType::I64);
        let e = i.softmax(0).unwrap_err().to_string();
        assert!(
            e.contains("\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
            "{e}"
        );
        assert!(matches!(x.softmax(2), Err(TpuError::BadDim(_))));
    }
}

#[test]
fn layer_norm_with_and_without_affine() {
    // (input shape, normalized_shape): last dim, two dims, a row over 128 and not a multiple
    // of it, a single row.
    let cases: &[(&[usize], &[usize])] = &[
        (&[4, 16], &[16]),
        (&[3, 4, 40], &[4, 40]),
        (&[5, 300], &[300]),
        (&[6], &[6]),
    ];
    for mode in MODES {
        let rt = rt(mode);
        for (ci, (shape, ns)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let k: usize = ns.iter().product();
            let dims: Vec<usize> = (shape.len() - ns.len()..shape.len()).collect();
            let nsi: Vec<i64> = ns.iter().map(|d| *d as i64).collect();
            let v: Vec<f64> = data(n, 90 + ci as u32)
                .iter()
                .map(|x| 5.0 + 2.0 * x)
                .collect();
            for dt in [DType::F32, DType::BF16] {
                let (x, xv) = if ci % 2 == 1 {
                    transposed(&rt, &v, shape, dt)
                } else {
                    tensor(&rt, &v, shape, dt)
                };
                let (w, wv) = tensor(&rt, &data(k, 5), ns, dt);
                let (b, bv) = tensor(&rt, &data(k, 6), ns, dt);
                let eps = 1e-5;
                let stats = ref_rows(&xv, shape, &dims);
                let mean: Vec<f64> = stats.iter().map(|r| layer_norm_ref(r, eps).1).collect();
                let rstd: Vec<f64> = stats.iter().map(|r| layer_norm_ref(r, eps).2).collect();
                let plain = ref_full(&xv, shape, &dims, |r| layer_norm_ref(r, eps).0);
                let sshape = reduced_shape(shape, &dims, true);
                let what = format!("layer_norm {shape:?} {ns:?} {dt:?} {mode:?}");
                let (y, m, r) = ops::nn::native_layer_norm(&x, &nsi, None, None, eps).unwrap();
                check(&y, &plain, shape, dt, &what);
                check(&m, &mean, &sshape, dt, &what);
                check(&r, &rstd, &sshape, dt, &what);
                let affine: Vec<f64> = plain
                    .iter()
                    .enumerate()
                    .map(|(i, y)| y * wv[i % k] + bv[i % k])
                    .collect();
                let (y, _, _) =
                    ops::nn::native_layer_norm(&x, &nsi, Some(&w), Some(&b), eps).unwrap();
                check(&y, &affine, shape, dt, &what);
                let scaled: Vec<f64> = plain
                    .iter()
                    .enumerate()
                    .map(|(i, y)| y * wv[i % k])
                    .collect();
                let y = x.layer_norm(&nsi, Some(&w), None, eps).unwrap();
                check(&y, &scaled, shape, dt, &what);
            }
        }
    }
}

#[test]
fn layer_norm_errors_and_empty() {
    let rt = rt(Mode::Strict);
    let (x, _) = tensor(&rt, &data(32, 1), &[4, 8], DType::F32);
    let e = x
        .layer_norm(&[16], None, None, 1e-5)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "Given normalized_shape=[16], expected input with shape [*, 16], but got input of size[4, 8]"
    );
    let (w, _) = tensor(&rt, &data(4, 1), &[4], DType::F32);
    let e = x
        .layer_norm(&[8], Some(&w), None, 1e-5)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("Expected weight to be of same shape as normalized_shape"),
        "{e}"
    );
    assert!(x.layer_norm(&[], None, None, 1e-5).is_err());
    let (i, _) = tensor(&rt, &[1.0; 4], &[2, 2], DType::I32);
    assert!(i.layer_norm(&[2], None, None, 1e-5).is_err());
    // An empty batch: empty outputs of PyTorch's shapes and dtypes.
    let (e0, _) = tensor(&rt, &[], &[0, 1], DType::BF16);
    let (y, m, r) = ops::nn::native_layer_norm(&e0, &[1], None, None, 1e-5).unwrap();
    for t in [&y, &m, &r] {
        assert_eq!(t.shape(), &[0, 1]);
        assert_eq!(t.dtype(), DType::BF16);
    }
}

#[test]
fn rms_norm_as_pytorch_composes_it() {
    for mode in MODES {
        let rt = rt(mode);
        for (shape, k) in [(&[4usize, 16][..], 16usize), (&[3, 200], 200)] {
            let n: usize = shape.iter().product();
            let dims = vec![shape.len() - 1];
            for dt in [DType::F32, DType::BF16] {
                let (x, xv) = tensor(&rt, &data(n, 3), shape, dt);
                let (w, wv) = tensor(&rt, &data(k, 4), &[k], dt);
                for eps in [Some(1e-6), None] {
                    // PyTorch holds eps in the input's dtype; the default is f32's epsilon.
                    let e = round(eps.unwrap_or(f32::EPSILON as f64), dt);
                    let plain = ref_full(&xv, shape, &dims, |r| {
                        let ms = r.iter().map(|v| v * v).sum::<f64>() / r.len() as f64;
                        r.iter().map(|v| v / (ms + e).sqrt()).collect()
                    });
                    let what = format!("rms_norm {shape:?} {dt:?} {eps:?} {mode:?}");
                    let y = x.rms_norm(&[k as i64], None, eps).unwrap();
                    check(&y, &plain, shape, dt, &what);
                    // PyTorch rounds to the input dtype before the weight: a second rounding.
                    let weighted: Vec<f64> = plain
                        .iter()
                        .enumerate()
                        .map(|(i, y)| round(*y, dt) * wv[i % k])
                        .collect();
                    let y = x.rms_norm(&[k as i64], Some(&w), eps).unwrap();
                    check(&y, &weighted, shape, dt, &what);
                }
            }
        }
        // A bf16 input with an f32 weight promotes to f32.
        let (x, xv) = tensor(&rt, &data(8, 1), &[2, 4], DType::BF16);
        let (w, wv) = tensor(&rt, &[0.5, 1.0, 2.0, -1.0], &[4], DType::F32);
        let y = x.rms_norm(&[4], Some(&w), Some(1e-6)).unwrap();
        let e = round(1e-6, DType::BF16);
        let want = ref_full(&xv, &[2, 4], &[1], |r| {
            let ms = r.iter().map(|v| v * v).sum::<f64>() / 4.0;
            r.iter()
                .map(|v| round(v / (ms + e).sqrt(), DType::BF16))
                .collect()
        });
        let want: Vec<f64> = want
            .iter()
            .enumerate()
            .map(|(i, y)| y * wv[i % 4])
            .collect();
        check(&y, &want, &[2, 4], DType::F32, "rms_norm promotion");
        let e = x.rms_norm(&[8], None, None).unwrap_err().to_string();
        assert!(e.starts_with("Given normalized_shape=[8]"), "{e}");
    }
}
