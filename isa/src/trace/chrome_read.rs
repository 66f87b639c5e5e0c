//! Reading Chrome trace event JSON, ours or anyone's, in one streaming pass.
//!
//! The events are deserialized one at a time into a small typed record and turned into
//! [`TraceEvent`]s at once, so a file is never held as a JSON tree: opening a trace of a million
//! spans takes the text, the spans and little else. Thread names (`ph: "M"` metadata) may come
//! after the spans they name; host tracks are named once the whole file has been read.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::chrome::{ChromeTraceError, RESERVED};
use super::{Args, Counter, Flow, Span, Trace, TraceEvent, TraceMeta, Track};

/// One event as read: only the fields the reader uses (others are skipped unparsed).
#[derive(Deserialize)]
struct RawEvent {
    ph: Option<String>,
    pid: Option<Value>,
    tid: Option<Value>,
    ts: Option<Value>,
    dur: Option<Value>,
    name: Option<Value>,
    args: Option<Value>,
    id: Option<Value>,
}

/// A (pid, tid) thread.
type Thread = (u64, u64);

/// Where a span goes: a track named in the file, or the host track of a thread (named once
/// every `thread_name` has been read).
#[derive(Clone)]
enum Lane {
    Known(Track),
    Thread(Thread),
}

/// The reader's state while events stream by.
#[derive(Default)]
struct Reader {
    out: Vec<TraceEvent>,
    /// Indices in `out` of spans on a thread's host track, to name at the end.
    on_threads: Vec<(usize, Thread)>,
    thread_names: HashMap<Thread, String>,
    /// The lane of each thread's first span, so flow ends land where its spans are.
    lanes: HashMap<Thread, Lane>,
    /// Open `B` events per thread: name, start, args.
    open: HashMap<Thread, Vec<(String, f64, Args)>>,
    flow_starts: HashMap<u64, (String, Thread, f64)>,
    flow_ends: Vec<(u64, Thread, f64)>,
    /// The first event that is not an event, with why.
    error: Option<String>,
    seen: usize,
}

fn as_u64(v: &Option<Value>) -> u64 {
    match v {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

fn as_f64(v: &Option<Value>) -> Option<f64> {
    match v {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
}

/// Largest time (µs) or duration a trace may hold: about 31 years.
pub const MAX_TRACE_US: f64 = 1e15;

/// A time field (`ts`, `dur`) of event `i` in ns: 0 when absent; an error naming the event,
/// the field and the value when it is not a finite number within ±[`MAX_TRACE_US`] µs, or when a
/// duration is negative.
fn time_ns(v: &Option<Value>, field: &str, i: usize, ph: &str) -> Result<f64, String> {
    let Some(raw) = v else { return Ok(0.0) };
    let bad = |why: &str| format!("event {i} (ph `{ph}`): `{field}` is {raw}; {why}");
    let x = match as_f64(v) {
        Some(x) if x.is_finite() => x,
        _ => return Err(bad("expected a finite number of microseconds")),
    };
    if x.abs() > MAX_TRACE_US {
        return Err(bad(&format!(
            "expected at most {MAX_TRACE_US:e} microseconds"
        )));
    }
    if field == "dur" && x < 0.0 {
        return Err(bad("a duration cannot be negative"));
    }
    Ok(x * 1000.0)
}

fn flow_id(v: &Option<Value>) -> Option<u64> {
    match v.as_ref()? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s
            .parse()
            .ok()
            .or_else(|| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()),
        _ => None,
    }
}

fn into_object(v: Option<Value>) -> Map<String, Value> {
    match v {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// A complete event's span: our reserved `args` become the span's fields, the rest its args.
fn span_from_args(
    track: Track,
    name: String,
    start_ns: f64,
    end_ns: f64,
    mut args: Map<String, Value>,
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
    args.retain(|k, _| !RESERVED.contains(&k.as_str()));
    s.args = args.into_iter().collect();
    s
}

impl Reader {
    /// Takes one event; `false` stops the read (the event was not an event).
    fn event(&mut self, e: RawEvent) -> bool {
        let i = self.seen;
        self.seen += 1;
        let Some(ph) = e.ph.as_deref() else {
            self.error = Some(format!("event {i} has no `ph`"));
            return false;
        };
        let thread = (as_u64(&e.pid), as_u64(&e.tid));
        let ts = match time_ns(&e.ts, "ts", i, ph) {
            Ok(t) => t,
            Err(why) => {
                self.error = Some(why);
                return false;
            }
        };
        let name = match e.name {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        match ph {
            "X" => {
                let dur = match time_ns(&e.dur, "dur", i, ph) {
                    Ok(d) => d,
                    Err(why) => {
                        self.error = Some(why);
                        return false;
                    }
                };
                let args = into_object(e.args);
                let known = args.get("track").and_then(|t| Track::deserialize(t).ok());
                let lane = match known {
                    Some(t) => Lane::Known(t),
                    None => Lane::Thread(thread),
                };
                self.lanes.entry(thread).or_insert_with(|| lane.clone());
                self.push_span(lane, name, ts, ts + dur, args);
            }
            "B" => {
                let args = into_object(e.args).into_iter().collect();
                self.open.entry(thread).or_default().push((name, ts, args));
            }
            "E" => {
                if let Some((name, start, args)) = self.open.get_mut(&thread).and_then(Vec::pop) {
                    if ts < start {
                        self.error = Some(format!(
                            "event {i} (ph `E`) ends `{name}` at {} µs, before it began at {} µs",
                            ts / 1000.0,
                            start / 1000.0
                        ));
                        return false;
                    }
                    let lane = Lane::Thread(thread);
                    self.lanes.entry(thread).or_insert_with(|| lane.clone());
                    let mut s = Span::new(placeholder(), name, start, ts);
                    s.args = args;
                    self.on_threads.push((self.out.len(), thread));
                    self.out.push(TraceEvent::Span(s));
                }
            }
            "M" => {
                if name == "thread_name"
                    && let Some(n) = e
                        .args
                        .as_ref()
                        .and_then(|a| a.get("name"))
                        .and_then(Value::as_str)
                {
                    self.thread_names.insert(thread, n.to_string());
                }
            }
            "s" => {
                if let Some(id) = flow_id(&e.id) {
                    self.flow_starts.insert(id, (name, thread, ts));
                }
            }
            "f" | "t" => {
                if let Some(id) = flow_id(&e.id) {
                    self.flow_ends.push((id, thread, ts));
                }
            }
            "C" => {
                let chip = if thread.0 == 0 {
                    None
                } else {
                    Some((thread.0 - 1) as u32)
                };
                for (k, v) in into_object(e.args) {
                    if let Some(value) = v.as_f64() {
                        self.out.push(TraceEvent::Counter(Counter {
                            chip,
                            name: k,
                            ns: ts,
                            value,
                        }));
                    }
                }
            }
            _ => {}
        }
        true
    }

    fn push_span(
        &mut self,
        lane: Lane,
        name: String,
        start: f64,
        end: f64,
        args: Map<String, Value>,
    ) {
        let track = match lane {
            Lane::Known(t) => t,
            Lane::Thread(th) => {
                self.on_threads.push((self.out.len(), th));
                placeholder()
            }
        };
        self.out.push(TraceEvent::Span(span_from_args(
            track, name, start, end, args,
        )));
    }

    fn host_track(&self, thread: Thread) -> Track {
        Track::Host {
            lane: self
                .thread_names
                .get(&thread)
                .cloned()
                .unwrap_or_else(|| format!("pid {} tid {}", thread.0, thread.1)),
        }
    }

    fn lane_track(&self, thread: Thread) -> Track {
        match self.lanes.get(&thread) {
            Some(Lane::Known(t)) => t.clone(),
            _ => self.host_track(thread),
        }
    }

    /// Names the host tracks and joins the flows.
    fn finish(mut self, meta: TraceMeta) -> Trace {
        let mut names: HashMap<Thread, Track> = HashMap::new();
        for (i, th) in std::mem::take(&mut self.on_threads) {
            let track = names
                .entry(th)
                .or_insert_with(|| self.host_track(th))
                .clone();
            if let TraceEvent::Span(s) = &mut self.out[i] {
                s.track = track;
            }
        }
        for (id, to, to_ns) in std::mem::take(&mut self.flow_ends) {
            if let Some((name, from, from_ns)) = self.flow_starts.get(&id) {
                let flow = Flow {
                    id,
                    name: name.clone(),
                    from: self.lane_track(*from),
                    from_ns: *from_ns,
                    to: self.lane_track(to),
                    to_ns,
                };
                self.out.push(TraceEvent::Flow(flow));
            }
        }
        Trace {
            meta,
            events: self.out,
        }
    }
}

/// A track to fill in once the thread names are known.
fn placeholder() -> Track {
    Track::Host {
        lane: String::new(),
    }
}

/// Streams the elements of a JSON array of events into the reader.
struct Events<'r>(&'r mut Reader);

impl<'de> DeserializeSeed<'de> for Events<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Events<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<RawEvent>()? {
            if !self.0.event(e) {
                return Err(de::Error::custom("not a trace event"));
            }
        }
        Ok(())
    }
}

/// The object form: `traceEvents` streamed, `otherData.tpuemu` read as the metadata.
struct Root<'r>(&'r mut Reader);

impl<'de> DeserializeSeed<'de> for Root<'_> {
    type Value = (bool, TraceMeta);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Root<'_> {
    type Value = (bool, TraceMeta);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut events = false;
        let mut meta = TraceMeta::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => {
                    map.next_value_seed(Events(&mut *self.0))?;
                    events = true;
                }
                "otherData" => {
                    let other: Value = map.next_value()?;
                    if let Some(m) = other
                        .get("tpuemu")
                        .and_then(|m| TraceMeta::deserialize(m).ok())
                    {
                        meta = m;
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((events, meta))
    }
}

/// Reads Chrome trace event JSON (ours or anyone's): the object form with `traceEvents` (and
/// our metadata in `otherData.tpuemu`) or a bare array of events.
pub fn from_chrome_json(text: &str) -> Result<Trace, ChromeTraceError> {
    let mut reader = Reader::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let result = match text.trim_start().as_bytes().first() {
        Some(b'[') => Events(&mut reader)
            .deserialize(&mut de)
            .map(|()| (true, TraceMeta::default())),
        Some(b'{') => Root(&mut reader).deserialize(&mut de),
        _ => {
            // Not an object or array: say why serde_json cannot read it, or that it is JSON of
            // the wrong shape.
            return match serde_json::from_str::<IgnoredAny>(text) {
                Err(e) => Err(e.into()),
                Ok(_) => Err(ChromeTraceError::Shape(
                    "expected an object or an array".into(),
                )),
            };
        }
    };
    if let Some(why) = reader.error.take() {
        return Err(ChromeTraceError::Shape(why));
    }
    let (events, meta) = result?;
    de.end()?;
    if !events {
        return Err(ChromeTraceError::Shape("no `traceEvents` array".into()));
    }
    Ok(reader.finish(meta))
}
