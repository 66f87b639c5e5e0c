//! Where a launch's remote DMA and remote semaphore signals find another chip's arguments:
//! looked up among the launch's targets, not copied for every launch.

use tpuemu_isa::{Instr, Program};

use super::Target;
use crate::core::ArgVal;

/// Every chip's arguments in a launch (its first target's), for remote DMA and remote
/// semaphore signals.
#[derive(Clone, Copy)]
pub(crate) struct Peers<'a> {
    pub targets: &'a [Target],
    /// The first target of each chip (`u32::MAX`: none), when the program reaches other
    /// chips; empty otherwise (a lookup then scans the targets).
    pub first: &'a [u32],
}

impl<'a> Peers<'a> {
    /// The arguments of `chip`, or `None` when it is not part of the launch.
    pub fn get(&self, chip: u32) -> Option<&'a [ArgVal]> {
        let i = if self.first.is_empty() {
            self.targets.iter().position(|t| t.chip == chip)?
        } else {
            match self.first.get(chip as usize) {
                Some(&i) if i != u32::MAX => i as usize,
                _ => return None,
            }
        };
        Some(&self.targets[i].args)
    }
}

/// The index [`Peers`] looks chips up in: every chip's first target, built only when
/// `program` signals or writes another chip (an empty list, no allocation, otherwise).
pub(crate) fn peer_index(targets: &[Target], chips: usize, program: &Program) -> Vec<u32> {
    let remote = program.instrs.iter().any(|i| {
        matches!(
            i,
            Instr::Dma {
                remote: Some(_),
                ..
            } | Instr::SemSignal { chip: Some(_), .. }
        )
    });
    if !remote {
        return Vec::new();
    }
    let mut first = vec![u32::MAX; chips];
    for (i, t) in targets.iter().enumerate() {
        let f = &mut first[t.chip as usize];
        if *f == u32::MAX {
            *f = i as u32;
        }
    }
    first
}
