//! What makes an instruction or a program valid, beyond what the types already guarantee.
//!
//! The register newtypes keep every register in range, but an [`Instr`] can still say things the
//! machine does not define: `vand.f32`, a bf16 matmul with three passes, an HBM reference without
//! an argument slot. [`check_instr`] rejects those; [`check_program`] adds what only the whole
//! program knows (branch targets, marker indices, argument slots, SMEM preloads).
//!
//! The assembler and the binary decoder both refuse what these checks refuse, so every program
//! they produce prints as assembly that reads back to the same program. Devices may call
//! [`check_program`] before loading a program from elsewhere (a [`crate::ProgramBuilder`], say).

use std::collections::HashSet;

use crate::instr::{Instr, MemRef};
use crate::ops::{CmpOp, MxuFmt, Precision, Space, VType};
use crate::program::{ArgKind, Program};
use crate::reg::MAX_ARGS;

/// Why a single instruction is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstrError {
    /// An operation is used with an element type it is not defined for.
    #[error("`{op}` is not defined for {ty} (it takes {takes})")]
    Type {
        /// The operation's name (`and`, `exp`, ...).
        op: &'static str,
        /// The type given.
        ty: VType,
        /// The types it takes, in words.
        takes: &'static str,
    },
    /// An unsigned comparison on f32 elements.
    #[error("`{0}` is an unsigned integer comparison; it is not defined for f32")]
    UnsignedFloatCmp(CmpOp),
    /// A bf16 matmul with more than one pass.
    #[error("bf16 matmuls take exactly one pass (p1), not {0}")]
    Bf16Passes(Precision),
    /// An HBM reference without an argument slot.
    #[error("an HBM reference needs an argument slot (`hbm.a0[s1]`)")]
    HbmWithoutSlot,
    /// A VMEM or SMEM reference with an argument slot.
    #[error("only HBM references take an argument slot, not {0}")]
    SlotOnLocal(Space),
}

/// Why a program is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// An instruction is invalid.
    #[error("instruction {pc} (`{text}`): {error}")]
    Instr {
        /// Its index.
        pc: usize,
        /// Its text.
        text: String,
        /// What is wrong.
        error: InstrError,
    },
    /// More argument slots than the machine has.
    #[error("{0} arguments declared; at most {MAX_ARGS} are allowed")]
    TooManyArgs(usize),
    /// Two arguments share a name.
    #[error("argument `{0}` is declared twice")]
    DuplicateArg(String),
    /// Two markers share a name.
    #[error("marker {0:?} is declared twice")]
    DuplicateMarker(String),
    /// More marker names than a `mark.begin` can index.
    #[error("{0} marker names; at most 65536 are allowed")]
    TooManyMarkers(usize),
    /// A branch past the end of the program.
    #[error(
        "instruction {pc} branches to {target}, past the end of the program ({len} instructions)"
    )]
    BranchTarget {
        /// The branch.
        pc: usize,
        /// Its target.
        target: u32,
        /// Number of instructions (a branch to `len` ends the program).
        len: usize,
    },
    /// A `mark.begin` whose index names no marker.
    #[error("instruction {pc} opens marker #{index}, but only {count} markers are declared")]
    MarkerIndex {
        /// The instruction.
        pc: usize,
        /// Its index.
        index: u16,
        /// Markers declared.
        count: usize,
    },
    /// An HBM reference to a slot that is not declared or not a buffer.
    #[error("instruction {pc} uses HBM slot a{slot}, which is {why}")]
    Slot {
        /// The instruction.
        pc: usize,
        /// The slot.
        slot: u8,
        /// "not declared" or "a scalar argument".
        why: &'static str,
    },
    /// An SMEM preload is misplaced.
    #[error("SMEM preload at byte {addr}: {why}")]
    Smem {
        /// Its byte address.
        addr: u32,
        /// What is wrong.
        why: String,
    },
}

/// Checks what one instruction says, independent of any program.
pub fn check_instr(instr: &Instr) -> Result<(), InstrError> {
    match *instr {
        Instr::VBin { op, ty, .. } if !op.supports(ty) => Err(InstrError::Type {
            op: op.name(),
            ty,
            takes: takes(op.supports(VType::F32), op.supports(VType::I32)),
        }),
        Instr::VUn { op, ty, .. } if !op.supports(ty) => Err(InstrError::Type {
            op: op.name(),
            ty,
            takes: takes(op.supports(VType::F32), op.supports(VType::I32)),
        }),
        Instr::VCmp { op, ty, .. } if ty == VType::F32 && is_unsigned(op) => {
            Err(InstrError::UnsignedFloatCmp(op))
        }
        Instr::MxuMatmul { fmt, prec, .. } if fmt == MxuFmt::Bf16 && prec != Precision::P1 => {
            Err(InstrError::Bf16Passes(prec))
        }
        Instr::Dma { dst, src, .. } => {
            check_memref(&dst)?;
            check_memref(&src)
        }
        _ => Ok(()),
    }
}

fn takes(f32: bool, i32: bool) -> &'static str {
    match (f32, i32) {
        (true, false) => "f32 only",
        (false, true) => "i32 only",
        _ => "f32 and i32",
    }
}

/// Whether a comparison is one of the unsigned ones (`ltu`, `geu`).
pub fn is_unsigned(op: CmpOp) -> bool {
    matches!(op, CmpOp::LtU | CmpOp::GeU)
}

fn check_memref(m: &MemRef) -> Result<(), InstrError> {
    match (m.space, m.slot) {
        (Space::Hbm, None) => Err(InstrError::HbmWithoutSlot),
        (Space::Hbm, Some(_)) => Ok(()),
        (space, Some(_)) => Err(InstrError::SlotOnLocal(space)),
        (_, None) => Ok(()),
    }
}

/// Checks a whole program: every instruction, and what ties them to the metadata.
pub fn check_program(p: &Program) -> Result<(), ProgramError> {
    if p.args.len() > MAX_ARGS as usize {
        return Err(ProgramError::TooManyArgs(p.args.len()));
    }
    let mut names = HashSet::new();
    for a in &p.args {
        if !names.insert(a.name.as_str()) {
            return Err(ProgramError::DuplicateArg(a.name.clone()));
        }
    }
    if p.markers.len() > 1 << 16 {
        return Err(ProgramError::TooManyMarkers(p.markers.len()));
    }
    let mut markers = HashSet::new();
    for m in &p.markers {
        if !markers.insert(m.as_str()) {
            return Err(ProgramError::DuplicateMarker(m.clone()));
        }
    }
    for (pc, instr) in p.instrs.iter().enumerate() {
        check_instr(instr).map_err(|error| ProgramError::Instr {
            pc,
            text: instr.to_string(),
            error,
        })?;
        check_in_program(p, pc, instr)?;
    }
    check_smem(p)
}

fn check_in_program(p: &Program, pc: usize, instr: &Instr) -> Result<(), ProgramError> {
    if let Some(target) = instr.branch_target()
        && target as usize > p.instrs.len()
    {
        return Err(ProgramError::BranchTarget {
            pc,
            target,
            len: p.instrs.len(),
        });
    }
    match instr {
        Instr::MarkBegin { name } if *name as usize >= p.markers.len() => {
            Err(ProgramError::MarkerIndex {
                pc,
                index: *name,
                count: p.markers.len(),
            })
        }
        Instr::Dma { dst, src, .. } => {
            for slot in [dst.slot, src.slot].into_iter().flatten() {
                let why = match p.args.get(slot.index() as usize) {
                    None => "not declared",
                    Some(a) if a.kind == ArgKind::Scalar => "a scalar argument",
                    Some(_) => continue,
                };
                return Err(ProgramError::Slot {
                    pc,
                    slot: slot.index(),
                    why,
                });
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_smem(p: &Program) -> Result<(), ProgramError> {
    let args_end = 4 * p.args.len() as u64;
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(p.smem_init.len());
    for block in &p.smem_init {
        let err = |why: String| ProgramError::Smem {
            addr: block.addr,
            why,
        };
        if block.addr % 4 != 0 {
            return Err(err("the address is not a multiple of 4".into()));
        }
        if block.words.is_empty() {
            return Err(err("the block has no words".into()));
        }
        let start = block.addr as u64;
        let end = start + 4 * block.words.len() as u64;
        if end > 1 << 32 {
            return Err(err("the block runs past the 4 GiB address space".into()));
        }
        if start < args_end {
            return Err(err(format!(
                "it overlaps the argument words (bytes 0..{args_end})"
            )));
        }
        if let Some((s, e)) = spans.iter().find(|(s, e)| start < *e && *s < end) {
            return Err(err(format!("it overlaps the preload of bytes {s}..{e}")));
        }
        spans.push((start, end));
    }
    Ok(())
}
