//! Merging hand-built rank traces: tracks, lanes, counters, ids, joining flows, errors.

use serde_json::json;

use super::*;
use crate::trace::{Counter, Flow, Span, Trace, TraceEvent, TraceMeta, Track};

fn host(lane: &str) -> Track {
    Track::Host { lane: lane.into() }
}

fn coll_lane(chip: u32) -> Track {
    Track::Link {
        chip,
        link: COLLECTIVE_LINK.into(),
    }
}

fn meta(rank: u32, world: u32) -> TraceMeta {
    TraceMeta {
        label: "step".into(),
        generation: "v5e".into(),
        clock_hz: 1.5e9,
        peak_bf16_flops: 197e12,
        hbm_bytes_per_s: 819e9,
        chips: 1,
        rank: Some(rank),
        world_size: Some(world),
        slice: Some("v5e:2x2".into()),
    }
}

/// A rank's trace: two operators (ids 1, 2) fused as group 1, one kernel, a flow, an HBM
/// counter, a host counter, and the collectives given.
fn rank_trace(rank: u32, world: u32, collectives: Vec<Span>) -> Trace {
    let t0 = f64::from(rank) * 1000.0;
    let mut events = Vec::new();
    for op in [1u64, 2] {
        let mut s = Span::new(
            host("aten"),
            "aten::mm",
            t0 + op as f64,
            t0 + op as f64 + 0.5,
        );
        s.op_id = Some(op);
        events.push(TraceEvent::Span(s));
    }
    let mut q = Span::new(host("queue"), "fused group 1", t0 + 3.0, t0 + 4.0);
    q.group_id = Some(1);
    q.args.insert("op_ids".into(), json!([1, 2]));
    events.push(TraceEvent::Span(q));
    let mut k = Span::new(
        Track::Kernel { chip: 0, core: 0 },
        "fused",
        t0 + 5.0,
        t0 + 9.0,
    );
    k.group_id = Some(1);
    k.op_id = Some(2);
    events.push(TraceEvent::Span(k));
    events.push(TraceEvent::Flow(Flow {
        id: 1,
        name: "launch".into(),
        from: host("queue"),
        from_ns: t0 + 4.0,
        to: Track::Kernel { chip: 0, core: 0 },
        to_ns: t0 + 5.0,
    }));
    for (chip, name) in [(Some(0), "hbm_bytes_in_use"), (None, "host_bytes")] {
        events.push(TraceEvent::Counter(Counter {
            chip,
            name: name.into(),
            ns: t0,
            value: 1.0,
        }));
    }
    events.extend(collectives.into_iter().map(TraceEvent::Span));
    Trace {
        meta: meta(rank, world),
        events,
    }
}

fn collective(kind: &str, group: &[u64], seq: Option<u64>, start: f64) -> Span {
    let mut s = Span::new(coll_lane(0), format!("{kind} 1.0 KiB"), start, start + 10.0);
    s.args.insert("kind".into(), json!(kind));
    s.args.insert("group".into(), json!(group));
    s.args.insert("bytes".into(), json!(1024));
    if let Some(seq) = seq {
        s.args.insert("seq".into(), json!(seq));
    }
    s
}

fn p2p(kind: &str, key: &str, peer: u64, start: f64) -> Span {
    let mut s = Span::new(coll_lane(0), kind, start, start + 5.0);
    s.args.insert("kind".into(), json!(kind));
    s.args.insert(key.into(), json!(peer));
    s
}

#[test]
fn device_tracks_move_to_the_rank_chip_and_host_lanes_are_prefixed() {
    let m = Trace::merge_ranks(vec![rank_trace(1, 2, vec![]), rank_trace(0, 2, vec![])]).unwrap();
    let kernels: Vec<(u32, f64)> = m
        .spans()
        .filter_map(|s| match s.track {
            Track::Kernel { chip, .. } => Some((chip, s.start_ns)),
            _ => None,
        })
        .collect();
    // Sorted by rank, whatever the input order.
    assert_eq!(kernels, [(0, 5.0), (1, 1005.0)]);
    let mut lanes: Vec<String> = m
        .spans()
        .filter_map(|s| match &s.track {
            Track::Host { lane } => Some(lane.clone()),
            _ => None,
        })
        .collect();
    lanes.dedup();
    assert_eq!(
        lanes,
        ["rank0/aten", "rank0/queue", "rank1/aten", "rank1/queue"]
    );
    let counters: Vec<(Option<u32>, &str)> =
        m.counters().map(|c| (c.chip, c.name.as_str())).collect();
    assert_eq!(
        counters,
        [
            (Some(0), "hbm_bytes_in_use"),
            (None, "rank0/host_bytes"),
            (Some(1), "hbm_bytes_in_use"),
            (None, "rank1/host_bytes"),
        ]
    );
    let flow = m.flows().nth(1).unwrap();
    assert_eq!(flow.from, host("rank1/queue"));
    assert_eq!(flow.to, Track::Kernel { chip: 1, core: 0 });
    assert_eq!(
        m.meta,
        TraceMeta {
            chips: 2,
            rank: None,
            ..meta(0, 2)
        }
    );
}

#[test]
fn ids_are_unique_across_ranks_and_the_merge_is_deterministic() {
    let ranks = || (0..3).map(|r| rank_trace(r, 3, vec![])).collect::<Vec<_>>();
    let m = Trace::merge_ranks(ranks()).unwrap();
    let mut reversed = ranks();
    reversed.reverse();
    assert_eq!(Trace::merge_ranks(reversed).unwrap(), m);

    let ops: Vec<u64> = m
        .spans()
        .filter(|s| s.track.chip().is_none())
        .filter_map(|s| s.op_id)
        .collect();
    assert_eq!(ops, [1, 2, 4, 5, 7, 8]);
    let groups: Vec<u64> = m.spans().filter_map(|s| s.group_id).collect();
    // Each rank's queue span and kernel share their group, distinct from other ranks'.
    assert_eq!(groups, [1, 1, 3, 3, 5, 5]);
    let flows: Vec<u64> = m.flows().map(|f| f.id).collect();
    assert_eq!(flows, [1, 3, 5]);
    // The queue's op_ids follow their operators.
    let fused: Vec<serde_json::Value> = m
        .spans()
        .filter_map(|s| s.args.get("op_ids").cloned())
        .collect();
    assert_eq!(fused, [json!([1, 2]), json!([4, 5]), json!([7, 8])]);
    let kernel_ops: Vec<u64> = m
        .spans()
        .filter(|s| matches!(s.track, Track::Kernel { .. }))
        .filter_map(|s| s.op_id)
        .collect();
    assert_eq!(kernel_ops, [2, 5, 8]);
}

#[test]
fn a_three_rank_all_reduce_is_joined_by_two_flows() {
    let ranks: Vec<Trace> = (0..3)
        .map(|r| {
            let mut c = vec![collective("all_reduce", &[0, 1, 2], Some(1), 5000.0)];
            if r > 0 {
                // A second group, of ranks 1 and 2, and an unrelated later all_reduce.
                c.push(collective("all_gather", &[1, 2], Some(1), 6000.0));
            }
            c.push(collective(
                "all_reduce",
                &[0, 1, 2],
                Some(2),
                7000.0 + f64::from(r),
            ));
            rank_trace(r, 3, c)
        })
        .collect();
    let m = Trace::merge_ranks(ranks).unwrap();
    let joins: Vec<(u64, u32, f64, u32, f64)> = m
        .flows()
        .filter(|f| f.name == flows::COLLECTIVE_FLOW)
        .map(|f| {
            (
                f.id,
                f.from.chip().unwrap(),
                f.from_ns,
                f.to.chip().unwrap(),
                f.to_ns,
            )
        })
        .collect();
    assert_eq!(
        joins,
        [
            // After the ranks' own flows, 1, 3 and 5.
            (6, 0, 5000.0, 1, 5000.0),
            (7, 0, 5000.0, 2, 5000.0),
            (8, 1, 6000.0, 2, 6000.0),
            (9, 0, 7000.0, 1, 7001.0),
            (10, 0, 7000.0, 2, 7002.0),
        ]
    );
    assert!(
        m.flows()
            .filter(|f| f.name == flows::COLLECTIVE_FLOW)
            .all(|f| {
                f.from == coll_lane(f.from.chip().unwrap())
                    && f.to == coll_lane(f.to.chip().unwrap())
            })
    );
}

#[test]
fn sends_pair_with_receives_in_order() {
    let r0 = rank_trace(
        0,
        2,
        vec![p2p("send", "to", 1, 100.0), p2p("send", "to", 1, 300.0)],
    );
    let r1 = rank_trace(
        1,
        2,
        vec![p2p("recv", "from", 0, 120.0), p2p("recv", "from", 0, 310.0)],
    );
    let m = Trace::merge_ranks(vec![r0, r1]).unwrap();
    let pairs: Vec<(f64, f64)> = m
        .flows()
        .filter(|f| f.name == flows::SEND_FLOW)
        .map(|f| (f.from_ns, f.to_ns))
        .collect();
    assert_eq!(pairs, [(100.0, 120.0), (300.0, 310.0)]);
}

#[test]
fn merged_lane_names_read_back() {
    assert_eq!(rank_lane(12, "cpu fallback"), "rank12/cpu fallback");
    assert_eq!(
        split_rank_lane("rank12/cpu fallback"),
        Some((12, "cpu fallback"))
    );
    assert_eq!(split_rank_lane("rank3/a/b"), Some((3, "a/b")));
    for plain in [
        "aten",
        "rank/aten",
        "rankx/aten",
        "rank3",
        "rank-1/aten",
        "xrank1/aten",
    ] {
        assert_eq!(split_rank_lane(plain), None, "{plain}");
    }
}

#[test]
fn labels_merge_to_their_common_part() {
    assert_eq!(common_label(&["step", "step"]), "step");
    assert_eq!(common_label(&["step.rank0", "step.rank1"]), "step");
    assert_eq!(common_label(&["a", "b"]), "a");
}

#[test]
fn bad_inputs_are_errors_naming_ranks() {
    let r = |rank, world| rank_trace(rank, world, vec![]);
    assert_eq!(Trace::merge_ranks(vec![]), Err(MergeError::Empty));

    let mut plain = r(1, 2);
    plain.meta.rank = None;
    let e = Trace::merge_ranks(vec![r(0, 2), plain.clone()]).unwrap_err();
    assert_eq!(
        e,
        MergeError::NoRank {
            index: 1,
            ranked: 0,
            rank: 0
        }
    );
    assert_eq!(e.traces(), [1, 0]);
    assert!(e.to_string().contains("trace 1 has no rank"), "{e}");
    assert_eq!(
        Trace::merge_ranks(vec![plain.clone(), plain.clone()]),
        Err(MergeError::Unranked { count: 2 })
    );
    // One plain trace merges as itself, on chip 0.
    let one = Trace::merge_ranks(vec![plain]).unwrap();
    assert_eq!(one.meta.chips, 1);

    let e = Trace::merge_ranks(vec![r(0, 2), r(1, 2), r(0, 2)]).unwrap_err();
    assert_eq!(
        e,
        MergeError::DuplicateRank {
            rank: 0,
            first: 0,
            second: 2
        }
    );
    assert!(e.to_string().contains("rank 0 appears twice"), "{e}");

    let mut two_chips = r(1, 2);
    two_chips.events.push(TraceEvent::Span(Span::new(
        Track::Kernel { chip: 1, core: 0 },
        "k",
        0.0,
        1.0,
    )));
    let e = Trace::merge_ranks(vec![r(0, 2), two_chips]).unwrap_err();
    assert_eq!(
        e,
        MergeError::TooManyChips {
            rank: 1,
            index: 1,
            chips: 2
        }
    );
    assert!(
        e.to_string().contains("rank 1 (trace 1) holds 2 chips"),
        "{e}"
    );

    let e = Trace::merge_ranks(vec![r(0, 2), r(1, 4)]).unwrap_err();
    assert!(matches!(
        e,
        MergeError::Mismatch {
            what: "world size",
            rank: 1,
            ..
        }
    ));
    assert!(
        e.to_string()
            .contains("world size 4, rank 0 (trace 0) has 2"),
        "{e}"
    );

    let mut other = r(1, 2);
    other.meta.slice = Some("v5e:4x4".into());
    let e = Trace::merge_ranks(vec![r(0, 2), other]).unwrap_err();
    assert!(
        e.to_string()
            .contains("slice v5e:4x4, rank 0 (trace 0) has v5e:2x2"),
        "{e}"
    );

    let e = Trace::merge_ranks(vec![r(0, 2), r(2, 2)]).unwrap_err();
    assert_eq!(
        e,
        MergeError::RankOutOfRange {
            rank: 2,
            index: 1,
            world_size: 2
        }
    );
}
