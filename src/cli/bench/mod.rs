//! `tpuemu bench ...`: benchmarks that print simulated and host figures (`--json` for machines).

use clap::Subcommand;

use super::CliError;

pub mod collective;
pub mod collective_model;
pub mod eager;
pub mod gemm;
pub mod host;
pub mod numpy;

/// The benchmarks.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// A generated GEMM kernel on one chip.
    Gemm(gemm::GemmArgs),
    /// A model's training step (MLP or transformer block) in Strict, Debug, DeferAndFuse or
    /// Compile mode.
    Eager(eager::EagerArgs),
    /// A collective (all-gather, reduce-scatter, all-reduce, all-to-all) over a slice of chips,
    /// against the scaling book's ICI and DCN model.
    Collective(collective::CollectiveArgs),
    /// This machine's time for a model's training step, against PyTorch CPU eager (float32)
    /// running the same step side by side.
    Host(host::HostArgs),
}

/// Runs a benchmark.
pub fn run(cmd: &BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Gemm(a) => gemm::run(a),
        BenchCommand::Eager(a) => eager::run(a),
        BenchCommand::Collective(a) => collective::run(a),
        BenchCommand::Host(a) => host::run(a),
    }
}

/// Peak resident memory of this process in bytes (Linux), for the memory figures.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
