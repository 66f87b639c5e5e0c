//! The launch queue: the simulated host clock, ids, metrics and the work in flight.
//!
//! Every kernel the backend starts goes through [`LaunchQueue::launch`] (or, for a launch that
//! spans several runtimes such as a collective, [`LaunchQueue::adopt`]): it stamps the launch
//! with the host's current time, charges the host the launch cost, counts it, remembers it
//! until it is waited for, and — in Debug mode — waits for it at once, so that a fault is
//! reported at the operator that caused it.
//!
//! Work that another engine does for the chip — a collective whose bytes a bridge moves
//! between processes ([`super::external`]) — enters the queue as times: buffers whose contents
//! land at a later simulated time (`landing`), a stream fence no launch may start before, and
//! device time the host has not waited for yet (`device_done_ns`). A launch that reads a
//! landing buffer starts after it lands; synchronising waits for all of it.

use std::collections::HashMap;
use std::sync::Weak;

use tpuemu_isa::{BufferId, Device, KernelArg, Launch, LaunchId};

use super::config::HostCosts;
use super::metrics::Metrics;
use crate::error::{Result, TpuError};
use crate::ir::OpTag;
use crate::storage::Storage;

/// The storages a launch writes (what is not computed if it faults).
pub(crate) type Writes = Vec<Weak<Storage>>;

/// Host clock, metrics and outstanding launches of one runtime.
pub(crate) struct LaunchQueue {
    /// The simulated host clock, ns.
    pub host_ns: f64,
    /// Host costs of the timing model.
    pub costs: HostCosts,
    /// Counters.
    pub metrics: Metrics,
    /// Wait for each launch as it is made (Debug mode).
    pub blocking: bool,
    next_id: u64,
    outstanding: Vec<(LaunchId, OpTag, Writes)>,
    /// Storages whose launch faulted or was stopped (or never ran, a flush having failed
    /// before it), with the error to raise when they are read: the runtime marks them failed
    /// at its next synchronisation ([`super::checks`]).
    pub not_computed: Vec<(Weak<Storage>, TpuError)>,
    /// Buffers being written by work outside the device's launches, and when they land (ns).
    landing: HashMap<BufferId, f64>,
    /// No launch starts before this (a stream waiting for an event).
    fence_ns: f64,
    /// When the device finishes the work the host has not waited for yet: launches waited
    /// for without moving the host clock, collectives in flight.
    pub device_done_ns: f64,
}

impl LaunchQueue {
    pub fn new(costs: HostCosts) -> Self {
        LaunchQueue {
            host_ns: 0.0,
            costs,
            metrics: Metrics::default(),
            blocking: false,
            next_id: 1,
            outstanding: Vec::new(),
            not_computed: Vec::new(),
            landing: HashMap::new(),
            fence_ns: 0.0,
            device_done_ns: 0.0,
        }
    }

    /// The earliest time work on `buffers` may start: now, after the fence, after every
    /// landing among them.
    pub fn start_ns(&self, buffers: impl IntoIterator<Item = BufferId>) -> f64 {
        let mut t = self.host_ns.max(self.fence_ns);
        if !self.landing.is_empty() {
            for b in buffers {
                if let Some(at) = self.landing.get(&b) {
                    t = t.max(*at);
                }
            }
        }
        t
    }

    /// `buffer`'s contents land at `ns` (written by work outside the launches).
    pub fn land(&mut self, buffer: BufferId, ns: f64) {
        if self.landing.len() >= 1024 {
            // Landings the host has passed hold nothing back any more.
            let now = self.host_ns.max(self.fence_ns);
            self.landing.retain(|_, at| *at > now);
        }
        let at = self.landing.entry(buffer).or_insert(ns);
        *at = at.max(ns);
        self.device_done_ns = self.device_done_ns.max(ns);
    }

    /// Launches made from now on start at `ns` or later.
    pub fn fence(&mut self, ns: f64) {
        self.fence_ns = self.fence_ns.max(ns);
    }

    /// Waits for every outstanding launch without moving the host clock (the host goes on
    /// while the device finishes); returns when the device is done with all of it.
    pub fn drain(&mut self, device: &dyn Device) -> Result<f64> {
        let (end, fault) = self.wait_launches(device);
        self.device_done_ns = self.device_done_ns.max(end);
        match fault {
            Some(e) => Err(e),
            None => Ok(self.device_done_ns),
        }
    }

    /// A fresh id (operator calls and storages share the sequence).
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The id the next call of [`LaunchQueue::next_id`] returns.
    pub fn peek_id(&self) -> u64 {
        self.next_id
    }

    /// Charges the host `ns` of work of kind `what` (`Metrics::host_ns_by`); generating
    /// kernels (`compile`) and tracing graphs for compilation (`trace`) are compile time.
    pub fn charge(&mut self, what: &str, ns: f64) {
        self.host_ns += ns;
        let m = &mut self.metrics;
        m.host_busy_ns += ns;
        if matches!(what, "compile" | "trace") {
            m.compile_ns += ns;
        }
        // Every operator call charges: no new key string unless the kind is new.
        match m.host_ns_by.get_mut(what) {
            Some(v) => *v += ns,
            None => {
                m.host_ns_by.insert(what.to_string(), ns);
            }
        }
    }

    /// Starts `launch` on `device` for operator `tag`, submitted at the host's current time;
    /// it writes `writes`.
    pub fn launch(
        &mut self,
        device: &dyn Device,
        mut launch: Launch,
        tag: &OpTag,
        writes: Writes,
    ) -> Result<()> {
        launch.submit_ns = self.start_ns(launch.targets.iter().flat_map(|t| {
            t.args.iter().filter_map(|a| match a {
                KernelArg::Buffer(b) => Some(*b),
                KernelArg::Scalar(_) => None,
            })
        }));
        let id = device
            .launch(&launch)
            .map_err(|e| super::fault_at(tag, e))?;
        self.adopt(device, id, tag.clone(), writes)
    }

    /// Takes over the bookkeeping of a launch made elsewhere (a collective launched once for
    /// every runtime of a mesh): the host pays the launch, it counts, and it is waited for
    /// like this runtime's own.
    pub fn adopt(
        &mut self,
        device: &dyn Device,
        id: LaunchId,
        tag: OpTag,
        writes: Writes,
    ) -> Result<()> {
        self.charge("launch", self.costs.launch_ns);
        self.metrics.kernels_launched += 1;
        self.outstanding.push((id, tag, writes));
        if self.blocking {
            self.wait_all(device)?;
        }
        Ok(())
    }

    /// Waits for every outstanding launch and every landing; the host clock moves to when the
    /// device finished. The first fault is reported with its operator.
    pub fn wait_all(&mut self, device: &dyn Device) -> Result<()> {
        let (end, fault) = self.wait_launches(device);
        self.host_ns = self.host_ns.max(end).max(self.device_done_ns);
        self.landing.clear();
        match fault {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for every outstanding launch, counting what it did; returns the latest end of
    /// those that completed (0 for none) and the first fault, with its operator.
    fn wait_launches(&mut self, device: &dyn Device) -> (f64, Option<TpuError>) {
        let mut last: f64 = 0.0;
        let mut first: Option<TpuError> = None;
        for (id, tag, writes) in std::mem::take(&mut self.outstanding) {
            match device.wait(id) {
                Ok(c) => {
                    last = last.max(c.end_ns);
                    self.metrics.device_busy_ns += c.end_ns - c.start_ns;
                    self.metrics.hbm_bytes += c.counters.hbm_bytes;
                    self.metrics.mxu_flops += c.counters.mxu_flops;
                    self.metrics.ici_bytes += c.counters.ici_bytes;
                }
                Err(e) => {
                    let e = super::fault_at(&tag, e);
                    self.not_computed(writes, &tag.name, &e);
                    if first.is_none() {
                        first = Some(e);
                    }
                }
            }
        }
        (last, first)
    }

    /// `s` is written whole again before the next synchronisation marks it: it will hold a
    /// computed value (see [`super::checks::Checks::overwritten`]).
    pub fn overwritten(&mut self, s: &std::sync::Arc<Storage>) {
        if !self.not_computed.is_empty() {
            let p = std::sync::Arc::as_ptr(s);
            self.not_computed.retain(|(w, _)| w.as_ptr() != p);
        }
    }

    /// `writes` were not computed because of `e` (an error of operator `op`): reading them
    /// raises. A stopped launch's storages raise an error, not the `KeyboardInterrupt` that
    /// reported the Ctrl-C.
    pub fn not_computed(&mut self, writes: Writes, op: &str, e: &TpuError) {
        if writes.is_empty() {
            return;
        }
        let e = match e {
            TpuError::Interrupted(m) => TpuError::InOp {
                op: op.to_string(),
                message: format!("this result was not computed: its kernel was stopped ({m})"),
            },
            other => other.clone(),
        };
        self.not_computed
            .extend(writes.into_iter().map(|w| (w, e.clone())));
    }
}
