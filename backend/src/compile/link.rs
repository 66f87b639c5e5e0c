//! Linking kernels into one program.
//!
//! Each kernel becomes a section of the whole-graph program. A section starts by recreating the
//! state the kernel expects at launch — scalar registers zero, its argument words and SMEM
//! preloads in SMEM — then runs the kernel's instructions, relocated: branch targets move by the
//! section's base, `halt` and branches past the end go to the section's end, HBM argument slots
//! map to the whole program's slots, marker names to the whole program's list. Kernels end with
//! their DMAs waited for and their semaphores at zero, so sections run back to back on one core
//! with no host in between.

use tpuemu_isa::{ArgDecl, ArgKind, ArgSlot, Instr, MemRef, Program, SReg};

use crate::kernels::KernelError;

/// One kernel of the graph and how it binds to the whole program.
pub(crate) struct Section {
    /// The kernel.
    pub program: std::sync::Arc<Program>,
    /// Whole-program slot of each of the kernel's argument slots (buffers only; scalars: unused).
    pub slots: Vec<u8>,
    /// The kernel's argument words: SMEM word `i` holds `words[i]` at launch.
    pub words: Vec<u32>,
}

fn relocate_ref(m: MemRef, slots: &[u8]) -> Result<MemRef, KernelError> {
    match m.slot {
        Some(s) => {
            let g = *slots.get(s.index() as usize).ok_or_else(|| {
                KernelError::Unsupported(format!(
                    "kernel uses argument slot {s} it does not declare"
                ))
            })?;
            Ok(MemRef {
                slot: Some(ArgSlot::n(g)),
                ..m
            })
        }
        None => Ok(m),
    }
}

/// Links `sections` into one program over `buffers` (one buffer argument per whole-program
/// slot).
pub(crate) fn link(
    name: &str,
    buffers: &[String],
    sections: &[Section],
) -> Result<Program, KernelError> {
    if buffers.len() > tpuemu_isa::reg::MAX_ARGS as usize {
        return Err(KernelError::TooLarge(format!(
            "the graph needs {} buffers; one program takes at most 64",
            buffers.len()
        )));
    }
    let mut out = Program::new(name);
    out.args = buffers
        .iter()
        .map(|n| ArgDecl {
            name: n.clone(),
            kind: ArgKind::Buffer,
        })
        .collect();
    let marker = |out: &mut Program, name: &str| -> u16 {
        match out.markers.iter().position(|m| m == name) {
            Some(i) => i as u16,
            None => {
                out.markers.push(name.to_string());
                out.markers.len() as u16 - 1
            }
        }
    };
    for sec in sections {
        let p = &sec.program;
        let id = marker(&mut out, &p.name);
        out.instrs.push(Instr::MarkBegin { name: id });
        // Launch state: registers zero, argument words and preloads in SMEM.
        for r in 1..32u8 {
            out.instrs.push(Instr::SMov {
                dst: SReg::n(r),
                imm: 0,
            });
        }
        let mut words: Vec<(u32, u32)> = sec
            .words
            .iter()
            .enumerate()
            .map(|(i, w)| (4 * i as u32, *w))
            .collect();
        for init in &p.smem_init {
            words.extend(
                init.words
                    .iter()
                    .enumerate()
                    .map(|(k, w)| (init.addr + 4 * k as u32, *w)),
            );
        }
        for (addr, w) in words {
            out.instrs.push(Instr::SMov {
                dst: SReg::n(1),
                imm: w as i32,
            });
            out.instrs.push(Instr::SStore {
                src: SReg::n(1),
                addr: tpuemu_isa::Addr::abs(addr as i32),
            });
        }
        out.instrs.push(Instr::SMov {
            dst: SReg::n(1),
            imm: 0,
        });
        let base = out.instrs.len() as u32;
        let end = base + p.instrs.len() as u32;
        for i in &p.instrs {
            let r = match *i {
                Instr::Halt => Instr::Br { target: end },
                Instr::Br { target } => Instr::Br {
                    target: (base + target).min(end),
                },
                Instr::BrIf { cond, reg, target } => Instr::BrIf {
                    cond,
                    reg,
                    target: (base + target).min(end),
                },
                Instr::Dma {
                    dst,
                    src,
                    shape,
                    sem,
                    remote,
                } => Instr::Dma {
                    dst: relocate_ref(dst, &sec.slots)?,
                    src: relocate_ref(src, &sec.slots)?,
                    shape,
                    sem,
                    remote,
                },
                Instr::MarkBegin { name } => {
                    let n = p.markers.get(name as usize).cloned().unwrap_or_default();
                    Instr::MarkBegin {
                        name: marker(&mut out, &n),
                    }
                }
                other => other,
            };
            out.instrs.push(r);
        }
        out.instrs.push(Instr::MarkEnd);
    }
    out.instrs.push(Instr::Halt);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Section, link};
    use crate::kernels::checksums::{cases, fnv1a};

    /// A whole-graph program linked from generated kernels: every section's launch state,
    /// relocated branches, slots and markers. Pinned from the linker before the emission
    /// vocabulary replaced its instruction literals (see [`crate::kernels::checksums`]).
    #[test]
    fn linked_program_is_unchanged() {
        let all = cases();
        let names = [
            "tile_dense_mixed",
            "tile_rows_softmax",
            "gemm_v5e",
            "index_add_checked",
            "matmul_epilogue_auto",
        ];
        let sections: Vec<Section> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let p = all.iter().find(|(n, _)| n == name).unwrap().1.clone();
                let nargs = p.args.len();
                Section {
                    program: Arc::new(p),
                    slots: (0..nargs).map(|a| ((a + i) % 7) as u8).collect(),
                    words: (0..nargs).map(|a| (1000 * i + a) as u32).collect(),
                }
            })
            .collect();
        let buffers: Vec<String> = (0..7).map(|i| format!("b{i}")).collect();
        let p = link("graph", &buffers, &sections).unwrap();
        let h = fnv1a(tpuemu_isa::disassemble(&p).as_bytes());
        println!("linked graph: {} instructions, 0x{h:016x}", p.instrs.len());
        assert_eq!((p.instrs.len(), h), (1907, 0x1f06_eeec_84b4_434b));
    }
}
