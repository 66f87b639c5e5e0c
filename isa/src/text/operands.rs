//! Reading operands from a line's tokens: registers, immediates, addresses, memory references,
//! branch targets and `key=value` operands.
//!
//! Immediate rules:
//! - integers are decimal or hex (`0x1f`), with an optional `-`; an i32 immediate must fit in 32
//!   bits, read as signed or unsigned (`0xffffffff` and `-1` are the same bits);
//! - an f32 immediate is a decimal or exponent literal (`1`, `-2.5`, `1e-7`), `inf`, `-inf` or
//!   `nan`, or hex raw bits (`0x7fc00000`); literals that overflow f32 are errors;
//! - address offsets are signed 32-bit (`[s2 - 8]`, `[-8]`).

use super::error::{AsmError, AsmErrorKind};
use super::lexer::{TokKind, Token};
use crate::instr::{Addr, SSrc, VSrc};
use crate::ops::{Space, VType};
use crate::reg::{ArgSlot, MReg, Mxu, SReg, Sem, VReg};

/// A branch target as written: an absolute index or a label to resolve later.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// `@12`.
    Abs(u32),
    /// `loop`, at column `col`.
    Label(String, usize),
}

/// An HBM argument as written: a slot, or a declared name to resolve later.
#[derive(Clone, Debug)]
pub(crate) enum SlotRef {
    /// `a3`.
    Slot(ArgSlot),
    /// `input`, at column `col`.
    Name(String, usize),
}

/// A cursor over the tokens of one line.
pub(crate) struct Cursor<'t, 'a> {
    toks: &'t [Token<'a>],
    pos: usize,
    line: usize,
    /// Column just past the end of the line's text, for errors at the end of the line.
    end_col: usize,
}

impl<'t, 'a> Cursor<'t, 'a> {
    /// A cursor at the first token.
    pub fn new(toks: &'t [Token<'a>], line: usize, end_col: usize) -> Self {
        Cursor {
            toks,
            pos: 0,
            line,
            end_col,
        }
    }

    /// The line number.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The next token, without consuming it.
    pub fn peek(&self) -> Option<&'t Token<'a>> {
        self.toks.get(self.pos)
    }

    /// The token after the next one.
    pub fn peek2(&self) -> Option<&'t Token<'a>> {
        self.toks.get(self.pos + 1)
    }

    /// Consumes the next token.
    pub fn bump(&mut self) -> Option<&'t Token<'a>> {
        let t = self.toks.get(self.pos);
        self.pos += usize::from(t.is_some());
        t
    }

    /// Whether every token is consumed.
    pub fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    /// An error at the next token (or the end of the line).
    pub fn expected(&self, expected: impl Into<String>) -> AsmError {
        match self.peek() {
            Some(t) => self.error_at(t, expected),
            None => AsmError {
                line: self.line,
                col: self.end_col,
                token: String::new(),
                kind: AsmErrorKind::Expected {
                    expected: expected.into(),
                    found: "end of line".into(),
                },
            },
        }
    }

    /// An "expected ..." error at token `t`.
    pub fn error_at(&self, t: &Token<'_>, expected: impl Into<String>) -> AsmError {
        AsmError {
            line: self.line,
            col: t.col,
            token: t.text.to_string(),
            kind: AsmErrorKind::Expected {
                expected: expected.into(),
                found: t.shown(),
            },
        }
    }

    /// An error of any kind at token `t`.
    pub fn error_kind(&self, t: &Token<'_>, kind: AsmErrorKind) -> AsmError {
        AsmError {
            line: self.line,
            col: t.col,
            token: t.text.to_string(),
            kind,
        }
    }

    /// An "invalid" error at token `t`.
    pub fn invalid(&self, t: &Token<'_>, msg: impl Into<String>) -> AsmError {
        self.error_kind(t, AsmErrorKind::Invalid(msg.into()))
    }

    /// Consumes the punctuation `c`.
    pub fn punct(&mut self, c: char) -> Result<(), AsmError> {
        match self.peek() {
            Some(t) if t.is(c) => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.expected(format!("`{c}`"))),
        }
    }

    /// Consumes a `,`.
    pub fn comma(&mut self) -> Result<(), AsmError> {
        self.punct(',')
    }

    /// Requires the end of the line.
    pub fn end(&self) -> Result<(), AsmError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.expected("end of line"))
        }
    }

    /// Consumes an identifier.
    pub fn ident(&mut self, expected: &str) -> Result<&'t Token<'a>, AsmError> {
        match self.peek() {
            Some(t) if t.kind == TokKind::Ident => {
                self.pos += 1;
                Ok(t)
            }
            _ => Err(self.expected(expected)),
        }
    }

    /// Consumes a string literal, or an identifier standing for itself.
    pub fn name_or_string(&mut self, expected: &str) -> Result<String, AsmError> {
        match self.peek() {
            Some(Token {
                kind: TokKind::Str(s),
                ..
            }) => {
                self.pos += 1;
                Ok(s.clone())
            }
            Some(t) if t.kind == TokKind::Ident => {
                self.pos += 1;
                Ok(t.text.to_string())
            }
            _ => Err(self.expected(expected)),
        }
    }

    /// Consumes a string literal.
    pub fn string(&mut self, expected: &str) -> Result<String, AsmError> {
        match self.peek() {
            Some(Token {
                kind: TokKind::Str(s),
                ..
            }) => {
                self.pos += 1;
                Ok(s.clone())
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn reg<T>(
        &mut self,
        prefix: &str,
        count: u8,
        new: fn(u8) -> Option<T>,
        what: &str,
    ) -> Result<T, AsmError> {
        let expected = format!("{what} like {prefix}3");
        let Some(t) = self.peek() else {
            return Err(self.expected(expected));
        };
        match reg_index(t, prefix) {
            Some(Some(i)) if i < count as u32 => {
                self.pos += 1;
                new(i as u8).ok_or_else(|| self.error_at(t, expected))
            }
            Some(_) => Err(self.invalid(
                t,
                format!(
                    "{what} `{}` does not exist: expected {prefix}0 to {prefix}{}",
                    t.text,
                    count - 1
                ),
            )),
            None => Err(self.error_at(t, expected)),
        }
    }

    /// Whether the next token is a register with this prefix (`s`, `v`, ...).
    pub fn at_reg(&self, prefix: &str) -> bool {
        self.peek().is_some_and(|t| reg_index(t, prefix).is_some())
    }

    /// A scalar register.
    pub fn sreg(&mut self) -> Result<SReg, AsmError> {
        self.reg("s", SReg::COUNT, SReg::new, "a scalar register")
    }
    /// A vector register.
    pub fn vreg(&mut self) -> Result<VReg, AsmError> {
        self.reg("v", VReg::COUNT, VReg::new, "a vector register")
    }
    /// A mask register.
    pub fn mreg(&mut self) -> Result<MReg, AsmError> {
        self.reg("m", MReg::COUNT, MReg::new, "a mask register")
    }
    /// A matrix unit.
    pub fn mxu(&mut self) -> Result<Mxu, AsmError> {
        self.reg("mxu", Mxu::COUNT, Mxu::new, "a matrix unit")
    }
    /// A semaphore.
    pub fn sem(&mut self) -> Result<Sem, AsmError> {
        self.reg("sem", Sem::COUNT, Sem::new, "a semaphore")
    }

    /// An integer with an optional `-`, as written (not range-checked beyond i128).
    pub fn int(&mut self, expected: &str) -> Result<(i128, &'t Token<'a>), AsmError> {
        let neg = self.peek().is_some_and(|t| t.is('-'));
        let Some(t) = self.toks.get(self.pos + usize::from(neg)) else {
            self.pos += usize::from(neg);
            return Err(self.expected(expected));
        };
        let v = match (&t.kind, parse_uint(t.text)) {
            (TokKind::Num, Some(v)) => v,
            _ => {
                self.pos += usize::from(neg);
                return Err(self.expected(expected));
            }
        };
        self.pos += 1 + usize::from(neg);
        Ok((if neg { -v } else { v }, t))
    }

    /// An integer in `lo..=hi`.
    pub fn int_in(&mut self, lo: i128, hi: i128, expected: &str) -> Result<i128, AsmError> {
        let (v, t) = self.int(expected)?;
        if v < lo || v > hi {
            return Err(self.invalid(
                t,
                format!("{v} is out of range: expected {expected} ({lo} to {hi})"),
            ));
        }
        Ok(v)
    }

    /// A 32-bit integer immediate, signed or unsigned.
    pub fn imm_i32(&mut self) -> Result<i32, AsmError> {
        let v = self.int_in(i32::MIN as i128, u32::MAX as i128, "a 32-bit integer")?;
        Ok(v as u32 as i32)
    }

    /// An f32 immediate's bits.
    pub fn imm_f32(&mut self) -> Result<u32, AsmError> {
        const EXPECTED: &str = "an f32 literal like 1.5, -inf or 0x3fc00000";
        let neg = self.peek().is_some_and(|t| t.is('-'));
        let Some(t) = self.toks.get(self.pos + usize::from(neg)) else {
            self.pos += usize::from(neg);
            return Err(self.expected(EXPECTED));
        };
        let ok_kind = t.kind == TokKind::Num || matches!(t.text, "inf" | "nan");
        if !ok_kind {
            self.pos += usize::from(neg);
            return Err(self.expected(EXPECTED));
        }
        self.pos += 1 + usize::from(neg);
        let hex = t
            .text
            .strip_prefix("0x")
            .or_else(|| t.text.strip_prefix("0X"));
        if let Some(h) = hex {
            return match u32::from_str_radix(h, 16) {
                Ok(bits) if !neg && !h.starts_with('+') => Ok(bits),
                _ => Err(self.invalid(t, format!("`{}` is not a 32-bit hex bit pattern", t.text))),
            };
        }
        let text = if neg {
            format!("-{}", t.text)
        } else {
            t.text.to_string()
        };
        match text.parse::<f32>() {
            Ok(v) if v.is_infinite() && !t.text.starts_with("inf") => {
                Err(self.invalid(t, format!("`{text}` overflows f32")))
            }
            Ok(v) => Ok(v.to_bits()),
            Err(_) => Err(self.error_at(t, EXPECTED)),
        }
    }

    /// A scalar operand: a register or an i32 immediate.
    pub fn ssrc(&mut self) -> Result<SSrc, AsmError> {
        if self.at_reg("s") {
            return self.sreg().map(SSrc::Reg);
        }
        match self.peek() {
            Some(t) if t.kind == TokKind::Num || t.is('-') => self.imm_i32().map(SSrc::Imm),
            _ => Err(self.expected("a scalar register like s3 or an integer")),
        }
    }

    /// A vector operand: a vector register, a scalar register or an immediate of type `ty`.
    pub fn vsrc(&mut self, ty: VType) -> Result<VSrc, AsmError> {
        if self.at_reg("v") {
            return self.vreg().map(VSrc::V);
        }
        if self.at_reg("s") {
            return self.sreg().map(VSrc::S);
        }
        let imm_start = self.peek().is_some_and(|t| {
            t.kind == TokKind::Num || t.is('-') || matches!(t.text, "inf" | "nan")
        });
        if !imm_start {
            return Err(self.expected(format!(
                "a vector register like v3, a scalar register or an {ty} immediate"
            )));
        }
        match ty {
            VType::F32 => self.imm_f32().map(VSrc::Imm),
            VType::I32 => self.imm_i32().map(|i| VSrc::Imm(i as u32)),
        }
    }

    /// A byte address: `[s2]`, `[s2 + 8]`, `[s2 - 8]`, `[8]`, `[-8]`.
    pub fn addr(&mut self) -> Result<Addr, AsmError> {
        self.punct('[')?;
        let range = (i32::MIN as i128, i32::MAX as i128);
        let addr = if self.at_reg("s") {
            let base = self.sreg()?;
            let offset = match self.peek() {
                Some(t) if t.is('+') || t.is('-') => {
                    self.pos += 1;
                    let (v, vt) = self.int("an offset in bytes")?;
                    let v = if t.is('-') { -v } else { v };
                    if v < range.0 || v > range.1 {
                        return Err(self.invalid(vt, format!("offset {v} does not fit in 32 bits")));
                    }
                    v as i32
                }
                _ => 0,
            };
            Addr::new(base, offset)
        } else {
            let v = self.int_in(range.0, range.1, "a base register like s2 or an address")?;
            Addr::abs(v as i32)
        };
        self.punct(']')?;
        Ok(addr)
    }

    /// A branch target: `@12` or a label.
    pub fn target(&mut self) -> Result<Target, AsmError> {
        match self.peek() {
            Some(t) if t.is('@') => {
                self.pos += 1;
                let v = self.int_in(0, u32::MAX as i128, "an instruction index")?;
                Ok(Target::Abs(v as u32))
            }
            Some(t) if t.kind == TokKind::Ident => {
                self.pos += 1;
                Ok(Target::Label(t.text.to_string(), t.col))
            }
            _ => Err(self.expected("a label or an instruction index like @12")),
        }
    }

    /// A DMA memory reference: `vmem[s1]`, `smem[s1]`, `hbm.a0[s1]`, `hbm.NAME[s1]`.
    pub fn memref(&mut self) -> Result<(Space, Option<SlotRef>, SReg), AsmError> {
        const EXPECTED: &str = "a memory reference like vmem[s1], smem[s1] or hbm.a0[s1]";
        let t = self.ident(EXPECTED)?;
        let (space, slot) = match t.text.split_once('.') {
            None => match Space::from_name(t.text) {
                Some(s) => (s, None),
                None => return Err(self.error_at(t, EXPECTED)),
            },
            Some((sp, name)) => match Space::from_name(sp) {
                Some(s) if !name.is_empty() => {
                    let slot = match slot_index(name) {
                        Some(Some(i)) => SlotRef::Slot(
                            ArgSlot::new(i).ok_or_else(|| self.error_at(t, EXPECTED))?,
                        ),
                        Some(None) => {
                            return Err(self.invalid(
                                t,
                                format!(
                                    "argument slot `{name}` does not exist: expected a0 to a{}",
                                    ArgSlot::COUNT - 1
                                ),
                            ));
                        }
                        None => SlotRef::Name(name.to_string(), t.col + sp.len() + 1),
                    };
                    (s, Some(slot))
                }
                _ => return Err(self.error_at(t, EXPECTED)),
            },
        };
        self.punct('[')?;
        let reg = self.sreg()?;
        self.punct(']')?;
        Ok((space, slot, reg))
    }

    /// `, key=value` operands after the positional ones, in any order, each at most once.
    /// `each(index into keys, cursor)` reads the value. Returns which keys were present.
    pub fn keywords(
        &mut self,
        keys: &[&str],
        mut each: impl FnMut(usize, &mut Self) -> Result<(), AsmError>,
    ) -> Result<Vec<bool>, AsmError> {
        let mut seen = vec![false; keys.len()];
        while !self.at_end() {
            self.comma()?;
            let list = keys
                .iter()
                .map(|k| format!("{k}="))
                .collect::<Vec<_>>()
                .join(", ");
            let t = self.ident(&format!("one of {list}"))?;
            let Some(k) = keys.iter().position(|k| *k == t.text) else {
                return Err(self.error_at(t, format!("one of {list}")));
            };
            if seen[k] {
                return Err(self.error_kind(
                    t,
                    AsmErrorKind::Duplicate {
                        what: "operand",
                        name: format!("{}=", t.text),
                    },
                ));
            }
            seen[k] = true;
            self.punct('=')?;
            each(k, self)?;
        }
        Ok(seen)
    }
}

/// `Some(Some(i))` for a register `prefix` + digits in u32 range, `Some(None)` when the digits
/// overflow, `None` when the token is not of that form.
fn reg_index(t: &Token<'_>, prefix: &str) -> Option<Option<u32>> {
    if t.kind != TokKind::Ident {
        return None;
    }
    let digits = t.text.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u32>().ok())
}

/// `a` + digits: `Some(Some(slot))`, `Some(None)` when too large, `None` when not of that form.
pub(crate) fn slot_index(name: &str) -> Option<Option<u8>> {
    let digits = name.strip_prefix('a')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u8>().ok().filter(|i| *i < ArgSlot::COUNT))
}

/// Parses an unsigned decimal or `0x` hex literal.
pub(crate) fn parse_uint(text: &str) -> Option<i128> {
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (text, 10),
    };
    if digits.is_empty() || digits.len() > 32 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    i128::from_str_radix(digits, radix).ok()
}
