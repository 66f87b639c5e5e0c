//! Folded launches: one chip simulated for all.
//!
//! When every chip runs the same program on the same cores and the caller vouches that each chip's run is a translation of chip 0's (arguments
//! that differ only by the chip's position, sends to the chips at the same offsets), and the
//! launch is timing-only, only chip 0's cores are simulated: a message chip 0 sends to the
//! chip at offset `d` is also the message chip `-d` sends to chip 0, so it books chip 0's
//! links and arrives at chip 0's own receive semaphore. This is exact when no two chips share
//! a link, which holds when every message goes one hop (checked: a longer route stops the
//! folded run, and the launch is simulated in full); each link then carries only its owner's
//! messages, in its owner's program order, so every chip's timeline is chip 0's translated.
//! Two things are not folded: incoming remote writes are not checked for races on the
//! receiver (the bytes a neighbour writes are addressed in its frame), and the trace shows
//! chip 0 only.

use crate::ici::Ici;
use crate::launch::{ChipState, Ending, Io, Outcome, Peers, Scratch, Target, peer_index, simulate};
use crate::limits::RunLimits;
use crate::preset::ChipPreset;
use tpuemu_isa::Program;

/// Runs a timing-only launch of every chip on chip `rep`'s cores alone (see the module docs);
/// `None` when a message went more than one hop (nothing is changed then: simulate it in
/// full). Every chip must be targeted on the same cores.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_folded(
    chips: &mut [ChipState],
    ici: &mut Ici,
    preset: &ChipPreset,
    mesh: &[u32],
    program: &Program,
    targets: &[Target],
    start: u64,
    profiling: bool,
    limits: &RunLimits,
    rep: u32,
    scratch: &mut Scratch,
) -> Option<Outcome> {
    let first = peer_index(targets, chips.len(), program);
    let mine: Vec<Target> = targets
        .iter()
        .filter(|t| t.chip == rep)
        .map(|t| Target {
            chip: t.chip,
            core: t.core,
            args: t.args.clone(),
        })
        .collect();
    let saved_links = ici.clone();
    let saved_hbm = chips[rep as usize].shared.hbm_free;
    let io = Io {
        program,
        preset,
        mesh,
        peers: Peers {
            targets,
            first: &first,
        },
        functional: false,
        profiling,
        limits,
        fold: Some(rep),
    };
    let mut out = simulate(chips, ici, &io, &mine, start, scratch);
    if matches!(out.ending, Ending::Unfoldable) {
        *ici = saved_links;
        chips[rep as usize].shared.hbm_free = saved_hbm;
        return None;
    }
    // Every chip did what `rep` did.
    let hbm_free = chips[rep as usize].shared.hbm_free;
    for c in chips.iter_mut() {
        c.shared.hbm_free = hbm_free;
    }
    ici.retire_before(out.end_cycle);
    ici.copy_links_from(rep);
    let per_core = std::mem::take(&mut out.stats.cores);
    out.stats.cores = targets
        .iter()
        .map(|t| {
            let mut c = per_core
                .iter()
                .find(|c| c.core == t.core)
                .expect("every chip is targeted on the same cores")
                .clone();
            c.chip = t.chip;
            c
        })
        .collect();
    out.stats.represented_by = Some(rep);
    if let Ending::Fault { target, pc, kind } = out.ending {
        let core = mine[target].core;
        let target = targets
            .iter()
            .position(|t| t.chip == rep && t.core == core)
            .expect("the representative is a target");
        out.ending = Ending::Fault { target, pc, kind };
    }
    Some(out)
}
