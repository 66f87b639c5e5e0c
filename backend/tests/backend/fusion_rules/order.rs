//! The planner's reordering (`fusion::order`): a group that overwrites what the target group
//! reads is not moved before it.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;
use tpuemu_backend::ops::creation;

#[test]
fn a_group_that_overwrites_what_the_target_reads_is_not_moved() {
    let (rows, d) = (64, 256);
    let (x0, z0) = (data(rows * d, 31), data(rows * d, 32));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &x0, &[rows, d]).unwrap(),
                Tensor::from_slice(rt, &z0, &[rows * d]).unwrap(),
            ]
        },
        |t| {
            let (x, z) = (&t[0], &t[1]);
            // G: the row sums of x. D: x overwritten with z, through a flat view (a space
            // of its own, so that nothing joins it). n: x (now z) plus the old row sums.
            let s = x.sum(&[-1], true).unwrap();
            creation::copy_(&x.reshape(&[-1]).unwrap(), z).unwrap();
            vec![x.add(&s).unwrap()]
        },
    );
    // n fits G (the reduction rule) but must run after D, which must run after G (G
    // reads the x that D overwrites): moving D before G to let n join would sum z. By
    // hand: three kernels, as recorded, and Strict's values.
    assert_eq!(r.strict, r.fused);
    assert_eq!(r.kernels, 3);
}
