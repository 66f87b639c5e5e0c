//! # tpuemu-isa — the hardware contract
//!
//! The bottom layer of tpuemu, with no heavy dependencies:
//! - the instruction set of our TPU-style TensorCore ([`Instr`], decoded once and consumed by the
//!   executor, the disassembler and the cost model), its operand types ([`reg`], [`ops`]), the
//!   DMA descriptor format ([`dma`]);
//! - [`Program`]: instructions plus metadata, and [`ProgramBuilder`] to generate them;
//! - assembly text ([`text`]) and the binary encoding ([`encoding`]);
//! - the validity rules both of them enforce ([`verify`]);
//! - the [`Device`] trait every device implements, and its errors; [`null::NullDevice`], one
//!   that runs nothing, for tests that need no emulator;
//! - the trace schema ([`trace`]) that devices and the backend record and the visualizer reads.
//!
//! The instruction set is documented, with a table of every instruction, in `isa/README.md`.

#![deny(rustdoc::broken_intra_doc_links)]
#![warn(missing_docs)]

pub mod builder;
pub mod device;
pub mod dma;
pub mod encoding;
pub mod instr;
pub mod null;
pub mod ops;
pub mod program;
pub mod reg;
pub mod text;
pub mod trace;
pub mod units;
pub mod verify;

pub use builder::{BuildError, Label, ProgramBuilder};
pub use device::{
    BufferId, ChipId, ChipInfo, Completion, CoreInfo, CoreRef, Counters, DeadlockReport, Device,
    DeviceError, Fault, KernelArg, Launch, LaunchId, LaunchTarget, ProgramId, Topology,
};
pub use encoding::{DecodeError, decode_instr, decode_program, encode_instr, encode_program};
pub use instr::{Addr, DmaShape, Instr, InstrClass, MemRef, Remote, SSrc, Unit, VSrc};
pub use program::{ArgDecl, ArgKind, Program, SmemInit};
pub use reg::{ArgSlot, MReg, Mxu, SReg, Sem, VReg};
pub use text::{AsmError, assemble, disassemble};
