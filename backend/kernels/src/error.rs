//! Errors of the backend, in words a PyTorch user recognises.

use tpuemu_isa::DeviceError;

/// Everything a backend call can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TpuError {
    /// Shapes that do not broadcast or do not match.
    #[error("{0}")]
    ShapeMismatch(String),
    /// Dtypes that cannot be combined.
    #[error("{0}")]
    DtypeMismatch(String),
    /// Tensors on different devices or runtimes.
    #[error("{0}")]
    DeviceMismatch(String),
    /// A dimension index out of range.
    #[error("IndexError: {0}")]
    BadDim(String),
    /// An index value out of range.
    #[error("IndexError: {0}")]
    IndexOutOfRange(String),
    /// Arguments of the wrong kind or value.
    #[error("{0}")]
    BadArgs(String),
    /// The operator is not registered.
    #[error(
        "NotImplementedError: Could not run '{0}' with arguments from the 'TPU' backend: the operator is not registered"
    )]
    UnknownOp(String),
    /// Registered, but not for these inputs.
    #[error("NotImplementedError: {0}")]
    Unsupported(String),
    /// A value was needed (read back, or an output shape depends on values) on a runtime whose
    /// tensors have none ([`crate::Runtime::meta`], [`crate::Runtime::shapes`]).
    #[error("NotImplementedError: {0}")]
    NeedsValues(String),
    /// An operator's error, tagged with the operator and its input shapes.
    #[error("{op}: {message}")]
    InOp {
        /// The overload (`aten::mm`).
        op: String,
        /// The message.
        message: String,
    },
    /// The kernel generator has no kernel for an operator's (or a fused group's) node: it
    /// needs more registers or on-chip memory than the core has, or a case the generator does
    /// not handle. Raised before anything is launched.
    #[error("{op}: {message}")]
    NoKernel {
        /// The overload, or `fused[..]` for a group.
        op: String,
        /// The generator's message.
        message: String,
    },
    /// A device fault, reported at the operator that caused it (Debug mode) or at the next
    /// synchronisation (Strict mode).
    #[error("RuntimeError: TPU kernel fault in {op} (inputs {shapes}): {fault}")]
    Fault {
        /// The operator whose kernel faulted (`unknown` if only found at a sync).
        op: String,
        /// Its input shapes.
        shapes: String,
        /// The device's report, with pc and instruction.
        fault: String,
    },
    /// An error whose message is PyTorch's own, word for word (it names the API as PyTorch
    /// does): a `RuntimeError` with nothing put in front.
    #[error("RuntimeError: {0}")]
    Verbatim(String),
    /// A linear-algebra routine failed on its input (a singular or not positive-definite
    /// matrix): PyTorch's `torch.linalg.LinAlgError`.
    #[error("LinAlgError: {0}")]
    LinAlg(String),
    /// Out of device memory.
    #[error("RuntimeError: TPU out of memory. {0}")]
    OutOfMemory(String),
    /// Any other device error.
    #[error("RuntimeError: TPU device error: {0}")]
    Device(String),
    /// The user stopped a run (Ctrl-C): the launch it stopped wrote nothing.
    #[error("KeyboardInterrupt: {0}")]
    Interrupted(String),
}

impl TpuError {
    /// A storage of `asked` bytes that chip `chip`'s HBM cannot hold (`free` of `capacity`
    /// left by the live storages), in the words of PyTorch's CUDA allocator.
    pub fn out_of_memory(chip: u32, asked: u64, free: u64, capacity: u64) -> Self {
        TpuError::OutOfMemory(format!(
            "Tried to allocate {} ({asked} bytes) on chip {chip}, which has a total capacity of {} \
             of which {} ({free} bytes) is free; the rest is held by live tensors.",
            bytes_text(asked),
            bytes_text(capacity),
            bytes_text(free),
        ))
    }
}

/// `bytes` in the largest binary unit that keeps it at 1 or more (`1.50 GiB`).
fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

impl From<DeviceError> for TpuError {
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::OutOfMemory { .. } => TpuError::OutOfMemory(e.to_string()),
            DeviceError::Interrupted { .. } => TpuError::Interrupted(e.to_string()),
            DeviceError::Fault(f) => TpuError::Fault {
                op: "unknown".into(),
                shapes: "?".into(),
                fault: f.to_string(),
            },
            other => TpuError::Device(other.to_string()),
        }
    }
}

/// Why a kernel could not be generated (`kernels` returns it; defined here, the bottom layer,
/// so that the error type names no layer above it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The problem needs more on-chip memory than the core has.
    #[error("kernel does not fit: {0}")]
    TooLarge(String),
    /// The generator does not handle this case.
    #[error("unsupported kernel: {0}")]
    Unsupported(String),
    /// The generated program is malformed (a bug in the generator).
    #[error("kernel generation failed: {0}")]
    Build(#[from] tpuemu_isa::BuildError),
}

impl From<KernelError> for TpuError {
    fn from(e: KernelError) -> Self {
        TpuError::Unsupported(e.to_string())
    }
}

/// `Result` with [`TpuError`].
pub type Result<T, E = TpuError> = std::result::Result<T, E>;
