//! Kernel counts (one per operator, fusion in DeferAndFuse) and the tile-kernel additions
//! (row products, row coordinates).

use super::*;

/// Softmax, log-softmax and the norms are one kernel each; so is every reduction.
#[test]
fn one_kernel_per_operator_in_strict_mode() {
    let rt = rt(Mode::Strict);
    let (x, _) = tensor(&rt, &data(8 * 300, 1), &[8, 300], DType::BF16);
    let (w, _) = tensor(&rt, &data(300, 2), &[300], DType::BF16);
    let kernels = |f: &dyn Fn() -> Vec<Tensor>| -> u64 {
        rt.sync().unwrap();
        rt.reset_metrics();
        let outs = f();
        rt.sync().unwrap();
        drop(outs);
        rt.metrics().kernels_launched
    };
    assert_eq!(kernels(&|| vec![x.softmax(1).unwrap()]), 1);
    assert_eq!(kernels(&|| vec![x.log_softmax(0).unwrap()]), 1);
    let ln = || {
        let (y, m, r) = ops::nn::native_layer_norm(&x, &[300], Some(&w), Some(&w), 1e-5).unwrap();
        vec![y, m, r]
    };
    assert_eq!(kernels(&ln), 1);
    assert_eq!(
        kernels(&|| vec![x.rms_norm(&[300], Some(&w), None).unwrap()]),
        1
    );
    assert_eq!(kernels(&|| vec![x.var(&[1], 1.0, false).unwrap()]), 1);
    assert_eq!(kernels(&|| vec![x.sum(&[0, 1], false).unwrap()]), 1);
    assert_eq!(kernels(&|| vec![x.prod().unwrap()]), 1);
    let max_dim = || {
        let (a, b) = x.max_dim(1, false).unwrap();
        vec![a, b]
    };
    assert_eq!(kernels(&max_dim), 1);
}

/// The kernel-level additions: a product along the row (every lane gets the same value, so a
/// full output that uses it is consistent) and column coordinates (`Index`) of several row dims
/// inside a reduction kernel.
#[test]
fn row_products_and_row_coordinates_in_tile_kernels() {
    use tpuemu_backend::ir::{BinOp, RedKind};
    use tpuemu_backend::ops::helpers::{OpScope, rows};
    for mode in MODES {
        let rt = rt(mode);
        let v: Vec<f64> = data(3 * 5 * 70, 4).iter().map(|x| 1.0 + x / 8.0).collect();
        let (x, xv) = tensor(&rt, &v, &[3, 5, 70], DType::F32);
        let op = OpScope::new("test::rows", &[&x]).unwrap();
        let out = rows(
            &op,
            &[3, 5, 70],
            &[1, 2],
            false,
            &[&x],
            &[false],
            &[
                (DType::F32, false),
                (DType::F32, true),
                (DType::I32, false),
                (DType::I32, true),
            ],
            |p, r| {
                let prod = p.reduce(RedKind::Prod, r[0], DType::F32);
                let scaled = p.bin(BinOp::Mul, r[0], prod, DType::F32);
                // Iteration dims: [3, 5, 70] with the row over dims 1 and 2.
                let i1 = p.index(1);
                let i2 = p.index(2);
                let k = p.constant(Scalar::Int(100), DType::I32);
                let code = p.bin(BinOp::Mul, i1, k, DType::I32);
                let code = p.bin(BinOp::Add, code, i2, DType::I32);
                let s = p.reduce(RedKind::Sum, code, DType::I32);
                vec![scaled, prod, code, s]
            },
        )
        .unwrap();
        drop(op);
        let rowsv = ref_rows(&xv, &[3, 5, 70], &[1, 2]);
        let prods: Vec<f64> = rowsv.iter().map(|r| r.iter().product()).collect();
        check(&out[1], &prods, &[3], DType::F32, "row product");
        let scaled: Vec<f64> = xv
            .iter()
            .enumerate()
            .map(|(i, v)| v * prods[i / 350])
            .collect();
        check(
            &out[0],
            &scaled,
            &[3, 5, 70],
            DType::F32,
            "full output using the product",
        );
        // Bitwise: every element of a row used the same product value.
        let got = out[0].to_vec::<f32>().unwrap();
        let p = out[1].to_vec::<f32>().unwrap();
        let x32 = x.to_vec::<f32>().unwrap();
        for (i, g) in got.iter().enumerate() {
            assert_eq!(*g, x32[i] * p[i / 350], "element {i}");
        }
        let codes: Vec<f64> = (0..3 * 350)
            .map(|i| ((i % 350) / 70 * 100 + i % 70) as f64)
            .collect();
        check(&out[2], &codes, &[3, 5, 70], DType::I32, "row coordinates");
        let s: f64 = codes[..350].iter().sum();
        check(&out[3], &[s; 3], &[3], DType::I32, "sum of row coordinates");
    }
}

/// DeferAndFuse: cross-entropy as PyTorch dispatches it (`_log_softmax` then
/// `nll_loss_forward`) fuses the log-softmax into the loss's row kernel (which reads column
/// coordinates); the total weight (summed from the targets alone, first, so that a backward
/// can fuse with the forward pass) and the batch mean are the other two kernels. A residual
/// add fuses into layer norm.
#[test]
fn fused_cross_entropy_and_residual_layer_norm() {
    let rt = rt(Mode::DeferAndFuse);
    let (nb, c) = (16usize, 200usize);
    let v: Vec<f64> = data(nb * c, 12).iter().map(|v| 3.0 * v).collect();
    let (x, xv) = tensor(&rt, &v, &[nb, c], DType::F32);
    let tv: Vec<i64> = (0..nb).map(|i| ((i * 37) % c) as i64).collect();
    let t = Tensor::from_slice(&rt, &tv, &[nb]).unwrap();
    rt.sync().unwrap();
    rt.reset_metrics();
    let lp = x.log_softmax(1).unwrap();
    let (loss, tw) = ops::nn::nll_loss_forward(&lp, &t, None, Reduction::Mean, -100).unwrap();
    drop(lp);
    rt.sync().unwrap();
    assert_eq!(rt.metrics().kernels_launched, 3);
    let lps = ref_full(&xv, &[nb, c], &[1], log_softmax_ref);
    let (want, wtw) = nll_ref(&lps, c, &tv, None, Reduction::Mean, -100);
    check(&loss, &want, &[], DType::F32, "fused cross-entropy");
    check(
        &tw,
        &[wtw],
        &[],
        DType::F32,
        "fused cross-entropy total weight",
    );

    let (r, rv) = tensor(&rt, &data(nb * c, 13), &[nb, c], DType::F32);
    rt.sync().unwrap();
    rt.reset_metrics();
    let h = x.add(&r).unwrap();
    let y = h.layer_norm(&[c as i64], None, None, 1e-5).unwrap();
    drop(h);
    rt.sync().unwrap();
    assert_eq!(rt.metrics().kernels_launched, 1);
    let hv: Vec<f64> = xv
        .iter()
        .zip(&rv)
        .map(|(a, b)| ((a + b) as f32) as f64)
        .collect();
    let want = ref_full(&hv, &[nb, c], &[1], |row| layer_norm_ref(row, 1e-5).0);
    check(&y, &want, &[nb, c], DType::F32, "fused residual layer norm");
}

/// A graph of every operator here, eager and under whole-graph compile: the same bits.
fn graph(xs: &[Tensor]) -> tpuemu_backend::Result<Vec<Tensor>> {
    let (x, w, t) = (&xs[0], &xs[1], &xs[2]);
    let h = x.add(x)?;
    let sm = h.softmax(1)?;
    let ls = h.log_softmax(-1)?;
    let (loss, tw) = ops::nn::nll_loss_forward(&ls, t, Some(w), Reduction::Mean, 2)?;
    let (ln, mean, rstd) = ops::nn::native_layer_norm(&h, &[40], Some(w), Some(w), 1e-5)?;
    let rms = h.rms_norm(&[40], Some(w), None)?;
    let (mx, idx) = h.max_dim(0, true)?;
    Ok(vec![
        sm,
        loss,
        tw,
        ln,
        mean,
        rstd,
        rms,
        mx,
        idx,
        h.sum(&[0], false)?,
        h.mean(&[1], true)?,
        h.var(&[], 1.0, false)?,
        h.amin(&[1], false)?,
        h.argmax(None, false)?,
        x.prod()?,
    ])
}

#[test]
fn compiled_graph_matches_eager() {
    use tpuemu_backend::compile::compile;
    for dt in [DType::F32, DType::BF16] {
        let rt = rt(Mode::Strict);
        let v: Vec<f64> = data(6 * 40, 30).iter().map(|x| 1.0 + x / 8.0).collect();
        let (x, _) = tensor(&rt, &v, &[6, 40], dt);
        let (w, _) = tensor(&rt, &data(40, 31), &[40], dt);
        let tv: Vec<i64> = (0..6).map(|i| (i * 11) % 40).collect();
        let t = Tensor::from_slice(&rt, &tv, &[6]).unwrap();
        let inputs = [x, w, t];
        let want: Vec<Vec<f64>> = graph(&inputs)
            .unwrap()
            .iter()
            .map(|t| t.to_f64_vec().unwrap())
            .collect();
        let mut g = compile(&rt, "reduce_nn", graph);
        let got = g.call(&inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let g = g.to_f64_vec().unwrap();
            let same = g
                .iter()
                .zip(w)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            assert!(
                same && g.len() == w.len(),
                "{dt:?} output {i}: {g:?} vs {w:?}"
            );
        }
    }
}

/// Whole-tensor reductions above 64K elements take two kernels (partials of equal rows, then
/// their combination), so a tensor larger than one row can hold in VMEM still reduces. The rows
/// are the trailing dims when they hold 1K to 64K elements; otherwise the elements are read as
/// `[k, c]` in memory order (transposed inputs as they are, sliced ones made contiguous first).
#[test]
fn large_whole_tensor_reductions_split_in_two_kernels() {
    for mode in MODES {
        let rt = rt(mode);
        let n = 120_000;
        let v: Vec<f64> = data(n, 50).iter().map(|x| 10.0 + x).collect();
        let cases = [
            (0, [300usize, 400], DType::F32, 2),
            (1, [300, 400], DType::BF16, 2),
            (2, [300, 400], DType::F32, 3),
            (3, [40, 3000], DType::F32, 2),
        ];
        for (kind, shape, dt, kernels) in cases {
            let (x, xv) = match kind {
                0 => tensor(&rt, &v, &shape, dt),
                1 | 3 => transposed(&rt, &v, &shape, dt),
                _ => {
                    // Every other column of a [300, 800] tensor.
                    let wide: Vec<f64> = (0..2 * n).map(|i| v[i / 2]).collect();
                    let (w, _) = tensor(&rt, &wide, &[300, 800], dt);
                    let x = ops::layout_ops::slice(&w, 1, Some(0), None, 2).unwrap();
                    let xv = (0..n).map(|i| round(v[i], dt)).collect();
                    (x, xv)
                }
            };
            let what = |op: &str| format!("{op} {kind} {dt:?} {mode:?}");
            let count = |f: &dyn Fn() -> Tensor| {
                rt.sync().unwrap();
                rt.reset_metrics();
                let t = f();
                rt.sync().unwrap();
                (t, rt.metrics().kernels_launched)
            };
            let (s, k) = count(&|| x.sum_all().unwrap());
            check(&s, &[sum(&xv)], &[], dt, &what("sum"));
            assert_eq!(k, kernels, "{}", what("sum kernels"));
            let (m, _) = count(&|| x.mean(&[], true).unwrap());
            check(&m, &[sum(&xv) / n as f64], &[1, 1], dt, &what("mean"));
            let (a, _) = count(&|| x.amax(&[0, 1], false).unwrap());
            check(&a, &[nan_max(&xv)], &[], dt, &what("amax"));
            let (a, _) = count(&|| ops::reduce::min_all(&x).unwrap());
            check(&a, &[nan_min(&xv)], &[], dt, &what("min"));
            for c in [1.0, 0.0] {
                let (va, _) = count(&|| x.var(&[], c, false).unwrap());
                check(&va, &[variance(&xv, c)], &[], dt, &what("var"));
                let (sd, _) = count(&|| x.std(&[0, 1], c, true).unwrap());
                check(&sd, &[variance(&xv, c).sqrt()], &[1, 1], dt, &what("std"));
            }
        }
        // DeferAndFuse fuses an elementwise producer into the first kernel when the rows are
        // the trailing dims: a mean squared error over [40, 3000] is two kernels.
        if mode == Mode::DeferAndFuse {
            let (a, av) = tensor(&rt, &v, &[40, 3000], DType::F32);
            let (b, bv) = tensor(&rt, &data(n, 52), &[40, 3000], DType::F32);
            rt.sync().unwrap();
            rt.reset_metrics();
            let d = a.sub(&b).unwrap();
            let mse = d.mul(&d).unwrap().mean_all().unwrap();
            drop(d);
            rt.sync().unwrap();
            assert_eq!(rt.metrics().kernels_launched, 2);
            let want: f64 = av
                .iter()
                .zip(&bv)
                .map(|(x, y)| {
                    let d = (x - y) as f32;
                    (d * d) as f64
                })
                .sum::<f64>()
                / n as f64;
            check(&mse, &[want], &[], DType::F32, "fused mse");
        }
        // Products of powers of two and signs are exact in f32: every factor must be in.
        let pv: Vec<f64> = (0..n)
            .map(|i| match i % 997 {
                0 => 2.0,
                500 => 0.5,
                700 if i % 3 == 0 => -1.0,
                _ => 1.0,
            })
            .collect();
        let (x, xv) = tensor(&rt, &pv, &[n], DType::F32);
        let want: f64 = xv.iter().product();
        check(&x.prod().unwrap(), &[want], &[], DType::F32, "prod");
        // Integers sum to int64.
        let iv: Vec<f64> = (0..n).map(|i| (i % 13) as f64 - 6.0).collect();
        let (x, _) = tensor(&rt, &iv, &[n], DType::I32);
        check(
            &x.sum_all().unwrap(),
            &[sum(&iv)],
            &[],
            DType::I64,
            "int sum",
        );
        // Larger than one row can hold in VMEM (about 1M f32 elements on a v5e).
        let big = 3 << 20;
        let x = Tensor::from_f64s(
            &rt,
            (0..big).map(|i| (i % 7) as f64),
            big,
            &[big],
            DType::F32,
        )
        .unwrap();
        let want: f64 = (0..big).map(|i| (i % 7) as f64).sum();
        check(&x.sum_all().unwrap(), &[want], &[], DType::F32, "3M sum");
    }
}

/// Coordinates of outer dims in a reduction kernel: each sublane's row index, over many tiles
/// and groups of 8 rows; and the DeferAndFuse pattern that needs them (a `triu` mask fused into
/// the softmax after it).
#[test]
fn outer_coordinates_in_reduction_kernels() {
    use tpuemu_backend::ir::{BinOp, RedKind};
    use tpuemu_backend::ops::helpers::{OpScope, rows};
    for mode in MODES {
        let rt = rt(mode);
        let shape = [40usize, 30, 200];
        let (x, _) = tensor(&rt, &vec![0.0; 40 * 30 * 200], &shape, DType::F32);
        let op = OpScope::new("test::rows", &[&x]).unwrap();
        let out = rows(
            &op,
            &shape,
            &[2],
            false,
            &[&x],
            &[false],
            &[(DType::I32, false), (DType::I32, true)],
            |p, r| {
                let (i0, i1) = (p.index(0), p.index(1));
                let k = p.constant(Scalar::Int(100), DType::I32);
                let code = p.bin(BinOp::Mul, i0, k, DType::I32);
                let code = p.bin(BinOp::Add, code, i1, DType::I32);
                let zero = p.cast(r[0], DType::I32);
                let code = p.bin(BinOp::Add, code, zero, DType::I32);
                let m = p.reduce(RedKind::Max, code, DType::I32);
                vec![code, m]
            },
        )
        .unwrap();
        drop(op);
        let codes: Vec<f64> = (0..40 * 30 * 200)
            .map(|i| ((i / 6000) * 100 + (i / 200) % 30) as f64)
            .collect();
        check(&out[0], &codes, &shape, DType::I32, "outer coordinates");
        let maxes: Vec<f64> = (0..40 * 30)
            .map(|r| ((r / 30) * 100 + r % 30) as f64)
            .collect();
        check(
            &out[1],
            &maxes,
            &[40, 30],
            DType::I32,
            "per-row outer coordinates",
        );
        // triu then softmax over the same shape: one fused kernel in DeferAndFuse.
        let v = data(64, 3);
        let (s, sv) = tensor(&rt, &v, &[8, 8], DType::F32);
        rt.sync().unwrap();
        rt.reset_metrics();
        let y = ops::data::triu(&s, 0).unwrap().softmax(1).unwrap();
        rt.sync().unwrap();
        if mode == Mode::DeferAndFuse {
            assert_eq!(rt.metrics().kernels_launched, 1);
        }
        let masked: Vec<f64> = (0..64)
            .map(|i| if i % 8 >= i / 8 { sv[i] } else { 0.0 })
            .collect();
        let want = ref_full(&masked, &[8, 8], &[1], softmax_ref);
        check(&y, &want, &[8, 8], DType::F32, "triu + softmax");
    }
}
