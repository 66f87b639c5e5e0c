//! The `tpuemu` binary: parses the command line and runs it (see [`tpuemu::cli`]).

use std::process::ExitCode;

use clap::Parser;
use tpuemu::cli::{Cli, run};

/// mimalloc: the eager host path allocates small objects per operator (see the workspace's
/// Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.report());
            ExitCode::FAILURE
        }
    }
}
