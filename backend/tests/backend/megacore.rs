//! Megacore: on a chip with two TensorCores (v5p) matrix products and attention run split over
//! both, with the same values as on one core and the host's, in about half the time.
//!
//! The time bounds are derived by hand: two cores each doing half of the matrix-unit work
//! cannot take less than half of one core's time, and a split that works takes clearly less
//! than one core's.

use std::sync::Arc;

use tpuemu_backend::{DType, Mode, Runtime, Tensor};
use tpuemu_emulator::{Emulator, builtin};

use super::flash::{backward_case, case};

fn v5p(mode: Mode, megacore: bool) -> Runtime {
    let emu = Emulator::new(builtin("v5p").unwrap()).unwrap();
    let rt = Runtime::new(Arc::new(emu)).unwrap();
    rt.set_mode(mode).unwrap();
    rt.set_megacore(megacore);
    rt
}

/// A bf16 tensor of `shape` with deterministic values in [-2, 2).
fn bf16(rt: &Runtime, shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let x: Vec<f32> = (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 257)
        .map(|x| x as f32 / 64.0 - 2.0)
        .collect();
    Tensor::from_slice(rt, &x, shape)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
}

/// `a @ b` on bf16 `[m, k] x [k, n]`: the f32 result's bits and the device time.
fn matmul(rt: &Runtime, (m, k, n): (usize, usize, usize)) -> (Vec<u32>, f64) {
    let (a, b) = (bf16(rt, &[m, k], 1), bf16(rt, &[k, n], 2));
    rt.sync().unwrap();
    rt.reset_metrics();
    let c = a.mm(&b).unwrap().to_dtype(DType::F32).unwrap();
    rt.sync().unwrap();
    let busy = rt.metrics().device_busy_ns;
    let bits = c
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    (bits, busy)
}

#[test]
fn a_matrix_product_on_both_cores_has_one_cores_bits_in_about_half_the_time() {
    // 8 x 8 output tiles of 128 at least: enough to deal over two cores.
    let dims = (1024, 2048, 1024);
    let (one, t1) = matmul(&v5p(Mode::Strict, false), dims);
    let (two, t2) = matmul(&v5p(Mode::Strict, true), dims);
    assert!(
        one == two,
        "the split product's bits differ from one core's"
    );
    let r = t2 / t1;
    eprintln!("megacore matmul: {t1:.0} ns on one core, {t2:.0} ns on two ({r:.3})");
    // Each core also loads its own operand tiles and fills its pipeline: not quite half.
    assert!(
        (0.5..0.75).contains(&r),
        "two cores take {r:.3} of one core's time"
    );
}

#[test]
fn a_matrix_product_too_small_to_split_runs_on_one_core() {
    let (one, t1) = matmul(&v5p(Mode::Strict, false), (128, 256, 128));
    let (two, t2) = matmul(&v5p(Mode::Strict, true), (128, 256, 128));
    assert!(one == two);
    assert_eq!(t1, t2, "one output tile: nothing to split");
}

#[test]
fn attention_on_both_cores_matches_the_host() {
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = v5p(mode, true);
        // Key/value heads (2) split over the cores; then batches (2) with one key/value head;
        // then one (batch, head): one core.
        case(&rt, (2, 4, 2, 600, 300, 64, 48), true);
        case(&rt, (2, 2, 1, 300, 300, 64, 64), false);
        case(&rt, (1, 2, 1, 640, 640, 64, 64), true);
        backward_case(&rt, (1, 4, 2, 600, 300, 64, 48), true);
        backward_case(&rt, (2, 4, 2, 136, 200, 64, 64), false);
        backward_case(&rt, (2, 2, 1, 260, 260, 160, 32), true);
    }
}

/// Attention forward and backward of `[B, H, L, E]` bf16 (timing only): device ns.
fn attention_time(megacore: bool) -> f64 {
    use tpuemu_backend::ops::matrix::attention::scaled_dot_product_attention_lse;
    use tpuemu_backend::ops::matrix::attention_backward::flash_attention_backward;
    let emu = Emulator::new(builtin("v5p").unwrap()).unwrap();
    emu.set_timing_only(true);
    let rt = Runtime::meta(Arc::new(emu), 0).unwrap();
    rt.set_megacore(megacore);
    let e = |s: &[usize], d: DType| Tensor::empty(&rt, s, d).unwrap();
    let (q, k, v) = (
        e(&[1, 8, 1024, 128], DType::BF16),
        e(&[1, 2, 1024, 128], DType::BF16),
        e(&[1, 2, 1024, 128], DType::BF16),
    );
    rt.sync().unwrap();
    rt.reset_metrics();
    let (o, lse) = scaled_dot_product_attention_lse(&q, &k, &v, true, None, true).unwrap();
    let g = flash_attention_backward(&o, &q, &k, &v, &o, &lse, 0.0, true, None, None).unwrap();
    drop(g);
    rt.sync().unwrap();
    rt.metrics().device_busy_ns
}

#[test]
fn attention_over_two_key_value_heads_takes_about_half_the_time_on_two_cores() {
    let (t1, t2) = (attention_time(false), attention_time(true));
    let r = t2 / t1;
    eprintln!("megacore attention: {t1:.0} ns on one core, {t2:.0} ns on two ({r:.3})");
    assert!(
        (0.5..0.7).contains(&r),
        "two cores take {r:.3} of one core's time"
    );
}

#[test]
fn a_fused_product_with_its_epilogue_on_both_cores_has_one_cores_bits() {
    // DeferAndFuse puts the bias add and the activation into the product's epilogue, which
    // reads the bias tile of each output tile: every core reads its own tiles' extras.
    let run = |megacore: bool| -> Vec<u32> {
        let rt = v5p(Mode::DeferAndFuse, megacore);
        let (a, b, c) = (
            bf16(&rt, &[512, 384], 1),
            bf16(&rt, &[384, 640], 2),
            bf16(&rt, &[512, 640], 3),
        );
        let y = a.mm(&b).unwrap().add(&c).unwrap().relu().unwrap();
        y.to_dtype(DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    assert!(
        run(false) == run(true),
        "the fused product's bits differ on two cores"
    );
}

#[test]
fn a_fused_product_kept_beside_its_activation_on_both_cores_has_one_cores_bits() {
    // The product is held by a tensor (saved for a backward) and silu reads it: one kernel
    // with two outputs, every core storing its own tiles of both.
    let run = |megacore: bool| -> (Vec<u32>, u64) {
        let rt = v5p(Mode::DeferAndFuse, megacore);
        let (a, b) = (bf16(&rt, &[512, 384], 4), bf16(&rt, &[384, 640], 5));
        rt.sync().unwrap();
        rt.reset_metrics();
        let y = a.mm(&b).unwrap();
        let z = y.silu().unwrap();
        rt.sync().unwrap();
        let kernels = rt.metrics().kernels_launched;
        let bits = [y, z]
            .iter()
            .flat_map(|t| t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap())
            .map(|x| x.to_bits())
            .collect();
        (bits, kernels)
    };
    let (one, k1) = run(false);
    let (two, k2) = run(true);
    assert_eq!(
        (k1, k2),
        (1, 1),
        "the product and its activation in one kernel"
    );
    assert!(one == two, "the two outputs' bits differ on two cores");
}
