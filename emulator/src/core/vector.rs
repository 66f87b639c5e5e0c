//! The vector unit's register instructions: elementwise math, masks, and the cross-lane unit.
//!
//! Each instruction computes its whole result register at once with the loops of
//! [`crate::numerics::lanes`] into a spare register, which then changes places with the
//! destination (no copy); timing-only runs compute nothing.

use tpuemu_isa::ops::{IotaKind, MaskOp};
use tpuemu_isa::reg::{LANES, SUBLANES, VREG_ELEMS};
use tpuemu_isa::{Instr, MReg, Unit, VReg, VSrc};

use super::state::{MaskData, VregData};
use super::timing::{Reg, SyncUnit};
use super::{Core, Env, Flow};
use crate::fault::FaultKind;
use crate::numerics::lanes::{self, Operand};
use crate::recorder::Recorder;

/// Where an instruction's result goes.
enum Dst {
    V(VReg),
    M(MReg),
}

impl Core {
    #[inline]
    pub(super) fn vready(&self, v: VReg) -> u64 {
        self.t.vreg[v.index() as usize]
    }

    #[inline]
    pub(super) fn mready(&self, m: MReg) -> u64 {
        self.t.mreg[m.index() as usize]
    }

    /// The spare register results are computed into.
    #[inline]
    pub(super) fn take_vtmp(&mut self) -> Box<VregData> {
        self.vtmp
            .take()
            .unwrap_or_else(|| Box::new([0u32; VREG_ELEMS]))
    }

    /// Makes `data` register `dst`; the register's old buffer becomes the spare.
    #[inline]
    pub(super) fn put_vreg(&mut self, dst: VReg, mut data: Box<VregData>) {
        std::mem::swap(&mut self.vregs[dst.index() as usize], &mut data);
        self.vtmp = Some(data);
        self.vregs_dirty |= 1 << dst.index();
    }

    #[inline]
    fn take_mtmp(&mut self) -> Box<MaskData> {
        self.mtmp
            .take()
            .unwrap_or_else(|| Box::new([false; VREG_ELEMS]))
    }

    #[inline]
    fn put_mreg(&mut self, dst: MReg, mut data: Box<MaskData>) {
        std::mem::swap(&mut self.mregs[dst.index() as usize], &mut data);
        self.mtmp = Some(data);
        self.mregs_dirty |= 1 << dst.index();
    }

    /// A vector operand's lanes and ready cycle.
    #[inline]
    fn operand(&self, b: VSrc) -> (Operand<'_>, u64) {
        match b {
            VSrc::V(v) => (
                Operand::Reg(&self.vregs[v.index() as usize]),
                self.vready(v),
            ),
            VSrc::S(s) => (Operand::Splat(self.s(s)), self.sready(s)),
            VSrc::Imm(bits) => (Operand::Splat(bits), 0),
        }
    }

    #[inline]
    fn reg(&self, v: VReg) -> &VregData {
        &self.vregs[v.index() as usize]
    }

    #[inline]
    fn mask(&self, m: MReg) -> &MaskData {
        &self.mregs[m.index() as usize]
    }

    /// Register-to-register vector and mask instructions.
    pub(crate) fn exec_vector(
        &mut self,
        instr: &Instr,
        env: &Env,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let c = &env.preset.costs;
        let pc = self.pc;
        let f = env.functional;
        let mut out = if f { Some(self.take_vtmp()) } else { None };
        let mut mout = None;
        let (ready, dst) = match *instr {
            Instr::VMov { dst, src, .. } => {
                let (b, bt) = self.operand(src);
                if let Some(o) = out.as_deref_mut() {
                    match b {
                        Operand::Reg(r) => o.copy_from_slice(r),
                        Operand::Splat(v) => o.fill(v),
                    }
                }
                (bt, Dst::V(dst))
            }
            Instr::VBin { op, ty, dst, a, b } => {
                let (bv, bt) = self.operand(b);
                if let Some(o) = out.as_deref_mut() {
                    lanes::bin(op, ty, self.reg(a), bv, o);
                }
                (self.vready(a).max(bt), Dst::V(dst))
            }
            Instr::VUn { op, ty, dst, a } => {
                if let Some(o) = out.as_deref_mut() {
                    lanes::un(op, ty, self.reg(a), o);
                }
                (self.vready(a), Dst::V(dst))
            }
            Instr::VCmp { op, ty, dst, a, b } => {
                let bt = self.operand(b).1;
                if f {
                    let mut m = self.take_mtmp();
                    lanes::cmp(op, ty, self.reg(a), self.operand(b).0, &mut m);
                    mout = Some(m);
                }
                (self.vready(a).max(bt), Dst::M(dst))
            }
            Instr::VSel {
                dst, mask, a, b, ..
            } => {
                let (bv, bt) = self.operand(b);
                if let Some(o) = out.as_deref_mut() {
                    lanes::select(self.mask(mask), self.reg(a), bv, o);
                }
                let ready = self.vready(a).max(bt).max(self.mready(mask));
                (ready, Dst::V(dst))
            }
            Instr::VCvt { op, dst, a } => {
                if let Some(o) = out.as_deref_mut() {
                    lanes::cvt(op, self.reg(a), o);
                }
                (self.vready(a), Dst::V(dst))
            }
            Instr::VIota { kind, dst } => {
                if let Some(o) = out.as_deref_mut() {
                    for (i, x) in o.iter_mut().enumerate() {
                        *x = match kind {
                            IotaKind::Lane => (i % LANES) as u32,
                            IotaKind::Sub => (i / LANES) as u32,
                            IotaKind::Flat => i as u32,
                        };
                    }
                }
                (0, Dst::V(dst))
            }
            Instr::VMask { dst, mask } => {
                if let Some(o) = out.as_deref_mut() {
                    for (x, b) in o.iter_mut().zip(self.mask(mask)) {
                        *x = *b as u32;
                    }
                }
                (self.mready(mask), Dst::V(dst))
            }
            Instr::VRed {
                op,
                ty,
                axis,
                dst,
                a,
            } => {
                if let Some(o) = out.as_deref_mut() {
                    lanes::reduce(op, ty, axis, self.reg(a), o);
                }
                (self.vready(a), Dst::V(dst))
            }
            Instr::VRot {
                axis,
                dst,
                a,
                amount,
            } => {
                let (k, kt) = self.ssrc(amount);
                if let Some(o) = out.as_deref_mut() {
                    lanes::rotate(axis, k as i32 as i64, self.reg(a), o);
                }
                (self.vready(a).max(kt), Dst::V(dst))
            }
            Instr::VPerm {
                axis,
                dst,
                a,
                index,
            } => {
                if let Some(o) = out.as_deref_mut() {
                    let (av, iv) = (self.reg(a), self.reg(index));
                    for s in 0..SUBLANES {
                        for l in 0..LANES {
                            let i = iv[s * LANES + l] as usize;
                            o[s * LANES + l] = match axis {
                                tpuemu_isa::ops::Axis::Lane => av[s * LANES + i % LANES],
                                tpuemu_isa::ops::Axis::Sub => av[(i % SUBLANES) * LANES + l],
                            };
                        }
                    }
                }
                let ready = self.vready(a).max(self.vready(index));
                (ready, Dst::V(dst))
            }
            Instr::VTrans { dst, a } => {
                if let Some(o) = out.as_deref_mut() {
                    let av = self.reg(a);
                    for g in 0..LANES / SUBLANES {
                        for s in 0..SUBLANES {
                            for j in 0..SUBLANES {
                                o[j * LANES + g * SUBLANES + s] = av[s * LANES + g * SUBLANES + j];
                            }
                        }
                    }
                }
                (self.vready(a), Dst::V(dst))
            }
            Instr::MLogic { op, dst, a, b } => {
                if f {
                    let mut m = self.take_mtmp();
                    let (ma, mb) = (self.mask(a), self.mask(b));
                    for ((o, x), y) in m.iter_mut().zip(ma).zip(mb) {
                        *o = match op {
                            MaskOp::And => *x & *y,
                            MaskOp::Or => *x | *y,
                            MaskOp::Xor => *x ^ *y,
                            MaskOp::AndNot => *x & !*y,
                        };
                    }
                    mout = Some(m);
                }
                let ready = self.mready(a).max(self.mready(b));
                (ready, Dst::M(dst))
            }
            Instr::MNot { dst, a } => {
                if f {
                    let mut m = self.take_mtmp();
                    for (o, x) in m.iter_mut().zip(self.mask(a)) {
                        *o = !*x;
                    }
                    mout = Some(m);
                }
                (self.mready(a), Dst::M(dst))
            }
            Instr::MSet { dst, value } => {
                if f {
                    let mut m = self.take_mtmp();
                    m.fill(value);
                    mout = Some(m);
                }
                (0, Dst::M(dst))
            }
            Instr::VGather { .. } => {
                if let Some(o) = out {
                    self.vtmp = Some(o);
                }
                return self.exec_vmem(instr, env, rec);
            }
            _ => unreachable!("exec_vector called with a non-vector instruction"),
        };
        // The unit is the instruction set's (`Instr::unit`); its costs are the preset's.
        let unit = instr.unit();
        let (occ, lat) = match unit {
            Unit::Eup => (c.eup_occupancy, c.eup_latency),
            Unit::Xlu if matches!(instr, Instr::VRed { .. }) => {
                (c.xlu_reduce_occupancy, c.xlu_reduce_latency)
            }
            Unit::Xlu => (c.xlu_permute_occupancy, c.xlu_permute_latency),
            _ => (c.valu_occupancy, c.valu_latency),
        };
        let start = self.t.occupy(SyncUnit::of(unit), ready, occ);
        rec.unit(unit, pc, start, start + occ as u64);
        match dst {
            Dst::V(d) => {
                if let Some(o) = out {
                    self.put_vreg(d, o);
                }
                self.t
                    .set_ready(Reg::V, d.index() as usize, start + lat as u64);
            }
            Dst::M(d) => {
                if let Some(o) = out {
                    self.vtmp = Some(o);
                }
                if let Some(m) = mout {
                    self.put_mreg(d, m);
                }
                self.t
                    .set_ready(Reg::M, d.index() as usize, start + lat as u64);
            }
        }
        Ok(Flow::Next)
    }
}
