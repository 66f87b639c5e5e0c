//! Which lane a track becomes, which group (host or a chip) it belongs to, and in what order
//! lanes are listed.
//!
//! Order: the host group first (`python`, `aten`, `queue`, `dispatch`, then any other host
//! lane by name, which is where foreign Chrome traces land, then host counters), then one
//! group per chip in chip order, inside it kernels, counters (HBM in use), regions, units
//! (scalar, valu, vld, vst, xlu, eup, mxu0.., dma, sync), DMA engines, ICI links and the
//! `collective` link lane.
//!
//! A merged distributed run ([`tpuemu_isa::trace::Trace::merge_ranks`]) has a chip per rank
//! and host lanes named `rank{N}/{lane}`: those belong to chip `N`'s group, listed above its
//! device lanes, and are of the kind of the part after the slash (`rank2/aten` is
//! [`LaneKind::HostOps`]).
//!
//! How many rows a lane may take is bounded here too ([`LaneKind::max_rows`]): lanes whose
//! spans nest (host calls, regions) keep a few nesting rows; unit, DMA, link and kernel lanes,
//! whose spans overlap without nesting (pipelined instructions), are drawn as one row of
//! occupancy.

use serde::{Deserialize, Serialize};
use tpuemu_isa::trace::{COLLECTIVE_LINK, Track, split_rank_lane};

/// A collapsible group of lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Group {
    /// Host lanes.
    Host,
    /// The lanes of one chip.
    Chip(u32),
}

impl Group {
    /// The group of a track: its chip's, or, for a host lane, the host's unless it is a
    /// merged rank's lane (`rank2/aten` belongs to chip 2).
    pub fn of(track: &Track) -> Group {
        match track {
            Track::Host { lane } => {
                split_rank_lane(lane).map_or(Group::Host, |(r, _)| Group::Chip(r))
            }
            _ => track.chip().map_or(Group::Host, Group::Chip),
        }
    }
}

/// What kind of lane a track is, for ordering, colours and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LaneKind {
    /// Python-level calls (`python`), above the operators they call.
    HostPython,
    /// Host operator calls (`aten`).
    HostOps,
    /// Host queue: flushes and fused groups.
    HostQueue,
    /// Host kernel dispatch.
    HostDispatch,
    /// Any other host lane.
    HostOther,
    /// Kernels on a core.
    Kernel,
    /// A sampled value (HBM bytes in use), drawn as a step graph.
    Counter,
    /// Profiling regions on a core (nest).
    Region,
    /// One unit of a core.
    Unit,
    /// A DMA engine.
    Dma,
    /// An ICI link.
    Link,
    /// The chip's collectives (`Link { link: "collective" }`): spans drawn with their names.
    Collective,
}

impl LaneKind {
    /// The kind of a track.
    pub fn of(track: &Track) -> LaneKind {
        match track {
            Track::Host { lane } => match split_rank_lane(lane).map_or(lane.as_str(), |(_, l)| l) {
                "python" => LaneKind::HostPython,
                "aten" => LaneKind::HostOps,
                "queue" => LaneKind::HostQueue,
                "dispatch" => LaneKind::HostDispatch,
                _ => LaneKind::HostOther,
            },
            Track::Kernel { .. } => LaneKind::Kernel,
            Track::Marker { .. } => LaneKind::Region,
            Track::Unit { .. } => LaneKind::Unit,
            Track::Dma { .. } => LaneKind::Dma,
            Track::Link { link, .. } if link == COLLECTIVE_LINK => LaneKind::Collective,
            Track::Link { .. } => LaneKind::Link,
        }
    }

    /// Whether the lane is a host lane (of the host group, or of a merged rank's chip).
    pub fn is_host(self) -> bool {
        matches!(
            self,
            LaneKind::HostPython
                | LaneKind::HostOps
                | LaneKind::HostQueue
                | LaneKind::HostDispatch
                | LaneKind::HostOther
        )
    }

    /// Whether spans on such a lane nest (calls inside calls, regions inside regions), so
    /// that rows by nesting depth mean something. Other lanes' overlapping spans are
    /// concurrent work (pipelined instructions, DMAs in flight) and share one row.
    pub fn may_nest(self) -> bool {
        self.is_host() || self == LaneKind::Region
    }

    /// The most rows a lane of this kind takes: spans deeper than that are drawn in the last
    /// row (and counted in [`crate::model::Lane::folded`]), so a screenful shows every lane.
    pub fn max_rows(self) -> usize {
        if self.may_nest() { MAX_NEST_ROWS } else { 1 }
    }
}

/// Nesting rows kept for host and region lanes.
pub const MAX_NEST_ROWS: usize = 4;

/// The sort key of a lane: lanes are listed in increasing key order.
pub type LaneKey = (Group, LaneKind, u32, u32, String);

/// The sort key of a track.
pub fn lane_order(track: &Track) -> LaneKey {
    let kind = LaneKind::of(track);
    let (core, sub, name) = match track {
        Track::Host { lane } => (0, 0, lane.clone()),
        Track::Kernel { core, .. } | Track::Marker { core, .. } => (*core, 0, String::new()),
        Track::Unit { core, unit, .. } => (*core, 0, format!("{:04}", unit_rank(*unit))),
        Track::Dma { engine, .. } => (0, *engine, String::new()),
        Track::Link { link, .. } => (0, 0, link.clone()),
    };
    (Group::of(track), kind, core, sub, name)
}

/// The sort key of a counter lane (`chip` `None`: a host counter, after the host lanes; a
/// merged rank's host counter, `rank2/...`, after that rank's host lanes).
pub fn counter_order(chip: Option<u32>, name: &str) -> LaneKey {
    let group = match chip {
        Some(c) => Group::Chip(c),
        None => split_rank_lane(name).map_or(Group::Host, |(r, _)| Group::Chip(r)),
    };
    let kind = if chip.is_some() {
        LaneKind::Counter
    } else {
        LaneKind::HostOther
    };
    // Host counters sort after every host lane name.
    let sub = u32::from(chip.is_none());
    (group, kind, u32::MAX, sub, name.to_string())
}

fn unit_rank(unit: tpuemu_isa::instr::Unit) -> u32 {
    use tpuemu_isa::instr::Unit as U;
    match unit {
        U::Scalar => 0,
        U::Valu => 1,
        U::VLoad => 2,
        U::VStore => 3,
        U::Xlu => 4,
        U::Eup => 5,
        U::Mxu(m) => 10 + u32::from(m.index()),
        U::Dma => 100,
        U::Sync => 101,
        U::Marker => 102,
    }
}

/// A group's header text (`host`, `chip 0 (v5e)`); in a merged distributed run (`ranks`),
/// where chip `N` is rank `N`'s, `rank 2 · chip 2 (v5e)`.
pub fn group_label(group: Group, generation: &str, ranks: bool) -> String {
    let chip = match group {
        Group::Host => return "host".to_string(),
        Group::Chip(c) if generation.is_empty() => format!("chip {c}"),
        Group::Chip(c) => format!("chip {c} ({generation})"),
    };
    match group {
        Group::Chip(c) if ranks => format!("rank {c} · {chip}"),
        _ => chip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuemu_isa::instr::Unit;
    use tpuemu_isa::reg::Mxu;

    fn host(l: &str) -> Track {
        Track::Host { lane: l.into() }
    }

    #[test]
    fn lanes_sort_host_then_chips_then_kinds() {
        let unit = |u| Track::Unit {
            chip: 0,
            core: 0,
            unit: u,
        };
        let mut tracks = vec![
            Track::Link {
                chip: 0,
                link: "x+".into(),
            },
            Track::Dma { chip: 0, engine: 1 },
            unit(Unit::Mxu(Mxu::n(1))),
            Track::Kernel { chip: 1, core: 0 },
            unit(Unit::Mxu(Mxu::n(0))),
            unit(Unit::Valu),
            Track::Dma { chip: 0, engine: 0 },
            unit(Unit::Scalar),
            Track::Marker { chip: 0, core: 0 },
            Track::Kernel { chip: 0, core: 0 },
            host("zzz"),
            host("dispatch"),
            host("queue"),
            host("aten"),
        ];
        tracks.sort_by_key(lane_order);
        let labels: Vec<String> = tracks
            .iter()
            .map(|t| format!("{:?}:{}", t.chip(), t.label()))
            .collect();
        assert_eq!(
            labels,
            [
                "None:aten",
                "None:queue",
                "None:dispatch",
                "None:zzz",
                "Some(0):core0 kernels",
                "Some(0):core0 regions",
                "Some(0):core0 scalar",
                "Some(0):core0 valu",
                "Some(0):core0 mxu0",
                "Some(0):core0 mxu1",
                "Some(0):dma0",
                "Some(0):dma1",
                "Some(0):link x+",
                "Some(1):core0 kernels",
            ]
        );
    }

    #[test]
    fn groups_and_labels() {
        assert_eq!(Group::of(&host("aten")), Group::Host);
        assert_eq!(
            Group::of(&Track::Dma { chip: 3, engine: 0 }),
            Group::Chip(3)
        );
        assert_eq!(group_label(Group::Chip(3), "v5e", false), "chip 3 (v5e)");
        assert_eq!(group_label(Group::Chip(3), "", false), "chip 3");
        assert_eq!(
            group_label(Group::Chip(2), "v5e", true),
            "rank 2 · chip 2 (v5e)"
        );
        assert_eq!(group_label(Group::Host, "v5e", true), "host");
        assert!(LaneKind::Region.may_nest() && !LaneKind::Unit.may_nest());
        assert_eq!(LaneKind::Unit.max_rows(), 1);
        assert_eq!(LaneKind::HostOps.max_rows(), MAX_NEST_ROWS);
        assert_eq!(LaneKind::of(&host("python")), LaneKind::HostPython);
    }

    #[test]
    fn merged_rank_lanes_sit_above_their_chips_device_lanes() {
        let link = |chip, l: &str| Track::Link {
            chip,
            link: l.into(),
        };
        let mut tracks = vec![
            link(1, "collective"),
            link(1, "x+"),
            Track::Kernel { chip: 1, core: 0 },
            host("rank1/aten"),
            host("rank0/queue"),
            Track::Kernel { chip: 0, core: 0 },
            host("rank1/python"),
            host("rank0/aten"),
            host("aten"),
        ];
        tracks.sort_by_key(lane_order);
        let labels: Vec<String> = tracks
            .iter()
            .map(|t| format!("{:?} {}", Group::of(t), t.label()))
            .collect();
        assert_eq!(
            labels,
            [
                "Host aten",
                "Chip(0) rank0/aten",
                "Chip(0) rank0/queue",
                "Chip(0) core0 kernels",
                "Chip(1) rank1/python",
                "Chip(1) rank1/aten",
                "Chip(1) core0 kernels",
                "Chip(1) link x+",
                "Chip(1) link collective",
            ]
        );
        assert_eq!(LaneKind::of(&host("rank2/aten")), LaneKind::HostOps);
        assert_eq!(
            LaneKind::of(&host("rank2/cpu fallback")),
            LaneKind::HostOther
        );
        assert_eq!(LaneKind::of(&link(0, "collective")), LaneKind::Collective);
        assert!(LaneKind::HostQueue.is_host() && !LaneKind::Collective.is_host());
        // A rank's host counter: after its host lanes, before its kernels.
        let counter = counter_order(None, "rank1/host_bytes");
        assert_eq!(counter.0, Group::Chip(1));
        assert!(counter > lane_order(&host("rank1/aten")));
        assert!(counter < lane_order(&Track::Kernel { chip: 1, core: 0 }));
        assert_eq!(counter_order(None, "host_bytes").0, Group::Host);
    }
}
