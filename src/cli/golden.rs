//! `tpuemu golden run DIR`: replay PyTorch's golden cases through the backend and compare.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tpuemu_golden::{Mode, RunOptions, run_dir};

use super::CliError;
use super::chip::ChipArgs;
use crate::golden_bridge::BackendExecutor;

/// `tpuemu golden ...`.
#[derive(Subcommand, Debug)]
pub enum GoldenCommand {
    /// Run every case in a directory (recursively) and report per operator.
    Run(RunArgs),
}

/// Arguments of `tpuemu golden run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Directory of cases (e.g. golden/cases).
    pub dir: PathBuf,
    /// Execution mode: strict, debug, defer, compile, or meta (dtypes and shapes only, nothing
    /// computed: PyTorch's meta device).
    #[arg(long, default_value = "strict")]
    pub mode: String,
    #[command(flatten)]
    pub chip: ChipArgs,
    /// Write the JSON report (every case: operator, dtypes, shapes, status, errors) here.
    #[arg(long, value_name = "REPORT")]
    pub json: Option<PathBuf>,
    /// Only cases whose id, file or operators contain this text.
    #[arg(long)]
    pub filter: Option<String>,
}

/// Runs `tpuemu golden`.
pub fn run(cmd: &GoldenCommand) -> Result<(), CliError> {
    let GoldenCommand::Run(args) = cmd;
    let mode: Mode = args
        .mode
        .parse()
        .map_err(|e| CliError::Other(format!("--mode: {e}")))?;
    let (preset, emu) = args.chip.emulator()?;
    let name = preset.name.clone();
    let mut exec = BackendExecutor::on(emu, mode).map_err(CliError::Other)?;
    let opts = RunOptions {
        mode,
        chip: Some(name),
        filter: args.filter.clone(),
    };
    // A panic inside a case is a failed case with its message in the report; the runner catches
    // it with nothing printed (no backtrace in the middle of the output: `tpuemu_golden::quiet`).
    let report =
        run_dir(&args.dir, &mut exec, &opts).map_err(|e| CliError::Other(e.to_string()))?;
    let mut out = Vec::new();
    report
        .print_table(&mut out)
        .map_err(|source| CliError::Io {
            path: "-".into(),
            source,
        })?;
    super::write_output(None, &out)?;
    if let Some(p) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())
            .map_err(|e| CliError::Other(e.to_string()))?;
        std::fs::write(p, text).map_err(|source| CliError::Io {
            path: p.clone(),
            source,
        })?;
    }
    if report.success() {
        Ok(())
    } else {
        Err(CliError::Failed(report.summary_line()))
    }
}
