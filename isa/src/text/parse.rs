//! The assembler: text to [`Program`].
//!
//! A source file is read line by line. A line holds, in this order, any number of labels
//! (`loop:`), then at most one directive or instruction, then an optional comment (`;`, `//`, or
//! `#` not followed by a digit). Instructions are written exactly as [`Instr`]'s `Display` prints
//! them, except that branch targets may be labels and HBM arguments may be named
//! (`hbm.input[s1]`); `mark.begin` takes a quoted name (or `#index`).
//!
//! Directives set the program's metadata:
//!
//! | directive | meaning |
//! |---|---|
//! | `.program NAME` | the program's name (identifier or quoted string) |
//! | `.arg NAME buffer` / `.arg NAME scalar` | declares the next argument slot |
//! | `.source_op "aten::mm"` | the ATen operator implemented |
//! | `.fusion_group N` | the fusion group implemented |
//! | `.smem ADDR, w0, w1, ...` | SMEM words preloaded at byte `ADDR` (integers or f32 literals) |
//! | `.marker "name"` | declares the next profiling region name |
//!
//! Marker names are numbered in order of first appearance, by `.marker` or `mark.begin "name"`.
//! `hbm.aN` always means slot N; other names resolve against the `.arg` declarations, wherever
//! they are in the file. Labels resolve against the whole file too. The result must pass
//! [`check_program`], so anything the assembler accepts prints back as assembly.

use std::collections::HashMap;

use super::error::{AsmError, AsmErrorKind};
use super::lexer::{TokKind, Token, lex_line};
use super::mnemonic::parse_instr;
use super::operands::{Cursor, parse_uint};
use crate::instr::Instr;
use crate::program::{ArgDecl, ArgKind, Program, SmemInit};
use crate::reg::{ArgSlot, MAX_ARGS};
use crate::verify::{ProgramError, check_instr, check_program};

/// Where something was written: line, column and text, for errors found after the line is read.
#[derive(Clone, Debug, Default)]
struct Place {
    line: usize,
    col: usize,
    token: String,
}

impl Place {
    fn error(&self, kind: AsmErrorKind) -> AsmError {
        AsmError {
            line: self.line,
            col: self.col,
            token: self.token.clone(),
            kind,
        }
    }
}

/// Assembles a program from source text. Returns the first error.
///
/// ```
/// let p = tpuemu_isa::text::assemble("
///     .program count
///     smov s1, 3
/// top:
///     ssub s1, s1, 1
///     brnz s1, top   ; loop three times
///     halt
/// ").unwrap();
/// assert_eq!(p.name, "count");
/// assert_eq!(p.instrs[2].branch_target(), Some(1));
/// ```
pub fn assemble(src: &str) -> Result<Program, AsmError> {
    let mut a = Asm::default();
    for (i, raw) in src.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        a.line(line, i + 1)?;
    }
    a.finish()
}

#[derive(Default)]
struct Asm {
    program: Program,
    labels: HashMap<String, u32>,
    label_uses: Vec<(usize, String, Place)>,
    arg_uses: Vec<(usize, bool, String, Place)>,
    marker_ids: HashMap<String, u16>,
    instr_places: Vec<Place>,
    smem_places: Vec<Place>,
    seen: Vec<&'static str>,
}

impl Asm {
    fn line(&mut self, text: &str, lineno: usize) -> Result<(), AsmError> {
        let toks = lex_line(text, lineno)?;
        let mut c = Cursor::new(&toks, lineno, text.chars().count() + 1);
        while c.peek().is_some_and(|t| t.kind == TokKind::Ident)
            && c.peek2().is_some_and(|t| t.is(':'))
        {
            let Some(t) = c.bump() else { break };
            c.bump();
            self.define_label(t, lineno)?;
        }
        let Some(first) = c.bump() else {
            return Ok(());
        };
        if first.kind != TokKind::Ident {
            return Err(c.error_at(first, "an instruction, a directive or a label"));
        }
        if first.text.starts_with('.') {
            return self.directive(first, &mut c);
        }
        let parsed = parse_instr(first, &mut c)?;
        let place = Place {
            line: lineno,
            col: first.col,
            token: first.text.to_string(),
        };
        check_instr(&parsed.instr)
            .map_err(|e| place.error(AsmErrorKind::Invalid(e.to_string())))?;
        let pc = self.program.instrs.len();
        let mut instr = parsed.instr;
        if let Some(name) = parsed.marker {
            instr = Instr::MarkBegin {
                name: self.intern_marker(name, &place)?,
            };
        }
        if let Some((name, col)) = parsed.label {
            let p = Place {
                line: lineno,
                col,
                token: name.clone(),
            };
            self.label_uses.push((pc, name, p));
        }
        for (is_dst, name, col) in parsed.arg_names {
            let p = Place {
                line: lineno,
                col,
                token: name.clone(),
            };
            self.arg_uses.push((pc, is_dst, name, p));
        }
        self.program.instrs.push(instr);
        self.instr_places.push(place);
        Ok(())
    }

    fn define_label(&mut self, t: &Token<'_>, line: usize) -> Result<(), AsmError> {
        let place = Place {
            line,
            col: t.col,
            token: t.text.to_string(),
        };
        if t.text.starts_with('.') {
            return Err(place.error(AsmErrorKind::Invalid(format!(
                "label `{}` may not start with a dot",
                t.text
            ))));
        }
        let pc = u32::try_from(self.program.instrs.len()).unwrap_or(u32::MAX);
        if self.labels.insert(t.text.to_string(), pc).is_some() {
            return Err(place.error(AsmErrorKind::Duplicate {
                what: "label",
                name: t.text.to_string(),
            }));
        }
        Ok(())
    }

    fn intern_marker(&mut self, name: String, place: &Place) -> Result<u16, AsmError> {
        if let Some(id) = self.marker_ids.get(&name) {
            return Ok(*id);
        }
        let Ok(id) = u16::try_from(self.program.markers.len()) else {
            return Err(place.error(AsmErrorKind::Invalid(
                "a program may name at most 65536 regions".into(),
            )));
        };
        self.marker_ids.insert(name.clone(), id);
        self.program.markers.push(name);
        Ok(id)
    }

    fn once(&mut self, d: &Token<'_>, line: usize, name: &'static str) -> Result<(), AsmError> {
        if self.seen.contains(&name) {
            let place = Place {
                line,
                col: d.col,
                token: d.text.to_string(),
            };
            return Err(place.error(AsmErrorKind::Duplicate {
                what: "directive",
                name: name.into(),
            }));
        }
        self.seen.push(name);
        Ok(())
    }

    fn directive(&mut self, d: &Token<'_>, c: &mut Cursor<'_, '_>) -> Result<(), AsmError> {
        let line = c.line();
        let place = Place {
            line,
            col: d.col,
            token: d.text.to_string(),
        };
        match d.text {
            ".program" => {
                self.once(d, line, ".program")?;
                self.program.name = c.name_or_string("a program name")?;
            }
            ".source_op" => {
                self.once(d, line, ".source_op")?;
                self.program.source_op =
                    Some(c.name_or_string("an operator name like \"aten::mm\"")?);
            }
            ".fusion_group" => {
                self.once(d, line, ".fusion_group")?;
                let v = c.int_in(0, u64::MAX as i128, "a fusion group number")?;
                self.program.fusion_group = Some(v as u64);
            }
            ".arg" => {
                let name = c.name_or_string("an argument name")?;
                let kt = c.ident("`buffer` or `scalar`")?;
                let kind = match kt.text {
                    "buffer" => ArgKind::Buffer,
                    "scalar" => ArgKind::Scalar,
                    _ => return Err(c.error_at(kt, "`buffer` or `scalar`")),
                };
                if self.program.args.iter().any(|a| a.name == name) {
                    return Err(place.error(AsmErrorKind::Duplicate {
                        what: "argument",
                        name,
                    }));
                }
                if self.program.args.len() >= MAX_ARGS as usize {
                    return Err(place.error(AsmErrorKind::Invalid(format!(
                        "a program may have at most {MAX_ARGS} arguments"
                    ))));
                }
                self.program.args.push(ArgDecl { name, kind });
            }
            ".marker" => {
                let name = c.string("a marker name in quotes")?;
                if self.marker_ids.contains_key(&name) {
                    return Err(place.error(AsmErrorKind::Duplicate {
                        what: "marker",
                        name,
                    }));
                }
                self.intern_marker(name, &place)?;
            }
            ".smem" => {
                let addr = c.int_in(0, u32::MAX as i128, "an SMEM byte address")? as u32;
                let mut words = Vec::new();
                while !c.at_end() {
                    c.comma()?;
                    words.push(smem_word(c)?);
                }
                if words.is_empty() {
                    return Err(c.expected("`,` and the words to preload"));
                }
                self.program.smem_init.push(SmemInit { addr, words });
                self.smem_places.push(place);
            }
            _ => {
                return Err(place.error(AsmErrorKind::UnknownDirective {
                    name: d.text.to_string(),
                }));
            }
        }
        c.end()
    }

    fn finish(mut self) -> Result<Program, AsmError> {
        for (pc, name, place) in std::mem::take(&mut self.label_uses) {
            let Some(&target) = self.labels.get(&name) else {
                return Err(place.error(AsmErrorKind::Undefined {
                    what: "label",
                    name,
                }));
            };
            self.program.instrs[pc] = self.program.instrs[pc].with_branch_target(target);
        }
        for (pc, is_dst, name, place) in std::mem::take(&mut self.arg_uses) {
            let slot = self
                .program
                .arg_slot(&name)
                .and_then(|i| ArgSlot::new(i as u8))
                .ok_or_else(|| {
                    place.error(AsmErrorKind::Undefined {
                        what: "argument",
                        name,
                    })
                })?;
            if let Instr::Dma { dst, src, .. } = &mut self.program.instrs[pc] {
                if is_dst {
                    dst.slot = Some(slot)
                } else {
                    src.slot = Some(slot)
                }
            }
        }
        match check_program(&self.program) {
            Ok(()) => Ok(self.program),
            Err(e) => Err(self.place_of(&e).error(AsmErrorKind::Invalid(match &e {
                ProgramError::Instr { error, .. } => error.to_string(),
                e => e.to_string(),
            }))),
        }
    }

    fn place_of(&self, e: &ProgramError) -> Place {
        let pc = match e {
            ProgramError::Instr { pc, .. }
            | ProgramError::BranchTarget { pc, .. }
            | ProgramError::MarkerIndex { pc, .. }
            | ProgramError::Slot { pc, .. } => Some(*pc),
            _ => None,
        };
        if let Some(p) = pc.and_then(|pc| self.instr_places.get(pc)) {
            return p.clone();
        }
        if let ProgramError::Smem { addr, .. } = e {
            let at = self.program.smem_init.iter().rposition(|b| b.addr == *addr);
            if let Some(p) = at.and_then(|i| self.smem_places.get(i)) {
                return p.clone();
            }
        }
        Place {
            line: 1,
            col: 1,
            token: String::new(),
        }
    }
}

/// One SMEM preload word: a 32-bit integer (signed or unsigned) or an f32 literal's bits.
fn smem_word(c: &mut Cursor<'_, '_>) -> Result<u32, AsmError> {
    let neg = c.peek().is_some_and(|t| t.is('-'));
    let lit = if neg { c.peek2() } else { c.peek() };
    let is_int = lit.is_some_and(|t| t.kind == TokKind::Num && parse_uint(t.text).is_some());
    if is_int {
        Ok(c.imm_i32()? as u32)
    } else {
        c.imm_f32()
    }
}
