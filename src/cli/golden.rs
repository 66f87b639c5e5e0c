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
    /// Execution mode: strict, debug, defer or compile.
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
    let mode: Mode = args.mode.parse().map_err(CliError::Other)?;
    let preset = args.chip.preset()?;
    let name = preset.name.clone();
    let mut exec = BackendExecutor::new(preset, mode).map_err(CliError::Other)?;
    let opts = RunOptions {
        mode,
        chip: Some(name),
        filter: args.filter.clone(),
    };
    let report = {
        // A panic inside a case is a failed case with its message in the report; the
        // default hook would also print it with a backtrace in the middle of the output.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = run_dir(&args.dir, &mut exec, &opts);
        std::panic::set_hook(hook);
        r
    }
    .map_err(|e| CliError::Other(e.to_string()))?;
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
