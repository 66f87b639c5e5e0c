//! `sum`, `mean`, `amax`/`amin` over dims, result dtypes, `var`/`std` and `prod`.

use super::*;

/// Shapes and dims covering first, middle, last, several and all dims, and rows longer than
/// 128 elements and not a multiple of it.
const DIM_CASES: &[(&[usize], &[i64])] = &[
    (&[4, 5, 6], &[0]),
    (&[4, 5, 6], &[1]),
    (&[4, 5, 6], &[-1]),
    (&[4, 5, 6], &[0, 2]),
    (&[4, 5, 6], &[]),
    (&[3, 300], &[1]),
    (&[2, 129, 3], &[1]),
    (&[260, 3], &[0]),
    (&[7], &[0]),
];

#[test]
fn sum_mean_amax_amin_over_dims() {
    for mode in MODES {
        let rt = rt(mode);
        for (ci, (shape, dims)) in DIM_CASES.iter().enumerate() {
            let n: usize = shape.iter().product();
            let d = wrap(dims, shape.len());
            for dt in [DType::F32, DType::BF16] {
                for keepdim in [false, true] {
                    let (x, xv) = if ci % 2 == 0 {
                        tensor(&rt, &data(n, ci as u32), shape, dt)
                    } else {
                        transposed(&rt, &data(n, ci as u32), shape, dt)
                    };
                    let rows = ref_rows(&xv, shape, &d);
                    let os = reduced_shape(shape, &d, keepdim);
                    let what = |op: &str| {
                        format!("{op} {shape:?} {dims:?} {dt:?} keepdim={keepdim} {mode:?}")
                    };
                    let s: Vec<f64> = rows.iter().map(|r| sum(r)).collect();
                    check(&x.sum(dims, keepdim).unwrap(), &s, &os, dt, &what("sum"));
                    let m: Vec<f64> = rows.iter().map(|r| sum(r) / r.len() as f64).collect();
                    check(&x.mean(dims, keepdim).unwrap(), &m, &os, dt, &what("mean"));
                    let mx: Vec<f64> = rows.iter().map(|r| nan_max(r)).collect();
                    check(&x.amax(dims, keepdim).unwrap(), &mx, &os, dt, &what("amax"));
                    let mn: Vec<f64> = rows.iter().map(|r| nan_min(r)).collect();
                    check(&x.amin(dims, keepdim).unwrap(), &mn, &os, dt, &what("amin"));
                }
            }
        }
    }
}

#[test]
fn sum_dtypes_follow_pytorch() {
    for mode in MODES {
        let rt = rt(mode);
        let v: Vec<f64> = (0..24).map(|i| (i % 7) as f64 - 3.0).collect();
        for dt in [DType::I32, DType::I64, DType::Bool] {
            let (x, xv) = tensor(&rt, &v, &[4, 6], dt);
            let rows = ref_rows(&xv, &[4, 6], &[1]);
            let want: Vec<f64> = rows.iter().map(|r| sum(r)).collect();
            // Integers and bools sum to int64.
            check(
                &x.sum(&[1], false).unwrap(),
                &want,
                &[4],
                DType::I64,
                "int sum",
            );
            check(
                &x.sum_all().unwrap(),
                &[sum(&xv)],
                &[],
                DType::I64,
                "int sum_all",
            );
            // With a float dtype the input is converted first.
            let s = ops::reduce::sum(&x, &[0], true, Some(DType::F32)).unwrap();
            let rows0 = ref_rows(&xv, &[4, 6], &[0]);
            let want0: Vec<f64> = rows0.iter().map(|r| sum(r)).collect();
            check(&s, &want0, &[1, 6], DType::F32, "int sum dtype=f32");
        }
        // bf16 with dtype=float32 accumulates and returns f32; f32 with dtype=int64 truncates.
        let (x, xv) = tensor(&rt, &data(300, 9), &[300], DType::BF16);
        let s = ops::reduce::sum_all(&x, Some(DType::F32)).unwrap();
        check(&s, &[sum(&xv)], &[], DType::F32, "bf16 sum dtype=f32");
        let (x, xv) = tensor(&rt, &data(40, 3), &[40], DType::F32);
        let s = ops::reduce::sum_all(&x, Some(DType::I64)).unwrap();
        let want: f64 = xv.iter().map(|v| v.trunc()).sum();
        check(&s, &[want], &[], DType::I64, "f32 sum dtype=int64");
        // Zero-dimensional input, with keepdim staying zero-dimensional.
        let (x, _) = tensor(&rt, &[2.5], &[], DType::F32);
        check(
            &x.sum(&[0], true).unwrap(),
            &[2.5],
            &[],
            DType::F32,
            "0-d sum",
        );
        check(
            &x.mean(&[], false).unwrap(),
            &[2.5],
            &[],
            DType::F32,
            "0-d mean",
        );
        check(
            &x.amax(&[-1], true).unwrap(),
            &[2.5],
            &[],
            DType::F32,
            "0-d amax",
        );
    }
}

#[test]
fn var_and_std_two_pass() {
    for mode in MODES {
        let rt = rt(mode);
        for (ci, (shape, dims)) in DIM_CASES.iter().enumerate() {
            let n: usize = shape.iter().product();
            let d = wrap(dims, shape.len());
            // An offset mean: a one-pass formula would lose the variance to cancellation.
            let v: Vec<f64> = data(n, 40 + ci as u32).iter().map(|x| 100.0 + x).collect();
            for dt in [DType::F32, DType::BF16] {
                let (x, xv) = tensor(&rt, &v, shape, dt);
                for (c, keepdim) in [(1.0, false), (0.0, true), (2.5, false)] {
                    let rows = ref_rows(&xv, shape, &d);
                    let os = reduced_shape(shape, &d, keepdim);
                    let want: Vec<f64> = rows.iter().map(|r| variance(r, c)).collect();
                    let what = format!("var {shape:?} {dims:?} c={c} {dt:?} {mode:?}");
                    check(&x.var(dims, c, keepdim).unwrap(), &want, &os, dt, &what);
                    let sd: Vec<f64> = want.iter().map(|v| v.sqrt()).collect();
                    check(&x.std(dims, c, keepdim).unwrap(), &sd, &os, dt, &what);
                }
            }
        }
        // One element with correction 1: 0/0.
        let (x, _) = tensor(&rt, &[1.0, 2.0, 3.0], &[3, 1], DType::F32);
        let nan = [f64::NAN; 3];
        check(
            &x.var(&[1], 1.0, false).unwrap(),
            &nan,
            &[3],
            DType::F32,
            "var n=1",
        );
        // Correction beyond N: a positive sum over zero.
        let (x, _) = tensor(&rt, &[1.0, 2.0], &[2], DType::F32);
        check(
            &x.var(&[], 3.0, false).unwrap(),
            &[f64::INFINITY],
            &[],
            DType::F32,
            "var c>n",
        );
        let (i, _) = tensor(&rt, &[1.0, 2.0], &[2], DType::I64);
        assert!(matches!(
            i.var(&[], 1.0, false),
            Err(TpuError::DtypeMismatch(_))
        ));
    }
}

#[test]
fn prod_of_rows_long_and_short() {
    for mode in MODES {
        let rt = rt(mode);
        // Values near 1 so that 300 of them stay finite; a negative sign flips the result.
        let v: Vec<f64> = data(300, 11).iter().map(|x| 1.0 + x / 20.0).collect();
        for dt in [DType::F32, DType::BF16] {
            let (x, xv) = tensor(&rt, &v, &[300], dt);
            let want: f64 = xv.iter().product();
            check(&x.prod().unwrap(), &[want], &[], dt, "prod 300");
            let (y, yv) = transposed(&rt, &v[..150], &[10, 15], dt);
            let p = ops::reduce::prod_dim(&y, 1, true, None).unwrap();
            let want: Vec<f64> = ref_rows(&yv, &[10, 15], &[1])
                .iter()
                .map(|r| r.iter().product())
                .collect();
            check(&p, &want, &[10, 1], dt, "prod.dim_int");
        }
        let (x, _) = tensor(&rt, &[-2.0, 3.0, 0.5, -1.0, 4.0], &[5], DType::F32);
        check(&x.prod().unwrap(), &[12.0], &[], DType::F32, "prod signs");
        let (x, _) = tensor(&rt, &[2.0, f64::NAN, 0.0], &[3], DType::F32);
        check(&x.prod().unwrap(), &[f64::NAN], &[], DType::F32, "prod nan");
        // Integers and bools give int64.
        let (x, _) = tensor(&rt, &[2.0, -3.0, 5.0, 1.0, 7.0], &[5], DType::I32);
        check(&x.prod().unwrap(), &[-210.0], &[], DType::I64, "int prod");
        let (x, _) = tensor(&rt, &[1.0, 1.0, 0.0], &[3], DType::Bool);
        check(&x.prod().unwrap(), &[0.0], &[], DType::I64, "bool prod");
        let p = ops::reduce::prod(&x, Some(DType::F32)).unwrap();
        check(&p, &[0.0], &[], DType::F32, "prod dtype");
    }
}

/// Sums and means over leading dims (a bias gradient's `sum(0)`): bf16 on the matrix units.
/// Values against the host, and bf16's HBM bytes against the hand-derived minimum: the input
/// read once, the result and the row of ones written, the ones read (the rows kernel would read
/// the input transposed, one element per burst: 16 times the bytes).
#[test]
fn sums_over_leading_dims_read_the_input_once() {
    let cases: &[(&[usize], &[i64])] = &[
        (&[300, 256], &[0]),
        (&[20, 3, 384], &[0, 1]),
        (&[64, 2, 130], &[0]),
    ];
    for mode in MODES {
        let rt = rt(mode);
        for (ci, (shape, dims)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let d = wrap(dims, shape.len());
            for dt in [DType::F32, DType::BF16] {
                for keepdim in [false, true] {
                    // A view at an offset into a larger storage (its first 7 rows skipped).
                    let mut big = shape.to_vec();
                    big[0] += 7;
                    let extra: usize = big.iter().product::<usize>() - n;
                    let (b, bv) = tensor(&rt, &data(n + extra, ci as u32), &big, dt);
                    let x = ops::layout_ops::slice(&b, 0, Some(7), None, 1).unwrap();
                    let xv = bv[extra..].to_vec();
                    let rows = ref_rows(&xv, shape, &d);
                    let os = reduced_shape(shape, &d, keepdim);
                    let what = |op: &str| {
                        format!("{op} {shape:?} {dims:?} {dt:?} keepdim={keepdim} {mode:?}")
                    };
                    rt.sync().unwrap();
                    rt.reset_metrics();
                    let s = x.sum(dims, keepdim).unwrap();
                    rt.sync().unwrap();
                    let bytes = rt.metrics().hbm_bytes as usize;
                    let want: Vec<f64> = rows.iter().map(|r| sum(r)).collect();
                    check(&s, &want, &os, dt, &what("sum"));
                    // bf16 runs on the matrix units (f32 stays on the rows kernel: see below).
                    let r: usize = d.iter().map(|i| shape[*i]).product();
                    let bound = (n + n / r + 2 * r) * 2;
                    assert!(
                        dt == DType::F32 || bytes <= bound,
                        "{}: {bytes} HBM bytes, minimum {bound}",
                        what("sum")
                    );
                    let m: Vec<f64> = rows.iter().map(|r| sum(r) / r.len() as f64).collect();
                    check(&x.mean(dims, keepdim).unwrap(), &m, &os, dt, &what("mean"));
                }
            }
        }
    }
}

/// Infinities and NaN survive a sum over leading dims in every dtype (a multi-pass matrix
/// product would turn `inf` into `inf - inf`).
#[test]
fn sums_over_leading_dims_keep_infinities() {
    for dt in [DType::F32, DType::BF16] {
        let rt = rt(Mode::Strict);
        let mut v = vec![1.0; 32 * 256];
        v[3 * 256 + 5] = f64::INFINITY;
        v[7 * 256 + 9] = f64::NEG_INFINITY;
        v[9 * 256 + 11] = f64::NAN;
        let (x, xv) = tensor(&rt, &v, &[32, 256], dt);
        let want: Vec<f64> = ref_rows(&xv, &[32, 256], &[0])
            .iter()
            .map(|r| sum(r))
            .collect();
        check(
            &x.sum(&[0], false).unwrap(),
            &want,
            &[256],
            dt,
            "sum with infinities",
        );
        let m: Vec<f64> = want.iter().map(|s| s / 32.0).collect();
        check(
            &x.mean(&[0], false).unwrap(),
            &m,
            &[256],
            dt,
            "mean with infinities",
        );
    }
}
