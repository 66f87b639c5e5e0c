//! The root package's one integration test binary (one link for the whole suite).
//!
//! Each area is a module in `tests/root/`: add `mod NAME;` here and `tests/root/NAME.rs`.
//! Command-line tests run the built binary, `env!("CARGO_BIN_EXE_tpuemu")`.

mod cli_asm;
