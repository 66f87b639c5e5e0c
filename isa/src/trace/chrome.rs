//! Chrome trace event JSON: the one on-disk trace format.
//!
//! Layout written by [`to_chrome_json`]:
//! - process 0 is the host; chip `c` is process `c + 1`, named `chip c (<generation>)`;
//! - every [`Track`] is a thread of its process, named by [`Track::label`] and sorted so that
//!   kernels come first, then regions, units, DMA engines and links;
//! - spans are complete events (`ph: "X"`, times in µs); our own fields go in `args`: `track`
//!   (the track, so the file reads back exactly), `op_id`, `group_id`, `start_cycle`,
//!   `end_cycle`, then the span's own args;
//! - flows are `ph: "s"` / `ph: "f"` pairs (binding to the enclosing slice), counters `ph: "C"`;
//! - `otherData.tpuemu` holds the [`TraceMeta`](super::TraceMeta).
//!
//! [`from_chrome_json`] reads that back, and also reads foreign Chrome traces (complete events,
//! begin/end pairs, flows, counters), putting their threads on host tracks.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

pub use super::chrome_read::from_chrome_json;
use super::{Trace, TraceEvent, Track};

/// Keys of `args` that the format itself uses.
pub(super) const RESERVED: &[&str] = &["track", "op_id", "group_id", "start_cycle", "end_cycle"];

/// Why a file is not a readable trace.
#[derive(Debug, thiserror::Error)]
pub enum ChromeTraceError {
    /// Not JSON at all.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON, but not a Chrome trace.
    #[error("not a Chrome trace: {0}")]
    Shape(String),
}

fn pid_of(track: &Track) -> u64 {
    track.chip().map_or(0, |c| c as u64 + 1)
}

fn track_rank(track: &Track) -> (u8, String) {
    let kind = match track {
        Track::Host { lane } => match lane.as_str() {
            "aten" => 0,
            "queue" => 1,
            _ => 2,
        },
        Track::Kernel { .. } => 3,
        Track::Marker { .. } => 4,
        Track::Unit { .. } => 5,
        Track::Dma { .. } => 6,
        Track::Link { .. } => 7,
    };
    (kind, format!("{track:?}"))
}

/// Assigns every track a (pid, tid), deterministic in the set of tracks.
fn thread_ids(trace: &Trace) -> BTreeMap<Track, (u64, u64)> {
    let mut tracks: Vec<&Track> = Vec::new();
    for ev in &trace.events {
        match ev {
            TraceEvent::Span(s) => tracks.push(&s.track),
            TraceEvent::Flow(f) => {
                tracks.push(&f.from);
                tracks.push(&f.to);
            }
            TraceEvent::Counter(_) => {}
        }
    }
    tracks.sort_by(|a, b| {
        (pid_of(a), a.chip(), track_rank(a)).cmp(&(pid_of(b), b.chip(), track_rank(b)))
    });
    tracks.dedup();
    let mut next: HashMap<u64, u64> = HashMap::new();
    let mut ids = BTreeMap::new();
    for t in tracks {
        let pid = pid_of(t);
        let tid = next.entry(pid).or_insert(0);
        *tid += 1;
        ids.insert(t.clone(), (pid, *tid));
    }
    ids
}

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

/// Converts a trace to Chrome trace event JSON.
pub fn to_chrome_value(trace: &Trace) -> Value {
    let ids = thread_ids(trace);
    let mut out: Vec<Value> = Vec::with_capacity(trace.events.len() + ids.len() * 2 + 8);
    let mut pids: Vec<u64> = ids.values().map(|(p, _)| *p).collect();
    pids.extend(trace.counters().map(|c| c.chip.map_or(0, |c| c as u64 + 1)));
    pids.sort_unstable();
    pids.dedup();
    for pid in &pids {
        let name = if *pid == 0 {
            "host".to_string()
        } else if trace.meta.generation.is_empty() {
            format!("chip {}", pid - 1)
        } else {
            format!("chip {} ({})", pid - 1, trace.meta.generation)
        };
        out.push(json!({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}));
        out.push(json!({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}}));
    }
    for (track, (pid, tid)) in &ids {
        out.push(json!({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": track.label()}}));
        out.push(json!({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}));
    }
    for ev in &trace.events {
        match ev {
            TraceEvent::Span(s) => {
                let (pid, tid) = ids[&s.track];
                let mut args = Map::new();
                args.insert(
                    "track".into(),
                    serde_json::to_value(&s.track).expect("track serializes"),
                );
                if let Some(op) = s.op_id {
                    args.insert("op_id".into(), op.into());
                }
                if let Some(g) = s.group_id {
                    args.insert("group_id".into(), g.into());
                }
                if let Some((a, b)) = s.cycles {
                    args.insert("start_cycle".into(), a.into());
                    args.insert("end_cycle".into(), b.into());
                }
                for (k, v) in &s.args {
                    args.insert(k.clone(), v.clone());
                }
                out.push(json!({
                    "ph": "X", "pid": pid, "tid": tid, "name": s.name, "cat": category(&s.track),
                    "ts": us(s.start_ns), "dur": us(s.end_ns - s.start_ns), "args": Value::Object(args),
                }));
            }
            TraceEvent::Flow(f) => {
                let (p0, t0) = ids[&f.from];
                let (p1, t1) = ids[&f.to];
                out.push(json!({"ph": "s", "id": f.id, "pid": p0, "tid": t0, "ts": us(f.from_ns), "name": f.name, "cat": "flow"}));
                out.push(json!({"ph": "f", "bp": "e", "id": f.id, "pid": p1, "tid": t1, "ts": us(f.to_ns), "name": f.name, "cat": "flow"}));
            }
            TraceEvent::Counter(c) => {
                let pid = c.chip.map_or(0, |c| c as u64 + 1);
                out.push(json!({"ph": "C", "pid": pid, "tid": 0, "name": c.name, "ts": us(c.ns), "args": {c.name.clone(): c.value}}));
            }
        }
    }
    json!({
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {"tpuemu": serde_json::to_value(&trace.meta).expect("meta serializes")},
    })
}

fn category(track: &Track) -> &'static str {
    match track {
        Track::Host { .. } => "host",
        Track::Kernel { .. } => "kernel",
        Track::Marker { .. } => "region",
        Track::Unit { .. } => "unit",
        Track::Dma { .. } => "dma",
        Track::Link { .. } => "ici",
    }
}

/// Converts a trace to Chrome trace event JSON text.
pub fn to_chrome_json(trace: &Trace) -> String {
    serde_json::to_string(&to_chrome_value(trace)).expect("trace serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instr::Unit;
    use crate::reg::Mxu;
    use crate::trace::{Counter, Flow, Span, TraceMeta};

    fn sample() -> Trace {
        let mut k = Span::new(Track::Kernel { chip: 0, core: 0 }, "mm", 1000.0, 5000.0);
        k.op_id = Some(7);
        k.group_id = Some(2);
        k.cycles = Some((1500, 7500));
        k.args.insert("flops".into(), json!(1024));
        let m = Span::new(
            Track::Unit {
                chip: 0,
                core: 0,
                unit: Unit::Mxu(Mxu::n(1)),
            },
            "mxu.mm",
            1200.0,
            4000.0,
        );
        let h = Span::new(
            Track::Host {
                lane: "aten".into(),
            },
            "aten::mm",
            0.0,
            900.0,
        );
        Trace {
            meta: TraceMeta {
                label: "t".into(),
                generation: "v5e".into(),
                clock_hz: 1.5e9,
                chips: 1,
                ..Default::default()
            },
            events: vec![
                TraceEvent::Span(h),
                TraceEvent::Span(k),
                TraceEvent::Span(m),
                TraceEvent::Flow(Flow {
                    id: 1,
                    name: "launch".into(),
                    from: Track::Host {
                        lane: "aten".into(),
                    },
                    from_ns: 800.0,
                    to: Track::Kernel { chip: 0, core: 0 },
                    to_ns: 1000.0,
                }),
                TraceEvent::Counter(Counter {
                    chip: Some(0),
                    name: "hbm_bytes_in_use".into(),
                    ns: 1000.0,
                    value: 4096.0,
                }),
            ],
        }
    }

    #[test]
    fn round_trips_our_traces() {
        let t = sample();
        let back = from_chrome_json(&to_chrome_json(&t)).unwrap();
        assert_eq!(back.meta, t.meta);
        let spans: Vec<_> = back.spans().cloned().collect();
        assert_eq!(spans, t.spans().cloned().collect::<Vec<_>>());
        assert_eq!(back.flows().count(), 1);
        assert_eq!(back.flows().next().unwrap(), t.flows().next().unwrap());
        assert_eq!(
            back.counters().next().unwrap(),
            t.counters().next().unwrap()
        );
    }

    #[test]
    fn structure_is_chrome_trace() {
        let v = to_chrome_value(&sample());
        let evs = v["traceEvents"].as_array().unwrap();
        let x: Vec<_> = evs.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 3);
        for e in &x {
            assert!(e["ts"].is_number() && e["dur"].as_f64().unwrap() >= 0.0);
            assert!(e["pid"].is_u64() && e["tid"].is_u64());
        }
        // Host spans live in process 0, chip 0 in process 1.
        assert!(x.iter().any(|e| e["pid"] == 0 && e["name"] == "aten::mm"));
        assert!(x.iter().any(|e| e["pid"] == 1 && e["name"] == "mm"));
        assert!(evs.iter().any(|e| e["ph"] == "s") && evs.iter().any(|e| e["ph"] == "f"));
        assert!(
            evs.iter()
                .any(|e| e["ph"] == "M" && e["name"] == "thread_name")
        );
    }

    #[test]
    fn reads_foreign_begin_end_events() {
        let text = r#"[{"ph":"B","pid":3,"tid":4,"ts":1.0,"name":"a"},{"ph":"E","pid":3,"tid":4,"ts":2.5}]"#;
        let t = from_chrome_json(text).unwrap();
        let s: Vec<_> = t.spans().collect();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].start_ns, s[0].end_ns), (1000.0, 2500.0));
    }

    #[test]
    fn rejects_non_traces() {
        let why = |text: &str| from_chrome_json(text).unwrap_err().to_string();
        assert!(why("{").starts_with("not JSON"), "{}", why("{"));
        assert!(why("{\"a\": 1}").contains("no `traceEvents`"));
        assert!(why("[{\"pid\": 1}]").contains("event 0 has no `ph`"));
        assert!(why("[{\"ph\":\"X\"}, {\"pid\": 1}]").contains("event 1 has no `ph`"));
        assert!(why("42").contains("object or an array"));
        assert!(why("[] x").starts_with("not JSON"));
        assert!(why("{\"traceEvents\": 3}").starts_with("not JSON"));
    }

    #[test]
    fn names_threads_whose_metadata_comes_last_and_joins_flows() {
        let text = r#"{"traceEvents": [
            {"ph":"X","pid":1,"tid":2,"ts":1.0,"dur":2.0,"name":"work","args":{"n":3}},
            {"ph":"s","pid":1,"tid":2,"ts":1.5,"id":"0x10","name":"dep"},
            {"ph":"f","pid":1,"tid":5,"ts":4.0,"id":16,"bp":"e"},
            {"ph":"X","pid":1,"tid":5,"ts":4.0,"dur":1.0,"name":"later"},
            {"ph":"C","pid":0,"ts":2.0,"name":"mem","args":{"bytes":7}},
            {"ph":"M","pid":1,"tid":2,"name":"thread_name","args":{"name":"worker"}}
        ], "otherData": {"unrelated": true}, "displayTimeUnit": "ns"}"#;
        let t = from_chrome_json(text).unwrap();
        let spans: Vec<_> = t.spans().collect();
        assert_eq!(spans.len(), 2);
        assert_eq!(
            spans[0].track,
            Track::Host {
                lane: "worker".into()
            }
        );
        assert_eq!(spans[0].args.get("n"), Some(&json!(3)));
        assert_eq!(
            spans[1].track,
            Track::Host {
                lane: "pid 1 tid 5".into()
            }
        );
        let flows: Vec<_> = t
            .events
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Flow(f) => Some(f),
                _ => None,
            })
            .collect();
        assert_eq!(flows.len(), 1);
        assert_eq!(
            flows[0].from,
            Track::Host {
                lane: "worker".into()
            }
        );
        assert_eq!((flows[0].from_ns, flows[0].to_ns), (1500.0, 4000.0));
        let counters = t
            .events
            .iter()
            .filter(|e| matches!(e, TraceEvent::Counter(c) if c.name == "bytes" && c.value == 7.0))
            .count();
        assert_eq!(counters, 1);
        assert_eq!(t.meta, TraceMeta::default());
    }
}
