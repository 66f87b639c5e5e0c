//! Copies a kernel makes itself: `pltpu.make_async_copy(src, dst, sem).start()` and `.wait()`
//! (`dma_start`, `dma_wait`) between an array in HBM (`memory_space=pl.ANY`) and VMEM
//! references, on the core's DMA engines, with the kernel's semaphores
//! (`pltpu.SemaphoreType.DMA`). A copy counts its bytes on its semaphore when it completes, as
//! on a TPU; `.wait()` waits for the bytes of the copy it describes. Regular semaphores
//! (`pltpu.SemaphoreType.REGULAR`) are signalled and waited on by the kernel itself
//! (`pltpu.semaphore_signal`, `pltpu.semaphore_wait`). Reading a VMEM region
//! before the copy into it has been waited for is a race the emulator reports.

use std::rc::Rc;

use tpuemu_isa::ops::CmpOp;
use tpuemu_isa::{DmaShape, MemRef, SReg, SSrc, Sem};

use super::PallasError;
use super::body::{Body, Val};
use super::refs::{Pos, indexers};
use super::scalar::at;
use super::spec::{Dt, Eqn};
use super::values::Sr;
use crate::codegen::hbm_vmem_desc;

/// One end of a copy: where it starts (a known byte offset plus, when computed from data, a
/// register), its row stride, rows, columns and element bytes.
struct End {
    /// HBM (the argument slot) or VMEM.
    slot: Option<tpuemu_isa::ArgSlot>,
    off: i64,
    base: Option<Rc<Sr>>,
    stride: i64,
    rows: u32,
    cols: u32,
    esz: u32,
}

impl End {
    fn rows_cols(&self) -> (u32, u32) {
        (self.rows, self.cols)
    }
}

/// A semaphore: known, or one of `n` picked by a register.
enum SemSel {
    Known(Sem),
    Picked(Rc<Sr>, u8, usize),
}

impl Body<'_> {
    /// The region `p[key]` (`{"ref": k, "idx": [...], "then": [...]}`) names among `ins`.
    fn end(&mut self, eq: &Eqn, ins: &[Val], key: &str) -> Result<End, PallasError> {
        let p = eq
            .params
            .get(key)
            .ok_or_else(|| PallasError::Spec(format!("a DMA without `{key}`")))?;
        let k = p.get("ref").and_then(|v| v.as_u64()).unwrap_or(u64::MAX) as usize;
        let chain = indexers(Some(p));
        match ins.get(k) {
            Some(Val::Ref(r)) => {
                let v = self.region_of(eq, r, &chain, ins)?;
                if v.fmt.bytes() != v.dt.bytes() || v.dt == Dt::Bool {
                    return Err(self.unsupported(format!("a DMA of {:?}{}", v.dt, at(&eq.src))));
                }
                Ok(End {
                    slot: None,
                    off: v.addr as i64,
                    base: v.base.clone(),
                    stride: v.stride as i64,
                    rows: v.rows,
                    cols: v.cols,
                    esz: v.fmt.bytes(),
                })
            }
            Some(Val::Hbm(h)) => {
                let h = h.clone();
                let pos = self.positions(eq, &h.shape, &chain, ins)?;
                let n = pos.len();
                let esz = h.dt.bytes() as i64;
                let mut strides = vec![esz; n];
                for d in (0..n.saturating_sub(1)).rev() {
                    strides[d] = strides[d + 1] * h.shape[d + 1] as i64;
                }
                let mut offset = 0i64;
                let mut terms = Vec::new();
                for (p, k) in pos.iter().zip(&strides) {
                    match &p.0 {
                        Pos::S(x) => offset += x * k,
                        Pos::D(r) => terms.push((r.clone(), *k)),
                    }
                }
                let lead_ok = n < 3 || pos[..n - 2].iter().all(|p| p.1 == 1);
                if !lead_ok || n == 0 {
                    return Err(self.unsupported(format!(
                        "a DMA of a region of shape {:?} of an HBM array{} (one 2-D block at a time)",
                        pos.iter().map(|p| p.1).collect::<Vec<_>>(),
                        at(&eq.src)
                    )));
                }
                let (rows, cols, rstride) = if n == 1 {
                    (1, pos[0].1, 0)
                } else {
                    (pos[n - 2].1, pos[n - 1].1, strides[n - 2])
                };
                let total: i64 = h.shape.iter().map(|&d| d as i64).product::<i64>() * esz;
                if offset > i32::MAX as i64 || total > i32::MAX as i64 {
                    return Err(PallasError::TooLarge {
                        kernel: self.kernel.into(),
                        what: "a copy beyond 2 GiB into an HBM array".into(),
                    });
                }
                let base = if terms.is_empty() {
                    None
                } else {
                    let (b, extra) = self.scaled_sum(&terms)?;
                    offset += extra;
                    Some(b)
                };
                Ok(End {
                    slot: Some(h.slot),
                    off: offset,
                    base,
                    stride: rstride,
                    rows: rows as u32,
                    cols: cols as u32,
                    esz: esz as u32,
                })
            }
            _ => Err(PallasError::Spec(format!(
                "a DMA's `{key}` is not a reference"
            ))),
        }
    }

    /// The semaphore `p.sem` names.
    fn semaphore(&mut self, eq: &Eqn, ins: &[Val]) -> Result<SemSel, PallasError> {
        let p = eq.params.get("sem");
        let k = p
            .and_then(|p| p.get("ref"))
            .and_then(|v| v.as_u64())
            .unwrap_or(u64::MAX) as usize;
        let Some(Val::Sems(base, shape)) = ins.get(k) else {
            return Err(self.unsupported(format!(
                "a semaphore that is not a scratch semaphore{}",
                at(&eq.src)
            )));
        };
        let (base, shape) = (*base, shape.clone());
        let chain = indexers(p);
        let pos = self.positions(eq, &shape, &chain, ins)?;
        if pos.iter().any(|p| p.1 != 1) && !shape.is_empty() {
            return Err(self.unsupported(format!("a DMA on several semaphores{}", at(&eq.src))));
        }
        let mut flat = 0i64;
        let mut terms = Vec::new();
        let mut scale = 1i64;
        for d in (0..pos.len()).rev() {
            match &pos[d].0 {
                Pos::S(x) => flat += x * scale,
                Pos::D(r) => terms.push((r.clone(), scale)),
            }
            scale *= shape[d] as i64;
        }
        if terms.is_empty() {
            return Ok(SemSel::Known(Sem::n(base + flat as u8)));
        }
        let (r, extra) = self.scaled_sum(&terms)?;
        let flat = flat + extra;
        let r = if flat != 0 {
            match self.add_pos(&Pos::D(r), &Pos::S(flat))? {
                Pos::D(r) => r,
                Pos::S(_) => unreachable!("a register plus a constant"),
            }
        } else {
            r
        };
        Ok(SemSel::Picked(r, base, shape.iter().product()))
    }

    /// Emits `f` with the semaphore `sel` names: a switch over the candidates when a register
    /// picks it.
    fn with_sem(
        &mut self,
        sel: &SemSel,
        mut f: impl FnMut(&mut Self, Sem),
    ) -> Result<(), PallasError> {
        match sel {
            SemSel::Known(s) => f(self, *s),
            SemSel::Picked(r, base, n) => {
                let end = self.e.b.label();
                for k in 0..*n {
                    let next = self.e.b.label();
                    let t = self.sreg()?;
                    self.e.scmp(CmpOp::Eq, t.reg, r.reg, k as i32);
                    self.e.brz(t.reg, next);
                    f(self, Sem::n(base + k as u8));
                    self.e.br(end);
                    self.e.bind_join(next);
                }
                self.e.bind_join(end);
            }
        }
        Ok(())
    }

    /// The two ends of `eq`'s copy, checked against each other: (source, destination, bytes).
    fn ends(&mut self, eq: &Eqn, ins: &[Val]) -> Result<(End, End, u64), PallasError> {
        let src = self.end(eq, ins, "src")?;
        let dst = self.end(eq, ins, "dst")?;
        if src.rows_cols() != dst.rows_cols() || src.esz != dst.esz {
            return Err(PallasError::refused(
                self.kernel,
                format!(
                    "a copy of {:?} elements of {} bytes into {:?} of {} bytes{}",
                    src.rows_cols(),
                    src.esz,
                    dst.rows_cols(),
                    dst.esz,
                    at(&eq.src)
                ),
            ));
        }
        let (r, c) = src.rows_cols();
        let bytes = r as u64 * c as u64 * src.esz as u64;
        Ok((src, dst, bytes))
    }

    pub(super) fn dma_start(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let (src, dst, _) = self.ends(eq, &ins)?;
        let sem = self.semaphore(eq, &ins)?;
        if let Some(Val::Ref(r)) = eq
            .params
            .get("dst")
            .and_then(|p| p.get("ref"))
            .and_then(|v| v.as_u64())
            .and_then(|k| ins.get(k as usize))
        {
            // Values still reading what the copy overwrites are kept first.
            let r = r.clone();
            self.protect(&r, None)?;
        }
        let (rows, cols) = src.rows_cols();
        let desc = hbm_vmem_desc(cols * src.esz, &[(rows, src.stride, dst.stride)], true);
        let d = self.e.descriptor(&desc);
        // Addresses computed from data are summed once, before any switch on the semaphore.
        let s_reg = self.address(&src)?;
        let t_reg = self.address(&dst)?;
        self.with_sem(&sem, |this, sem| {
            let dreg = this.e.konst(d as i32);
            let s = this.mem_ref(&src, &s_reg);
            let t = this.mem_ref(&dst, &t_reg);
            this.e.dma(t, s, DmaShape::Desc(dreg), sem);
        })?;
        Ok(Vec::new())
    }

    pub(super) fn dma_wait(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        // A wait needs its copy's size and semaphore, not its addresses: reads of SMEM that
        // only addresses use are not loaded.
        let bytes = self.copy_bytes(eq, &ins)?;
        let mut ins = ins;
        let sem_args: Vec<usize> = indexers(eq.params.get("sem"))
            .iter()
            .flatten()
            .flat_map(|d| [d.get("at"), d.get("start")])
            .flatten()
            .filter_map(|v| v.get("arg").and_then(|a| a.as_u64()))
            .map(|a| a as usize)
            .collect();
        for k in sem_args {
            if let Some(v) = ins.get(k).cloned() {
                ins[k] = self.force(v)?;
            }
        }
        let sem = self.semaphore(eq, &ins)?;
        self.with_sem(&sem, |this, sem| this.e.wait_bytes(sem, bytes))?;
        Ok(Vec::new())
    }

    /// `pltpu.semaphore_signal(sem, inc)`: adds `inc` to the semaphore.
    pub(super) fn sem_signal(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let (amount, _held) = self.amount(eq, &ins)?;
        let sem = self.semaphore(eq, &ins)?;
        self.with_sem(&sem, |this, sem| {
            this.e.b.sem_signal(sem, amount);
        })?;
        Ok(Vec::new())
    }

    /// `pltpu.semaphore_wait(sem, value)`: waits until the semaphore holds `value`, then takes
    /// it (given back at once when `decrement=False`). A wait nothing will satisfy is a
    /// deadlock the emulator reports with the semaphore.
    pub(super) fn sem_wait(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let (amount, _held) = self.amount(eq, &ins)?;
        let decrement = eq
            .params
            .get("decrement")
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        let sem = self.semaphore(eq, &ins)?;
        self.with_sem(&sem, |this, sem| {
            this.e.b.sem_wait(sem, amount);
            if !decrement {
                this.e.b.sem_signal(sem, amount);
            }
        })?;
        Ok(Vec::new())
    }

    /// A semaphore operation's amount: an immediate, or a register (held while it is used).
    fn amount(&mut self, eq: &Eqn, ins: &[Val]) -> Result<(SSrc, Option<Rc<Sr>>), PallasError> {
        let k = eq
            .params
            .get("amount")
            .and_then(|v| v.as_u64())
            .unwrap_or(u64::MAX) as usize;
        match ins.get(k) {
            Some(Val::S(s, _)) => Ok((SSrc::Imm(s.as_i64() as i32), None)),
            Some(Val::D(r, _)) => Ok((SSrc::Reg(r.reg), Some(r.clone()))),
            _ => Err(self.unsupported(format!(
                "a semaphore amount that is not an int32 scalar{}",
                at(&eq.src)
            ))),
        }
    }

    /// Bytes the copy `eq` describes (its source region's size).
    fn copy_bytes(&self, eq: &Eqn, ins: &[Val]) -> Result<u64, PallasError> {
        let p = eq
            .params
            .get("src")
            .ok_or_else(|| PallasError::Spec("a DMA without `src`".into()))?;
        let k = p.get("ref").and_then(|v| v.as_u64()).unwrap_or(u64::MAX) as usize;
        let (shape, esz) = match ins.get(k) {
            Some(Val::Ref(r)) => (r.shape.clone(), r.fmt.bytes() as u64),
            Some(Val::Hbm(h)) => (h.shape.clone(), h.dt.bytes() as u64),
            _ => return Err(PallasError::Spec("a DMA's `src` is not a reference".into())),
        };
        // Sizes along each dimension still indexed, through the chain.
        let mut sizes: Vec<(u64, bool)> = shape.iter().map(|&d| (d as u64, true)).collect();
        for spec in indexers(Some(p)).iter().filter(|s| !s.is_empty()) {
            let kept: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d].1).collect();
            if spec.len() != kept.len() {
                return Err(self.unsupported(format!(
                    "an indexer of {} dimensions on a {}-dimensional reference{}",
                    spec.len(),
                    kept.len(),
                    at(&eq.src)
                )));
            }
            for (s, &d) in spec.iter().zip(&kept) {
                sizes[d] = if s.get("at").is_some() {
                    (1, false)
                } else {
                    let z = s.get("size").and_then(|v| v.as_u64()).unwrap_or(sizes[d].0);
                    (z, true)
                };
            }
        }
        Ok(sizes.iter().map(|s| s.0).product::<u64>() * esz)
    }

    /// A register holding an end's computed address (its base plus its offset), if computed.
    fn address(&mut self, end: &End) -> Result<Option<Rc<Sr>>, PallasError> {
        let Some(b) = &end.base else { return Ok(None) };
        let t = self.sreg()?;
        self.e.sadd(t.reg, b.reg, end.off as i32);
        Ok(Some(t))
    }

    fn mem_ref(&mut self, end: &End, reg: &Option<Rc<Sr>>) -> MemRef {
        let r: SReg = match reg {
            Some(r) => r.reg,
            None => self.e.konst(end.off as i32),
        };
        match end.slot {
            None => MemRef::vmem(r),
            Some(slot) => MemRef::hbm(slot, r),
        }
    }
}
