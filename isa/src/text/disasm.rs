//! The disassembler: [`Program`] to assembly text that assembles back to the same program.
//!
//! Output: the metadata directives (`.program`, `.source_op`, `.fusion_group`, `.arg`,
//! `.marker` for every marker name in index order, `.smem`), a blank line, then one instruction
//! per line, indented, with a label `L<pc>:` before every branch target (and at the end when a
//! branch targets the end). Branches name those labels, `mark.begin` names its region, and HBM
//! references use the argument's name when it is a plain identifier.
//!
//! For every program that passes [`check_program`](crate::verify::check_program),
//! `assemble(&disassemble(p)) == Ok(p)`.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::display::quote;
use super::operands::slot_index;
use crate::instr::Instr;
use crate::program::Program;

/// The program's assembly text.
pub fn disassemble(p: &Program) -> String {
    let mut out = String::new();
    let _ = writeln!(out, ".program {}", name_text(&p.name));
    if let Some(op) = &p.source_op {
        let _ = writeln!(out, ".source_op {}", quote(op));
    }
    if let Some(g) = p.fusion_group {
        let _ = writeln!(out, ".fusion_group {g}");
    }
    for a in &p.args {
        let _ = writeln!(out, ".arg {} {}", name_text(&a.name), a.kind.name());
    }
    for m in &p.markers {
        let _ = writeln!(out, ".marker {}", quote(m));
    }
    for b in &p.smem_init {
        let _ = write!(out, ".smem {}", b.addr);
        for w in &b.words {
            let _ = write!(out, ", {}", *w as i32);
        }
        out.push('\n');
    }
    out.push('\n');
    let targets: BTreeSet<u32> = p.instrs.iter().filter_map(Instr::branch_target).collect();
    for (pc, instr) in p.instrs.iter().enumerate() {
        if targets.contains(&(pc as u32)) {
            let _ = writeln!(out, "L{pc}:");
        }
        let _ = writeln!(out, "    {}", instr_line(p, instr));
    }
    let end = p.instrs.len() as u32;
    if targets.contains(&end) {
        let _ = writeln!(out, "L{end}:");
    }
    out
}

/// One instruction as the disassembler prints it: branches to `L<pc>` labels, marker names
/// quoted, HBM arguments by name where the name is an identifier.
pub fn instr_line(p: &Program, instr: &Instr) -> String {
    match *instr {
        Instr::Br { target } => format!("br L{target}"),
        Instr::BrIf { cond, reg, target } => format!("br{cond} {reg}, L{target}"),
        Instr::MarkBegin { name } => match p.markers.get(name as usize) {
            Some(m) => format!("mark.begin {}", quote(m)),
            None => instr.to_string(),
        },
        Instr::Dma { dst, src, .. } => {
            let mut text = instr.to_string();
            for slot in [dst.slot, src.slot].into_iter().flatten() {
                if let Some(arg) = p.args.get(slot.index() as usize)
                    && usable_ref_name(&arg.name)
                {
                    text = text.replace(&format!("hbm.{slot}["), &format!("hbm.{}[", arg.name));
                }
            }
            text
        }
        _ => instr.to_string(),
    }
}

/// Whether `s` is an identifier the lexer reads as one token: letters, digits, `_`, not
/// starting with a digit or a dot.
fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `hbm.NAME[...]` would resolve to the argument named `name`: an identifier that is not
/// itself a slot spelling (`a3`), which always means the slot.
fn usable_ref_name(name: &str) -> bool {
    is_ident(name) && slot_index(name).is_none()
}

/// A name as a directive operand: bare when it is an identifier, else quoted.
fn name_text(name: &str) -> String {
    if is_ident(name) && !matches!(name, "buffer" | "scalar") {
        name.to_string()
    } else {
        quote(name)
    }
}
