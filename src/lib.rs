//! tpuemu: a TPU you can run on your laptop and in CI.
//!
//! The facade crate: it re-exports the workspace crates and holds the `tpuemu` command line
//! ([`cli`]).

pub use tpuemu_backend as backend;
pub use tpuemu_dtensor as dtensor;
pub use tpuemu_emulator as emulator;
pub use tpuemu_golden as golden;
pub use tpuemu_isa as isa;
pub use tpuemu_workloads as workloads;

pub mod cli;
pub mod golden_bridge;
