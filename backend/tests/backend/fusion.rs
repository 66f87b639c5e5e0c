//! DeferAndFuse regression tests: known patterns become a known number of kernels, fused
//! results equal Strict's bits, dead intermediates skip HBM, flushes say why, kernels are
//! cached by pattern.

use tpuemu_backend::ops::matrix::addmm;
use tpuemu_backend::{DType, Mode, Runtime, Scalar, Tensor};

use crate::host::rt;

fn data(n: usize, seed: u32) -> Vec<f32> {
    crate::inputs::hashed(n, seed, 1)
}

/// Runs `f` in Strict and in DeferAndFuse (one graph per flush, no size limit), returns both
/// results and the DeferAndFuse kernel count.
fn both(f: impl Fn(&Runtime) -> Tensor) -> (Vec<f32>, Vec<f32>, u64, u64) {
    let s = rt(Mode::Strict);
    let strict = f(&s).to_vec::<f32>().unwrap();
    let d = rt(Mode::Strict);
    d.set_max_pending_ops(10_000);
    d.set_mode(Mode::DeferAndFuse).unwrap();
    d.reset_metrics();
    let out = f(&d);
    let fused = out.to_vec::<f32>().unwrap();
    let m = d.metrics();
    (strict, fused, m.kernels_launched, m.hbm_bytes)
}

#[test]
fn matmul_bias_activation_is_one_kernel() {
    let (strict, fused, kernels, _) = both(|rt| {
        let x = Tensor::from_slice(rt, &data(64 * 96, 1), &[64, 96]).unwrap();
        let w = Tensor::from_slice(rt, &data(96 * 128, 2), &[96, 128]).unwrap();
        let b = Tensor::from_slice(rt, &data(128, 3), &[128]).unwrap();
        let one = Scalar::Int(1);
        let h = addmm(&b, &x, &w, one, one).unwrap();
        h.gelu("tanh").unwrap().mul_scalar(0.5).unwrap()
    });
    assert_eq!(strict, fused);
    // Uploads of x, w, b are transfers, not kernels: one matmul with the epilogue fused.
    assert_eq!(kernels, 1);
}

#[test]
fn rms_norm_by_hand_is_one_kernel_and_its_backward_three() {
    let x0 = data(32 * 256, 4);
    let g0 = data(256, 5);
    let dy0 = data(32 * 256, 6);
    let (strict, fused, kernels, _) = both(|rt| {
        let x = Tensor::from_slice(rt, &x0, &[32, 256]).unwrap();
        let g = Tensor::from_slice(rt, &g0, &[256]).unwrap();
        let rstd = x
            .mul(&x)
            .unwrap()
            .mean(&[-1], true)
            .unwrap()
            .add_scalar(1e-6)
            .unwrap()
            .rsqrt()
            .unwrap();
        x.mul(&rstd).unwrap().mul(&g).unwrap()
    });
    assert_eq!(strict, fused);
    assert_eq!(
        kernels, 1,
        "square, mean, add, rsqrt, scale: one row kernel"
    );
    let (strict, fused, kernels, _) = both(|rt| {
        let x = Tensor::from_slice(rt, &x0, &[32, 256]).unwrap();
        let g = Tensor::from_slice(rt, &g0, &[256]).unwrap();
        let dy = Tensor::from_slice(rt, &dy0, &[32, 256]).unwrap();
        let rstd = x
            .mul(&x)
            .unwrap()
            .mean(&[-1], true)
            .unwrap()
            .add_scalar(1e-6)
            .unwrap()
            .rsqrt()
            .unwrap();
        let xhat = x.mul(&rstd).unwrap();
        let dg = dy.mul(&xhat).unwrap().sum(&[0], false).unwrap();
        let dxhat = dy.mul(&g).unwrap();
        let proj = dxhat.mul(&xhat).unwrap().mean(&[-1], true).unwrap();
        let dx = rstd
            .mul(&dxhat.sub(&xhat.mul(&proj).unwrap()).unwrap())
            .unwrap();
        // One result: dx with dg broadcast in, so both are computed.
        dx.add(&dg).unwrap()
    });
    assert_eq!(strict, fused);
    // f32: the column sum stays a rows kernel (bf16 ones run on the matrix units).
    assert_eq!(
        kernels, 3,
        "row kernel for dx, column sum for dg, the final add"
    );
}

#[test]
fn independent_chains_interleaved_still_fuse() {
    let (strict, fused, kernels, _) = both(|rt| {
        let a = Tensor::from_slice(rt, &data(4096, 7), &[4096]).unwrap();
        let b = Tensor::from_slice(rt, &data(2048, 8), &[2048]).unwrap();
        // a-chain and b-chain alternate (different iteration spaces); each becomes one kernel.
        let a1 = a.mul_scalar(2.0).unwrap();
        let b1 = b.add_scalar(1.0).unwrap();
        let a2 = a1.exp().unwrap();
        let b2 = b1.mul(&b1).unwrap();
        let a3 = a2.add_scalar(3.0).unwrap();
        let b3 = b2.sum(&[0], true).unwrap();
        a3.sum(&[0], true).unwrap().add(&b3).unwrap()
    });
    assert_eq!(strict, fused);
    // The b-chain with its sum; the a-chain with its sum and, as per-row work after it, the
    // final add.
    assert_eq!(kernels, 2);
}

#[test]
fn dead_intermediates_never_touch_hbm() {
    let n = 1 << 18;
    let x0 = data(n, 9);
    let run = |mode: Mode| {
        let rt = rt(Mode::Strict);
        rt.set_max_pending_ops(10_000);
        let x = Tensor::from_slice(&rt, &x0, &[n]).unwrap();
        rt.set_mode(mode).unwrap();
        rt.reset_metrics();
        let y = x
            .mul_scalar(3.0)
            .unwrap()
            .add_scalar(1.0)
            .unwrap()
            .relu()
            .unwrap()
            .sub(&x)
            .unwrap();
        rt.sync().unwrap();
        let m = rt.metrics();
        drop(y);
        (m.kernels_launched, m.hbm_bytes)
    };
    let (ks, bs) = run(Mode::Strict);
    let (kd, bd) = run(Mode::DeferAndFuse);
    assert_eq!((ks, kd), (4, 1));
    // Strict reads and writes each intermediate; fused reads x once and writes y once.
    let bytes = 4 * n as u64;
    assert!(
        bd <= 2 * bytes + bytes / 8,
        "fused moved {bd} bytes for {bytes}-byte tensors"
    );
    assert!(bs >= 7 * bytes, "strict moved {bs} bytes");
}

#[test]
fn flushes_say_why() {
    let rt = rt(Mode::DeferAndFuse);
    rt.set_max_pending_ops(3);
    let x = Tensor::from_slice(&rt, &data(1024, 10), &[1024]).unwrap();
    let mut y = x.clone();
    for _ in 0..7 {
        y = y.add_scalar(1.0).unwrap();
    }
    rt.sync().unwrap();
    let z = y.mul_scalar(2.0).unwrap();
    rt.set_mode(Mode::Strict).unwrap();
    let _ = z.to_vec::<f32>().unwrap();
    let m = rt.metrics();
    assert_eq!(m.flushes.get("size limit"), Some(&2), "{:?}", m.flushes);
    assert_eq!(m.flushes.get("explicit sync"), Some(&1), "{:?}", m.flushes);
    assert_eq!(m.flushes.get("mode switch"), Some(&1), "{:?}", m.flushes);
}

#[test]
fn a_training_loop_generates_each_fused_kernel_once() {
    let rt = rt(Mode::DeferAndFuse);
    let w = Tensor::from_slice(&rt, &data(64 * 64, 11), &[64, 64]).unwrap();
    let step = |x: &Tensor| -> Vec<f32> {
        let h = x.mm(&w).unwrap().relu().unwrap().mul_scalar(0.5).unwrap();
        h.softmax(-1).unwrap().to_vec::<f32>().unwrap()
    };
    let x1 = Tensor::from_slice(&rt, &data(16 * 64, 12), &[16, 64]).unwrap();
    let x2 = Tensor::from_slice(&rt, &data(16 * 64, 13), &[16, 64]).unwrap();
    step(&x1);
    rt.reset_metrics();
    let out = step(&x2);
    let m = rt.metrics();
    assert!(m.cache_misses == 0 && m.cache_hits > 0, "{}", m.report());
    assert_eq!(out.len(), 16 * 64);
}

#[test]
fn bf16_chains_round_once_like_strict() {
    let (strict, fused, kernels, _) = both(|rt| {
        let x = Tensor::from_slice(rt, &data(3000, 14), &[3000])
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        x.mul_scalar(1.7)
            .unwrap()
            .exp()
            .unwrap()
            .add(&x)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    });
    assert_eq!(strict, fused, "each operator rounds to bf16 in both modes");
    assert!(kernels <= 2);
}

#[test]
fn a_fill_over_a_reductions_space_stays_a_full_value() {
    // The sum of a [4] vector, padded to [4] (as an all-reduce pads a scalar loss): the pad's
    // fill runs over the reduction's iteration space but writes every element.
    let (strict, fused, _, _) = both(|rt| {
        let x = Tensor::from_slice(rt, &data(4, 9), &[4]).unwrap();
        let s = x.sum(&[], false).unwrap().reshape(&[1]).unwrap();
        tpuemu_backend::ops::data::constant_pad_nd(&s, &[0, 3], Scalar::Int(0)).unwrap()
    });
    assert_eq!(strict, fused);
    assert_eq!(fused[1..], [0.0; 3]);
}

#[test]
fn a_residual_add_through_a_view_joins_the_matmul_epilogue() {
    // addmm's product [256, 64] viewed as [8, 32, 64] plus a residual of that shape: the add
    // joins the matmul as its epilogue, its operand re-expressed over the product's
    // [1, 256, 64] (the Python bridge found this: the kernel generator used to reject it).
    let (strict, fused, kernels, _) = both(|rt| {
        let a = Tensor::from_slice(rt, &data(256 * 64, 15), &[256, 64]).unwrap();
        let w = Tensor::from_slice(rt, &data(64 * 64, 16), &[64, 64]).unwrap();
        let b = Tensor::from_slice(rt, &data(64, 17), &[64]).unwrap();
        let r = Tensor::from_slice(rt, &data(8 * 32 * 64, 18), &[8, 32, 64]).unwrap();
        let one = Scalar::Int(1);
        let h = addmm(&b, &a, &w, one, one).unwrap();
        h.view_shape(&[8, 32, 64])
            .unwrap()
            .add(&r)
            .unwrap()
            .sum(&[-1], false)
            .unwrap()
    });
    assert_eq!(strict, fused);
    // The sum reduces along the product's rows (64 wide) and alone reads the epilogue's
    // result: it runs on each finished output tile as the matmul's row epilogue.
    assert_eq!(
        kernels, 1,
        "the matmul with bias and residual, the sum as its row epilogue"
    );
}

#[test]
fn a_group_without_a_kernel_runs_its_operators_one_by_one() {
    // Forty products of one tensor, all kept alive, join one elementwise group with forty
    // outputs: more live values than the vector registers hold, so the generator refuses the
    // fused kernel. The Python bridge found this (`[x * 2 for _ in range(40)]` in DeferAndFuse
    // failed the flush); the group's operators now run as recorded, with Strict's results.
    let x0 = data(16 * 8, 21);
    let run = |mode: Mode| {
        let r = rt(Mode::Strict);
        r.set_max_pending_ops(10_000);
        r.set_mode(mode).unwrap();
        let x = Tensor::from_slice(&r, &x0, &[16, 8]).unwrap();
        let ys: Vec<Tensor> = (0..40)
            .map(|i| x.mul_scalar(i as f64 + 0.5).unwrap())
            .collect();
        let vals: Vec<Vec<f32>> = ys.iter().map(|y| y.to_vec::<f32>().unwrap()).collect();
        (vals, r.metrics())
    };
    let (strict, _) = run(Mode::Strict);
    let (fused, m) = run(Mode::DeferAndFuse);
    assert_eq!(strict, fused);
    for (i, v) in fused.iter().enumerate() {
        assert_eq!(v[3], x0[3] * (i as f32 + 0.5), "product {i}");
    }
    assert!(
        m.fusion_joins
            .get("unfused: no kernel for the group")
            .is_some_and(|n| *n >= 1),
        "{:?}",
        m.fusion_joins
    );
}
