//! Architectural faults: what can go wrong inside an emulated program.
//!
//! A fault is a value, never a host panic. The executor returns a [`FaultKind`]; the device
//! wraps it with the chip, core, pc and instruction text into a
//! [`tpuemu_isa::DeviceError::Fault`].

/// Why an instruction faulted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultKind {
    /// An access outside a memory region.
    #[error(
        "out-of-bounds {access} of {region}: bytes [{start}, {end}) but the region has {size} bytes"
    )]
    OutOfBounds {
        /// `read` or `write`.
        access: &'static str,
        /// `VMEM`, `SMEM`, `HBM argument a2 (buffer 7)`.
        region: String,
        /// First byte touched (may be negative).
        start: i64,
        /// One past the last byte touched.
        end: i64,
        /// Region size.
        size: u64,
    },
    /// An address not aligned to the element size.
    #[error("misaligned {region} access: address {addr} is not a multiple of {align}")]
    Misaligned {
        /// Region.
        region: &'static str,
        /// Address.
        addr: i64,
        /// Required alignment.
        align: u32,
    },
    /// The instruction cannot run on this chip or with these operands.
    #[error("invalid instruction: {0}")]
    Invalid(String),
    /// Scalar division by zero.
    #[error("scalar division by zero")]
    DivideByZero,
    /// `mxu.pop` asked for more rows than the matrix unit holds.
    #[error("{mxu} result queue underflow: popping {asked} rows but {available} are queued")]
    MxuUnderflow {
        /// Matrix unit.
        mxu: String,
        /// Rows asked.
        asked: u32,
        /// Rows queued.
        available: u64,
    },
    /// Two DMAs, or a DMA and a vector access, touch overlapping memory at the same time.
    #[error("race on {region} bytes [{start}, {end}): {what}")]
    Race {
        /// Region.
        region: String,
        /// First byte of the overlap.
        start: u64,
        /// One past the last byte of the overlap.
        end: u64,
        /// The two parties.
        what: String,
    },
    /// The launch ran past a run limit (see [`crate::limits`]): the program may never halt.
    #[error(
        "run limit reached: more than {limit} {what} in this launch (raise it with {flag} if the program is meant to run this long)"
    )]
    RunLimit {
        /// What is counted: units of work or cycles.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The command-line flag that sets it.
        flag: &'static str,
    },
    /// The run was stopped from outside (Ctrl-C; see [`crate::interrupt`]).
    #[error("interrupted (Ctrl-C)")]
    Interrupted,
    /// A semaphore still holds a count when the program ends.
    #[error(
        "{sem} holds {value} at exit{pending} (every DMA must be waited for, every signal consumed)"
    )]
    SemaphoreLeft {
        /// Semaphore.
        sem: String,
        /// Its value.
        value: i64,
        /// Note about increments still in flight.
        pending: String,
    },
}
