//! What the rules' tests share: a pattern run in Strict and in DeferAndFuse (one graph, no
//! size limit) on an emulated v5e, with the kernels and HBM bytes of each and the joins each
//! rule made.

use std::collections::BTreeMap;
use std::sync::Arc;

use tpuemu_emulator::{ChipPreset, Emulator, builtin};

use tpuemu_backend::runtime::{Metrics, Mode, Runtime};
use tpuemu_backend::tensor::Tensor;

/// Deterministic values in [-1, 1).
pub(super) fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// One pattern run both ways.
pub(super) struct Both {
    /// The results, as f32, in Strict.
    pub strict: Vec<Vec<f32>>,
    /// The results, as f32, fused.
    pub fused: Vec<Vec<f32>>,
    /// Kernels the fused run launched.
    pub kernels: u64,
    /// Bytes the fused run's kernels moved through HBM.
    pub hbm_bytes: u64,
    /// Kernels the Strict run launched.
    pub strict_kernels: u64,
    /// Bytes the Strict run's kernels moved through HBM.
    pub strict_hbm_bytes: u64,
    /// Operators the fused run merged into a group, by rule.
    pub joins: BTreeMap<String, u64>,
}

impl Both {
    /// The joins as `(rule, count)` pairs, for comparing with a hand-derived list.
    pub fn joins(&self) -> Vec<(&str, u64)> {
        self.joins.iter().map(|(k, v)| (k.as_str(), *v)).collect()
    }
}

/// A runtime on an emulated chip.
fn runtime_on(chip: ChipPreset) -> Runtime {
    let emu = Emulator::new(chip).expect("emulator");
    Runtime::new(Arc::new(emu)).expect("runtime")
}

/// The results of `body` in `mode`, and the metrics of running it.
fn run(
    chip: &ChipPreset,
    mode: Mode,
    setup: &dyn Fn(&Runtime) -> Vec<Tensor>,
    body: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
) -> (Vec<Vec<f32>>, Metrics) {
    let rt = runtime_on(chip.clone());
    rt.set_max_pending_ops(100_000);
    let inputs = setup(&rt);
    rt.sync().expect("inputs");
    rt.set_mode(mode).expect("mode");
    rt.reset_metrics();
    let outs = body(&inputs);
    rt.sync().expect("the pattern runs");
    let m = rt.metrics();
    rt.set_mode(Mode::Strict).expect("mode");
    let values = outs
        .iter()
        .map(|t| {
            t.to_dtype(tpuemu_backend::dtype::DType::F32)
                .and_then(|t| t.to_vec::<f32>())
                .expect("read back")
        })
        .collect();
    (values, m)
}

/// Runs `body` on the tensors `setup` uploads, in Strict and in DeferAndFuse, on a v5e.
pub(super) fn run_both(
    setup: impl Fn(&Runtime) -> Vec<Tensor>,
    body: impl Fn(&[Tensor]) -> Vec<Tensor>,
) -> Both {
    run_both_on(builtin("v5e").expect("v5e is built in"), setup, body)
}

/// [`run_both`] on another chip.
pub(super) fn run_both_on(
    chip: ChipPreset,
    setup: impl Fn(&Runtime) -> Vec<Tensor>,
    body: impl Fn(&[Tensor]) -> Vec<Tensor>,
) -> Both {
    let (strict, s) = run(&chip, Mode::Strict, &setup, &body);
    let (fused, f) = run(&chip, Mode::DeferAndFuse, &setup, &body);
    Both {
        strict,
        fused,
        kernels: f.kernels_launched,
        hbm_bytes: f.hbm_bytes,
        strict_kernels: s.kernels_launched,
        strict_hbm_bytes: s.hbm_bytes,
        joins: f.fusion_joins,
    }
}
