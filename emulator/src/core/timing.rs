//! The timing state of a core: front end, register scoreboard, unit occupancy, matrix-unit
//! pipelines, DMA engines, and the memory ranges that asynchronous work is still writing.
//!
//! All times are absolute cycles of the chip's clock.

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

/// DMAs in flight up to which their bounds are recomputed whenever one finishes.
const HULL_EXACT: usize = 16;

/// Whether `b_rows` rows of `b_w` bytes from `b_lo`, `a.stride` apart, meet the rows of `a`.
/// Row j of b starts at `a.lo + d + j*S`; rows i and j meet iff `t = j - i` has
/// `d + t*S < a.w` and `d + t*S + b.w > 0`.
#[inline(always)]
fn rows_meet(a: &Range, b_lo: u64, b_w: u64, b_rows: u64) -> bool {
    let s = a.stride as i64;
    let d = b_lo as i64 - a.lo as i64;
    let (wa, wb) = (a.row_bytes as i64, b_w as i64);
    // Floor division; a shift when the stride is a power of two (tiles' rows).
    let (t_lo, t_hi) = if s.count_ones() == 1 {
        let sh = s.trailing_zeros();
        (((-wb - d) >> sh) + 1, (wa - d - 1) >> sh)
    } else {
        ((-wb - d).div_euclid(s) + 1, (wa - d - 1).div_euclid(s))
    };
    t_lo.max(-(a.rows as i64 - 1)) <= t_hi.min(b_rows as i64 - 1)
}

/// Entries in flight below which expired ones behind live ones are never swept.
const MIN_RETAIN: usize = 48;

/// Bytes of a memory: `rows` runs of `row_bytes`, `stride` apart, starting at `lo`; `hi` is one
/// past the last byte. A plain range is one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub mem: MemKey,
    pub lo: u64,
    pub hi: u64,
    rows: u64,
    row_bytes: u64,
    stride: u64,
}

impl Range {
    /// The contiguous bytes `[lo, hi)`.
    pub fn span(mem: MemKey, lo: u64, hi: u64) -> Self {
        Range {
            mem,
            lo,
            hi,
            rows: 1,
            row_bytes: hi - lo,
            stride: hi - lo,
        }
    }

    /// `rows` runs of `row_bytes` starting at `lo`, `stride` apart.
    pub fn rows(mem: MemKey, lo: u64, rows: u64, row_bytes: u64, stride: u64) -> Self {
        let hi = lo
            + if rows == 0 {
                0
            } else {
                (rows - 1) * stride + row_bytes
            };
        if rows <= 1 || stride <= row_bytes {
            return Self::span(mem, lo, hi);
        }
        Range {
            mem,
            lo,
            hi,
            rows,
            row_bytes,
            stride,
        }
    }

    /// Whether the two ranges' bounds meet (the cheap test every hazard scan makes first).
    #[inline(always)]
    pub fn near(&self, other: &Range) -> bool {
        self.lo < other.hi && other.lo < self.hi && self.mem == other.mem
    }

    /// Whether the two ranges share a byte; returns the bounds of the overlap. Exact for plain
    /// ranges and for row sets with the same stride; otherwise conservative (bounds only).
    pub fn overlap(&self, other: &Range) -> Option<(u64, u64)> {
        self.touches(other)
            .then(|| (self.lo.max(other.lo), self.hi.min(other.hi)))
    }

    /// Whether the two ranges share a byte (exact where [`Range::overlap`] is).
    #[inline(always)]
    pub fn touches(&self, other: &Range) -> bool {
        if !self.near(other) || self.lo >= self.hi || other.lo >= other.hi {
            return false;
        }
        match (self.rows > 1, other.rows > 1) {
            (false, false) => true,
            (true, false) => rows_meet(self, other.lo, other.row_bytes, 1),
            (false, true) => rows_meet(other, self.lo, self.row_bytes, 1),
            (true, true) if self.stride == other.stride => {
                rows_meet(self, other.lo, other.row_bytes, other.rows)
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_pops_compacts_and_retains_like_a_queue() {
        let mut f = Fifo::default();
        let mut model = std::collections::VecDeque::new();
        for i in 0..200u32 {
            f.push_back(i);
            model.push_back(i);
            if i % 3 != 0 {
                f.pop_front();
                model.pop_front();
            }
            if i % 50 == 49 {
                f.retain(|x| x % 2 == 0);
                model.retain(|x| x % 2 == 0);
            }
            assert_eq!(f.len(), model.len());
            assert_eq!(f.front(), model.front());
            assert!(f.iter().eq(model.iter()));
        }
        while !f.is_empty() {
            f.pop_front();
        }
        f.pop_front();
        assert_eq!(f.front(), None);
    }

    /// The bytes of a range, one by one.
    fn bytes(r: &Range) -> std::collections::HashSet<u64> {
        (0..r.rows.max(1))
            .flat_map(|i| {
                let start = r.lo + i * r.stride;
                start..(start + r.row_bytes).min(r.hi)
            })
            .collect()
    }

    #[test]
    fn touches_agrees_with_the_bytes_for_equal_strides_and_spans() {
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let v = MemKey::Vmem;
        for _ in 0..4000 {
            // Power-of-two and other strides, rows wider or narrower than half the stride.
            let stride = if next(2) == 0 {
                1 << (3 + next(6))
            } else {
                24 + next(200)
            };
            let make = |lo: u64, rows: u64, w: u64| {
                if rows <= 1 {
                    Range::span(v, lo, lo + w)
                } else {
                    Range::rows(v, lo, rows, w.min(stride), stride)
                }
            };
            let a = make(next(2000), next(6), 1 + next(stride));
            let b = make(next(2000), next(6), 1 + next(stride));
            let exact = a.rows <= 1 || b.rows <= 1 || a.stride == b.stride;
            let truth = !bytes(&a).is_disjoint(&bytes(&b));
            if exact {
                assert_eq!(a.touches(&b), truth, "{a:?} {b:?}");
                assert_eq!(b.touches(&a), truth, "{a:?} {b:?}");
            } else {
                assert!(a.touches(&b) || !truth, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn strided_ranges_overlap_exactly() {
        let v = MemKey::Vmem;
        // Two column blocks of a 1024-byte-pitch tile: disjoint.
        let a = Range::rows(v, 0, 100, 512, 1024);
        let b = Range::rows(v, 512, 100, 512, 1024);
        assert_eq!(a.overlap(&b), None);
        assert!(Range::rows(v, 256, 100, 512, 1024).overlap(&a).is_some());
        // A plain range in the gap between rows, and one hitting a row.
        assert_eq!(a.overlap(&Range::span(v, 600, 1000)), None);
        assert!(a.overlap(&Range::span(v, 1000, 1030)).is_some());
        // Past the last row.
        assert_eq!(a.overlap(&Range::span(v, 99 * 1024 + 512, 200_000)), None);
        // Different strides fall back to bounds.
        assert!(a.overlap(&Range::rows(v, 512, 10, 8, 2048)).is_some());
        assert_eq!(a.overlap(&Range::span(MemKey::Smem, 0, 10)), None);
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
    /// Start cycles of the commands issued, for the command queue depth.
    pub queue: Fifo<u64>,
}

/// Where a list's ranges lie: the bounds of its VMEM ranges, and whether it holds any range of
/// another memory. Kept since the list was last empty or swept (so it may be wider than what is
/// still live, never narrower): an access outside it skips the whole list.
#[derive(Clone, Copy, Debug)]
struct Hull {
    lo: u64,
    hi: u64,
    others: bool,
}

impl Default for Hull {
    fn default() -> Self {
        Hull {
            lo: u64::MAX,
            hi: 0,
            others: false,
        }
    }
}

impl Hull {
    #[inline]
    fn add(&mut self, r: &Range) {
        if r.lo >= r.hi {
            return;
        }
        if r.mem == MemKey::Vmem {
            self.lo = self.lo.min(r.lo);
            self.hi = self.hi.max(r.hi);
        } else {
            self.others = true;
        }
    }

    /// Whether a range of the list may share a byte with `r`.
    #[inline(always)]
    fn may_touch(&self, r: &Range) -> bool {
        if r.mem == MemKey::Vmem {
            r.lo < self.hi && self.lo < r.hi
        } else {
            self.others
        }
    }

    fn of<'a>(ranges: impl Iterator<Item = &'a Range>) -> Self {
        let mut h = Hull::default();
        for r in ranges {
            h.add(r);
        }
        h
    }
}

/// A first-in first-out list over one vector: pushes at the back, pops at the front by moving
/// a start index (compacted when it has passed half the vector), and iteration over one slice.
/// The hazard lists are scanned for every memory access: one contiguous slice scans fastest.
#[derive(Clone, Debug)]
pub(crate) struct Fifo<T> {
    items: Vec<T>,
    head: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            items: Vec::new(),
            head: 0,
        }
    }
}

impl<T> Fifo<T> {
    #[inline(always)]
    pub fn push_back(&mut self, x: T) {
        self.items.push(x);
    }

    #[inline(always)]
    pub fn front(&self) -> Option<&T> {
        self.items.get(self.head)
    }

    #[inline(always)]
    pub fn front_mut(&mut self) -> Option<&mut T> {
        self.items.get_mut(self.head)
    }

    /// Takes the front out (a copy: the slot is reclaimed with the others).
    #[inline]
    pub fn take_front(&mut self) -> Option<T>
    where
        T: Copy,
    {
        let x = self.front().copied();
        self.pop_front();
        x
    }

    #[inline]
    pub fn pop_front(&mut self) {
        if self.head < self.items.len() {
            self.head += 1;
            if self.head == self.items.len() {
                self.items.clear();
                self.head = 0;
            } else if self.head >= 32 && 2 * self.head >= self.items.len() {
                self.items.drain(..self.head);
                self.head = 0;
            }
        }
    }

    #[inline(always)]
    pub fn as_slice(&self) -> &[T] {
        &self.items[self.head..]
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.items.len() - self.head
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    pub fn retain(&mut self, f: impl FnMut(&T) -> bool) {
        self.items.drain(..self.head);
        self.head = 0;
        self.items.retain(f);
    }
}

impl<'a, T> IntoIterator for &'a Fifo<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

/// Timing state of one core.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    /// The cycle at which the next instruction can issue.
    pub front: u64,
    pub sreg: [u64; NUM_SREGS as usize],
    pub vreg: [u64; NUM_VREGS as usize],
    pub mreg: [u64; NUM_MREGS as usize],
    /// Per unit, per slot (two for the scalar and vector ALUs): when it is free.
    pub unit_free: [[u64; 2]; SYNC_UNITS],
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
    pub pending_writes: Fifo<(Range, u64)>,
    /// VMEM ranges the matrix units are still reading, until the given cycle: writers wait.
    pub pending_reads: Fifo<(Range, u64)>,
    /// DMAs in flight.
    pub inflight: Fifo<Inflight>,
    /// No entry at the front of a list ends before this cycle (pruning is skipped until then).
    prune_at: u64,
    /// Entries (all three lists) at which the next full pass runs: twice what the last one
    /// left, so that full passes cost O(1) per entry however many stay in flight.
    retain_at: usize,
    /// Where the ranges of `pending_writes`, `pending_reads` and the DMAs' destinations and
    /// sources lie.
    hull_writes: Hull,
    hull_reads: Hull,
    hull_dma_dst: Hull,
    hull_dma_src: Hull,
    /// Start cycles of the DMAs issued, for the DMA queue depth.
    pub dma_queue: Fifo<u64>,
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
            unit_free: [[t0; 2]; SYNC_UNITS],
            busy: [0; SYNC_UNITS],
            slots: {
                let mut s = [1u8; SYNC_UNITS];
                s[SyncUnit::Scalar as usize] = preset.costs.scalar_slots.clamp(1, 2) as u8;
                s[SyncUnit::Valu as usize] = preset.costs.valu_slots.clamp(1, 2) as u8;
                s
            },
            bundle_at: u64::MAX,
            bundle_used: [0; SYNC_UNITS],
            mxu: vec![mxu; preset.mxus_per_core as usize],
            dma_free: vec![t0; preset.dma_engines as usize],
            dma_busy: vec![0; preset.dma_engines as usize],
            pending_writes: Fifo::default(),
            pending_reads: Fifo::default(),
            inflight: Fifo::default(),
            prune_at: u64::MAX,
            retain_at: MIN_RETAIN,
            hull_writes: Hull::default(),
            hull_reads: Hull::default(),
            hull_dma_dst: Hull::default(),
            hull_dma_src: Hull::default(),
            dma_queue: Fifo::default(),
            async_end: t0,
        }
    }

    /// Occupies a synchronous unit from the first cycle at or after `ready` when one of its
    /// slots is free and the VLIW bundle of that cycle still has a slot for it; returns the
    /// start cycle. Instructions issue in order: the next one can join the same bundle (if it
    /// goes to a unit with a slot left there and its operands are ready) or a later one.
    #[inline]
    pub fn occupy(&mut self, unit: SyncUnit, ready: u64, occupancy: u32) -> u64 {
        let u = unit as usize;
        // The earlier-free of the unit's (at most two) slots; ties go to the first.
        let k = usize::from(self.slots[u] > 1 && self.unit_free[u][1] < self.unit_free[u][0]);
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
        self.busy[u] += occupancy as u64;
        self.front = start;
        start
    }

    /// The cycle at which everything the core started has finished.
    pub fn end_time(&self) -> u64 {
        let units = self.unit_free.iter().flatten().copied().max().unwrap_or(0);
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

    /// The first cycle at or after `at` by which pending asynchronous writes overlapping `r`
    /// have landed (a hazard: the accessing instruction waits for them).
    #[inline]
    pub fn write_hazard(&self, r: &Range, at: u64) -> u64 {
        let mut t = at;
        if !self.hull_writes.may_touch(r) {
            return t;
        }
        for (w, ready) in &self.pending_writes {
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
        if !self.hull_reads.may_touch(r) {
            return t;
        }
        for (w, ready) in &self.pending_reads {
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
        if !(self.hull_dma_dst.may_touch(r) || (write && self.hull_dma_src.may_touch(r))) {
            return Ok(());
        }
        self.scan_races(r, write, at)
    }

    /// [`Timing::check_race`] past the bounds test: the DMAs in flight one by one.
    #[inline(never)]
    fn scan_races(&self, r: &Range, write: bool, at: u64) -> Result<(), FaultKind> {
        for d in &self.inflight {
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
        while self.pending_writes.front().is_some_and(|(_, t)| *t <= now) {
            self.pending_writes.pop_front();
        }
        while self.pending_reads.front().is_some_and(|(_, t)| *t <= now) {
            self.pending_reads.pop_front();
        }
        let dmas = self.inflight.len();
        while self.inflight.front().is_some_and(|d| d.complete <= now) {
            self.inflight.pop_front();
        }
        if self.inflight.len() != dmas && self.inflight.len() <= HULL_EXACT {
            // Few left: their bounds, exactly (a finished load of the next tile no longer
            // covers the tile being computed on).
            self.hull_dma_dst = Hull::of(self.inflight.iter().map(|d| &d.dst));
            self.hull_dma_src = Hull::of(self.inflight.iter().map(|d| &d.src));
        }
        if self.pending_writes.is_empty() {
            self.hull_writes = Hull::default();
        }
        if self.pending_reads.is_empty() {
            self.hull_reads = Hull::default();
        }
        if self.inflight.is_empty() {
            self.hull_dma_dst = Hull::default();
            self.hull_dma_src = Hull::default();
        }
        // Expired entries behind live ones are harmless (every check skips them); a full pass
        // bounds the lists once they have grown to twice what the last pass left.
        let len = self.pending_writes.len() + self.pending_reads.len() + self.inflight.len();
        if len >= self.retain_at {
            self.pending_writes.retain(|(_, t)| *t > now);
            self.pending_reads.retain(|(_, t)| *t > now);
            self.inflight.retain(|d| d.complete > now);
            self.hull_writes = Hull::of(self.pending_writes.iter().map(|(r, _)| r));
            self.hull_reads = Hull::of(self.pending_reads.iter().map(|(r, _)| r));
            self.hull_dma_dst = Hull::of(self.inflight.iter().map(|d| &d.dst));
            self.hull_dma_src = Hull::of(self.inflight.iter().map(|d| &d.src));
            let left = self.pending_writes.len() + self.pending_reads.len() + self.inflight.len();
            self.retain_at = MIN_RETAIN.max(2 * left);
        }
        // Next time something at a front finishes.
        self.prune_at = self
            .pending_writes
            .front()
            .map(|(_, t)| *t)
            .into_iter()
            .chain(self.pending_reads.front().map(|(_, t)| *t))
            .chain(self.inflight.front().map(|d| d.complete))
            .min()
            .unwrap_or(u64::MAX);
    }

    /// Records an asynchronous write of `r` landing at `ready`.
    pub fn add_pending_write(&mut self, r: Range, ready: u64) {
        self.prune_at = self.prune_at.min(ready);
        self.hull_writes.add(&r);
        self.pending_writes.push_back((r, ready));
    }

    /// Records an asynchronous read of `r` lasting until `ready`.
    pub fn add_pending_read(&mut self, r: Range, ready: u64) {
        self.prune_at = self.prune_at.min(ready);
        self.hull_reads.add(&r);
        self.pending_reads.push_back((r, ready));
    }

    /// Records a DMA in flight.
    pub fn add_inflight(&mut self, d: Inflight) {
        self.prune_at = self.prune_at.min(d.complete);
        self.hull_dma_dst.add(&d.dst);
        self.hull_dma_src.add(&d.src);
        self.inflight.push_back(d);
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
