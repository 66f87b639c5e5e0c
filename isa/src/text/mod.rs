//! Assembly text: printing instructions and programs, and the assembler that reads them back.
//!
//! `Display` of an [`Instr`](crate::Instr) is its assembly line. The assembler and the program
//! disassembler live in submodules; the disassembler's output re-assembles to identical bytes.

mod display;

pub use display::{fmt_imm, quote};
