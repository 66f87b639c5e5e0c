//! A loaded trace, indexed for drawing: spans grouped into lanes, lanes split into flat rows by
//! nesting depth (bounded: [`LaneKind::max_rows`]), each row a [`RowIndex`]; counters as
//! step series with lanes of their own; flows sorted for culling; fusion groups with their
//! extents per kernel lane and the host operators they came from.
//!
//! Building it is the "open" cost of the viewer (after JSON parsing): one sort of all spans by
//! lane and start, one pass to assign nesting depths, one pass to build the rows.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use tpuemu_isa::trace::{Counter, Flow, Span, Trace, TraceEvent, TraceMeta, Track};

use crate::counters::Series;
use crate::index::RowIndex;
use crate::lanes::{Group, LaneKey, LaneKind, counter_order, lane_order};

/// Spans overlapping by less than this (plus a relative 1e-12) are taken to touch, not nest.
const TOUCH_NS: f64 = 1e-3;

/// One lane: all spans of one track, or one counter.
#[derive(Clone, Debug)]
pub struct Lane {
    /// The track (`None` for a counter lane).
    pub track: Option<Track>,
    /// The counter series drawn (index into [`TraceModel::series`]), for a counter lane.
    pub series: Option<usize>,
    /// Its kind.
    pub kind: LaneKind,
    /// Its group (host or a chip).
    pub group: Group,
    /// Label shown in the gutter.
    pub label: String,
    /// Rows by nesting depth (row 0 holds the outermost spans).
    pub rows: Vec<RowIndex>,
    /// The lane's spans in [`TraceModel::spans`].
    pub spans: Range<usize>,
    /// Spans nested deeper than the lane's rows allow, drawn in its last row.
    pub folded: usize,
}

/// The kernels of one fusion group on one kernel lane.
#[derive(Clone, Debug, PartialEq)]
pub struct FusionGroup {
    /// The group id (`group_id` of its spans).
    pub group_id: u64,
    /// The kernel lane.
    pub lane: usize,
    /// First kernel start, ns.
    pub start_ns: f64,
    /// Last kernel end, ns.
    pub end_ns: f64,
    /// Number of kernels.
    pub kernels: usize,
}

/// Fusion groups of one kernel lane, indexed like spans.
#[derive(Clone, Debug)]
pub struct LaneGroups {
    /// The lane.
    pub lane: usize,
    /// Groups sorted by start.
    pub groups: Vec<FusionGroup>,
    /// Their extents, for culling.
    pub index: RowIndex,
}

/// A trace ready to draw.
#[derive(Clone, Debug)]
pub struct TraceModel {
    /// Shown above the trace's lanes.
    pub label: String,
    /// Facts about the run.
    pub meta: TraceMeta,
    /// All spans, ordered by lane, then row, then start.
    pub spans: Vec<Span>,
    /// Lanes in display order.
    pub lanes: Vec<Lane>,
    /// Flows sorted by their earlier end.
    pub flows: Vec<Flow>,
    /// Lanes of each flow's ends (parallel to `flows`).
    pub flow_lanes: Vec<(usize, usize)>,
    /// `flow_max_end[i]`: latest end among flows `0..=i`.
    flow_max_end: Vec<f64>,
    /// Counter samples.
    pub counters: Vec<Counter>,
    /// The counters as step series, one lane each.
    pub series: Vec<Series>,
    /// Highest transfer rate of any ICI link span, bytes per ns (0 without links): link lanes
    /// draw each span's height as its rate over this.
    pub link_peak_rate: f64,
    /// Fusion groups per kernel lane.
    pub groups: Vec<LaneGroups>,
    /// Group id -> the host operator ids it fused (from the queue's `op_ids` and kernels).
    pub group_ops: HashMap<u64, BTreeSet<u64>>,
    /// Operator id -> host spans with that `op_id`.
    pub host_ops: HashMap<u64, Vec<usize>>,
    /// Earliest and latest time in the trace, ns.
    pub time_range: (f64, f64),
    /// Chips seen in the trace.
    pub chips_seen: u32,
}

pub use crate::open::{MAX_TRACE_BYTES, load_trace, open_trace};

impl TraceModel {
    /// Indexes a trace. `fallback_label` is used when the trace's meta has no label.
    pub fn new(trace: Trace, fallback_label: &str) -> TraceModel {
        let Trace { meta, events } = trace;
        let mut spans = Vec::new();
        let mut flows = Vec::new();
        let mut counters = Vec::new();
        for ev in events {
            match ev {
                TraceEvent::Span(mut s) => {
                    sanitize(&mut s.start_ns, &mut s.end_ns);
                    spans.push(s);
                }
                TraceEvent::Flow(mut f) => {
                    f.from_ns = finite(f.from_ns);
                    f.to_ns = finite(f.to_ns);
                    flows.push(f);
                }
                TraceEvent::Counter(c) => counters.push(c),
            }
        }

        // Lanes: every track that has a span or a flow end, and every counter, in display
        // order.
        let mut tracks: Vec<Track> = spans.iter().map(|s| s.track.clone()).collect();
        tracks.extend(flows.iter().flat_map(|f| [f.from.clone(), f.to.clone()]));
        tracks.sort();
        tracks.dedup();
        let series = Series::from_counters(&counters);
        let mut sources: Vec<(LaneKey, Result<Track, usize>)> = tracks
            .into_iter()
            .map(|t| (lane_order(&t), Ok(t)))
            .chain(
                series
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (counter_order(s.chip, &s.name), Err(i))),
            )
            .collect();
        sources.sort_by(|a, b| a.0.cmp(&b.0));
        let lane_of: HashMap<Track, usize> = sources
            .iter()
            .enumerate()
            .filter_map(|(i, (_, t))| t.as_ref().ok().map(|t| (t.clone(), i)))
            .collect();
        let lane_kinds: Vec<LaneKind> = sources.iter().map(|(k, _)| k.1).collect();

        // Sort spans by lane, start, longest first (so parents precede children).
        let mut keys: Vec<(u32, f64, f64, u32)> = spans
            .iter()
            .enumerate()
            .map(|(i, s)| (lane_of[&s.track] as u32, s.start_ns, s.end_ns, i as u32))
            .collect();
        keys.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(b.2.total_cmp(&a.2))
                .then(a.3.cmp(&b.3))
        });

        // Row (bounded nesting depth) per span, then order each lane by (row, start).
        let (depth, lane_bounds, folded) = assign_rows(&keys, &lane_kinds);
        let mut order: Vec<(u32, u32, u32)> = keys
            .iter()
            .zip(&depth)
            .map(|(k, &d)| (k.0, d, k.3))
            .collect();
        // Stable: keeps start order within a (lane, depth).
        order.sort_by_key(|&(lane, d, _)| (lane, d));

        let mut slots: Vec<Option<Span>> = spans.into_iter().map(Some).collect();
        let spans: Vec<Span> = order
            .iter()
            .filter_map(|&(_, _, i)| slots[i as usize].take())
            .collect();
        drop(slots);

        let mut lanes: Vec<Lane> = sources
            .into_iter()
            .enumerate()
            .map(|(i, ((group, kind, ..), source))| {
                let (track, series_index, label, kind) = match source {
                    Ok(t) => {
                        let label = t.label();
                        (Some(t), None, label, kind)
                    }
                    Err(si) => (None, Some(si), series[si].label(), LaneKind::Counter),
                };
                Lane {
                    kind,
                    group,
                    label,
                    rows: Vec::new(),
                    spans: lane_bounds[i]..lane_bounds[i + 1],
                    folded: folded[i],
                    track,
                    series: series_index,
                }
            })
            .collect();
        let link_peak_rate = build_rows(&mut lanes, &spans, &order);

        flows.sort_by(|a, b| {
            a.from_ns
                .min(a.to_ns)
                .total_cmp(&b.from_ns.min(b.to_ns))
                .then(a.id.cmp(&b.id))
        });
        let mut running = f64::NEG_INFINITY;
        let flow_max_end = flows
            .iter()
            .map(|f| {
                running = running.max(f.from_ns.max(f.to_ns));
                running
            })
            .collect();
        let flow_lanes = flows
            .iter()
            .map(|f| (lane_of[&f.from], lane_of[&f.to]))
            .collect();

        let (groups, group_ops, host_ops) = crate::groups::link_groups(&spans, &lanes);
        let time_range = time_range(&spans, &flows, &counters);
        let chips_seen = lanes
            .iter()
            .filter_map(|l| l.track.as_ref().and_then(Track::chip))
            .collect::<BTreeSet<_>>()
            .len() as u32;
        let label = if meta.label.is_empty() {
            fallback_label.to_string()
        } else {
            meta.label.clone()
        };
        TraceModel {
            label,
            meta,
            spans,
            lanes,
            flows,
            flow_lanes,
            flow_max_end,
            counters,
            series,
            link_peak_rate,
            groups,
            group_ops,
            host_ops,
            time_range,
            chips_seen,
        }
    }

    /// Flows whose time extent overlaps `[t0, t1]`, as an index range into [`Self::flows`]
    /// (some inside it may still lie outside; check each).
    pub fn visible_flows(&self, t0: f64, t1: f64) -> Range<usize> {
        let lo = self.flow_max_end.partition_point(|&e| e < t0);
        let hi = self.flows.partition_point(|f| f.from_ns.min(f.to_ns) <= t1);
        lo..hi.max(lo)
    }

    /// Operators called inside host span `span` (a Python-level call, or any host call
    /// without an operator id of its own): the `op_id`s of spans on the other host call lanes
    /// (`aten`, ...) that lie within it in time. Empty for device spans.
    pub fn ops_within(&self, span: usize) -> BTreeSet<u64> {
        let mut out = BTreeSet::new();
        if self.host_ops.is_empty() {
            return out; // no operator ids at all (a foreign trace)
        }
        let (Some(s), Some(own)) = (self.spans.get(span), self.lane_of_span(span)) else {
            return out;
        };
        if !self.lanes[own].kind.is_host() {
            return out;
        }
        // Only the same process's lanes: in a merged run other ranks' calls overlap in time.
        let group = self.lanes[own].group;
        let slack = TOUCH_NS + s.end_ns.abs() * 1e-12;
        for (li, lane) in self.lanes.iter().enumerate() {
            if li == own
                || lane.group != group
                || !matches!(lane.kind, LaneKind::HostOps | LaneKind::HostOther)
            {
                continue;
            }
            for row in &lane.rows {
                for i in row.visible(s.start_ns, s.end_ns) {
                    let c = &self.spans[row.first + i];
                    if c.start_ns >= s.start_ns - slack && c.end_ns <= s.end_ns + slack {
                        out.extend(c.op_id);
                    }
                }
            }
        }
        out
    }

    /// The lane holding span `span`.
    pub fn lane_of_span(&self, span: usize) -> Option<usize> {
        let i = self.lanes.partition_point(|l| l.spans.end <= span);
        (i < self.lanes.len() && self.lanes[i].spans.contains(&span)).then_some(i)
    }

    /// Chips to count for peak figures: the meta's, or those seen.
    pub fn chips(&self) -> u32 {
        if self.meta.chips > 0 {
            self.meta.chips
        } else {
            self.chips_seen.max(1)
        }
    }

    /// The fusion groups of a lane, if it has any.
    pub fn lane_groups(&self, lane: usize) -> Option<&LaneGroups> {
        self.groups.iter().find(|g| g.lane == lane)
    }
}

/// Assigns each span (`keys`: lane, start, end, index; sorted by lane, start, longest first) a
/// row: its nesting depth, at most the lane kind's last row, on lanes that nest; row 0
/// elsewhere. Returns the rows, each lane's span range bounds and how many spans each lane
/// folded into its last row.
fn assign_rows(
    keys: &[(u32, f64, f64, u32)],
    lane_kinds: &[LaneKind],
) -> (Vec<u32>, Vec<usize>, Vec<usize>) {
    let mut depth = vec![0u32; keys.len()];
    let mut open: Vec<f64> = Vec::new();
    let mut lane_bounds = vec![0usize; lane_kinds.len() + 1];
    let mut folded = vec![0usize; lane_kinds.len()];
    for (k, key) in keys.iter().enumerate() {
        if k == 0 || keys[k - 1].0 != key.0 {
            open.clear();
        }
        let kind = lane_kinds[key.0 as usize];
        lane_bounds[key.0 as usize + 1] = k + 1;
        if !kind.may_nest() {
            continue; // one row of occupancy
        }
        // Chrome JSON stores µs, so a span that starts where the previous one ends may
        // read back a hair earlier: that is not nesting.
        let tolerance = TOUCH_NS + key.1.abs() * 1e-12;
        while open.last().is_some_and(|&end| end <= key.1 + tolerance) {
            open.pop();
        }
        let d = open.len();
        if d >= kind.max_rows() {
            folded[key.0 as usize] += 1;
        }
        depth[k] = d.min(kind.max_rows() - 1) as u32;
        open.push(key.2);
    }
    for i in 1..lane_bounds.len() {
        lane_bounds[i] = lane_bounds[i].max(lane_bounds[i - 1]);
    }
    (depth, lane_bounds, folded)
}

/// Builds each lane's rows from the spans in (lane, row, start) order (`order[i].1` is span
/// `i`'s row); link rows get their spans' bytes as weights. Returns the highest link rate,
/// bytes per ns.
fn build_rows(lanes: &mut [Lane], spans: &[Span], order: &[(u32, u32, u32)]) -> f64 {
    let mut link_peak_rate: f64 = 0.0;
    for lane in lanes {
        let mut at = lane.spans.start;
        while at < lane.spans.end {
            let d = order[at].1;
            let end = at + order[at..lane.spans.end].partition_point(|o| o.1 == d);
            let mut row = RowIndex::new(at, spans[at..end].iter().map(|s| (s.start_ns, s.end_ns)));
            if lane.kind == LaneKind::Link {
                let bytes = |s: &Span| arg_number(s, "bytes");
                row.set_weights(spans[at..end].iter().map(bytes));
                for s in &spans[at..end] {
                    if s.end_ns > s.start_ns {
                        link_peak_rate = link_peak_rate.max(bytes(s) / (s.end_ns - s.start_ns));
                    }
                }
            }
            lane.rows.push(row);
            at = end;
        }
    }
    link_peak_rate
}

/// A numeric arg of a span (0 when absent, not a number or not finite).
pub fn arg_number(s: &Span, key: &str) -> f64 {
    s.args
        .get(key)
        .and_then(serde_json::Value::as_f64)
        .filter(|v| v.is_finite())
        .unwrap_or(0.0)
}

fn finite(t: f64) -> f64 {
    if t.is_finite() { t } else { 0.0 }
}

fn sanitize(start: &mut f64, end: &mut f64) {
    *start = finite(*start);
    *end = finite(*end).max(*start);
}

fn time_range(spans: &[Span], flows: &[Flow], counters: &[Counter]) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for s in spans {
        lo = lo.min(s.start_ns);
        hi = hi.max(s.end_ns);
    }
    for f in flows {
        lo = lo.min(f.from_ns.min(f.to_ns));
        hi = hi.max(f.from_ns.max(f.to_ns));
    }
    for c in counters {
        lo = lo.min(c.ns);
        hi = hi.max(c.ns);
    }
    if lo.is_finite() && hi.is_finite() {
        (lo, hi.max(lo))
    } else {
        (0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tpuemu_isa::trace::chrome;

    fn span(track: Track, name: &str, s: f64, e: f64) -> TraceEvent {
        TraceEvent::Span(Span::new(track, name, s, e))
    }

    fn region() -> Track {
        Track::Marker { chip: 0, core: 0 }
    }

    #[test]
    fn regions_nest_into_rows() {
        let t = Trace {
            meta: TraceMeta::default(),
            events: vec![
                span(region(), "inner", 10.0, 20.0),
                span(region(), "outer", 0.0, 100.0),
                span(region(), "innermost", 12.0, 15.0),
                span(region(), "second", 30.0, 40.0),
                span(region(), "later", 200.0, 300.0),
            ],
        };
        let m = TraceModel::new(t, "x");
        assert_eq!(m.lanes.len(), 1);
        let lane = &m.lanes[0];
        assert_eq!(lane.rows.len(), 3);
        let names = |r: &RowIndex| -> Vec<&str> {
            (0..r.len())
                .map(|i| m.spans[r.first + i].name.as_str())
                .collect()
        };
        assert_eq!(names(&lane.rows[0]), ["outer", "later"]);
        assert_eq!(names(&lane.rows[1]), ["inner", "second"]);
        assert_eq!(names(&lane.rows[2]), ["innermost"]);
        assert_eq!(m.time_range, (0.0, 300.0));
        assert_eq!(m.label, "x");
    }

    #[test]
    fn groups_link_kernels_to_host_ops() {
        let mut events = Vec::new();
        for (op, s) in [(1u64, 0.0), (2, 10.0)] {
            let mut h = Span::new(
                Track::Host {
                    lane: "aten".into(),
                },
                "aten::add",
                s,
                s + 5.0,
            );
            h.op_id = Some(op);
            events.push(TraceEvent::Span(h));
        }
        let mut q = Span::new(
            Track::Host {
                lane: "queue".into(),
            },
            "fused group 7",
            20.0,
            25.0,
        );
        q.args.insert("op_ids".into(), json!([1, 2]));
        events.push(TraceEvent::Span(q));
        for (s, e) in [(30.0, 40.0), (41.0, 60.0)] {
            let mut k = Span::new(Track::Kernel { chip: 0, core: 0 }, "fused", s, e);
            k.group_id = Some(7);
            events.push(TraceEvent::Span(k));
        }
        events.push(TraceEvent::Flow(Flow {
            id: 1,
            name: "launch".into(),
            from: Track::Host {
                lane: "aten".into(),
            },
            from_ns: 15.0,
            to: Track::Kernel { chip: 0, core: 0 },
            to_ns: 30.0,
        }));
        let m = TraceModel::new(
            Trace {
                meta: TraceMeta::default(),
                events,
            },
            "t",
        );
        assert_eq!(m.group_ops[&7], BTreeSet::from([1, 2]));
        assert_eq!(m.host_ops[&1].len(), 1);
        let kl = m
            .lanes
            .iter()
            .position(|l| l.kind == LaneKind::Kernel)
            .unwrap();
        let g = m.lane_groups(kl).unwrap();
        assert_eq!(
            g.groups,
            vec![FusionGroup {
                group_id: 7,
                lane: kl,
                start_ns: 30.0,
                end_ns: 60.0,
                kernels: 2
            }]
        );
        assert_eq!(m.flows.len(), 1);
        assert_eq!(m.flow_lanes[0].1, kl);
        assert_eq!(m.visible_flows(0.0, 10.0), 0..0);
        assert_eq!(m.visible_flows(20.0, 22.0), 0..1);
        assert_eq!(m.chips(), 1);
        assert_eq!(m.lane_of_span(m.lanes[kl].spans.start), Some(kl));
    }

    #[test]
    fn back_to_back_spans_stay_flat_after_a_json_round_trip() {
        let unit = Track::Unit {
            chip: 0,
            core: 0,
            unit: tpuemu_isa::instr::Unit::Valu,
        };
        let mut events = Vec::new();
        let mut t = 1e6 / 3.0;
        for i in 0..1000 {
            let d = 0.1 * f64::from(i % 7 + 1) + 1.0 / 3.0;
            events.push(span(unit.clone(), "v", t, t + d));
            t += d;
        }
        let trace = Trace {
            meta: TraceMeta::default(),
            events,
        };
        let back = chrome::from_chrome_json(&chrome::to_chrome_json(&trace)).unwrap();
        let m = TraceModel::new(back, "t");
        assert_eq!(m.lanes[0].rows.len(), 1);
    }

    #[test]
    fn bad_times_are_sanitized() {
        let mut s = Span::new(
            Track::Host {
                lane: "aten".into(),
            },
            "x",
            10.0,
            5.0,
        );
        s.start_ns = 10.0;
        let m = TraceModel::new(
            Trace {
                meta: TraceMeta::default(),
                events: vec![TraceEvent::Span(s)],
            },
            "t",
        );
        assert_eq!((m.spans[0].start_ns, m.spans[0].end_ns), (10.0, 10.0));
        let empty = TraceModel::new(Trace::default(), "e");
        assert_eq!(empty.time_range, (0.0, 1.0));
        assert!(empty.lanes.is_empty());
    }
}
