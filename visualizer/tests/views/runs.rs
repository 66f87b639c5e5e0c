//! Merged distributed runs (`synthetic_ranks`): a group per rank with its host lanes above its
//! device lanes and its collective lane, collectives joined across ranks, a rank's Python call
//! lighting up only its own operators, per-rank statistics, and the comparison of two runs.

use tpuemu_isa::trace::Track;
use tpuemu_visualizer::input::follow_flow;
use tpuemu_visualizer::lanes::{Group, LaneKind, group_label};
use tpuemu_visualizer::profile::ProfileKind;
use tpuemu_visualizer::stats::range_stats;
use tpuemu_visualizer::{TraceModel, ViewOptions, Viewer, rank_run};

use super::{all_chip0_lanes_visible, harness, snapshot};

fn run(ranks: u32, ops: usize, defer: bool, label: &str) -> TraceModel {
    TraceModel::new(rank_run(ranks, ops, defer, label).unwrap(), label)
}

#[test]
fn a_merged_run_shows_a_group_per_rank_with_its_host_lanes_first() {
    let m = run(3, 12, false, "step");
    assert!(m.lanes.iter().all(|l| l.group != Group::Host));
    for c in 0..3u32 {
        let lanes: Vec<(&str, LaneKind)> = m
            .lanes
            .iter()
            .filter(|l| l.group == Group::Chip(c))
            .map(|l| (l.label.as_str(), l.kind))
            .collect();
        let python = format!("rank{c}/python");
        let aten = format!("rank{c}/aten");
        assert_eq!(lanes[0], (python.as_str(), LaneKind::HostPython));
        assert_eq!(lanes[1], (aten.as_str(), LaneKind::HostOps));
        assert_eq!(lanes[2], ("core0 kernels", LaneKind::Kernel));
        assert_eq!(
            lanes.last(),
            Some(&("link collective", LaneKind::Collective))
        );
    }
    assert_eq!(
        group_label(
            Group::Chip(2),
            &m.meta.generation,
            m.meta.world_size.is_some()
        ),
        "rank 2 · chip 2 (v5e)"
    );
    // Two collectives over three ranks: two flows each, from rank 0 to ranks 1 and 2.
    let joins: Vec<(u32, u32)> = m
        .flows
        .iter()
        .filter(|f| f.name == "collective")
        .map(|f| (f.from.chip().unwrap(), f.to.chip().unwrap()))
        .collect();
    assert_eq!(joins, [(0, 1), (0, 2), (0, 1), (0, 2)]);
    let mut h = harness(Viewer::new(vec![m], ViewOptions::default()));
    all_chip0_lanes_visible(h.state());
    snapshot(&mut h, "merged_run");
}

#[test]
fn a_collective_flows_to_the_other_ranks_and_calls_stay_in_their_rank() {
    let m = run(2, 6, false, "step");
    let lane = |c: u32, label: &str| {
        m.lanes
            .iter()
            .position(|l| l.group == Group::Chip(c) && l.label == label)
            .unwrap()
    };
    // ] from rank 0's all_reduce lands on rank 1's.
    let coll = lane(0, "link collective");
    let first = m.lanes[coll].spans.start;
    assert!(m.spans[first].name.starts_with("all_reduce"));
    let to = follow_flow(&m, first, true).expect("a flow to rank 1");
    assert_eq!(m.lane_of_span(to), Some(lane(1, "link collective")));
    assert_eq!(m.spans[to].start_ns, m.spans[first].start_ns);
    // Rank 1's train_step overlaps rank 0's operators in time, but calls only its own.
    let py = m.lanes[lane(1, "rank1/python")].spans.start;
    let ops = m.ops_within(py);
    let own: std::collections::BTreeSet<u64> = m.spans
        [m.lanes[lane(1, "rank1/aten")].spans.clone()]
    .iter()
    .filter_map(|s| s.op_id)
    .collect();
    assert!(!ops.is_empty());
    assert!(ops.is_subset(&own), "{ops:?} not all in {own:?}");
    // Per-rank statistics: both ranks spent the same time in the joined collectives.
    let st = range_stats(&m, m.time_range.0, m.time_range.1);
    let per: Vec<(u32, usize)> = st.groups.iter().map(|g| (g.chip, g.kernels)).collect();
    assert_eq!(per, [(0, 6), (1, 6)]);
    assert!(st.groups[0].collective_share > 0.1);
    assert_eq!(st.groups[0].collective_share, st.groups[1].collective_share);
    assert_eq!(
        st.link_bytes, 0.0,
        "collective payloads are not link traffic"
    );
    assert!(matches!(
        m.lanes[coll].track,
        Some(Track::Link { chip: 0, .. })
    ));
}

#[test]
fn two_merged_runs_compare_their_operators() {
    let a = run(2, 12, true, "defer");
    let b = run(2, 12, false, "strict");
    let mut v = Viewer::new(vec![a, b], ViewOptions::default());
    // Each rank runs 12 operators (4 mm) and 2 collectives: twice that per run.
    let d = v.diff(ProfileKind::Operator).to_vec();
    let count = |name: &str| {
        let r = d.iter().find(|r| r.name == name).unwrap();
        (r.a.unwrap().count, r.b.unwrap().count)
    };
    assert_eq!(count("aten::mm"), (8, 8));
    assert_eq!(count("c10d::allreduce_"), (2, 2));
    let k = v.diff(ProfileKind::Kernel).to_vec();
    let kernels = |a: bool| -> usize {
        k.iter()
            .filter_map(|r| if a { r.a } else { r.b })
            .map(|s| s.count)
            .sum()
    };
    // DeferAndFuse fuses three operators per kernel.
    assert_eq!((kernels(true), kernels(false)), (8, 24));
    // Device time of the fused operators is shared out: mm costs something in both runs.
    let mm = d.iter().find(|r| r.name == "aten::mm").unwrap();
    assert!(mm.a.unwrap().device_ns > 0.0 && mm.b.unwrap().device_ns > 0.0);
}
