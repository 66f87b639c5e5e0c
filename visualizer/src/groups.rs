//! Fusion groups of a loaded trace: each kernel lane's groups (kernels sharing a `group_id`)
//! with their extents, the host operators each group fused (the queue's `op_ids` and the
//! kernels' own `op_id`s), and the host spans of each operator.

use std::collections::{BTreeSet, HashMap};

use tpuemu_isa::trace::Span;

use crate::index::RowIndex;
use crate::lanes::LaneKind;
use crate::model::{FusionGroup, Lane, LaneGroups};

pub(crate) type Links = (
    Vec<LaneGroups>,
    HashMap<u64, BTreeSet<u64>>,
    HashMap<u64, Vec<usize>>,
);

/// Fusion group extents per kernel lane, group -> operator ids, operator -> host spans.
pub(crate) fn link_groups(spans: &[Span], lanes: &[Lane]) -> Links {
    let mut groups = Vec::new();
    let mut group_ops: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    let mut host_ops: HashMap<u64, Vec<usize>> = HashMap::new();
    for (li, lane) in lanes.iter().enumerate() {
        match lane.kind {
            LaneKind::Kernel => {
                let mut by_id: HashMap<u64, FusionGroup> = HashMap::new();
                for s in &spans[lane.spans.clone()] {
                    let Some(g) = s.group_id else { continue };
                    if let Some(op) = s.op_id {
                        group_ops.entry(g).or_default().insert(op);
                    }
                    let e = by_id.entry(g).or_insert(FusionGroup {
                        group_id: g,
                        lane: li,
                        start_ns: s.start_ns,
                        end_ns: s.end_ns,
                        kernels: 0,
                    });
                    e.start_ns = e.start_ns.min(s.start_ns);
                    e.end_ns = e.end_ns.max(s.end_ns);
                    e.kernels += 1;
                }
                if by_id.is_empty() {
                    continue;
                }
                let mut list: Vec<FusionGroup> = by_id.into_values().collect();
                list.sort_by(|a, b| {
                    a.start_ns
                        .total_cmp(&b.start_ns)
                        .then(a.group_id.cmp(&b.group_id))
                });
                let index = RowIndex::new(0, list.iter().map(|g| (g.start_ns, g.end_ns)));
                groups.push(LaneGroups {
                    lane: li,
                    groups: list,
                    index,
                });
            }
            LaneKind::HostQueue => {
                for s in &spans[lane.spans.clone()] {
                    let Some(g) = s.group_id.or_else(|| group_number(&s.name)) else {
                        continue;
                    };
                    if let Some(ids) = s.args.get("op_ids").and_then(|v| v.as_array()) {
                        group_ops
                            .entry(g)
                            .or_default()
                            .extend(ids.iter().filter_map(serde_json::Value::as_u64));
                    }
                }
            }
            _ => {}
        }
        if lane.kind.is_host() {
            for i in lane.spans.clone() {
                if let Some(op) = spans[i].op_id {
                    host_ops.entry(op).or_default().push(i);
                }
            }
        }
    }
    (groups, group_ops, host_ops)
}

/// `fused group 12` -> 12.
fn group_number(name: &str) -> Option<u64> {
    name.strip_prefix("fused group ")?.trim().parse().ok()
}
