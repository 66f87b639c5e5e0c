//! The kernel body, one grid step: a jaxpr over the blocks' references lowered to vector and
//! matrix-unit code (see [`super::values`] for how arrays sit in VMEM and [`super::expr`] for
//! how elementwise work is fused in registers).
//!
//! Scalars known while lowering (grid indices and what is computed from them) fold
//! ([`super::scalar`]); scalars computed from data (read from SMEM, loop counters of loops
//! whose bounds are data) live in scalar registers ([`super::dynamic`]). `pl.when` and
//! `lax.cond` on a known condition pick their branch while lowering, on a computed one they
//! become branches; loops with known bounds are unrolled, others become loops
//! ([`super::control`]). A value read from a reference (`x_ref[...]`) is the reference's
//! memory until something writes it: a store into a reference first stores every live value
//! that still reads what it overwrites.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use tpuemu_isa::ops::{IotaKind, MaskOp};
use tpuemu_isa::{CoreInfo, MReg};

use super::PallasError;
use super::expr::{Expr, Kind};
use super::scalar::{Scalar, at, fold};
use super::spec::{Atom, Dt, Eqn, Jaxpr, literal};
use super::values::{Arr, Hbm, LANES, Lazy, SUB, Smem, Sr, Vmem, store};
use crate::codegen::{Emitter, RegPool};

/// A value while lowering.
#[derive(Clone, Debug)]
pub enum Val {
    /// A scalar known now.
    S(Scalar, Dt),
    /// An array.
    E(Rc<Expr>),
    /// A reference to a block, a scratch buffer or an output block.
    Ref(Arr),
    /// The transpose of a 2-D array, not moved: a matrix product reads it transposed
    /// (`p.T @ v`); pointwise operations apply to it element by element.
    T(Rc<Expr>),
    /// An array in HBM (`memory_space=pl.ANY`).
    Hbm(Hbm),
    /// Semaphores (`pltpu.SemaphoreType.DMA(shape)`): the first one's number, and the shape.
    Sems(u8, Vec<usize>),
    /// A scalar computed while the kernel runs, in a scalar register (an int32 or a bool as 0
    /// or 1; a float32's bits).
    D(Rc<Sr>, Dt),
    /// An array in SMEM (scalar prefetch, `pltpu.SMEM` scratch).
    Smem(Smem),
    /// A scalar read from SMEM, not loaded yet.
    L(Rc<Lazy>),
}

/// Mask registers of stores and reductions at an array's edge (pointwise operations use
/// [`super::expr::M_OP`]).
pub const M_EDGE: MReg = MReg::n(2);
const M_EDGE2: MReg = MReg::n(3);
/// A register for masks' lane and sublane indices.
const V_IOTA: tpuemu_isa::VReg = tpuemu_isa::VReg::n(6);

/// The lowering of one grid step.
pub struct Body<'a> {
    /// The program.
    pub e: &'a mut Emitter,
    /// VMEM.
    pub vmem: &'a mut Vmem,
    /// The kernel's name, for errors.
    pub kernel: &'a str,
    /// This step's grid indices.
    pub ids: &'a [i64],
    /// The grid.
    pub grid: &'a [u32],
    /// The core it runs on.
    pub core: &'a CoreInfo,
    /// Values read from references, while any lives.
    pub reads: Vec<Weak<Expr>>,
    /// Scalar registers for values computed while running.
    pub sregs: Rc<RefCell<RegPool>>,
    /// Values stored in VMEM by the code emitted so far, in order: a branch or a loop body
    /// forgets what it stored (the code may not run).
    pub stored: Vec<Weak<Expr>>,
    /// Reads of SMEM not loaded yet.
    pub pending: Vec<Weak<Lazy>>,
    /// Products `register * k` computed on the current path (forgotten where paths join).
    pub products: Vec<(Weak<Sr>, i64, Weak<Sr>)>,
    /// The matrix unit the next product starts on: products take the units in turn, so one
    /// issued while another drains runs beside it.
    pub next_mxu: u32,
}

impl<'a> Body<'a> {
    /// The lowering of grid step `ids` (scalar registers from `sregs`, shared by the steps).
    pub fn new(
        e: &'a mut Emitter,
        vmem: &'a mut Vmem,
        kernel: &'a str,
        ids: &'a [i64],
        grid: &'a [u32],
        core: &'a CoreInfo,
        sregs: Rc<RefCell<RegPool>>,
    ) -> Self {
        Body {
            e,
            vmem,
            kernel,
            ids,
            grid,
            core,
            reads: Vec::new(),
            sregs,
            stored: Vec::new(),
            pending: Vec::new(),
            products: Vec::new(),
            next_mxu: 0,
        }
    }
}

pub(super) fn dt_of(kernel: &str, s: &str) -> Result<Dt, PallasError> {
    Dt::parse(s).ok_or_else(|| PallasError::unsupported(kernel, format!("dtype {s}")))
}

pub(super) fn ints(p: &serde_json::Map<String, serde_json::Value>, key: &str) -> Vec<i64> {
    p.get(key)
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
        .unwrap_or_default()
}

/// Primitives run for their effect even when their results are unused.
fn effectful(prim: &str) -> bool {
    matches!(
        prim,
        "swap"
            | "cond"
            | "scan"
            | "while"
            | "dma_start"
            | "dma_wait"
            | "semaphore_signal"
            | "semaphore_wait"
    ) || call_prim(prim)
}

fn call_prim(prim: &str) -> bool {
    matches!(
        prim,
        "pjit"
            | "jit"
            | "closed_call"
            | "core_call"
            | "remat"
            | "checkpoint"
            | "custom_jvp_call"
            | "custom_vjp_call"
            | "custom_vjp_call_jaxpr"
    )
}

fn sub_jaxpr(p: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<Jaxpr> {
    serde_json::from_value(p.get(key)?.clone()).ok()
}

impl Body<'_> {
    pub(super) fn unsupported(&self, what: String) -> PallasError {
        PallasError::unsupported(self.kernel, what)
    }

    /// Lowers `j` on `args`; its results.
    pub fn run(&mut self, j: &Jaxpr, args: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        if args.len() != j.invars.len() {
            return Err(PallasError::Spec(format!(
                "a jaxpr of {} inputs given {}",
                j.invars.len(),
                args.len()
            )));
        }
        let scheduled = super::schedule::schedule(j);
        let j = scheduled.as_ref().unwrap_or(j);
        // Each variable's last use: its value is dropped then (a read of a reference that
        // nothing uses any more need not be kept from a store).
        let mut last: HashMap<u32, usize> = HashMap::new();
        let mut uses: HashMap<u32, usize> = HashMap::new();
        for (k, e) in j.eqns.iter().enumerate() {
            for a in &e.ins {
                if let Atom::Var { v } = a {
                    last.insert(*v, k);
                    *uses.entry(*v).or_insert(0) += 1;
                }
            }
        }
        for a in &j.outvars {
            if let Atom::Var { v } = a {
                last.insert(*v, usize::MAX);
                *uses.entry(*v).or_insert(0) += 1;
            }
        }
        let mut env: HashMap<u32, Val> = j.invars.iter().map(|v| v.id).zip(args).collect();
        // Results computed ahead, in the pass that stored their operand (`keep_fused`).
        let mut ahead: HashMap<usize, Val> = HashMap::new();
        for (k, eq) in j.eqns.iter().enumerate() {
            if let Some(v) = ahead.remove(&k) {
                for a in &eq.ins {
                    if let Atom::Var { v } = a
                        && last.get(v) == Some(&k)
                    {
                        env.remove(v);
                    }
                }
                if let Some(o) = eq.outs.first()
                    && last.contains_key(&o.id)
                {
                    env.insert(o.id, v);
                }
                continue;
            }
            // An equation without results runs for its effect (a store, a copy).
            if !effectful(&eq.prim)
                && !eq.outs.is_empty()
                && eq.outs.iter().all(|o| !last.contains_key(&o.id))
            {
                continue;
            }
            let ins: Vec<Val> = eq
                .ins
                .iter()
                .map(|a| self.atom(&env, a))
                .collect::<Result<_, _>>()?;
            for a in &eq.ins {
                if let Atom::Var { v } = a
                    && last.get(v) == Some(&k)
                {
                    env.remove(v);
                }
            }
            let used: Vec<bool> = eq.outs.iter().map(|o| last.contains_key(&o.id)).collect();
            // Work that emits code is a region of the timeline, named after the equation.
            let marked = matches!(
                eq.prim.as_str(),
                "swap"
                    | "dot_general"
                    | "reduce_sum"
                    | "reduce_max"
                    | "reduce_min"
                    | "dma_start"
                    | "dma_wait"
                    | "semaphore_wait"
                    | "slice"
                    | "iota"
            );
            if marked {
                self.e.b.mark_begin(&label(eq));
            }
            let outs = self.eqn(eq, ins, &used)?;
            if marked {
                self.e.b.mark_end();
            }
            for (o, v) in eq.outs.iter().zip(outs) {
                // A value used more than once is computed once.
                let v = match v {
                    Val::E(x) if uses.get(&o.id).copied().unwrap_or(0) > 1 => {
                        self.e.b.mark_begin(&label(eq));
                        let n = uses.get(&o.id).copied().unwrap_or(0);
                        let later = later_uses(j, k, o.id);
                        if !self.keep_fused(&x, &later, n, &mut ahead)? {
                            self.keep(&x)?;
                        }
                        self.e.b.mark_end();
                        Val::E(x)
                    }
                    v => v,
                };
                if last.contains_key(&o.id) {
                    env.insert(o.id, v);
                }
            }
        }
        j.outvars.iter().map(|a| self.atom(&env, a)).collect()
    }

    /// Stores `x` if computing it again would cost more than a load.
    fn keep(&mut self, x: &Rc<Expr>) -> Result<(), PallasError> {
        match &x.kind {
            Kind::Leaf(_) | Kind::Const(..) | Kind::Dyn(..) | Kind::Iota(_) => Ok(()),
            Kind::View(a) if a.stored().is_some() => Ok(()),
            _ => self.materialize(x).map(|_| ()),
        }
    }

    fn atom(&self, env: &HashMap<u32, Val>, a: &Atom) -> Result<Val, PallasError> {
        match a {
            Atom::Var { v } => env
                .get(v)
                .cloned()
                .ok_or_else(|| PallasError::Spec(format!("variable {v} used before it is set"))),
            Atom::Lit { lit, dtype } => {
                let dt = dt_of(self.kernel, dtype)?;
                let x =
                    literal(lit).ok_or_else(|| PallasError::Spec(format!("bad literal {lit}")))?;
                Ok(Val::S(Scalar::literal(x, dt), dt))
            }
        }
    }

    fn eqn(&mut self, eq: &Eqn, ins: Vec<Val>, used: &[bool]) -> Result<Vec<Val>, PallasError> {
        let k = self.kernel;
        // Reads of SMEM are loaded where used; a wait uses only its copy's size.
        let ins = if eq.prim == "dma_wait" || call_prim(&eq.prim) {
            ins
        } else {
            ins.into_iter()
                .map(|v| self.force(v))
                .collect::<Result<Vec<_>, _>>()?
        };
        let out_dt = match eq.outs.first() {
            Some(o) if !o.is_ref => Some(dt_of(k, &o.dtype)?),
            _ => None,
        };
        if out_dt == Some(Dt::I8) && eq.outs.first().is_some_and(|o| !o.shape.is_empty()) {
            return Err(self.unsupported(format!(
                "an int8 array{} (int8 is lowered for scalars read from SMEM)",
                at(&eq.src)
            )));
        }
        // Scalars known now fold.
        if let Some(dt) = out_dt
            && eq.outs.len() == 1
            && eq.outs[0].shape.is_empty()
            && ins.iter().all(|v| matches!(v, Val::S(..)))
        {
            let s: Vec<Scalar> = ins
                .iter()
                .filter_map(|v| match v {
                    Val::S(s, _) => Some(*s),
                    _ => None,
                })
                .collect();
            if let Some(r) = fold(&eq.prim, &s, dt) {
                return Ok(vec![Val::S(r, dt)]);
            }
        }
        // Scalars computed from data: the scalar unit's instructions.
        if let Some(dt) = out_dt
            && !effectful(&eq.prim)
            && eq.outs.len() == 1
            && eq.outs[0].shape.is_empty()
            && ins.iter().all(|v| matches!(v, Val::S(..) | Val::D(..)))
            && ins.iter().any(|v| matches!(v, Val::D(..)))
        {
            return Ok(vec![self.scalar_op(eq, &ins, dt)?]);
        }
        let p = &eq.params;
        match eq.prim.as_str() {
            "program_id" | "num_programs" => {
                let axis = p.get("axis").and_then(|a| a.as_i64()).unwrap_or(0);
                let a = usize::try_from(axis)
                    .ok()
                    .filter(|a| *a < self.grid.len())
                    .ok_or_else(|| {
                        PallasError::refused(
                            k,
                            format!(
                                "{}({axis}) of a {}-dimensional grid{}",
                                eq.prim,
                                self.grid.len(),
                                at(&eq.src)
                            ),
                        )
                    })?;
                let v = if eq.prim == "program_id" {
                    self.ids[a] as i32
                } else {
                    self.grid[a] as i32
                };
                Ok(vec![Val::S(Scalar::I(v), Dt::I32)])
            }
            prim if call_prim(prim) => {
                let j = sub_jaxpr(p, "jaxpr")
                    .ok_or_else(|| PallasError::Spec(format!("`{}` without a jaxpr", eq.prim)))?;
                let n = j.invars.len();
                self.run(&j, ins.into_iter().take(n).collect())
            }
            "cond" => self.cond(eq, ins),
            "scan" => self.scan(eq, ins),
            "while" => self.while_loop(eq, ins),
            "get" if matches!(ins.first(), Some(Val::Smem(_))) => self.smem_get(eq, ins),
            "swap" if matches!(ins.first(), Some(Val::Smem(_))) => {
                self.smem_swap(eq, ins, used.first().copied().unwrap_or(false))
            }
            "get" => self.get(eq, ins),
            "dma_start" => self.dma_start(eq, ins),
            "dma_wait" => self.dma_wait(eq, ins),
            "semaphore_signal" => self.sem_signal(eq, ins),
            "semaphore_wait" => self.sem_wait(eq, ins),
            "swap" => self.swap(eq, ins, used.first().copied().unwrap_or(false)),
            "broadcast_in_dim" => self.broadcast(eq, ins),
            "reshape" | "squeeze" | "expand_dims" => self.reshape(eq, ins),
            "transpose" => self.transpose(eq, ins),
            "slice" => self.slice(eq, ins),
            "tile" => self.tile(eq, ins),
            "iota" => self.iota(eq),
            "dot_general" => self.dot(eq, ins),
            "reduce_sum" | "reduce_max" | "reduce_min" => self.reduce(eq, ins),
            _ => match out_dt {
                Some(dt) => self.pointwise(eq, ins, dt),
                None => Err(self.unsupported(format!("`{}`{}", eq.prim, at(&eq.src)))),
            },
        }
    }

    // ---- references ----

    fn get(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let Some(Val::Ref(r)) = ins.first() else {
            return Err(PallasError::Spec("get of a non-reference".into()));
        };
        let view = self.region(eq, r, &ins[1..])?;
        let x = Expr::leaf(view);
        self.reads.push(Rc::downgrade(&x));
        Ok(vec![Val::E(x)])
    }

    /// Before `dst` is written: every live value that reads it is stored elsewhere, unless it
    /// is read only by `src` tile for tile where it is written.
    pub(super) fn protect(&mut self, dst: &Arr, src: Option<&Rc<Expr>>) -> Result<(), PallasError> {
        let (lo, hi) = dst.extent();
        let overlaps = |a: &Arr| {
            let (start, end) = a.extent();
            start < hi && lo < end
        };
        // References to each node from inside `src`'s tree.
        let mut inner: HashMap<*const Expr, usize> = HashMap::new();
        fn walk(n: &Rc<Expr>, inner: &mut HashMap<*const Expr, usize>) {
            let c = inner.entry(Rc::as_ptr(n)).or_insert(0);
            *c += 1;
            if *c > 1 {
                return;
            }
            if n.cache.borrow().is_some() {
                return;
            }
            match &n.kind {
                Kind::Op { args, .. } => args.iter().for_each(|a| walk(a, inner)),
                Kind::View(a) | Kind::Tile(a) => walk(a, inner),
                _ => {}
            }
        }
        if let Some(src) = src {
            walk(src, &mut inner);
        }
        // Whether every holder of `n` is inside the tree (the root's one holder is the store).
        let private = |n: &Rc<Expr>| -> bool {
            Rc::strong_count(n) <= inner.get(&Rc::as_ptr(n)).copied().unwrap_or(0)
        };
        let same_place = |a: &Arr| {
            a.addr == dst.addr
                && a.base == dst.base
                && a.stride == dst.stride
                && a.fmt == dst.fmt
                && a.prow == a.rows
                && a.pcol == a.cols
                && a.rows == dst.rows
                && a.cols == dst.cols
        };
        // Is every path from `src` to this leaf private, and the leaf read where written?
        let src_private = src.is_some_and(|src| private(src) && tree_private(src, &private));
        self.reads.retain(|w| w.strong_count() > 0);
        let live: Vec<Rc<Expr>> = self.reads.iter().filter_map(|w| w.upgrade()).collect();
        for leaf in live {
            let Some(a) = leaf.stored() else { continue };
            if leaf.cache.borrow().is_some() || !overlaps(&a) {
                continue;
            }
            let in_src = inner.contains_key(&Rc::as_ptr(&leaf));
            // `leaf` here is held by `live` too.
            let only_src =
                in_src && src_private && Rc::strong_count(&leaf) <= inner[&Rc::as_ptr(&leaf)] + 1;
            if only_src && same_place(&a) {
                continue;
            }
            let copy = self.copy_arr(&a)?;
            self.set_stored(&leaf, copy);
        }
        Ok(())
    }

    /// A copy of `a` in 32-bit lanes.
    pub(super) fn copy_arr(&mut self, a: &Arr) -> Result<Arr, PallasError> {
        let x = Expr::leaf(a.clone());
        let out = self.materialize(&Expr::new(
            Kind::View(x),
            a.rows,
            a.cols,
            a.dt,
            a.shape.clone(),
        ))?;
        Ok(out)
    }

    fn swap(&mut self, eq: &Eqn, ins: Vec<Val>, old_used: bool) -> Result<Vec<Val>, PallasError> {
        let (Some(Val::Ref(r)), Some(v)) = (ins.first(), ins.get(1)) else {
            return Err(PallasError::Spec("swap of a non-reference".into()));
        };
        let view = self.region(eq, r, &ins[2..])?;
        let src = self.expr_of(v, view.dt, &view.shape)?;
        drop(ins);
        if (src.rows != view.rows && src.rows != 1) || (src.cols != view.cols && src.cols != 1) {
            return Err(self.unsupported(format!(
                "storing a value of shape {:?} into a reference region of shape {:?}{}",
                src.shape,
                view.shape,
                at(&eq.src)
            )));
        }
        // The old value, when it is used (`swap` returns it).
        let old = if old_used {
            Some(Expr::leaf(self.copy_arr(&view)?))
        } else {
            None
        };
        self.protect(&view, Some(&src))?;
        let (pr, pc) = (view.rows % SUB, view.cols % LANES);
        let tiles: Vec<(u32, u32)> = (0..view.ti())
            .flat_map(|i| (0..view.tj()).map(move |j| (i, j)))
            .collect();
        let mut rest = &tiles[..];
        while !rest.is_empty() {
            let n = rest.len().min(4);
            let regs = self.tile_regs(&src, &rest[..n])?;
            for (reg, &(i, j)) in regs.iter().zip(rest) {
                let rows_cut = i + 1 == view.ti() && pr != 0;
                let cols_cut = j + 1 == view.tj() && pc != 0;
                let mask = self.edge_mask(rows_cut.then_some(pr), cols_cut.then_some(pc));
                store(self.e, *reg, &view, i, j, mask);
            }
            rest = &rest[regs.len()..];
        }
        Ok(old.map(Val::E).into_iter().collect())
    }

    /// A mask of the elements of a tile inside `rows` sublanes and `cols` lanes (None: all).
    pub(super) fn edge_mask(&mut self, rows: Option<u32>, cols: Option<u32>) -> Option<MReg> {
        match (rows, cols) {
            (None, None) => None,
            (Some(r), None) => {
                self.e.mask_below(M_EDGE, V_IOTA, IotaKind::Sub, r);
                Some(M_EDGE)
            }
            (None, Some(c)) => {
                self.e.mask_below(M_EDGE, V_IOTA, IotaKind::Lane, c);
                Some(M_EDGE)
            }
            (Some(r), Some(c)) => {
                self.e.mask_below(M_EDGE, V_IOTA, IotaKind::Sub, r);
                self.e.mask_below(M_EDGE2, V_IOTA, IotaKind::Lane, c);
                self.e.mlogic(MaskOp::And, M_EDGE, M_EDGE, M_EDGE2);
                Some(M_EDGE)
            }
        }
    }

    /// `v` as an array of `shape` (a known scalar broadcast).
    pub(super) fn expr_of(
        &mut self,
        v: &Val,
        dt: Dt,
        shape: &[usize],
    ) -> Result<Rc<Expr>, PallasError> {
        match v {
            Val::E(x) => Ok(x.clone()),
            Val::Ref(_) | Val::Hbm(_) | Val::Sems(..) | Val::Smem(_) => {
                Err(PallasError::Spec("a reference used as a value".into()))
            }
            Val::L(_) => Err(PallasError::Spec(
                "an SMEM read used before it is loaded".into(),
            )),
            Val::D(r, _) => {
                let (rows, cols) = super::values::two_d(self.kernel, shape, false)?;
                Ok(Expr::new(
                    Kind::Dyn(r.clone(), dt),
                    rows,
                    cols,
                    dt,
                    shape.to_vec(),
                ))
            }
            Val::T(_) => {
                Err(self
                    .unsupported("using a transposed array other than in a matrix product".into()))
            }
            Val::S(s, _) => {
                let (rows, cols) = super::values::two_d(self.kernel, shape, false)?;
                Ok(Expr::new(
                    Kind::Const(*s, dt),
                    rows,
                    cols,
                    dt,
                    shape.to_vec(),
                ))
            }
        }
    }
}

/// The equations after `k` that read variable `v`, with their index.
fn later_uses(j: &Jaxpr, k: usize, v: u32) -> Vec<(usize, &Eqn)> {
    j.eqns
        .iter()
        .enumerate()
        .skip(k + 1)
        .filter(|(_, e)| {
            e.ins
                .iter()
                .any(|a| matches!(a, Atom::Var { v: x } if *x == v))
        })
        .collect()
}

/// A region's name: the primitive and where the kernel's source wrote it (`exp kernel.py:12`).
fn label(eq: &Eqn) -> String {
    let place = eq.src.rsplit('/').next().unwrap_or("");
    if place.is_empty() {
        eq.prim.clone()
    } else {
        format!("{} {place}", eq.prim)
    }
}

/// Whether every node of `n`'s tree is held only inside it.
fn tree_private(n: &Rc<Expr>, private: &dyn Fn(&Rc<Expr>) -> bool) -> bool {
    if n.cache.borrow().is_some() {
        return true;
    }
    match &n.kind {
        Kind::Op { args, .. } => args.iter().all(|a| private(a) && tree_private(a, private)),
        Kind::View(a) | Kind::Tile(a) => private(a) && tree_private(a, private),
        _ => true,
    }
}
