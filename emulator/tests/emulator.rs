//! The emulator crate's one integration test binary; each area is a module in `tests/emulator/`.

#[path = "emulator/faults.rs"]
mod faults;

#[path = "emulator/issue.rs"]
mod issue;

#[path = "emulator/hostile.rs"]
mod hostile;

#[path = "emulator/mxu_reads.rs"]
mod mxu_reads;
