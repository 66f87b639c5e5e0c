//! Integer extremes, NaN propagation, `max.dim`/`min.dim` and `argmax` ties.

use super::*;

#[test]
fn amax_and_integer_extremes() {
    for mode in MODES {
        let rt = rt(mode);
        let v: Vec<f64> = (0..30).map(|i| ((i * 37) % 23) as f64 - 11.0).collect();
        for dt in [DType::I32, DType::I64, DType::Bool] {
            let (x, xv) = tensor(&rt, &v, &[5, 6], dt);
            for dims in [&[0i64][..], &[1], &[]] {
                let d = wrap(dims, 2);
                let rows = ref_rows(&xv, &[5, 6], &d);
                let os = reduced_shape(&[5, 6], &d, false);
                let mx: Vec<f64> = rows.iter().map(|r| nan_max(r)).collect();
                let mn: Vec<f64> = rows.iter().map(|r| nan_min(r)).collect();
                check(&x.amax(dims, false).unwrap(), &mx, &os, dt, "int amax");
                check(&x.amin(dims, false).unwrap(), &mn, &os, dt, "int amin");
            }
            check(
                &ops::reduce::max_all(&x).unwrap(),
                &[nan_max(&xv)],
                &[],
                dt,
                "max()",
            );
            check(
                &ops::reduce::min_all(&x).unwrap(),
                &[nan_min(&xv)],
                &[],
                dt,
                "min()",
            );
        }
    }
}

#[test]
fn nan_propagates_through_amax_max_dim_and_argmax() {
    for mode in MODES {
        let rt = rt(mode);
        let shape = [3usize, 200];
        let mut v = data(600, 5);
        // Row 0: a NaN late in the row (in the tail chunk); row 1: two NaNs; row 2: none.
        v[190] = f64::NAN;
        v[200 + 10] = f64::NAN;
        v[200 + 150] = f64::NAN;
        for dt in [DType::F32, DType::BF16] {
            let (x, xv) = tensor(&rt, &v, &shape, dt);
            let rows = ref_rows(&xv, &shape, &[1]);
            let mx: Vec<f64> = rows.iter().map(|r| nan_max(r)).collect();
            check(&x.amax(&[1], false).unwrap(), &mx, &[3], dt, "amax nan");
            let mn: Vec<f64> = rows.iter().map(|r| nan_min(r)).collect();
            check(&x.amin(&[-1], true).unwrap(), &mn, &[3, 1], dt, "amin nan");
            let (vals, idx) = x.max_dim(1, false).unwrap();
            check(&vals, &mx, &[3], dt, "max.dim values");
            let am: Vec<f64> = rows.iter().map(|r| first_argmax(r)).collect();
            assert_eq!(am[..2], [190.0, 10.0]);
            check(&idx, &am, &[3], DType::I64, "max.dim indices");
            check(
                &x.argmax(Some(1), false).unwrap(),
                &am,
                &[3],
                DType::I64,
                "argmax nan",
            );
            // Flattened: the first NaN overall.
            check(
                &x.argmax(None, false).unwrap(),
                &[190.0],
                &[],
                DType::I64,
                "argmax flat",
            );
            check(
                &ops::reduce::max_all(&x).unwrap(),
                &[f64::NAN],
                &[],
                dt,
                "max() nan",
            );
        }
    }
}

#[test]
fn argmax_ties_take_the_first_index() {
    for mode in MODES {
        let rt = rt(mode);
        // Ties within a lane chunk, across chunks (index 5 and 133) and with the max only in the
        // tail.
        let mut v = vec![0.0; 2 * 300];
        v[5] = 3.0;
        v[133] = 3.0;
        v[299] = 3.0;
        v[300 + 290] = 1.0;
        v[300 + 295] = 1.0;
        let (x, _) = tensor(&rt, &v, &[2, 300], DType::F32);
        check(
            &x.argmax(Some(1), false).unwrap(),
            &[5.0, 290.0],
            &[2],
            DType::I64,
            "argmax ties",
        );
        check(
            &x.argmax(Some(-1), true).unwrap(),
            &[5.0, 290.0],
            &[2, 1],
            DType::I64,
            "keepdim",
        );
        // All equal: index 0; argmin picks the first minimum.
        let (z, _) = tensor(&rt, &[7.0; 9], &[3, 3], DType::BF16);
        check(
            &z.argmax(Some(0), false).unwrap(),
            &[0.0; 3],
            &[3],
            DType::I64,
            "all equal",
        );
        let (y, _) = tensor(&rt, &[2.0, 1.0, 1.0, 3.0, 1.0], &[5], DType::I64);
        check(
            &y.argmin(None, false).unwrap(),
            &[1.0],
            &[],
            DType::I64,
            "argmin",
        );
        // dim=None with keepdim: every dim becomes 1.
        check(
            &x.argmax(None, true).unwrap(),
            &[5.0],
            &[1, 1],
            DType::I64,
            "flat keepdim",
        );
        // Along dim 0 of a transposed view.
        let vals = data(6 * 140, 2);
        let (t, tv) = transposed(&rt, &vals, &[140, 6], DType::F32);
        let am: Vec<f64> = ref_rows(&tv, &[140, 6], &[0])
            .iter()
            .map(|r| first_argmax(r))
            .collect();
        check(
            &t.argmax(Some(0), false).unwrap(),
            &am,
            &[6],
            DType::I64,
            "argmax transposed",
        );
        let (vals_, idx) = t.min_dim(0, true).unwrap();
        let rows = ref_rows(&tv, &[140, 6], &[0]);
        let mn: Vec<f64> = rows.iter().map(|r| nan_min(r)).collect();
        let ami: Vec<f64> = rows
            .iter()
            .map(|r| r.iter().position(|v| *v == nan_min(r)).unwrap() as f64)
            .collect();
        check(&vals_, &mn, &[1, 6], DType::F32, "min.dim values");
        check(&idx, &ami, &[1, 6], DType::I64, "min.dim indices");
    }
}
