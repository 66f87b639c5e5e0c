//! `tpuemu viz RUN [RUN2]`: the timeline viewer, or a PNG of it with `--screenshot`. A run is
//! a trace file or a directory of a distributed run's rank traces (`tpuemu.trace` under
//! `torchrun` writes `step.rank0.json`, `step.rank1.json`, ...), merged into one timeline with
//! a chip per rank.

use std::path::PathBuf;

use clap::Args;

use super::CliError;

/// Arguments of `tpuemu viz`.
#[derive(Args, Debug)]
pub struct VizArgs {
    /// One run, or two to compare on a shared time axis (the first above the second). Each is
    /// a trace file (Chrome trace JSON) or a run directory: its *.json rank traces (one per
    /// rank of a torchrun job) merge into one timeline, rank N on chip N, with flows joining
    /// each collective across the ranks.
    #[arg(required = true, num_args = 1..=2, value_name = "TRACE.json|RUN_DIR")]
    pub traces: Vec<PathBuf>,
    /// Render the whole run(s) to this PNG instead of opening a window (no display or GPU
    /// needed).
    #[arg(long, value_name = "OUT.png")]
    pub screenshot: Option<PathBuf>,
    /// Screenshot width in pixels.
    #[arg(long, default_value_t = tpuemu_visualizer::DEFAULT_WIDTH, allow_negative_numbers = true)]
    pub width: u32,
    /// Screenshot height in pixels.
    #[arg(long, default_value_t = tpuemu_visualizer::DEFAULT_HEIGHT, allow_negative_numbers = true)]
    pub height: u32,
}

/// Runs `tpuemu viz`.
pub fn run(args: &VizArgs) -> Result<(), CliError> {
    let err = |e: tpuemu_visualizer::VizError| CliError::Other(e.to_string());
    match &args.screenshot {
        Some(out) => {
            let info = tpuemu_visualizer::screenshot(&args.traces, out, args.width, args.height)
                .map_err(err)?;
            let text = format!(
                "wrote {} ({}x{}, {} spans)\n",
                info.path.display(),
                info.width,
                info.height,
                info.spans
            );
            super::write_output(None, text.as_bytes())
        }
        None => tpuemu_visualizer::run_viewer(&args.traces).map_err(err),
    }
}
