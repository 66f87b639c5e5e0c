//! The demo's models in every mode: the same numbers in Strict, DeferAndFuse and Compile, and
//! fewer kernels fused.

use tpuemu_backend::compile::compile;
use tpuemu_backend::{DType, Mode, Runtime, Tensor};
use tpuemu_workloads::{Mlp, MlpConfig, Transformer, TransformerConfig};

fn rt(mode: Mode) -> Runtime {
    let emu = tpuemu_emulator::Emulator::new(tpuemu_emulator::builtin("v5e").unwrap()).unwrap();
    let rt = Runtime::new(std::sync::Arc::new(emu)).unwrap();
    rt.set_mode(mode).unwrap();
    rt
}

fn small() -> TransformerConfig {
    TransformerConfig {
        batch: 2,
        seq: 16,
        d_model: 64,
        heads: 4,
        d_ff: 96,
        vocab: 256,
        dtype: DType::F32,
    }
}

fn run(mode: Mode, cfg: TransformerConfig) -> (Vec<Vec<f32>>, u64) {
    let rt: Runtime = rt(Mode::Strict);
    let m = Transformer::new(&rt, cfg).unwrap();
    // One graph for the whole step, so that the kernel count shows fusion alone.
    rt.set_max_pending_ops(10_000);
    rt.set_mode(mode).unwrap();
    rt.reset_metrics();
    let r = m.step(&m.tokens, &m.targets).unwrap();
    let mut out = vec![r.loss.to_vec::<f32>().unwrap()];
    out.extend(r.grads.iter().map(|g| g.to_vec::<f32>().unwrap()));
    (out, rt.metrics().kernels_launched)
}

#[test]
fn transformer_step_is_the_same_in_every_mode() {
    let (strict, ks) = run(Mode::Strict, small());
    let (defer, kd) = run(Mode::DeferAndFuse, small());
    assert!(
        strict[0][0].is_finite() && strict[0][0] > 0.0,
        "loss {}",
        strict[0][0]
    );
    assert_eq!(strict, defer, "DeferAndFuse changes numbers");
    // Strict launches one kernel per operator that computes (views launch none), counted by
    // hand from `Transformer::step`:
    // - forward, 19: embedding; rms_norm; 3 mm (q, k, v; `t()` is a view; `heads` is a view);
    //   scaled_dot_product_attention (the flash kernel; its output's memory is [B, S, H, Dh],
    //   so `merge` is a view); mm (wo), add; rms_norm; mm, mm (gate, up), silu, mul;
    //   mm (down), add; rms_norm; mm (head); log_softmax; nll_loss_forward;
    // - backward, 68: scalar_tensor; nll_loss_backward; log_softmax_backward; 2 mm (head);
    //   `rms_backward` (13: mul, mean, add_scalar, rsqrt, mul, mul, sum, mul, mul, mean, mul,
    //   sub, mul); 2 mm (down); mul, mul, silu_backward; 4 mm (gate, up) and an add;
    //   `rms_backward` (13); add; 2 mm (wo); the flash backward (its gradients laid out as
    //   q, k, v: `merge` is a view); 6 mm (q, k, v) and 2 adds; `rms_backward` (13); add;
    //   embedding_dense_backward;
    // that is 87 operators. Two of them launch more than one kernel: nll_loss_forward with
    // the mean reduction three (the total weight summed from the targets, the per-sample
    // losses, their sum over the batch) and embedding_dense_backward two (a zero fill, then
    // the index-add); the embedding's indices and the loss's targets are checked on the
    // device, one kernel each (`ops::checks`). 92 in all.
    assert_eq!(ks, 92, "strict kernels");
    // DeferAndFuse, from the fusion rules (backend README): the 24 matrix products (8
    // forward, 16 backward), the two attention kernels and the gather and index-add kernels
    // never merge with one another, so at least 28 kernels remain. The rules guarantee at
    // least 19 merges: the residual adds after wo and down join their products as epilogues
    // (2); in each `rms_backward` the squares, their mean, add_scalar, rsqrt and x * rstd
    // become one reduction group (4 merges, 12 for three); the adds of two or three products
    // join the last product (1 + 2); the residual adds of the gradients join their
    // `rms_backward` group (2). So at most 90 - 19 = 71.
    assert!(
        (28..=71).contains(&kd),
        "fusion out of its derived bounds: {ks} kernels strict, {kd} deferred"
    );
    // Compile.
    let rt = rt(Mode::Strict);
    let m = std::sync::Arc::new(Transformer::new(&rt, small()).unwrap());
    let mm = m.clone();
    let mut g = compile(&rt, "step", move |xs: &[Tensor]| {
        let r = mm.step(&xs[0], &xs[1])?;
        Ok(std::iter::once(r.loss).chain(r.grads).collect())
    });
    let out = g.call(&[m.tokens.clone(), m.targets.clone()]).unwrap();
    let got: Vec<Vec<f32>> = out.iter().map(|t| t.to_vec::<f32>().unwrap()).collect();
    assert_eq!(got, strict, "Compile changes numbers");
}

#[test]
fn mlp_step_runs() {
    let rt = rt(Mode::DeferAndFuse);
    let cfg = MlpConfig {
        batch: 16,
        d_in: 32,
        hidden: 64,
        classes: 10,
        dtype: DType::BF16,
    };
    let m = Mlp::new(&rt, cfg).unwrap();
    let r = m.step(&m.x, &m.targets).unwrap();
    let l = r.loss.to_vec::<f32>().unwrap()[0];
    // Cross-entropy is -log p of the target with p < 1: positive.
    assert!(l.is_finite() && l > 0.0, "loss {l}");
    assert_eq!(r.grads[0].shape(), &[64, 32]);
    // The bias gradient of the logits is the batch sum of (softmax - onehot) / batch. Each row
    // sums to zero over the classes, so the classes' gradients sum to zero, and each lies in
    // [-1, 1]. In bf16: every row of g_logits rounds each element (relative 2^-9, at most
    // 2 * 2^-9 per row in all, 16 rows summed: 2 * 2^-9) and each of the 10 sums rounds once
    // (at most 2^-9 each): |sum| <= 12 * 2^-9 < 0.025.
    let db2 = r.grads[3].to_vec::<f32>().unwrap();
    assert_eq!(db2.len(), 10);
    assert!(db2.iter().all(|g| g.abs() <= 1.0), "{db2:?}");
    let s: f32 = db2.iter().sum();
    assert!(s.abs() < 0.025, "bias gradients sum to {s}: {db2:?}");
    assert!(db2.iter().any(|g| g.abs() > 1e-3), "{db2:?}");
}

/// A meta runtime (shapes and timing, no values) gives the transformer block the same simulated
/// time, kernels and HBM bytes as the same step with values, in every mode, except for the one
/// kernel whose work depends on the values (the fused embedding gradient's sparse write-back).
#[test]
fn the_meta_runtime_times_a_step_exactly_as_with_values() {
    use std::sync::Arc;
    use tpuemu_emulator::{Emulator, builtin};
    use tpuemu_workloads::{RunMode, Size, Workload, run_workload};
    let modes = [
        RunMode::Eager(Mode::Strict),
        RunMode::Eager(Mode::Debug),
        RunMode::Eager(Mode::DeferAndFuse),
        RunMode::Compile,
    ];
    for mode in modes {
        let with = Runtime::new(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap())).unwrap();
        let meta =
            Runtime::meta(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap()), 0).unwrap();
        assert!(with.has_values() && !meta.has_values());
        let w = Workload::TransformerBlock;
        let (a, _) = run_workload(&with, w, Size::Small, mode, 1, false).unwrap();
        let (b, _) = run_workload(&meta, w, Size::Small, mode, 1, false).unwrap();
        assert!(a.loss.is_finite() && a.loss > 0.0, "{}", a.loss);
        assert_eq!(a.kernels_launched, b.kernels_launched, "{}", a.mode);
        assert_eq!(a.mxu_flops, b.mxu_flops, "{}", a.mode);
        if matches!(mode, RunMode::Eager(Mode::Strict | Mode::Debug)) {
            assert_eq!(a.seconds_simulated, b.seconds_simulated, "{}", a.mode);
            assert_eq!(a.device_busy_seconds, b.device_busy_seconds, "{}", a.mode);
            assert_eq!(a.hbm_bytes, b.hbm_bytes, "{}", a.mode);
        } else {
            // Fused, the embedding gradient's table is zeroed on chip and only its touched rows
            // are written back after zeros: each distinct token's row once. Without values
            // every token reads as 0, one distinct row, so the meta run writes back between 0
            // and 63 rows (64 tokens, rows of 128 bf16 = 256 bytes) fewer; nothing else differs.
            let fewer = a.hbm_bytes - b.hbm_bytes;
            assert!(fewer % 256 == 0 && fewer < 64 * 256, "{}: {fewer}", a.mode);
            let dt = a.device_busy_seconds - b.device_busy_seconds;
            assert!(
                (0.0..0.02 * a.device_busy_seconds).contains(&dt),
                "{}: {dt}",
                a.mode
            );
        }
    }
}

#[test]
fn a_meta_tensor_has_no_values_to_read() {
    use std::sync::Arc;
    use tpuemu_emulator::{Emulator, builtin};
    let meta = Runtime::meta(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap()), 0).unwrap();
    let x = Tensor::empty(&meta, &[4, 8], DType::F32).unwrap();
    let y = x.exp().unwrap();
    let e = y.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("meta tensor"), "{e}");
    y.sync_read().unwrap();
    // `empty` allocates without a kernel; `exp` is one elementwise kernel.
    assert_eq!(meta.metrics().kernels_launched, 1);
}
