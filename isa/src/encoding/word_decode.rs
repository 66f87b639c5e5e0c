//! Decoding a 16-byte instruction word (layout in [`super::word`]): read each field with a
//! range check, then re-encode and compare, so that only canonical words are accepted, then
//! check the instruction's validity.

use super::word::{F_IMM, F_OPT, F_SREG, INSTR_BYTES, OPCODES, WordError, encode_instr};
use crate::instr::{Addr, DmaShape, Instr, MemRef, Remote, SSrc, VSrc};
use crate::ops::*;
use crate::reg::{ArgSlot, MReg, Mxu, SReg, Sem, VReg};
use crate::verify::check_instr;

/// Reads fields out of a word, with range checks.
struct Fields<'a>(&'a [u8; INSTR_BYTES]);

impl Fields<'_> {
    fn sel<T>(
        &self,
        i: usize,
        from_code: fn(u8) -> Option<T>,
        field: &'static str,
    ) -> Result<T, WordError> {
        let value = self.0[1 + i];
        from_code(value).ok_or(WordError::Field {
            byte: 1 + i,
            field,
            value: value as u32,
        })
    }
    fn reg<T>(
        &self,
        i: usize,
        new: fn(u8) -> Option<T>,
        field: &'static str,
    ) -> Result<T, WordError> {
        let byte = if i < 4 { 4 + i } else { 8 + i };
        let value = self.0[byte];
        new(value).ok_or(WordError::Field {
            byte,
            field,
            value: value as u32,
        })
    }
    fn s(&self, i: usize) -> Result<SReg, WordError> {
        self.reg(i, SReg::new, "scalar register")
    }
    fn v(&self, i: usize) -> Result<VReg, WordError> {
        self.reg(i, VReg::new, "vector register")
    }
    fn m(&self, i: usize) -> Result<MReg, WordError> {
        self.reg(i, MReg::new, "mask register")
    }
    fn flag(&self, f: u8) -> bool {
        self.0[15] & f != 0
    }
    fn opt<T>(
        &self,
        i: usize,
        new: fn(u8) -> Option<T>,
        field: &'static str,
    ) -> Result<Option<T>, WordError> {
        if self.flag(F_OPT[i - 4]) {
            self.reg(i, new, field).map(Some)
        } else {
            Ok(None)
        }
    }
    fn imm(&self) -> u32 {
        u32::from_le_bytes([self.0[8], self.0[9], self.0[10], self.0[11]])
    }
    fn addr(&self) -> Result<Addr, WordError> {
        Ok(Addr::new(self.s(1)?, self.imm() as i32))
    }
    fn ssrc(&self) -> Result<SSrc, WordError> {
        if self.flag(F_IMM) {
            Ok(SSrc::Imm(self.imm() as i32))
        } else {
            self.s(2).map(SSrc::Reg)
        }
    }
    fn vsrc(&self) -> Result<VSrc, WordError> {
        if self.flag(F_IMM) {
            Ok(VSrc::Imm(self.imm()))
        } else if self.flag(F_SREG) {
            self.s(2).map(VSrc::S)
        } else {
            self.v(2).map(VSrc::V)
        }
    }
    fn ty(&self) -> Result<VType, WordError> {
        self.sel(1, VType::from_code, "element type")
    }
    fn memref(&self, space_sel: usize, reg: usize, slot: usize) -> Result<MemRef, WordError> {
        Ok(MemRef {
            space: self.sel(space_sel, Space::from_code, "memory space")?,
            slot: self.opt(slot, ArgSlot::new, "argument slot")?,
            addr: self.s(reg)?,
        })
    }
}

/// Decodes a 16-byte word. Accepts exactly the words [`encode_instr`] produces for valid
/// instructions ([`check_instr`]).
pub fn decode_word(b: &[u8; INSTR_BYTES]) -> Result<Instr, WordError> {
    use Instr::*;
    let f = Fields(b);
    let name = *OPCODES.get(b[0] as usize).ok_or(WordError::Opcode(b[0]))?;
    let instr = match name {
        "nop" => Nop,
        "halt" => Halt,
        "barrier" => Barrier,
        "mark.end" => MarkEnd,
        "br" => Br { target: f.imm() },
        "brif" => BrIf {
            cond: f.sel(0, BrCond::from_code, "branch condition")?,
            reg: f.s(0)?,
            target: f.imm(),
        },
        "smov" => SMov {
            dst: f.s(0)?,
            imm: f.imm() as i32,
        },
        "salu" => SAlu {
            op: f.sel(0, SAluOp::from_code, "scalar operation")?,
            dst: f.s(0)?,
            a: f.s(1)?,
            b: f.ssrc()?,
        },
        "scmp" => SCmp {
            op: f.sel(0, CmpOp::from_code, "comparison")?,
            dst: f.s(0)?,
            a: f.s(1)?,
            b: f.ssrc()?,
        },
        "sld" => SLoad {
            dst: f.s(0)?,
            addr: f.addr()?,
        },
        "sst" => SStore {
            src: f.s(0)?,
            addr: f.addr()?,
        },
        "ssys" => SSys {
            dst: f.s(0)?,
            reg: f.sel(0, SysReg::from_code, "system value")?,
        },
        "vld" | "vst" => {
            let fmt = f.sel(0, MemFmt::from_code, "memory format")?;
            let (v, addr) = (f.v(0)?, f.addr()?);
            let sub_stride = f.opt(4, SReg::new, "scalar register")?;
            let lane_stride = f.opt(5, SReg::new, "scalar register")?;
            let mask = f.opt(6, MReg::new, "mask register")?;
            if name == "vld" {
                VLoad {
                    fmt,
                    dst: v,
                    addr,
                    sub_stride,
                    lane_stride,
                    mask,
                }
            } else {
                VStore {
                    fmt,
                    src: v,
                    addr,
                    sub_stride,
                    lane_stride,
                    mask,
                }
            }
        }
        "vgather" => VGather {
            fmt: f.sel(0, MemFmt::from_code, "memory format")?,
            dst: f.v(0)?,
            addr: f.addr()?,
            index: f.v(2)?,
            mask: f.opt(4, MReg::new, "mask register")?,
        },
        "vmov" => VMov {
            ty: f.ty()?,
            dst: f.v(0)?,
            src: f.vsrc()?,
        },
        "vbin" => VBin {
            op: f.sel(0, VBinOp::from_code, "vector operation")?,
            ty: f.ty()?,
            dst: f.v(0)?,
            a: f.v(1)?,
            b: f.vsrc()?,
        },
        "vun" => VUn {
            op: f.sel(0, VUnOp::from_code, "vector operation")?,
            ty: f.ty()?,
            dst: f.v(0)?,
            a: f.v(1)?,
        },
        "vcmp" => VCmp {
            op: f.sel(0, CmpOp::from_code, "comparison")?,
            ty: f.ty()?,
            dst: f.m(0)?,
            a: f.v(1)?,
            b: f.vsrc()?,
        },
        "vsel" => VSel {
            ty: f.ty()?,
            dst: f.v(0)?,
            mask: f.m(3)?,
            a: f.v(1)?,
            b: f.vsrc()?,
        },
        "vcvt" => VCvt {
            op: f.sel(0, CvtOp::from_code, "conversion")?,
            dst: f.v(0)?,
            a: f.v(1)?,
        },
        "viota" => VIota {
            kind: f.sel(0, IotaKind::from_code, "index kind")?,
            dst: f.v(0)?,
        },
        "vmask" => VMask {
            dst: f.v(0)?,
            mask: f.m(3)?,
        },
        "vred" => VRed {
            op: f.sel(0, RedOp::from_code, "reduction")?,
            ty: f.ty()?,
            axis: f.sel(2, Axis::from_code, "axis")?,
            dst: f.v(0)?,
            a: f.v(1)?,
        },
        "vrot" => VRot {
            axis: f.sel(2, Axis::from_code, "axis")?,
            dst: f.v(0)?,
            a: f.v(1)?,
            amount: f.ssrc()?,
        },
        "vperm" => VPerm {
            axis: f.sel(2, Axis::from_code, "axis")?,
            dst: f.v(0)?,
            a: f.v(1)?,
            index: f.v(2)?,
        },
        "vtrans" => VTrans {
            dst: f.v(0)?,
            a: f.v(1)?,
        },
        "mlogic" => MLogic {
            op: f.sel(0, MaskOp::from_code, "mask operation")?,
            dst: f.m(0)?,
            a: f.m(1)?,
            b: f.m(2)?,
        },
        "mnot" => MNot {
            dst: f.m(0)?,
            a: f.m(1)?,
        },
        "mset" => MSet {
            dst: f.m(0)?,
            value: f.imm() != 0,
        },
        "mxu.lw" => MxuLoad {
            mxu: f.reg(0, Mxu::new, "matrix unit")?,
            fmt: f.sel(0, MxuFmt::from_code, "matrix format")?,
            transpose: f.sel(1, |c| (c < 2).then_some(c == 1), "transpose flag")?,
            addr: f.addr()?,
            rows: f.s(4)?,
            cols: f.s(5)?,
            stride: f.s(6)?,
        },
        "mxu.mm" => MxuMatmul {
            mxu: f.reg(0, Mxu::new, "matrix unit")?,
            fmt: f.sel(0, MxuFmt::from_code, "matrix format")?,
            prec: f.sel(1, Precision::from_code, "precision")?,
            transpose: f.sel(2, |c| (c < 2).then_some(c == 1), "transpose flag")?,
            addr: f.addr()?,
            rows: f.s(4)?,
            stride: f.s(5)?,
        },
        "mxu.pop" => MxuPop {
            mxu: f.reg(0, Mxu::new, "matrix unit")?,
            acc: f.sel(0, |c| (c < 2).then_some(c == 1), "accumulate flag")?,
            addr: f.addr()?,
            rows: f.s(4)?,
            stride: f.s(5)?,
        },
        "dma" => {
            let reg = f.s(2)?;
            let shape = match f.0[3] {
                0 => DmaShape::Len(reg),
                1 => DmaShape::Desc(reg),
                v => {
                    return Err(WordError::Field {
                        byte: 3,
                        field: "DMA shape kind",
                        value: v as u32,
                    });
                }
            };
            let chip = f.opt(6, SReg::new, "scalar register")?;
            let remote = match chip {
                Some(chip) => {
                    let v = f.imm();
                    let recv_sem =
                        u8::try_from(v)
                            .ok()
                            .and_then(Sem::new)
                            .ok_or(WordError::Field {
                                byte: 8,
                                field: "receive semaphore",
                                value: v,
                            })?;
                    Some(Remote { chip, recv_sem })
                }
                None => None,
            };
            Dma {
                dst: f.memref(0, 0, 4)?,
                src: f.memref(1, 1, 5)?,
                shape,
                sem: f.reg(3, Sem::new, "semaphore")?,
                remote,
            }
        }
        "sem.signal" => SemSignal {
            sem: f.reg(0, Sem::new, "semaphore")?,
            amount: f.ssrc()?,
            chip: f.opt(4, SReg::new, "scalar register")?,
        },
        "sem.wait" => SemWait {
            sem: f.reg(0, Sem::new, "semaphore")?,
            amount: f.ssrc()?,
        },
        "mark.begin" => {
            let v = f.imm();
            MarkBegin {
                name: u16::try_from(v).map_err(|_| WordError::Field {
                    byte: 8,
                    field: "marker index",
                    value: v,
                })?,
            }
        }
        _ => return Err(WordError::Opcode(b[0])),
    };
    let again = encode_instr(&instr);
    if let Some(byte) = (0..INSTR_BYTES).find(|&i| again[i] != b[i]) {
        return Err(WordError::Reserved(byte));
    }
    check_instr(&instr)?;
    Ok(instr)
}
