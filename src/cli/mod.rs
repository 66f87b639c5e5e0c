//! The `tpuemu` command line: the clap definitions and the dispatcher.
//!
//! One file per subcommand; each defines its arguments struct (clap `Args`) and a `run`
//! function returning `Result<(), CliError>`. To add a subcommand, add a file, a variant to
//! [`Command`] and an arm to [`run`]. Errors are values: `main` prints [`CliError::report`] to
//! stderr and exits with status 1 (clap itself exits with 2 on usage errors).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub mod asm;
pub mod bench;
pub mod chip;
pub mod chips;
pub mod demo;
pub mod disasm;
pub mod golden;
pub mod ops;
pub mod predict;
pub mod predict_table;
pub mod report;
pub mod run;
pub mod viz;

/// A TPU you can run on your laptop: assembler, emulator and tools.
#[derive(Parser, Debug)]
#[command(name = "tpuemu", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The main job: a transformer block's training step in Strict, DeferAndFuse and Compile
    /// mode, side by side, with a trace per mode.
    Demo(demo::DemoArgs),
    /// Assemble a program (`.s`) into a program binary.
    Asm(asm::AsmArgs),
    /// Print a program binary as assembly.
    Disasm(disasm::DisasmArgs),
    /// List the chip presets with their derived peak FLOP/s, bandwidth and memory sizes.
    Chips(chips::ChipsArgs),
    /// Run a program on an emulated chip and report cycles, time and per-unit utilisation.
    Run(run::RunArgs),
    /// Benchmarks (simulated and host figures).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// List every registered ATen overload with its dtypes and implementation.
    Ops(ops::OpsArgs),
    /// Check the backend against PyTorch's golden cases.
    #[command(subcommand)]
    Golden(golden::GoldenCommand),
    /// Open a trace, or a distributed run's directory of rank traces, in the timeline viewer (or render it to a PNG).
    Viz(viz::VizArgs),
    /// Predict a large model's training step on a slice: step time, tokens/s/chip, MFU, the
    /// breakdown, per-chip HBM and whether it fits (the backend's kernels and collectives in
    /// timing-only mode).
    Predict(predict::PredictArgs),
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file (`-` for standard output).
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The assembler rejected the source.
    #[error("{path}:{}:{}: error: {}", error.line, error.col, error.message())]
    Asm {
        /// The source file.
        path: PathBuf,
        /// The error.
        error: Box<tpuemu_isa::AsmError>,
        /// The offending source line, for the caret display.
        source_line: String,
    },
    /// A program binary could not be decoded.
    #[error("{path}: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: tpuemu_isa::DecodeError,
    },
    /// Anything else the user can fix.
    #[error("{0}")]
    Other(String),
    /// The command ran and what it checked did not hold (the report is already printed).
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The text to print on stderr: `error: ...`, or for assembly errors
    /// `FILE:LINE:COL: error: message` followed by the source line and a caret.
    pub fn report(&self) -> String {
        match self {
            CliError::Asm {
                error, source_line, ..
            } => {
                let gutter = error.line.to_string();
                let pad = " ".repeat(gutter.len());
                let width = error.token.chars().count().max(1);
                let indent: String = source_line
                    .chars()
                    .take(error.col.saturating_sub(1))
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                format!(
                    "{self}\n{pad} |\n{gutter} | {source_line}\n{pad} | {indent}{}",
                    "^".repeat(width)
                )
            }
            other => format!("error: {other}"),
        }
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Asm(args) => asm::run(&args),
        Command::Disasm(args) => disasm::run(&args),
        Command::Chips(args) => chips::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Bench(cmd) => bench::run(&cmd),
        Command::Ops(args) => ops::run(&args),
        Command::Golden(cmd) => golden::run(&cmd),
        Command::Viz(args) => viz::run(&args),
        Command::Predict(args) => predict::run(&args),
    }
}

/// Writes `bytes` to `path`, or to standard output when `path` is `None`. A closed pipe on
/// standard output is not an error.
pub(crate) fn write_output(path: Option<&std::path::Path>, bytes: &[u8]) -> Result<(), CliError> {
    use std::io::Write;
    match path {
        Some(p) => std::fs::write(p, bytes).map_err(|source| CliError::Io {
            path: p.to_path_buf(),
            source,
        }),
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(bytes).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Io {
                    path: "-".into(),
                    source: e,
                }),
                _ => Ok(()),
            }
        }
    }
}
