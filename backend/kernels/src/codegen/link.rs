//! Linking kernels into one program.
//!
//! Each kernel becomes a section of the whole-graph program. A section starts by recreating the
//! state the kernel expects at launch — scalar registers zero, its argument words and SMEM
//! preloads in SMEM — then runs the kernel's instructions, relocated: branch targets move by the
//! section's base, `halt` and branches past the end go to the section's end, HBM argument slots
//! map to the whole program's slots, marker names to the whole program's list. Kernels end with
//! their DMAs waited for and their semaphores at zero, so sections run back to back on one core
//! with no host in between.

use tpuemu_isa::{Addr, ArgSlot, Instr, MemRef, Program, ProgramBuilder, SReg};

use crate::error::KernelError;

/// One kernel of the graph and how it binds to the whole program.
pub struct Section {
    /// The kernel.
    pub program: std::sync::Arc<Program>,
    /// Whole-program slot of each of the kernel's argument slots (buffers only; scalars: unused).
    pub slots: Vec<u8>,
    /// The kernel's argument words: SMEM word `i` holds `words[i]` at launch.
    pub words: Vec<u32>,
}

/// A kernel of the graph before it is placed in a program: its argument slots name whole-graph
/// slots (`None` for a scalar argument).
pub struct Pending {
    /// The kernel.
    pub program: std::sync::Arc<Program>,
    /// Whole-graph slot of each buffer argument.
    pub slots: Vec<Option<usize>>,
    /// The kernel's argument words.
    pub words: Vec<u32>,
}

/// A run of kernels linked into one program: the whole-graph slots it binds, in argument
/// order, and its sections.
pub type Run = (Vec<usize>, Vec<Section>);

/// Splits the graph's kernels, in order, into runs whose buffers fit one program
/// (`max_buffers`): each run comes with the whole-graph slots its program binds, in the
/// program's argument order, and its sections with slots relative to that list. A graph whose
/// kernels use at most `max_buffers` slots in all is one run.
pub fn chunks(pending: &[Pending], max_buffers: usize) -> Result<Vec<Run>, KernelError> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < pending.len() {
        let mut used: Vec<usize> = Vec::new();
        let mut end = start;
        while end < pending.len() {
            let mut new: Vec<usize> = Vec::new();
            for g in pending[end].slots.iter().flatten() {
                if !used.contains(g) && !new.contains(g) {
                    new.push(*g);
                }
            }
            if used.len() + new.len() > max_buffers {
                break;
            }
            used.extend(new);
            end += 1;
        }
        if end == start {
            return Err(KernelError::TooLarge(format!(
                "kernel {} needs more than {max_buffers} buffers",
                pending[start].program.name
            )));
        }
        let sections = pending[start..end]
            .iter()
            .map(|p| Section {
                program: p.program.clone(),
                slots: p
                    .slots
                    .iter()
                    .map(|g| g.map_or(0, |g| used.iter().position(|u| *u == g).unwrap_or(0) as u8))
                    .collect(),
                words: p.words.clone(),
            })
            .collect();
        out.push((used, sections));
        start = end;
    }
    Ok(out)
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
pub fn link(name: &str, buffers: &[String], sections: &[Section]) -> Result<Program, KernelError> {
    if buffers.len() > tpuemu_isa::reg::MAX_ARGS as usize {
        return Err(KernelError::TooLarge(format!(
            "the graph needs {} buffers; one program takes at most 64",
            buffers.len()
        )));
    }
    let mut b = ProgramBuilder::new(name);
    for n in buffers {
        b.buffer(n.clone());
    }
    for sec in sections {
        b.mark_begin(&sec.program.name);
        launch_state(&mut b, sec);
        relocate(&mut b, sec)?;
        b.mark_end();
    }
    b.halt();
    Ok(b.finish()?)
}

/// What a launch of the section's kernel would find: scalar registers zero, its argument words
/// and SMEM preloads in SMEM.
fn launch_state(b: &mut ProgramBuilder, sec: &Section) {
    let s1 = SReg::n(1);
    for r in 1..32u8 {
        b.smov(SReg::n(r), 0);
    }
    let mut words: Vec<(u32, u32)> = sec
        .words
        .iter()
        .enumerate()
        .map(|(i, w)| (4 * i as u32, *w))
        .collect();
    for init in &sec.program.smem_init {
        words.extend(
            init.words
                .iter()
                .enumerate()
                .map(|(k, w)| (init.addr + 4 * k as u32, *w)),
        );
    }
    for (addr, w) in words {
        b.smov(s1, w as i32).sst(s1, Addr::abs(addr as i32));
    }
    b.smov(s1, 0);
}

/// The kernel's instructions, relocated: branch targets move by the section's base, `halt` and
/// branches past the end go to the section's end, HBM slots and marker names map to the whole
/// program's.
fn relocate(b: &mut ProgramBuilder, sec: &Section) -> Result<(), KernelError> {
    let p = &sec.program;
    let base = b.pc();
    let len = p.instrs.len() as u32;
    let end = b.label();
    for i in &p.instrs {
        match *i {
            Instr::Halt => {
                b.br(end);
            }
            Instr::Br { target } | Instr::BrIf { target, .. } if target >= len => {
                b.push(i.with_branch_target(base + len));
            }
            Instr::Br { target } | Instr::BrIf { target, .. } => {
                b.push(i.with_branch_target(base + target));
            }
            Instr::Dma {
                dst,
                src,
                shape,
                sem,
                remote,
            } => {
                let (dst, src) = (
                    relocate_ref(dst, &sec.slots)?,
                    relocate_ref(src, &sec.slots)?,
                );
                match remote {
                    Some(r) => b.dma_remote(dst, src, shape, sem, r),
                    None => b.dma(dst, src, shape, sem),
                };
            }
            Instr::MarkBegin { name } => {
                b.mark_begin(p.markers.get(name as usize).map_or("", |m| m.as_str()));
            }
            other => {
                b.push(other);
            }
        }
    }
    b.bind(end);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Pending, Section, chunks, link};
    use crate::kernels::KernelError;
    use crate::kernels::checksums::{cases, fnv1a};
    use tpuemu_isa::ProgramBuilder;

    /// A whole-graph program linked from generated kernels and a hand-written one that halts
    /// and branches past its end: every section's launch state, relocated branches, slots and
    /// markers. Pinned from the linker before the emission vocabulary replaced its instruction
    /// literals (see [`crate::kernels::checksums`]); re-pinned when the collective it links
    /// changed, and when its single-tile kernel (`tile_dense_mixed`) became straight-line code.
    #[test]
    fn linked_program_is_unchanged() {
        let mut all = cases();
        let tail = tpuemu_isa::assemble(
            ".program tail\n.arg x buffer\n.marker \"t\"\n mark.begin \"t\"\n brz s1, out\n halt\n mark.end\nout:\n",
        )
        .unwrap();
        all.push(("tail".into(), tail));
        let names = [
            "tile_dense_mixed",
            "tile_rows_softmax",
            "tail",
            "gemm_v5e",
            "coll_all-reduce_4x4_axis0",
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
        assert_eq!((p.instrs.len(), h), (2160, 0x2034_3a58_3404_9b5f));
    }

    #[test]
    fn a_graph_with_more_buffers_than_a_program_takes_is_split_in_order() {
        let p = Arc::new(ProgramBuilder::new("k").finish().unwrap());
        // Ten kernels, each reading slot i and writing slot i + 1, plus a scalar argument.
        let pending: Vec<Pending> = (0..10)
            .map(|i| Pending {
                program: p.clone(),
                slots: vec![Some(i), None, Some(i + 1)],
                words: vec![0, 7, 0],
            })
            .collect();
        let runs = chunks(&pending, 4).unwrap();
        // Slots 0..=3 hold three kernels, 3..=6 the next three, and so on: 3 + 3 + 3 + 1.
        let sizes: Vec<usize> = runs.iter().map(|r| r.1.len()).collect();
        assert_eq!(sizes, [3, 3, 3, 1]);
        assert_eq!(runs[1].0, [3, 4, 5, 6]);
        for (used, secs) in &runs {
            assert!(used.len() <= 4);
            for s in secs {
                // The local slot names the same whole-graph slot; the scalar's entry is unused.
                assert_eq!(s.slots[1], 0);
                assert_eq!(used[s.slots[2] as usize], used[s.slots[0] as usize] + 1);
            }
        }
        // Every kernel is placed once, in order.
        assert_eq!(runs.iter().map(|r| r.1.len()).sum::<usize>(), 10);
        assert!(matches!(chunks(&pending, 1), Err(KernelError::TooLarge(_))));
        assert_eq!(chunks(&pending, 64).unwrap().len(), 1);
    }
}
