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
//! - `otherData.tpuemu` holds the [`TraceMeta`].
//!
//! [`from_chrome_json`] reads that back, and also reads foreign Chrome traces (complete events,
//! begin/end pairs, flows, counters), putting their threads on host tracks.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::{Args, Counter, Flow, Span, Trace, TraceEvent, TraceMeta, Track};

/// Keys of `args` that the format itself uses.
const RESERVED: &[&str] = &["track", "op_id", "group_id", "start_cycle", "end_cycle"];

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

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Reads Chrome trace event JSON (ours or anyone's).
pub fn from_chrome_json(text: &str) -> Result<Trace, ChromeTraceError> {
    let root: Value = serde_json::from_str(text)?;
    let (events, meta) = match &root {
        Value::Array(a) => (a.as_slice(), TraceMeta::default()),
        Value::Object(o) => {
            let evs = o
                .get("traceEvents")
                .and_then(Value::as_array)
                .ok_or_else(|| ChromeTraceError::Shape("no `traceEvents` array".into()))?;
            let meta = o
                .get("otherData")
                .and_then(|d| d.get("tpuemu"))
                .and_then(|m| serde_json::from_value(m.clone()).ok())
                .unwrap_or_default();
            (evs.as_slice(), meta)
        }
        _ => {
            return Err(ChromeTraceError::Shape(
                "expected an object or an array".into(),
            ));
        }
    };

    let mut thread_names: HashMap<(u64, u64), String> = HashMap::new();
    for e in events {
        if e.get("ph").and_then(Value::as_str) == Some("M")
            && e.get("name").and_then(Value::as_str) == Some("thread_name")
        {
            let pid = e.get("pid").and_then(Value::as_u64).unwrap_or(0);
            let tid = e.get("tid").and_then(Value::as_u64).unwrap_or(0);
            if let Some(n) = e.pointer("/args/name").and_then(Value::as_str) {
                thread_names.insert((pid, tid), n.to_string());
            }
        }
    }
    // Tracks seen per (pid, tid), so flow ends can be placed on the same track as spans.
    let mut tracks: HashMap<(u64, u64), Track> = HashMap::new();
    let host_track = |pid: u64, tid: u64, names: &HashMap<(u64, u64), String>| Track::Host {
        lane: names
            .get(&(pid, tid))
            .cloned()
            .unwrap_or_else(|| format!("pid {pid} tid {tid}")),
    };

    let mut out = Vec::new();
    // Open `B` events per (pid, tid) track: name, start, args.
    type OpenSpans = HashMap<(u64, u64), Vec<(String, f64, Args)>>;
    let mut open: OpenSpans = HashMap::new();
    let mut flow_starts: HashMap<u64, (String, (u64, u64), f64)> = HashMap::new();
    let mut flow_ends: Vec<(u64, (u64, u64), f64)> = Vec::new();

    for (i, e) in events.iter().enumerate() {
        let Some(ph) = e.get("ph").and_then(Value::as_str) else {
            return Err(ChromeTraceError::Shape(format!("event {i} has no `ph`")));
        };
        let pid = e.get("pid").and_then(Value::as_u64).unwrap_or(0);
        let tid = e.get("tid").and_then(Value::as_u64).unwrap_or(0);
        let ts = num(e, "ts").unwrap_or(0.0) * 1000.0;
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match ph {
            "X" => {
                let dur = num(e, "dur").unwrap_or(0.0) * 1000.0;
                let args = e
                    .get("args")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let track = match args
                    .get("track")
                    .map(|t| serde_json::from_value::<Track>(t.clone()))
                {
                    Some(Ok(t)) => t,
                    _ => host_track(pid, tid, &thread_names),
                };
                tracks.entry((pid, tid)).or_insert_with(|| track.clone());
                out.push(TraceEvent::Span(span_from_args(
                    track,
                    name,
                    ts,
                    ts + dur,
                    &args,
                )));
            }
            "B" => {
                let args = e
                    .get("args")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                open.entry((pid, tid))
                    .or_default()
                    .push((name, ts, args.into_iter().collect()));
            }
            "E" => {
                if let Some((name, start, args)) = open.get_mut(&(pid, tid)).and_then(Vec::pop) {
                    let track = host_track(pid, tid, &thread_names);
                    tracks.entry((pid, tid)).or_insert_with(|| track.clone());
                    let mut s = Span::new(track, name, start, ts.max(start));
                    s.args = args;
                    out.push(TraceEvent::Span(s));
                }
            }
            "s" => {
                if let Some(id) = flow_id(e) {
                    flow_starts.insert(id, (name, (pid, tid), ts));
                }
            }
            "f" | "t" => {
                if let Some(id) = flow_id(e) {
                    flow_ends.push((id, (pid, tid), ts));
                }
            }
            "C" => {
                let chip = if pid == 0 {
                    None
                } else {
                    Some((pid - 1) as u32)
                };
                if let Some(args) = e.get("args").and_then(Value::as_object) {
                    for (k, v) in args {
                        if let Some(value) = v.as_f64() {
                            out.push(TraceEvent::Counter(Counter {
                                chip,
                                name: k.clone(),
                                ns: ts,
                                value,
                            }));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    for (id, to, to_ns) in flow_ends {
        if let Some((name, from, from_ns)) = flow_starts.get(&id) {
            let find = |k: (u64, u64)| {
                tracks
                    .get(&k)
                    .cloned()
                    .unwrap_or_else(|| host_track(k.0, k.1, &thread_names))
            };
            out.push(TraceEvent::Flow(Flow {
                id,
                name: name.clone(),
                from: find(*from),
                from_ns: *from_ns,
                to: find(to),
                to_ns,
            }));
        }
    }
    Ok(Trace { meta, events: out })
}

fn flow_id(e: &Value) -> Option<u64> {
    match e.get("id")? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s
            .parse()
            .ok()
            .or_else(|| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()),
        _ => None,
    }
}

fn span_from_args(
    track: Track,
    name: String,
    start_ns: f64,
    end_ns: f64,
    args: &Map<String, Value>,
) -> Span {
    let mut s = Span::new(track, name, start_ns, end_ns);
    s.op_id = args.get("op_id").and_then(Value::as_u64);
    s.group_id = args.get("group_id").and_then(Value::as_u64);
    if let (Some(a), Some(b)) = (
        args.get("start_cycle").and_then(Value::as_u64),
        args.get("end_cycle").and_then(Value::as_u64),
    ) {
        s.cycles = Some((a, b));
    }
    s.args = args
        .iter()
        .filter(|(k, _)| !RESERVED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instr::Unit;
    use crate::reg::Mxu;

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
        assert!(from_chrome_json("{").is_err());
        assert!(from_chrome_json("{\"a\": 1}").is_err());
        assert!(from_chrome_json("[{\"pid\": 1}]").is_err());
    }
}
