//! Host-side costs of the timing model: what the host spends to dispatch an operator, launch a
//! kernel, record into a deferred graph, and generate a kernel.
//!
//! The device timeline starts each kernel no earlier than the host submitted it, so when
//! kernels are short the host's dispatch rate is what bounds an eager program — a large part of
//! why deferring and fusing beats launching every operator (TorchTPU reports DeferAndFuse "50%
//! or more" faster than Strict on the same model).
//!
//! | figure | default | why |
//! |---|---|---|
//! | `op_dispatch_ns` | 6 µs | PyTorch eager spends roughly 5–10 µs of CPU per operator on a server core (Python binding, dispatcher, TensorIterator setup) before a kernel is enqueued; 6 µs is the low end, as a tuned C++ dispatch path would reach. |
//! | `launch_ns` | 3 µs | enqueueing an already compiled executable with its buffers (PJRT-style execute) takes a few µs. |
//! | `record_ns` | 1.5 µs | DeferAndFuse records an operator into a graph: the dispatcher runs, but no shape-specialised kernel lookup or launch. |
//! | `flush_ns` | 10 µs | a flush partitions the graph and looks fused kernels up by pattern. |
//! | `compile_ns` | 200 µs | generating and loading a new kernel (a cache miss); steady-state iterations hit the cache. |
//!
//! All figures are overridable ([`HostCosts`] is plain data) so that users can study other
//! host speeds.

/// Host-side costs, in nanoseconds of simulated host time.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostCosts {
    /// Per operator call in Strict and Debug mode.
    pub op_dispatch_ns: f64,
    /// Per kernel launched.
    pub launch_ns: f64,
    /// Per operator recorded in DeferAndFuse mode.
    pub record_ns: f64,
    /// Per flush of the deferred graph.
    pub flush_ns: f64,
    /// Per kernel generated (cache miss).
    pub compile_ns: f64,
}

impl Default for HostCosts {
    fn default() -> Self {
        HostCosts {
            op_dispatch_ns: 6000.0,
            launch_ns: 3000.0,
            record_ns: 1500.0,
            flush_ns: 10_000.0,
            compile_ns: 200_000.0,
        }
    }
}

/// How operators execute.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    /// Each operator's kernels launch as it is called; the host does not wait.
    Strict,
    /// Each operator waits for its kernels; faults are reported at the operator.
    Debug,
    /// Operators are recorded and run, fused, at the next synchronisation point.
    DeferAndFuse,
}

impl Mode {
    /// The mode the environment asks for: `TORCH_TPU_DEFER_AND_FUSE=1` (or
    /// `TPU_DEFER_AND_FUSE=1`), `TORCH_TPU_LAUNCH_BLOCKING=1` (or `TPU_LAUNCH_BLOCKING=1`),
    /// else Strict.
    pub fn from_env() -> Mode {
        let on =
            |k: &str| std::env::var(k).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        if on("TORCH_TPU_DEFER_AND_FUSE") || on("TPU_DEFER_AND_FUSE") {
            Mode::DeferAndFuse
        } else if on("TORCH_TPU_LAUNCH_BLOCKING") || on("TPU_LAUNCH_BLOCKING") {
            Mode::Debug
        } else {
            Mode::Strict
        }
    }

    /// Lower-case name (`strict`, `debug`, `defer`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Debug => "debug",
            Mode::DeferAndFuse => "defer",
        }
    }
}

pub use crate::ir::MatmulPrecision;
