//! Recording what every unit did, as trace spans.
//!
//! While profiling, each core keeps a [`Recorder`]. Busy intervals of one unit that follow each
//! other with a gap of at most [`MERGE_GAP`] cycles and run the same mnemonic are merged into
//! one span whose args say how many instructions it holds and how many cycles the unit was
//! actually busy, so a long loop is a handful of spans and busy shares stay exact. Spans on one
//! track never overlap.
//!
//! Trace memory is bounded: a core records at most [`MAX_SPANS_PER_CORE`] spans per launch and
//! the device keeps at most [`MAX_EVENTS`] events until they are drained ([`EventLog`]). What
//! does not fit is counted, and the trace says so with a note span (`trace limit: N spans
//! dropped`, args `dropped_spans`) over the time the dropped spans covered.

use std::collections::HashMap;

use serde_json::json;
use tpuemu_isa::trace::{Args, Span, TraceEvent, Track};
use tpuemu_isa::{Program, Unit};

/// Largest idle gap (cycles) bridged when merging spans of the same mnemonic on a unit.
pub const MERGE_GAP: u64 = 32;

/// Spans one core records in one launch (about 5x what the demo's compiled step records on its
/// core); later spans are counted, not kept.
pub const MAX_SPANS_PER_CORE: usize = 1 << 20;

/// Events a device keeps until they are drained (about 10x one demo trace, some hundreds of MB).
pub const MAX_EVENTS: usize = 1 << 21;

/// Spans dropped at a trace limit: how many, and the time (in the producer's units) they cover.
#[derive(Debug, Default, Clone, Copy)]
struct Dropped {
    count: u64,
    start: u64,
    end: u64,
}

impl Dropped {
    fn add(&mut self, start: u64, end: u64) {
        if self.count == 0 {
            (self.start, self.end) = (start, end);
        } else {
            self.start = self.start.min(start);
            self.end = self.end.max(end);
        }
        self.count += 1;
    }

    fn note(&self, track: Track, limit: usize, to_ns: impl Fn(u64) -> f64) -> Option<Span> {
        (self.count > 0).then(|| {
            let mut s = Span::new(
                track,
                format!("trace limit: {} spans dropped", self.count),
                to_ns(self.start),
                to_ns(self.end),
            );
            s.args.insert("dropped_spans".into(), json!(self.count));
            s.args.insert("limit".into(), json!(limit));
            s
        })
    }
}

/// A device's recorded events, at most `limit` ([`MAX_EVENTS`]) of them.
#[derive(Debug)]
pub(crate) struct EventLog {
    events: Vec<TraceEvent>,
    dropped: Dropped,
    limit: usize,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            events: Vec::new(),
            dropped: Dropped::default(),
            limit: MAX_EVENTS,
        }
    }
}

impl EventLog {
    /// Keeps `e`, or counts it when the log is full.
    pub fn push(&mut self, e: TraceEvent) {
        if self.events.len() < self.limit {
            self.events.push(e);
            return;
        }
        let (a, b) = match &e {
            TraceEvent::Span(s) => (s.start_ns, s.end_ns),
            TraceEvent::Flow(f) => (f.from_ns, f.to_ns),
            TraceEvent::Counter(c) => (c.ns, c.ns),
        };
        // Times are kept in ps as integers; the note's ends round to the ps.
        let ps = |ns: f64| (ns.max(0.0) * 1e3).min(u64::MAX as f64) as u64;
        self.dropped.add(ps(a), ps(b.max(a)));
    }

    /// The events, with a note (a span on the host lane `trace`) when some were dropped.
    pub fn drain(&mut self) -> Vec<TraceEvent> {
        let mut out = std::mem::take(&mut self.events);
        let track = Track::Host {
            lane: "trace".into(),
        };
        if let Some(note) = self.dropped.note(track, self.limit, |ps| ps as f64 / 1e3) {
            out.push(TraceEvent::Span(note));
        }
        self.dropped = Dropped::default();
        out
    }
}

#[derive(Debug, Clone)]
struct Raw {
    track: Track,
    name: String,
    start: u64,
    end: u64,
    busy: u64,
    count: u64,
    args: Args,
}

/// Collects spans in cycles for one core during one launch.
#[derive(Debug)]
pub(crate) struct Recorder {
    enabled: bool,
    chip: u32,
    core: u32,
    /// Per-pc mnemonic, computed once per launch when enabled.
    mnemonics: Vec<String>,
    /// Index into `spans` of the open span of each unit or engine track.
    open: HashMap<Track, usize>,
    spans: Vec<Raw>,
    /// Spans past `limit` ([`MAX_SPANS_PER_CORE`]).
    dropped: Dropped,
    limit: usize,
}

impl Recorder {
    /// Whether this recorder keeps spans (the launch is profiled).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A recorder; does nothing unless `enabled`.
    pub fn new(enabled: bool, chip: u32, core: u32, program: &Program) -> Self {
        let mnemonics = if enabled {
            (0..program.instrs.len())
                .map(|pc| {
                    program.instrs[pc]
                        .to_string()
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        } else {
            Vec::new()
        };
        Recorder {
            enabled,
            chip,
            core,
            mnemonics,
            open: HashMap::new(),
            spans: Vec::new(),
            dropped: Dropped::default(),
            limit: MAX_SPANS_PER_CORE,
        }
    }

    fn push_merged(
        &mut self,
        track: Track,
        name: &str,
        start: u64,
        end: u64,
        busy: u64,
        args: Option<Args>,
    ) {
        if let Some(&i) = self.open.get(&track) {
            let s = &mut self.spans[i];
            if s.name == name && start <= s.end + MERGE_GAP && start >= s.start {
                s.end = s.end.max(end);
                s.busy += busy;
                s.count += 1;
                if let Some(a) = args {
                    for (k, v) in a {
                        let sum = s.args.get(&k).and_then(|x| x.as_f64()).unwrap_or(0.0)
                            + v.as_f64().unwrap_or(0.0);
                        s.args.insert(k, json!(sum));
                    }
                }
                return;
            }
        }
        if self.spans.len() >= self.limit {
            self.dropped.add(start, end);
            return;
        }
        self.open.insert(track.clone(), self.spans.len());
        self.spans.push(Raw {
            track,
            name: name.to_string(),
            start,
            end,
            busy,
            count: 1,
            args: args.unwrap_or_default(),
        });
    }

    /// A synchronous unit was busy running instruction `pc`.
    #[inline]
    pub fn unit(&mut self, unit: Unit, pc: u32, start: u64, end: u64) {
        if !self.enabled {
            return;
        }
        let name = self.mnemonics.get(pc as usize).cloned().unwrap_or_default();
        let track = Track::Unit {
            chip: self.chip,
            core: self.core,
            unit,
        };
        self.push_merged(track, &name, start, end, end - start, None);
    }

    /// A matrix unit streamed rows (or loaded weights) for instruction `pc`.
    pub fn mxu(&mut self, unit: Unit, pc: u32, start: u64, end: u64, flops: u64) {
        if !self.enabled {
            return;
        }
        let name = self.mnemonics.get(pc as usize).cloned().unwrap_or_default();
        let track = Track::Unit {
            chip: self.chip,
            core: self.core,
            unit,
        };
        let mut args = Args::new();
        args.insert("flops".into(), json!(flops));
        self.push_merged(track, &name, start, end, end - start, Some(args));
    }

    /// A DMA engine moved `bytes`.
    pub fn dma(&mut self, engine: u32, name: &str, start: u64, end: u64, bytes: u64) {
        if !self.enabled {
            return;
        }
        let mut args = Args::new();
        args.insert("bytes".into(), json!(bytes));
        let track = Track::Dma {
            chip: self.chip,
            engine: self.core * 64 + engine,
        };
        self.push_merged(track, name, start, end, end - start, Some(args));
    }

    /// A profiling region closed.
    pub fn region(&mut self, name: String, start: u64, end: u64, depth: usize) {
        if !self.enabled {
            return;
        }
        if self.spans.len() >= self.limit {
            self.dropped.add(start, end);
            return;
        }
        let mut args = Args::new();
        args.insert("depth".into(), json!(depth));
        self.spans.push(Raw {
            track: Track::Marker {
                chip: self.chip,
                core: self.core,
            },
            name,
            start,
            end,
            busy: end - start,
            count: 1,
            args,
        });
    }

    /// The spans, converted to ns with `to_ns`, tagged with the launch's ids.
    pub fn finish(
        self,
        to_ns: impl Fn(u64) -> f64,
        op_id: Option<u64>,
        group_id: Option<u64>,
    ) -> Vec<Span> {
        let track = Track::Marker {
            chip: self.chip,
            core: self.core,
        };
        let note = self.dropped.note(track, self.limit, &to_ns);
        self.spans
            .into_iter()
            .map(|r| {
                let mut s = Span::new(r.track, r.name, to_ns(r.start), to_ns(r.end));
                s.cycles = Some((r.start, r.end));
                s.op_id = op_id;
                s.group_id = group_id;
                s.args = r.args;
                if r.count > 1 {
                    s.args.insert("instructions".into(), json!(r.count));
                    s.args.insert("busy_cycles".into(), json!(r.busy));
                }
                s
            })
            .chain(note)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program() -> Program {
        tpuemu_isa::assemble("nop\nhalt\n").expect("assembles")
    }

    #[test]
    fn a_core_keeps_at_most_its_limit_and_notes_the_rest() {
        let mut r = Recorder::new(true, 0, 0, &program());
        r.limit = 3;
        // Alternating units never merge: one span each.
        for i in 0..10u64 {
            let unit = if i % 2 == 0 { Unit::Scalar } else { Unit::Valu };
            r.unit(unit, 0, 100 * i, 100 * i + 1);
        }
        let spans = r.finish(|c| c as f64, None, None);
        assert_eq!(spans.len(), 4, "three spans and the note");
        let note = spans.last().unwrap();
        assert_eq!(note.name, "trace limit: 7 spans dropped");
        assert_eq!(note.args["dropped_spans"], 7);
        assert_eq!((note.start_ns, note.end_ns), (300.0, 901.0));
        assert!(matches!(note.track, Track::Marker { chip: 0, core: 0 }));
    }

    #[test]
    fn the_device_log_keeps_at_most_its_limit_and_notes_the_rest() {
        let mut log = EventLog {
            limit: 2,
            ..EventLog::default()
        };
        let span =
            |a: f64| TraceEvent::Span(Span::new(Track::Host { lane: "x".into() }, "s", a, a + 1.0));
        for i in 0..5 {
            log.push(span(i as f64 * 10.0));
        }
        let ev = log.drain();
        assert_eq!(ev.len(), 3);
        let TraceEvent::Span(note) = &ev[2] else {
            panic!("a note span")
        };
        assert_eq!(note.name, "trace limit: 3 spans dropped");
        assert_eq!((note.start_ns, note.end_ns), (20.0, 41.0));
        // Drained: the next drain starts afresh.
        assert!(log.drain().is_empty());
    }
}
