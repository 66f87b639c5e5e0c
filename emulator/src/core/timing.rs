//! The timing state of a core: front end, register scoreboard, unit occupancy, matrix-unit
//! pipelines, DMA engines, and the memory ranges that asynchronous work is still writing.
//!
//! All times are absolute cycles of the chip's clock.

use std::collections::VecDeque;

use tpuemu_isa::reg::{NUM_MREGS, NUM_SREGS, NUM_VREGS};

use crate::fault::FaultKind;
use crate::preset::ChipPreset;

/// The synchronous units, indexed into `unit_free` / `busy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncUnit {
    Scalar = 0,
    Valu = 1,
    VLoad = 2,
    VStore = 3,
    Xlu = 4,
    Eup = 5,
}

pub(crate) const SYNC_UNITS: usize = 6;

/// Which memory a range is in, for hazards and races.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemKey {
    Vmem,
    Smem,
    Hbm(u64),
}

/// A byte range of a memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub mem: MemKey,
    pub lo: u64,
    pub hi: u64,
}

impl MemKey {
    /// Region name for faults.
    pub fn name(&self) -> String {
        match self {
            MemKey::Vmem => "VMEM".into(),
            MemKey::Smem => "SMEM".into(),
            MemKey::Hbm(id) => format!("HBM buffer {id}"),
        }
    }
}

impl Range {
    pub fn overlap(&self, other: &Range) -> Option<(u64, u64)> {
        if self.mem != other.mem {
            return None;
        }
        let (lo, hi) = (self.lo.max(other.lo), self.hi.min(other.hi));
        (lo < hi).then_some((lo, hi))
    }
}

/// A DMA still moving data: what it reads and writes, until when.
#[derive(Clone, Debug)]
pub(crate) struct Inflight {
    pub pc: u32,
    pub src: Range,
    pub dst: Range,
    pub complete: u64,
}

/// A weight buffer of a matrix unit.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WeightBuf {
    /// Weights fully loaded.
    pub ready: u64,
    /// The last matmul using these weights has streamed its rows in.
    pub free: u64,
}

/// Pipeline state of one matrix unit.
#[derive(Clone, Debug, Default)]
pub(crate) struct MxuTiming {
    pub bufs: [WeightBuf; 2],
    /// Buffer holding the most recently loaded weights.
    pub cur: usize,
    /// When the weight-load path is free.
    pub load_free: u64,
    /// When the array accepts new rows (pipelined model).
    pub input_free: u64,
    /// When the array is completely idle (SCALE-Sim model).
    pub array_idle: u64,
    /// When the result path is free.
    pub pop_free: u64,
    /// Busy cycles (streaming, plus weight loads in the SCALE-Sim model).
    pub busy: u64,
}

/// Timing state of one core.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    /// The cycle at which the next instruction can issue.
    pub front: u64,
    pub sreg: [u64; NUM_SREGS as usize],
    pub vreg: [u64; NUM_VREGS as usize],
    pub mreg: [u64; NUM_MREGS as usize],
    pub unit_free: [u64; SYNC_UNITS],
    pub busy: [u64; SYNC_UNITS],
    pub mxu: Vec<MxuTiming>,
    pub dma_free: Vec<u64>,
    pub dma_busy: Vec<u64>,
    /// VMEM ranges being written by matrix-unit pops, ready at the given cycle.
    pub pending_writes: VecDeque<(Range, u64)>,
    /// DMAs in flight.
    pub inflight: Vec<Inflight>,
    /// Latest completion of any asynchronous work.
    pub async_end: u64,
}

impl Timing {
    pub fn new(preset: &ChipPreset, start: u64) -> Self {
        let t0 = start + preset.costs.kernel_launch as u64;
        let mxu = MxuTiming {
            bufs: [WeightBuf {
                ready: t0,
                free: t0,
            }; 2],
            load_free: t0,
            input_free: t0,
            array_idle: t0,
            pop_free: t0,
            ..Default::default()
        };
        Timing {
            front: t0,
            sreg: [t0; NUM_SREGS as usize],
            vreg: [t0; NUM_VREGS as usize],
            mreg: [t0; NUM_MREGS as usize],
            unit_free: [t0; SYNC_UNITS],
            busy: [0; SYNC_UNITS],
            mxu: vec![mxu; preset.mxus_per_core as usize],
            dma_free: vec![t0; preset.dma_engines as usize],
            dma_busy: vec![0; preset.dma_engines as usize],
            pending_writes: VecDeque::new(),
            inflight: Vec::new(),
            async_end: t0,
        }
    }

    /// Occupies a synchronous unit from the first cycle at or after `ready` when it is free;
    /// returns the start cycle. The front end moves past it.
    #[inline]
    pub fn occupy(&mut self, unit: SyncUnit, ready: u64, occupancy: u32) -> u64 {
        let u = unit as usize;
        let start = ready.max(self.front).max(self.unit_free[u]);
        self.unit_free[u] = start + occupancy as u64;
        self.busy[u] += occupancy as u64;
        self.front = start + 1;
        start
    }

    /// The cycle at which everything the core started has finished.
    pub fn end_time(&self) -> u64 {
        let units = self.unit_free.iter().copied().max().unwrap_or(0);
        let regs = self
            .vreg
            .iter()
            .chain(&self.sreg)
            .chain(&self.mreg)
            .copied()
            .max()
            .unwrap_or(0);
        self.front.max(units).max(regs).max(self.async_end)
    }

    /// The cycle by which pending asynchronous writes overlapping `r` have landed (a hazard:
    /// the accessing instruction waits for them).
    #[inline]
    pub fn write_hazard(&self, r: &Range) -> u64 {
        let mut t = 0;
        for (w, ready) in &self.pending_writes {
            if w.overlap(r).is_some() {
                t = t.max(*ready);
            }
        }
        t
    }

    /// Faults when an access to `r` at cycle `at` overlaps a DMA still in flight: reading or
    /// writing bytes it is still writing, or writing bytes it is still reading.
    pub fn check_race(&self, r: &Range, write: bool, at: u64) -> Result<(), FaultKind> {
        for d in &self.inflight {
            if d.complete <= at {
                continue;
            }
            let hit = d.dst.overlap(r).map(|o| (o, "writing")).or_else(|| {
                if write {
                    d.src.overlap(r).map(|o| (o, "reading"))
                } else {
                    None
                }
            });
            if let Some(((lo, hi), doing)) = hit {
                return Err(FaultKind::Race {
                    region: r.mem.name(),
                    start: lo,
                    end: hi,
                    what: format!(
                        "{} at cycle {at} while the DMA issued at pc {} is still {doing} them (until cycle {}); wait on its semaphore first",
                        if write { "written" } else { "read" },
                        d.pc,
                        d.complete
                    ),
                });
            }
        }
        Ok(())
    }

    /// Forgets pending writes and DMAs finished by cycle `now`.
    #[inline]
    pub fn prune(&mut self, now: u64) {
        if !self.pending_writes.is_empty() {
            self.pending_writes.retain(|(_, t)| *t > now);
        }
        if !self.inflight.is_empty() {
            self.inflight.retain(|d| d.complete > now);
        }
    }
}
