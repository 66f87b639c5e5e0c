//! The scalar unit: integer ALU, SMEM loads and stores, branches, and where-am-I reads.

use tpuemu_isa::ops::{BrCond, CmpOp, SAluOp, SysReg};
use tpuemu_isa::{Addr, Instr, SReg, SSrc, Unit};

use super::timing::{MemKey, Range, Reg, SyncUnit};
use super::{Core, Env, Flow};
use crate::fault::FaultKind;
use crate::recorder::Recorder;

fn alu(op: SAluOp, a: u32, b: u32) -> Result<u32, FaultKind> {
    let (sa, sb) = (a as i32, b as i32);
    Ok(match op {
        SAluOp::Add => a.wrapping_add(b),
        SAluOp::Sub => a.wrapping_sub(b),
        SAluOp::Mul => a.wrapping_mul(b),
        SAluOp::Div => {
            if sb == 0 {
                return Err(FaultKind::DivideByZero);
            }
            sa.wrapping_div(sb) as u32
        }
        SAluOp::Rem => {
            if sb == 0 {
                return Err(FaultKind::DivideByZero);
            }
            sa.wrapping_rem(sb) as u32
        }
        SAluOp::DivU => a.checked_div(b).ok_or(FaultKind::DivideByZero)?,
        SAluOp::RemU => a.checked_rem(b).ok_or(FaultKind::DivideByZero)?,
        SAluOp::And => a & b,
        SAluOp::Or => a | b,
        SAluOp::Xor => a ^ b,
        SAluOp::Shl => a.wrapping_shl(b & 31),
        SAluOp::Shr => a.wrapping_shr(b & 31),
        SAluOp::Sra => sa.wrapping_shr(b & 31) as u32,
        SAluOp::Min => sa.min(sb) as u32,
        SAluOp::Max => sa.max(sb) as u32,
    })
}

fn compare(op: CmpOp, a: u32, b: u32) -> bool {
    let (sa, sb) = (a as i32, b as i32);
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => sa < sb,
        CmpOp::Le => sa <= sb,
        CmpOp::Gt => sa > sb,
        CmpOp::Ge => sa >= sb,
        CmpOp::LtU => a < b,
        CmpOp::GeU => a >= b,
    }
}

impl Core {
    /// Value and ready cycle of a scalar operand.
    #[inline]
    pub(crate) fn ssrc(&self, src: SSrc) -> (u32, u64) {
        match src {
            SSrc::Reg(r) => (self.s(r), self.t.sreg[r.index() as usize]),
            SSrc::Imm(i) => (i as u32, 0),
        }
    }

    /// Ready cycle of a scalar register.
    #[inline]
    pub(crate) fn sready(&self, r: SReg) -> u64 {
        self.t.sreg[r.index() as usize]
    }

    /// Writes a scalar result that is ready at `at`.
    #[inline]
    fn sresult(&mut self, dst: SReg, v: u32, at: u64) {
        self.set_s(dst, v);
        self.t.set_ready(Reg::S, dst.index() as usize, at);
    }

    /// Checks an SMEM word access and returns its byte address.
    fn smem_word(&self, addr: Addr) -> Result<usize, FaultKind> {
        let a = self.s(addr.base) as i64 + addr.offset as i64;
        if a % 4 != 0 {
            return Err(FaultKind::Misaligned {
                region: "SMEM",
                addr: a,
                align: 4,
            });
        }
        if !self.smem.contains(a, a + 4) {
            return Err(FaultKind::OutOfBounds {
                access: "access",
                region: "SMEM".into(),
                start: a,
                end: a + 4,
                size: self.smem.size(),
            });
        }
        Ok(a as usize)
    }

    pub(crate) fn exec_scalar(
        &mut self,
        instr: &Instr,
        env: &Env,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let lat = env.preset.costs.scalar_latency as u64;
        let pc = self.pc;
        let (ready, flow) = match *instr {
            Instr::Nop => (0, Flow::Next),
            Instr::Halt => return Ok(Flow::Halt),
            Instr::Br { target } => (0, Flow::Jump(target)),
            Instr::BrIf { cond, reg, target } => {
                let taken = match cond {
                    BrCond::Zero => self.s(reg) == 0,
                    BrCond::NonZero => self.s(reg) != 0,
                };
                (
                    self.sready(reg),
                    if taken {
                        Flow::Jump(target)
                    } else {
                        Flow::Next
                    },
                )
            }
            Instr::SMov { dst, imm } => {
                let start = self.t.occupy(SyncUnit::Scalar, 0, 1);
                self.sresult(dst, imm as u32, start + lat);
                rec.unit(Unit::Scalar, pc, start, start + 1);
                return Ok(Flow::Next);
            }
            Instr::SAlu { op, dst, a, b } => {
                let (bv, bt) = self.ssrc(b);
                let v = alu(op, self.s(a), bv)?;
                let start = self.t.occupy(SyncUnit::Scalar, self.sready(a).max(bt), 1);
                self.sresult(dst, v, start + lat);
                rec.unit(Unit::Scalar, pc, start, start + 1);
                return Ok(Flow::Next);
            }
            Instr::SCmp { op, dst, a, b } => {
                let (bv, bt) = self.ssrc(b);
                let v = compare(op, self.s(a), bv) as u32;
                let start = self.t.occupy(SyncUnit::Scalar, self.sready(a).max(bt), 1);
                self.sresult(dst, v, start + lat);
                rec.unit(Unit::Scalar, pc, start, start + 1);
                return Ok(Flow::Next);
            }
            Instr::SLoad { dst, addr } => {
                let a = self.smem_word(addr)?;
                let r = Range::span(MemKey::Smem, a as u64, a as u64 + 4);
                let ready = self.sready(addr.base).max(self.t.front);
                self.t.check_race(&r, false, ready)?;
                let v = self.smem.read_u32(a);
                let start = self.t.occupy(SyncUnit::Scalar, ready, 1);
                self.sresult(dst, v, start + env.preset.costs.sld_latency as u64);
                rec.unit(Unit::Scalar, pc, start, start + 1);
                return Ok(Flow::Next);
            }
            Instr::SStore { src, addr } => {
                let a = self.smem_word(addr)?;
                let r = Range::span(MemKey::Smem, a as u64, a as u64 + 4);
                let ready = self
                    .sready(addr.base)
                    .max(self.sready(src))
                    .max(self.t.front);
                self.t.check_race(&r, true, ready)?;
                let v = self.s(src);
                self.smem.write_u32(a, v);
                let start = self.t.occupy(SyncUnit::Scalar, ready, 1);
                rec.unit(Unit::Scalar, pc, start, start + 1);
                return Ok(Flow::Next);
            }
            Instr::SSys { dst, reg } => {
                let p = &env.place;
                let v = match reg {
                    SysReg::Chip => p.chip,
                    SysReg::Core => p.core,
                    SysReg::NumChips => p.num_chips,
                    SysReg::NumCores => p.num_cores,
                    SysReg::X => p.coords[0],
                    SysReg::Y => p.coords[1],
                    SysReg::Z => p.coords[2],
                    SysReg::DimX => p.dims[0],
                    SysReg::DimY => p.dims[1],
                    SysReg::DimZ => p.dims[2],
                };
                let start = self.t.occupy(SyncUnit::Scalar, 0, 1);
                self.sresult(dst, v, start + lat);
                rec.unit(Unit::Scalar, pc, start, start + 1);
                return Ok(Flow::Next);
            }
            _ => unreachable!("exec_scalar called with a non-scalar instruction"),
        };
        // Control instructions: occupy the scalar slot once their operand is ready.
        let start = self.t.occupy(SyncUnit::Scalar, ready, 1);
        rec.unit(Unit::Scalar, pc, start, start + 1);
        // A branch ends its bundle (a taken one also costs `branch_taken`, added by the run
        // loop when it jumps).
        if matches!(instr, Instr::Br { .. } | Instr::BrIf { .. }) {
            self.t.front = start + 1;
        }
        if let Flow::Jump(t) = flow
            && t as usize > env.program.instrs.len()
        {
            return Err(FaultKind::Invalid(format!(
                "branch target {t} is past the end of the program"
            )));
        }
        Ok(flow)
    }
}
