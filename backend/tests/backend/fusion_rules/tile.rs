//! The tile rules' splicing (`fusion::rules::tile`): a value read in another order than its group
//! wrote it is not spliced.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;

#[test]
fn a_value_read_transposed_is_not_spliced() {
    let n = 256;
    let x0 = data(n * n, 11);
    let r = run_both(
        |rt| vec![Tensor::from_slice(rt, &x0, &[n, n]).unwrap()],
        |t| {
            let y = t[0].add_scalar(1.0).unwrap();
            let z = y.t().unwrap().add(&y).unwrap();
            vec![z.mul_scalar(2.0).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: `y.t() + y` reads `y` in an order the group did not write it in, so it may
    // not join `y`'s group (a tile only holds the elements of its own block); `* 2` then
    // joins the add's group. Two kernels, one join.
    assert_eq!(r.strict_kernels, 3);
    assert_eq!(r.kernels, 2);
    assert_eq!(r.joins(), [("elementwise", 1)]);
}
