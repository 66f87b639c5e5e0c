//! Architectural state of a TensorCore: registers, local memories, matrix units, semaphores.

use super::fifo::Fifo;

use tpuemu_isa::ops::MxuFmt;
use tpuemu_isa::reg::{NUM_MREGS, NUM_SEMS, NUM_SREGS, NUM_VREGS, VREG_ELEMS};

use super::timing::Timing;
use crate::fault::FaultKind;
use crate::memory::LocalMem;
use crate::numerics::matmul::PackedWeights;
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

/// Weights held by a matrix unit.
#[derive(Debug, Clone)]
pub(crate) struct Weights {
    pub fmt: MxuFmt,
    pub k: usize,
    pub n: usize,
    /// Row-major values (bf16 values are exact in f32).
    pub raw: Vec<f32>,
    /// Packed bf16 parts: hi, mid, lo (packed on first use).
    pub parts: [Option<PackedWeights>; 3],
}

/// A block of result rows queued in a matrix unit.
#[derive(Debug, Clone)]
pub(crate) struct ResultBlock {
    pub rows: u64,
    pub n: usize,
    /// `rows x n` f32 values (empty when timing only).
    pub data: Vec<f32>,
    /// Rows already popped.
    pub taken: u64,
    /// Cycle at which the rows are out of the array.
    pub ready: u64,
}

/// Functional state of a matrix unit.
#[derive(Debug, Default, Clone)]
pub(crate) struct MxuState {
    pub weights: Option<Weights>,
    pub queue: Fifo<ResultBlock>,
}

impl MxuState {
    pub fn queued_rows(&self) -> u64 {
        self.queue.iter().map(|b| b.rows - b.taken).sum()
    }
}

/// Counters kept for every launch.
#[derive(Debug, Default, Clone)]
pub(crate) struct CoreStats {
    pub instructions: u64,
    pub flops: u64,
    pub hbm_bytes: u64,
    pub ici_bytes: u64,
    pub mxu_first: Option<u64>,
    pub mxu_last: u64,
}

/// A TensorCore.
pub(crate) struct Core {
    pub sregs: [u32; NUM_SREGS as usize],
    pub vregs: Box<[VregData]>,
    pub mregs: Box<[MaskData]>,
    pub vmem: LocalMem,
    pub smem: LocalMem,
    pub mxus: Vec<MxuState>,
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
    /// Vector or mask registers were written since the last reset.
    pub vector_dirty: bool,
    /// A register-sized buffer for results, kept between instructions so that timing-only runs
    /// never clear one.
    pub vtmp: Option<Box<VregData>>,
}

impl Core {
    /// A core of `preset` with empty state.
    pub fn new(preset: &ChipPreset) -> Self {
        Core {
            sregs: [0; NUM_SREGS as usize],
            vregs: vec![[0u32; VREG_ELEMS]; NUM_VREGS as usize].into_boxed_slice(),
            mregs: vec![[false; VREG_ELEMS]; NUM_MREGS as usize].into_boxed_slice(),
            vmem: LocalMem::new("VMEM", preset.vmem_bytes),
            smem: LocalMem::new("SMEM", preset.smem_bytes),
            mxus: vec![MxuState::default(); preset.mxus_per_core as usize],
            sems: vec![Semaphore::default(); NUM_SEMS as usize],
            pc: 0,
            markers: Vec::new(),
            barriers: 0,
            barrier_arrival: None,
            barrier_release: None,
            t: Timing::new(preset, 0),
            stats: CoreStats::default(),
            vector_dirty: false,
            vtmp: None,
        }
    }

    /// Prepares for a launch starting at cycle `start`: registers, semaphores, matrix units and
    /// timing are reset; VMEM keeps its contents, as on hardware.
    pub fn reset_for_launch(&mut self, preset: &ChipPreset, start: u64) {
        self.sregs = [0; NUM_SREGS as usize];
        if self.vector_dirty {
            // Fresh zeroed allocations are lazily mapped: cheaper than clearing.
            self.vregs = vec![[0u32; VREG_ELEMS]; NUM_VREGS as usize].into_boxed_slice();
            self.mregs = vec![[false; VREG_ELEMS]; NUM_MREGS as usize].into_boxed_slice();
            self.vector_dirty = false;
        }
        for x in &mut self.mxus {
            *x = MxuState::default();
        }
        for s in &mut self.sems {
            *s = Semaphore::default();
        }
        self.pc = 0;
        self.markers.clear();
        self.barriers = 0;
        self.barrier_arrival = None;
        self.barrier_release = None;
        self.t = Timing::new(preset, start);
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
