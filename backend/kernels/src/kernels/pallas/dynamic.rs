//! Scalars computed while the kernel runs: values read from SMEM (scalar prefetch, `pltpu.SMEM`
//! scratch), loop counters of loops whose bounds are data, and what is computed from them.
//! They live in the scalar unit's registers ([`Sr`]: a register goes back to the pool when
//! nothing holds it any more) and are computed by its instructions with JAX's int32
//! semantics (wrapping; XLA's division: `x / 0 = -1`, `x % 0 = x`). Float arithmetic on such
//! scalars (`i.astype(jnp.float32) * 0.5`) has no scalar instruction: it is computed in a
//! vector, the scalar broadcast, and the result is an array of shape `()`.

use std::cell::RefCell;
use std::rc::Rc;

use tpuemu_isa::ops::{CmpOp, SAluOp};
use tpuemu_isa::{Addr, SReg, SSrc};

use super::PallasError;
use super::body::{Body, Val};
use super::refs::{Pos, indexers};
use super::scalar::at;
use super::spec::{Dt, Eqn};
use super::values::{Lazy, Sr};

impl Body<'_> {
    /// A free scalar register.
    pub(super) fn sreg(&self) -> Result<Rc<Sr>, PallasError> {
        Sr::take(&self.sregs).ok_or_else(|| {
            self.unsupported(
                "more than 23 scalars computed from data live at once (the scalar registers \
                 left beside the constants)"
                    .into(),
            )
        })
    }

    /// A register holding `v` now: its own, or a cached constant (valid until the next
    /// constant is asked for).
    fn reg_now(&mut self, v: &Val) -> Result<SReg, PallasError> {
        match v {
            Val::D(r, _) => Ok(r.reg),
            Val::S(s, d) => Ok(self.e.konst(s.bits(*d) as i32)),
            _ => Err(PallasError::Spec(
                "a scalar operand that is not a scalar".into(),
            )),
        }
    }

    /// `v` as the second operand of a scalar instruction.
    fn ssrc(v: &Val) -> Result<SSrc, PallasError> {
        match v {
            Val::D(r, _) => Ok(SSrc::Reg(r.reg)),
            Val::S(s, d) => Ok(SSrc::Imm(s.bits(*d) as i32)),
            _ => Err(PallasError::Spec(
                "a scalar operand that is not a scalar".into(),
            )),
        }
    }

    /// A new register holding `v` (a copy, so that it may be overwritten).
    pub(super) fn copy_scalar(&mut self, v: &Val) -> Result<Rc<Sr>, PallasError> {
        let dst = self.sreg()?;
        match v {
            Val::D(r, _) => {
                self.e.sadd(dst.reg, r.reg, 0);
            }
            Val::S(s, d) => {
                self.e.smov(dst.reg, s.bits(*d) as i32);
            }
            _ => {
                return Err(PallasError::Spec(
                    "a scalar carry that is not a scalar".into(),
                ));
            }
        }
        Ok(dst)
    }

    /// Moves `v` into register `dst`.
    pub(super) fn move_scalar(&mut self, dst: SReg, v: &Val) -> Result<(), PallasError> {
        match v {
            Val::D(r, _) if r.reg == dst => {}
            Val::D(r, _) => {
                self.e.sadd(dst, r.reg, 0);
            }
            Val::S(s, d) => {
                self.e.smov(dst, s.bits(*d) as i32);
            }
            _ => {
                return Err(PallasError::Spec(
                    "a scalar result that is not a scalar".into(),
                ));
            }
        }
        Ok(())
    }

    /// A register for `origin.0 + origin.1`.
    fn sreg_from(&self, origin: (Rc<Sr>, i64)) -> Result<Rc<Sr>, PallasError> {
        Sr::take_with(&self.sregs, Some(origin)).ok_or_else(|| match self.sreg() {
            Err(e) => e,
            Ok(_) => unreachable!("no register was free"),
        })
    }

    /// `sum(r * k)` over `terms` in a register, and a constant the caller adds to its known
    /// offset: a term whose register is another's plus a constant uses that one
    /// ([`Sr::origin`]); one term with k = 1 is its register; a product computed before on
    /// this path is reused.
    pub(super) fn scaled_sum(
        &mut self,
        terms: &[(Rc<Sr>, i64)],
    ) -> Result<(Rc<Sr>, i64), PallasError> {
        let mut extra = 0i64;
        let terms: Vec<(Rc<Sr>, i64)> = terms
            .iter()
            .map(|(r, k)| match &r.origin {
                Some((o, c)) => {
                    extra += c * k;
                    (o.clone(), *k)
                }
                None => (r.clone(), *k),
            })
            .collect();
        if let [(r, 1)] = terms.as_slice() {
            return Ok((r.clone(), extra));
        }
        if let [(r, k)] = terms.as_slice()
            && let Some(p) = self.products.iter().find_map(|(w, kk, p)| {
                (w.upgrade().is_some_and(|x| Rc::ptr_eq(&x, r)) && kk == k)
                    .then(|| p.upgrade())
                    .flatten()
            })
        {
            return Ok((p, extra));
        }
        let dst = self.sreg()?;
        let mut first = true;
        for (r, k) in &terms {
            let k = i32::try_from(*k).map_err(|_| {
                self.unsupported("an offset computed from data beyond 2 GiB".into())
            })?;
            if first {
                self.e.smul(dst.reg, r.reg, k);
                first = false;
            } else {
                let t = self.sreg()?;
                self.e.smul(t.reg, r.reg, k);
                self.e.sadd(dst.reg, dst.reg, t.reg);
            }
        }
        if let [(r, k)] = terms.as_slice() {
            self.products
                .push((Rc::downgrade(r), *k, Rc::downgrade(&dst)));
        }
        Ok((dst, extra))
    }

    /// `a + b`.
    pub(super) fn add_pos(&mut self, a: &Pos, b: &Pos) -> Result<Pos, PallasError> {
        Ok(match (a, b) {
            (Pos::S(x), Pos::S(y)) => Pos::S(x + y),
            (Pos::S(0), d @ Pos::D(_)) | (d @ Pos::D(_), Pos::S(0)) => d.clone(),
            (Pos::S(k), Pos::D(r)) | (Pos::D(r), Pos::S(k)) => {
                let dst = self.sreg_from((r.clone(), *k))?;
                self.e.sadd(dst.reg, r.reg, *k as i32);
                Pos::D(dst)
            }
            (Pos::D(x), Pos::D(y)) => {
                let dst = self.sreg()?;
                self.e.sadd(dst.reg, x.reg, y.reg);
                Pos::D(dst)
            }
        })
    }

    /// A scalar primitive on operands of which at least one is computed from data.
    pub(super) fn scalar_op(&mut self, eq: &Eqn, ins: &[Val], dt: Dt) -> Result<Val, PallasError> {
        let dts: Vec<Dt> = ins
            .iter()
            .map(|v| match v {
                Val::S(_, d) | Val::D(_, d) => *d,
                _ => Dt::I32,
            })
            .collect();
        let prim = eq.prim.as_str();
        let identity = matches!(
            prim,
            "copy"
                | "copy_p"
                | "squeeze"
                | "reshape"
                | "broadcast_in_dim"
                | "multiple_of"
                | "optimization_barrier"
        );
        let narrows = dt == Dt::I8 && dts[0] != Dt::I8;
        if identity
            || (prim == "convert_element_type" && !dt.is_float() && !dts[0].is_float() && !narrows)
        {
            if prim == "convert_element_type" && dt == Dt::Bool && dts[0] != Dt::Bool {
                let dst = self.sreg()?;
                let a = self.reg_now(&ins[0])?;
                self.e.scmp(CmpOp::Ne, dst.reg, a, 0);
                return Ok(Val::D(dst, dt));
            }
            return Ok(match &ins[0] {
                Val::D(r, _) => Val::D(r.clone(), dt),
                v => v.clone(),
            });
        }
        if dt.is_float() || dts.iter().any(|d| d.is_float()) {
            // The scalar unit computes integers: float work on such a scalar is done in a
            // vector (the value broadcast), which serves as an array of shape ().
            return self
                .pointwise(eq, ins.to_vec(), dt)?
                .pop()
                .ok_or_else(|| PallasError::Spec(format!("`{prim}` without a result")));
        }
        // `x + k`, `x - k`: remembered as x's register plus k (see `scaled_sum`).
        let origin = match (prim, &ins[0], ins.get(1)) {
            // An int8 sum wraps: the register is not its operand plus k.
            _ if dt == Dt::I8 => None,
            ("add", Val::D(r, _), Some(Val::S(k, _)))
            | ("add", Val::S(k, _), Some(Val::D(r, _))) => Some((r.clone(), k.as_i64())),
            ("sub", Val::D(r, _), Some(Val::S(k, _))) => Some((r.clone(), -k.as_i64())),
            _ => None,
        };
        let dst = match origin {
            Some(o) => self.sreg_from(o)?,
            None => self.sreg()?,
        };
        let d = dst.reg;
        let alu = match prim {
            "add" => Some(SAluOp::Add),
            "sub" => Some(SAluOp::Sub),
            "mul" => Some(SAluOp::Mul),
            "max" => Some(SAluOp::Max),
            "min" => Some(SAluOp::Min),
            "and" => Some(SAluOp::And),
            "or" => Some(SAluOp::Or),
            "xor" => Some(SAluOp::Xor),
            _ => None,
        };
        if let Some(op) = alu {
            let a = self.reg_now(&ins[0])?;
            let b = Self::ssrc(&ins[1])?;
            self.e.salu(op, d, a, b);
            self.wrap8(d, dt);
            return Ok(Val::D(dst, dt));
        }
        let cmp = match prim {
            "eq" => Some(CmpOp::Eq),
            "ne" => Some(CmpOp::Ne),
            "lt" => Some(CmpOp::Lt),
            "le" => Some(CmpOp::Le),
            "gt" => Some(CmpOp::Gt),
            "ge" => Some(CmpOp::Ge),
            _ => None,
        };
        if let Some(c) = cmp {
            let a = self.reg_now(&ins[0])?;
            let b = Self::ssrc(&ins[1])?;
            self.e.scmp(c, d, a, b);
            return Ok(Val::D(dst, dt));
        }
        match prim {
            "not" => {
                let a = self.reg_now(&ins[0])?;
                let mask = if dt == Dt::Bool { 1 } else { -1 };
                self.e.salu(SAluOp::Xor, d, a, mask);
            }
            "neg" => {
                let a = self.reg_now(&ins[0])?;
                self.e.ssub(d, SReg::ZERO, a);
            }
            "abs" => {
                let a = self.reg_now(&ins[0])?;
                self.e.ssub(d, SReg::ZERO, a);
                self.e.salu(SAluOp::Max, d, d, a);
            }
            "sign" => {
                // (x > 0) - (x < 0)
                let t = self.sreg()?;
                let a = self.reg_now(&ins[0])?;
                self.e.scmp(CmpOp::Gt, d, a, 0);
                self.e.scmp(CmpOp::Lt, t.reg, a, 0);
                self.e.ssub(d, d, t.reg);
            }
            "select_n" if ins.len() == 3 => {
                // case0 + which * (case1 - case0): exact in wrapping arithmetic.
                let c0 = self.reg_now(&ins[1])?;
                let t = self.sreg()?;
                let c1 = self.reg_now(&ins[2])?;
                self.e.ssub(t.reg, c1, c0);
                let w = self.reg_now(&ins[0])?;
                self.e.smul(t.reg, t.reg, w);
                let c0 = self.reg_now(&ins[1])?;
                self.e.sadd(d, c0, t.reg);
            }
            "clamp" if ins.len() == 3 => {
                let x = self.reg_now(&ins[1])?;
                let lo = Self::ssrc(&ins[0])?;
                self.e.salu(SAluOp::Max, d, x, lo);
                let hi = Self::ssrc(&ins[2])?;
                self.e.salu(SAluOp::Min, d, d, hi);
            }
            "shift_left" | "shift_right_logical" | "shift_right_arithmetic" => {
                let Some(Val::S(k, _)) = ins.get(1) else {
                    return Err(self.unsupported(format!(
                        "`{prim}` by an amount computed from data{}",
                        at(&eq.src)
                    )));
                };
                let k = k.as_i64();
                let a = self.reg_now(&ins[0])?;
                let (op, big) = match prim {
                    "shift_left" => (SAluOp::Shl, None),
                    "shift_right_logical" => (SAluOp::Shr, None),
                    _ => (SAluOp::Sra, Some(31)),
                };
                if !(0..32).contains(&k) {
                    // XLA: an amount of 32 or more shifts everything out.
                    match big {
                        Some(b) => self.e.salu(op, d, a, b),
                        None => self.e.smov(d, 0),
                    };
                } else {
                    self.e.salu(op, d, a, k as i32);
                }
            }
            "div" | "rem" => self.int_div(prim == "div", d, &ins[0], &ins[1])?,
            "convert_element_type" if dt == Dt::I8 => {
                let a = self.reg_now(&ins[0])?;
                self.e.sadd(d, a, 0);
            }
            _ => {
                return Err(self.unsupported(format!(
                    "`{prim}` on a scalar computed from data{}",
                    at(&eq.src)
                )));
            }
        }
        self.wrap8(d, dt);
        Ok(Val::D(dst, dt))
    }

    /// An int8 result wrapped to 8 bits (sign extended), as int8 arithmetic wraps.
    fn wrap8(&mut self, d: SReg, dt: Dt) {
        if dt == Dt::I8 {
            self.e.salu(SAluOp::Shl, d, d, 24);
            self.e.salu(SAluOp::Sra, d, d, 24);
        }
    }

    /// `d = a / b` (or `a % b`) as XLA defines them: by zero -1 (or `a`), `MIN / -1` wraps.
    fn int_div(&mut self, div: bool, d: SReg, a: &Val, b: &Val) -> Result<(), PallasError> {
        let op = if div { SAluOp::Div } else { SAluOp::Rem };
        if let Val::S(k, _) = b {
            let k = k.as_i64() as i32;
            let a = self.reg_now(a)?;
            match k {
                0 if div => self.e.smov(d, -1),
                0 => self.e.sadd(d, a, 0),
                -1 if div => self.e.ssub(d, SReg::ZERO, a),
                -1 => self.e.smov(d, 0),
                k => self.e.salu(op, d, a, k),
            };
            return Ok(());
        }
        let t = self.sreg()?;
        let (zero, minus, end) = (self.e.b.label(), self.e.b.label(), self.e.b.label());
        let br = self.reg_now(b)?;
        self.e.brz(br, zero);
        self.e.scmp(CmpOp::Eq, t.reg, br, -1);
        self.e.brnz(t.reg, minus);
        let ar = self.reg_now(a)?;
        let br = self.reg_now(b)?;
        self.e.salu(op, d, ar, br);
        self.e.br(end);
        self.e.bind_join(minus);
        let ar = self.reg_now(a)?;
        if div {
            self.e.ssub(d, SReg::ZERO, ar);
        } else {
            self.e.smov(d, 0);
        }
        self.e.br(end);
        self.e.bind_join(zero);
        let ar = self.reg_now(a)?;
        if div {
            self.e.smov(d, -1);
        } else {
            self.e.sadd(d, ar, 0);
        }
        self.e.bind_join(end);
        Ok(())
    }

    /// The SMEM word address of the element `eq` indexes in `m` (operands after the reference
    /// and value: `args`), and the register it is computed in (held until the access is
    /// emitted).
    fn smem_addr(
        &mut self,
        eq: &Eqn,
        m: &super::values::Smem,
        args: &[Val],
    ) -> Result<(Addr, Option<Rc<Sr>>), PallasError> {
        let chain = indexers(Some(&serde_json::Value::Object(eq.params.clone())));
        let pos = self.positions(eq, &m.shape, &chain, args)?;
        if pos.iter().any(|p| p.1 != 1) {
            return Err(self.unsupported(format!(
                "reading or writing several elements of an SMEM array at once{} (index one \
                 scalar at a time)",
                at(&eq.src)
            )));
        }
        let n = m.shape.len();
        let mut strides = vec![4i64; n];
        for d in (0..n.saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * m.shape[d + 1] as i64;
        }
        let mut off = m.addr as i64;
        let mut terms = Vec::new();
        for (p, k) in pos.iter().zip(&strides) {
            match &p.0 {
                Pos::S(x) => off += x * k,
                Pos::D(r) => terms.push((r.clone(), *k)),
            }
        }
        if terms.is_empty() {
            return Ok((Addr::abs(off as i32), None));
        }
        let (r, extra) = self.scaled_sum(&terms)?;
        let a = Addr {
            base: r.reg,
            offset: (off + extra) as i32,
        };
        Ok((a, Some(r)))
    }

    /// `x = ref[i]` of an SMEM array: loaded where first used ([`Lazy`]).
    pub(super) fn smem_get(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let Some(Val::Smem(m)) = ins.first() else {
            return Err(PallasError::Spec("get of a non-reference".into()));
        };
        let m = m.clone();
        let (addr, base) = self.smem_addr(eq, &m, &ins[1..])?;
        let l = Rc::new(Lazy {
            addr,
            base,
            dt: m.dt,
            loaded: RefCell::new(None),
        });
        self.pending.push(Rc::downgrade(&l));
        Ok(vec![Val::L(l)])
    }

    /// `v` with an SMEM read loaded.
    pub(super) fn force(&mut self, v: Val) -> Result<Val, PallasError> {
        let Val::L(l) = v else { return Ok(v) };
        if let Some(r) = l.loaded.borrow().as_ref() {
            return Ok(Val::D(r.clone(), l.dt));
        }
        let dst = self.sreg()?;
        self.e.sld(dst.reg, l.addr);
        *l.loaded.borrow_mut() = Some(dst.clone());
        Ok(Val::D(dst, l.dt))
    }

    /// Loads every pending SMEM read still used (before a store into SMEM, a branch or a
    /// loop).
    pub(super) fn flush_pending(&mut self) -> Result<(), PallasError> {
        let live: Vec<Rc<Lazy>> = self.pending.drain(..).filter_map(|w| w.upgrade()).collect();
        for l in live {
            self.force(Val::L(l))?;
        }
        Ok(())
    }

    /// `ref[i] = x` of an SMEM array (the old value when it is used).
    pub(super) fn smem_swap(
        &mut self,
        eq: &Eqn,
        ins: Vec<Val>,
        old_used: bool,
    ) -> Result<Vec<Val>, PallasError> {
        let (Some(Val::Smem(m)), Some(v)) = (ins.first(), ins.get(1)) else {
            return Err(PallasError::Spec("swap of a non-reference".into()));
        };
        let (m, v) = (m.clone(), v.clone());
        if m.dt == Dt::I8 {
            return Err(self.unsupported(format!("storing into an int8 SMEM array{}", at(&eq.src))));
        }
        if !matches!(v, Val::S(..) | Val::D(..)) {
            return Err(self.unsupported(format!(
                "storing an array into an SMEM array{} (one scalar at a time)",
                at(&eq.src)
            )));
        }
        self.flush_pending()?;
        let (addr, _held) = self.smem_addr(eq, &m, &ins[2..])?;
        let old = if old_used {
            let dst = self.sreg()?;
            self.e.sld(dst.reg, addr);
            Some(Val::D(dst, m.dt))
        } else {
            None
        };
        let src = match &v {
            Val::D(r, _) => r.reg,
            Val::S(s, d) => {
                let _ = d;
                let bits = s.convert(m.dt).bits(m.dt) as i32;
                self.e.konst(bits)
            }
            _ => unreachable!("checked above"),
        };
        self.e.sst(src, addr);
        Ok(old.into_iter().collect())
    }
}
