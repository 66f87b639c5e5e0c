//! The per-row rule (`fusion::rules::per_row`): maps of a reduction's row statistics run in the
//! reduction's kernel; a row map that reads no reduction keeps its own.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;

#[test]
fn a_map_of_row_statistics_runs_in_the_reduction() {
    let (rows, d) = (128, 256);
    let x0 = data(rows * d, 4);
    let r = run_both(
        |rt| vec![Tensor::from_slice(rt, &x0, &[rows, d]).unwrap()],
        |t| {
            let x = &t[0];
            let m = x.mul(x).unwrap().mean(&[-1], false).unwrap();
            vec![
                m.add_scalar(1e-5)
                    .unwrap()
                    .rsqrt()
                    .unwrap()
                    .mul_scalar(2.0)
                    .unwrap(),
            ]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: x*x (x read once) and its mean form one reducing group; + eps, rsqrt and
    // * 2 are maps over [rows], the group's outer dims, so each joins as per-row work. One
    // kernel that reads x once and writes one f32 per row.
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("per-row", 3), ("reduction", 1)]);
    assert_eq!(r.hbm_bytes, 4 * (rows * d + rows) as u64);
}

#[test]
fn an_unrelated_row_map_keeps_its_own_kernel() {
    // rsqrt(mean(x^2)) and, beside it, y + 1 on another [rows, 1] tensor: the map fits
    // the reduction's outer dims but reads nothing the group computes.
    let (rows, d) = (128, 256);
    let (x0, y0) = (data(rows * d, 6), data(rows, 7));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &x0, &[rows, d]).unwrap(),
                Tensor::from_slice(rt, &y0, &[rows, 1]).unwrap(),
            ]
        },
        |t| {
            let x = &t[0];
            let m = x.mul(x).unwrap().mean(&[-1], true).unwrap();
            vec![m.rsqrt().unwrap(), t[1].add_scalar(1.0).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: x * x and the mean form a reducing group, rsqrt joins it as per-row work;
    // y + 1 runs alone. Two kernels.
    assert_eq!(r.kernels, 2);
    assert_eq!(r.joins(), [("per-row", 1), ("reduction", 1)]);
}
