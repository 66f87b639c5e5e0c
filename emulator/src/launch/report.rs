//! What a launch reports when it ends: where each core stands when it deadlocks, and the
//! statistics of every core.

use tpuemu_isa::{DeadlockReport, Instr, Program};

use super::{ChipState, Phase, Target};
use crate::core::timing::SYNC_UNITS;
use crate::stats::{CoreStats, LaunchStats};

pub(super) fn deadlock_report(
    chips: &[ChipState],
    targets: &[Target],
    phase: &[Phase],
    program: &Program,
) -> DeadlockReport {
    let cores = targets
        .iter()
        .zip(phase)
        .map(|(t, p)| {
            let c = &chips[t.chip as usize].cores[t.core as usize];
            let at = format!("chip {} core {}", t.chip, t.core);
            match p {
                Phase::Done => format!("{at}: finished"),
                Phase::Running => format!("{at}: running at pc {}", c.pc),
                Phase::Blocked => {
                    let text = program.instr_text(c.pc as usize);
                    match program.instrs.get(c.pc as usize) {
                        Some(Instr::SemWait { sem, amount }) => {
                            let (need, _) = c.ssrc(*amount);
                            let s = &c.sems[sem.index() as usize];
                            let coming: i64 = s.pending.iter().map(|(_, a)| a).sum();
                            format!(
                                "{at}: waits at pc {} (`{text}`) for {sem} to reach {}; it holds {} and {} more is scheduled to arrive",
                                c.pc, need, s.value, coming
                            )
                        }
                        _ => format!("{at}: waits at barrier #{} (pc {}, `{text}`)", c.barriers + 1, c.pc),
                    }
                }
            }
        })
        .collect();
    DeadlockReport {
        program: program.name.clone(),
        cores,
    }
}

pub(super) fn collect_stats(chips: &[ChipState], targets: &[Target], start: u64) -> LaunchStats {
    let cores: Vec<CoreStats> = targets
        .iter()
        .map(|t| {
            let c = &chips[t.chip as usize].cores[t.core as usize];
            let mut unit_busy = [0u64; SYNC_UNITS];
            unit_busy.copy_from_slice(&c.t.busy);
            CoreStats {
                chip: t.chip,
                core: t.core,
                end_cycle: c.t.end_time(),
                instructions: c.stats.instructions,
                unit_busy,
                mxu_busy: c.t.mxu.iter().map(|m| m.busy).collect(),
                dma_busy: c.t.dma_busy.clone(),
                flops: c.stats.flops,
                hbm_bytes: c.stats.hbm_bytes,
                ici_bytes: c.stats.ici_bytes,
                mxu_first: c.stats.mxu_first,
                mxu_last: c.stats.mxu_last,
            }
        })
        .collect();
    // The last core's end (each core's end time is computed once: it scans every register).
    let end = cores.iter().map(|c| c.end_cycle).max().unwrap_or(start);
    LaunchStats {
        start_cycle: start,
        end_cycle: end,
        cores,
        represented_by: None,
    }
}
