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
/// coordinates); the batch mean is the second kernel. A residual add fuses into layer norm.
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
    assert_eq!(rt.metrics().kernels_launched, 2);
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
