//! The `tpuemu` command from the wheel: pip installs a `tpuemu` script (`tpuemu_cli`) that calls
//! [`cli_main`], the same command line as the Rust binary (`tpuemu::cli`), so a Python user
//! needs no cargo for `viz`, `predict`, `bench`, `chips`, `golden` and the rest.

use clap::Parser;
use pyo3::prelude::*;
use tpuemu::cli::{Cli, run};

/// Runs the command line `argv` (its first item the program's name) and returns the exit
/// status: 0, 1 when the command failed (its report printed to stderr), 2 for a usage error
/// (clap's message printed; `--help` and `--version` print and return 0). Python's lock is
/// released while it runs.
#[pyfunction]
pub(crate) fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(|| match Cli::try_parse_from(argv) {
        Err(e) => {
            // Printing to a closed pipe is not worth a second error.
            let _ = e.print();
            e.exit_code()
        }
        Ok(cli) => match run(cli) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{}", e.report());
                1
            }
        },
    })
}
