//! The runtime: a device, its kernel cache, the host clock, the executors and their metrics.
//!
//! A [`Runtime`] is the "tpu" device as the backend sees it: tensors live on it, operators
//! run on it in the current [`Mode`]. It holds a simulated host clock: every operator call
//! charges the host for its dispatch ([`HostCosts`]), every kernel launch is submitted at the
//! host's current time, and synchronising moves the host to when the device finished.

pub mod config;
pub(crate) mod exec;
pub mod metrics;
pub mod storage;
pub(crate) mod trace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tpuemu_isa::{ChipId, ChipInfo, Device, LaunchId, ProgramId};

pub use config::{HostCosts, MatmulPrecision, Mode};
pub use metrics::Metrics;
use storage::{FreeList, Storage, StorageRef};

use crate::error::{Result, TpuError};
use crate::ir::{Node, OpTag};

/// DeferAndFuse runs the recorded graph when it reaches this many operators (see
/// [`Runtime::set_max_pending_ops`]; `TORCH_TPU_DEFER_MAX_OPS` overrides it). Larger graphs
/// fuse a little more; smaller ones start the device sooner, so that it runs one part while
/// the host records the next. On the transformer-block benchmark (one step, 140 operators)
/// a step took 0.705 / 0.703 / 0.719 / 0.766 / 0.869 / 0.879 ms with limits of 8 / 16 / 32 /
/// 64 / 128 / 10000 operators, launching 60 / 58 / 55 / 54 / 54 / 53 kernels.
pub const DEFAULT_MAX_PENDING_OPS: usize = 32;

/// A compiled kernel in the cache.
#[derive(Clone, Debug)]
pub(crate) struct Compiled {
    /// The loaded program.
    pub program: ProgramId,
    /// The program itself (whole-graph compilation links kernels into one program).
    pub prog: Arc<tpuemu_isa::Program>,
}

/// Mutable state of a runtime.
pub(crate) struct State {
    pub mode: Mode,
    pub precision: MatmulPrecision,
    pub debug_print: bool,
    pub host_ns: f64,
    pub next_id: u64,
    pub cache: HashMap<String, Compiled>,
    /// Launches not yet known to have completed, with the operator that issued them.
    pub outstanding: Vec<(LaunchId, OpTag)>,
    /// DeferAndFuse: recorded nodes waiting for a flush.
    pub pending: Vec<Node>,
    /// Operators recorded since the last flush.
    pub pending_ops: usize,
    pub metrics: Metrics,
    pub profiling: bool,
    pub events: Vec<tpuemu_isa::trace::TraceEvent>,
    /// Depth of nested operator calls (decompositions call other operators).
    pub op_depth: usize,
    pub costs: HostCosts,
    /// Flush DeferAndFuse graphs when they reach this many operators.
    pub max_pending_ops: usize,
    pub next_group: u64,
    /// Operator spans opened and not yet closed (profiling): (op id, start ns).
    pub open_ops: Vec<(u64, f64)>,
    /// Recording a graph for whole-graph compilation.
    pub capturing: bool,
    /// Where to write each generated kernel's assembly (`TORCH_TPU_DUMP_KERNELS`).
    pub dump_dir: Option<std::path::PathBuf>,
}

pub(crate) struct Inner {
    pub device: Arc<dyn Device>,
    pub chip: ChipId,
    pub info: ChipInfo,
    pub frees: FreeList,
    pub state: Mutex<State>,
}

/// The backend's device handle. Cheap to clone; all clones share the device and state.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Runtime(chip {} of {})",
            self.inner.chip,
            self.inner.device.topology().generation
        )
    }
}

impl Runtime {
    /// A runtime on chip 0 of `device`, in the mode the environment asks for
    /// ([`Mode::from_env`]); `TORCH_TPU_DEBUG=1` prints every flush.
    pub fn new(device: Arc<dyn Device>) -> Result<Self> {
        Self::on_chip(device, 0)
    }

    /// A runtime on chip `chip` of `device`.
    pub fn on_chip(device: Arc<dyn Device>, chip: ChipId) -> Result<Self> {
        let info = device
            .topology()
            .chips
            .get(chip as usize)
            .cloned()
            .ok_or_else(|| TpuError::DeviceMismatch(format!("device has no chip {chip}")))?;
        let debug_print = std::env::var("TORCH_TPU_DEBUG").is_ok_and(|v| v == "1")
            || std::env::var("TPU_DEBUG").is_ok_and(|v| v == "1");
        let state = State {
            mode: Mode::from_env(),
            precision: MatmulPrecision::Default,
            debug_print,
            host_ns: 0.0,
            next_id: 1,
            cache: HashMap::new(),
            outstanding: Vec::new(),
            pending: Vec::new(),
            pending_ops: 0,
            metrics: Metrics::default(),
            profiling: false,
            events: Vec::new(),
            op_depth: 0,
            costs: HostCosts::default(),
            max_pending_ops: std::env::var("TORCH_TPU_DEFER_MAX_OPS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MAX_PENDING_OPS)
                .max(1),
            next_group: 1,
            open_ops: Vec::new(),
            capturing: false,
            dump_dir: std::env::var_os("TORCH_TPU_DUMP_KERNELS").map(std::path::PathBuf::from),
        };
        Ok(Runtime {
            inner: Arc::new(Inner {
                device,
                chip,
                info,
                frees: Arc::new(Mutex::new(Vec::new())),
                state: Mutex::new(state),
            }),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.inner.device
    }

    /// The chip tensors live on.
    pub fn chip(&self) -> ChipId {
        self.inner.chip
    }

    /// What the chip is.
    pub fn chip_info(&self) -> &ChipInfo {
        &self.inner.info
    }

    /// Whether two runtimes are the same device handle.
    pub fn same(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.lock().mode
    }

    /// Switches mode; leaving DeferAndFuse flushes the graph ("mode switch").
    pub fn set_mode(&self, mode: Mode) -> Result<()> {
        let mut st = self.lock();
        if st.mode == Mode::DeferAndFuse && mode != Mode::DeferAndFuse {
            self.flush_locked(&mut st, "mode switch")?;
        }
        st.mode = mode;
        Ok(())
    }

    /// Sets the mode until the guard drops (then the previous mode is restored, flushing if
    /// needed).
    pub fn mode_guard(&self, mode: Mode) -> Result<ModeGuard> {
        let previous = self.mode();
        self.set_mode(mode)?;
        Ok(ModeGuard {
            rt: self.clone(),
            previous,
        })
    }

    /// Matmul precision for f32 inputs (`torch.tpu`'s precision setting).
    pub fn set_precision(&self, p: MatmulPrecision) {
        self.lock().precision = p;
    }

    /// The matmul precision.
    pub fn precision(&self) -> MatmulPrecision {
        self.lock().precision
    }

    /// Prints each flush with its reason and fused groups (`TORCH_TPU_DEBUG=1`).
    pub fn set_debug(&self, on: bool) {
        self.lock().debug_print = on;
    }

    /// The host costs of the timing model.
    pub fn costs(&self) -> HostCosts {
        self.lock().costs.clone()
    }

    /// Replaces the host costs.
    pub fn set_costs(&self, c: HostCosts) {
        self.lock().costs = c;
    }

    /// Flushes DeferAndFuse graphs at this many operators (default [`DEFAULT_MAX_PENDING_OPS`]).
    pub fn set_max_pending_ops(&self, n: usize) {
        self.lock().max_pending_ops = n.max(1);
    }

    /// The simulated host clock, ns.
    pub fn host_time_ns(&self) -> f64 {
        self.lock().host_ns
    }

    /// A copy of the metrics.
    pub fn metrics(&self) -> Metrics {
        self.lock().metrics.clone()
    }

    /// Clears the metrics.
    pub fn reset_metrics(&self) {
        self.lock().metrics = Metrics::default();
    }

    /// Runs everything recorded and waits for every kernel; the host clock moves to when the
    /// device finished. Reports the first fault, naming its operator.
    pub fn sync(&self) -> Result<()> {
        let mut st = self.lock();
        self.flush_locked(&mut st, "explicit sync")?;
        self.wait_all(&mut st)
    }

    /// Runs what DeferAndFuse recorded, giving `reason`.
    pub(crate) fn flush_for(&self, reason: &str) -> Result<()> {
        let mut st = self.lock();
        self.flush_locked(&mut st, reason)
    }

    /// Starts recording a graph for compilation (after running what was pending); returns the
    /// first storage id the graph can create.
    pub(crate) fn begin_capture(&self) -> u64 {
        let mut st = self.lock();
        // A failing flush surfaces at the next synchronisation.
        let _ = self.flush_locked(&mut st, "compile");
        st.capturing = true;
        st.next_id
    }

    /// Stops recording and returns the graph.
    pub(crate) fn end_capture(&self) -> Vec<Node> {
        let mut st = self.lock();
        st.capturing = false;
        st.pending_ops = 0;
        std::mem::take(&mut st.pending)
    }

    /// A new storage of `bytes` (device memory allocated when first written).
    pub(crate) fn new_storage(&self, st: &mut State, bytes: u64) -> StorageRef {
        let id = st.next_id;
        st.next_id += 1;
        Arc::new(Storage::new(id, bytes, self.inner.frees.clone()))
    }

    /// Frees device buffers of dropped storages.
    pub(crate) fn collect_frees(&self) {
        let bufs: Vec<_> =
            std::mem::take(&mut *self.inner.frees.lock().unwrap_or_else(|e| e.into_inner()));
        for b in bufs {
            // A failure here means the buffer is already gone; nothing to do.
            let _ = self.inner.device.free(b);
        }
    }

    /// Makes sure `s` has device memory.
    pub(crate) fn ensure_buffer(&self, s: &Storage) -> Result<tpuemu_isa::BufferId> {
        if let Some(b) = s.buffer() {
            return Ok(b);
        }
        self.collect_frees();
        let b = self.inner.device.alloc(self.inner.chip, s.bytes().max(1))?;
        s.set_buffer(b);
        Ok(b)
    }

    /// Waits for every outstanding launch; the first fault is reported with its operator.
    pub(crate) fn wait_all(&self, st: &mut State) -> Result<()> {
        let mut first: Option<TpuError> = None;
        for (id, tag) in std::mem::take(&mut st.outstanding) {
            match self.inner.device.wait(id) {
                Ok(c) => {
                    st.host_ns = st.host_ns.max(c.end_ns);
                    st.metrics.device_busy_ns += c.end_ns - c.start_ns;
                    st.metrics.hbm_bytes += c.counters.hbm_bytes;
                    st.metrics.mxu_flops += c.counters.mxu_flops;
                    st.metrics.ici_bytes += c.counters.ici_bytes;
                }
                Err(e) => {
                    if first.is_none() {
                        first = Some(fault_at(&tag, e));
                    }
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Starts an operator call: charges dispatch (or recording) time and opens its trace span.
    pub(crate) fn begin_op(&self, name: &str, shapes: String) -> OpTag {
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.metrics.ops += 1;
        *st.metrics.ops_by_name.entry(name.to_string()).or_default() += 1;
        st.op_depth += 1;
        let start = st.host_ns;
        st.host_ns += match st.mode {
            Mode::DeferAndFuse => st.costs.record_ns,
            _ => st.costs.op_dispatch_ns,
        };
        let tag = OpTag {
            name: name.to_string(),
            id,
            shapes,
        };
        if st.profiling {
            trace::op_begin(&mut st, &tag, start);
        }
        tag
    }

    /// Ends an operator call.
    pub(crate) fn end_op(&self, tag: &OpTag) {
        let mut st = self.lock();
        st.op_depth = st.op_depth.saturating_sub(1);
        if st.profiling {
            let now = st.host_ns;
            trace::op_end(&mut st, tag, now);
        }
        let limit = st.max_pending_ops;
        if st.mode == Mode::DeferAndFuse && st.op_depth == 0 && !st.capturing {
            st.pending_ops += 1;
            if st.pending_ops >= limit {
                // A failed flush surfaces at the next synchronisation.
                let _ = self.flush_locked(&mut st, "size limit");
            }
        }
    }

    /// Runs `node` now (Strict/Debug) or records it (DeferAndFuse).
    pub(crate) fn submit(&self, node: Node) -> Result<()> {
        let mut st = self.lock();
        if st.capturing {
            st.pending.push(node);
            return Ok(());
        }
        match st.mode {
            Mode::DeferAndFuse => {
                st.pending.push(node);
                Ok(())
            }
            mode => {
                self.execute(&mut st, &node, None)?;
                if mode == Mode::Debug {
                    self.wait_all(&mut st)?;
                }
                Ok(())
            }
        }
    }
}

/// Restores the previous mode when dropped.
pub struct ModeGuard {
    rt: Runtime,
    previous: Mode,
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        // A failing flush here surfaces at the next synchronisation.
        let _ = self.rt.set_mode(self.previous);
    }
}

/// A device error reported at an operator.
pub(crate) fn fault_at(tag: &OpTag, e: tpuemu_isa::DeviceError) -> TpuError {
    match e {
        tpuemu_isa::DeviceError::Fault(f) => TpuError::Fault {
            op: tag.name.clone(),
            shapes: tag.shapes.clone(),
            fault: f.to_string(),
        },
        tpuemu_isa::DeviceError::Deadlock(d) => TpuError::Fault {
            op: tag.name.clone(),
            shapes: tag.shapes.clone(),
            fault: format!("deadlock: {d}"),
        },
        other => other.into(),
    }
}
