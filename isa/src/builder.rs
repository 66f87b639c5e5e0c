//! `ProgramBuilder`: generating programs from Rust.
//!
//! Compilers (the backend's kernel generators, user kernels) build programs instruction by
//! instruction — one method per instruction, named after its mnemonic (`sadd`, `vld`, `mxu_lw`,
//! `sem_wait`, ...) — with forward labels, argument slots, SMEM data and profiling regions:
//!
//! ```
//! use tpuemu_isa::{ProgramBuilder, SReg, ops::CmpOp};
//! let mut b = ProgramBuilder::new("count_to_ten");
//! let (i, n, t) = (SReg::n(1), SReg::n(2), SReg::n(3));
//! b.smov(n, 10);
//! let top = b.here();
//! b.sadd(i, i, 1).scmp(CmpOp::Lt, t, i, n).brnz(t, top);
//! let program = b.finish().unwrap();
//! assert_eq!(program.instrs.len(), 4);
//! assert_eq!(program.instrs[2].to_string(), "scmp.lt s3, s1, s2");
//! ```
//!
//! SMEM layout: words 0..64 (bytes 0..256) hold the arguments at launch; data reserved with
//! [`ProgramBuilder::smem_data`] or [`ProgramBuilder::smem_alloc`] starts at byte
//! [`SMEM_DATA_BASE`].

use std::collections::HashMap;

use crate::instr::{Instr, SSrc};
use crate::ops::BrCond;
use crate::program::{ArgDecl, ArgKind, Program, SmemInit};
use crate::reg::{ArgSlot, MAX_ARGS, SReg};

mod instrs;

pub use instrs::VAccess;

/// First SMEM byte available to program data (after the 64 argument words).
pub const SMEM_DATA_BASE: u32 = 4 * MAX_ARGS as u32;

/// A place in the program that branches can name before it is bound.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Label(u32);

/// Why a program could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A branch names a label that was never bound.
    #[error("label {0} is used but never bound")]
    UnboundLabel(u32),
    /// Too many argument slots.
    #[error("a program may have at most {MAX_ARGS} arguments")]
    TooManyArgs,
    /// Two arguments share a name.
    #[error("argument `{0}` is declared twice")]
    DuplicateArg(String),
    /// Too many distinct marker names.
    #[error("a program may name at most 65536 regions")]
    TooManyMarkers,
}

/// Builds a [`Program`].
#[derive(Debug, Clone)]
pub struct ProgramBuilder {
    program: Program,
    labels: Vec<Option<u32>>,
    fixups: Vec<(usize, Label)>,
    marker_ids: HashMap<String, u16>,
    smem_next: u32,
    error: Option<BuildError>,
}

impl ProgramBuilder {
    /// A builder for a program called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        ProgramBuilder {
            program: Program::new(name),
            labels: Vec::new(),
            fixups: Vec::new(),
            marker_ids: HashMap::new(),
            smem_next: SMEM_DATA_BASE,
            error: None,
        }
    }

    /// Records the ATen operator the program implements.
    pub fn source_op(&mut self, op: impl Into<String>) -> &mut Self {
        self.program.source_op = Some(op.into());
        self
    }

    /// Records the fusion group the program implements.
    pub fn fusion_group(&mut self, group: u64) -> &mut Self {
        self.program.fusion_group = Some(group);
        self
    }

    /// Declares the next argument slot.
    pub fn arg(&mut self, name: impl Into<String>, kind: ArgKind) -> ArgSlot {
        let name = name.into();
        if self.program.args.iter().any(|a| a.name == name) {
            self.error
                .get_or_insert(BuildError::DuplicateArg(name.clone()));
        }
        let index = self.program.args.len();
        match ArgSlot::new(index as u8).filter(|_| index < MAX_ARGS as usize) {
            Some(slot) => {
                self.program.args.push(ArgDecl { name, kind });
                slot
            }
            None => {
                self.error.get_or_insert(BuildError::TooManyArgs);
                ArgSlot::n(0)
            }
        }
    }

    /// Declares a buffer argument.
    pub fn buffer(&mut self, name: impl Into<String>) -> ArgSlot {
        self.arg(name, ArgKind::Buffer)
    }

    /// Declares a scalar argument; its value is SMEM word `slot` at launch.
    pub fn scalar(&mut self, name: impl Into<String>) -> ArgSlot {
        self.arg(name, ArgKind::Scalar)
    }

    /// Reserves `words` SMEM words (zero at launch); returns the byte address.
    pub fn smem_alloc(&mut self, words: usize) -> u32 {
        let addr = self.smem_next;
        self.smem_next += 4 * words as u32;
        addr
    }

    /// Reserves SMEM words preloaded with `words`; returns the byte address.
    pub fn smem_data(&mut self, words: &[u32]) -> u32 {
        let addr = self.smem_alloc(words.len());
        if !words.is_empty() {
            self.program.smem_init.push(SmemInit {
                addr,
                words: words.to_vec(),
            });
        }
        addr
    }

    /// SMEM bytes used so far (arguments area included).
    pub fn smem_used(&self) -> u32 {
        self.smem_next
    }

    /// Appends an instruction.
    pub fn push(&mut self, instr: Instr) -> &mut Self {
        self.program.instrs.push(instr);
        self
    }

    /// Index of the next instruction.
    pub fn pc(&self) -> u32 {
        self.program.instrs.len() as u32
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() as u32 - 1)
    }

    /// Binds `label` to the next instruction.
    pub fn bind(&mut self, label: Label) -> &mut Self {
        self.labels[label.0 as usize] = Some(self.pc());
        self
    }

    /// A label bound to the next instruction.
    pub fn here(&mut self) -> Label {
        let l = self.label();
        self.bind(l);
        l
    }

    fn branch(&mut self, instr: Instr, target: Label) -> &mut Self {
        self.fixups.push((self.program.instrs.len(), target));
        self.push(instr)
    }

    /// `br label`.
    pub fn br(&mut self, target: Label) -> &mut Self {
        self.branch(Instr::Br { target: 0 }, target)
    }

    /// `brz reg, label`.
    pub fn brz(&mut self, reg: SReg, target: Label) -> &mut Self {
        self.branch(
            Instr::BrIf {
                cond: BrCond::Zero,
                reg,
                target: 0,
            },
            target,
        )
    }

    /// `brnz reg, label`.
    pub fn brnz(&mut self, reg: SReg, target: Label) -> &mut Self {
        self.branch(
            Instr::BrIf {
                cond: BrCond::NonZero,
                reg,
                target: 0,
            },
            target,
        )
    }

    /// Opens a named profiling region.
    pub fn mark_begin(&mut self, name: &str) -> &mut Self {
        let id = match self.marker_ids.get(name) {
            Some(id) => *id,
            None => {
                let Ok(id) = u16::try_from(self.program.markers.len()) else {
                    self.error.get_or_insert(BuildError::TooManyMarkers);
                    return self;
                };
                self.program.markers.push(name.to_string());
                self.marker_ids.insert(name.to_string(), id);
                id
            }
        };
        self.push(Instr::MarkBegin { name: id })
    }

    /// Closes the innermost profiling region.
    pub fn mark_end(&mut self) -> &mut Self {
        self.push(Instr::MarkEnd)
    }

    /// Resolves labels and returns the program.
    pub fn finish(mut self) -> Result<Program, BuildError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        for (pc, label) in std::mem::take(&mut self.fixups) {
            let target = self.labels[label.0 as usize].ok_or(BuildError::UnboundLabel(label.0))?;
            let i = &mut self.program.instrs[pc];
            *i = i.with_branch_target(target);
        }
        Ok(self.program)
    }
}

impl From<SReg> for SSrc {
    fn from(r: SReg) -> Self {
        SSrc::Reg(r)
    }
}

impl From<i32> for SSrc {
    fn from(i: i32) -> Self {
        SSrc::Imm(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_and_backward_labels_resolve() {
        let mut b = ProgramBuilder::new("t");
        let end = b.label();
        let top = b.here();
        b.brz(SReg::n(1), end);
        b.br(top);
        b.bind(end);
        b.halt();
        let p = b.finish().unwrap();
        assert_eq!(p.instrs[0].branch_target(), Some(2));
        assert_eq!(p.instrs[1].branch_target(), Some(0));
    }

    #[test]
    fn unbound_label_is_an_error() {
        let mut b = ProgramBuilder::new("t");
        let l = b.label();
        b.br(l);
        assert_eq!(b.finish(), Err(BuildError::UnboundLabel(0)));
    }

    #[test]
    fn markers_are_interned_and_data_follows_args() {
        let mut b = ProgramBuilder::new("t");
        b.buffer("x");
        b.mark_begin("a")
            .mark_end()
            .mark_begin("b")
            .mark_end()
            .mark_begin("a");
        let d = b.smem_data(&[1, 2]);
        assert_eq!(d, SMEM_DATA_BASE);
        let p = b.finish().unwrap();
        assert_eq!(p.markers, vec!["a", "b"]);
        assert_eq!(p.instrs[4], Instr::MarkBegin { name: 0 });
    }

    #[test]
    fn duplicate_args_are_rejected() {
        let mut b = ProgramBuilder::new("t");
        b.buffer("x");
        b.scalar("x");
        assert!(matches!(b.finish(), Err(BuildError::DuplicateArg(_))));
    }
}
