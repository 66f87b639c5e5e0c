//! The `Device` contract: what the backend may ask of hardware.
//!
//! Every device implements [`Device`] — the emulator now, a driver for real chips in principle.
//! The backend reaches hardware only through this trait, so nothing it does depends on being
//! emulated.
//!
//! Time: a device runs on its own clock. The host tells it when (in host nanoseconds) a launch
//! or transfer was submitted, and the device answers when it completed. An emulator uses these
//! to place work on its simulated timeline (host dispatch cost is part of the model); a real
//! device ignores `submit_ns` and answers wall-clock times.
//!
//! Asynchrony: [`Device::launch`] returns at once with a [`LaunchId`]; a fault in the kernel is
//! reported by [`Device::wait`] or [`Device::synchronize`], not by the launch.

use crate::program::Program;
use crate::trace::TraceEvent;

/// Index of a chip in the device's topology.
pub type ChipId = u32;

/// A buffer in some chip's HBM.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct BufferId(pub u64);

/// A program loaded onto the device.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ProgramId(pub u64);

/// A launched kernel, to wait on.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct LaunchId(pub u64);

/// A TensorCore: a chip and a core on it.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct CoreRef {
    /// Chip index.
    pub chip: ChipId,
    /// Core index on the chip.
    pub core: u32,
}

/// What a compiler needs to know about one TensorCore to tile for it.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct CoreInfo {
    /// VMEM bytes.
    pub vmem_bytes: u64,
    /// SMEM bytes.
    pub smem_bytes: u64,
    /// Vector registers implemented.
    pub vregs: u32,
    /// Matrix units.
    pub mxus: u32,
    /// Rows (K) of each matrix unit's systolic array.
    pub mxu_rows: u32,
    /// Columns (N) of each matrix unit's systolic array.
    pub mxu_cols: u32,
    /// DMA engines.
    pub dma_engines: u32,
    /// Clock in Hz.
    pub clock_hz: f64,
}

/// One chip of the topology.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct ChipInfo {
    /// Index.
    pub id: ChipId,
    /// Coordinates in the mesh, one per axis.
    pub coords: Vec<u32>,
    /// TensorCores.
    pub cores: u32,
    /// HBM capacity in bytes.
    pub hbm_bytes: u64,
    /// HBM bandwidth in bytes per second.
    pub hbm_bytes_per_s: f64,
    /// HBM access latency in ns (from a DMA's issue to its first bytes), for kernel planning.
    #[serde(default)]
    pub hbm_latency_ns: f64,
    /// Peak bf16 FLOP/s of the whole chip.
    pub peak_bf16_flops: f64,
    /// Each core's resources.
    pub core: CoreInfo,
}

/// The shape of the device: its chips and how they are joined.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Topology {
    /// Generation or model name (`v5e`).
    pub generation: String,
    /// Mesh extent along each axis (`[4, 4]` for a 4x4 slice; `[1]` for one chip).
    pub mesh: Vec<u32>,
    /// Whether each axis wraps around (a torus ring).
    pub wraparound: Vec<bool>,
    /// The axis that joins slices over the data-centre network (DCN), on a device of several
    /// slices (the last axis: slice `s` holds the chips whose coordinate on it is `s`).
    #[serde(default)]
    pub dcn_axis: Option<usize>,
    /// The chips, indexed by [`ChipId`].
    pub chips: Vec<ChipInfo>,
}

impl Topology {
    /// Number of chips.
    pub fn num_chips(&self) -> usize {
        self.chips.len()
    }

    /// The chip at mesh coordinates `coords`.
    pub fn chip_at(&self, coords: &[u32]) -> Option<ChipId> {
        self.chips.iter().find(|c| c.coords == coords).map(|c| c.id)
    }
}

/// An argument bound to a program's slot at launch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum KernelArg {
    /// A buffer, which must live on the chip the kernel runs on.
    Buffer(BufferId),
    /// A 32-bit scalar.
    Scalar(u32),
}

/// Where one instance of an SPMD launch runs, and with which arguments.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct LaunchTarget {
    /// The core.
    pub core: CoreRef,
    /// One argument per slot of the program.
    pub args: Vec<KernelArg>,
}

/// A launch: one program started on one or more cores at once (SPMD). Cores of one launch can
/// reach each other with remote DMA, semaphore signals and barriers.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Launch {
    /// The loaded program.
    pub program: ProgramId,
    /// Its instances.
    pub targets: Vec<LaunchTarget>,
    /// Host time of submission, in ns (an emulator starts the kernel no earlier).
    pub submit_ns: f64,
    /// The host operator that caused it (for trace flows), if any.
    pub op_id: Option<u64>,
    /// The fusion group it implements, if any.
    pub group_id: Option<u64>,
}

/// When something ran, on the device's clock, and what it did (the counters a real chip's
/// profiler reads).
#[derive(Clone, Copy, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Completion {
    /// Start time in ns (for `synchronize`, the same as `end_ns`).
    pub start_ns: f64,
    /// Completion time in ns.
    pub end_ns: f64,
    /// What a kernel launch did (zero for transfers and `synchronize`).
    pub counters: Counters,
}

/// Hardware counters of one kernel launch, summed over its cores.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Bytes moved between HBM and on-chip memory by DMA.
    pub hbm_bytes: u64,
    /// Useful matrix-unit FLOPs (2 x M x K x N per product; extra precision passes not counted).
    pub mxu_flops: u64,
    /// Bytes sent over ICI links.
    pub ici_bytes: u64,
}

/// Why an emulated program faulted.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Fault {
    /// Program name.
    pub program: String,
    /// Chip.
    pub chip: ChipId,
    /// Core.
    pub core: u32,
    /// Instruction index.
    pub pc: u32,
    /// The instruction's assembly text.
    pub instr: String,
    /// The innermost profiling region open at the instruction (`mark.begin "name"`), if any:
    /// a compiler names regions after the source that produced them.
    #[serde(default)]
    pub region: Option<String>,
    /// What went wrong.
    pub reason: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "program `{}` faulted on chip {} core {} at pc {} (`{}`)",
            self.program, self.chip, self.core, self.pc, self.instr
        )?;
        if let Some(r) = &self.region {
            write!(f, " in region `{r}`")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// What each waiting core was blocked on when no core could make progress.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct DeadlockReport {
    /// Program name.
    pub program: String,
    /// One line per core of the launch: where it stands.
    pub cores: Vec<String>,
}

impl std::fmt::Display for DeadlockReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "program `{}` can make no progress:", self.program)?;
        for c in &self.cores {
            write!(f, "\n  {c}")?;
        }
        Ok(())
    }
}

/// Errors a device reports.
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
pub enum DeviceError {
    /// Not enough free HBM for an allocation.
    #[error("out of memory on chip {chip}: asked for {asked} bytes, {free} free of {capacity}")]
    OutOfMemory {
        /// Chip.
        chip: ChipId,
        /// Bytes asked for.
        asked: u64,
        /// Bytes free.
        free: u64,
        /// HBM capacity.
        capacity: u64,
    },
    /// The program cannot run on this device.
    #[error("invalid program `{program}`: {reason}")]
    InvalidProgram {
        /// Program name.
        program: String,
        /// Why.
        reason: String,
    },
    /// A launch, read or write named something wrongly (unknown buffer, wrong argument count,
    /// range outside a buffer, unknown chip).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A kernel faulted.
    #[error("{0}")]
    Fault(Box<Fault>),
    /// The launch was stopped from outside before it ended (Ctrl-C): its outputs are not
    /// written.
    #[error("interrupted: program `{program}` was stopped (Ctrl-C)")]
    Interrupted {
        /// Program name.
        program: String,
    },
    /// A kernel could make no progress.
    #[error("deadlock: {0}")]
    Deadlock(Box<DeadlockReport>),
    /// The device is gone.
    #[error("device lost: {0}")]
    Lost(String),
}

/// The hardware contract.
///
/// Methods take `&self`: a device is shared by every tensor that lives on it and synchronises
/// internally.
pub trait Device: Send + Sync {
    /// The chips, their resources and how they are joined.
    fn topology(&self) -> &Topology;

    /// Allocates `bytes` of HBM on `chip`. The contents read as zero until written.
    fn alloc(&self, chip: ChipId, bytes: u64) -> Result<BufferId, DeviceError>;

    /// Frees a buffer. Kernels already launched that use it still see it.
    fn free(&self, buffer: BufferId) -> Result<(), DeviceError>;

    /// Bytes of HBM in use on `chip`.
    fn hbm_in_use(&self, chip: ChipId) -> u64;

    /// Copies host bytes into a buffer, after every launch submitted before. Returns when the
    /// transfer completed on the device clock.
    fn write(
        &self,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError>;

    /// Copies a buffer's bytes to the host, after every launch submitted before has written
    /// them. Faults of those launches are reported here.
    fn read(
        &self,
        buffer: BufferId,
        offset: u64,
        out: &mut [u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError>;

    /// Stores bytes that reached the chip by a path the device does not time, after every
    /// launch submitted before: a collective whose data another engine carried between
    /// processes (the PyTorch bridge's process groups), whose time comes from the interconnect
    /// model instead. The default is [`Device::write`] at time 0.
    fn deliver(&self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.write(buffer, offset, data, 0.0).map(|_| ())
    }

    /// Copies a buffer's bytes out for such a path, untimed, after every launch submitted
    /// before has written them. The default is [`Device::read`] at time 0.
    fn peek(&self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        self.read(buffer, offset, out, 0.0).map(|_| ())
    }

    /// Validates a program for this device and keeps it for launches.
    fn load(&self, program: &Program) -> Result<ProgramId, DeviceError>;

    /// Starts a program on one or more cores. Returns at once; faults are reported by
    /// [`Device::wait`] and [`Device::synchronize`].
    fn launch(&self, launch: &Launch) -> Result<LaunchId, DeviceError>;

    /// Waits for one launch and reports how it ended.
    fn wait(&self, launch: LaunchId) -> Result<Completion, DeviceError>;

    /// Waits for every launch and reports the first fault among those not yet reported.
    fn synchronize(&self) -> Result<Completion, DeviceError>;

    /// Turns recording of trace events on or off.
    fn set_profiling(&self, on: bool);

    /// Takes the trace events recorded so far.
    fn drain_events(&self) -> Vec<TraceEvent>;

    /// Runs programs for their timing only, without computing values (`true`), or with values
    /// (`false`, the default): the base of a backend's meta mode, which times models too large
    /// to hold. A device that always computes values (real hardware) refuses.
    fn set_timing_only(&self, on: bool) -> Result<(), DeviceError> {
        if on {
            Err(DeviceError::InvalidRequest(
                "this device always computes values; it has no timing-only mode".into(),
            ))
        } else {
            Ok(())
        }
    }
}
