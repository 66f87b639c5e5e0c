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
//! | `op_dispatch_ns` | 3.2 µs | what this project's Python bridge spends to dispatch an operator, less its launch: `python/benchmarks/host_costs.py --chain 32` and `--chain 50` (chains of `add`s on `[8, 128]` float32, median of 200 chains, emulation excluded, 2-core machine, 2026-12-05, three runs each) measured Strict's dispatch and launch at 3.4-4.7 µs an operator, median 3.8 µs; `launch_ns` below is the launch's share. Of it, about 1.5 µs is Python and PyTorch's dispatcher and autograd layer, which DeferAndFuse pays too (`bridge_overhead.py`: 1.7-2.3 µs of bridge per operator against 0.95-1.1 µs for the whole of a PyTorch CPU `add`). (The same benchmark gave 7.9 µs before the lowering memo and plan cache of `runtime::exec` and `fusion::plans`, when this figure was 6 µs, and 4.6 µs before the global allocator (mimalloc) and the formatting-free operator tags (`ir::tag`), when it was 3.6 µs.) |
//! | `view_ns` | 1 µs | a view operator (`t`, `view`, `permute`, `reshape`, `unsqueeze`, `expand`, `slice`, ...; a `reshape` that must copy adds a `clone`) runs PyTorch's generic view kernels: new sizes and strides, nothing to lower, launch or record, in every mode. Measured by the same script: 0.67-1.36 µs per view call on "tpu" tensors through the bridge, as on CPU tensors (0.68-1.38 µs). |
//! | `launch_ns` | 0.6 µs | the launch's share of the 3.8 µs above: finding the node's kernel in the lowering memo, binding its buffers and enqueueing it. `perf record --call-graph dwarf` of `cargo bench -p tpuemu-backend --bench host_path` (Strict, 5.97 µs an operator there): `Runtime::execute` outside `Device::launch` is 10.7% of it, 0.64 µs. |
//! | `record_ns` | 2.2 µs | DeferAndFuse records an operator into a graph; it still goes through Python, the dispatcher and the bridge (about 1.5 µs of it, as in Strict): 2.14-2.57 µs an operator, median 2.18 µs, same runs of `host_costs.py` (recording only; nothing runs before the sync). |
//! | `flush_ns` | 4.9 µs | a flush of a graph seen before, its fixed part; with `flush_op_ns` for each operator in the graph (its key, the kept plan bound to the new storages, each fused node's kernel from the lowering memo). Same runs: the sync after a chain of 32 operators took a median 0.355 µs an operator (11.4 µs), after a chain of 50 0.293 µs (14.7 µs), each with one kernel launch (`launch_ns`): a line through the two is 0.18 µs an operator plus 5.5 µs, of which 0.6 µs is the launch. A graph planned afresh costs more (the first step of a loop); it is charged the same. |
//! | `flush_op_ns` | 0.18 µs | per operator in a flushed graph (the slope above). |
//! | `compile_ns` | 200 µs | generating and loading a new kernel (a cache miss); steady-state iterations hit the cache. |
//!
//! Tracing a graph for whole-graph compilation charges its operators at the mode's dispatch or
//! view cost, counted as compile time (`Metrics::compile_ns`) like the kernels it generates:
//! both happen once per input signature, not per step.
//!
//! Every figure is overridable: [`HostCosts::set`] by name (`tpuemu bench eager --set
//! host.record_ns=1500`, or a `[host]` table in a chip TOML file), and the bench reports print
//! the figures they ran with, so a claimed gain says how much of it the host model supplies.
//!
//! Also the modes ([`Mode`]) and the environment switches that choose them ([`env_flag`],
//! [`check_env`]).

use crate::error::{Result, TpuError};

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
    /// Per operator in a flushed graph.
    #[serde(default = "default_flush_op_ns")]
    pub flush_op_ns: f64,
    /// Per kernel generated (cache miss).
    pub compile_ns: f64,
}

impl Default for HostCosts {
    fn default() -> Self {
        HostCosts {
            op_dispatch_ns: 3200.0,
            view_ns: default_view_ns(),
            launch_ns: 600.0,
            record_ns: 2200.0,
            flush_ns: 4900.0,
            flush_op_ns: default_flush_op_ns(),
            compile_ns: 200_000.0,
        }
    }
}

fn default_view_ns() -> f64 {
    1000.0
}

fn default_flush_op_ns() -> f64 {
    180.0
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
    ("flush_op_ns", "per operator in a flushed graph"),
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
            "flush_op_ns" => &mut self.flush_op_ns,
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
/// The values a switch variable accepts, for its error.
pub const FLAG_VALUES: &str = "1, 0, true, false (or unset)";

/// A switch read from the environment: unset or empty is off; `1`/`true` on, `0`/`false` off
/// (any case); anything else is an error naming the variable, its value and [`FLAG_VALUES`]
/// (a typo never silently means off).
pub fn env_flag(name: &str) -> Result<bool> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(false),
        Err(std::env::VarError::NotUnicode(v)) => Err(bad_flag(name, &format!("{v:?}"))),
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" | "0" | "false" => Ok(false),
            "1" | "true" => Ok(true),
            _ => Err(bad_flag(name, &format!("{v:?}"))),
        },
    }
}

fn bad_flag(name: &str, value: &str) -> TpuError {
    TpuError::BadArgs(format!(
        "{name}={value} is not a switch: expected one of {FLAG_VALUES}"
    ))
}

/// Every tpuemu variable of the environment, checked: the first that has a value with no
/// meaning is the error. What `import tpuemu` runs, so a typo fails before any work.
pub fn check_env() -> Result<()> {
    for k in [
        "TORCH_TPU_DEFER_AND_FUSE",
        "TPU_DEFER_AND_FUSE",
        "TORCH_TPU_LAUNCH_BLOCKING",
        "TPU_LAUNCH_BLOCKING",
        "TORCH_TPU_DEBUG",
        "TPU_DEBUG",
        "TORCH_TPU_CPU_FALLBACK",
    ] {
        env_flag(k)?;
    }
    Ok(())
}

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
    /// else Strict. A value that is not a switch ([`env_flag`]) is an error, never Strict.
    pub fn from_env() -> Result<Mode> {
        let on = |k: &str| env_flag(k);
        Ok(
            if on("TORCH_TPU_DEFER_AND_FUSE")? || on("TPU_DEFER_AND_FUSE")? {
                Mode::DeferAndFuse
            } else if on("TORCH_TPU_LAUNCH_BLOCKING")? || on("TPU_LAUNCH_BLOCKING")? {
                Mode::Debug
            } else {
                Mode::Strict
            },
        )
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
