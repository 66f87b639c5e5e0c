//! Statistics over a time range of one trace: how busy each device lane was, the FLOP/s and
//! MFU achieved, and the HBM and ICI bandwidth used.
//!
//! - busy share: the union of a lane's spans clipped to the range, over the range's length;
//! - FLOP/s: the `flops` args of kernel spans overlapping the range, each prorated by the
//!   fraction of the span inside the range, over the range's length; MFU divides that by
//!   `meta.peak_bf16_flops * chips`;
//! - HBM bandwidth: the `bytes` args of DMA-engine spans, prorated the same way, over the
//!   range; utilisation divides by `meta.hbm_bytes_per_s * chips`;
//! - ICI: the same for link spans (no peak in the trace meta, so no utilisation); the
//!   `collective` link lane's spans (a collective's payload as one rank saw it, not link
//!   traffic) count for its busy share only;
//! - per chip ([`GroupStats`]): the same figures for each chip group alone (against one chip's
//!   peaks) and the share of the range it spent in collectives. In a merged distributed run a
//!   chip is a rank, so these compare the ranks.

use std::collections::BTreeMap;

use crate::lanes::{Group, LaneKind};
use crate::model::{Lane, TraceModel};

/// Busy share of one lane.
#[derive(Clone, Debug, PartialEq)]
pub struct LaneBusy {
    /// Lane index in the model.
    pub lane: usize,
    /// Its group.
    pub group: Group,
    /// Its label.
    pub label: String,
    /// Time covered by at least one span, ns.
    pub busy_ns: f64,
    /// `busy_ns` over the range length (0..=1).
    pub share: f64,
    /// Bytes moved in the range (DMA engines and ICI links; prorated), else 0.
    pub bytes: f64,
}

/// Statistics of one chip group over a range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupStats {
    /// The chip.
    pub chip: u32,
    /// Kernel spans overlapping the range.
    pub kernels: usize,
    /// Achieved FLOP/s.
    pub flops_per_s: f64,
    /// FLOP/s over one chip's peak, when the trace says the peak.
    pub mfu: Option<f64>,
    /// HBM bytes per second (DMA engines).
    pub hbm_bytes_per_s: f64,
    /// Share of the range its `collective` lane was busy (0..=1).
    pub collective_share: f64,
}

/// Statistics of one trace over `[t0, t1]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeStats {
    /// Range start, ns (trace time).
    pub t0: f64,
    /// Range end, ns.
    pub t1: f64,
    /// Device lanes (kernels, units, DMA engines, links) in display order.
    pub lanes: Vec<LaneBusy>,
    /// Kernel spans overlapping the range.
    pub kernels: usize,
    /// FLOPs done in the range (prorated).
    pub flops: f64,
    /// Achieved FLOP/s.
    pub flops_per_s: f64,
    /// Model FLOP/s utilisation, when the trace says the peak.
    pub mfu: Option<f64>,
    /// Bytes moved by DMA engines in the range (prorated).
    pub dma_bytes: f64,
    /// HBM bytes per second.
    pub hbm_bytes_per_s: f64,
    /// Share of peak HBM bandwidth, when the trace says the peak.
    pub hbm_util: Option<f64>,
    /// Bytes sent over ICI links in the range (prorated).
    pub link_bytes: f64,
    /// ICI bytes per second.
    pub link_bytes_per_s: f64,
    /// Per chip, in chip order.
    pub groups: Vec<GroupStats>,
}

/// Computes the statistics of `model` over `[t0, t1]` (trace time, ns).
pub fn range_stats(model: &TraceModel, t0: f64, t1: f64) -> RangeStats {
    let (t0, t1) = if t1 >= t0 { (t0, t1) } else { (t1, t0) };
    let len = (t1 - t0).max(f64::MIN_POSITIVE);
    let secs = len * 1e-9;
    let mut out = RangeStats {
        t0,
        t1,
        lanes: Vec::new(),
        kernels: 0,
        flops: 0.0,
        flops_per_s: 0.0,
        mfu: None,
        dma_bytes: 0.0,
        hbm_bytes_per_s: 0.0,
        hbm_util: None,
        link_bytes: 0.0,
        link_bytes_per_s: 0.0,
        groups: Vec::new(),
    };
    // Per chip: kernels, flops, DMA bytes, collective busy ns.
    let mut per: BTreeMap<Group, (usize, f64, f64, f64)> = BTreeMap::new();
    for (li, lane) in model.lanes.iter().enumerate() {
        let mut lane_bytes = 0.0;
        let g = per.entry(lane.group).or_default();
        match lane.kind {
            LaneKind::Kernel => {
                for_each_overlap(lane, t0, t1, |i, frac| {
                    g.0 += 1;
                    g.1 += frac * arg_f64(model, i, "flops");
                });
            }
            LaneKind::Dma => {
                for_each_overlap(lane, t0, t1, |i, frac| {
                    lane_bytes += frac * arg_f64(model, i, "bytes");
                });
                g.2 += lane_bytes;
            }
            LaneKind::Link => {
                for_each_overlap(lane, t0, t1, |i, frac| {
                    lane_bytes += frac * arg_f64(model, i, "bytes");
                });
                out.link_bytes += lane_bytes;
            }
            LaneKind::Collective => {
                for_each_overlap(lane, t0, t1, |i, frac| {
                    lane_bytes += frac * arg_f64(model, i, "bytes");
                });
            }
            _ => {}
        }
        if matches!(
            lane.kind,
            LaneKind::Kernel
                | LaneKind::Unit
                | LaneKind::Dma
                | LaneKind::Link
                | LaneKind::Collective
        ) {
            let busy_ns = busy(lane, t0, t1);
            if lane.kind == LaneKind::Collective {
                g.3 = g.3.max(busy_ns);
            }
            out.lanes.push(LaneBusy {
                lane: li,
                group: lane.group,
                label: lane.label.clone(),
                busy_ns,
                share: (busy_ns / len).clamp(0.0, 1.0),
                bytes: lane_bytes,
            });
        }
    }
    let peak = |v: f64, per_chip: f64| (per_chip > 0.0).then(|| v / per_chip);
    for (&group, &(kernels, flops, bytes, coll_ns)) in &per {
        out.kernels += kernels;
        out.flops += flops;
        out.dma_bytes += bytes;
        let Group::Chip(chip) = group else {
            continue;
        };
        out.groups.push(GroupStats {
            chip,
            kernels,
            flops_per_s: flops / secs,
            mfu: peak(flops / secs, model.meta.peak_bf16_flops),
            hbm_bytes_per_s: bytes / secs,
            collective_share: (coll_ns / len).clamp(0.0, 1.0),
        });
    }
    out.flops_per_s = out.flops / secs;
    out.hbm_bytes_per_s = out.dma_bytes / secs;
    out.link_bytes_per_s = out.link_bytes / secs;
    let chips = f64::from(model.chips());
    if model.meta.peak_bf16_flops > 0.0 {
        out.mfu = Some(out.flops_per_s / (model.meta.peak_bf16_flops * chips));
    }
    if model.meta.hbm_bytes_per_s > 0.0 {
        out.hbm_util = Some(out.hbm_bytes_per_s / (model.meta.hbm_bytes_per_s * chips));
    }
    out
}

/// A numeric arg of span `i` (0 when absent or not a number).
fn arg_f64(model: &TraceModel, i: usize, key: &str) -> f64 {
    crate::model::arg_number(&model.spans[i], key)
}

/// Calls `f(span, fraction inside [t0, t1])` for every span of the lane overlapping the range.
/// A zero-length span inside the range counts whole.
fn for_each_overlap(lane: &Lane, t0: f64, t1: f64, mut f: impl FnMut(usize, f64)) {
    for row in &lane.rows {
        for i in row.visible(t0, t1) {
            let (s, e) = row.span(i);
            let frac = if e > s {
                (e.min(t1) - s.max(t0)).max(0.0) / (e - s)
            } else if s >= t0 && s <= t1 {
                1.0
            } else {
                0.0
            };
            if frac > 0.0 {
                f(row.first + i, frac);
            }
        }
    }
}

/// Length of the union of the lane's spans inside `[t0, t1]`, ns.
fn busy(lane: &Lane, t0: f64, t1: f64) -> f64 {
    let mut clipped: Vec<(f64, f64)> = Vec::new();
    for row in &lane.rows {
        clipped.extend(
            row.visible(t0, t1)
                .map(|i| row.span(i))
                .map(|(s, e)| (s.max(t0), e.min(t1)))
                .filter(|(s, e)| e > s),
        );
    }
    if lane.rows.len() > 1 {
        clipped.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let mut total = 0.0;
    let mut covered = f64::NEG_INFINITY;
    for (s, e) in clipped {
        let s = s.max(covered);
        if e > s {
            total += e - s;
            covered = e;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tpuemu_isa::instr::Unit;
    use tpuemu_isa::trace::{Span, Trace, TraceEvent, TraceMeta, Track};

    fn with_arg(mut s: Span, k: &str, v: f64) -> TraceEvent {
        s.args.insert(k.into(), json!(v));
        TraceEvent::Span(s)
    }

    /// Two chips. Chip 0: kernels [0,100) 1000 flops and [100,200) 2000 flops; valu busy
    /// [0,50) and [150,200); DMA [0,100) 400 bytes. Chip 1: one kernel [0,200) 4000 flops.
    fn model() -> TraceModel {
        let k0 = Track::Kernel { chip: 0, core: 0 };
        let k1 = Track::Kernel { chip: 1, core: 0 };
        let valu = Track::Unit {
            chip: 0,
            core: 0,
            unit: Unit::Valu,
        };
        let dma = Track::Dma { chip: 0, engine: 0 };
        let events = vec![
            with_arg(Span::new(k0.clone(), "a", 0.0, 100.0), "flops", 1000.0),
            with_arg(Span::new(k0, "b", 100.0, 200.0), "flops", 2000.0),
            with_arg(Span::new(k1, "c", 0.0, 200.0), "flops", 4000.0),
            TraceEvent::Span(Span::new(valu.clone(), "v", 0.0, 50.0)),
            TraceEvent::Span(Span::new(valu, "v", 150.0, 200.0)),
            with_arg(Span::new(dma, "dma hbm->vmem", 0.0, 100.0), "bytes", 400.0),
        ];
        let meta = TraceMeta {
            peak_bf16_flops: 10e9, // 10 FLOP per ns per chip
            hbm_bytes_per_s: 8e9,  // 8 bytes per ns per chip
            chips: 2,
            ..TraceMeta::default()
        };
        TraceModel::new(Trace { meta, events }, "t")
    }

    fn share(s: &RangeStats, label: &str, group: Group) -> f64 {
        s.lanes
            .iter()
            .find(|l| l.label == label && l.group == group)
            .map(|l| l.share)
            .unwrap()
    }

    #[test]
    fn whole_range() {
        let s = range_stats(&model(), 0.0, 200.0);
        assert_eq!(s.kernels, 3);
        assert_eq!(s.flops, 7000.0);
        assert!((s.flops_per_s - 35e9).abs() < 1.0); // 7000 FLOP / 200 ns
        assert!((s.mfu.unwrap() - 35e9 / 20e9).abs() < 1e-12);
        assert!((s.hbm_bytes_per_s - 2e9).abs() < 1.0); // 400 B / 200 ns
        assert!((s.hbm_util.unwrap() - 2e9 / 16e9).abs() < 1e-12);
        assert_eq!(share(&s, "core0 valu", Group::Chip(0)), 0.5);
        assert_eq!(share(&s, "core0 kernels", Group::Chip(0)), 1.0);
        assert_eq!(share(&s, "dma0", Group::Chip(0)), 0.5);
        let dma = s.lanes.iter().find(|l| l.label == "dma0").unwrap();
        assert_eq!(dma.bytes, 400.0);
    }

    #[test]
    fn per_chip_figures() {
        let mut m = model();
        let s = range_stats(&m, 0.0, 200.0);
        let chips: Vec<(u32, usize)> = s.groups.iter().map(|g| (g.chip, g.kernels)).collect();
        assert_eq!(chips, [(0, 2), (1, 1)]);
        // Chip 0: 3000 FLOP in 200 ns against 10 FLOP/ns; 400 B of DMA.
        assert!((s.groups[0].mfu.unwrap() - 1.5).abs() < 1e-12);
        assert!((s.groups[0].hbm_bytes_per_s - 2e9).abs() < 1.0);
        assert!((s.groups[1].flops_per_s - 20e9).abs() < 1.0);
        assert_eq!(s.groups[1].collective_share, 0.0);
        // A collective on chip 1 for a quarter of the range: busy, but not ICI traffic.
        let mut events: Vec<TraceEvent> = m.spans.drain(..).map(TraceEvent::Span).collect();
        let coll = Track::Link {
            chip: 1,
            link: "collective".into(),
        };
        events.push(with_arg(
            Span::new(coll, "all_reduce", 100.0, 150.0),
            "bytes",
            1e6,
        ));
        let m = TraceModel::new(
            Trace {
                meta: m.meta.clone(),
                events,
            },
            "t",
        );
        let s = range_stats(&m, 0.0, 200.0);
        assert_eq!(s.groups[1].collective_share, 0.25);
        assert_eq!(share(&s, "link collective", Group::Chip(1)), 0.25);
        assert_eq!(s.link_bytes, 0.0);
    }

    #[test]
    fn partial_range_prorates() {
        // [50, 150): half of a (500), half of b (1000), half of c (2000).
        let s = range_stats(&model(), 50.0, 150.0);
        assert!((s.flops - 3500.0).abs() < 1e-9);
        assert!((s.flops_per_s - 35e9).abs() < 1.0);
        assert!((s.dma_bytes - 200.0).abs() < 1e-9);
        assert_eq!(share(&s, "core0 valu", Group::Chip(0)), 0.0);
        // Reversed bounds mean the same range.
        assert_eq!(range_stats(&model(), 150.0, 50.0), s);
    }

    #[test]
    fn no_peak_means_no_mfu() {
        let mut m = model();
        m.meta.peak_bf16_flops = 0.0;
        m.meta.hbm_bytes_per_s = 0.0;
        let s = range_stats(&m, 0.0, 200.0);
        assert!(s.mfu.is_none() && s.hbm_util.is_none());
    }

    #[test]
    fn busy_is_a_union_for_nested_lanes() {
        let r = Track::Marker { chip: 0, core: 0 };
        let t = Trace {
            meta: TraceMeta::default(),
            events: vec![
                TraceEvent::Span(Span::new(r.clone(), "outer", 0.0, 10.0)),
                TraceEvent::Span(Span::new(r.clone(), "inner", 2.0, 4.0)),
                TraceEvent::Span(Span::new(r, "later", 20.0, 30.0)),
            ],
        };
        let m = TraceModel::new(t, "t");
        assert_eq!(busy(&m.lanes[0], 0.0, 40.0), 20.0);
        assert_eq!(busy(&m.lanes[0], 5.0, 25.0), 10.0);
    }
}
