//! Constants read as constants (`fusion::consts`): a filled scalar becomes a constant of the
//! kernel that reads it and never runs.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;
use tpuemu_backend::dtype::{DType, Scalar};
use tpuemu_backend::ops::creation;

#[test]
fn a_filled_scalar_is_read_as_a_constant() {
    let n = 4096;
    let x0 = data(n, 21);
    let r = run_both(
        |rt| vec![Tensor::from_slice(rt, &x0, &[n]).unwrap()],
        |t| {
            let x = &t[0];
            // 0.1 is not a bf16: the constant must be rounded as the fill stores it.
            let c = creation::scalar_tensor(x.runtime(), Scalar::Float(0.1), DType::BF16).unwrap();
            vec![x.mul(&c).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: Strict fills the scalar (one kernel, 2 bytes) and multiplies (two); fused,
    // the fill is a constant of the product's kernel and never runs: one kernel reading x
    // and writing the product, 4n + 4n bytes.
    assert_eq!(r.strict_kernels, 2);
    assert_eq!(r.kernels, 1);
    assert_eq!(r.hbm_bytes, 8 * n as u64);
}
