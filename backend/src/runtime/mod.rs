//! The runtime: a device, its kernel cache, the host clock, the executors and their metrics.
//!
//! A [`Runtime`] is the "tpu" device as the backend sees it: tensors live on it, operators
//! run on it in the current [`Mode`]. It holds a simulated host clock: every operator call
//! charges the host for its dispatch ([`HostCosts`]), every kernel launch is submitted at the
//! host's current time, and synchronising moves the host to when the device finished.

pub mod checks;
pub mod config;
pub(crate) mod exec;
pub(crate) mod executor;
pub mod external;
pub(crate) mod flush;
pub mod metrics;
pub(crate) mod queue;
/// Storages live in their own module (the IR and kernels name them without the runtime); the
/// old path stays valid.
pub use crate::storage;
pub(crate) mod trace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tpuemu_isa::{ChipId, ChipInfo, Device, LaunchId, ProgramId};

use executor::{Capture, Executor};
use queue::LaunchQueue;
use trace::Profiler;

pub use config::{
    HOST_COST_FIELDS, HostCosts, MAX_HOST_COST_NS, MatmulPrecision, Mode, check_env, env_flag,
};
pub use external::{CollectiveEntry, CollectiveRecord, CollectiveStats};
pub use metrics::Metrics;
use storage::{Pool, Storage, StorageRef};

use crate::error::{Result, TpuError};
use crate::ir::{Names, Node, OpTag, Shapes};

/// DeferAndFuse runs the recorded graph when it reaches this many operators (see
/// [`Runtime::set_max_pending_ops`]; `TORCH_TPU_DEFER_MAX_OPS` overrides it). Larger graphs
/// fuse a little more; smaller ones start the device sooner, so that it runs one part while
/// the host records the next. On the transformer-block benchmark (one step, 119 operator
/// calls, default host costs) a step took 0.778 / 0.564 / 0.503 / 0.501 / 0.513 / 0.553 /
/// 0.695 ms with limits of 8 / 16 / 24 / 32 / 48 / 64 / 128 operators, launching 42 / 38 /
/// 35 / 35 / 35 / 33 / 32 kernels (backend/README.md).
pub const DEFAULT_MAX_PENDING_OPS: usize = 32;

/// A compiled kernel in the cache.
#[derive(Clone, Debug)]
pub(crate) struct Compiled {
    /// The loaded program.
    pub program: ProgramId,
    /// The program itself (whole-graph compilation links kernels into one program).
    pub prog: Arc<tpuemu_isa::Program>,
}

/// What executors work with: the launch queue, the kernel cache, the profiler and the
/// settings operators read.
pub(crate) struct Core {
    /// Host clock, metrics, launches in flight.
    pub q: LaunchQueue,
    /// Kernels by pattern key.
    pub cache: HashMap<String, Compiled>,
    /// The lowering memo: kernels and argument templates by node structure, so that a node
    /// seen before skips lowering and its pattern key (see `exec::Runtime::lowered`).
    pub lowered: crate::ir::key::KeyMap<(Compiled, Vec<exec::ArgTemplate>)>,
    /// DeferAndFuse's plans by recorded graph (see `fusion::plans`).
    pub plans: crate::fusion::plans::PlanCache,
    /// Operator names, one shared copy each (every call's tag holds one).
    pub names: Names,
    /// Host trace events.
    pub prof: Profiler,
    /// Matrix-unit precision of f32 matmuls called now.
    pub precision: MatmulPrecision,
    /// Split matrix products and attention over the chip's TensorCores (megacore; on chips
    /// with more than one).
    pub megacore: bool,
    /// Print every flush (`TORCH_TPU_DEBUG=1`).
    pub debug_print: bool,
    /// Where to write each generated kernel's assembly (`TORCH_TPU_DUMP_KERNELS`).
    pub dump_dir: Option<std::path::PathBuf>,
    /// The next fused group's id.
    pub next_group: u64,
    /// An error of work run where it could not be reported (a flush at DeferAndFuse's size
    /// limit, at the end of an operator call): reported at the next synchronisation.
    pub deferred_error: Option<TpuError>,
}

/// Mutable state of a runtime.
pub(crate) struct State {
    /// The current executor.
    pub exec: Box<dyn Executor>,
    /// The executor a graph capture set aside, restored when the capture ends.
    pub suspended: Option<Box<dyn Executor>>,
    /// What executors work with.
    pub core: Core,
    /// Depth of nested operator calls (decompositions call other operators).
    pub op_depth: usize,
    /// DeferAndFuse runs its graph at this many operators.
    pub max_pending_ops: usize,
    /// Device-side checks not yet settled, and the outputs of operators that failed one.
    pub checks: checks::Checks,
    /// The random draws of the graph being captured (see [`CapturedDraw`]).
    pub draws: Vec<CapturedDraw>,
}

/// A random operator's draw inside a captured graph: the uploaded storage that holds its
/// stream's seed and first counter, the stream and how many counters it takes. A compiled
/// graph's later calls reserve that many counters again and write them there, so a compiled
/// graph draws what the same operators draw eagerly.
#[derive(Clone)]
pub(crate) struct CapturedDraw {
    pub storage: StorageRef,
    pub generator: Option<u64>,
    pub n: u64,
}

impl State {
    /// The eager mode (while a graph is captured: the mode it will return to).
    pub fn mode(&self) -> Mode {
        self.exec
            .mode()
            .or_else(|| self.suspended.as_ref().and_then(|e| e.mode()))
            .unwrap_or(Mode::Strict)
    }

    /// Runs what the current executor holds back, for `reason`.
    pub fn flush(&mut self, rt: &Runtime, reason: &str) -> Result<()> {
        let State { exec, core, .. } = self;
        let r = exec.flush(rt, core, reason);
        match core.deferred_error.take() {
            Some(e) => Err(e),
            None => r,
        }
    }
}

pub(crate) struct Inner {
    pub device: Arc<dyn Device>,
    pub chip: ChipId,
    /// Values, timing only, or shapes only.
    pub kind: Kind,
    pub info: ChipInfo,
    /// The storages' reservations and the buffers waiting to be freed.
    pub pool: Arc<Pool>,
    pub state: Mutex<State>,
    /// The random generator's streams (see [`crate::rng`]).
    pub rng: Mutex<crate::rng::RngState>,
}

/// What a runtime computes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// Values and timing.
    Values,
    /// Timing only ([`Runtime::meta`]).
    Meta,
    /// Shapes only ([`Runtime::shapes`]).
    Shapes,
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

/// Most operators a deferred graph may hold (`TORCH_TPU_DEFER_MAX_OPS`).
pub const MAX_PENDING_OPS_LIMIT: usize = 1_000_000;

/// `TORCH_TPU_DEFER_MAX_OPS`: unset is the default; anything but a whole number from 1 to
/// [`MAX_PENDING_OPS_LIMIT`] is an error naming the variable and its value (never replaced).
fn max_pending_ops_from_env() -> Result<usize> {
    match std::env::var("TORCH_TPU_DEFER_MAX_OPS") {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_MAX_PENDING_OPS),
        Err(std::env::VarError::NotUnicode(v)) => Err(TpuError::BadArgs(format!(
            "TORCH_TPU_DEFER_MAX_OPS={v:?}: expected a whole number from 1 to {MAX_PENDING_OPS_LIMIT}"
        ))),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_PENDING_OPS_LIMIT).contains(&n) => Ok(n),
            _ => Err(TpuError::BadArgs(format!(
                "TORCH_TPU_DEFER_MAX_OPS={v:?}: expected a whole number from 1 to {MAX_PENDING_OPS_LIMIT}"
            ))),
        },
    }
}

impl Runtime {
    /// A runtime on chip 0 of `device`, in the mode the environment asks for
    /// ([`Mode::from_env`]); `TORCH_TPU_DEBUG=1` prints every flush.
    pub fn new(device: Arc<dyn Device>) -> Result<Self> {
        Self::on_chip(device, 0)
    }

    /// A **meta** runtime on chip `chip` of `device`: tensors have shapes, dtypes, layouts and
    /// device memory, but no values. Every operator still lowers, plans and launches its
    /// kernels, which the device runs for their timing only ([`Device::set_timing_only`]), so
    /// simulated time, kernels and HBM traffic are what the same program with values gives —
    /// for models too large to hold. Kernels whose work depends on values take the path they
    /// take on zeros (the device's scalar memory reads zeros): one does, an index-add into a
    /// zeroed table that writes back only its touched rows (the fused embedding gradient), which
    /// here writes back one row however many distinct indices the real data has. Reading a
    /// value back is an error; [`Tensor::sync_read`] times a read without returning one.
    ///
    /// [`Tensor::sync_read`]: crate::Tensor::sync_read
    pub fn meta(device: Arc<dyn Device>, chip: ChipId) -> Result<Self> {
        device.set_timing_only(true)?;
        Self::build(device, chip, Kind::Meta)
    }

    /// A **shapes-only** runtime on chip `chip` of `device` (PyTorch's meta device): operators
    /// compute their outputs' shapes, dtypes and strides from their inputs' metadata and run
    /// nothing — no kernel is generated, launched or timed, and no device memory is used by
    /// results. What `ops::meta` answers with. Reading a value back is an error; an operator
    /// whose output shape depends on values (`nonzero`, `masked_select`) says it needs values.
    /// The mode cannot be changed.
    pub fn shapes(device: Arc<dyn Device>, chip: ChipId) -> Result<Self> {
        Self::build(device, chip, Kind::Shapes)
    }

    /// Whether this is a [`Runtime::shapes`] runtime (nothing runs).
    pub fn shapes_only(&self) -> bool {
        self.inner.kind == Kind::Shapes
    }

    /// Whether tensors of this runtime hold values (not a [`Runtime::meta`] runtime).
    pub fn has_values(&self) -> bool {
        self.inner.kind == Kind::Values
    }

    /// Whether operators called now run their device-side checks ([`checks`]): on a runtime
    /// that runs kernels (with values, or a meta one, which times them); in a graph capture
    /// the checks become part of the graph ([`Runtime::capture_check`]).
    pub(crate) fn checks_values(&self) -> bool {
        !self.shapes_only()
    }

    /// Whether a graph is being captured for compilation.
    pub(crate) fn capturing(&self) -> bool {
        self.lock().suspended.is_some()
    }

    /// Keeps a device-side check of a captured graph: compiling the graph makes its flag an
    /// output, and every call of the compiled graph registers the check on its results.
    pub(crate) fn capture_check(&self, c: checks::CapturedCheck) {
        self.lock().checks.captured.push(c);
    }

    /// Notes a random draw of the graph being captured.
    pub(crate) fn capture_draw(&self, d: CapturedDraw) {
        self.lock().draws.push(d);
    }

    /// The random draws of the graph captured since [`Runtime::begin_capture`].
    pub(crate) fn take_captured_draws(&self) -> Vec<CapturedDraw> {
        std::mem::take(&mut self.lock().draws)
    }

    /// The checks of the graph captured since [`Runtime::begin_capture`].
    pub(crate) fn take_captured_checks(&self) -> Vec<checks::CapturedCheck> {
        std::mem::take(&mut self.lock().checks.captured)
    }

    /// A runtime on chip `chip` of `device`.
    pub fn on_chip(device: Arc<dyn Device>, chip: ChipId) -> Result<Self> {
        Self::build(device, chip, Kind::Values)
    }

    fn build(device: Arc<dyn Device>, chip: ChipId, kind: Kind) -> Result<Self> {
        let info = device
            .topology()
            .chips
            .get(chip as usize)
            .cloned()
            .ok_or_else(|| TpuError::DeviceMismatch(format!("device has no chip {chip}")))?;
        let debug_print = config::env_flag("TORCH_TPU_DEBUG")? || config::env_flag("TPU_DEBUG")?;
        let max_pending_ops = max_pending_ops_from_env()?;
        let mode = Mode::from_env()?;
        let mut q = LaunchQueue::new(HostCosts::default());
        q.blocking = mode == Mode::Debug;
        let state = State {
            exec: match kind {
                Kind::Shapes => Box::new(executor::Shapes),
                _ => executor::for_mode(mode, max_pending_ops),
            },
            suspended: None,
            core: Core {
                q,
                cache: HashMap::new(),
                lowered: Default::default(),
                plans: Default::default(),
                names: Default::default(),
                prof: Profiler::default(),
                precision: MatmulPrecision::Default,
                megacore: true,
                debug_print,
                dump_dir: std::env::var_os("TORCH_TPU_DUMP_KERNELS").map(std::path::PathBuf::from),
                next_group: 1,
                deferred_error: None,
            },
            op_depth: 0,
            max_pending_ops,
            checks: checks::Checks::default(),
            draws: Vec::new(),
        };
        // Shapes-only tensors hold no device memory (PyTorch's meta device has no limit).
        let capacity = match kind {
            Kind::Shapes => u64::MAX,
            _ => info.hbm_bytes,
        };
        Ok(Runtime {
            inner: Arc::new(Inner {
                device,
                chip,
                kind,
                info,
                pool: Arc::new(Pool::new(capacity)),
                state: Mutex::new(state),
                rng: Mutex::new(crate::rng::RngState::default()),
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
        self.lock().mode()
    }

    /// Switches mode; leaving DeferAndFuse runs the recorded graph ("mode switch"). Refused
    /// while a compiled function is being traced.
    pub fn set_mode(&self, mode: Mode) -> Result<()> {
        let mut st = self.lock();
        if st.suspended.is_some() {
            return Err(TpuError::Unsupported(
                "changing the execution mode inside a compiled function".into(),
            ));
        }
        if st.exec.mode() == Some(mode) || self.shapes_only() {
            return Ok(());
        }
        st.flush(self, "mode switch")?;
        st.exec = executor::for_mode(mode, st.max_pending_ops);
        st.core.q.blocking = mode == Mode::Debug;
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
        self.lock().core.precision = p;
    }

    /// The matmul precision.
    pub fn precision(&self) -> MatmulPrecision {
        self.lock().core.precision
    }

    /// Whether eager kernels are split over the chip's TensorCores where the chip has several
    /// (TPU v4, v5p: megacore; on by default, as JAX and PyTorch/XLA use those chips):
    /// matrix products by output tiles, attention by heads. Whole-graph programs run on one
    /// core.
    pub fn set_megacore(&self, on: bool) {
        self.lock().core.megacore = on;
    }

    /// Whether eager kernels are split over the chip's TensorCores.
    pub fn megacore(&self) -> bool {
        self.lock().core.megacore
    }

    /// Prints each flush with its reason and fused groups (`TORCH_TPU_DEBUG=1`).
    pub fn set_debug(&self, on: bool) {
        self.lock().core.debug_print = on;
    }

    /// The host costs of the timing model.
    pub fn costs(&self) -> HostCosts {
        self.lock().core.q.costs.clone()
    }

    /// Replaces the host costs.
    pub fn set_costs(&self, c: HostCosts) {
        self.lock().core.q.costs = c;
    }

    /// Flushes DeferAndFuse graphs at this many operators (default [`DEFAULT_MAX_PENDING_OPS`]).
    pub fn set_max_pending_ops(&self, n: usize) {
        let mut st = self.lock();
        st.max_pending_ops = n.max(1);
        let n = st.max_pending_ops;
        st.exec.set_limit(n);
        if let Some(e) = st.suspended.as_mut() {
            e.set_limit(n);
        }
    }

    /// The simulated host clock, ns.
    pub fn host_time_ns(&self) -> f64 {
        self.lock().core.q.host_ns
    }

    /// A copy of the metrics.
    pub fn metrics(&self) -> Metrics {
        self.lock().core.q.metrics.clone()
    }

    /// Updates a counter.
    #[doc(hidden)] // for DTensor (tpuemu-dtensor)
    pub fn count(&self, f: impl FnOnce(&mut Metrics)) {
        f(&mut self.lock().core.q.metrics)
    }

    /// Clears the metrics.
    pub fn reset_metrics(&self) {
        self.lock().core.q.metrics = Metrics::default();
    }

    /// Runs everything recorded and waits for every kernel; the host clock moves to when the
    /// device finished. Reports the first fault, naming its operator.
    pub fn sync(&self) -> Result<()> {
        let mut st = self.lock();
        self.synchronize(&mut st, "explicit sync").map(drop)
    }

    /// Runs what is recorded, waits for every launch and settles the device-side checks
    /// ([`checks`]); returns the rules broken, by operator. A kernel fault of an operator whose
    /// rule broke is not an error of its own (the rule explains it; its outputs have failed).
    pub(crate) fn synchronize(
        &self,
        st: &mut State,
        reason: &str,
    ) -> Result<Vec<(String, TpuError)>> {
        let flushed = st.flush(self, reason);
        let waited = st.core.q.wait_all(self.inner.device.as_ref());
        let broken = if st.checks.any_pending() {
            // The flags are read untimed: a device's assertion status comes back with the
            // synchronisation itself (CUDA's device-side asserts), so the model charges nothing.
            // A meta runtime keeps its checks as one with values does, but has none to read.
            let device = self.inner.device.as_ref();
            let values = self.has_values();
            st.checks.settle(|flag| {
                if !values {
                    return None;
                }
                let mut b = [0u8; 4];
                device.peek(flag.buffer()?, 0, &mut b).ok()?;
                Some(i32::from_le_bytes(b))
            })
        } else {
            Vec::new()
        };
        // What a faulted or stopped launch (or a failed flush) left uncomputed raises when read
        // (after the checks: a broken rule that explains a fault is the error to keep).
        for (w, e) in std::mem::take(&mut st.core.q.not_computed) {
            st.checks.fail(w, e);
        }
        let explained = |e: &TpuError| matches!(e, TpuError::Fault { op, .. } if broken.iter().any(|(b, _)| op.contains(b.as_str())));
        match (flushed, waited) {
            (Err(e), _) | (Ok(()), Err(e)) if !explained(&e) => Err(e),
            _ => Ok(broken),
        }
    }

    /// Registers a device-side check of the operator being called (see [`checks`]).
    pub(crate) fn add_check(&self, c: checks::Check) {
        self.lock().checks.add(c);
    }

    /// Settles a device-side check now (Debug mode): its broken rule is the error.
    pub(crate) fn check_now(&self, c: checks::Check) -> Result<()> {
        let mut st = self.lock();
        st.checks.add(c);
        match self.synchronize(&mut st, "check")?.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Runs what DeferAndFuse recorded, giving `reason`.
    #[doc(hidden)] // for DTensor (tpuemu-dtensor)
    pub fn flush_for(&self, reason: &str) -> Result<()> {
        self.lock().flush(self, reason)
    }

    /// Starts recording a graph for compilation (after running what was pending); returns the
    /// first storage id the graph can create.
    #[doc(hidden)] // for DTensor (tpuemu-dtensor)
    pub fn begin_capture(&self) -> u64 {
        let mut st = self.lock();
        // A failing flush surfaces at the next synchronisation.
        if let Err(e) = st.flush(self, "compile") {
            st.core.deferred_error.get_or_insert(e);
        }
        let charged_as = st.exec.mode();
        st.checks.captured.clear();
        st.draws.clear();
        let previous = std::mem::replace(&mut st.exec, Box::new(Capture::new(charged_as)));
        st.suspended = Some(previous);
        st.core.q.peek_id()
    }

    /// Stops recording and returns the graph.
    #[doc(hidden)] // for DTensor (tpuemu-dtensor)
    pub fn end_capture(&self) -> Vec<Node> {
        let mut st = self.lock();
        let nodes = st.exec.take_nodes();
        if let Some(previous) = st.suspended.take() {
            st.exec = previous;
        }
        nodes
    }

    /// A new storage of `bytes`, reserved in the chip's HBM now (device memory is allocated
    /// when it is first written); out of memory when the live storages leave too little. A
    /// DeferAndFuse recording holds the intermediates of its operators until it runs, so when a
    /// request does not fit the recording runs first (what it frees counts) and the request is
    /// tried again.
    pub(crate) fn new_storage(&self, st: &mut State, bytes: u64) -> Result<StorageRef> {
        let id = st.core.q.next_id();
        let reserve = || Storage::reserve(id, bytes, self.inner.pool.clone());
        let reserved = match reserve() {
            Err(_) if st.exec.holds_work() => {
                st.flush(self, "memory")?;
                reserve()
            }
            r => r,
        };
        reserved
            .map(Arc::new)
            .map_err(|e| TpuError::out_of_memory(self.inner.chip, e.asked, e.free, e.capacity))
    }

    /// Frees device buffers of dropped storages.
    pub(crate) fn collect_frees(&self) {
        for b in self.inner.pool.take_frees() {
            // A failure here means the buffer is already gone; nothing to do.
            let _ = self.inner.device.free(b);
        }
    }

    /// Makes sure `s` has device memory.
    #[doc(hidden)] // for DTensor (tpuemu-dtensor)
    pub fn ensure_buffer(&self, s: &Storage) -> Result<tpuemu_isa::BufferId> {
        if let Some(b) = s.buffer() {
            return Ok(b);
        }
        self.collect_frees();
        let b = self.inner.device.alloc(self.inner.chip, s.bytes().max(1))?;
        s.set_buffer(b);
        Ok(b)
    }

    /// Takes over the bookkeeping of a launch made for several runtimes at once (a
    /// collective): see [`LaunchQueue::adopt`].
    #[doc(hidden)] // for DTensor (tpuemu-dtensor)
    pub fn adopt_launch(&self, id: LaunchId, name: String, shapes: String) -> Result<()> {
        let mut st = self.lock();
        let q = &mut st.core.q;
        *q.metrics.ops_by_name.entry(name.clone()).or_default() += 1;
        let tag = OpTag {
            id: q.next_id(),
            name: name.into(),
            shapes: Shapes::text(shapes),
        };
        // A collective's outputs are other runtimes' too: its fault is reported, not kept.
        q.adopt(self.inner.device.as_ref(), id, tag, Vec::new())
    }

    /// Starts an operator call: charges dispatch (or recording, or a view's) time and opens its
    /// trace span. Tracing for compilation counts the charge as compile time.
    pub(crate) fn begin_op(&self, name: &str, shapes: Shapes, call: Call) -> OpTag {
        let mut st = self.lock();
        st.op_depth += 1;
        let cost = match call {
            Call::Op => st.exec.dispatch_cost(&st.core.q.costs),
            Call::View => st.core.q.costs.view_ns,
        };
        // Operators traced for compilation (no mode) are compile time, views or not.
        let kind = match call {
            _ if st.exec.mode().is_none() => "trace",
            Call::Op => st.exec.dispatch_kind(),
            Call::View => "view",
        };
        let core = &mut st.core;
        let id = core.q.next_id();
        core.q.metrics.ops += 1;
        if call == Call::View {
            core.q.metrics.view_calls += 1;
        }
        match core.q.metrics.ops_by_name.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                core.q.metrics.ops_by_name.insert(name.to_string(), 1);
            }
        }
        let start = core.q.host_ns;
        core.q.charge(kind, cost);
        let tag = OpTag {
            name: core.names.get(name),
            id,
            shapes,
        };
        core.prof.op_begin(&tag, start);
        tag
    }

    /// Ends an operator call.
    pub(crate) fn end_op(&self, tag: &OpTag) {
        let mut st = self.lock();
        st.op_depth = st.op_depth.saturating_sub(1);
        let mode = st.mode();
        let now = st.core.q.host_ns;
        st.core.prof.op_end(tag, now, mode);
        if st.op_depth == 0 {
            let State { exec, core, .. } = &mut *st;
            // A failed flush surfaces at the next synchronisation.
            if let Err(e) = exec.op_done(self, core) {
                core.deferred_error.get_or_insert(e);
            }
        }
    }

    /// Hands `node` to the current executor (run now, or recorded).
    pub(crate) fn submit(&self, node: Node) -> Result<()> {
        let mut st = self.lock();
        let State {
            exec, core, checks, ..
        } = &mut *st;
        if checks.tracking() || !core.q.not_computed.is_empty() {
            // An output written whole, and not read, holds a computed value again.
            for v in &node.outputs {
                let whole = v.layout.offset == 0
                    && v.layout.is_contiguous()
                    && (v.layout.numel() * v.dtype.size()) as u64 == v.storage.bytes();
                if whole
                    && !node
                        .inputs
                        .iter()
                        .any(|i| Arc::ptr_eq(&i.storage, &v.storage))
                {
                    checks.overwritten(&v.storage);
                    core.q.overwritten(&v.storage);
                }
            }
            let outputs: Vec<&StorageRef> = node.outputs.iter().map(|v| &v.storage).collect();
            checks.taint(node.inputs.iter().map(|v| &v.storage), &outputs);
        }
        exec.submit(self, core, node)
    }
}

/// What an operator call costs the host ([`Runtime::begin_op`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Call {
    /// An operator: dispatched, recorded or traced at the mode's cost.
    Op,
    /// A view operator: new sizes and strides only ([`HostCosts::view_ns`]).
    View,
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
            op: tag.name.to_string(),
            shapes: tag.shapes.to_string(),
            fault: f.to_string(),
        },
        tpuemu_isa::DeviceError::Deadlock(d) => TpuError::Fault {
            op: tag.name.to_string(),
            shapes: tag.shapes.to_string(),
            fault: format!("deadlock: {d}"),
        },
        other => other.into(),
    }
}
