//! The timing state of a core: front end, register scoreboard, unit occupancy, matrix-unit
//! pipelines, DMA engines, and the memory ranges that asynchronous work is still writing.
//!
//! All times are absolute cycles of the chip's clock.

use tpuemu_isa::Unit;
use tpuemu_isa::reg::{NUM_MREGS, NUM_SREGS, NUM_VREGS};

use super::fifo::Fifo;
use super::pending::{Entry, Pending};
pub(crate) use super::range::{MemKey, Range};
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

/// Most slots one synchronous unit can have: two vector ALU slots in each of at most four
/// vector units (`costs.vector_units`).
pub(crate) const MAX_SLOTS: usize = 8;

impl SyncUnit {
    /// The synchronous unit that issues an instruction of `unit` (the instruction set's table,
    /// [`tpuemu_isa::Instr::unit`]): matrix-unit, DMA and synchronisation instructions issue
    /// from the scalar slot.
    #[inline]
    pub fn of(unit: Unit) -> SyncUnit {
        match unit {
            Unit::Valu => SyncUnit::Valu,
            Unit::VLoad => SyncUnit::VLoad,
            Unit::VStore => SyncUnit::VStore,
            Unit::Xlu => SyncUnit::Xlu,
            Unit::Eup => SyncUnit::Eup,
            Unit::Scalar | Unit::Mxu(_) | Unit::Dma | Unit::Sync | Unit::Marker => SyncUnit::Scalar,
        }
    }
}

/// DMAs in flight up to which their bounds are recomputed whenever one finishes.
const HULL_EXACT: usize = 16;

/// Entries in flight below which expired ones behind live ones are never swept.
const MIN_RETAIN: usize = 48;

/// A DMA still moving data: what it reads and writes, until when.
#[derive(Clone, Debug)]
pub(crate) struct Inflight {
    pub pc: u32,
    pub src: Range,
    pub dst: Range,
    pub complete: u64,
}

/// A DMA matters until it completes; checks look at its destination, writes also at its source.
impl Entry for Inflight {
    fn ends(&self) -> u64 {
        self.complete
    }

    fn main(&self) -> &Range {
        &self.dst
    }

    fn second(&self) -> Option<&Range> {
        Some(&self.src)
    }
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
    /// Start cycles of the commands issued, for the command queue depth.
    pub queue: Fifo<u64>,
}

/// Timing state of one core.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    /// The cycle at which the next instruction can issue.
    pub front: u64,
    pub sreg: [u64; NUM_SREGS as usize],
    pub vreg: [u64; NUM_VREGS as usize],
    pub mreg: [u64; NUM_MREGS as usize],
    /// Per unit, per slot (two for the scalar and vector ALUs, times `costs.vector_units`
    /// for the vector units): when it is free. Slots beyond a unit's count stay at the start.
    pub unit_free: [[u64; MAX_SLOTS]; SYNC_UNITS],
    pub busy: [u64; SYNC_UNITS],
    /// Slots per unit in a bundle.
    slots: [u8; SYNC_UNITS],
    /// The cycle of the bundle being filled, and the slots it has used per unit.
    bundle_at: u64,
    bundle_used: [u8; SYNC_UNITS],
    pub mxu: Vec<MxuTiming>,
    pub dma_free: Vec<u64>,
    pub dma_busy: Vec<u64>,
    /// VMEM ranges being written by matrix-unit pops, ready at the given cycle.
    pub pending_writes: Pending<(Range, u64)>,
    /// VMEM ranges the matrix units are still reading, until the given cycle: writers wait.
    pub pending_reads: Pending<(Range, u64)>,
    /// DMAs in flight.
    pub inflight: Pending<Inflight>,
    /// No entry at the front of a list ends before this cycle (pruning is skipped until then).
    prune_at: u64,
    /// Entries (all three lists) at which the next full pass runs: twice what the last one
    /// left, so that full passes cost O(1) per entry however many stay in flight.
    retain_at: usize,
    /// Start cycles of the DMAs issued, for the DMA queue depth.
    pub dma_queue: Fifo<u64>,
    /// Latest completion of any asynchronous work.
    pub async_end: u64,
    /// The latest cycle any unit slot is busy until (slots only move later).
    units_end: u64,
    /// The latest ready cycle ever given a register in this launch.
    regs_end: u64,
    /// A register's ready cycle was moved earlier (a later write ready sooner): `regs_end`
    /// may exceed every register's ready cycle, so [`Timing::end_time`] scans them.
    regs_lowered: bool,
}

/// A register file, for [`Timing::set_ready`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reg {
    S,
    V,
    M,
}

impl Timing {
    pub fn new(preset: &ChipPreset, start: u64) -> Self {
        let mut t = Timing {
            front: 0,
            sreg: [0; NUM_SREGS as usize],
            vreg: [0; NUM_VREGS as usize],
            mreg: [0; NUM_MREGS as usize],
            unit_free: [[0; MAX_SLOTS]; SYNC_UNITS],
            busy: [0; SYNC_UNITS],
            slots: [1; SYNC_UNITS],
            bundle_at: u64::MAX,
            bundle_used: [0; SYNC_UNITS],
            mxu: Vec::new(),
            dma_free: Vec::new(),
            dma_busy: Vec::new(),
            pending_writes: Pending::default(),
            pending_reads: Pending::default(),
            inflight: Pending::default(),
            prune_at: u64::MAX,
            retain_at: MIN_RETAIN,
            dma_queue: Fifo::default(),
            async_end: 0,
            units_end: 0,
            regs_end: 0,
            regs_lowered: false,
        };
        t.reset(preset, start);
        t
    }

    /// The state of a launch starting at cycle `start`, as [`Timing::new`] makes it, in place:
    /// the lists keep their capacity, so a launch allocates none of them.
    pub fn reset(&mut self, preset: &ChipPreset, start: u64) {
        let t0 = start + preset.costs.kernel_launch as u64;
        self.front = t0;
        self.sreg = [t0; NUM_SREGS as usize];
        self.vreg = [t0; NUM_VREGS as usize];
        self.mreg = [t0; NUM_MREGS as usize];
        self.unit_free = [[t0; MAX_SLOTS]; SYNC_UNITS];
        self.busy = [0; SYNC_UNITS];
        self.slots = {
            let copies = preset.costs.vector_units.clamp(1, 4) as u8;
            let mut s = [copies; SYNC_UNITS];
            s[SyncUnit::Scalar as usize] = preset.costs.scalar_slots.clamp(1, 2) as u8;
            s[SyncUnit::Valu as usize] = preset.costs.valu_slots.clamp(1, 2) as u8 * copies;
            s
        };
        self.bundle_at = u64::MAX;
        self.bundle_used = [0; SYNC_UNITS];
        self.mxu
            .resize_with(preset.mxus_per_core as usize, MxuTiming::default);
        for m in &mut self.mxu {
            let mut queue = std::mem::take(&mut m.queue);
            queue.clear();
            *m = MxuTiming {
                bufs: [WeightBuf {
                    ready: t0,
                    free: t0,
                }; 2],
                load_free: t0,
                input_free: t0,
                array_idle: t0,
                pop_free: t0,
                queue,
                ..Default::default()
            };
        }
        let engines = preset.dma_engines as usize;
        self.dma_free.clear();
        self.dma_free.resize(engines, t0);
        self.dma_busy.clear();
        self.dma_busy.resize(engines, 0);
        self.pending_writes.clear();
        self.pending_reads.clear();
        self.inflight.clear();
        self.prune_at = u64::MAX;
        self.retain_at = MIN_RETAIN;
        self.dma_queue.clear();
        self.async_end = t0;
        self.units_end = t0;
        self.regs_end = t0;
        self.regs_lowered = false;
    }

    /// Register `i` of file `file` is ready at cycle `at`.
    #[inline]
    pub fn set_ready(&mut self, file: Reg, i: usize, at: u64) {
        let slot = match file {
            Reg::S => &mut self.sreg[i],
            Reg::V => &mut self.vreg[i],
            Reg::M => &mut self.mreg[i],
        };
        self.regs_lowered |= at < *slot;
        *slot = at;
        self.regs_end = self.regs_end.max(at);
    }

    /// Occupies a synchronous unit from the first cycle at or after `ready` when one of its
    /// slots is free and the VLIW bundle of that cycle still has a slot for it; returns the
    /// start cycle. Instructions issue in order: the next one can join the same bundle (if it
    /// goes to a unit with a slot left there and its operands are ready) or a later one.
    #[inline]
    pub fn occupy(&mut self, unit: SyncUnit, ready: u64, occupancy: u32) -> u64 {
        let u = unit as usize;
        // The earliest-free of the unit's slots; ties go to the first.
        let n = self.slots[u] as usize;
        let k = match n {
            1 => 0,
            2 => usize::from(self.unit_free[u][1] < self.unit_free[u][0]),
            _ => (1..n).fold(0, |k, j| {
                if self.unit_free[u][j] < self.unit_free[u][k] {
                    j
                } else {
                    k
                }
            }),
        };
        let mut start = ready.max(self.front).max(self.unit_free[u][k]);
        if start == self.bundle_at && self.bundle_used[u] >= self.slots[u] {
            start += 1;
        }
        if start != self.bundle_at {
            self.bundle_at = start;
            self.bundle_used = [0; SYNC_UNITS];
        }
        self.bundle_used[u] += 1;
        self.unit_free[u][k] = start + occupancy as u64;
        self.units_end = self.units_end.max(start + occupancy as u64);
        self.busy[u] += occupancy as u64;
        self.front = start;
        start
    }

    /// The cycle at which everything the core started has finished.
    ///
    /// Every unit slot and register starts the launch at its first cycle and a slot only moves
    /// later, so the latest slot is the running maximum kept by [`Timing::occupy`], and the
    /// latest register is the one kept by [`Timing::set_ready`] unless a register was moved
    /// earlier (then the registers are scanned): no scan of the 160 entries on every launch.
    pub fn end_time(&self) -> u64 {
        // One fold per array (each vectorises; a chain of them did not).
        let max = |xs: &[u64]| xs.iter().fold(0, |m, x| m.max(*x));
        let scan = || max(&self.vreg).max(max(&self.sreg)).max(max(&self.mreg));
        let regs = if self.regs_lowered {
            scan()
        } else {
            debug_assert_eq!(
                self.regs_end,
                scan(),
                "the running maximum of the registers"
            );
            self.regs_end
        };
        debug_assert_eq!(
            self.units_end,
            self.unit_free
                .as_flattened()
                .iter()
                .copied()
                .max()
                .unwrap_or(0),
            "the running maximum of the unit slots"
        );
        self.front.max(self.units_end).max(regs).max(self.async_end)
    }

    /// The first cycle at or after `at` by which pending asynchronous writes overlapping `r`
    /// have landed (a hazard: the accessing instruction waits for them).
    #[inline]
    pub fn write_hazard(&self, r: &Range, at: u64) -> u64 {
        let mut t = at;
        if !self.pending_writes.main.may_touch(r) {
            return t;
        }
        for (w, ready) in self.pending_writes.iter() {
            if *ready > t && w.touches(r) {
                t = *ready;
            }
        }
        t
    }

    /// Like [`Timing::write_hazard`], and also after asynchronous reads of `r` (matrix-unit
    /// weight loads and streams): an instruction writing `r` waits for both.
    #[inline]
    pub fn overwrite_hazard(&self, r: &Range, at: u64) -> u64 {
        let mut t = self.write_hazard(r, at);
        if !self.pending_reads.main.may_touch(r) {
            return t;
        }
        for (w, ready) in self.pending_reads.iter() {
            if *ready > t && w.touches(r) {
                t = *ready;
            }
        }
        t
    }

    /// Faults when an access to `r` at cycle `at` overlaps a DMA still in flight: reading or
    /// writing bytes it is still writing, or writing bytes it is still reading.
    #[inline(always)]
    pub fn check_race(&self, r: &Range, write: bool, at: u64) -> Result<(), FaultKind> {
        if !(self.inflight.main.may_touch(r) || (write && self.inflight.second.may_touch(r))) {
            return Ok(());
        }
        self.scan_races(r, write, at)
    }

    /// [`Timing::check_race`] past the bounds test: the DMAs in flight one by one.
    #[inline(never)]
    fn scan_races(&self, r: &Range, write: bool, at: u64) -> Result<(), FaultKind> {
        for d in self.inflight.iter() {
            if d.complete <= at || !(d.dst.near(r) || (write && d.src.near(r))) {
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
        // Nothing at the fronts has finished yet: nothing to do (most instructions).
        if now < self.prune_at {
            return;
        }
        // Entries arrive roughly in completion order: drop the expired ones at the fronts, so
        // that hazard checks scan only what is in flight.
        self.pending_writes.expire(now);
        self.pending_reads.expire(now);
        if self.inflight.expire(now) && self.inflight.len() <= HULL_EXACT {
            // Few left: their bounds, exactly (a finished load of the next tile no longer
            // covers the tile being computed on).
            self.inflight.rebound();
        }
        // Expired entries behind live ones are harmless (every check skips them); a full pass
        // bounds the lists once they have grown to twice what the last pass left.
        let len = self.pending_writes.len() + self.pending_reads.len() + self.inflight.len();
        if len >= self.retain_at {
            self.pending_writes.sweep(now);
            self.pending_reads.sweep(now);
            self.inflight.sweep(now);
            let left = self.pending_writes.len() + self.pending_reads.len() + self.inflight.len();
            self.retain_at = MIN_RETAIN.max(2 * left);
        }
        // Next time something at a front finishes.
        self.prune_at = [
            self.pending_writes.front_end(),
            self.pending_reads.front_end(),
            self.inflight.front_end(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(u64::MAX);
    }

    /// Records an asynchronous write of `r` landing at `ready`.
    pub fn add_pending_write(&mut self, r: Range, ready: u64) {
        self.prune_at = self.prune_at.min(ready);
        self.pending_writes.push((r, ready));
    }

    /// Records an asynchronous read of `r` lasting until `ready`.
    pub fn add_pending_read(&mut self, r: Range, ready: u64) {
        self.prune_at = self.prune_at.min(ready);
        self.pending_reads.push((r, ready));
    }

    /// Records a DMA in flight.
    pub fn add_inflight(&mut self, d: Inflight) {
        self.prune_at = self.prune_at.min(d.complete);
        self.inflight.push(d);
    }

    /// Waits for a free slot in a command queue of `depth` entries holding the start cycles of
    /// the commands issued so far: returns the earliest issue cycle at or after `t`.
    #[inline]
    pub fn queue_slot(queue: &mut Fifo<u64>, depth: u32, t: u64) -> u64 {
        if queue.len() >= depth as usize {
            let oldest = queue.take_front().expect("full queue");
            return t.max(oldest);
        }
        t
    }
}
