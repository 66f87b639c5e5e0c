//! Host-side trace events and the assembled trace.
//!
//! Host lanes: `aten` (every operator call, nested for decompositions), `queue` (DeferAndFuse
//! flushes and fused groups). Device spans come from the device. Flows link each operator to
//! the kernels it launched.

use std::collections::HashMap;

use serde_json::json;
use tpuemu_isa::trace::{Flow, Span, Trace, TraceEvent, TraceMeta, Track};

use super::Runtime;
use super::config::Mode;
use crate::ir::OpTag;

/// Host trace events of a runtime, recorded while profiling is on.
#[derive(Default)]
pub(crate) struct Profiler {
    /// Recording.
    pub on: bool,
    /// Host events so far.
    pub events: Vec<TraceEvent>,
    /// Operator spans opened and not yet closed: (op id, start ns).
    open_ops: Vec<(u64, f64)>,
}

impl Profiler {
    /// An operator call starts at `start`.
    pub fn op_begin(&mut self, tag: &OpTag, start: f64) {
        if self.on {
            self.open_ops.push((tag.id, start));
        }
    }

    /// An operator call ends at `now`.
    pub fn op_end(&mut self, tag: &OpTag, now: f64, mode: Mode) {
        let start = match self.open_ops.iter().rposition(|(id, _)| *id == tag.id) {
            Some(i) => self.open_ops.remove(i).1,
            None => return,
        };
        let mut s = Span::new(
            Track::Host {
                lane: "aten".into(),
            },
            tag.name.to_string(),
            start,
            now,
        );
        s.op_id = Some(tag.id);
        s.args
            .insert("shapes".into(), json!(tag.shapes.to_string()));
        s.args.insert("mode".into(), json!(mode.name()));
        self.events.push(TraceEvent::Span(s));
    }

    /// Records a host span on the `queue` lane (flushes, fused groups).
    pub fn queue_span(
        &mut self,
        name: String,
        start: f64,
        end: f64,
        group: Option<u64>,
        args: tpuemu_isa::trace::Args,
    ) {
        if !self.on {
            return;
        }
        let mut s = Span::new(
            Track::Host {
                lane: "queue".into(),
            },
            name,
            start,
            end,
        );
        s.group_id = group;
        s.args = args;
        self.events.push(TraceEvent::Span(s));
    }
}

impl Runtime {
    /// Records host and device events from now on (or stops).
    pub fn set_profiling(&self, on: bool) {
        self.lock().core.prof.on = on;
        self.inner.device.set_profiling(on);
    }

    /// The events recorded so far, host and device, with flows from operators to their
    /// kernels; takes them (the next call starts empty).
    pub fn take_trace(&self, label: &str) -> Trace {
        let host: Vec<TraceEvent> = std::mem::take(&mut self.lock().core.prof.events);
        let device = self.inner.device.drain_events();
        let mut op_end: HashMap<u64, (f64, f64)> = HashMap::new();
        for e in &host {
            if let TraceEvent::Span(s) = e
                && s.track
                    == (Track::Host {
                        lane: "aten".into(),
                    })
                && let Some(id) = s.op_id
            {
                op_end.insert(id, (s.start_ns, s.end_ns));
            }
        }
        let mut flows = Vec::new();
        for e in &device {
            if let TraceEvent::Span(s) = e
                && matches!(s.track, Track::Kernel { .. })
                && let Some(id) = s.op_id
                && let Some((start, end)) = op_end.get(&id)
            {
                flows.push(TraceEvent::Flow(Flow {
                    id: flows.len() as u64 + 1,
                    name: "launch".into(),
                    from: Track::Host {
                        lane: "aten".into(),
                    },
                    from_ns: end.min(s.start_ns).max(*start),
                    to: s.track.clone(),
                    to_ns: s.start_ns,
                }));
            }
        }
        let info = &self.inner.info;
        Trace {
            meta: TraceMeta {
                label: label.to_string(),
                generation: self.inner.device.topology().generation.clone(),
                clock_hz: info.core.clock_hz,
                peak_bf16_flops: info.peak_bf16_flops,
                hbm_bytes_per_s: info.hbm_bytes_per_s,
                chips: self.inner.device.topology().num_chips() as u32,
                ..Default::default()
            },
            events: host.into_iter().chain(device).chain(flows).collect(),
        }
    }
}
