//! Assembly text: printing instructions and programs, and the assembler that reads them back.
//!
//! `Display` of an [`Instr`](crate::Instr) is its assembly line. [`assemble`] reads a whole
//! source file into a [`Program`](crate::Program) (syntax in [`parse`]'s docs and
//! `isa/README.md`); [`disassemble`] prints a program as a source file that assembles back to
//! the same program.

mod disasm;
mod display;
mod error;
mod lexer;
mod mnemonic;
mod mnemonic_mem;
mod operands;
pub mod parse;
mod suggest;

pub use disasm::{disassemble, instr_line};
pub use display::{fmt_imm, quote};
pub use error::{AsmError, AsmErrorKind};
pub use parse::assemble;
pub use suggest::{all_mnemonics, suggest};
