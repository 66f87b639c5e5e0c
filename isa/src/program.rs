//! `Program`: instructions plus the metadata a device and a profiler need.
//!
//! A program declares argument slots (buffers in HBM or 32-bit scalars), names the profiling
//! regions its `mark.begin` instructions open, may preload SMEM words (DMA descriptors, tables),
//! and records where it came from: the ATen operator and the fusion group, so that traces link
//! device kernels back to host operators.
//!
//! Launch convention: when a program starts, SMEM word `i` (byte address `4*i`) holds argument
//! `i` — the value of a scalar argument, or the length in bytes (low 32 bits) of a buffer
//! argument. `smem_init` blocks must therefore start at or after byte `4 * args.len()`.

use crate::instr::Instr;

/// What an argument slot is bound to at launch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum ArgKind {
    /// A buffer in the chip's HBM, addressed by DMA as `hbm.aN[...]`.
    Buffer,
    /// A 32-bit scalar, readable from SMEM word N.
    Scalar,
}

impl ArgKind {
    /// Assembly spelling (`buffer` / `scalar`).
    pub fn name(self) -> &'static str {
        match self {
            ArgKind::Buffer => "buffer",
            ArgKind::Scalar => "scalar",
        }
    }
}

/// A declared argument slot.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct ArgDecl {
    /// Name, unique in the program (an identifier).
    pub name: String,
    /// Buffer or scalar.
    pub kind: ArgKind,
}

/// Words preloaded into SMEM before the program starts.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct SmemInit {
    /// SMEM byte address (multiple of 4).
    pub addr: u32,
    /// The words.
    pub words: Vec<u32>,
}

/// A program: instructions and metadata.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Program {
    /// Name (shown in traces and errors).
    pub name: String,
    /// Argument slots, in slot order.
    pub args: Vec<ArgDecl>,
    /// Instructions; the program starts at index 0 and ends at `halt` or past the last one.
    pub instrs: Vec<Instr>,
    /// Profiling region names, indexed by `mark.begin`.
    pub markers: Vec<String>,
    /// SMEM preloads.
    pub smem_init: Vec<SmemInit>,
    /// The ATen operator this program implements, if any (`aten::add.Tensor`).
    pub source_op: Option<String>,
    /// The fusion group it implements, if any.
    pub fusion_group: Option<u64>,
}

impl Program {
    /// An empty program with a name.
    pub fn new(name: impl Into<String>) -> Self {
        Program {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The slot of the argument named `name`.
    pub fn arg_slot(&self, name: &str) -> Option<usize> {
        self.args.iter().position(|a| a.name == name)
    }

    /// The innermost region (`mark.begin`) open at `pc` in program order: exact for
    /// straight-line code and for regions that loops enter and leave whole.
    pub fn region_at(&self, pc: usize) -> Option<&str> {
        let mut open: Vec<u16> = Vec::new();
        for i in self.instrs.iter().take(pc) {
            match i {
                Instr::MarkBegin { name } => open.push(*name),
                Instr::MarkEnd => {
                    open.pop();
                }
                _ => {}
            }
        }
        open.last()
            .and_then(|n| self.markers.get(*n as usize))
            .map(String::as_str)
    }

    /// The assembly text of instruction `pc`, with marker names resolved and branch targets as
    /// `@pc`. Used in fault reports and traces.
    pub fn instr_text(&self, pc: usize) -> String {
        match self.instrs.get(pc) {
            Some(Instr::MarkBegin { name }) => match self.markers.get(*name as usize) {
                Some(s) => format!("mark.begin {}", crate::text::quote(s)),
                None => self.instrs[pc].to_string(),
            },
            Some(i) => i.to_string(),
            None => format!("<pc {pc} past the end>"),
        }
    }
}
