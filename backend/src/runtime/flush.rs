//! Running a recorded graph (a DeferAndFuse flush): its kept plan bound to its storages, or a
//! fresh one from the planner ([`crate::fusion`]), then each fused group launched in order.

use std::sync::Arc;

use serde_json::json;

use super::queue::Writes;
use super::{Core, Runtime};
use crate::error::{Result, TpuError};
use crate::fusion::plans::GraphKey;
use crate::fusion::{FusedGroup, plan_groups, split_open};
use crate::ir::{Node, OpTag};

/// Runs a recorded graph: fuses, drops dead intermediates, launches the groups in order. With
/// `recent > 0` (a size-limit flush) the groups still open ([`split_open`]) do not run: their
/// nodes are returned, to be recorded again ahead of the next operators.
pub(crate) fn run_graph(
    rt: &Runtime,
    core: &mut Core,
    nodes: Vec<Node>,
    ops: usize,
    reason: &str,
    recent: usize,
) -> Result<Vec<Node>> {
    // The flush's span starts with its own cost (partitioning, looking kernels up).
    let start_ns = core.q.host_ns;
    let cost = core.q.costs.flush_ns + ops as f64 * core.q.costs.flush_op_ns;
    core.q.charge("flush", cost);
    let gk = GraphKey::of(&nodes, recent);
    let open = match core.plans.get(&gk, &nodes) {
        // A kept plan is bound a group at a time, as its groups run.
        Some((t, b)) => {
            core.q.metrics.plan_hits += 1;
            drop(nodes);
            let open: Vec<Node> = t.open.iter().map(|n| b.node(n)).collect();
            debug_plan(core, reason, ops, &t.groups, open.len());
            for (i, g) in t.groups.iter().enumerate() {
                let members = (g.members.len(), || {
                    g.members.iter().map(|m| b.node(m)).collect()
                });
                let ids = b.op_ids(&g.op_ids);
                let node = b.node(&g.node);
                let writes = writes_of(&node);
                if let Err(e) = run_group(rt, core, node, &g.ops, ids, &g.joins, members) {
                    let rest: Vec<Node> =
                        t.groups[i + 1..].iter().map(|g| b.node(&g.node)).collect();
                    not_computed(core, writes, rest.iter().chain(&open), &e);
                    return Err(e);
                }
            }
            open
        }
        None => {
            core.q.metrics.plan_misses += 1;
            let (plans, open) = split_open(plan_groups(nodes), recent);
            core.plans.insert(gk, &plans, &open);
            debug_plan(core, reason, ops, &plans, open.len());
            let mut plans = plans.into_iter();
            while let Some(g) = plans.next() {
                let FusedGroup {
                    node,
                    ops,
                    op_ids,
                    joins,
                    members,
                } = g;
                let writes = writes_of(&node);
                let ran = run_group(
                    rt,
                    core,
                    node,
                    &ops,
                    op_ids,
                    &joins,
                    (members.len(), || members),
                );
                if let Err(e) = ran {
                    let rest: Vec<FusedGroup> = plans.collect();
                    not_computed(core, writes, rest.iter().map(|g| &g.node).chain(&open), &e);
                    return Err(e);
                }
            }
            open
        }
    };
    if core.prof.on {
        let mut args = tpuemu_isa::trace::Args::new();
        args.insert("reason".into(), json!(reason));
        args.insert("ops".into(), json!(ops));
        args.insert("nodes_kept_open".into(), json!(open.len()));
        let now = core.q.host_ns;
        core.prof
            .queue_span("flush".into(), start_ns, now, None, args);
    }
    Ok(open)
}

/// Prints a flush's plan (`TORCH_TPU_DEBUG=1`).
fn debug_plan(core: &Core, reason: &str, ops: usize, plans: &[FusedGroup], open: usize) {
    if !core.debug_print {
        return;
    }
    eprintln!(
        "[tpu] flush ({reason}): {ops} ops -> {} kernels, {open} nodes kept open",
        plans.len(),
    );
    for g in plans {
        if g.joins.is_empty() {
            eprintln!("[tpu]   group of 1: {}", g.ops[0]);
        } else {
            eprintln!(
                "[tpu]   group of {} ({}): {}",
                g.ops.len(),
                g.joins.join(", "),
                g.ops.join(", ")
            );
        }
    }
}

/// Runs one fused group: its fused node, or its parts, or (no kernel for it) its operators
/// as recorded: `members` counts them and gives them (only then).
/// The storages `node` writes.
fn writes_of(node: &Node) -> Writes {
    node.outputs
        .iter()
        .map(|v| Arc::downgrade(&v.storage))
        .collect()
}

/// A group failed with `e` (having written `writes`, or not): what it and the groups after it
/// would have written, and what the flush kept open, raise `e` when read (they are not
/// recorded any more: nothing would compute them).
fn not_computed<'a>(
    core: &mut Core,
    writes: Writes,
    rest: impl Iterator<Item = &'a Node>,
    e: &TpuError,
) {
    let mut all = writes;
    for n in rest {
        all.extend(writes_of(n));
    }
    core.q.not_computed(all, "a DeferAndFuse flush", e);
}

fn run_group(
    rt: &Runtime,
    core: &mut Core,
    mut node: Node,
    ops: &[String],
    op_ids: Vec<u64>,
    joins: &[&'static str],
    members: (usize, impl FnOnce() -> Vec<Node>),
) -> Result<()> {
    let gid = core.next_group;
    core.next_group += 1;
    core.q.metrics.fused_groups += 1;
    *core.q.metrics.group_sizes.entry(ops.len()).or_default() += 1;
    for rule in joins {
        match core.q.metrics.fusion_joins.get_mut(*rule) {
            Some(n) => *n += 1,
            None => {
                core.q.metrics.fusion_joins.insert(rule.to_string(), 1);
            }
        }
    }
    let t0 = core.q.host_ns;
    if ops.len() > 1 {
        node.op = OpTag {
            name: format!("fused[{}]", ops.join("+")).into(),
            id: node.op.id,
            shapes: std::mem::take(&mut node.op.shapes),
        };
    }
    match rt.execute(core, &node, Some(gid)) {
        // A product fused with a twin or a row reduction runs as its two parts, when both
        // have kernels (else as its operators, below).
        Err(TpuError::NoKernel { .. })
            if node
                .split_fused()
                .is_some_and(|ps| ps.iter().all(|p| rt.prepare(core, p).is_ok())) =>
        {
            for part in node.split_fused().expect("checked") {
                rt.execute(core, &part, Some(gid))?;
            }
        }
        // No kernel for the fused node (checked before anything launches): its operators
        // run as recorded, one kernel each, rather than failing the program.
        Err(TpuError::NoKernel { message: why, .. }) if members.0 > 1 => {
            if core.debug_print {
                eprintln!("[tpu]   group {gid} unfused ({why}): its operators run one by one");
            }
            *core
                .q
                .metrics
                .fusion_joins
                .entry("unfused: no kernel for the group".to_string())
                .or_default() += 1;
            for m in &(members.1)() {
                rt.execute(core, m, Some(gid))?;
            }
        }
        r => r?,
    }
    if core.prof.on {
        let mut args = tpuemu_isa::trace::Args::new();
        args.insert("ops".into(), json!(ops));
        args.insert("op_ids".into(), json!(op_ids));
        args.insert("joins".into(), json!(joins));
        let now = core.q.host_ns;
        core.prof
            .queue_span(format!("fused group {gid}"), t0, now, Some(gid), args);
    }
    Ok(())
}
