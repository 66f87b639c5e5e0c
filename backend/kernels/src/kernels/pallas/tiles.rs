//! Evaluating value trees ([`super::expr`]) tile by tile in vector registers.
//!
//! Each node of a tree is evaluated once per tile, its register freed after its last use, so a
//! chain such as `exp(s * scale - m)` costs one load per operand tile and no VMEM round trip
//! between its operations, as Mosaic's fused vector code does. Four tiles are evaluated at once,
//! their instructions interleaved, so that one tile's work fills another's latency. A tree that
//! needs more registers than the core has is split: its operands are stored in VMEM first.

use std::collections::HashMap;
use std::rc::Rc;

use tpuemu_isa::ops::MemFmt;
use tpuemu_isa::ops::VType;
use tpuemu_isa::{Instr, MReg, ProgramBuilder, VReg, VSrc};

use super::PallasError;
use super::body::Body;
use super::expr::{Expr, Kind, Op, decided, emit};
use super::values::{Arr, load, store, vtype};

/// The first register of the pool values are evaluated in (v0..v7 are the consumers').
const POOL_FIRST: u8 = 8;
/// The mask register of the first tile of a group (the k-th tile's is one more per k).
const MASK_FIRST: u8 = 4;

/// The tile of `child` a parent at tile (i, j) reads.
fn child_tile(parent: &Expr, child: &Expr, i: u32, j: u32) -> (u32, u32) {
    if matches!(parent.kind, Kind::Tile(_)) {
        return (i % child.ti().max(1), j % child.tj().max(1));
    }
    (
        if child.rows == 1 { 0 } else { i },
        if child.cols == 1 { 0 } else { j },
    )
}

/// Whether operand `k` of `op` may be an immediate (a constant needs no register there).
fn immediate_ok(op: Op, k: usize) -> bool {
    match op {
        Op::Bin(_) | Op::Cmp(_) | Op::Shift(_) | Op::IntDiv(_) => k == 1,
        Op::Select => k == 1,
        _ => false,
    }
}

/// What evaluating a tile does, recorded so that several tiles' work can be interleaved
/// instruction by instruction.
#[derive(Clone, Debug)]
enum Act {
    /// Load a tile of an array.
    Load(VReg, Arr, u32, u32),
    /// An instruction.
    I(Instr),
}

/// One tile's evaluation: registers held by nodes and the uses each has left.
struct TileEval {
    /// This tile's scratch register and mask (operations of several instructions).
    scratch: (VReg, MReg),
    free: Vec<VReg>,
    held: HashMap<(*const Expr, u32, u32), (VReg, u32)>,
    uses: HashMap<*const Expr, u32>,
    /// Uses a parent gave up at a tile before the node was evaluated there (a select whose
    /// condition is decided there does not evaluate the other case).
    skipped: HashMap<(*const Expr, u32, u32), u32>,
    acts: Vec<Act>,
}

/// Registers ran out: the tree must be split, or fewer tiles interleaved.
struct Spill;

/// Tiles evaluated together: their instructions interleave, so that one tile's work fills the
/// latency of another's (in-order issue has no other way to overlap them).
const GROUP: usize = 4;

impl TileEval {
    fn alloc(&mut self) -> Result<VReg, Spill> {
        self.free.pop().ok_or(Spill)
    }

    /// One use of `n`'s register (at tile (i, j)) is over; frees it (and its operand's, for
    /// views) after the last.
    fn release(&mut self, n: &Expr, i: u32, j: u32) {
        let key = (n as *const Expr, i, j);
        let Some((r, left)) = self.held.get_mut(&key) else {
            return;
        };
        *left -= 1;
        if *left > 0 {
            return;
        }
        let r = *r;
        self.held.remove(&key);
        match &n.kind {
            Kind::View(a) | Kind::Tile(a) if n.cache.borrow().is_none() => {
                let (ci, cj) = child_tile(n, a, i, j);
                self.release(a, ci, cj)
            }
            // A decided select holds the case it chose.
            Kind::Op {
                op: Op::Select,
                args,
                ..
            } if n.cache.borrow().is_none() && chosen(n, args, i, j).is_some() => {
                let c = &args[chosen(n, args, i, j).unwrap_or(1)];
                if matches!(c.kind, Kind::Const(..)) && c.cache.borrow().is_none() {
                    // A constant case was moved into the select's own register.
                    self.free.push(r);
                } else {
                    let (ci, cj) = child_tile(n, c, i, j);
                    self.release(c, ci, cj)
                }
            }
            _ => self.free.push(r),
        }
    }

    /// `n`'s parent at tile (i, j) will not use it there.
    fn skip(&mut self, n: &Expr, i: u32, j: u32) {
        let key = (n as *const Expr, i, j);
        if self.held.contains_key(&key) {
            self.release(n, i, j);
        } else {
            *self.skipped.entry(key).or_insert(0) += 1;
        }
    }
}

/// For a select whose condition is the same in all of tile (i, j): the operand it takes there
/// (1 for case 0, 2 for case 1).
fn chosen(n: &Expr, args: &[Rc<Expr>], i: u32, j: u32) -> Option<usize> {
    if args.len() != 3 {
        return None;
    }
    let (ci, cj) = child_tile(n, &args[0], i, j);
    decided(&args[0], ci, cj).map(|b| if b { 2 } else { 1 })
}

/// Whether `x` is a comparison that only a select reads, evaluated nowhere else.
fn fusable_cmp(x: &Rc<Expr>, st: &TileEval) -> bool {
    matches!(&x.kind, Kind::Op { op: Op::Cmp(_), .. })
        && x.cache.borrow().is_none()
        && st.uses.get(&Rc::as_ptr(x)).copied() == Some(1)
}

/// Counts how many parents in the tree reach each node.
fn count_uses(root: &Rc<Expr>, uses: &mut HashMap<*const Expr, u32>) {
    let key = Rc::as_ptr(root);
    let n = uses.entry(key).or_insert(0);
    *n += 1;
    if *n > 1 {
        return;
    }
    for c in root.children() {
        count_uses(c, uses);
    }
}

/// Records the evaluation of `n` at tile (i, j); the register holding it.
fn eval(st: &mut TileEval, n: &Rc<Expr>, i: u32, j: u32) -> Result<VReg, Spill> {
    let key = (Rc::as_ptr(n), i, j);
    if let Some((r, _)) = st.held.get(&key) {
        return Ok(*r);
    }
    let uses =
        st.uses.get(&key.0).copied().unwrap_or(1) - st.skipped.get(&key).copied().unwrap_or(0);
    let cached = n.cache.borrow().clone();
    let r = match (&n.kind, cached) {
        // A comparison the same in all of the tile: a constant there.
        (Kind::Op { op: Op::Cmp(_), .. }, None) if decided(n, i, j).is_some() => {
            let b = decided(n, i, j).unwrap_or(false);
            for a in n.children() {
                let (ci, cj) = child_tile(n, a, i, j);
                st.skip(a, ci, cj);
            }
            let r = st.alloc()?;
            st.acts.push(Act::I(Instr::VMov {
                ty: VType::I32,
                dst: r,
                src: VSrc::Imm(b as u32),
            }));
            r
        }
        // A select whose condition is decided in the tile: the case it takes (the causal
        // mask off the diagonal).
        (
            Kind::Op {
                op: Op::Select,
                args,
                ..
            },
            None,
        ) if chosen(n, args, i, j).is_some() => {
            let k = chosen(n, args, i, j).unwrap_or(1);
            for (m, a) in args.iter().enumerate() {
                if m != k {
                    let (ci, cj) = child_tile(n, a, i, j);
                    st.skip(a, ci, cj);
                }
            }
            let c = &args[k];
            let (ci, cj) = child_tile(n, c, i, j);
            match (&c.kind, c.cache.borrow().is_none()) {
                (Kind::Const(s, d), true) => {
                    st.skip(c, ci, cj);
                    let r = st.alloc()?;
                    st.acts.push(Act::I(Instr::VMov {
                        ty: vtype(*d),
                        dst: r,
                        src: VSrc::Imm(s.convert(*d).bits(*d)),
                    }));
                    r
                }
                _ => eval(st, c, ci, cj)?,
            }
        }
        (Kind::Iota(lanes), None) => {
            let r = st.alloc()?;
            let (kind, base) = if *lanes {
                (tpuemu_isa::ops::IotaKind::Lane, j * super::values::LANES)
            } else {
                (tpuemu_isa::ops::IotaKind::Sub, i * super::values::SUB)
            };
            st.acts.push(Act::I(Instr::VIota { kind, dst: r }));
            if base != 0 {
                st.acts.push(Act::I(Instr::VBin {
                    op: tpuemu_isa::ops::VBinOp::Add,
                    ty: VType::I32,
                    dst: r,
                    a: r,
                    b: VSrc::Imm(base),
                }));
            }
            r
        }
        (_, Some(a)) => {
            let r = st.alloc()?;
            st.acts.push(Act::Load(r, a, i, j));
            r
        }
        (Kind::Leaf(a), None) => {
            let a = a.clone();
            let r = st.alloc()?;
            st.acts.push(Act::Load(r, a, i, j));
            r
        }
        (Kind::Const(s, d), None) => {
            let r = st.alloc()?;
            st.acts.push(Act::I(Instr::VMov {
                ty: vtype(*d),
                dst: r,
                src: VSrc::Imm(s.convert(*d).bits(*d)),
            }));
            r
        }
        (Kind::Dyn(s, d), None) => {
            let r = st.alloc()?;
            st.acts.push(Act::I(Instr::VMov {
                ty: vtype(*d),
                dst: r,
                src: VSrc::S(s.reg),
            }));
            r
        }
        (Kind::View(a) | Kind::Tile(a), None) => {
            let (ci, cj) = child_tile(n, a, i, j);
            eval(st, a, ci, cj)?
        }
        // `jnp.where(x < y, a, b)`: the comparison's mask feeds the select directly (no 0/1
        // value in between).
        (
            Kind::Op {
                op: Op::Select,
                args,
                ..
            },
            None,
        ) if args.len() == 3 && fusable_cmp(&args[0], st) => {
            let cmp = &args[0];
            let Kind::Op {
                op: Op::Cmp(c),
                ty: cty,
                args: cargs,
                ..
            } = &cmp.kind
            else {
                unreachable!("checked by fusable_cmp")
            };
            let (ci, cj) = child_tile(n, cmp, i, j);
            let operand = |st: &mut TileEval, x: &Rc<Expr>, pi: u32, pj: u32, imm: bool| match (
                &x.kind,
                x.cache.borrow().is_none(),
            ) {
                (Kind::Const(s, d), true) if imm => Ok(VSrc::Imm(s.convert(*d).bits(*d))),
                (Kind::Dyn(s, _), true) if imm => Ok(VSrc::S(s.reg)),
                _ => {
                    let (xi, xj) = (
                        if x.rows == 1 { 0 } else { pi },
                        if x.cols == 1 { 0 } else { pj },
                    );
                    eval(st, x, xi, xj).map(VSrc::V)
                }
            };
            let a0 = operand(st, &cargs[0], ci, cj, false)?;
            let b0 = operand(st, &cargs[1], ci, cj, true)?;
            let c0 = operand(st, &args[1], i, j, true)?;
            let c1 = operand(st, &args[2], i, j, false)?;
            let dst = st.alloc()?;
            let (VSrc::V(a0r), VSrc::V(c1r)) = (a0, c1) else {
                unreachable!("evaluated into registers")
            };
            st.acts.push(Act::I(Instr::VCmp {
                op: *c,
                ty: *cty,
                dst: st.scratch.1,
                a: a0r,
                b: b0,
            }));
            st.acts.push(Act::I(Instr::VSel {
                ty: vtype(n.dt),
                dst,
                mask: st.scratch.1,
                a: c1r,
                b: c0,
            }));
            for (x, v, pi, pj) in [
                (&cargs[0], a0, ci, cj),
                (&cargs[1], b0, ci, cj),
                (&args[1], c0, i, j),
                (&args[2], c1, i, j),
            ] {
                if matches!(v, VSrc::V(_)) {
                    let (xi, xj) = (
                        if x.rows == 1 { 0 } else { pi },
                        if x.cols == 1 { 0 } else { pj },
                    );
                    st.release(x, xi, xj);
                }
            }
            dst
        }
        (Kind::Op { op, ty, from, args }, None) => {
            let mut src = Vec::with_capacity(args.len());
            for (k, a) in args.iter().enumerate() {
                match (&a.kind, a.cache.borrow().is_none()) {
                    (Kind::Const(s, d), true) if immediate_ok(*op, k) => {
                        src.push(VSrc::Imm(s.convert(*d).bits(*d)));
                    }
                    // Integer division and shifts test their second operand lane by lane: a
                    // scalar register goes through a vector one (below).
                    (Kind::Dyn(s, _), true)
                        if immediate_ok(*op, k) && !matches!(op, Op::IntDiv(_) | Op::Shift(_)) =>
                    {
                        src.push(VSrc::S(s.reg));
                    }
                    _ => {
                        let (ci, cj) = child_tile(n, a, i, j);
                        src.push(VSrc::V(eval(st, a, ci, cj)?));
                    }
                }
            }
            let dst = st.alloc()?;
            let mut b = ProgramBuilder::new("");
            emit(&mut b, *op, *ty, *from, n.dt, dst, &src, st.scratch);
            if let Ok(p) = b.finish() {
                st.acts.extend(p.instrs.into_iter().map(Act::I));
            }
            for (k, a) in args.iter().enumerate() {
                if matches!(src[k], VSrc::V(_)) {
                    let (ci, cj) = child_tile(n, a, i, j);
                    st.release(a, ci, cj);
                }
            }
            dst
        }
    };
    st.held.insert(key, (r, uses));
    Ok(r)
}

impl Body<'_> {
    fn pool(&self) -> Vec<VReg> {
        let n = self.core.vregs.clamp(POOL_FIRST as u32 + 2, 64) as u8;
        (POOL_FIRST..n).rev().map(VReg::n).collect()
    }

    /// Evaluates `n` at the first of `tiles` (at most [`GROUP`]) into registers, the tiles'
    /// code interleaved; the registers, one per tile done (the caller goes on with the rest).
    /// The tree is split (its operands stored) until one tile fits the registers; fewer tiles
    /// are interleaved when several do not.
    pub(super) fn tile_regs(
        &mut self,
        n: &Rc<Expr>,
        tiles: &[(u32, u32)],
    ) -> Result<Vec<VReg>, PallasError> {
        let mut uses = HashMap::new();
        count_uses(n, &mut uses);
        let pool = self.pool();
        let mut g = tiles.len().clamp(1, GROUP);
        let (regs, acts) = loop {
            let per = pool.len() / g;
            let mut regs = Vec::new();
            let mut acts = Vec::new();
            let mut spilled = false;
            for (k, &(i, j)) in tiles.iter().enumerate().take(g) {
                let mut free = pool[k * per..(k + 1) * per].to_vec();
                let Some(scratch) = free.pop() else {
                    return Err(PallasError::Build {
                        kernel: self.kernel.into(),
                        what: "too few vector registers".into(),
                    });
                };
                let mut st = TileEval {
                    scratch: (scratch, MReg::n(MASK_FIRST + k as u8)),
                    free,
                    held: HashMap::new(),
                    uses: uses.clone(),
                    skipped: HashMap::new(),
                    acts: Vec::new(),
                };
                match eval(&mut st, n, i, j) {
                    Ok(r) => {
                        regs.push(r);
                        acts.push(st.acts);
                    }
                    Err(Spill) => {
                        spilled = true;
                        break;
                    }
                }
            }
            if !spilled {
                break (regs, acts);
            }
            if g > 1 {
                g /= 2;
            } else {
                self.split(n)?;
                uses.clear();
                count_uses(n, &mut uses);
            }
        };
        // Round robin over the tiles' actions, tile k lagging k steps behind the first: the
        // tiles are at different points of the same sequence, so neighbouring instructions
        // tend to use different units (a load beside an ALU operation) and issue together.
        let longest = acts.iter().map(Vec::len).max().unwrap_or(0);
        for step in 0..longest + acts.len() {
            for (k, a) in acts.iter().enumerate() {
                if let Some(act) = step.checked_sub(k).and_then(|s| a.get(s)) {
                    self.play(act);
                }
            }
        }
        Ok(regs)
    }

    fn play(&mut self, act: &Act) {
        match act {
            Act::Load(r, a, i, j) => load(self.e, *r, a, *i, *j),
            Act::I(i) => self.e.push(*i),
        }
    }

    /// Stores the operations among `n`'s operands, so that `n` needs fewer registers.
    fn split(&mut self, n: &Rc<Expr>) -> Result<(), PallasError> {
        let kids: Vec<Rc<Expr>> = n.children().into_iter().cloned().collect();
        let mut any = false;
        for k in &kids {
            if k.stored().is_none() && !matches!(k.kind, Kind::Const(..) | Kind::Dyn(..)) {
                self.materialize(k)?;
                any = true;
            }
        }
        if any {
            Ok(())
        } else {
            Err(PallasError::Build {
                kernel: self.kernel.into(),
                what: "an operation with more operands than vector registers".into(),
            })
        }
    }

    /// `n` stored in VMEM (computed now if it is not).
    pub(super) fn materialize(&mut self, n: &Rc<Expr>) -> Result<Arr, PallasError> {
        if let Some(a) = n.stored() {
            return Ok(a);
        }
        let mut out = self.vmem.array(
            n.rows,
            n.cols,
            MemFmt::W32,
            n.dt,
            n.shape.clone(),
            "a value",
        )?;
        // A column is computed in every lane.
        out.rep = n.cols == 1;
        self.store_expr(n, &out)?;
        out.shape = n.shape.clone();
        self.set_stored(n, out.clone());
        Ok(out)
    }

    /// Computes `n` into `out`, a whole array of its extent (or 1 where `n` broadcasts: every
    /// tile of `out` is written).
    pub(super) fn store_expr(&mut self, n: &Rc<Expr>, out: &Arr) -> Result<(), PallasError> {
        let all: Vec<(u32, u32)> = (0..out.ti())
            .flat_map(|i| (0..out.tj()).map(move |j| (i, j)))
            .collect();
        let view;
        let src = if (n.rows, n.cols) == (out.rows, out.cols) {
            n
        } else {
            view = Expr::new(
                Kind::View(n.clone()),
                out.rows,
                out.cols,
                n.dt,
                out.shape.clone(),
            );
            &view
        };
        for group in all.chunks(GROUP) {
            let mut rest = group;
            while !rest.is_empty() {
                let regs = self.tile_regs(src, rest)?;
                for (r, &(i, j)) in regs.iter().zip(rest) {
                    store(self.e, *r, out, i, j, None);
                }
                rest = &rest[regs.len()..];
            }
        }
        Ok(())
    }

    /// Records that `n` is stored as `a` (forgotten at the end of a branch or loop body that
    /// stored it: that code may not run).
    pub(super) fn set_stored(&mut self, n: &Rc<Expr>, a: Arr) {
        *n.cache.borrow_mut() = Some(a);
        self.stored.push(Rc::downgrade(n));
    }
}
