//! Benchmark workloads: a training step of a model, run in one execution mode, measured on the
//! simulated clock. What `tpuemu bench eager` and `tpuemu demo` print.
//!
//! Measurement: the model's parameters are uploaded, one warm-up step fills the kernel cache
//! (and, in Compile, builds the graph), then `steps` steps run, each ending as a training loop's
//! step does: the loss is read back to the host (the sync point that flushes DeferAndFuse).
//! Simulated time is the host clock across the measured steps (dispatch, launches and waiting
//! for the device), per step; the counters are per step too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tpuemu_isa::trace::Trace;

use super::{Mlp, MlpConfig, Transformer, TransformerConfig};
use tpuemu_backend::compile::compile;
use tpuemu_backend::error::{Result, TpuError};
use tpuemu_backend::runtime::{HostCosts, Metrics, Mode, Runtime};
use tpuemu_backend::tensor::Tensor;

/// The models a benchmark can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// A two-layer MLP classifier ([`MlpConfig::bench`]).
    Mlp,
    /// A transformer block with embedding and LM head ([`TransformerConfig::demo`]).
    TransformerBlock,
}

impl Workload {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Mlp => "mlp",
            Workload::TransformerBlock => "transformer-block",
        }
    }
}

/// How big the model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Size {
    /// The benchmark's size ([`MlpConfig::bench`], [`TransformerConfig::demo`]).
    #[default]
    Full,
    /// A small configuration for quick checks ([`MlpConfig::small`],
    /// [`TransformerConfig::small`]).
    Small,
    /// The transformer block at another width and sequence length
    /// ([`TransformerConfig::shaped`]; the MLP has no such size).
    Shape {
        /// Model width.
        width: usize,
        /// Tokens per sequence.
        seq: usize,
    },
}

/// How a step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunMode {
    /// An eager mode.
    Eager(Mode),
    /// The step compiled as one graph ([`tpuemu_backend::compile::compile`]).
    Compile,
}

impl RunMode {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            RunMode::Eager(Mode::Strict) => "strict",
            RunMode::Eager(Mode::Debug) => "debug",
            RunMode::Eager(Mode::DeferAndFuse) => "defer",
            RunMode::Compile => "compile",
        }
    }
}

/// What one measured step did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// The workload's name.
    pub workload: String,
    /// The mode's name.
    pub mode: String,
    /// The chip generation.
    pub chip: String,
    /// Measured steps (the figures are per step).
    pub steps: usize,
    /// Simulated seconds of a step, host clock (dispatch, launches, waiting for the device).
    pub seconds_simulated: f64,
    /// Of which the device was running kernels.
    pub device_busy_seconds: f64,
    /// Simulated host work per step: dispatching or recording operators, launching kernels,
    /// flushing, generating kernels (at `host_costs`).
    pub host_busy_seconds: f64,
    /// `host_busy_seconds` by what it was spent on (`Metrics::host_ns_by`: `dispatch`,
    /// `record`, `view`, `launch`, `flush`, ...).
    pub host_breakdown_seconds: BTreeMap<String, f64>,
    /// Of `seconds_simulated`, the time the device sat idle (waiting for the host):
    /// `seconds_simulated - device_busy_seconds`.
    pub exposed_host_seconds: f64,
    /// The host costs the run charged ([`HostCosts`]; `--set host.FIELD=NS` overrides them).
    pub host_costs: HostCosts,
    /// Simulated seconds of the warm-up step (kernel generation, graph compilation).
    pub warmup_seconds_simulated: f64,
    /// Operator calls.
    pub ops: u64,
    /// Of `ops`, view operators (charged `host_costs.view_ns`).
    pub view_calls: u64,
    /// Kernels launched.
    pub kernels_launched: u64,
    /// Bytes kernels moved between HBM and on-chip memory.
    pub hbm_bytes: u64,
    /// Useful matrix-unit FLOPs.
    pub mxu_flops: u64,
    /// `mxu_flops` over the chip's peak for `seconds_simulated`.
    pub mxu_utilization: f64,
    /// Kernel cache hits and misses in the measured steps.
    pub cache_hits: u64,
    /// Kernel cache misses in the measured steps.
    pub cache_misses: u64,
    /// Wall-clock seconds this machine took per step.
    pub host_seconds: f64,
    /// The loss of the last step.
    pub loss: f32,
    /// The full metrics of the measured steps.
    pub metrics: Metrics,
}

/// A step as a function of its inputs: returns the loss first, then the gradients.
type StepFn = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// Builds `workload`'s model on `rt` and returns its step and inputs.
fn model(rt: &Runtime, workload: Workload, size: Size) -> Result<(Arc<StepFn>, Vec<Tensor>)> {
    Ok(match workload {
        Workload::Mlp => {
            let cfg = match size {
                Size::Full => MlpConfig::bench(),
                Size::Small => MlpConfig::small(),
                Size::Shape { .. } => {
                    return Err(TpuError::BadArgs(
                        "a width and sequence length are the transformer block's sizes".into(),
                    ));
                }
            };
            let m = Arc::new(Mlp::new(rt, cfg)?);
            let inputs = vec![m.x.clone(), m.targets.clone()];
            let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
                let r = m.step(&xs[0], &xs[1])?;
                Ok(std::iter::once(r.loss).chain(r.grads).collect())
            };
            (Arc::new(f), inputs)
        }
        Workload::TransformerBlock => {
            let cfg = match size {
                Size::Full => TransformerConfig::demo(),
                Size::Small => TransformerConfig::small(),
                Size::Shape { width, seq } => TransformerConfig::shaped(width, seq)?,
            };
            let m = Arc::new(Transformer::new(rt, cfg)?);
            let inputs = vec![m.tokens.clone(), m.targets.clone()];
            let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
                let r = m.step(&xs[0], &xs[1])?;
                Ok(std::iter::once(r.loss).chain(r.grads).collect())
            };
            (Arc::new(f), inputs)
        }
    })
}

/// Runs `workload` of `size` on `rt` in `mode`: a warm-up step, then `steps` measured steps.
/// With `trace`, the measured steps are profiled and their trace returned.
pub fn run_workload(
    rt: &Runtime,
    workload: Workload,
    size: Size,
    mode: RunMode,
    steps: usize,
    trace: bool,
) -> Result<(BenchReport, Option<Trace>)> {
    if steps == 0 {
        return Err(TpuError::BadArgs("steps must be at least 1".into()));
    }
    rt.set_mode(Mode::Strict)?;
    let (f, inputs) = model(rt, workload, size)?;
    rt.sync()?;
    let mut step: Box<dyn FnMut() -> Result<Vec<Tensor>>> = match mode {
        RunMode::Eager(m) => {
            rt.set_mode(m)?;
            let f = f.clone();
            let inputs = inputs.clone();
            Box::new(move || f(&inputs))
        }
        RunMode::Compile => {
            let g = f.clone();
            let mut c = compile(rt, workload.name(), move |xs: &[Tensor]| g(xs));
            let inputs = inputs.clone();
            Box::new(move || c.call(&inputs))
        }
    };
    // Warm-up.
    let t0 = rt.host_time_ns();
    let out = step()?;
    out[0].sync_read()?;
    rt.sync()?;
    let warmup = (rt.host_time_ns() - t0) / 1e9;
    drop(out);

    rt.reset_metrics();
    if trace {
        rt.set_profiling(true);
        let _ = rt.take_trace("");
    }
    let t0 = rt.host_time_ns();
    let wall = Instant::now();
    let mut loss = 0.0;
    for _ in 0..steps {
        let out = step()?;
        // The loss read back ends the step (a meta runtime times the read without a value).
        if rt.has_values() {
            loss = out[0].to_vec::<f32>()?[0];
        } else {
            out[0].sync_read()?;
        }
        rt.sync()?;
    }
    let host_seconds = wall.elapsed().as_secs_f64() / steps as f64;
    let seconds = (rt.host_time_ns() - t0) / 1e9 / steps as f64;
    let tr = if trace {
        rt.set_profiling(false);
        Some(rt.take_trace(&format!("{} {}", workload.name(), mode.name())))
    } else {
        None
    };
    rt.set_mode(Mode::Strict)?;
    let m = rt.metrics();
    let per = |x: u64| x / steps as u64;
    let peak = rt.chip_info().peak_bf16_flops;
    let report = BenchReport {
        workload: workload.name().into(),
        mode: mode.name().into(),
        chip: rt.device().topology().generation.clone(),
        steps,
        seconds_simulated: seconds,
        device_busy_seconds: m.device_busy_ns / 1e9 / steps as f64,
        host_busy_seconds: m.host_busy_ns / 1e9 / steps as f64,
        host_breakdown_seconds: m
            .host_ns_by
            .iter()
            .map(|(k, ns)| (k.clone(), ns / 1e9 / steps as f64))
            .collect(),
        exposed_host_seconds: (seconds - m.device_busy_ns / 1e9 / steps as f64).max(0.0),
        host_costs: rt.costs(),
        warmup_seconds_simulated: warmup,
        ops: per(m.ops),
        view_calls: per(m.view_calls),
        kernels_launched: per(m.kernels_launched),
        hbm_bytes: per(m.hbm_bytes),
        mxu_flops: per(m.mxu_flops),
        mxu_utilization: if seconds > 0.0 {
            per(m.mxu_flops) as f64 / (seconds * peak)
        } else {
            0.0
        },
        cache_hits: per(m.cache_hits),
        cache_misses: per(m.cache_misses),
        host_seconds,
        loss,
        metrics: m,
    };
    Ok((report, tr))
}
