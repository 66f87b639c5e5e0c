//! Code generation helpers shared by every kernel generator.
//!
//! [`Emitter`] wraps the ISA's [`ProgramBuilder`](tpuemu_isa::ProgramBuilder) with what
//! generated code needs again and again: a cache of scalar registers holding constants (so an
//! unrolled schedule does not reload the same value), DMA descriptors interned into SMEM, and
//! scratch register allocation.

mod emitter;

pub use emitter::{Emitter, RegPool};
