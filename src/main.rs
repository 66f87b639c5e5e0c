//! The `tpuemu` binary: parses the command line and runs it (see [`tpuemu::cli`]).

use std::process::ExitCode;

use clap::Parser;
use tpuemu::cli::{Cli, run};

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
