//! Collectives another engine carries out for this chip.
//!
//! When PyTorch runs one process per chip (`torchrun`), a collective's bytes move between the
//! processes through torch.distributed's own transport (gloo), not through this runtime; what
//! the runtime owns is the chip's side of it in simulated time. A bridge calls, per collective:
//!
//! 1. [`Runtime::begin_collective`]: runs what DeferAndFuse recorded, waits for the chip's
//!    kernels *without* moving the host clock (the host only enqueues a collective), charges the
//!    host a dispatch and a launch, and says when this chip reaches the collective: the later
//!    of the host's enqueue and the device finishing the work issued before it (a collective is
//!    ordered after the stream's earlier work, as an NCCL or XLA collective is).
//! 2. [`Runtime::peek_view`] / [`Runtime::land_view`]: the input's bytes out and the result's
//!    bytes in, untimed ([`tpuemu_isa::Device::peek`], [`tpuemu_isa::Device::deliver`]); a
//!    landed buffer is ready at the collective's end: a kernel or a host read that uses it
//!    starts no earlier.
//! 3. [`Runtime::end_collective`]: counts it (`Metrics::collectives`) and, when profiling,
//!    draws it on the chip's `collective` link lane and the host's `aten` lane.
//!
//! The ranks agree on the start (the last rank to arrive) and the duration (the interconnect
//! model) among themselves; [`Runtime::wait_until`] is a stream waiting for a collective's end
//! (PyTorch's `Work.wait()`). Compute that does not read the result goes on meanwhile: an
//! asynchronous collective overlaps it, as on hardware.

use serde_json::json;
use tpuemu_isa::trace::{Args, Span, TraceEvent, Track};

use super::Runtime;
use crate::error::Result;
use crate::raw_view::RawView;
use crate::storage::StorageRef;

/// A collective this chip has reached ([`Runtime::begin_collective`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveEntry {
    /// The operator id its trace spans carry.
    pub op_id: u64,
    /// Host clock when the call began, ns.
    pub call_ns: f64,
    /// Host clock once it was enqueued (after the dispatch and launch costs), ns.
    pub issued_ns: f64,
    /// When the device finishes the work issued before it, ns.
    pub device_ns: f64,
}

impl CollectiveEntry {
    /// When this chip is ready to start the collective: enqueued, and the work before it done.
    pub fn ready_ns(&self) -> f64 {
        self.issued_ns.max(self.device_ns)
    }
}

/// A finished collective, as the chip saw it ([`Runtime::end_collective`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveRecord {
    /// The entry [`Runtime::begin_collective`] returned.
    pub entry: CollectiveEntry,
    /// The kind (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, `broadcast`,
    /// `send`, `recv`, `barrier`, ...), the key of `Metrics::collectives`.
    pub kind: String,
    /// What the trace calls it (`all_reduce sum 64.0 MiB [dp]`).
    pub label: String,
    /// Payload bytes of this chip's tensors (input, or output where it is larger).
    pub bytes: u64,
    /// Simulated start (when the last rank arrived) and end, ns.
    pub start_ns: f64,
    /// See `start_ns`.
    pub end_ns: f64,
    /// More for the trace (group, ranks, axes, sequence number, how it was timed).
    pub args: Args,
}

/// Per-kind collective counters (`Metrics::collectives`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CollectiveStats {
    /// Collectives run.
    pub calls: u64,
    /// Payload bytes (see [`CollectiveRecord::bytes`]).
    pub bytes: u64,
    /// Simulated time from start to end, summed, ns.
    pub ns: f64,
    /// Simulated time this chip waited for the last rank to arrive, summed, ns.
    pub wait_ns: f64,
}

impl Runtime {
    /// This chip reaches a collective named `name` (an operator call: `c10d::allreduce_`).
    pub fn begin_collective(&self, name: &str, shapes: String) -> Result<CollectiveEntry> {
        let mut st = self.lock();
        let call_ns = st.core.q.host_ns;
        st.flush(self, "collective")?;
        let q = &mut st.core.q;
        let id = q.next_id();
        q.metrics.ops += 1;
        *q.metrics.ops_by_name.entry(name.to_string()).or_default() += 1;
        let (dispatch, launch) = (q.costs.op_dispatch_ns, q.costs.launch_ns);
        q.charge("collective", dispatch);
        q.charge("launch", launch);
        let issued_ns = q.host_ns;
        let device_ns = q.drain(self.inner.device.as_ref())?;
        if st.core.prof.on {
            let mut s = Span::new(
                Track::Host {
                    lane: "aten".into(),
                },
                name,
                call_ns,
                issued_ns,
            );
            s.op_id = Some(id);
            s.args.insert("shapes".into(), json!(shapes));
            s.args.insert("mode".into(), json!(st.mode().name()));
            st.core.prof.events.push(TraceEvent::Span(s));
        }
        Ok(CollectiveEntry {
            op_id: id,
            call_ns,
            issued_ns,
            device_ns,
        })
    }

    /// A view's elements (row-major) for a collective, without moving the host clock or
    /// counting a transfer. Runs what is recorded and waits for the kernels first.
    pub fn peek_view(&self, storage: &StorageRef, view: &RawView) -> Result<Vec<u8>> {
        view.check(storage)?;
        let es = view.elem_size;
        let (lo, hi) = view.span();
        let mut span = vec![0u8; (hi - lo) * es];
        if !span.is_empty() {
            let buf = self.ensure_buffer(storage)?;
            let mut st = self.lock();
            if st.exec.holds(storage.id()) {
                st.flush(self, "collective")?;
            }
            st.core.q.drain(self.inner.device.as_ref())?;
            self.inner.device.peek(buf, (lo * es) as u64, &mut span)?;
        }
        Ok(view.gather(lo, span))
    }

    /// Stores a collective's result (the view's elements, row-major) in a view of `storage`,
    /// ready at `ready_ns`: kernels and host reads that use the storage start no earlier. Moves
    /// no clock and counts no transfer.
    pub fn land_view(
        &self,
        storage: &StorageRef,
        view: &RawView,
        data: &[u8],
        ready_ns: f64,
    ) -> Result<()> {
        view.check_write(storage, data)?;
        if data.is_empty() {
            return Ok(());
        }
        let es = view.elem_size;
        let (lo, hi) = view.span();
        let bytes = if view.is_dense() {
            data.to_vec()
        } else {
            let mut span = self.peek_view(
                storage,
                &RawView {
                    shape: vec![hi - lo],
                    strides: vec![1],
                    offset: lo,
                    elem_size: es,
                },
            )?;
            view.scatter(lo, data, &mut span);
            span
        };
        let buf = self.ensure_buffer(storage)?;
        let mut st = self.lock();
        if st.exec.holds(storage.id()) {
            st.flush(self, "collective")?;
        }
        st.core.q.drain(self.inner.device.as_ref())?;
        self.inner.device.deliver(buf, (lo * es) as u64, &bytes)?;
        st.core.q.land(buf, ready_ns);
        Ok(())
    }

    /// When the chip finishes the work issued so far (an event recorded on its stream), without
    /// moving the host clock: runs what is recorded and waits for the kernels.
    pub fn device_time_ns(&self) -> Result<f64> {
        let mut st = self.lock();
        st.flush(self, "event")?;
        let q = &mut st.core.q;
        let done = q.drain(self.inner.device.as_ref())?;
        Ok(done.max(q.host_ns))
    }

    /// Launches made from now on start at `ns` or later (a stream waiting for an event: the
    /// end of a collective whose `Work` was waited for).
    pub fn wait_until(&self, ns: f64) {
        self.lock().core.q.fence(ns);
    }

    /// A collective is over: counts it and draws it when profiling.
    pub fn end_collective(&self, r: CollectiveRecord) {
        let mut st = self.lock();
        let core = &mut st.core;
        let m = core
            .q
            .metrics
            .collectives
            .entry(r.kind.clone())
            .or_default();
        m.calls += 1;
        m.bytes += r.bytes;
        m.ns += r.end_ns - r.start_ns;
        m.wait_ns += (r.start_ns - r.entry.ready_ns()).max(0.0);
        core.q.device_done_ns = core.q.device_done_ns.max(r.end_ns);
        if core.prof.on {
            let mut s = Span::new(
                Track::Link {
                    chip: self.inner.chip,
                    link: "collective".into(),
                },
                r.label,
                r.start_ns,
                r.end_ns.max(r.start_ns),
            );
            s.op_id = Some(r.entry.op_id);
            s.args = r.args;
            s.args.insert("kind".into(), json!(r.kind));
            s.args.insert("bytes".into(), json!(r.bytes));
            s.args.insert("ready_ns".into(), json!(r.entry.ready_ns()));
            core.prof.events.push(TraceEvent::Span(s));
        }
    }
}
