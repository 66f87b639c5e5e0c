//! `tpuemu asm FILE.s [-o FILE.bin]`: assembles a source file into a program binary
//! (by default next to the source, with the extension `.bin`).

use std::path::{Path, PathBuf};

use super::{CliError, write_output};

/// Arguments of `tpuemu asm`.
#[derive(clap::Args, Debug)]
pub struct AsmArgs {
    /// The assembly source.
    pub input: PathBuf,
    /// Where to write the program binary (default: the input with the extension `.bin`).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Reads a source file and assembles it, with errors that point into the file.
pub fn assemble_file(path: &Path) -> Result<tpuemu_isa::Program, CliError> {
    let bytes = super::run::read_bounded(path, super::run::MAX_PROGRAM_BYTES, "a program")?;
    let src = String::from_utf8(bytes)
        .map_err(|_| CliError::Other(format!("{}: the file is not UTF-8 text", path.display())))?;
    tpuemu_isa::assemble(&src).map_err(|error| CliError::Asm {
        path: path.to_path_buf(),
        source_line: src
            .split('\n')
            .nth(error.line.saturating_sub(1))
            .unwrap_or("")
            .trim_end_matches('\r')
            .to_string(),
        error: Box::new(error),
    })
}

/// Runs `tpuemu asm`.
pub fn run(args: &AsmArgs) -> Result<(), CliError> {
    let program = assemble_file(&args.input)?;
    let output = match &args.output {
        Some(o) => o.clone(),
        None => args.input.with_extension("bin"),
    };
    if output == args.input {
        return Err(CliError::Other(format!(
            "{}: the output would overwrite the input; name one with -o",
            output.display()
        )));
    }
    write_output(Some(&output), &tpuemu_isa::encode_program(&program))
}
