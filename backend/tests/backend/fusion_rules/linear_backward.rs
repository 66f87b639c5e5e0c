//! The linear-backward rule (`fusion::rules::linear_backward`): `dY @ W` and `dY^T @ X` run as
//! twins that read the gradient once, against hand-counted kernels and HBM bytes.

use super::testing::{data, run_both, run_both_on};
use tpuemu_backend::Tensor;
use tpuemu_backend::dtype::DType;

/// `dY [m, v]`, `W [v, d]`, `X [m, d]` in bf16, as a linear layer's backward sees them.
fn operands(rt: &tpuemu_backend::Runtime, m: usize, v: usize, d: usize) -> Vec<Tensor> {
    let t = |n: usize, seed: u32, shape: &[usize]| {
        Tensor::from_slice(rt, &data(n, seed), shape)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    vec![
        t(m * v, 31, &[m, v]),
        t(v * d, 32, &[v, d]),
        t(m * d, 33, &[m, d]),
    ]
}

#[test]
fn a_linear_backward_reads_its_gradient_once() {
    // Edges everywhere: m and d not multiples of the 128-wide array, v above one block.
    let (m, v, d) = (200usize, 1000usize, 200usize);
    for dx_first in [true, false] {
        let r = run_both(
            |rt| operands(rt, m, v, d),
            |t| {
                let dx = || t[0].mm(&t[1]).unwrap();
                let dw = || t[0].t().unwrap().mm(&t[2]).unwrap();
                if dx_first {
                    let x = dx();
                    vec![x, dw()]
                } else {
                    let w = dw();
                    vec![dx(), w]
                }
            },
        );
        // Each product folds its inner dimension in the same slices in the same order as
        // its own kernel: the same bits.
        assert_eq!(r.strict, r.fused, "dX first: {dx_first}");
        // By hand: one kernel reading dY, W and X once and writing dX and dW once (bf16);
        // Strict reads dY twice.
        assert_eq!(r.joins(), [("linear backward", 1)]);
        assert_eq!((r.kernels, r.strict_kernels), (1, 2));
        let min = 2 * (m * v + 2 * v * d + 2 * m * d) as u64;
        assert!(
            r.hbm_bytes >= min && r.hbm_bytes <= min + min / 16,
            "{} bytes for a minimum of {min}",
            r.hbm_bytes
        );
        assert!(r.strict_hbm_bytes >= min + 2 * (m * v) as u64);
    }
}

#[test]
fn the_input_gradient_keeps_its_epilogue_beside_its_twin() {
    // dX + a residual's gradient, as the block's backward adds them; recorded in
    // PyTorch's order (dX, dW, then the add).
    let (m, v, d) = (256usize, 512usize, 128usize);
    let r = run_both(
        |rt| {
            let mut t = operands(rt, m, v, d);
            t.push(
                Tensor::from_slice(rt, &data(m * d, 34), &[m, d])
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap(),
            );
            t
        },
        |t| {
            let dx = t[0].mm(&t[1]).unwrap();
            let dw = t[0].t().unwrap().mm(&t[2]).unwrap();
            vec![dx.add(&t[3]).unwrap(), dw]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: the add reads dX element for element and nothing else does: it joins as
    // the epilogue and dX never reaches HBM. One kernel reading dY, W, X and the residual
    // gradient once, writing the sum and dW.
    assert_eq!(r.joins(), [("linear backward", 1), ("matmul epilogue", 1)]);
    assert_eq!((r.kernels, r.strict_kernels), (1, 3));
    let min = 2 * (m * v + 2 * v * d + 3 * m * d) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 16,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
}

#[test]
fn a_pair_the_chip_cannot_hold_runs_as_its_two_products() {
    // A 256 KiB VMEM holds each product's tiles but not the pair's 512 x 512 f32
    // accumulator (1 MiB); a v4 splits products over its two cores, which the pair's
    // accumulator cannot be. Both run the two products as recorded, with the same bits.
    let (m, v, d) = (512usize, 1024usize, 512usize);
    let mut small = tpuemu_emulator::builtin("v5e").unwrap();
    small.vmem_bytes = 256 << 10;
    for chip in [small, tpuemu_emulator::builtin("v4").unwrap()] {
        let name = chip.name.clone();
        let r = run_both_on(
            chip,
            |rt| operands(rt, m, v, d),
            |t| {
                let dx = t[0].mm(&t[1]).unwrap();
                vec![dx, t[0].t().unwrap().mm(&t[2]).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused, "{name}");
        assert_eq!(r.joins(), [("linear backward", 1)], "{name}");
        assert_eq!(r.kernels, r.strict_kernels, "{name}");
    }
}

#[test]
fn degenerate_gradients_stay_two_products() {
    // One row of dY, one column of dY, rows of dY overlapping (row stride 1), an empty
    // twin: found by review, where the pair read A the wrong way or planned empty tiles.
    let cases: [(usize, usize, usize, bool); 3] = [
        (1, 256, 128, false),
        (256, 1, 1, false),
        (128, 256, 128, true),
    ];
    for (m, v, d, hankel) in cases {
        let r = run_both(
            |rt| {
                let mut t = operands(rt, m, v, d);
                if hankel {
                    t[0] = Tensor::from_slice(rt, &data(m + v, 94), &[m + v])
                        .unwrap()
                        .to_dtype(DType::BF16)
                        .unwrap();
                }
                t
            },
            |t| {
                let dy = if hankel {
                    tpuemu_backend::ops::layout_ops::as_strided(
                        &t[0],
                        &[m as i64, v as i64],
                        &[1, 1],
                        None,
                    )
                    .unwrap()
                } else {
                    t[0].clone()
                };
                vec![dy.mm(&t[1]).unwrap(), dy.t().unwrap().mm(&t[2]).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused, "{m} x {v}, hankel {hankel}");
        assert!(r.joins.is_empty(), "{m} x {v}: {:?}", r.joins);
    }
    let (m, v, d) = (128usize, 256usize, 128usize);
    let r = run_both(
        |rt| {
            let mut t = operands(rt, m, v, d);
            t.push(tpuemu_backend::ops::creation::zeros(rt, &[m, 0], DType::BF16).unwrap());
            t
        },
        |t| {
            vec![
                t[0].mm(&t[1]).unwrap(),
                t[0].t().unwrap().mm(&t[3]).unwrap(),
            ]
        },
    );
    assert_eq!(r.strict, r.fused);
    assert!(r.joins.is_empty(), "{:?}", r.joins);
}

#[test]
fn products_of_unrelated_operands_stay_apart() {
    // dY @ W and Z^T @ X with Z of dY's shape: no operand is shared, no pair.
    let (m, v, d) = (128usize, 256usize, 128usize);
    let r = run_both(
        |rt| {
            let mut t = operands(rt, m, v, d);
            t.push(
                Tensor::from_slice(rt, &data(m * v, 35), &[m, v])
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap(),
            );
            t
        },
        |t| {
            vec![
                t[0].mm(&t[1]).unwrap(),
                t[3].t().unwrap().mm(&t[2]).unwrap(),
            ]
        },
    );
    assert_eq!(r.strict, r.fused);
    assert_eq!(r.kernels, 2);
    assert!(r.joins.is_empty());
}
