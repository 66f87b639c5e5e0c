//! The launch queue: the simulated host clock, ids, metrics and the work in flight.
//!
//! Every kernel the backend starts goes through [`LaunchQueue::launch`] (or, for a launch that
//! spans several runtimes such as a collective, [`LaunchQueue::adopt`]): it stamps the launch
//! with the host's current time, charges the host the launch cost, counts it, remembers it
//! until it is waited for, and — in Debug mode — waits for it at once, so that a fault is
//! reported at the operator that caused it.

use tpuemu_isa::{Device, Launch, LaunchId};

use super::config::HostCosts;
use super::metrics::Metrics;
use crate::error::{Result, TpuError};
use crate::ir::OpTag;

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
    outstanding: Vec<(LaunchId, OpTag)>,
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

    /// Starts `launch` on `device` for operator `tag`, submitted at the host's current time.
    pub fn launch(&mut self, device: &dyn Device, mut launch: Launch, tag: &OpTag) -> Result<()> {
        launch.submit_ns = self.host_ns;
        let id = device
            .launch(&launch)
            .map_err(|e| super::fault_at(tag, e))?;
        self.adopt(device, id, tag.clone())
    }

    /// Takes over the bookkeeping of a launch made elsewhere (a collective launched once for
    /// every runtime of a mesh): the host pays the launch, it counts, and it is waited for
    /// like this runtime's own.
    pub fn adopt(&mut self, device: &dyn Device, id: LaunchId, tag: OpTag) -> Result<()> {
        self.charge("launch", self.costs.launch_ns);
        self.metrics.kernels_launched += 1;
        self.outstanding.push((id, tag));
        if self.blocking {
            self.wait_all(device)?;
        }
        Ok(())
    }

    /// Waits for every outstanding launch; the host clock moves to when the device finished.
    /// The first fault is reported with its operator.
    pub fn wait_all(&mut self, device: &dyn Device) -> Result<()> {
        let mut first: Option<TpuError> = None;
        for (id, tag) in std::mem::take(&mut self.outstanding) {
            match device.wait(id) {
                Ok(c) => {
                    self.host_ns = self.host_ns.max(c.end_ns);
                    self.metrics.device_busy_ns += c.end_ns - c.start_ns;
                    self.metrics.hbm_bytes += c.counters.hbm_bytes;
                    self.metrics.mxu_flops += c.counters.mxu_flops;
                    self.metrics.ici_bytes += c.counters.ici_bytes;
                }
                Err(e) => {
                    if first.is_none() {
                        first = Some(super::fault_at(&tag, e));
                    }
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
