//! `tpuemu demo`: the project's main job. A transformer block (embedding, RMSNorm, causal
//! attention, SwiGLU MLP, cross-entropy) trains one step forward and backward on an emulated
//! chip in Strict, DeferAndFuse and Compile mode; the figures go side by side and each mode
//! leaves a trace to open in the viewer.

use std::path::PathBuf;

use clap::Args;
use tpuemu_backend::Mode;
use tpuemu_workloads::{BenchReport, RunMode, Size, Workload};

use super::CliError;
use super::bench::eager::measure;
use super::chip::ChipArgs;

/// Arguments of `tpuemu demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub chip: ChipArgs,
    /// Directory for the traces (one Chrome trace per mode).
    #[arg(long, default_value = "tpuemu-demo")]
    pub out: PathBuf,
    /// A small configuration of the block (2 x 32 tokens, width 128), for quick checks.
    #[arg(long)]
    pub small: bool,
    /// Print JSON for machines (the three reports).
    #[arg(long)]
    pub json: bool,
}

/// Runs `tpuemu demo`.
pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    // Everything the user gave is checked before the first line of progress.
    args.chip.runtime_parts()?;
    std::fs::create_dir_all(&args.out).map_err(|source| CliError::Io {
        path: args.out.clone(),
        source,
    })?;
    let modes = [
        ("strict", RunMode::Eager(Mode::Strict)),
        ("defer", RunMode::Eager(Mode::DeferAndFuse)),
        ("compile", RunMode::Compile),
    ];
    let mut reports: Vec<(BenchReport, PathBuf)> = Vec::new();
    for (name, mode) in modes {
        if !args.json {
            eprintln!("running the transformer block in {name} mode...");
        }
        let path = args.out.join(format!("{name}.json"));
        let size = if args.small { Size::Small } else { Size::Full };
        let r = measure(
            &args.chip,
            Workload::TransformerBlock,
            size,
            mode,
            1,
            Some(&path),
        )?;
        reports.push((r, path));
    }
    if args.json {
        let v: Vec<&BenchReport> = reports.iter().map(|(r, _)| r).collect();
        let text = serde_json::to_string_pretty(&v).map_err(|e| CliError::Other(e.to_string()))?;
        return super::write_output(None, format!("{text}\n").as_bytes());
    }
    super::write_output(None, table(&reports, args.small).as_bytes())
}

/// The side-by-side table, the gains explained, and where the traces are.
fn table(reports: &[(BenchReport, PathBuf)], small: bool) -> String {
    let r0 = &reports[0].0;
    let sizes = if small {
        "2 x 32 tokens, width 128, 4 heads, SwiGLU 256, vocabulary 512, bf16"
    } else {
        "2 x 256 tokens, width 512, 8 heads, SwiGLU 1408, vocabulary 8192, bf16"
    };
    let mut s = format!(
        "\ntpuemu demo: one training step of a transformer block on {} ({sizes})\n\n",
        r0.chip
    );
    s += &format!(
        "{:<26}{:>14}{:>14}{:>14}\n",
        "", "Strict", "DeferAndFuse", "Compile"
    );
    let row = |label: &str, f: &dyn Fn(&BenchReport) -> String| {
        let mut line = format!("{label:<26}");
        for (r, _) in reports {
            line += &format!("{:>14}", f(r));
        }
        line + "\n"
    };
    s += &row("simulated time (ms)", &|r| {
        format!("{:.3}", r.seconds_simulated * 1e3)
    });
    s += &row("  vs Strict", &|r| {
        format!("{:.2}x", r.seconds_simulated / r0.seconds_simulated)
    });
    s += &row("device busy (ms)", &|r| {
        format!("{:.3}", r.device_busy_seconds * 1e3)
    });
    s += &row("host work (ms)", &|r| {
        format!("{:.3}", r.host_busy_seconds * 1e3)
    });
    s += &row("device idle (ms)", &|r| {
        format!("{:.3}", r.exposed_host_seconds * 1e3)
    });
    s += &row("host operator calls", &|r| r.ops.to_string());
    s += &row("kernels launched", &|r| r.kernels_launched.to_string());
    s += &row("HBM bytes moved (MiB)", &|r| {
        format!("{:.1}", r.hbm_bytes as f64 / (1u64 << 20) as f64)
    });
    s += &row("MXU utilisation", &|r| {
        format!("{:.1}%", r.mxu_utilization * 100.0)
    });
    s += &row("host wall time (s)", &|r| format!("{:.2}", r.host_seconds));
    s += &row("loss", &|r| format!("{:.4}", r.loss));
    if let (Some((d, _)), Some((c, _))) = (reports.get(1), reports.get(2)) {
        s += &format!(
            "\nDeferAndFuse launches {} fewer kernels than Strict ({} instead of {}) and moves {:.1} MiB less through HBM: \
fused kernels keep intermediates on chip, and the host records operators instead of launching each one. \
Compile runs the step as {} program with the same fusion and planned memory.\n",
            r0.kernels_launched.saturating_sub(d.kernels_launched),
            d.kernels_launched,
            r0.kernels_launched,
            (r0.hbm_bytes as f64 - d.hbm_bytes as f64) / (1u64 << 20) as f64,
            if c.kernels_launched == 1 {
                "one".to_string()
            } else {
                c.kernels_launched.to_string()
            },
        );
    }
    let c = &r0.host_costs;
    s += &format!(
        "\nHost model (simulated, `--set host.FIELD=NS` to change): dispatching an operator {} µs, a view operator \
{} µs, recording one for DeferAndFuse {} µs, launching a kernel {} µs, a flush {} µs and {} µs an operator, generating a kernel {} µs.\n",
        c.op_dispatch_ns / 1e3,
        c.view_ns / 1e3,
        c.record_ns / 1e3,
        c.launch_ns / 1e3,
        c.flush_ns / 1e3,
        c.flush_op_ns / 1e3,
        c.compile_ns / 1e3
    );
    s += "\nTraces (one per mode):\n";
    for (r, p) in reports {
        s += &format!("  {:<8} {}\n", r.mode, p.display());
    }
    if let Some((_, p)) = reports.get(1) {
        s += &format!(
            "Open one with `tpuemu viz {}` (or load it in https://ui.perfetto.dev or chrome://tracing).\n",
            p.display()
        );
    }
    s
}
