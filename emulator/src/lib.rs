//! # tpuemu-emulator — a cycle-approximate model of TPU chips and pods
//!
//! [`Emulator`] implements the [`tpuemu_isa::Device`] contract for one chip or a slice of
//! chips of a generation described by a [`ChipPreset`] (v4, v5e, v5p, v6e, v7x from public
//! figures, and `scalesim-ws-128`, the SCALE-Sim parity configuration).
//!
//! - Functionally exact: bf16 rounding to nearest even, matrix-unit products of bf16 values
//!   summed in f32 in a defined order, f32 vector math with deterministic transcendentals
//!   ([`numerics`]).
//! - Timed: in-order issue with a register scoreboard and per-unit occupancy, asynchronous DMA
//!   engines over a shared-bandwidth HBM, systolic matrix units (pipelined or SCALE-Sim), and
//!   ICI links between chips ([`ici`]); every unit's busy spans are recorded as trace events.
//! - Faults are values: out-of-bounds accesses, HBM exhaustion, invalid instructions,
//!   semaphore deadlocks, racing DMAs and runs past the [`limits`] come back as
//!   [`tpuemu_isa::DeviceError`]s.
//! - Deterministic: the same program and inputs give the same bits and the same cycles on any
//!   machine and any thread count.
//!
//! See `emulator/README.md` for the timing model, the SCALE-Sim comparison and the figures.

#![deny(rustdoc::broken_intra_doc_links)]

mod bounds;
mod core;
mod device;
pub mod fault;
mod fold;
pub mod ici;
pub mod interrupt;
mod launch;
mod launches;
pub mod limits;
pub mod memory;
pub mod numerics;
pub mod preset;
mod recorder;
pub mod run;
pub mod stats;
mod validate;

pub use device::Emulator;
pub use fault::FaultKind;
pub use launches::KEEP_LAUNCHES;
pub use limits::RunLimits;
pub use preset::{ChipPreset, MxuModel, PresetError, builtin, builtin_names};
pub use run::{ArgInit, RunResult};
pub use stats::{CoreStats, LaunchStats};
pub use validate::validate;
