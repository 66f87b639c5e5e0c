//! The elementwise rule (`fusion::rules::elementwise`): elementwise chains become one kernel,
//! against hand-counted kernels and HBM bytes.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;

#[test]
fn a_chain_of_three_adds_is_one_kernel() {
    let n = 1 << 16;
    let xs: Vec<Vec<f32>> = (0..4).map(|s| data(n, 10 + s)).collect();
    let r = run_both(
        |rt| {
            xs.iter()
                .map(|x| Tensor::from_slice(rt, x, &[n]).unwrap())
                .collect()
        },
        |t| {
            let s = t[0].add(&t[1]).unwrap().add(&t[2]).unwrap();
            vec![s.add(&t[3]).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: Strict runs one kernel per add, each reading two operands and writing one
    // (12n bytes); fused, the 2nd and 3rd adds join the 1st: four operands read once, the
    // sum written once, the two partial sums never leave VMEM.
    assert_eq!(r.strict_kernels, 3);
    assert_eq!(r.strict_hbm_bytes, 3 * 12 * n as u64);
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("elementwise", 2)]);
    assert_eq!(r.hbm_bytes, 5 * 4 * n as u64);
}

#[test]
fn a_chain_reads_its_input_once_and_writes_once() {
    let n = 1 << 16;
    let x0 = data(n, 1);
    let r = run_both(
        |rt| vec![Tensor::from_slice(rt, &x0, &[n]).unwrap()],
        |x| {
            let x = &x[0];
            let y = x.mul_scalar(3.0).unwrap().add_scalar(1.0).unwrap();
            vec![y.exp().unwrap().sub(x).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: four operators, four kernels in Strict; fused, one kernel (three joins)
    // that reads x once (4n bytes) and writes the result once (4n).
    assert_eq!(r.strict_kernels, 4);
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("elementwise", 3)]);
    assert_eq!(r.hbm_bytes, 8 * n as u64);
}
