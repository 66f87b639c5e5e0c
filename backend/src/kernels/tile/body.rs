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

use tpuemu_isa::ops::{Axis, CmpOp, IotaKind, MaskOp, RedOp, SAluOp, VBinOp, VType};
use tpuemu_isa::{Addr, Instr, MReg, SReg, SSrc, VReg, VSrc};

use super::vexpr::{self, VAlloc};
use crate::codegen::{Emitter, RegPool};
use crate::dtype::{DType, Scalar};
use crate::ir::{POp, PRef, Prog, RedKind};
use crate::kernels::KernelError;

/// Where an operand's tile sits in VMEM.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VOperand {
    /// VMEM byte address of the tile.
    pub base: i32,
    /// Element type.
    pub dtype: DType,
    /// A per-row operand (rows layout only).
    pub per_row: bool,
}

/// For `Index` nodes in the dense layout: the register holding the flat index of the tile's first
/// element, and the iteration shape the coordinates refer to.
pub(crate) struct IndexCtx<'a> {
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
    /// Per-row values and constants that stay in registers for the whole body.
    pinned: Vec<PRef>,
    /// Rows layout: the node's iteration shape before coalescing, and its first row dim (for
    /// `Index` nodes along the row).
    orig_shape: &'a [usize],
    row_start: usize,
    /// Rows layout: the flat index (over the outer dims) of the current group's first row
    /// (advanced by 8 per group).
    row_base: Option<SReg>,
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

pub(crate) fn args(op: &POp) -> Vec<PRef> {
    match *op {
        POp::Input(_) | POp::Const(_) | POp::Index(_) => vec![],
        POp::Bin(_, a, b) | POp::Cmp(_, a, b) => vec![a, b],
        POp::Un(_, a) | POp::Cast(a) | POp::Reduce(_, a) | POp::ArgMax(a) | POp::ArgMin(a) => {
            vec![a]
        }
        POp::Select(c, a, b) => vec![c, a, b],
    }
}

impl Ctx<'_> {
    fn reg(&self, r: PRef) -> VReg {
        self.regs[&r]
    }

    /// Emits node `r` whose arguments are in registers (elementwise ops only).
    fn emit_elementwise(&mut self, r: PRef) -> Result<VReg, KernelError> {
        let n = *self.prog.node(r);
        let dst = self.va.take()?;
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
                vexpr::emit_cmp(self.e, &mut self.va, op, ty, dst, ra, VSrc::V(rb))?;
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
        if !self.pinned.contains(&r)
            && let Some(v) = self.regs.remove(&r)
        {
            self.va.give(v);
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
}

/// The dense body: `n_vregs` registers' worth of elements of every operand.
pub(crate) fn dense(
    e: &mut Emitter,
    pool: &mut RegPool,
    prog: &Prog,
    ops: &[VOperand],
    inputs: usize,
    n_vregs: u32,
    vregs: u32,
    index: Option<IndexCtx>,
) -> Result<(), KernelError> {
    if prog.has_reductions() {
        return Err(KernelError::Unsupported(
            "dense tile body with reductions".into(),
        ));
    }
    let last = last_uses(prog);
    let mut cx = Ctx {
        e,
        va: VAlloc::new(2, vregs),
        prog,
        ops,
        inputs,
        regs: HashMap::new(),
        pinned: Vec::new(),
        orig_shape: &[],
        row_start: 0,
        row_base: None,
    };
    // Constants live in registers for the whole loop.
    for (i, n) in prog.nodes.iter().enumerate() {
        if let POp::Const(_) = n.op {
            let v = cx.emit_elementwise(i as PRef)?;
            cx.regs.insert(i as PRef, v);
            cx.pinned.push(i as PRef);
        }
    }
    let take = |pool: &mut RegPool| {
        pool.take()
            .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
    };
    let counter = take(pool)?;
    let test = take(pool)?;
    let mut sizes: Vec<u32> = ops.iter().map(|o| o.dtype.size() as u32).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut offs = Offsets { regs: Vec::new() };
    for s in &sizes {
        let r = take(pool)?;
        cx.e.b.smov(r, 0);
        offs.regs.push((*s, r));
    }
    let flat = if index.is_some() {
        Some(take(pool)?)
    } else {
        None
    };
    if let (Some(f), Some(ix)) = (flat, &index) {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: f,
            a: ix.flat_base,
            b: SSrc::Imm(0),
        });
    }
    cx.e.b.smov(counter, 0);
    let top = cx.e.b.here();
    for (i, n) in prog.nodes.iter().enumerate() {
        let r = i as PRef;
        if matches!(n.op, POp::Const(_)) {
            continue;
        }
        let v = match n.op {
            POp::Input(k) => {
                let o = ops[k as usize];
                let v = cx.va.take()?;
                cx.e.push(Instr::VLoad {
                    fmt: o.dtype.mem(),
                    dst: v,
                    addr: Addr::new(offs.get(o.dtype.size() as u32), o.base),
                    sub_stride: None,
                    lane_stride: None,
                    mask: None,
                });
                v
            }
            POp::Index(d) => {
                let ix = index.as_ref().ok_or_else(|| {
                    KernelError::Unsupported("Index without an index context".into())
                })?;
                let v = cx.va.take()?;
                cx.e.push(Instr::VIota {
                    kind: IotaKind::Flat,
                    dst: v,
                });
                cx.e.push(Instr::VBin {
                    op: VBinOp::Add,
                    ty: VType::I32,
                    dst: v,
                    a: v,
                    b: VSrc::S(flat.expect("set with index")),
                });
                let inner: usize = ix.shape[d as usize + 1..].iter().product();
                if inner > 1 {
                    cx.e.push(Instr::VBin {
                        op: VBinOp::Div,
                        ty: VType::I32,
                        dst: v,
                        a: v,
                        b: VSrc::Imm(inner as u32),
                    });
                }
                if d > 0 {
                    cx.e.push(Instr::VBin {
                        op: VBinOp::Rem,
                        ty: VType::I32,
                        dst: v,
                        a: v,
                        b: VSrc::Imm(ix.shape[d as usize] as u32),
                    });
                }
                v
            }
            _ => cx.emit_elementwise(r)?,
        };
        cx.regs.insert(r, v);
        for a in args(&n.op) {
            if last[a as usize] == i {
                cx.release(a);
            }
        }
    }
    for (k, o) in prog.outputs.iter().enumerate() {
        let op = ops[inputs + k];
        let mut v = cx.reg(*o);
        let from = prog.node(*o).dtype;
        let tmp = if from != op.dtype {
            let t = cx.va.take()?;
            vexpr::emit_cast(cx.e, &mut cx.va, from, op.dtype, t, v)?;
            v = t;
            Some(t)
        } else {
            None
        };
        cx.e.push(Instr::VStore {
            fmt: op.dtype.mem(),
            src: v,
            addr: Addr::new(offs.get(op.dtype.size() as u32), op.base),
            sub_stride: None,
            lane_stride: None,
            mask: None,
        });
        if let Some(t) = tmp {
            cx.va.give(t);
        }
    }
    let outs: Vec<PRef> = prog.outputs.clone();
    for o in outs {
        cx.release(o);
    }
    for (s, r) in &offs.regs {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: *r,
            a: *r,
            b: SSrc::Imm(1024 * *s as i32),
        });
    }
    if let Some(f) = flat {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: f,
            a: f,
            b: SSrc::Imm(1024),
        });
    }
    cx.e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: counter,
        a: counter,
        b: SSrc::Imm(1),
    });
    cx.e.push(Instr::SCmp {
        op: CmpOp::Lt,
        dst: test,
        a: counter,
        b: SSrc::Imm(n_vregs as i32),
    });
    cx.e.b.brnz(test, top);
    for p in cx.pinned.clone() {
        if let Some(v) = cx.regs.remove(&p) {
            cx.va.give(v);
        }
    }
    for (_, r) in offs.regs {
        pool.give(r);
    }
    if let Some(f) = flat {
        pool.give(f);
    }
    pool.give(counter);
    pool.give(test);
    let _ = cx.inputs;
    Ok(())
}

/// Geometry of the rows layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowsGeom {
    /// Groups of 8 rows in the tile.
    pub groups: u32,
    /// Row length.
    pub len: u32,
    /// Padded row length (a multiple of 128).
    pub pitch: u32,
}

/// Phase in which each node's value is first available (see the module docs).
fn phases(prog: &Prog) -> Vec<u32> {
    let mut ph = vec![0u32; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        let a = args(&n.op)
            .iter()
            .map(|a| ph[*a as usize])
            .max()
            .unwrap_or(0);
        ph[i] = match n.op {
            POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_) => a + 1,
            _ => a,
        };
    }
    ph
}

fn identity(kind: RedKind, ty: DType) -> Scalar {
    match (kind, ty.is_float()) {
        (RedKind::Sum, _) => Scalar::Int(0),
        (RedKind::Prod, _) => Scalar::Int(1),
        (RedKind::Max, true) => Scalar::Float(f64::NEG_INFINITY),
        (RedKind::Min, true) => Scalar::Float(f64::INFINITY),
        (RedKind::Max, false) => Scalar::Int(i32::MIN as i64),
        (RedKind::Min, false) => Scalar::Int(i32::MAX as i64),
    }
}

/// The accumulating vector operation and the cross-lane reduction (none for products: the
/// cross-lane unit has no product, see [`lane_product`]).
fn red_op(kind: RedKind) -> (VBinOp, Option<RedOp>) {
    match kind {
        RedKind::Sum => (VBinOp::Add, Some(RedOp::Add)),
        RedKind::Max => (VBinOp::Max, Some(RedOp::Max)),
        RedKind::Min => (VBinOp::Min, Some(RedOp::Min)),
        RedKind::Prod => (VBinOp::Mul, None),
    }
}

/// Multiplies the 128 lanes of each sublane of `acc` together, the result in every lane: a
/// log2 tree of rotations by 64, 32, ..., 1. After the rotation by `s` the vector is periodic
/// with period `s` and each lane multiplied the same pair of values, so every lane ends with
/// bitwise the same product.
fn lane_product(cx: &mut Ctx, ty: VType, acc: VReg) -> Result<(), KernelError> {
    let t = cx.va.take()?;
    let mut s = 64;
    while s >= 1 {
        cx.e.push(Instr::VRot {
            axis: Axis::Lane,
            dst: t,
            a: acc,
            amount: SSrc::Imm(s),
        });
        cx.e.push(Instr::VBin {
            op: VBinOp::Mul,
            ty,
            dst: acc,
            a: acc,
            b: VSrc::V(t),
        });
        s /= 2;
    }
    cx.va.give(t);
    Ok(())
}

/// The value of `Index(d)` in the rows layout: for a row dim, from the column index `col`
/// (position in the row, row-major over the row dims), `(col / inner) % size`; for an outer dim,
/// the same from the flat row index of each sublane's row.
fn emit_row_index(cx: &mut Ctx, d: usize, col: VReg) -> Result<VReg, KernelError> {
    let shape = cx.orig_shape;
    if d >= shape.len() {
        return Err(KernelError::Unsupported(format!(
            "coordinate of dim {d} of a {}-dim iteration space",
            shape.len()
        )));
    }
    let v = cx.va.take()?;
    if d < cx.row_start && shape[d] == 1 {
        cx.e.push(Instr::VMov {
            ty: VType::I32,
            dst: v,
            src: VSrc::Imm(0),
        });
        return Ok(v);
    }
    let (first, end) = if d < cx.row_start {
        // Row r of the group is sublane r: flat row index = group base + sublane.
        let Some(base) = cx.row_base else {
            cx.va.give(v);
            return Err(KernelError::Unsupported(
                "coordinates of an outer dim without a row index".into(),
            ));
        };
        cx.e.push(Instr::VIota {
            kind: IotaKind::Sub,
            dst: v,
        });
        cx.e.push(Instr::VBin {
            op: VBinOp::Add,
            ty: VType::I32,
            dst: v,
            a: v,
            b: VSrc::S(base),
        });
        (0, cx.row_start)
    } else {
        cx.e.push(Instr::VMov {
            ty: VType::I32,
            dst: v,
            src: VSrc::V(col),
        });
        (cx.row_start, shape.len())
    };
    let inner: usize = shape[d + 1..end].iter().product();
    if inner > 1 {
        cx.e.push(Instr::VBin {
            op: VBinOp::Div,
            ty: VType::I32,
            dst: v,
            a: v,
            b: VSrc::Imm(inner as u32),
        });
    }
    if d > first {
        cx.e.push(Instr::VBin {
            op: VBinOp::Rem,
            ty: VType::I32,
            dst: v,
            a: v,
            b: VSrc::Imm(shape[d] as u32),
        });
    }
    Ok(v)
}

/// The first dim of the row in `shape`: the shortest suffix of dims holding `len` elements
/// (size-1 dims left out of it have coordinate 0 either way).
pub(crate) fn row_start(shape: &[usize], len: usize) -> usize {
    let mut k = shape.len();
    let mut n = 1usize;
    while k > 0 && n < len {
        k -= 1;
        n *= shape[k];
    }
    k
}

/// The rows body: all groups of the tile, every phase. `orig_shape` is the node's iteration
/// shape before coalescing (`Index` nodes refer to its dims); `tile_row` holds the flat index
/// (over the outer dims) of the tile's first row, for coordinates of outer dims (the body
/// advances it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows(
    e: &mut Emitter,
    pool: &mut RegPool,
    prog: &Prog,
    ops: &[VOperand],
    inputs: usize,
    g: RowsGeom,
    vregs: u32,
    orig_shape: &[usize],
    tile_row: Option<SReg>,
) -> Result<(), KernelError> {
    let ph = phases(prog);
    let max_phase = ph.iter().copied().max().unwrap_or(0);
    let take = |pool: &mut RegPool| {
        pool.take()
            .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
    };
    // Registers: group counter, test, and per element size: the group's full-row offset and
    // per-row offset, the chunk address, and the strides (constants).
    let gcount = take(pool)?;
    let test = take(pool)?;
    let mut sizes: Vec<u32> = ops.iter().map(|o| o.dtype.size() as u32).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut size_regs: Vec<(u32, SReg, SReg, SReg)> = Vec::new(); // (esz, group full offset, group per-row offset, chunk address)
    for s in &sizes {
        let (a, b, c) = (take(pool)?, take(pool)?, take(pool)?);
        size_regs.push((*s, a, b, c));
    }
    let stride_regs: Vec<(u32, SReg, SReg)> = sizes
        .iter()
        .map(|s| (*s, e.konst((g.pitch * s) as i32), e.konst(*s as i32)))
        .collect();
    let find = |esz: u32| {
        *size_regs
            .iter()
            .find(|x| x.0 == esz)
            .expect("register per size")
    };
    let sub_full = |esz: u32| {
        stride_regs
            .iter()
            .find(|x| x.0 == esz)
            .expect("stride per size")
            .1
    };
    let sub_row = |esz: u32| {
        stride_regs
            .iter()
            .find(|x| x.0 == esz)
            .expect("stride per size")
            .2
    };

    let mut cx = Ctx {
        e,
        va: VAlloc::new(2, vregs),
        prog,
        ops,
        inputs,
        regs: HashMap::new(),
        pinned: Vec::new(),
        orig_shape,
        row_start: row_start(orig_shape, g.len as usize),
        row_base: tile_row,
    };
    let nchunks = g.pitch / 128;
    let tail = g.len - (nchunks - 1) * 128;
    // m1 masks the valid lanes of the last chunk.
    let tail_mask = MReg::n(1);
    if tail < 128 {
        let iota = cx.va.take()?;
        cx.e.push(Instr::VIota {
            kind: IotaKind::Lane,
            dst: iota,
        });
        cx.e.push(Instr::VCmp {
            op: CmpOp::Lt,
            ty: VType::I32,
            dst: tail_mask,
            a: iota,
            b: VSrc::Imm(tail),
        });
        cx.va.give(iota);
    }
    for (_, a, b, _) in &size_regs {
        cx.e.b.smov(*a, 0);
        cx.e.b.smov(*b, 0);
    }
    cx.e.b.smov(gcount, 0);
    let top = cx.e.b.here();

    // Constants: pinned for the group.
    for (i, n) in prog.nodes.iter().enumerate() {
        if let POp::Const(_) = n.op {
            let v = cx.emit_elementwise(i as PRef)?;
            cx.regs.insert(i as PRef, v);
            cx.pinned.push(i as PRef);
        }
    }
    // Per-row inputs: loaded once per group.
    for (i, n) in prog.nodes.iter().enumerate() {
        if let POp::Input(k) = n.op
            && n.per_row
        {
            let o = ops[k as usize];
            let esz = o.dtype.size() as u32;
            let v = cx.va.take()?;
            cx.e.push(Instr::VLoad {
                fmt: o.dtype.mem(),
                dst: v,
                addr: Addr::new(find(esz).2, o.base),
                sub_stride: Some(sub_row(esz)),
                lane_stride: Some(SReg::ZERO),
                mask: None,
            });
            cx.regs.insert(i as PRef, v);
            cx.pinned.push(i as PRef);
        }
    }
    // Per-row values computed from per-row values, phase by phase; reductions at phase ends.
    let per_row_step = |cx: &mut Ctx, phase: u32| -> Result<(), KernelError> {
        for (i, n) in prog.nodes.iter().enumerate() {
            let r = i as PRef;
            if n.per_row
                && ph[i] == phase
                && !cx.regs.contains_key(&r)
                && !matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_))
            {
                let v = cx.emit_elementwise(r)?;
                cx.regs.insert(r, v);
                cx.pinned.push(r);
            }
        }
        // Per-row outputs now available.
        for (k, o) in prog.outputs.iter().enumerate() {
            let n = prog.node(*o);
            if n.per_row && ph[*o as usize] == phase {
                let op = ops[inputs + k];
                let esz = op.dtype.size() as u32;
                store(
                    cx,
                    *o,
                    op,
                    Addr::new(find(esz).2, op.base),
                    Some(sub_row(esz)),
                    Some(SReg::ZERO),
                )?;
            }
        }
        Ok(())
    };
    per_row_step(&mut cx, 0)?;

    for p in 0..=max_phase {
        // What this phase's chunk loop computes: reductions of phase-p values and full outputs
        // of phase p.
        let reds: Vec<PRef> = prog
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_)))
            .filter(|(i, _)| ph[*i] == p + 1)
            .map(|(i, _)| i as PRef)
            .collect();
        let full_outs: Vec<(usize, PRef)> = prog
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| !prog.node(**o).per_row && ph[**o as usize] == p)
            .map(|(k, o)| (k, *o))
            .collect();
        if reds.is_empty() && full_outs.is_empty() {
            if p > 0 {
                per_row_step(&mut cx, p)?;
            }
            continue;
        }
        // Accumulators.
        let mut accs: Vec<(PRef, VReg, Option<VReg>)> = Vec::new();
        for &r in &reds {
            let n = prog.node(r);
            let acc = cx.va.take()?;
            let (init, idx) = match n.op {
                POp::Reduce(kind, a) => (identity(kind, prog.node(a).dtype), None),
                POp::ArgMax(_) => (Scalar::Float(f64::NEG_INFINITY), Some(cx.va.take()?)),
                POp::ArgMin(_) => (Scalar::Float(f64::INFINITY), Some(cx.va.take()?)),
                _ => unreachable!(),
            };
            let arg_ty = match n.op {
                POp::Reduce(_, a) | POp::ArgMax(a) | POp::ArgMin(a) => prog.node(a).dtype,
                _ => unreachable!(),
            };
            let init = if arg_ty.is_float() {
                init
            } else if matches!(n.op, POp::ArgMax(_)) {
                Scalar::Int(i32::MIN as i64)
            } else if matches!(n.op, POp::ArgMin(_)) {
                Scalar::Int(i32::MAX as i64)
            } else {
                init
            };
            vexpr::emit_const(cx.e, init, arg_ty, acc);
            if let Some(ix) = idx {
                cx.e.push(Instr::VMov {
                    ty: VType::I32,
                    dst: ix,
                    src: VSrc::Imm(0),
                });
            }
            accs.push((r, acc, idx));
        }
        let uses_index = prog.nodes.iter().any(|n| matches!(n.op, POp::Index(_)));
        let colidx = if uses_index || accs.iter().any(|a| a.2.is_some()) {
            let v = cx.va.take()?;
            cx.e.push(Instr::VIota {
                kind: IotaKind::Lane,
                dst: v,
            });
            Some(v)
        } else {
            None
        };
        // Chunk address registers start at the group's offset.
        for (_, a, _, c) in &size_regs {
            cx.e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst: *c,
                a: *a,
                b: SSrc::Imm(0),
            });
        }
        let full_chunks = if tail < 128 { nchunks - 1 } else { nchunks };
        let emit_chunk = |cx: &mut Ctx, masked: bool| -> Result<(), KernelError> {
            chunk_body(
                cx,
                &ph,
                p,
                &reds,
                &full_outs,
                &accs,
                colidx,
                masked.then_some(tail_mask),
                &|esz| (find(esz).3, sub_full(esz)),
            )?;
            for (s, _, _, c) in &size_regs {
                cx.e.push(Instr::SAlu {
                    op: SAluOp::Add,
                    dst: *c,
                    a: *c,
                    b: SSrc::Imm(128 * *s as i32),
                });
            }
            if let Some(ci) = colidx {
                cx.e.push(Instr::VBin {
                    op: VBinOp::Add,
                    ty: VType::I32,
                    dst: ci,
                    a: ci,
                    b: VSrc::Imm(128),
                });
            }
            Ok(())
        };
        if full_chunks > 0 {
            let ccount = pool
                .take()
                .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))?;
            cx.e.b.smov(ccount, 0);
            let ctop = cx.e.b.here();
            emit_chunk(&mut cx, false)?;
            cx.e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst: ccount,
                a: ccount,
                b: SSrc::Imm(1),
            });
            cx.e.push(Instr::SCmp {
                op: CmpOp::Lt,
                dst: test,
                a: ccount,
                b: SSrc::Imm(full_chunks as i32),
            });
            cx.e.b.brnz(test, ctop);
            pool.give(ccount);
        }
        if tail < 128 {
            emit_chunk(&mut cx, true)?;
        }
        // Finalize the reductions into per-row values.
        for (r, acc, idx) in accs {
            let n = prog.node(r);
            match n.op {
                POp::Reduce(kind, a) => {
                    let ty = prog.node(a).dtype.lane();
                    match red_op(kind).1 {
                        Some(op) => cx.e.push(Instr::VRed {
                            op,
                            ty,
                            axis: Axis::Lane,
                            dst: acc,
                            a: acc,
                        }),
                        None => lane_product(&mut cx, ty, acc)?,
                    }
                    cx.regs.insert(r, acc);
                    cx.pinned.push(r);
                }
                POp::ArgMax(a) | POp::ArgMin(a) => {
                    let ty = prog.node(a).dtype.lane();
                    let idx = idx.expect("arg reductions track an index");
                    let m = cx.va.take()?;
                    let op = if matches!(n.op, POp::ArgMax(_)) {
                        RedOp::Max
                    } else {
                        RedOp::Min
                    };
                    cx.e.push(Instr::VRed {
                        op,
                        ty,
                        axis: Axis::Lane,
                        dst: m,
                        a: acc,
                    });
                    let (c1, c2, c3) = (cx.va.take_mask()?, cx.va.take_mask()?, cx.va.take_mask()?);
                    cx.e.push(Instr::VCmp {
                        op: CmpOp::Eq,
                        ty,
                        dst: c1,
                        a: acc,
                        b: VSrc::V(m),
                    });
                    if ty == VType::F32 {
                        cx.e.push(Instr::VCmp {
                            op: CmpOp::Ne,
                            ty,
                            dst: c2,
                            a: acc,
                            b: VSrc::V(acc),
                        });
                        cx.e.push(Instr::VCmp {
                            op: CmpOp::Ne,
                            ty,
                            dst: c3,
                            a: m,
                            b: VSrc::V(m),
                        });
                        cx.e.push(Instr::MLogic {
                            op: MaskOp::And,
                            dst: c2,
                            a: c2,
                            b: c3,
                        });
                        cx.e.push(Instr::MLogic {
                            op: MaskOp::Or,
                            dst: c1,
                            a: c1,
                            b: c2,
                        });
                    }
                    cx.e.push(Instr::VSel {
                        ty: VType::I32,
                        dst: idx,
                        mask: c1,
                        a: idx,
                        b: VSrc::Imm(i32::MAX as u32),
                    });
                    cx.e.push(Instr::VRed {
                        op: RedOp::Min,
                        ty: VType::I32,
                        axis: Axis::Lane,
                        dst: idx,
                        a: idx,
                    });
                    for mm in [c1, c2, c3] {
                        cx.va.give_mask(mm);
                    }
                    cx.va.give(m);
                    cx.va.give(acc);
                    cx.regs.insert(r, idx);
                    cx.pinned.push(r);
                }
                _ => unreachable!(),
            }
        }
        if let Some(ci) = colidx {
            cx.va.give(ci);
        }
        per_row_step(&mut cx, p + 1)?;
    }
    // Next group.
    for p in cx.pinned.clone() {
        if let Some(v) = cx.regs.remove(&p) {
            cx.va.give(v);
        }
    }
    cx.pinned.clear();
    for (s, a, b, _) in &size_regs {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: *a,
            a: *a,
            b: SSrc::Imm((8 * g.pitch * s) as i32),
        });
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: *b,
            a: *b,
            b: SSrc::Imm((8 * s) as i32),
        });
    }
    if let Some(base) = cx.row_base {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: base,
            a: base,
            b: SSrc::Imm(8),
        });
    }
    cx.e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: gcount,
        a: gcount,
        b: SSrc::Imm(1),
    });
    cx.e.push(Instr::SCmp {
        op: CmpOp::Lt,
        dst: test,
        a: gcount,
        b: SSrc::Imm(g.groups as i32),
    });
    cx.e.b.brnz(test, top);
    for (_, a, b, c) in size_regs {
        pool.give(a);
        pool.give(b);
        pool.give(c);
    }
    pool.give(gcount);
    pool.give(test);
    Ok(())
}

/// Stores value `r` to operand `op` at `addr`, converting to the operand's dtype.
fn store(
    cx: &mut Ctx,
    r: PRef,
    op: VOperand,
    addr: Addr,
    sub: Option<SReg>,
    lane: Option<SReg>,
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
    cx.e.push(Instr::VStore {
        fmt: op.dtype.mem(),
        src: v,
        addr,
        sub_stride: sub,
        lane_stride: lane,
        mask: None,
    });
    if let Some(t) = tmp {
        cx.va.give(t);
    }
    Ok(())
}

/// One column chunk of phase `p`: the full values needed, the accumulations, the full outputs.
#[allow(clippy::too_many_arguments)]
fn chunk_body(
    cx: &mut Ctx,
    ph: &[u32],
    p: u32,
    reds: &[PRef],
    full_outs: &[(usize, PRef)],
    accs: &[(PRef, VReg, Option<VReg>)],
    colidx: Option<VReg>,
    mask: Option<MReg>,
    addr_of: &dyn Fn(u32) -> (SReg, SReg),
) -> Result<(), KernelError> {
    let prog = cx.prog;
    // The full nodes this chunk needs: ancestors of the reductions' operands and the outputs.
    let mut need = vec![false; prog.nodes.len()];
    let mut stack: Vec<PRef> = reds
        .iter()
        .flat_map(|r| args(&prog.node(*r).op))
        .chain(full_outs.iter().map(|(_, o)| *o))
        .collect();
    while let Some(r) = stack.pop() {
        let n = prog.node(r);
        if n.per_row || need[r as usize] {
            continue;
        }
        need[r as usize] = true;
        stack.extend(args(&n.op));
    }
    // Last use of each needed node within the chunk.
    let mut last = vec![0usize; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        if need[i] {
            for a in args(&n.op) {
                last[a as usize] = i;
            }
        }
    }
    for r in reds
        .iter()
        .flat_map(|r| args(&prog.node(*r).op))
        .chain(full_outs.iter().map(|(_, o)| *o))
    {
        last[r as usize] = usize::MAX;
    }
    let mut temps: Vec<PRef> = Vec::new();
    for (i, n) in prog.nodes.iter().enumerate() {
        if !need[i] {
            continue;
        }
        debug_assert!(ph[i] <= p);
        let r = i as PRef;
        let v = match n.op {
            POp::Input(k) => {
                let o = cx.ops[k as usize];
                let (base, sub) = addr_of(o.dtype.size() as u32);
                let v = cx.va.take()?;
                cx.e.push(Instr::VLoad {
                    fmt: o.dtype.mem(),
                    dst: v,
                    addr: Addr::new(base, o.base),
                    sub_stride: Some(sub),
                    lane_stride: None,
                    mask: None,
                });
                v
            }
            POp::Index(d) => {
                let col = colidx.ok_or_else(|| {
                    KernelError::Unsupported("Index without a column index".into())
                })?;
                emit_row_index(cx, d as usize, col)?
            }
            _ => cx.emit_elementwise(r)?,
        };
        cx.regs.insert(r, v);
        temps.push(r);
        for a in args(&n.op) {
            if last[a as usize] == i && !prog.node(a).per_row {
                cx.release(a);
            }
        }
    }
    // Accumulate.
    for (r, acc, idx) in accs {
        let n = prog.node(*r);
        match n.op {
            POp::Reduce(kind, a) => {
                let ty = prog.node(a).dtype;
                let mut v = cx.reg(a);
                let masked = if let Some(m) = mask {
                    let t = cx.va.take()?;
                    let id = vexpr::const_bits(identity(kind, ty), ty);
                    cx.e.push(Instr::VSel {
                        ty: ty.lane(),
                        dst: t,
                        mask: m,
                        a: v,
                        b: VSrc::Imm(id),
                    });
                    v = t;
                    Some(t)
                } else {
                    None
                };
                cx.e.push(Instr::VBin {
                    op: red_op(kind).0,
                    ty: ty.lane(),
                    dst: *acc,
                    a: *acc,
                    b: VSrc::V(v),
                });
                if let Some(t) = masked {
                    cx.va.give(t);
                }
            }
            POp::ArgMax(a) | POp::ArgMin(a) => {
                let ty = prog.node(a).dtype.lane();
                let v = cx.reg(a);
                let idx = idx.expect("index accumulator");
                let better = cx.va.take_mask()?;
                let t1 = cx.va.take_mask()?;
                let op = if matches!(n.op, POp::ArgMax(_)) {
                    CmpOp::Gt
                } else {
                    CmpOp::Lt
                };
                cx.e.push(Instr::VCmp {
                    op,
                    ty,
                    dst: better,
                    a: v,
                    b: VSrc::V(*acc),
                });
                if ty == VType::F32 {
                    // A NaN beats anything but an earlier NaN.
                    let t2 = cx.va.take_mask()?;
                    cx.e.push(Instr::VCmp {
                        op: CmpOp::Ne,
                        ty,
                        dst: t1,
                        a: v,
                        b: VSrc::V(v),
                    });
                    cx.e.push(Instr::VCmp {
                        op: CmpOp::Eq,
                        ty,
                        dst: t2,
                        a: *acc,
                        b: VSrc::V(*acc),
                    });
                    cx.e.push(Instr::MLogic {
                        op: MaskOp::And,
                        dst: t1,
                        a: t1,
                        b: t2,
                    });
                    cx.e.push(Instr::MLogic {
                        op: MaskOp::Or,
                        dst: better,
                        a: better,
                        b: t1,
                    });
                    cx.va.give_mask(t2);
                }
                if let Some(m) = mask {
                    cx.e.push(Instr::MLogic {
                        op: MaskOp::And,
                        dst: better,
                        a: better,
                        b: m,
                    });
                }
                cx.e.push(Instr::VSel {
                    ty,
                    dst: *acc,
                    mask: better,
                    a: v,
                    b: VSrc::V(*acc),
                });
                cx.e.push(Instr::VSel {
                    ty: VType::I32,
                    dst: idx,
                    mask: better,
                    a: colidx.expect("column index"),
                    b: VSrc::V(idx),
                });
                cx.va.give_mask(better);
                cx.va.give_mask(t1);
            }
            _ => unreachable!(),
        }
    }
    // Full outputs.
    for (k, o) in full_outs {
        let op = cx.ops[cx.inputs + k];
        let (base, sub) = addr_of(op.dtype.size() as u32);
        store(cx, *o, op, Addr::new(base, op.base), Some(sub), None)?;
    }
    for r in temps {
        cx.release(r);
    }
    Ok(())
}
