//! The compute part of a tile kernel: the program evaluated over operand tiles in VMEM.
//!
//! Two layouts:
//! - **dense** (no reductions): each operand tile is a dense run of elements; the program runs
//!   on vector registers of 1024 consecutive elements, in a loop.
//! - **rows** (with reductions): each operand tile is `rows x Lp` elements, rows padded to a
//!   multiple of 128; a vector register holds 8 rows x 128 columns (one row per sublane).
//!   For each group of 8 rows the program runs in phases: phase `p` walks the row's column
//!   chunks, computing the full values it needs (recomputed from the inputs in VMEM), storing
//!   full outputs and accumulating the reductions whose operands are ready; the accumulators are
//!   then reduced across lanes into per-row values (one per sublane, broadcast along lanes) for
//!   the next phase. Sums are sequential over chunks and a pairwise tree across lanes.

use std::collections::HashMap;

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{IotaKind, VBinOp, VType};
use tpuemu_isa::{Addr, SReg, VReg, VSrc};

use super::vexpr::{self, VAlloc};
use crate::codegen::{Emitter, RegPool};
use crate::dtype::DType;
use crate::ir::{POp, PRef, Prog};
use crate::kernels::{KernelError, sreg};

/// Where an operand's tile sits in VMEM.
#[derive(Clone, Copy, Debug)]
pub struct VOperand {
    /// VMEM byte address of the tile.
    pub base: i32,
    /// Element type.
    pub dtype: DType,
}

/// For `Index` nodes in the dense layout: the register holding the flat index of the tile's first
/// element, and the iteration shape the coordinates refer to.
pub struct IndexCtx<'a> {
    pub flat_base: SReg,
    pub shape: &'a [usize],
}

struct Ctx<'a> {
    e: &'a mut Emitter,
    va: VAlloc,
    prog: &'a Prog,
    ops: &'a [VOperand],
    /// Input index -> operand index is the identity; outputs follow the inputs.
    inputs: usize,
    /// Values currently in registers.
    regs: HashMap<PRef, VReg>,
    /// Registers holding more than one value (a no-op cast shares its operand's register), or
    /// lent by the caller (the column index): how many holders. Absent means one.
    refs: HashMap<u8, u32>,
    /// Per-row values and constants that stay in registers for the whole body.
    pinned: Vec<PRef>,
    /// Rows layout: the node's iteration shape before coalescing, and its first row dim (for
    /// `Index` nodes along the row).
    orig_shape: &'a [usize],
    row_start: usize,
    /// Rows layout: the flat index (over the outer dims) of the current group's first row
    /// (advanced by 8 per group).
    row_base: Option<SReg>,
    /// Comparisons read only as select conditions (see [`masks_only`]).
    mask_only: Vec<bool>,
    /// The register the next [`Ctx::emit_elementwise`] writes instead of a free one (a
    /// pipelined loop's values that cross its back edge live in fixed registers).
    forced: Option<VReg>,
}

/// The comparisons of `prog` that only selects read, as their condition, and that are neither
/// per-row nor outputs: their result can stay in a mask register, never written to a vector
/// register.
fn masks_only(prog: &Prog) -> Vec<bool> {
    let mut only: Vec<bool> = prog
        .nodes
        .iter()
        .map(|n| matches!(n.op, POp::Cmp(..)) && !n.per_row)
        .collect();
    for n in &prog.nodes {
        match n.op {
            POp::Select(_, a, b) => {
                only[a as usize] = false;
                only[b as usize] = false;
            }
            ref op => {
                for a in args(op) {
                    only[a as usize] = false;
                }
            }
        }
    }
    for o in &prog.outputs {
        only[*o as usize] = false;
    }
    only
}

fn last_uses(prog: &Prog) -> Vec<usize> {
    let mut last = vec![0usize; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        for a in args(&n.op) {
            last[a as usize] = i;
        }
    }
    for o in &prog.outputs {
        last[*o as usize] = usize::MAX;
    }
    last
}

pub fn args(op: &POp) -> Vec<PRef> {
    match *op {
        POp::Input(_) | POp::Const(_) | POp::Index(_) => vec![],
        POp::Bin(_, a, b) | POp::Cmp(_, a, b) => vec![a, b],
        POp::Un(_, a) | POp::Cast(a) | POp::Reduce(_, a) | POp::ArgMax(a) | POp::ArgMin(a) => {
            vec![a]
        }
        POp::Select(c, a, b) => vec![c, a, b],
    }
}

impl<'a> Ctx<'a> {
    /// A context for `prog` over `ops` (the first `inputs` are its inputs), vector registers
    /// `v2..vregs` free; the rows layout sets its fields after.
    fn new(
        e: &'a mut Emitter,
        prog: &'a Prog,
        ops: &'a [VOperand],
        inputs: usize,
        vregs: u32,
    ) -> Self {
        Ctx {
            e,
            va: VAlloc::new(2, vregs),
            prog,
            ops,
            inputs,
            regs: HashMap::new(),
            refs: HashMap::new(),
            pinned: Vec::new(),
            orig_shape: &[],
            row_start: 0,
            row_base: None,
            mask_only: masks_only(prog),
            forced: None,
        }
    }

    /// Loads every constant of the program into a register of its own, pinned.
    fn pin_constants(&mut self) -> Result<(), KernelError> {
        for (i, n) in self.prog.nodes.iter().enumerate() {
            if let POp::Const(_) = n.op {
                let v = self.emit_elementwise(i as PRef)?;
                self.bind(i as PRef, v);
                self.pinned.push(i as PRef);
            }
        }
        Ok(())
    }

    fn reg(&self, r: PRef) -> VReg {
        self.regs[&r]
    }

    /// Binds value `r` to register `v`; if another value holds `v` already (a no-op cast),
    /// they share it.
    fn bind(&mut self, r: PRef, v: VReg) {
        if self.regs.values().any(|x| *x == v) {
            *self.refs.entry(v.index()).or_insert(1) += 1;
        }
        self.regs.insert(r, v);
    }

    /// Binds value `r` to register `v` that the caller owns (never freed through `r`).
    fn borrow(&mut self, r: PRef, v: VReg) {
        *self.refs.entry(v.index()).or_insert(1) += 1;
        self.regs.insert(r, v);
    }

    /// Forgets value `r`, freeing its register when no other value holds it.
    fn drop_value(&mut self, r: PRef) {
        if let Some(v) = self.regs.remove(&r) {
            match self.refs.get_mut(&v.index()) {
                Some(c) if *c > 2 => *c -= 1,
                Some(_) => {
                    self.refs.remove(&v.index());
                }
                None => self.va.give(v),
            }
        }
    }

    /// Emits node `r` whose arguments are in registers (elementwise ops only). A cast that
    /// leaves the lanes as they are returns its operand's register (bind it with
    /// [`Ctx::bind`]).
    fn emit_elementwise(&mut self, r: PRef) -> Result<VReg, KernelError> {
        let n = *self.prog.node(r);
        if let POp::Cast(a) = n.op
            && vexpr::cast_is_move(self.prog.node(a).dtype, n.dtype)
        {
            return Ok(self.reg(a));
        }
        let dst = match self.forced.take() {
            Some(v) => v,
            None => self.va.take()?,
        };
        match n.op {
            POp::Const(v) => vexpr::emit_const(self.e, v, n.dtype, dst),
            POp::Bin(op, a, b) => {
                let (ra, rb) = (self.reg(a), self.reg(b));
                vexpr::emit_bin(self.e, op, n.dtype, dst, ra, VSrc::V(rb));
            }
            POp::Un(op, a) => vexpr::emit_un(self.e, op, n.dtype, dst, self.reg(a)),
            POp::Cmp(op, a, b) => {
                let ty = self.prog.node(a).dtype;
                let (ra, rb) = (self.reg(a), self.reg(b));
                let mask_only = self.mask_only[r as usize];
                vexpr::emit_cmp(
                    self.e,
                    &mut self.va,
                    op,
                    ty,
                    dst,
                    ra,
                    VSrc::V(rb),
                    mask_only,
                )?;
            }
            POp::Select(c, a, b) => {
                let (rc, ra, rb) = (self.reg(c), self.reg(a), self.reg(b));
                vexpr::emit_select(self.e, &mut self.va, n.dtype, dst, rc, ra, rb)?;
            }
            POp::Cast(a) => {
                let from = self.prog.node(a).dtype;
                let ra = self.reg(a);
                vexpr::emit_cast(self.e, &mut self.va, from, n.dtype, dst, ra)?;
            }
            _ => unreachable!("not an elementwise node"),
        }
        Ok(dst)
    }

    fn release(&mut self, r: PRef) {
        if !self.pinned.contains(&r) {
            self.drop_value(r);
        }
    }
}

/// Byte-offset registers by element size, for the dense loop.
struct Offsets {
    regs: Vec<(u32, SReg)>,
}

impl Offsets {
    fn get(&self, esz: u32) -> SReg {
        self.regs
            .iter()
            .find(|(s, _)| *s == esz)
            .map(|(_, r)| *r)
            .expect("offset register for every element size")
    }

    /// Address of copy `u` (of 1024 elements) of operand `o` at the current offsets.
    fn at(&self, o: VOperand, u: u32) -> Addr {
        let esz = o.dtype.size() as u32;
        Addr::new(self.get(esz), o.base + (u * 1024 * esz) as i32)
    }
}

/// `v = (v / inner) % size`: a coordinate from a flat index (no division when `inner` is 1, no
/// remainder without a `size`).
fn coordinate(e: &mut Emitter, v: VReg, inner: usize, size: Option<usize>) {
    if inner > 1 {
        e.vbin(VBinOp::Div, VType::I32, v, v, inner as u32);
    }
    if let Some(n) = size {
        e.vbin(VBinOp::Rem, VType::I32, v, v, n as u32);
    }
}

/// Stores value `r` to operand `op` at `addr`, converting to the operand's dtype.
fn store(
    cx: &mut Ctx,
    r: PRef,
    op: VOperand,
    addr: Addr,
    access: VAccess,
) -> Result<(), KernelError> {
    let mut v = cx.reg(r);
    let from = cx.prog.node(r).dtype;
    let tmp = if from != op.dtype {
        let t = cx.va.take()?;
        vexpr::emit_cast(cx.e, &mut cx.va, from, op.dtype, t, v)?;
        v = t;
        Some(t)
    } else {
        None
    };
    cx.e.vst(op.dtype.mem(), v, addr, access);
    if let Some(t) = tmp {
        cx.va.give(t);
    }
    Ok(())
}

mod dense;
mod rows;

pub use dense::dense;
pub use rows::{RowsGeom, row_start, rows};
