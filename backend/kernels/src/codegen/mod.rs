//! Code generation helpers shared by every kernel generator: the vocabulary kernels are written
//! in.
//!
//! - [`Emitter`] wraps the ISA's [`ProgramBuilder`](tpuemu_isa::ProgramBuilder) (one method per
//!   instruction, reachable through the emitter) with what generated code needs again and
//!   again: a cache of scalar registers holding constants (so an unrolled schedule does not
//!   reload the same value), DMA descriptors interned into SMEM, and small idioms
//!   ([`Emitter::add_scaled`], [`Emitter::mask_below`]); [`RegPool`] hands out scalar registers.
//! - [`loops`]: counted loops ([`Emitter::begin_loop`], [`Emitter::end_loop`]).
//! - [`args`]: the argument prologue — buffers, their offset scalars, byte offsets.
//! - [`dma`]: waiting for DMAs by bytes, and [`PingPong`] for double buffering.
//! - [`parts`]: kernels split over a chip's TensorCores (megacore).
//! - [`link`]: kernels linked into one whole-graph program (sections run back to back).

pub mod args;
pub mod dma;
mod emitter;
pub mod link;
pub mod loops;
pub mod parts;

pub use args::BufferArgs;
pub use dma::{PingPong, hbm_vmem_desc};
pub use emitter::{Emitter, RegPool};
pub use loops::CountedLoop;
pub use parts::{PART_ARG, emit_parts, is_split, part_range};
