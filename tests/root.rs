//! The root package's one integration test binary (one link for the whole suite).
//!
//! Each area is a module in `tests/root/`: add `#[path = "root/NAME.rs"] mod NAME;` here and
//! write `tests/root/NAME.rs` (cargo builds only this file as a test target).
//! Command-line tests run the built binary, `env!("CARGO_BIN_EXE_tpuemu")`.

#[path = "root/cli_asm.rs"]
mod cli_asm;

#[path = "root/cli_bench.rs"]
mod cli_bench;

#[path = "root/emulator.rs"]
mod emulator;

#[path = "root/cli_collective.rs"]
mod cli_collective;

#[path = "root/bit_identity.rs"]
mod bit_identity;

#[path = "root/golden_replay.rs"]
mod golden_replay;

#[path = "root/hostile.rs"]
mod hostile;

#[path = "root/cli_predict.rs"]
mod cli_predict;

#[path = "root/cli_viz.rs"]
mod cli_viz;
