//! Elementwise work, lowered lazily and fused in registers.
//!
//! A pointwise equation emits nothing: it builds an [`Expr`] node over its operands. Code is
//! generated when a value is consumed — stored into a reference, reduced, fed to the matrix
//! unit, or used twice — one (8, 128) tile at a time: the expression's tree is evaluated in
//! vector registers (each node once per tile, its register freed after its last use), so a
//! chain such as `exp(s * scale - m)` costs one load per operand tile and no VMEM round trip
//! between its operations, as Mosaic's fused vector code does. A tree that needs more
//! registers than the core has is split: its operands are materialised in VMEM first.
//!
//! Broadcasting follows the layout rule of [`super::values`]: a node whose rows (or columns)
//! are 1 is evaluated at tile row (column) 0 and holds the row (column) in every sublane
//! (lane).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tpuemu_isa::ops::{CmpOp, CvtOp, MemFmt, VBinOp, VType, VUnOp};
use tpuemu_isa::{Instr, MReg, ProgramBuilder, VReg, VSrc};

use super::PallasError;
use super::body::Body;
use super::scalar::Scalar;
use super::spec::Dt;
use super::values::{Arr, LANES, SUB, load, store, vtype};

/// The first register of the pool values are evaluated in (v0..v7 are the consumers').
const POOL_FIRST: u8 = 8;
/// The mask register of the first tile of a group (the k-th tile's is one more per k).
const MASK_FIRST: u8 = 4;

/// A pointwise operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// `vbin`.
    Bin(VBinOp),
    /// `vun`.
    Un(VUnOp),
    /// Logical not of a bool (0/1).
    NotBool,
    /// 2^x.
    Exp2,
    /// x * x.
    Square,
    /// x^y for a whole y.
    IntPow(i32),
    /// A comparison: a bool.
    Cmp(CmpOp),
    /// `select_n(which, case0, case1)`.
    Select,
    /// `convert_element_type`.
    Convert,
    /// The value itself.
    Copy,
}

/// What a node computes.
#[derive(Debug)]
pub enum Kind {
    /// An array in VMEM.
    Leaf(Arr),
    /// A constant.
    Const(Scalar, Dt),
    /// A pointwise operation of `args`, computed in `ty` lanes from operands of dtype `from`.
    Op {
        /// The operation.
        op: Op,
        /// The lanes' type.
        ty: VType,
        /// The first operand's dtype.
        from: Dt,
        /// Operands.
        args: Vec<Rc<Expr>>,
    },
    /// The operand's values, seen with another extent (a broadcast) or shape.
    View(Rc<Expr>),
    /// The operand repeated along rows and columns (`jnp.tile`, whole tiles).
    Tile(Rc<Expr>),
}

/// An array value of the body.
#[derive(Debug)]
pub struct Expr {
    /// What it computes.
    pub kind: Kind,
    /// Logical rows (1: the same row in every sublane of every tile row).
    pub rows: u32,
    /// Logical columns (1: the same value in every lane).
    pub cols: u32,
    /// Its dtype.
    pub dt: Dt,
    /// Its logical shape.
    pub shape: Vec<usize>,
    /// Where it was stored once computed.
    pub cache: RefCell<Option<Arr>>,
}

impl Expr {
    /// An array in VMEM as a value.
    pub fn leaf(a: Arr) -> Rc<Expr> {
        Rc::new(Expr {
            rows: a.rows,
            cols: a.cols,
            dt: a.dt,
            shape: a.shape.clone(),
            kind: Kind::Leaf(a),
            cache: RefCell::new(None),
        })
    }

    /// A node of `kind` with this extent.
    pub fn new(kind: Kind, rows: u32, cols: u32, dt: Dt, shape: Vec<usize>) -> Rc<Expr> {
        Rc::new(Expr {
            kind,
            rows,
            cols,
            dt,
            shape,
            cache: RefCell::new(None),
        })
    }

    /// Row tiles.
    pub fn ti(&self) -> u32 {
        self.rows.div_ceil(SUB)
    }

    /// Column tiles.
    pub fn tj(&self) -> u32 {
        self.cols.div_ceil(LANES)
    }

    /// The array it is, if it is stored.
    pub fn stored(&self) -> Option<Arr> {
        if let Some(a) = self.cache.borrow().as_ref() {
            return Some(a.clone());
        }
        match &self.kind {
            Kind::Leaf(a) => Some(a.clone()),
            _ => None,
        }
    }

    fn children(&self) -> Vec<&Rc<Expr>> {
        if self.cache.borrow().is_some() {
            return Vec::new();
        }
        match &self.kind {
            Kind::Leaf(_) | Kind::Const(..) => Vec::new(),
            Kind::Op { args, .. } => args.iter().collect(),
            Kind::View(a) | Kind::Tile(a) => vec![a],
        }
    }
}

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
        Op::Bin(_) | Op::Cmp(_) => k == 1,
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
            _ => self.free.push(r),
        }
    }
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
    let uses = st.uses.get(&key.0).copied().unwrap_or(1);
    let cached = n.cache.borrow().clone();
    let r = match (&n.kind, cached) {
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
        (Kind::View(a) | Kind::Tile(a), None) => {
            let (ci, cj) = child_tile(n, a, i, j);
            eval(st, a, ci, cj)?
        }
        (Kind::Op { op, ty, from, args }, None) => {
            let mut src = Vec::with_capacity(args.len());
            for (k, a) in args.iter().enumerate() {
                match (&a.kind, a.cache.borrow().is_none()) {
                    (Kind::Const(s, d), true) if immediate_ok(*op, k) => {
                        src.push(VSrc::Imm(s.convert(*d).bits(*d)));
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
            if k.stored().is_none() && !matches!(k.kind, Kind::Const(..)) {
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

    /// `n`'s tiles in row-major order, in groups evaluated together.
    pub(super) fn tile_groups(n: &Expr) -> Vec<Vec<(u32, u32)>> {
        let all: Vec<(u32, u32)> = (0..n.ti())
            .flat_map(|i| (0..n.tj()).map(move |j| (i, j)))
            .collect();
        all.chunks(GROUP).map(|c| c.to_vec()).collect()
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
        for group in Self::tile_groups(n) {
            let mut rest = &group[..];
            while !rest.is_empty() {
                let regs = self.tile_regs(n, rest)?;
                for (r, &(i, j)) in regs.iter().zip(rest) {
                    store(self.e, *r, &out, i, j, None);
                }
                rest = &rest[regs.len()..];
            }
        }
        out.shape = n.shape.clone();
        *n.cache.borrow_mut() = Some(out.clone());
        Ok(out)
    }
}

/// Computes `op` of `src` (the first a register) into `dst`, rounding a bf16 result; `tmp` and
/// `m` are scratch.
#[allow(clippy::too_many_arguments)]
pub fn emit(
    e: &mut ProgramBuilder,
    op: Op,
    ty: VType,
    from: Dt,
    to: Dt,
    dst: VReg,
    src: &[VSrc],
    (tmp, m): (VReg, MReg),
) {
    let reg = |s: &VSrc| match s {
        VSrc::V(v) => *v,
        _ => tmp,
    };
    let a = reg(&src[0]);
    match op {
        Op::Bin(b) => {
            e.vbin(b, ty, dst, a, src[1]);
        }
        Op::Un(u) => {
            e.vun(u, ty, dst, a);
        }
        Op::NotBool => {
            e.vbin(VBinOp::Xor, VType::I32, dst, a, 1u32);
        }
        Op::Exp2 => {
            e.vbin(
                VBinOp::Mul,
                VType::F32,
                dst,
                a,
                std::f32::consts::LN_2.to_bits(),
            );
            e.vun(VUnOp::Exp, VType::F32, dst, dst);
        }
        Op::Square => {
            e.vbin(VBinOp::Mul, ty, dst, a, a);
        }
        Op::IntPow(y) => {
            let one = if ty == VType::F32 {
                1.0f32.to_bits()
            } else {
                1
            };
            e.vmov(ty, tmp, a);
            e.vmov(ty, dst, one);
            let mut k = y.unsigned_abs();
            while k > 0 {
                if k & 1 == 1 {
                    e.vbin(VBinOp::Mul, ty, dst, dst, tmp);
                }
                k >>= 1;
                if k > 0 {
                    e.vbin(VBinOp::Mul, ty, tmp, tmp, tmp);
                }
            }
            if y < 0 {
                e.vmov(VType::F32, tmp, 1.0f32.to_bits());
                e.vbin(VBinOp::Div, VType::F32, dst, tmp, dst);
            }
        }
        Op::Cmp(c) => {
            e.vcmp(c, ty, m, a, src[1]);
            e.vmask(dst, m);
        }
        Op::Select => {
            // select_n(which, case0, case1): case1 where `which` is set.
            e.vcmp(CmpOp::Ne, VType::I32, m, a, 0u32);
            let c1 = match src[2] {
                VSrc::V(v) => v,
                other => {
                    e.vmov(vtype(to), tmp, other);
                    tmp
                }
            };
            e.vsel(vtype(to), dst, m, c1, src[1]);
        }
        Op::Copy => {
            e.vmov(ty, dst, a);
        }
        Op::Convert => match (from.is_float(), to) {
            (true, Dt::F32) => {
                e.vmov(VType::F32, dst, a);
            }
            // Rounded below.
            (true, Dt::Bf16) if from != Dt::Bf16 => {
                e.vcvt(CvtOp::Bf16, dst, a);
                return;
            }
            (true, Dt::Bf16) => {
                e.vmov(VType::F32, dst, a);
            }
            (true, Dt::I32) => {
                e.vcvt(CvtOp::F2I, dst, a);
            }
            (false, Dt::F32) | (false, Dt::Bf16) => {
                e.vcvt(CvtOp::I2F, dst, a);
            }
            (false, Dt::I32) => {
                e.vmov(VType::I32, dst, a);
            }
            (f, Dt::Bool) => {
                let t = if f { VType::F32 } else { VType::I32 };
                e.vcmp(CmpOp::Ne, t, m, a, 0u32);
                e.vmask(dst, m);
            }
        },
    }
    let round = to == Dt::Bf16
        && !matches!(op, Op::Copy | Op::Select | Op::Cmp(_))
        && !(op == Op::Convert && from == Dt::Bf16);
    if round {
        e.vcvt(CvtOp::Bf16, dst, dst);
    }
}
