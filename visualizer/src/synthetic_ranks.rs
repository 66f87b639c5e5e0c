//! A synthetic distributed run: the rank traces `torchrun` processes write, one chip each,
//! for tests and screenshots of merged runs.
//!
//! Each rank runs the same step as [`crate::synthetic::mode_pair`]'s traces (matmuls and
//! element-wise operators, fused by three under DeferAndFuse), a little later the higher its
//! rank (its host is slower), inside a `train_step` Python call, then two collectives over
//! every rank: an `all_reduce` and an `all_gather`, each drawn on the rank's `collective` link
//! lane with the args the bridge writes and an operator on its `aten` lane. The ranks agree on
//! each collective's start (the last rank to arrive) and end, as joined clocks do.
//! Deterministic in its arguments.

use serde_json::json;
use tpuemu_isa::trace::{COLLECTIVE_LINK, MergeError, Span, Trace, TraceEvent, Track};

use crate::synthetic::mode_trace;

/// How much later each rank's host starts, ns.
const RANK_SKEW_NS: f64 = 4000.0;

/// The rank traces of a run of `ranks` ranks, each a step of `ops` operators (Strict, or
/// DeferAndFuse with `defer`) and two collectives; `label` is every rank's trace label.
pub fn rank_traces(ranks: u32, ops: usize, defer: bool, label: &str) -> Vec<Trace> {
    let mut traces: Vec<Trace> = (0..ranks)
        .map(|r| {
            let mut t = mode_trace(ops, defer);
            shift(&mut t, f64::from(r) * RANK_SKEW_NS);
            t.meta.label = label.to_string();
            t.meta.rank = Some(r);
            t.meta.world_size = Some(ranks);
            t.meta.slice = Some(format!("v5e:{ranks}"));
            t
        })
        .collect();
    // When each rank reaches the collectives: its host and its device are done.
    let ready: Vec<f64> = traces.iter().map(end_of).collect();
    let mut start = ready.iter().copied().fold(0.0, f64::max);
    let group: Vec<u32> = (0..ranks).collect();
    for (seq, (kind, op_name, mib, dur)) in [
        ("all_reduce", "c10d::allreduce_", 64.0, 40_000.0),
        ("all_gather", "c10d::_allgather_base_", 16.0, 15_000.0),
    ]
    .into_iter()
    .enumerate()
    {
        let seq = seq as u64 + 1;
        for (r, t) in traces.iter_mut().enumerate() {
            let op = t.spans().filter_map(|s| s.op_id).max().unwrap_or(0) + 1;
            let mut call = Span::new(
                Track::Host {
                    lane: "aten".into(),
                },
                op_name,
                ready[r] + (seq - 1) as f64 * 2500.0,
                ready[r] + (seq - 1) as f64 * 2500.0 + 2000.0,
            );
            call.op_id = Some(op);
            let mut s = Span::new(
                Track::Link {
                    chip: 0,
                    link: COLLECTIVE_LINK.into(),
                },
                format!("{kind} {mib:.1} MiB axes [0]"),
                start,
                start + dur,
            );
            s.op_id = Some(op);
            for (k, v) in [
                ("kind", json!(kind)),
                ("bytes", json!(mib * 1048576.0)),
                ("group", json!(group)),
                ("seq", json!(seq)),
                ("axes", json!([0])),
                ("slice", json!(format!("v5e:{ranks}"))),
                ("timed_as", json!(format!("{kind} over axes [0]"))),
                ("ready_ns", json!(ready[r])),
            ] {
                s.args.insert(k.into(), v);
            }
            t.events.push(TraceEvent::Span(call));
            t.events.push(TraceEvent::Span(s));
        }
        start += dur + 1000.0;
    }
    for (r, t) in traces.iter_mut().enumerate() {
        let end = end_of(t);
        let py = Span::new(
            Track::Host {
                lane: "python".into(),
            },
            "train_step",
            r as f64 * RANK_SKEW_NS,
            end,
        );
        t.events.insert(0, TraceEvent::Span(py));
    }
    traces
}

/// The rank traces merged ([`Trace::merge_ranks`]), labelled `label`.
pub fn rank_run(ranks: u32, ops: usize, defer: bool, label: &str) -> Result<Trace, MergeError> {
    Trace::merge_ranks(rank_traces(ranks, ops, defer, label))
}

fn end_of(t: &Trace) -> f64 {
    t.spans().map(|s| s.end_ns).fold(0.0, f64::max)
}

fn shift(t: &mut Trace, by: f64) {
    for ev in &mut t.events {
        match ev {
            TraceEvent::Span(s) => {
                s.start_ns += by;
                s.end_ns += by;
            }
            TraceEvent::Flow(f) => {
                f.from_ns += by;
                f.to_ns += by;
            }
            TraceEvent::Counter(c) => c.ns += by,
        }
    }
}
