//! Recording what every unit did, as trace spans.
//!
//! While profiling, each core keeps a [`Recorder`]. Busy intervals of one unit that follow each
//! other with a gap of at most [`MERGE_GAP`] cycles and run the same mnemonic are merged into
//! one span whose args say how many instructions it holds and how many cycles the unit was
//! actually busy, so a long loop is a handful of spans and busy shares stay exact. Spans on one
//! track never overlap.

use std::collections::HashMap;

use serde_json::json;
use tpuemu_isa::trace::{Args, Span, Track};
use tpuemu_isa::{Program, Unit};

/// Largest idle gap (cycles) bridged when merging spans of the same mnemonic on a unit.
pub const MERGE_GAP: u64 = 32;

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
}

impl Recorder {
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
            .collect()
    }
}
