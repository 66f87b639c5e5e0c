//! Host-side costs of the timing model: what the host spends to dispatch an operator, call a
//! view operator, launch a kernel, record into a deferred graph, and generate a kernel.
//!
//! The device timeline starts each kernel no earlier than the host submitted it, so when
//! kernels are short the host's dispatch rate is what bounds an eager program — a large part of
//! why deferring and fusing beats launching every operator (TorchTPU reports DeferAndFuse "50%
//! or more" faster than Strict on the same model).
//!
//! | figure | default | why |
//! |---|---|---|
//! | `op_dispatch_ns` | 6 µs | PyTorch eager's CPU cost per operator before a kernel is enqueued, plus the device backend's own lowering and launch bookkeeping. PyTorch's part: 0.9–1.3 µs per call of a 1-element CPU `add`/`mul`/`relu`/`sum` with torch 2.15 on one thread (`python/benchmarks/host_costs.py`: `timeit` of 20,000 calls, best of 7; an earlier run on a busier machine gave 2.5–3.7 µs). The whole: this project's bridge dispatches and launches an `add` in 7.9 µs of host time, emulation excluded (same benchmark), against 6 µs here plus `launch_ns`. |
//! | `view_ns` | 1 µs | a view operator (`t`, `view`, `permute`, `reshape`, `unsqueeze`, `expand`, `slice`, ...; a `reshape` that must copy adds a `clone`) runs PyTorch's generic view kernels: new sizes and strides, nothing to lower, launch or record, in every mode. Measured in the same run as the operators above: 0.75–1.66 µs per view call on "tpu" tensors through the bridge (median 0.89 µs), as on CPU tensors, against 0.9–1.3 µs for a 1-element CPU operator. |
//! | `launch_ns` | 3 µs | enqueueing an already compiled executable with its buffers (PJRT-style execute) takes a few µs. |
//! | `record_ns` | 6 µs | DeferAndFuse records an operator into a graph: it still goes through Python and the dispatcher. On the bridge (`python/benchmarks/host_costs.py`, a chain of 50 `add`s, median of 200, emulation excluded) recording took 3.3 µs an operator and the flush that fuses the chain, finds its kernel and launches it 4.8 µs more an operator, 8.2 µs together against 7.9 µs for Strict's dispatch and launch: DeferAndFuse's host work per operator is no cheaper than Strict's. So recording is charged what dispatching is (`op_dispatch_ns`); with a flush at `flush_ns` that is kinder to DeferAndFuse than this bridge. |
//! | `flush_ns` | 10 µs | a flush partitions the graph and looks fused kernels up by pattern. This bridge's flushes plan every graph afresh (4.8 µs an operator above); a runtime that keeps the plan of a graph it has seen pays a lookup: 10 µs assumed. |
//! | `compile_ns` | 200 µs | generating and loading a new kernel (a cache miss); steady-state iterations hit the cache. |
//!
//! Tracing a graph for whole-graph compilation charges its operators at the mode's dispatch or
//! view cost, counted as compile time (`Metrics::compile_ns`) like the kernels it generates:
//! both happen once per input signature, not per step.
//!
//! Every figure is overridable: [`HostCosts::set`] by name (`tpuemu bench eager --set
//! host.record_ns=1500`, or a `[host]` table in a chip TOML file), and the bench reports print
//! the figures they ran with, so a claimed gain says how much of it the host model supplies.

/// Host-side costs, in nanoseconds of simulated host time.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostCosts {
    /// Per operator call in Strict and Debug mode.
    pub op_dispatch_ns: f64,
    /// Per view operator call, in every mode.
    #[serde(default = "default_view_ns")]
    pub view_ns: f64,
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
            view_ns: default_view_ns(),
            launch_ns: 3000.0,
            record_ns: 6000.0,
            flush_ns: 10_000.0,
            compile_ns: 200_000.0,
        }
    }
}

fn default_view_ns() -> f64 {
    1000.0
}

/// The fields of [`HostCosts`], as [`HostCosts::set`] names them, with what each one costs.
pub const HOST_COST_FIELDS: &[(&str, &str)] = &[
    (
        "op_dispatch_ns",
        "per operator call in Strict and Debug mode",
    ),
    (
        "view_ns",
        "per view operator call (strides only, no kernel), in every mode",
    ),
    ("launch_ns", "per kernel launched"),
    ("record_ns", "per operator recorded in DeferAndFuse mode"),
    ("flush_ns", "per flush of the deferred graph"),
    ("compile_ns", "per kernel generated (a kernel-cache miss)"),
];

/// The largest host cost accepted: 1,000 s of simulated host time, in ns.
pub const MAX_HOST_COST_NS: f64 = 1e12;

impl HostCosts {
    /// Sets the figure named `field` (`record_ns`, see [`HOST_COST_FIELDS`]) to `ns`, a finite
    /// number of nanoseconds from 0 to [`MAX_HOST_COST_NS`].
    pub fn set(&mut self, field: &str, ns: f64) -> Result<(), String> {
        let slot = match field {
            "op_dispatch_ns" => &mut self.op_dispatch_ns,
            "view_ns" => &mut self.view_ns,
            "launch_ns" => &mut self.launch_ns,
            "record_ns" => &mut self.record_ns,
            "flush_ns" => &mut self.flush_ns,
            "compile_ns" => &mut self.compile_ns,
            _ => {
                let names: Vec<String> = HOST_COST_FIELDS
                    .iter()
                    .map(|(n, _)| format!("host.{n}"))
                    .collect();
                return Err(format!(
                    "unknown host cost `host.{field}`: expected one of {}",
                    names.join(", ")
                ));
            }
        };
        if !ns.is_finite() || !(0.0..=MAX_HOST_COST_NS).contains(&ns) {
            // Short either way: `-5`, `1e30`.
            let shown = if ns.abs() < 1e15 {
                ns.to_string()
            } else {
                format!("{ns:e}")
            };
            return Err(format!(
                "host.{field} = {shown}: expected nanoseconds from 0 to {MAX_HOST_COST_NS:e}"
            ));
        }
        *slot = ns;
        Ok(())
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
