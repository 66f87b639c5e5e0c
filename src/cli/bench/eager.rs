//! `tpuemu bench eager`: a model's training step in one execution mode on an emulated chip.
//!
//! The figures are those of [`tpuemu_workloads::run_workload`]: simulated seconds per
//! step on the host clock (operator dispatch, kernel launches, waiting for the device), the
//! kernels it launched, the HBM bytes they moved, matrix-unit utilisation, and this machine's
//! wall time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use tpuemu_backend::Mode;
use tpuemu_backend::runtime::Runtime;
use tpuemu_workloads::{BenchReport, RunMode, Size, Workload, run_workload};

use super::super::CliError;
use super::super::chip::ChipArgs;

/// The workloads.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum WorkloadArg {
    /// Two-layer MLP classifier (batch 256, 512 -> 2048 -> 512, bf16), forward and backward.
    Mlp,
    /// Transformer block with embedding and LM head (2x256 tokens, width 512, 8 heads, SwiGLU
    /// 1408, vocabulary 8192, bf16), forward and backward.
    TransformerBlock,
}

impl From<WorkloadArg> for Workload {
    fn from(w: WorkloadArg) -> Self {
        match w {
            WorkloadArg::Mlp => Workload::Mlp,
            WorkloadArg::TransformerBlock => Workload::TransformerBlock,
        }
    }
}

/// The execution modes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ModeArg {
    /// Each operator launched as called (TorchTPU's default).
    Strict,
    /// Launch-blocking: the host waits for every kernel (`TORCH_TPU_LAUNCH_BLOCKING=1`).
    Debug,
    /// Operators recorded and fused, run at sync points (`TORCH_TPU_DEFER_AND_FUSE=1`).
    Defer,
    /// The whole step compiled into one program (`torch.compile(backend="tpu")`).
    Compile,
}

impl From<ModeArg> for RunMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Strict => RunMode::Eager(Mode::Strict),
            ModeArg::Debug => RunMode::Eager(Mode::Debug),
            ModeArg::Defer => RunMode::Eager(Mode::DeferAndFuse),
            ModeArg::Compile => RunMode::Compile,
        }
    }
}

/// Arguments of `tpuemu bench eager`.
#[derive(Args, Debug)]
pub struct EagerArgs {
    /// The model.
    #[arg(long, value_enum, default_value = "transformer-block")]
    pub workload: WorkloadArg,
    /// The execution mode.
    #[arg(long, value_enum, default_value = "strict")]
    pub mode: ModeArg,
    #[command(flatten)]
    pub chip: ChipArgs,
    /// A small configuration of the model, for quick checks.
    #[arg(long)]
    pub small: bool,
    /// The transformer block's width (a multiple of 128; with `--seq`, one sequence, heads of
    /// 128, SwiGLU of 2.75x the width).
    #[arg(long, requires = "seq", conflicts_with = "small")]
    pub width: Option<usize>,
    /// The transformer block's sequence length (with `--width`).
    #[arg(long, requires = "width")]
    pub seq: Option<usize>,
    /// Measured steps after the warm-up step (figures are per step): 1 to 1000.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = clap::builder::TypedValueParser::map(
            clap::value_parser!(u16).range(1..=1000),
            usize::from
        ),
        allow_negative_numbers = true
    )]
    pub steps: usize,
    /// Write a Chrome trace (Perfetto, chrome://tracing, `tpuemu viz`) of the measured steps.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// Runs one workload in one mode on a fresh emulated chip; writes the trace when asked.
pub fn measure(
    chip: &ChipArgs,
    workload: Workload,
    size: Size,
    mode: RunMode,
    steps: usize,
    trace: Option<&Path>,
) -> Result<BenchReport, CliError> {
    let (_, emu, costs) = chip.runtime_parts()?;
    let rt = Runtime::new(Arc::new(emu)).map_err(|e| CliError::Other(e.to_string()))?;
    rt.set_costs(costs);
    let (report, tr) = run_workload(&rt, workload, size, mode, steps, trace.is_some())
        .map_err(|e| CliError::Other(format!("{} in {}: {e}", workload.name(), mode.name())))?;
    if let (Some(path), Some(tr)) = (trace, tr) {
        std::fs::write(path, tpuemu_isa::trace::chrome::to_chrome_json(&tr)).map_err(|source| {
            CliError::Io {
                path: path.to_path_buf(),
                source,
            }
        })?;
    }
    Ok(report)
}

/// Runs `tpuemu bench eager`.
pub fn run(args: &EagerArgs) -> Result<(), CliError> {
    let size = match (args.width, args.seq) {
        (Some(width), Some(seq)) => Size::Shape { width, seq },
        _ if args.small => Size::Small,
        _ => Size::Full,
    };
    let r = measure(
        &args.chip,
        args.workload.into(),
        size,
        args.mode.into(),
        args.steps,
        args.trace.as_deref(),
    )?;
    if args.json {
        let text = serde_json::to_string_pretty(&r).map_err(|e| CliError::Other(e.to_string()))?;
        return super::super::write_output(None, format!("{text}\n").as_bytes());
    }
    let mut s = format!("{} on {}, {} mode, per step:\n", r.workload, r.chip, r.mode);
    s += &format!(
        "  simulated time    {:>10.3} ms (device busy {:.3} ms)\n",
        r.seconds_simulated * 1e3,
        r.device_busy_seconds * 1e3
    );
    s += &format!(
        "  host work         {:>10.3} ms (device idle, waiting for the host: {:.3} ms)\n",
        r.host_busy_seconds * 1e3,
        r.exposed_host_seconds * 1e3
    );
    let parts: Vec<String> = r
        .host_breakdown_seconds
        .iter()
        .map(|(k, s)| format!("{k} {:.3}", s * 1e3))
        .collect();
    s += &format!("    of which (ms)    {}\n", parts.join(", "));
    let c = &r.host_costs;
    s += &format!(
        "  host costs        dispatch {} ns, view {} ns, record {} ns, launch {} ns, flush {} ns + {} ns an operator, compile {} ns (--set host.FIELD=NS)\n",
        c.op_dispatch_ns,
        c.view_ns,
        c.record_ns,
        c.launch_ns,
        c.flush_ns,
        c.flush_op_ns,
        c.compile_ns
    );
    s += &format!(
        "  operator calls    {:>10} ({} views)\n",
        r.ops, r.view_calls
    );
    s += &format!("  kernels launched  {:>10}\n", r.kernels_launched);
    s += &format!(
        "  HBM bytes         {:>10.2} MiB\n",
        r.hbm_bytes as f64 / (1 << 20) as f64
    );
    s += &format!(
        "  MXU utilisation   {:>10.1} %\n",
        r.mxu_utilization * 100.0
    );
    s += &format!("  host wall time    {:>10.3} s\n", r.host_seconds);
    s += &format!("  loss              {:>10.4}\n", r.loss);
    if let Some(p) = &args.trace {
        s += &format!(
            "  trace             {} (open with `tpuemu viz {}` or ui.perfetto.dev)\n",
            p.display(),
            p.display()
        );
    }
    super::super::write_output(None, s.as_bytes())
}
