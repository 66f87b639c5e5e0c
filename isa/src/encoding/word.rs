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
//! field an instruction does not use is zero; [`decode_word`](super::decode_word) checks that
//! by encoding what it decoded and comparing, so that decoding accepts exactly one word per
//! instruction.

use crate::instr::{Addr, DmaShape, Instr, SSrc, VSrc};
use crate::reg::{ArgSlot, MReg, SReg};
use crate::verify::InstrError;

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

pub(super) const F_IMM: u8 = 1;
pub(super) const F_SREG: u8 = 2;
pub(super) const F_OPT: [u8; 3] = [4, 8, 16];

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
            transpose,
            addr,
            rows,
            cols,
            stride,
        } => w
            .sel(0, fmt.code())
            .sel(1, u8::from(transpose))
            .r(0, mxu.index())
            .addr(addr)
            .r(4, rows.index())
            .r(5, cols.index())
            .r(6, stride.index()),
        MxuMatmul {
            mxu,
            fmt,
            transpose,
            prec,
            addr,
            rows,
            stride,
        } => w
            .sel(0, fmt.code())
            .sel(1, prec.code())
            .sel(2, u8::from(transpose))
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
