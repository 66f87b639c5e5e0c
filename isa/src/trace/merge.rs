//! Merging the rank traces of a distributed run into one multi-chip trace.
//!
//! Under `torchrun` every process emulates one chip and writes its own trace
//! (`run/step.rank0.json`, `run/step.rank1.json`, ...): its device tracks are on chip 0, its
//! host lanes are its own, and its operator, group and flow ids restart at 1. The clocks are
//! already joined (the ranks of a collective agree on its start and end), so merging is a
//! renaming, not a realignment. [`Trace::merge_ranks`] takes those traces and gives one trace
//! in which, for rank `r`:
//!
//! - device tracks move to chip `r` (so the timeline shows one chip per rank);
//! - host lanes become `rank{r}/{lane}` ([`rank_lane`]; [`split_rank_lane`] reads it back), host
//!   counters `rank{r}/{name}`, chip counters move to chip `r`;
//! - `op_id`s, `group_id`s (and the queue's `op_ids` lists) and flow ids are shifted past the
//!   ids of the ranks before it, so they are unique and the same on every merge;
//! - each collective (a span on the `collective` link lane with `group`, `seq` and `kind` args)
//!   gets a `collective` flow from the lowest member rank's span start to every other member's;
//!   a `send` (arg `to`) and the matching `recv` (arg `from`; the k-th send from a to b with the
//!   k-th receive at b from a) get a `send -> recv` flow.
//!
//! The merged meta has the common label, the first rank's generation, clock and peaks,
//! `chips` = the number of ranks merged, the world size and slice, and no rank.

use serde_json::{Value, json};

use super::{Counter, Flow, Span, Trace, TraceEvent, TraceMeta, Track};

mod flows;
#[cfg(test)]
mod tests;

/// The link lane on which a rank's collectives are drawn.
pub const COLLECTIVE_LINK: &str = "collective";

/// Why rank traces cannot be merged. "trace i" is the i-th trace given (0-based), so that a
/// caller can name its file ([`MergeError::traces`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no traces to merge")]
    Empty,
    /// Several traces, none with a rank: nothing says which chip is which.
    #[error("{count} traces without a rank (meta.rank): only rank traces merge")]
    Unranked {
        /// How many.
        count: usize,
    },
    /// A trace without `meta.rank` among rank traces.
    #[error(
        "trace {index} has no rank (meta.rank) but trace {ranked} is rank {rank}: only the \
         rank traces of one distributed run merge"
    )]
    NoRank {
        /// The trace without a rank.
        index: usize,
        /// A trace with one.
        ranked: usize,
        /// Its rank.
        rank: u32,
    },
    /// A rank trace holding more than one chip.
    #[error(
        "rank {rank} (trace {index}) holds {chips} chips; a rank trace holds the one chip its \
         process emulated"
    )]
    TooManyChips {
        /// The rank.
        rank: u32,
        /// The trace.
        index: usize,
        /// Chips it holds (meta or tracks, whichever is more).
        chips: u32,
    },
    /// Two traces of the same rank.
    #[error("rank {rank} appears twice (traces {first} and {second}): traces of two runs?")]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// First trace with it.
        first: usize,
        /// Second trace with it.
        second: usize,
    },
    /// Ranks that disagree on the world size or the slice: traces of different runs.
    #[error(
        "rank {rank} (trace {index}) has {what} {got}, rank {first_rank} (trace {first}) has \
         {expected}: traces of different runs"
    )]
    Mismatch {
        /// `world size` or `slice`.
        what: &'static str,
        /// The disagreeing rank.
        rank: u32,
        /// Its trace.
        index: usize,
        /// Its value.
        got: String,
        /// The lowest rank.
        first_rank: u32,
        /// Its trace.
        first: usize,
        /// Its value.
        expected: String,
    },
    /// A rank not below its world size.
    #[error("rank {rank} (trace {index}) is not below its world size {world_size}")]
    RankOutOfRange {
        /// The rank.
        rank: u32,
        /// The trace.
        index: usize,
        /// The world size it states.
        world_size: u32,
    },
}

impl MergeError {
    /// The positions (in the input) of the traces the error is about.
    pub fn traces(&self) -> Vec<usize> {
        match self {
            MergeError::Empty | MergeError::Unranked { .. } => Vec::new(),
            MergeError::NoRank { index, ranked, .. } => vec![*index, *ranked],
            MergeError::TooManyChips { index, .. } | MergeError::RankOutOfRange { index, .. } => {
                vec![*index]
            }
            MergeError::DuplicateRank { first, second, .. } => vec![*first, *second],
            MergeError::Mismatch { index, first, .. } => vec![*first, *index],
        }
    }
}

/// The merged name of host lane `lane` of rank `rank`: `rank2/aten`.
pub fn rank_lane(rank: u32, lane: &str) -> String {
    format!("rank{rank}/{lane}")
}

/// Reads a merged host lane name back: `rank2/aten` -> `(2, "aten")`; `None` for any other.
pub fn split_rank_lane(lane: &str) -> Option<(u32, &str)> {
    let (head, rest) = lane.strip_prefix("rank")?.split_once('/')?;
    if head.is_empty() || !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head.parse().ok()?, rest))
}

impl Trace {
    /// Merges the rank traces of one distributed run into one trace, a chip per rank (see
    /// the [module docs](self)). The traces may come in any order; the result is sorted by
    /// rank and the same for the same input.
    pub fn merge_ranks(traces: Vec<Trace>) -> Result<Trace, MergeError> {
        let ranked = check(&traces)?;
        let meta = merged_meta(&traces, &ranked);
        let mut slots: Vec<Option<Trace>> = traces.into_iter().map(Some).collect();
        let mut events = Vec::new();
        let mut next = Ids::default();
        for &(rank, index) in &ranked {
            let Some(trace) = slots[index].take() else {
                continue;
            };
            let shift = next.shift_past(&trace);
            for ev in trace.events {
                events.push(remap(ev, rank, &shift));
            }
        }
        let joins = flows::join_collectives(&events, next.flow);
        events.extend(joins.into_iter().map(TraceEvent::Flow));
        Ok(Trace { meta, events })
    }
}

/// Validates the input; returns (rank, position) sorted by rank.
fn check(traces: &[Trace]) -> Result<Vec<(u32, usize)>, MergeError> {
    if traces.is_empty() {
        return Err(MergeError::Empty);
    }
    let with = traces.iter().position(|t| t.meta.rank.is_some());
    let without = traces.iter().position(|t| t.meta.rank.is_none());
    if let (Some(ranked), Some(index)) = (with, without) {
        let rank = traces[ranked].meta.rank.unwrap_or_default();
        return Err(MergeError::NoRank {
            index,
            ranked,
            rank,
        });
    }
    // Traces without ranks at all: one merges as rank 0 of 1; several have nothing to say
    // which chip is which.
    if with.is_none() {
        if traces.len() == 1 {
            return Ok(vec![(0, 0)]);
        }
        return Err(MergeError::Unranked {
            count: traces.len(),
        });
    }
    let mut ranked: Vec<(u32, usize)> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| (t.meta.rank.unwrap_or_default(), i))
        .collect();
    ranked.sort_unstable();
    for w in ranked.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(MergeError::DuplicateRank {
                rank: w[0].0,
                first: w[0].1,
                second: w[1].1,
            });
        }
    }
    let (first_rank, first) = ranked[0];
    let head = &traces[first].meta;
    for &(rank, index) in &ranked {
        let meta = &traces[index].meta;
        let chips = chips_of(&traces[index]);
        if chips > 1 {
            return Err(MergeError::TooManyChips { rank, index, chips });
        }
        let mismatch = |what, got: String, expected: String| MergeError::Mismatch {
            what,
            rank,
            index,
            got,
            first_rank,
            first,
            expected,
        };
        if meta.world_size != head.world_size {
            return Err(mismatch(
                "world size",
                show(&meta.world_size),
                show(&head.world_size),
            ));
        }
        if meta.slice != head.slice {
            return Err(mismatch("slice", show(&meta.slice), show(&head.slice)));
        }
        if let Some(world_size) = meta.world_size.filter(|&w| rank >= w) {
            return Err(MergeError::RankOutOfRange {
                rank,
                index,
                world_size,
            });
        }
    }
    Ok(ranked)
}

fn show<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("none".into(), |v| v.to_string())
}

/// Chips a trace holds: its meta's count or the distinct chips of its tracks and counters,
/// whichever is more.
fn chips_of(trace: &Trace) -> u32 {
    let mut seen = std::collections::BTreeSet::new();
    for ev in &trace.events {
        match ev {
            TraceEvent::Span(s) => seen.extend(s.track.chip()),
            TraceEvent::Flow(f) => seen.extend(f.from.chip().into_iter().chain(f.to.chip())),
            TraceEvent::Counter(c) => seen.extend(c.chip),
        }
    }
    trace.meta.chips.max(seen.len() as u32)
}

fn merged_meta(traces: &[Trace], ranked: &[(u32, usize)]) -> TraceMeta {
    let first = &traces[ranked[0].1].meta;
    let labels: Vec<&str> = ranked
        .iter()
        .map(|&(_, i)| traces[i].meta.label.as_str())
        .collect();
    TraceMeta {
        label: common_label(&labels),
        chips: ranked.len() as u32,
        rank: None,
        world_size: first.world_size,
        slice: first.slice.clone(),
        ..first.clone()
    }
}

/// The label all ranks share; when they differ, their common beginning (without trailing
/// separators or `rank`), else the lowest rank's.
fn common_label(labels: &[&str]) -> String {
    let first = labels.first().copied().unwrap_or_default();
    let mut len = first.len();
    for l in &labels[1..] {
        len = first
            .char_indices()
            .zip(l.chars())
            .take_while(|((_, a), b)| a == b)
            .last()
            .map_or(0, |((i, a), _)| i + a.len_utf8())
            .min(len);
    }
    let seps = |c: char| " ._-/:".contains(c);
    // `step.rank0` and `step.rank1` share `step`, not `step.rank`.
    let common = first[..len].trim_end_matches(seps);
    let common = common
        .strip_suffix("rank")
        .unwrap_or(common)
        .trim_end_matches(seps);
    if common.is_empty() { first } else { common }.to_string()
}

/// Id offsets: each rank's ids are shifted past every earlier rank's largest id.
#[derive(Default)]
struct Ids {
    op: u64,
    group: u64,
    flow: u64,
}

impl Ids {
    /// The shift for `trace`, advancing past its ids.
    fn shift_past(&mut self, trace: &Trace) -> Ids {
        let shift = Ids {
            op: self.op,
            group: self.group,
            flow: self.flow,
        };
        let bump = |next: &mut u64, max: Option<u64>| {
            if let Some(m) = max {
                *next = next.saturating_add(m).saturating_add(1);
            }
        };
        let spans = || trace.spans();
        let queued =
            spans().flat_map(|s| op_ids(s).into_iter().flatten().filter_map(Value::as_u64));
        bump(
            &mut self.op,
            spans().filter_map(|s| s.op_id).chain(queued).max(),
        );
        bump(&mut self.group, spans().filter_map(|s| s.group_id).max());
        bump(&mut self.flow, trace.flows().map(|f| f.id).max());
        shift
    }
}

fn op_ids(s: &Span) -> Option<&Vec<Value>> {
    s.args.get("op_ids").and_then(Value::as_array)
}

/// Moves a track to rank `rank`'s chip or lane.
fn remap_track(track: Track, rank: u32) -> Track {
    match track {
        Track::Host { lane } => Track::Host {
            lane: rank_lane(rank, &lane),
        },
        Track::Kernel { core, .. } => Track::Kernel { chip: rank, core },
        Track::Marker { core, .. } => Track::Marker { chip: rank, core },
        Track::Unit { core, unit, .. } => Track::Unit {
            chip: rank,
            core,
            unit,
        },
        Track::Dma { engine, .. } => Track::Dma { chip: rank, engine },
        Track::Link { link, .. } => Track::Link { chip: rank, link },
    }
}

fn remap(ev: TraceEvent, rank: u32, shift: &Ids) -> TraceEvent {
    let add = |v: u64, by: u64| v.saturating_add(by);
    match ev {
        TraceEvent::Span(mut s) => {
            s.track = remap_track(s.track, rank);
            s.op_id = s.op_id.map(|v| add(v, shift.op));
            s.group_id = s.group_id.map(|v| add(v, shift.group));
            if let Some(ids) = s.args.get_mut("op_ids").and_then(Value::as_array_mut) {
                for id in ids.iter_mut() {
                    if let Some(v) = id.as_u64() {
                        *id = json!(add(v, shift.op));
                    }
                }
            }
            TraceEvent::Span(s)
        }
        TraceEvent::Flow(f) => TraceEvent::Flow(Flow {
            id: add(f.id, shift.flow),
            from: remap_track(f.from, rank),
            to: remap_track(f.to, rank),
            ..f
        }),
        TraceEvent::Counter(c) => TraceEvent::Counter(Counter {
            name: match c.chip {
                None => rank_lane(rank, &c.name),
                Some(_) => c.name,
            },
            chip: c.chip.map(|_| rank),
            ..c
        }),
    }
}
