//! Reading the matrix-unit and DMA instructions, whose operands are mostly `key=value` pairs:
//! `mxu.lw.bf16 mxu0, [s1], rows=s2, cols=s3, stride=s4`,
//! `dma vmem[s1], hbm.a0[s2], len=s3, sem=sem0, remote=s4, rsem=sem1`.
//!
//! Keyword operands are required as listed but may come in any order.

use super::error::{AsmError, AsmErrorKind};
use super::mnemonic::{Parsed, Parts, dma_instr, memref_side};
use super::operands::Cursor;
use crate::instr::{DmaShape, Instr, Remote};
use crate::ops::{MxuFmt, Precision};
use crate::reg::SReg;

/// Reads the registers of the keywords `keys`, all required.
fn required(c: &mut Cursor<'_, '_>, keys: &[&str]) -> Result<Vec<SReg>, AsmError> {
    let mut regs = vec![SReg::ZERO; keys.len()];
    let seen = c.keywords(keys, |k, c| {
        regs[k] = c.sreg()?;
        Ok(())
    })?;
    if let Some(k) = seen.iter().position(|s| !s) {
        return Err(missing(c, keys[k]));
    }
    Ok(regs)
}

fn missing(c: &Cursor<'_, '_>, key: &str) -> AsmError {
    let mut e = c.expected(format!("a `, {key}=...` operand"));
    e.kind = AsmErrorKind::Expected {
        expected: format!("a `{key}=` operand"),
        found: "end of line".into(),
    };
    e
}

/// `mxu.lw.FMT`, `mxu.mm.FMT.PREC`, `mxu.pop[.acc]`.
pub(super) fn mxu(
    sub: Option<&str>,
    p: &mut Parts<'_, '_>,
    c: &mut Cursor<'_, '_>,
) -> Result<Parsed, AsmError> {
    let plain = |instr| Parsed {
        instr,
        label: None,
        arg_names: Vec::new(),
        marker: None,
    };
    match sub {
        Some("lw") => {
            let fmt = p.select(
                MxuFmt::from_name,
                MxuFmt::ALL,
                |v| v.name(),
                "an operand format",
            )?;
            let transpose = p.flag("t");
            let (mxu, addr) = head(c)?;
            let r = required(c, &["rows", "cols", "stride"])?;
            Ok(plain(Instr::MxuLoad {
                mxu,
                fmt,
                transpose,
                addr,
                rows: r[0],
                cols: r[1],
                stride: r[2],
            }))
        }
        Some("mm") => {
            let fmt = p.select(
                MxuFmt::from_name,
                MxuFmt::ALL,
                |v| v.name(),
                "an operand format",
            )?;
            let prec = p.select(
                Precision::from_name,
                Precision::ALL,
                |v| v.name(),
                "a precision",
            )?;
            let transpose = p.flag("t");
            let (mxu, addr) = head(c)?;
            let r = required(c, &["rows", "stride"])?;
            Ok(plain(Instr::MxuMatmul {
                mxu,
                fmt,
                transpose,
                prec,
                addr,
                rows: r[0],
                stride: r[1],
            }))
        }
        Some("pop") => {
            let acc = p.flag("acc");
            let (mxu, addr) = head(c)?;
            let r = required(c, &["rows", "stride"])?;
            Ok(plain(Instr::MxuPop {
                mxu,
                acc,
                addr,
                rows: r[0],
                stride: r[1],
            }))
        }
        _ => Err(p.unknown()),
    }
}

fn head(c: &mut Cursor<'_, '_>) -> Result<(crate::reg::Mxu, crate::instr::Addr), AsmError> {
    let mxu = c.mxu()?;
    c.comma()?;
    Ok((mxu, c.addr()?))
}

/// `dma DST, SRC, len=S|desc=S, sem=SEM[, remote=S, rsem=SEM]`.
pub(super) fn dma(c: &mut Cursor<'_, '_>) -> Result<Parsed, AsmError> {
    let mut names = Vec::new();
    let dst = memref_side(c, true, &mut names)?;
    c.comma()?;
    let src = memref_side(c, false, &mut names)?;
    let mut shape = None;
    let mut sem = None;
    let (mut chip, mut rsem) = (None, None);
    let keys = ["len", "desc", "sem", "remote", "rsem"];
    let seen = c.keywords(&keys, |k, c| {
        match k {
            0 | 1 => {
                if shape.is_some() {
                    const BOTH: &str = "a DMA takes either len= or desc=, not both";
                    return Err(match c.peek() {
                        Some(t) => c.invalid(t, BOTH),
                        None => c.expected(BOTH),
                    });
                }
                let r = c.sreg()?;
                shape = Some(if k == 0 {
                    DmaShape::Len(r)
                } else {
                    DmaShape::Desc(r)
                });
            }
            2 => sem = Some(c.sem()?),
            3 => chip = Some(c.sreg()?),
            _ => rsem = Some(c.sem()?),
        }
        Ok(())
    })?;
    let Some(shape) = shape else {
        return Err(missing(c, "len"));
    };
    let Some(sem) = sem else {
        return Err(missing(c, "sem"));
    };
    let remote = match (chip, rsem) {
        (Some(chip), Some(recv_sem)) => Some(Remote { chip, recv_sem }),
        (None, None) => None,
        _ => {
            let key = if seen[3] { "rsem" } else { "remote" };
            return Err(missing(c, key));
        }
    };
    Ok(dma_instr(dst, src, shape, sem, remote, names))
}
