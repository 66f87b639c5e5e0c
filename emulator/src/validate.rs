//! Checks a program against a chip before it runs: registers and matrix units the chip has,
//! branch targets, marker names, argument slots and SMEM preloads.

use tpuemu_isa::{ArgKind, Instr, MemRef, Program, VReg, VSrc};

use crate::preset::ChipPreset;

/// Why `program` cannot run on `preset`, or `Ok`.
pub fn validate(program: &Program, preset: &ChipPreset) -> Result<(), String> {
    let n = program.instrs.len();
    if program.args.len() > tpuemu_isa::reg::MAX_ARGS as usize {
        return Err(format!("{} arguments; at most 64", program.args.len()));
    }
    let arg_words = 4 * program.args.len() as u64;
    for init in &program.smem_init {
        let end = init.addr as u64 + 4 * init.words.len() as u64;
        if init.addr % 4 != 0 || (init.addr as u64) < arg_words || end > preset.smem_bytes {
            return Err(format!(
                "SMEM preload at byte {} ({} words) must be word-aligned, after the argument words (byte {arg_words}) and inside SMEM ({} bytes)",
                init.addr,
                init.words.len(),
                preset.smem_bytes
            ));
        }
    }
    let vreg = |v: VReg, pc: usize| {
        if v.index() as u32 >= preset.vregs {
            Err(format!(
                "pc {pc}: {v} but the {} has {} vector registers",
                preset.name, preset.vregs
            ))
        } else {
            Ok(())
        }
    };
    let vsrc = |s: &VSrc, pc: usize| match s {
        VSrc::V(v) => vreg(*v, pc),
        _ => Ok(()),
    };
    let hbm = |m: &MemRef, pc: usize| match m.slot {
        Some(slot) => match program.args.get(slot.index() as usize) {
            Some(a) if a.kind == ArgKind::Buffer => Ok(()),
            Some(a) => Err(format!(
                "pc {pc}: DMA through {slot}, but argument `{}` is a scalar",
                a.name
            )),
            None => Err(format!(
                "pc {pc}: DMA through {slot}, but the program declares {} arguments",
                program.args.len()
            )),
        },
        None => Ok(()),
    };
    for (pc, i) in program.instrs.iter().enumerate() {
        if let Some(t) = i.branch_target()
            && t as usize > n
        {
            return Err(format!(
                "pc {pc}: branch to {t}, past the end ({n} instructions)"
            ));
        }
        match i {
            Instr::VLoad { dst, .. } | Instr::VIota { dst, .. } | Instr::VMask { dst, .. } => {
                vreg(*dst, pc)?
            }
            Instr::VGather { dst, index, .. } => {
                vreg(*dst, pc)?;
                vreg(*index, pc)?
            }
            Instr::VStore { src, .. } => vreg(*src, pc)?,
            Instr::VMov { dst, src, .. } => {
                vreg(*dst, pc)?;
                vsrc(src, pc)?
            }
            Instr::VBin { dst, a, b, .. } | Instr::VSel { dst, a, b, .. } => {
                vreg(*dst, pc)?;
                vreg(*a, pc)?;
                vsrc(b, pc)?
            }
            Instr::VCmp { a, b, .. } => {
                vreg(*a, pc)?;
                vsrc(b, pc)?
            }
            Instr::VUn { dst, a, .. }
            | Instr::VCvt { dst, a, .. }
            | Instr::VRed { dst, a, .. }
            | Instr::VRot { dst, a, .. }
            | Instr::VTrans { dst, a } => {
                vreg(*dst, pc)?;
                vreg(*a, pc)?
            }
            Instr::VPerm { dst, a, index, .. } => {
                vreg(*dst, pc)?;
                vreg(*a, pc)?;
                vreg(*index, pc)?
            }
            Instr::MxuLoad { mxu, .. }
            | Instr::MxuMatmul { mxu, .. }
            | Instr::MxuPop { mxu, .. }
                if mxu.index() as u32 >= preset.mxus_per_core =>
            {
                return Err(format!(
                    "pc {pc}: {mxu} but the {} has {} matrix units per core",
                    preset.name, preset.mxus_per_core
                ));
            }
            Instr::Dma { dst, src, .. } => {
                hbm(src, pc)?;
                hbm(dst, pc)?;
            }
            Instr::MarkBegin { name } if *name as usize >= program.markers.len() => {
                return Err(format!(
                    "pc {pc}: marker #{name} but the program names {} regions",
                    program.markers.len()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}
