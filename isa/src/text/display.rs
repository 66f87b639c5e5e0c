//! The printed form of an instruction: its assembly text.

use std::fmt::{self, Display, Formatter, Write};

use crate::instr::*;
use crate::ops::VType;

impl Display for SSrc {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            SSrc::Reg(r) => write!(f, "{r}"),
            SSrc::Imm(i) => write!(f, "{i}"),
        }
    }
}

impl Display for Addr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.base == crate::reg::SReg::ZERO {
            write!(f, "[{}]", self.offset)
        } else if self.offset == 0 {
            write!(f, "[{}]", self.base)
        } else if self.offset < 0 {
            write!(
                f,
                "[{} - {}]",
                self.base,
                (self.offset as i64).unsigned_abs()
            )
        } else {
            write!(f, "[{} + {}]", self.base, self.offset)
        }
    }
}

impl Display for MemRef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.slot {
            Some(slot) => write!(f, "{}.{}[{}]", self.space, slot, self.addr),
            None => write!(f, "{}[{}]", self.space, self.addr),
        }
    }
}

/// Formats a 32-bit immediate as the type says: an f32 literal that parses back to the same
/// bits (hex bits `0x...` for NaNs), or a signed integer.
pub fn fmt_imm(bits: u32, ty: VType) -> String {
    match ty {
        VType::I32 => (bits as i32).to_string(),
        VType::F32 => {
            let v = f32::from_bits(bits);
            if v.is_nan() {
                format!("{bits:#010x}")
            } else {
                format!("{v:?}")
            }
        }
    }
}

fn vsrc(src: &VSrc, ty: VType) -> String {
    match src {
        VSrc::V(v) => v.to_string(),
        VSrc::S(s) => s.to_string(),
        VSrc::Imm(bits) => fmt_imm(*bits, ty),
    }
}

fn opt_kw(out: &mut String, key: &str, value: Option<impl Display>) {
    if let Some(v) = value {
        let _ = write!(out, ", {key}={v}");
    }
}

impl Display for Instr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Instr::*;
        match self {
            Nop => f.write_str("nop"),
            Halt => f.write_str("halt"),
            Br { target } => write!(f, "br @{target}"),
            BrIf { cond, reg, target } => write!(f, "br{cond} {reg}, @{target}"),
            SMov { dst, imm } => write!(f, "smov {dst}, {imm}"),
            SAlu { op, dst, a, b } => write!(f, "s{op} {dst}, {a}, {b}"),
            SCmp { op, dst, a, b } => write!(f, "scmp.{op} {dst}, {a}, {b}"),
            SLoad { dst, addr } => write!(f, "sld {dst}, {addr}"),
            SStore { src, addr } => write!(f, "sst {src}, {addr}"),
            SSys { dst, reg } => write!(f, "ssys {dst}, {reg}"),
            VLoad {
                fmt: m,
                dst,
                addr,
                sub_stride,
                lane_stride,
                mask,
            } => {
                let mut s = format!("vld.{m} {dst}, {addr}");
                opt_kw(&mut s, "sub", *sub_stride);
                opt_kw(&mut s, "lane", *lane_stride);
                opt_kw(&mut s, "mask", *mask);
                f.write_str(&s)
            }
            VStore {
                fmt: m,
                src,
                addr,
                sub_stride,
                lane_stride,
                mask,
            } => {
                let mut s = format!("vst.{m} {src}, {addr}");
                opt_kw(&mut s, "sub", *sub_stride);
                opt_kw(&mut s, "lane", *lane_stride);
                opt_kw(&mut s, "mask", *mask);
                f.write_str(&s)
            }
            VGather {
                fmt: m,
                dst,
                addr,
                index,
                mask,
            } => {
                let mut s = format!("vgather.{m} {dst}, {addr}, {index}");
                opt_kw(&mut s, "mask", *mask);
                f.write_str(&s)
            }
            VMov { ty, dst, src } => write!(f, "vmov.{ty} {dst}, {}", vsrc(src, *ty)),
            VBin { op, ty, dst, a, b } => write!(f, "v{op}.{ty} {dst}, {a}, {}", vsrc(b, *ty)),
            VUn { op, ty, dst, a } => write!(f, "v{op}.{ty} {dst}, {a}"),
            VCmp { op, ty, dst, a, b } => write!(f, "vcmp.{op}.{ty} {dst}, {a}, {}", vsrc(b, *ty)),
            VSel {
                ty,
                dst,
                mask,
                a,
                b,
            } => write!(f, "vsel.{ty} {dst}, {mask}, {a}, {}", vsrc(b, *ty)),
            VCvt { op, dst, a } => write!(f, "vcvt.{op} {dst}, {a}"),
            VIota { kind, dst } => write!(f, "viota.{kind} {dst}"),
            VMask { dst, mask } => write!(f, "vmask {dst}, {mask}"),
            VRed {
                op,
                ty,
                axis,
                dst,
                a,
            } => write!(f, "vred.{op}.{ty}.{axis} {dst}, {a}"),
            VRot {
                axis,
                dst,
                a,
                amount,
            } => write!(f, "vrot.{axis} {dst}, {a}, {amount}"),
            VPerm {
                axis,
                dst,
                a,
                index,
            } => write!(f, "vperm.{axis} {dst}, {a}, {index}"),
            VTrans { dst, a } => write!(f, "vtrans {dst}, {a}"),
            MLogic { op, dst, a, b } => write!(f, "m{op} {dst}, {a}, {b}"),
            MNot { dst, a } => write!(f, "mnot {dst}, {a}"),
            MSet { dst, value } => write!(f, "mset {dst}, {}", u8::from(*value)),
            MxuLoad {
                mxu,
                fmt: m,
                transpose,
                addr,
                rows,
                cols,
                stride,
            } => {
                let t = if *transpose { ".t" } else { "" };
                write!(
                    f,
                    "mxu.lw.{m}{t} {mxu}, {addr}, rows={rows}, cols={cols}, stride={stride}"
                )
            }
            MxuMatmul {
                mxu,
                fmt: m,
                transpose,
                prec,
                addr,
                rows,
                stride,
            } => {
                let t = if *transpose { ".t" } else { "" };
                write!(
                    f,
                    "mxu.mm.{m}.{prec}{t} {mxu}, {addr}, rows={rows}, stride={stride}"
                )
            }
            MxuPop {
                mxu,
                acc,
                addr,
                rows,
                stride,
            } => {
                let suffix = if *acc { ".acc" } else { "" };
                write!(
                    f,
                    "mxu.pop{suffix} {mxu}, {addr}, rows={rows}, stride={stride}"
                )
            }
            Dma {
                dst,
                src,
                shape,
                sem,
                remote,
            } => {
                let size = match shape {
                    DmaShape::Len(r) => format!("len={r}"),
                    DmaShape::Desc(r) => format!("desc={r}"),
                };
                write!(f, "dma {dst}, {src}, {size}, sem={sem}")?;
                if let Some(r) = remote {
                    write!(f, ", remote={}, rsem={}", r.chip, r.recv_sem)?;
                }
                Ok(())
            }
            SemSignal { sem, amount, chip } => {
                write!(f, "sem.signal {sem}, {amount}")?;
                if let Some(c) = chip {
                    write!(f, ", chip={c}")?;
                }
                Ok(())
            }
            SemWait { sem, amount } => write!(f, "sem.wait {sem}, {amount}"),
            Barrier => f.write_str("barrier"),
            MarkBegin { name } => write!(f, "mark.begin #{name}"),
            MarkEnd => f.write_str("mark.end"),
        }
    }
}

/// Quotes a string for assembly (`"a \"b\"\n"`).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
