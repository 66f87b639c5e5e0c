//! The matmul-epilogue rule (`fusion::rules::matmul_epilogue`): elementwise work on a product
//! runs on its output tiles, against hand-counted kernels and HBM bytes.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;

#[test]
fn bias_activation_and_residual_are_one_kernel() {
    let (m, k, n) = (256usize, 64usize, 128usize);
    let (a0, w0, b0, r0) = (data(m * k, 5), data(k * n, 6), data(n, 7), data(m * n, 8));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                Tensor::from_slice(rt, &b0, &[n]).unwrap(),
                Tensor::from_slice(rt, &r0, &[m, n]).unwrap(),
            ]
        },
        |t| {
            let h = t[0].matmul(&t[1]).unwrap().add(&t[2]).unwrap();
            vec![h.gelu("tanh").unwrap().add(&t[3]).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: the bias add, the gelu and the residual add each read the value before
    // them element for element and nothing else reads it: three epilogue joins, one
    // kernel. A, W, the bias and the residual are read once and the result written once
    // (up to re-reads of A or W blocks that the tiling needs).
    assert_eq!(r.strict_kernels, 4);
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("matmul epilogue", 3)]);
    let min = 4 * (m * k + k * n + n + 2 * m * n) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
}

#[test]
fn a_product_read_twice_feeds_both_readers_in_one_kernel() {
    let (m, k, n) = (128usize, 64usize, 128usize);
    let (a0, w0) = (data(m * k, 9), data(k * n, 10));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
            ]
        },
        |t| {
            let h = t[0].matmul(&t[1]).unwrap();
            let y = h.relu().unwrap();
            vec![y.add(&h.add_scalar(1.0).unwrap()).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: relu and + 1 both read the product, which stays an output while each joins
    // as one more; the add reads both and is one more too. Nothing
    // outside reads the product or either branch: one kernel reading A and W once and
    // writing the result once.
    assert_eq!(r.strict_kernels, 4);
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("matmul epilogue", 3)]);
    let min = 4 * (m * k + k * n + m * n) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
}

#[test]
fn saved_products_stay_outputs_beside_their_activation() {
    // SwiGLU's forward as training runs it: the products, silu(gate) and the result are
    // all saved for the backward (live).
    let (m, k, n) = (256usize, 64usize, 128usize);
    let (a0, g0, u0) = (data(m * k, 11), data(k * n, 12), data(k * n, 13));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                Tensor::from_slice(rt, &g0, &[k, n]).unwrap(),
                Tensor::from_slice(rt, &u0, &[k, n]).unwrap(),
            ]
        },
        |t| {
            let gate = t[0].matmul(&t[1]).unwrap();
            let up = t[0].matmul(&t[2]).unwrap();
            let sg = gate.silu().unwrap();
            let act = sg.mul(&up).unwrap();
            vec![gate, up, sg, act]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: silu reads the gate product, which stays an output (live): the gate matmul
    // writes gate and silu(gate). The product sg * up reads the up product (live too) and
    // sg: the up matmul reads sg and writes up and the result. Two kernels; A read twice,
    // each weight once, four [m, n] values written and sg read once. Strict reads gate and
    // up again in kernels of their own.
    assert_eq!(r.kernels, 2);
    assert_eq!(r.joins(), [("matmul epilogue", 2)]);
    let min = 4 * (2 * m * k + 2 * k * n + 5 * m * n) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
    assert_eq!(r.strict_kernels, 4);
    assert!(r.strict_hbm_bytes >= min + 4 * (2 * m * n) as u64);
}

#[test]
fn a_product_read_by_several_epilogue_nodes_never_reaches_hbm() {
    // SwiGLU's backward: g = dy @ W is read by two products, the second by silu's
    // backward; g and g * up are needed by nothing else.
    let (m, k, n) = (256usize, 64usize, 128usize);
    let (a0, w0) = (data(m * k, 14), data(k * n, 15));
    let (s0, u0, x0) = (data(m * n, 16), data(m * n, 17), data(m * n, 18));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                Tensor::from_slice(rt, &s0, &[m, n]).unwrap(),
                Tensor::from_slice(rt, &u0, &[m, n]).unwrap(),
                Tensor::from_slice(rt, &x0, &[m, n]).unwrap(),
            ]
        },
        |t| {
            let g = t[0].matmul(&t[1]).unwrap();
            let g_up = g.mul(&t[2]).unwrap();
            let g_sg = g.mul(&t[3]).unwrap();
            let g_gate = tpuemu_backend::ops::backward::silu_backward(&g_sg, &t[4]).unwrap();
            vec![g_up, g_gate]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: both products read g (two readers: g stays an output while they join),
    // silu's backward replaces g * up (its one reader); g is then read by no one outside
    // the kernel and dropped. One kernel reading A, W and the three saved values once and
    // writing the two gradients; Strict writes g and g * up and reads them back.
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("matmul epilogue", 3)]);
    let min = 4 * (m * k + k * n + 5 * m * n) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
    assert_eq!(r.strict_kernels, 4);
    assert!(r.strict_hbm_bytes >= min + 4 * (4 * m * n) as u64);
}

#[test]
fn a_map_a_reduction_reads_goes_to_the_reduction() {
    // h = a @ w is kept (live); t = h * s feeds a mean over the row.
    let (m, k, n) = (256usize, 64usize, 128usize);
    let (a0, w0, s0) = (data(m * k, 19), data(k * n, 20), data(m * n, 21));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                Tensor::from_slice(rt, &s0, &[m, n]).unwrap(),
            ]
        },
        |t| {
            let h = t[0].matmul(&t[1]).unwrap();
            let m = h.mul(&t[2]).unwrap().mean(&[-1], false).unwrap();
            vec![h, m]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: as one more output of the matmul, h * s would be written and read back by
    // the mean's kernel; as the mean's prologue it is never written: the matmul writes h,
    // the row kernel reads h and s and writes one value a row. Two kernels.
    assert_eq!(r.kernels, 2);
    assert_eq!(r.joins(), [("reduction", 1)]);
    let min = 4 * (m * k + k * n + 3 * m * n + m) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
}

#[test]
fn an_epilogue_writing_into_a_slice_keeps_its_place() {
    // relu(a @ w) copied into rows 8.. of a larger buffer: the copy's output is a
    // contiguous view at a non-zero offset.
    let (m, k, n) = (128usize, 64usize, 128usize);
    let (a0, w0) = (data(m * k, 22), data(k * n, 23));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                Tensor::from_slice(rt, &vec![0.5f32; (m + 8) * n], &[m + 8, n]).unwrap(),
            ]
        },
        |t| {
            let y = t[0].matmul(&t[1]).unwrap().relu().unwrap();
            let rows = tpuemu_backend::ops::layout_ops::slice(&t[2], 0, Some(8), None, 1).unwrap();
            tpuemu_backend::ops::creation::copy_(&rows, &y).unwrap();
            vec![t[2].clone()]
        },
    );
    // The first 8 rows keep their 0.5; the rest hold relu(a @ w), as in Strict.
    assert_eq!(r.strict, r.fused);
    assert!(r.fused[0][..8 * n].iter().all(|x| *x == 0.5));
}
