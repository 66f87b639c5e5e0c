//! Reading one instruction: the mnemonic (with its dotted selectors, `vred.add.f32.lane`) and
//! then its operands, in exactly the form [`Instr`]'s `Display` prints.
//!
//! Branch targets given as labels and HBM arguments given by name are returned unresolved; the
//! program-level pass in `parse.rs` resolves them once every line is read.

use super::error::{AsmError, AsmErrorKind};
use super::lexer::Token;
use super::operands::{Cursor, SlotRef, Target};
use crate::instr::{Addr, DmaShape, Instr, MemRef, Remote};
use crate::ops::*;
use crate::reg::{ArgSlot, SReg};

/// An instruction with what is left to resolve.
pub(crate) struct Parsed {
    /// The instruction (branch target 0 and HBM slot a0 where still unresolved).
    pub instr: Instr,
    /// The branch target, when it is a label.
    pub label: Option<(String, usize)>,
    /// HBM arguments named, not numbered: (is the destination, name, column).
    pub arg_names: Vec<(bool, String, usize)>,
    /// The marker named by `mark.begin "name"`.
    pub marker: Option<String>,
}

impl Parsed {
    fn plain(instr: Instr) -> Self {
        Parsed {
            instr,
            label: None,
            arg_names: Vec::new(),
            marker: None,
        }
    }
}

/// The dotted parts of a mnemonic and where they start, for error messages.
pub(super) struct Parts<'t, 'a> {
    tok: &'t Token<'a>,
    parts: Vec<(&'a str, usize)>,
    used: usize,
    line: usize,
}

impl<'a> Parts<'_, 'a> {
    /// Reads the next dotted selector with `from_name`; `what` describes the choices.
    fn sel<T>(
        &mut self,
        from_name: fn(&str) -> Option<T>,
        all: &[T],
        name: fn(&T) -> &'static str,
        what: &str,
    ) -> Result<T, AsmError> {
        let choices = all
            .iter()
            .map(|v| format!("`.{}`", name(v)))
            .collect::<Vec<_>>()
            .join(", ");
        let head = self.parts[..self.used]
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>()
            .join(".");
        let expected = format!("{what} after `{head}` ({choices})");
        let Some(&(text, off)) = self.parts.get(self.used) else {
            return Err(AsmError {
                line: self.line,
                col: self.tok.col + self.tok.text.len(),
                token: String::new(),
                kind: AsmErrorKind::Expected {
                    expected,
                    found: "nothing".into(),
                },
            });
        };
        self.used += 1;
        from_name(text).ok_or_else(|| AsmError {
            line: self.line,
            col: self.tok.col + off,
            token: text.to_string(),
            kind: AsmErrorKind::Expected {
                expected,
                found: format!("`{text}`"),
            },
        })
    }

    fn done(&self) -> Result<(), AsmError> {
        match self.parts.get(self.used) {
            None => Ok(()),
            Some(&(text, off)) => Err(AsmError {
                line: self.line,
                col: self.tok.col + off - 1,
                token: format!(".{text}"),
                kind: AsmErrorKind::UnknownMnemonic {
                    name: self.tok.text.to_string(),
                    suggestions: super::suggest::suggest(self.tok.text),
                },
            }),
        }
    }
}

macro_rules! sel {
    ($parts:expr, $ty:ident, $what:expr) => {
        $parts.sel($ty::from_name, $ty::ALL, |v| v.name(), $what)
    };
}

/// Reads the instruction whose mnemonic is `mn`; the cursor is after the mnemonic.
pub(crate) fn parse_instr(mn: &Token<'_>, c: &mut Cursor<'_, '_>) -> Result<Parsed, AsmError> {
    let mut offsets = Vec::new();
    let mut off = 0;
    for part in mn.text.split('.') {
        offsets.push((part, off));
        off += part.len() + 1;
    }
    let head = offsets.first().map_or("", |p| p.0);
    let mut p = Parts {
        tok: mn,
        parts: offsets,
        used: 1,
        line: c.line(),
    };
    let parsed = instr_body(head, &mut p, c)?;
    p.done()?;
    c.end()?;
    Ok(parsed)
}

fn unknown(mn: &Token<'_>, line: usize) -> AsmError {
    AsmError {
        line,
        col: mn.col,
        token: mn.text.to_string(),
        kind: AsmErrorKind::UnknownMnemonic {
            name: mn.text.to_string(),
            suggestions: super::suggest::suggest(mn.text),
        },
    }
}

fn instr_body(
    head: &str,
    p: &mut Parts<'_, '_>,
    c: &mut Cursor<'_, '_>,
) -> Result<Parsed, AsmError> {
    use Instr::*;
    let plain = |i: Instr| Ok(Parsed::plain(i));
    match head {
        "nop" => plain(Nop),
        "halt" => plain(Halt),
        "barrier" => plain(Barrier),
        "br" => {
            let t = c.target()?;
            Ok(branch(Br { target: 0 }, t))
        }
        "brz" | "brnz" => {
            let cond = if head == "brz" {
                BrCond::Zero
            } else {
                BrCond::NonZero
            };
            let reg = c.sreg()?;
            c.comma()?;
            let t = c.target()?;
            Ok(branch(
                BrIf {
                    cond,
                    reg,
                    target: 0,
                },
                t,
            ))
        }
        "smov" => {
            let dst = c.sreg()?;
            c.comma()?;
            plain(SMov {
                dst,
                imm: c.imm_i32()?,
            })
        }
        "scmp" => {
            let op = sel!(p, CmpOp, "a comparison")?;
            let (dst, a, b) = s3(c)?;
            plain(SCmp { op, dst, a, b })
        }
        "sld" | "sst" => {
            let r = c.sreg()?;
            c.comma()?;
            let addr = c.addr()?;
            plain(if head == "sld" {
                SLoad { dst: r, addr }
            } else {
                SStore { src: r, addr }
            })
        }
        "ssys" => {
            let dst = c.sreg()?;
            c.comma()?;
            let t = c.ident("a system value like chip, core or nchips")?;
            let reg = SysReg::from_name(t.text).ok_or_else(|| {
                let names: Vec<_> = SysReg::ALL.iter().map(|r| r.name()).collect();
                c.error_at(t, format!("a system value ({})", names.join(", ")))
            })?;
            plain(SSys { dst, reg })
        }
        "vld" | "vst" => vmem(head, p, c),
        "vgather" => {
            let fmt = sel!(p, MemFmt, "a memory format")?;
            let dst = c.vreg()?;
            c.comma()?;
            let addr = c.addr()?;
            c.comma()?;
            let index = c.vreg()?;
            let mut mask = None;
            c.keywords(&["mask"], |_, c| {
                mask = Some(c.mreg()?);
                Ok(())
            })?;
            plain(VGather {
                fmt,
                dst,
                addr,
                index,
                mask,
            })
        }
        "vmov" => {
            let ty = sel!(p, VType, "an element type")?;
            let dst = c.vreg()?;
            c.comma()?;
            plain(VMov {
                ty,
                dst,
                src: c.vsrc(ty)?,
            })
        }
        "vcmp" => {
            let op = sel!(p, CmpOp, "a comparison")?;
            let ty = sel!(p, VType, "an element type")?;
            let dst = c.mreg()?;
            c.comma()?;
            let a = c.vreg()?;
            c.comma()?;
            plain(VCmp {
                op,
                ty,
                dst,
                a,
                b: c.vsrc(ty)?,
            })
        }
        "vsel" => {
            let ty = sel!(p, VType, "an element type")?;
            let dst = c.vreg()?;
            c.comma()?;
            let mask = c.mreg()?;
            c.comma()?;
            let a = c.vreg()?;
            c.comma()?;
            plain(VSel {
                ty,
                dst,
                mask,
                a,
                b: c.vsrc(ty)?,
            })
        }
        "vcvt" => {
            let op = sel!(p, CvtOp, "a conversion")?;
            let (dst, a) = v2(c)?;
            plain(VCvt { op, dst, a })
        }
        "viota" => {
            let kind = sel!(p, IotaKind, "an index kind")?;
            plain(VIota {
                kind,
                dst: c.vreg()?,
            })
        }
        "vmask" => {
            let dst = c.vreg()?;
            c.comma()?;
            plain(VMask {
                dst,
                mask: c.mreg()?,
            })
        }
        "vred" => {
            let op = sel!(p, RedOp, "a reduction")?;
            let ty = sel!(p, VType, "an element type")?;
            let axis = sel!(p, Axis, "an axis")?;
            let (dst, a) = v2(c)?;
            plain(VRed {
                op,
                ty,
                axis,
                dst,
                a,
            })
        }
        "vrot" => {
            let axis = sel!(p, Axis, "an axis")?;
            let (dst, a) = v2(c)?;
            c.comma()?;
            plain(VRot {
                axis,
                dst,
                a,
                amount: c.ssrc()?,
            })
        }
        "vperm" => {
            let axis = sel!(p, Axis, "an axis")?;
            let (dst, a) = v2(c)?;
            c.comma()?;
            plain(VPerm {
                axis,
                dst,
                a,
                index: c.vreg()?,
            })
        }
        "vtrans" => {
            let (dst, a) = v2(c)?;
            plain(VTrans { dst, a })
        }
        "mnot" => {
            let dst = c.mreg()?;
            c.comma()?;
            plain(MNot { dst, a: c.mreg()? })
        }
        "mset" => {
            let dst = c.mreg()?;
            c.comma()?;
            let v = c.int_in(0, 1, "0 or 1")?;
            plain(MSet { dst, value: v == 1 })
        }
        "mxu" => super::mnemonic_mem::mxu(p.sub(), p, c),
        "dma" => super::mnemonic_mem::dma(c),
        "sem" => match p.sub() {
            Some("signal") => {
                let sem = c.sem()?;
                c.comma()?;
                let amount = c.ssrc()?;
                let mut chip = None;
                c.keywords(&["chip"], |_, c| {
                    chip = Some(c.sreg()?);
                    Ok(())
                })?;
                plain(SemSignal { sem, amount, chip })
            }
            Some("wait") => {
                let sem = c.sem()?;
                c.comma()?;
                plain(SemWait {
                    sem,
                    amount: c.ssrc()?,
                })
            }
            _ => Err(unknown(p.tok, p.line)),
        },
        "mark" => match p.sub() {
            Some("end") => plain(MarkEnd),
            Some("begin") => mark_begin(c),
            _ => Err(unknown(p.tok, p.line)),
        },
        _ => by_op_name(head, p, c),
    }
}

impl<'a> Parts<'_, 'a> {
    /// Consumes the second dotted part as a sub-mnemonic (`mxu.lw`, `sem.wait`).
    pub(super) fn sub(&mut self) -> Option<&'a str> {
        let s = self.parts.get(self.used).map(|p| p.0);
        self.used += usize::from(s.is_some());
        s
    }

    /// Reads the next dotted selector (for the sibling module).
    pub(super) fn select<T>(
        &mut self,
        from_name: fn(&str) -> Option<T>,
        all: &[T],
        name: fn(&T) -> &'static str,
        what: &str,
    ) -> Result<T, AsmError> {
        self.sel(from_name, all, name, what)
    }

    /// Whether the next dotted part is `text`; consumes it if so.
    pub(super) fn flag(&mut self, text: &str) -> bool {
        let yes = self.parts.get(self.used).is_some_and(|p| p.0 == text);
        self.used += usize::from(yes);
        yes
    }

    /// An unknown-mnemonic error for this mnemonic.
    pub(super) fn unknown(&self) -> AsmError {
        unknown(self.tok, self.line)
    }
}

/// Scalar ALU ops (`sadd`), vector binary and unary ops (`vadd.f32`, `vexp.f32`), mask logic
/// (`mand`).
fn by_op_name(
    head: &str,
    p: &mut Parts<'_, '_>,
    c: &mut Cursor<'_, '_>,
) -> Result<Parsed, AsmError> {
    if let Some(op) = head.strip_prefix('s').and_then(SAluOp::from_name) {
        let (dst, a, b) = s3(c)?;
        return Ok(Parsed::plain(Instr::SAlu { op, dst, a, b }));
    }
    if let Some(op) = head.strip_prefix('v').and_then(VBinOp::from_name) {
        let ty = sel!(p, VType, "an element type")?;
        let (dst, a) = v2(c)?;
        c.comma()?;
        let b = c.vsrc(ty)?;
        return Ok(Parsed::plain(Instr::VBin { op, ty, dst, a, b }));
    }
    if let Some(op) = head.strip_prefix('v').and_then(VUnOp::from_name) {
        let ty = sel!(p, VType, "an element type")?;
        let (dst, a) = v2(c)?;
        return Ok(Parsed::plain(Instr::VUn { op, ty, dst, a }));
    }
    if let Some(op) = head.strip_prefix('m').and_then(MaskOp::from_name) {
        let dst = c.mreg()?;
        c.comma()?;
        let a = c.mreg()?;
        c.comma()?;
        return Ok(Parsed::plain(Instr::MLogic {
            op,
            dst,
            a,
            b: c.mreg()?,
        }));
    }
    Err(p.unknown())
}

fn branch(instr: Instr, t: Target) -> Parsed {
    match t {
        Target::Abs(n) => Parsed::plain(instr.with_branch_target(n)),
        Target::Label(name, col) => Parsed {
            label: Some((name, col)),
            ..Parsed::plain(instr)
        },
    }
}

fn s3(c: &mut Cursor<'_, '_>) -> Result<(SReg, SReg, crate::instr::SSrc), AsmError> {
    let dst = c.sreg()?;
    c.comma()?;
    let a = c.sreg()?;
    c.comma()?;
    Ok((dst, a, c.ssrc()?))
}

fn v2(c: &mut Cursor<'_, '_>) -> Result<(crate::reg::VReg, crate::reg::VReg), AsmError> {
    let dst = c.vreg()?;
    c.comma()?;
    Ok((dst, c.vreg()?))
}

fn vmem(head: &str, p: &mut Parts<'_, '_>, c: &mut Cursor<'_, '_>) -> Result<Parsed, AsmError> {
    let fmt = sel!(p, MemFmt, "a memory format")?;
    let reg = c.vreg()?;
    c.comma()?;
    let addr: Addr = c.addr()?;
    let (mut sub, mut lane, mut mask) = (None, None, None);
    c.keywords(&["sub", "lane", "mask"], |k, c| {
        match k {
            0 => sub = Some(c.sreg()?),
            1 => lane = Some(c.sreg()?),
            _ => mask = Some(c.mreg()?),
        }
        Ok(())
    })?;
    let (sub_stride, lane_stride) = (sub, lane);
    Ok(Parsed::plain(if head == "vld" {
        Instr::VLoad {
            fmt,
            dst: reg,
            addr,
            sub_stride,
            lane_stride,
            mask,
        }
    } else {
        Instr::VStore {
            fmt,
            src: reg,
            addr,
            sub_stride,
            lane_stride,
            mask,
        }
    }))
}

fn mark_begin(c: &mut Cursor<'_, '_>) -> Result<Parsed, AsmError> {
    if c.peek().is_some_and(|t| t.is('#')) {
        c.bump();
        let v = c.int_in(0, u16::MAX as i128, "a marker index")?;
        return Ok(Parsed::plain(Instr::MarkBegin { name: v as u16 }));
    }
    let name = c.string("a marker name in quotes, or #index")?;
    Ok(Parsed {
        marker: Some(name),
        ..Parsed::plain(Instr::MarkBegin { name: 0 })
    })
}

/// A DMA side with its slot resolved when numbered; `name` receives a named slot.
pub(super) fn memref_side(
    c: &mut Cursor<'_, '_>,
    is_dst: bool,
    names: &mut Vec<(bool, String, usize)>,
) -> Result<MemRef, AsmError> {
    let (space, slot, addr) = c.memref()?;
    let slot = match slot {
        None => None,
        Some(SlotRef::Slot(s)) => Some(s),
        Some(SlotRef::Name(n, col)) => {
            names.push((is_dst, n, col));
            Some(ArgSlot::n(0))
        }
    };
    Ok(MemRef { space, slot, addr })
}

/// Builds the DMA once its operands are read.
pub(super) fn dma_instr(
    dst: MemRef,
    src: MemRef,
    shape: DmaShape,
    sem: crate::reg::Sem,
    remote: Option<Remote>,
    names: Vec<(bool, String, usize)>,
) -> Parsed {
    Parsed {
        arg_names: names,
        ..Parsed::plain(Instr::Dma {
            dst,
            src,
            shape,
            sem,
            remote,
        })
    }
}
