//! Control flow of the body: `pl.when` / `lax.cond` (`cond`), `fori_loop` (`scan` when its
//! trip count is known, `while` otherwise) and `lax.while_loop`.
//!
//! What is known while lowering is decided then: a condition known from the grid indices picks
//! its branch, a loop whose trip count is known is unrolled (so its counter is known too), and
//! a `while` whose carried values stay known is unrolled as well. A condition or a bound
//! computed from data becomes real control flow: branches (`brz`) and a loop (`br` back to its
//! test). Around such code the lowering keeps three invariants:
//!
//! - values read from references before it and still live are copied first (the branch or loop
//!   may overwrite the reference, or not);
//! - what a branch or loop body stores for later use is forgotten after it (it may not have
//!   run);
//! - its results are in fixed places every path writes: a scalar register per scalar, a VMEM
//!   array per array (a loop's carried arrays live there between iterations).

use std::rc::Rc;

use tpuemu_isa::ops::{CmpOp, MemFmt, SAluOp};

use super::PallasError;
use super::body::{Body, Val};
use super::expr::Expr;
use super::scalar::at;
use super::spec::{Dt, Eqn, Jaxpr, Var};
use super::values::{Arr, Sr, two_d};

/// Where a branch's or a loop's result lives on every path.
enum Slot {
    /// A scalar register.
    S(Rc<Sr>, Dt),
    /// A VMEM array.
    A(Arr),
}

/// Unrolled iterations of a `while` whose carry stays known, at most.
const MAX_UNROLL: usize = 4096;

fn jaxpr_param(eq: &Eqn, key: &str) -> Result<Jaxpr, PallasError> {
    let v = eq
        .params
        .get(key)
        .ok_or_else(|| PallasError::Spec(format!("`{}` without `{key}`", eq.prim)))?;
    serde_json::from_value(v.clone()).map_err(|e| PallasError::Spec(e.to_string()))
}

impl Body<'_> {
    pub(super) fn cond(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let branches: Vec<Jaxpr> = eq
            .params
            .get("branches")
            .and_then(|b| b.as_array())
            .ok_or_else(|| PallasError::Spec("cond without branches".into()))?
            .iter()
            .map(|b| {
                serde_json::from_value(b.clone()).map_err(|e| PallasError::Spec(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let n = branches.len();
        if n == 0 {
            return Err(PallasError::Spec("cond without branches".into()));
        }
        let ops = ins[1..].to_vec();
        match &ins[0] {
            Val::S(which, _) => {
                let i = which.as_i64().clamp(0, n as i64 - 1) as usize;
                self.run(&branches[i], ops)
            }
            Val::D(which, _) => {
                let which = which.clone();
                drop(ins);
                self.cond_dynamic(eq, &which, &branches, ops)
            }
            _ => Err(self.unsupported(format!(
                "a `pl.when`/`lax.cond` on an array{} (the condition must be a scalar)",
                at(&eq.src)
            ))),
        }
    }

    /// Branches on `which`, computed while running.
    fn cond_dynamic(
        &mut self,
        eq: &Eqn,
        which: &Rc<Sr>,
        branches: &[Jaxpr],
        ops: Vec<Val>,
    ) -> Result<Vec<Val>, PallasError> {
        self.snapshot_reads()?;
        let slots = self.slots(eq, &eq.outs)?;
        let n = branches.len();
        // lax.switch clamps its index.
        let idx = if n > 2 {
            let t = self.sreg()?;
            self.e.salu(SAluOp::Max, t.reg, which.reg, 0);
            self.e.salu(SAluOp::Min, t.reg, t.reg, n as i32 - 1);
            t
        } else {
            which.clone()
        };
        let end = self.e.b.label();
        for k in (1..n).rev() {
            let next = self.e.b.label();
            if n == 2 {
                self.e.brz(idx.reg, next);
            } else {
                let t = self.sreg()?;
                self.e.scmp(CmpOp::Eq, t.reg, idx.reg, k as i32);
                self.e.brz(t.reg, next);
            }
            self.branch(&branches[k], ops.clone(), &slots)?;
            self.e.br(end);
            self.e.bind_join(next);
        }
        self.branch(&branches[0], ops, &slots)?;
        self.e.bind_join(end);
        Ok(self.slot_vals(&slots))
    }

    /// One path's code: `j` run, its results written to `slots`, what it stored forgotten.
    fn branch(&mut self, j: &Jaxpr, ops: Vec<Val>, slots: &[Slot]) -> Result<(), PallasError> {
        let mark = self.stored.len();
        let products = self.products.len();
        let outs = self.run(j, ops)?;
        self.write_slots(&outs, slots)?;
        self.forget_stored(mark);
        // Products computed on this path are not on the others.
        self.products.truncate(products);
        Ok(())
    }

    /// A place for each of `outs` that every path writes.
    fn slots(&mut self, eq: &Eqn, outs: &[Var]) -> Result<Vec<Slot>, PallasError> {
        outs.iter()
            .map(|o| {
                let dt = super::body::dt_of(self.kernel, &o.dtype)?;
                if o.is_ref {
                    return Err(self.unsupported(format!(
                        "a reference as the result of a branch or loop{}",
                        at(&eq.src)
                    )));
                }
                if o.shape.is_empty() && !dt.is_float() {
                    return Ok(Slot::S(self.sreg()?, dt));
                }
                let (rows, cols) = two_d(self.kernel, &o.shape, false)?;
                let a = self.vmem.array(
                    rows,
                    cols,
                    MemFmt::W32,
                    dt,
                    o.shape.clone(),
                    "a loop's value",
                )?;
                Ok(Slot::A(a))
            })
            .collect()
    }

    /// The slots' values. An array slot is read like a reference, so that writing one slot
    /// keeps a value still reading it first (carries that swap: `(a, b) -> (b, a + b)`).
    fn slot_vals(&mut self, slots: &[Slot]) -> Vec<Val> {
        slots
            .iter()
            .map(|s| match s {
                Slot::S(r, dt) => Val::D(r.clone(), *dt),
                Slot::A(a) => {
                    let x = Expr::leaf(a.clone());
                    self.reads.push(Rc::downgrade(&x));
                    Val::E(x)
                }
            })
            .collect()
    }

    /// Writes `vals` into `slots`: scalars through temporaries (a value may be another slot's
    /// register), arrays stored.
    fn write_slots(&mut self, vals: &[Val], slots: &[Slot]) -> Result<(), PallasError> {
        let vals: Vec<Val> = vals
            .iter()
            .map(|v| self.force(v.clone()))
            .collect::<Result<_, _>>()?;
        let vals = &vals[..];
        let mut temps: Vec<Option<Rc<Sr>>> = Vec::with_capacity(slots.len());
        for (v, s) in vals.iter().zip(slots) {
            temps.push(match (v, s) {
                (Val::D(r, _), Slot::S(d, _)) if r.reg == d.reg => None,
                (Val::D(..), Slot::S(..)) => Some(self.copy_scalar(v)?),
                _ => None,
            });
        }
        // Arrays first: a value not computed yet may read a scalar slot's register (`acc + x
        // * i` with `i` the loop's counter), which the scalar moves then overwrite.
        for (v, s) in vals.iter().zip(slots) {
            if let Slot::A(a) = s {
                let x = self.expr_of(v, a.dt, &a.shape)?;
                self.protect(a, Some(&x))?;
                self.store_expr(&x, a)?;
            }
        }
        for ((v, s), t) in vals.iter().zip(slots).zip(&temps) {
            if let Slot::S(d, _) = s {
                match t {
                    Some(t) => {
                        self.e.sadd(d.reg, t.reg, 0);
                    }
                    None => self.move_scalar(d.reg, v)?,
                }
            }
        }
        Ok(())
    }

    /// Copies every live value read from a reference, and loads every pending read of SMEM,
    /// so that code that may or may not run cannot change them.
    fn snapshot_reads(&mut self) -> Result<(), PallasError> {
        self.flush_pending()?;
        self.reads.retain(|w| w.strong_count() > 0);
        let live: Vec<Rc<Expr>> = self.reads.iter().filter_map(|w| w.upgrade()).collect();
        for leaf in live {
            if leaf.cache.borrow().is_some() {
                continue;
            }
            if let Some(a) = leaf.stored() {
                let copy = self.copy_arr(&a)?;
                self.set_stored(&leaf, copy);
            }
        }
        Ok(())
    }

    /// Forgets what was stored after `mark` (code that may not have run).
    fn forget_stored(&mut self, mark: usize) {
        for w in self.stored.drain(mark..) {
            if let Some(x) = w.upgrade() {
                *x.cache.borrow_mut() = None;
            }
        }
    }

    pub(super) fn scan(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let p = &eq.params;
        let get = |key: &str| p.get(key).and_then(|v| v.as_i64()).unwrap_or(0) as usize;
        let (length, nconsts, ncarry) = (get("length"), get("num_consts"), get("num_carry"));
        let reverse = p.get("reverse").and_then(|v| v.as_bool()).unwrap_or(false);
        let j = jaxpr_param(eq, "jaxpr")?;
        if ins.len() != nconsts + ncarry || j.outvars.len() != ncarry || reverse {
            return Err(self.unsupported(format!(
                "a `lax.scan` over arrays or with stacked outputs{} (`fori_loop` is lowered)",
                at(&eq.src)
            )));
        }
        if length > MAX_UNROLL {
            return Err(self.unsupported(format!(
                "a loop of {length} iterations{} (at most {MAX_UNROLL} are unrolled)",
                at(&eq.src)
            )));
        }
        let consts = ins[..nconsts].to_vec();
        let mut carry = ins[nconsts..].to_vec();
        for _ in 0..length {
            let mut args = consts.clone();
            args.extend(carry);
            carry = self.run(&j, args)?;
        }
        Ok(carry)
    }

    /// `lax.while_loop` (and `fori_loop` with bounds computed from data): unrolled while its
    /// carry and condition are known, a loop from the first iteration where they are not.
    pub(super) fn while_loop(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let p = &eq.params;
        let get = |key: &str| p.get(key).and_then(|v| v.as_i64()).unwrap_or(0) as usize;
        let (cn, bn) = (get("cond_nconsts"), get("body_nconsts"));
        let cj = jaxpr_param(eq, "cond_jaxpr")?;
        let bj = jaxpr_param(eq, "body_jaxpr")?;
        if ins.len() < cn + bn {
            return Err(PallasError::Spec("while with too few operands".into()));
        }
        let cconsts = ins[..cn].to_vec();
        let bconsts = ins[cn..cn + bn].to_vec();
        let mut carry = ins[cn + bn..].to_vec();
        drop(ins);
        let mut iters = 0;
        while carry.iter().all(|v| matches!(v, Val::S(..))) {
            let mut args = cconsts.clone();
            args.extend(carry.iter().cloned());
            let go = self.run(&cj, args)?;
            match go.first() {
                Some(Val::S(s, _)) if s.as_i64() == 0 => return Ok(carry),
                Some(Val::S(..)) => {}
                _ => break,
            }
            iters += 1;
            if iters > MAX_UNROLL {
                return Err(self.unsupported(format!(
                    "a `while` loop of more than {MAX_UNROLL} iterations on values known while \
                     lowering{}",
                    at(&eq.src)
                )));
            }
            let mut args = bconsts.clone();
            args.extend(carry);
            carry = self.run(&bj, args)?;
        }
        self.loop_dynamic(eq, &cj, &bj, cconsts, bconsts, carry)
    }

    /// A loop in the program: test, body, back.
    fn loop_dynamic(
        &mut self,
        eq: &Eqn,
        cj: &Jaxpr,
        bj: &Jaxpr,
        cconsts: Vec<Val>,
        bconsts: Vec<Val>,
        init: Vec<Val>,
    ) -> Result<Vec<Val>, PallasError> {
        self.snapshot_reads()?;
        let vars: Vec<Var> = bj.invars[bj.invars.len() - init.len()..].to_vec();
        let slots = self.slots(eq, &vars)?;
        self.write_slots(&init, &slots)?;
        drop(init);
        // The constants stay in their registers for the whole loop: a register freed after
        // its last use in the body would be reused before the next iteration reads it.
        let keep = (cconsts.clone(), bconsts.clone());
        let (head, end) = (self.e.b.label(), self.e.b.label());
        self.e.bind_join(head);
        let products = self.products.len();
        let mark = self.stored.len();
        let mut args = cconsts;
        args.extend(self.slot_vals(&slots));
        let go = self.run(cj, args)?;
        let go: Vec<Val> = go
            .into_iter()
            .map(|v| self.force(v))
            .collect::<Result<_, _>>()?;
        match go.first() {
            Some(Val::D(r, _)) => {
                let r = r.reg;
                self.e.brz(r, end);
            }
            Some(Val::S(s, _)) if s.as_i64() == 0 => {
                self.e.br(end);
            }
            Some(Val::S(..)) => {}
            _ => {
                return Err(
                    self.unsupported(format!("a loop condition that is an array{}", at(&eq.src)))
                );
            }
        }
        drop(go);
        let mut args = bconsts;
        args.extend(self.slot_vals(&slots));
        let next = self.run(bj, args)?;
        self.write_slots(&next, &slots)?;
        drop(next);
        self.e.br(head);
        self.forget_stored(mark);
        self.products.truncate(products);
        self.e.bind_join(end);
        drop(keep);
        Ok(self.slot_vals(&slots))
    }
}
