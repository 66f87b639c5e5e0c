//! DeferAndFuse's planner: a recorded graph as few kernels as possible, moving as few bytes
//! through HBM as possible. Compile uses the same planner for its whole graph. The planner is
//! pure — nodes in, fused groups out, no runtime — and keeps plans by graph structure
//! ([`plans`]); the runtime runs them (`runtime::flush`).
//!
//! The planner walks the recorded nodes in order and offers each to the newest groups it does
//! not depend on (no read-after-write, write-after-read or write-after-write between them),
//! newest first; the fusion rules ([`rules`], one file per pattern) decide whether it joins.
//! A node no rule accepts starts a group of its own. It may also join a group older than one
//! it depends on when the groups in between that it waits on can all move before that group
//! ([`order`]). Before planning, a constant fill is copied into the tile nodes that read it
//! ([`consts`]), so a seed gradient ties a backward to nothing. Once every node has a group,
//! a product that only a later reduction along its rows reads merges into that reduction's
//! group as its row epilogue ([`row_epilogue`]).
//!
//! Values written inside a group and needed by no later node and no live tensor are dropped
//! from the group's outputs: they never get device memory and never touch HBM. Fused kernels
//! are cached by pattern (operators, shapes, dtypes; storages are arguments), so a training
//! loop generates each kernel once.

mod consts;
mod group;
mod order;
pub(crate) mod plans;
mod row_epilogue;
mod rules;
mod views;

use std::collections::HashMap;

use crate::ir::{Node, NodeKind};
use group::{Graph, Group};
use order::Access;

/// How many of the newest groups a node may join (bounds planning time on huge graphs).
const SEARCH_WINDOW: usize = 16;

/// A fused group ready to run: one node and the operators it holds.
pub(crate) struct FusedGroup {
    pub node: Node,
    pub ops: Vec<String>,
    pub op_ids: Vec<u64>,
    /// The rule that merged each operator after the first (see [`rules`]).
    pub joins: Vec<&'static str>,
    /// The nodes as recorded: they run one by one when the kernel generator cannot build the
    /// fused node (too many live values for the vector registers, say).
    pub members: Vec<Node>,
}

/// Fuses a recorded graph into groups, in order. Values needed by a later node or by a live
/// tensor (one that holds the storage outside the graph) stay outputs of their group; the rest
/// are dropped.
pub(crate) fn plan_groups(nodes: Vec<Node>) -> Vec<FusedGroup> {
    let nodes = consts::inline_fills(nodes);
    let graph = Graph::new(&nodes);
    let mut groups: Vec<Group> = Vec::new();
    for n in &nodes {
        if !offer(&mut groups, n, &graph) {
            groups.push(Group::new(n.clone()));
        }
    }
    row_epilogue::merge(&mut groups, &graph);
    groups.into_iter().map(|g| finish(g, &graph)).collect()
}

/// Offers `n` to the newest groups, newest first; true when one took it. `n` may move back to
/// run with an earlier group past groups it does not depend on (none writes what `n` reads,
/// none touches what `n` writes); past one it depends on only when that one can move back
/// too ([`order`]).
fn offer(groups: &mut Vec<Group>, n: &Node, graph: &Graph) -> bool {
    let access = Access::of(n);
    let floor = groups
        .iter()
        .rposition(|g| access.after(&g.node))
        .unwrap_or(0);
    let window = groups.len().saturating_sub(SEARCH_WINDOW);
    for at in (window..groups.len()).rev() {
        let moved = if at >= floor {
            Vec::new()
        } else {
            match order::movable(groups, at, &access) {
                Some(m) => m,
                None => continue,
            }
        };
        if let Some(rule) = rules::join(&mut groups[at], n, graph) {
            groups[at].joins.push(rule);
            order::hoist(groups, at, &moved);
            return true;
        }
    }
    false
}

/// Drops the outputs of a group that no node outside it reads and no live tensor holds.
fn finish(mut g: Group, graph: &Graph) -> FusedGroup {
    // Merged nodes may name one operand twice (the forward's and the backward's view of
    // cross-entropy's targets).
    group::read_each_operand_once(&mut g.node);
    // A product pair's twin product (last) is not the epilogue's: it stays.
    let (prog, twin) = match &mut g.node.kind {
        NodeKind::Tile { prog, .. } => (Some(prog), 0),
        NodeKind::Matmul(mm) => {
            let tw = mm.twin_operands();
            match &mut mm.rows {
                // The node's outputs are the row program's.
                Some(r) => (Some(&mut r.prog), 0),
                None => (Some(&mut mm.epilogue), tw),
            }
        }
        _ => (None, 0),
    };
    if let Some(prog) = prog {
        let kept_twin = g.node.outputs.split_off(g.node.outputs.len() - twin);
        let mut own_reads: HashMap<u64, usize> = HashMap::new();
        for id in &g.read_ids {
            *own_reads.entry(*id).or_default() += 1;
        }
        let mut keep_v = Vec::new();
        let mut keep_o = Vec::new();
        for (k, v) in g.node.outputs.iter().enumerate() {
            let id = v.storage.id();
            let outside = graph.readers(id) > own_reads.get(&id).copied().unwrap_or(0);
            if graph.live(v) || outside || (k + 1 == g.node.outputs.len() && keep_v.is_empty()) {
                keep_v.push(v.clone());
                keep_o.push(prog.outputs[k]);
            }
        }
        g.node.outputs = keep_v;
        g.node.outputs.extend(kept_twin);
        prog.outputs = keep_o;
    }
    FusedGroup {
        node: g.node,
        ops: g.ops,
        op_ids: g.op_ids,
        joins: g.joins,
        members: g.members,
    }
}

/// The trailing groups still open at a size-limit flush, and the groups before them: a group
/// is open when it is a lone product as recorded (no epilogue, no twin yet) of one of the
/// `recent` latest operators, whose fusions can only come from operators recorded later (a
/// linear layer's weight gradient recorded just before the cut, its input gradient just
/// after: [`rules`]' linear backward). Other groups run: work held back runs later, after
/// the host has recorded more, and a step's last flush runs exposed. Open groups go back to
/// the recording as their nodes; at most half the nodes stay, and at least one group runs.
pub(crate) fn split_open(
    mut plans: Vec<FusedGroup>,
    recent: usize,
) -> (Vec<FusedGroup>, Vec<Node>) {
    let mut ids: Vec<u64> = plans
        .iter()
        .flat_map(|g| g.members.iter().map(|m| m.op.id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let Some(&from) = ids.len().checked_sub(recent).and_then(|i| ids.get(i)) else {
        return (plans, Vec::new());
    };
    if recent == 0 {
        return (plans, Vec::new());
    }
    let total: usize = plans.iter().map(|g| g.members.len()).sum();
    let (mut keep, mut carried) = (plans.len(), 0);
    while keep > 1 {
        let g = &plans[keep - 1];
        let lone_product = g.members.len() == 1
            && matches!(&g.node.kind, NodeKind::Matmul(mm)
                if mm.twin.is_none() && crate::kernels::matmul::is_plain_epilogue(&mm.epilogue));
        if !lone_product
            || g.members.iter().any(|m| m.op.id < from)
            || 2 * (carried + g.members.len()) > total
        {
            break;
        }
        carried += g.members.len();
        keep -= 1;
    }
    let open = plans.split_off(keep);
    (plans, open.into_iter().flat_map(|g| g.members).collect())
}
