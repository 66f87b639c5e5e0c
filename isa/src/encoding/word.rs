//! The 16-byte instruction word: one layout for every instruction.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | opcode (one per [`Instr`] variant, [`OPCODES`]) |
//! | 1, 2, 3 | selectors `sel0..sel2`: operation, type, axis, format, ... (`code()` of the op enum) |
//! | 4..8 | registers `r0..r3` (index) |
//! | 8..12 | `imm`: a 32-bit immediate or offset, little-endian |
//! | 12, 13, 14 | registers `r4..r6`: the optional ones |
//! | 15 | flags: bit 0 the operand is an immediate, bit 1 the operand is a scalar register (for a vector operand), bits 2/3/4 `r4`/`r5`/`r6` is present; bits 5-7 reserved |
//!
//! Which instruction uses which field is in `isa/README.md` and in [`encode_instr`]. Every
//! field an instruction does not use is zero, and [`decode_instr`] checks that by encoding what
//! it decoded and comparing, so that decoding accepts exactly one word per instruction.

use crate::instr::{Addr, DmaShape, Instr, MemRef, Remote, SSrc, VSrc};
use crate::ops::*;
use crate::reg::{ArgSlot, MReg, Mxu, SReg, Sem, VReg};
use crate::verify::{InstrError, check_instr};

/// Bytes in one instruction word.
pub const INSTR_BYTES: usize = 16;

/// Opcode names, indexed by opcode (byte 0 of the word).
pub const OPCODES: &[&str] = &[
    "nop",
    "halt",
    "br",
    "brif",
    "smov",
    "salu",
    "scmp",
    "sld",
    "sst",
    "ssys",
    "vld",
    "vst",
    "vgather",
    "vmov",
    "vbin",
    "vun",
    "vcmp",
    "vsel",
    "vcvt",
    "viota",
    "vmask",
    "vred",
    "vrot",
    "vperm",
    "vtrans",
    "mlogic",
    "mnot",
    "mset",
    "mxu.lw",
    "mxu.mm",
    "mxu.pop",
    "dma",
    "sem.signal",
    "sem.wait",
    "barrier",
    "mark.begin",
    "mark.end",
];

const F_IMM: u8 = 1;
const F_SREG: u8 = 2;
const F_OPT: [u8; 3] = [4, 8, 16];

/// Why a 16-byte word is not an instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    /// Byte 0 names no instruction.
    #[error("opcode {0} names no instruction")]
    Opcode(u8),
    /// A selector or register byte is out of range.
    #[error("byte {byte} ({field}) holds {value}, which is out of range")]
    Field {
        /// Byte position in the word.
        byte: usize,
        /// What the byte holds.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// A byte is not as the encoder writes it: a field this instruction does not use is not
    /// zero, or a flag or value is not in its one canonical form.
    #[error(
        "byte {0} is not in canonical form (fields this instruction does not use must be zero)"
    )]
    Reserved(usize),
    /// The fields decode but say something invalid.
    #[error("{0}")]
    Invalid(#[from] InstrError),
}

#[derive(Default)]
struct Word {
    b: [u8; INSTR_BYTES],
}

impl Word {
    fn new(op: u8) -> Self {
        let mut w = Word::default();
        w.b[0] = op;
        w
    }
    fn sel(&mut self, i: usize, code: u8) -> &mut Self {
        self.b[1 + i] = code;
        self
    }
    fn r(&mut self, i: usize, index: u8) -> &mut Self {
        self.b[if i < 4 { 4 + i } else { 8 + i }] = index;
        self
    }
    fn imm(&mut self, v: u32) -> &mut Self {
        self.b[8..12].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn opt(&mut self, i: usize, index: Option<u8>) -> &mut Self {
        if let Some(x) = index {
            self.r(i, x);
            self.b[15] |= F_OPT[i - 4];
        }
        self
    }
    fn addr(&mut self, a: Addr) -> &mut Self {
        self.r(1, a.base.index()).imm(a.offset as u32)
    }
    fn ssrc(&mut self, s: SSrc) -> &mut Self {
        match s {
            SSrc::Reg(r) => self.r(2, r.index()),
            SSrc::Imm(i) => {
                self.b[15] |= F_IMM;
                self.imm(i as u32)
            }
        }
    }
    fn vsrc(&mut self, s: VSrc) -> &mut Self {
        match s {
            VSrc::V(v) => self.r(2, v.index()),
            VSrc::S(r) => {
                self.b[15] |= F_SREG;
                self.r(2, r.index())
            }
            VSrc::Imm(bits) => {
                self.b[15] |= F_IMM;
                self.imm(bits)
            }
        }
    }
}

/// Encodes one instruction as its 16-byte word.
pub fn encode_instr(instr: &Instr) -> [u8; INSTR_BYTES] {
    use Instr::*;
    let op = |name: &str| OPCODES.iter().position(|o| *o == name).unwrap_or(0) as u8;
    let mut w = Word::new(op(opcode_name(instr)));
    match *instr {
        Nop | Halt | Barrier | MarkEnd => &mut w,
        Br { target } => w.imm(target),
        BrIf { cond, reg, target } => w.sel(0, cond.code()).r(0, reg.index()).imm(target),
        SMov { dst, imm } => w.r(0, dst.index()).imm(imm as u32),
        SAlu { op, dst, a, b } => w
            .sel(0, op.code())
            .r(0, dst.index())
            .r(1, a.index())
            .ssrc(b),
        SCmp { op, dst, a, b } => w
            .sel(0, op.code())
            .r(0, dst.index())
            .r(1, a.index())
            .ssrc(b),
        SLoad { dst, addr } => w.r(0, dst.index()).addr(addr),
        SStore { src, addr } => w.r(0, src.index()).addr(addr),
        SSys { dst, reg } => w.sel(0, reg.code()).r(0, dst.index()),
        VLoad {
            fmt,
            dst: v,
            addr,
            sub_stride,
            lane_stride,
            mask,
        }
        | VStore {
            fmt,
            src: v,
            addr,
            sub_stride,
            lane_stride,
            mask,
        } => w
            .sel(0, fmt.code())
            .r(0, v.index())
            .addr(addr)
            .opt(4, sub_stride.map(SReg::index))
            .opt(5, lane_stride.map(SReg::index))
            .opt(6, mask.map(MReg::index)),
        VGather {
            fmt,
            dst,
            addr,
            index,
            mask,
        } => w
            .sel(0, fmt.code())
            .r(0, dst.index())
            .addr(addr)
            .r(2, index.index())
            .opt(4, mask.map(MReg::index)),
        VMov { ty, dst, src } => w.sel(1, ty.code()).r(0, dst.index()).vsrc(src),
        VBin { op, ty, dst, a, b } => w
            .sel(0, op.code())
            .sel(1, ty.code())
            .r(0, dst.index())
            .r(1, a.index())
            .vsrc(b),
        VUn { op, ty, dst, a } => w
            .sel(0, op.code())
            .sel(1, ty.code())
            .r(0, dst.index())
            .r(1, a.index()),
        VCmp { op, ty, dst, a, b } => w
            .sel(0, op.code())
            .sel(1, ty.code())
            .r(0, dst.index())
            .r(1, a.index())
            .vsrc(b),
        VSel {
            ty,
            dst,
            mask,
            a,
            b,
        } => w
            .sel(1, ty.code())
            .r(0, dst.index())
            .r(1, a.index())
            .r(3, mask.index())
            .vsrc(b),
        VCvt { op, dst, a } => w.sel(0, op.code()).r(0, dst.index()).r(1, a.index()),
        VIota { kind, dst } => w.sel(0, kind.code()).r(0, dst.index()),
        VMask { dst, mask } => w.r(0, dst.index()).r(3, mask.index()),
        VRed {
            op,
            ty,
            axis,
            dst,
            a,
        } => w
            .sel(0, op.code())
            .sel(1, ty.code())
            .sel(2, axis.code())
            .r(0, dst.index())
            .r(1, a.index()),
        VRot {
            axis,
            dst,
            a,
            amount,
        } => w
            .sel(2, axis.code())
            .r(0, dst.index())
            .r(1, a.index())
            .ssrc(amount),
        VPerm {
            axis,
            dst,
            a,
            index,
        } => w
            .sel(2, axis.code())
            .r(0, dst.index())
            .r(1, a.index())
            .r(2, index.index()),
        VTrans { dst, a } => w.r(0, dst.index()).r(1, a.index()),
        MLogic { op, dst, a, b } => w
            .sel(0, op.code())
            .r(0, dst.index())
            .r(1, a.index())
            .r(2, b.index()),
        MNot { dst, a } => w.r(0, dst.index()).r(1, a.index()),
        MSet { dst, value } => w.r(0, dst.index()).imm(u32::from(value)),
        MxuLoad {
            mxu,
            fmt,
            addr,
            rows,
            cols,
            stride,
        } => w
            .sel(0, fmt.code())
            .r(0, mxu.index())
            .addr(addr)
            .r(4, rows.index())
            .r(5, cols.index())
            .r(6, stride.index()),
        MxuMatmul {
            mxu,
            fmt,
            prec,
            addr,
            rows,
            stride,
        } => w
            .sel(0, fmt.code())
            .sel(1, prec.code())
            .r(0, mxu.index())
            .addr(addr)
            .r(4, rows.index())
            .r(5, stride.index()),
        MxuPop {
            mxu,
            acc,
            addr,
            rows,
            stride,
        } => w
            .sel(0, u8::from(acc))
            .r(0, mxu.index())
            .addr(addr)
            .r(4, rows.index())
            .r(5, stride.index()),
        Dma {
            dst,
            src,
            shape,
            sem,
            remote,
        } => {
            let (kind, reg) = match shape {
                DmaShape::Len(r) => (0, r),
                DmaShape::Desc(r) => (1, r),
            };
            w.sel(0, dst.space.code())
                .sel(1, src.space.code())
                .sel(2, kind)
                .r(0, dst.addr.index())
                .r(1, src.addr.index())
                .r(2, reg.index())
                .r(3, sem.index())
                .opt(4, dst.slot.map(ArgSlot::index))
                .opt(5, src.slot.map(ArgSlot::index))
                .opt(6, remote.map(|r| r.chip.index()));
            if let Some(r) = remote {
                w.imm(r.recv_sem.index() as u32);
            }
            &mut w
        }
        SemSignal { sem, amount, chip } => w
            .r(0, sem.index())
            .ssrc(amount)
            .opt(4, chip.map(SReg::index)),
        SemWait { sem, amount } => w.r(0, sem.index()).ssrc(amount),
        MarkBegin { name } => w.imm(name as u32),
    };
    w.b
}

/// The opcode name of an instruction (an entry of [`OPCODES`]).
pub fn opcode_name(instr: &Instr) -> &'static str {
    use Instr::*;
    match instr {
        Nop => "nop",
        Halt => "halt",
        Br { .. } => "br",
        BrIf { .. } => "brif",
        SMov { .. } => "smov",
        SAlu { .. } => "salu",
        SCmp { .. } => "scmp",
        SLoad { .. } => "sld",
        SStore { .. } => "sst",
        SSys { .. } => "ssys",
        VLoad { .. } => "vld",
        VStore { .. } => "vst",
        VGather { .. } => "vgather",
        VMov { .. } => "vmov",
        VBin { .. } => "vbin",
        VUn { .. } => "vun",
        VCmp { .. } => "vcmp",
        VSel { .. } => "vsel",
        VCvt { .. } => "vcvt",
        VIota { .. } => "viota",
        VMask { .. } => "vmask",
        VRed { .. } => "vred",
        VRot { .. } => "vrot",
        VPerm { .. } => "vperm",
        VTrans { .. } => "vtrans",
        MLogic { .. } => "mlogic",
        MNot { .. } => "mnot",
        MSet { .. } => "mset",
        MxuLoad { .. } => "mxu.lw",
        MxuMatmul { .. } => "mxu.mm",
        MxuPop { .. } => "mxu.pop",
        Dma { .. } => "dma",
        SemSignal { .. } => "sem.signal",
        SemWait { .. } => "sem.wait",
        Barrier => "barrier",
        MarkBegin { .. } => "mark.begin",
        MarkEnd => "mark.end",
    }
}

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
            addr: f.addr()?,
            rows: f.s(4)?,
            cols: f.s(5)?,
            stride: f.s(6)?,
        },
        "mxu.mm" => MxuMatmul {
            mxu: f.reg(0, Mxu::new, "matrix unit")?,
            fmt: f.sel(0, MxuFmt::from_code, "matrix format")?,
            prec: f.sel(1, Precision::from_code, "precision")?,
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
