//! Architectural state of a TensorCore: registers, local memories, matrix units, semaphores.

use tpuemu_isa::reg::{NUM_MREGS, NUM_SEMS, NUM_SREGS, NUM_VREGS, VREG_ELEMS};

use super::deferred::Vmem;
use super::mxu_values::{MxuBuffers, MxuState};
use super::timing::Timing;
use crate::fault::FaultKind;
use crate::memory::LocalMem;
use crate::preset::ChipPreset;

/// A vector register's 1024 lanes (sublane-major).
pub(crate) type VregData = [u32; VREG_ELEMS];
/// A mask register's 1024 bits.
pub(crate) type MaskData = [bool; VREG_ELEMS];

/// A semaphore: its value now, and increments that arrive later (cycle, amount), sorted by
/// cycle.
#[derive(Debug, Default, Clone)]
pub(crate) struct Semaphore {
    pub value: i64,
    pub pending: Vec<(u64, i64)>,
}

impl Semaphore {
    /// Schedules `amount` to be added at cycle `at`.
    pub fn add_at(&mut self, at: u64, amount: i64) {
        let pos = self.pending.partition_point(|(t, _)| *t <= at);
        self.pending.insert(pos, (at, amount));
    }

    /// The earliest cycle at or after `t` at which the value reaches `need`, counting the known
    /// increments; `None` if they are not enough.
    pub fn ready_at(&self, t: u64, need: i64) -> Option<u64> {
        let mut v = self.value;
        if v >= need {
            return Some(t);
        }
        for (at, amount) in &self.pending {
            v += amount;
            if v >= need {
                return Some((*at).max(t));
            }
        }
        None
    }

    /// Applies every increment up to cycle `t`.
    pub fn settle(&mut self, t: u64) {
        let n = self.pending.partition_point(|(at, _)| *at <= t);
        for (_, amount) in self.pending.drain(..n) {
            self.value += amount;
        }
    }
}

/// Counters kept for every launch.
#[derive(Debug, Default, Clone)]
pub(crate) struct CoreStats {
    pub instructions: u64,
    /// What the run limit counts (see [`crate::limits`]).
    pub work: u64,
    pub flops: u64,
    pub hbm_bytes: u64,
    pub ici_bytes: u64,
    pub mxu_first: Option<u64>,
    pub mxu_last: u64,
}

// The dirty masks hold one bit per register.
const _: () = assert!(NUM_VREGS <= 64 && NUM_MREGS <= 16);

/// A TensorCore.
pub(crate) struct Core {
    pub sregs: [u32; NUM_SREGS as usize],
    /// Registers one by one, so that a result computed aside takes a register's place without
    /// a copy.
    pub vregs: Vec<Box<VregData>>,
    /// Boxed for the same reason: a computed mask is swapped into place.
    #[allow(clippy::vec_box)]
    pub mregs: Vec<Box<MaskData>>,
    pub vmem: Vmem,
    pub smem: LocalMem,
    pub mxus: Vec<MxuState>,
    /// Buffers the matrix units' values pass through, kept from launch to launch.
    pub mxu_bufs: MxuBuffers,
    pub sems: Vec<Semaphore>,
    pub pc: u32,
    /// Open profiling regions: (marker index, start cycle).
    pub markers: Vec<(u16, u64)>,
    /// Barriers this core has passed in the current launch.
    pub barriers: u32,
    /// When this core arrived at the barrier it is blocked on.
    pub barrier_arrival: Option<u64>,
    /// Set by the launcher when the barrier this core waits at opens.
    pub barrier_release: Option<u64>,
    pub t: Timing,
    pub stats: CoreStats,
    /// The vector registers written since the last reset, one bit each (a reset zeroes only
    /// those: a short kernel touches a few of 64 four-KiB registers).
    pub vregs_dirty: u64,
    /// The mask registers written since the last reset, one bit each.
    pub mregs_dirty: u16,
    /// The spare register results are computed into before they take the destination's place.
    pub vtmp: Option<Box<VregData>>,
    /// The spare mask register.
    pub mtmp: Option<Box<MaskData>>,
    /// A buffer for DMAs that copy within one memory.
    pub dma_buf: Vec<u8>,
}

impl Core {
    /// A core of `preset` with empty state.
    pub fn new(preset: &ChipPreset) -> Self {
        Core {
            sregs: [0; NUM_SREGS as usize],
            vregs: (0..NUM_VREGS)
                .map(|_| Box::new([0u32; VREG_ELEMS]))
                .collect(),
            mregs: (0..NUM_MREGS)
                .map(|_| Box::new([false; VREG_ELEMS]))
                .collect(),
            vmem: Vmem::new(preset.vmem_bytes),
            smem: LocalMem::new("SMEM", preset.smem_bytes),
            mxus: (0..preset.mxus_per_core)
                .map(|_| MxuState::default())
                .collect(),
            mxu_bufs: MxuBuffers::default(),
            sems: vec![Semaphore::default(); NUM_SEMS as usize],
            pc: 0,
            markers: Vec::new(),
            barriers: 0,
            barrier_arrival: None,
            barrier_release: None,
            t: Timing::new(preset, 0),
            stats: CoreStats::default(),
            vregs_dirty: 0,
            mregs_dirty: 0,
            vtmp: None,
            mtmp: None,
            dma_buf: Vec::new(),
        }
    }

    /// Prepares for a launch starting at cycle `start`: registers, semaphores, matrix units and
    /// timing are reset; VMEM keeps its contents, as on hardware.
    pub fn reset_for_launch(&mut self, preset: &ChipPreset, start: u64) {
        self.sregs = [0; NUM_SREGS as usize];
        let mut dirty = std::mem::take(&mut self.vregs_dirty);
        while dirty != 0 {
            self.vregs[dirty.trailing_zeros() as usize].fill(0);
            dirty &= dirty - 1;
        }
        let mut dirty = std::mem::take(&mut self.mregs_dirty);
        while dirty != 0 {
            self.mregs[dirty.trailing_zeros() as usize].fill(false);
            dirty &= dirty - 1;
        }
        for x in &mut self.mxus {
            x.reset(&mut self.mxu_bufs);
        }
        self.mxu_bufs.forget_lhs();
        for s in &mut self.sems {
            s.value = 0;
            s.pending.clear();
        }
        self.pc = 0;
        self.markers.clear();
        self.barriers = 0;
        self.barrier_arrival = None;
        self.barrier_release = None;
        self.t.reset(preset, start);
        self.stats = CoreStats::default();
    }

    /// Reads a scalar register (`s0` is zero).
    #[inline]
    pub fn s(&self, r: tpuemu_isa::SReg) -> u32 {
        self.sregs[r.index() as usize]
    }

    /// Writes a scalar register (writes to `s0` are dropped).
    #[inline]
    pub fn set_s(&mut self, r: tpuemu_isa::SReg, v: u32) {
        if r.index() != 0 {
            self.sregs[r.index() as usize] = v;
        }
    }

    /// The first semaphore left with a count at exit, as a fault.
    pub fn leftover_semaphore(&self) -> Option<FaultKind> {
        self.sems.iter().enumerate().find_map(|(i, s)| {
            let pending: i64 = s.pending.iter().map(|(_, a)| a).sum();
            (s.value != 0 || pending != 0).then(|| FaultKind::SemaphoreLeft {
                sem: format!("sem{i}"),
                value: s.value,
                pending: if pending != 0 {
                    format!(" with {pending} more still arriving")
                } else {
                    String::new()
                },
            })
        })
    }
}
