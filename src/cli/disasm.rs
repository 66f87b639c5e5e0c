//! `tpuemu disasm FILE.bin [-o FILE.s]`: prints a program binary as assembly (to standard
//! output by default). The text assembles back to the same bytes.

use std::path::PathBuf;

use super::{CliError, write_output};

/// Arguments of `tpuemu disasm`.
#[derive(clap::Args, Debug)]
pub struct DisasmArgs {
    /// The program binary.
    pub input: PathBuf,
    /// Where to write the assembly (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Runs `tpuemu disasm`.
pub fn run(args: &DisasmArgs) -> Result<(), CliError> {
    let bytes = super::run::read_bounded(&args.input, super::run::MAX_PROGRAM_BYTES, "a program")?;
    let program = tpuemu_isa::decode_program(&bytes).map_err(|source| CliError::Decode {
        path: args.input.clone(),
        source,
    })?;
    let text = tpuemu_isa::disassemble(&program);
    write_output(args.output.as_deref(), text.as_bytes())
}
