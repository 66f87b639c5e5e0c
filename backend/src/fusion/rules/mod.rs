//! The fusion rules, one per pattern, each in its own file; each is tested
//! (`tests/backend/fusion_rules/`) on the kernels and HBM bytes it leaves against a
//! hand-computed minimum.
//!
//! A *join* rule decides whether a recorded node joins a group already formed (the planner
//! offers each node to the newest groups it does not depend on, newest first); the first rule
//! that accepts it merges it (the planner, not a rule, moves independent groups out of a
//! join's way and reads constant fills as constants). The rules, in the order they are tried:
//!
//! | rule | joins |
//! |---|---|
//! | [`elementwise`] | an elementwise node to an elementwise group over the same space |
//! | [`reduction`] | a node to a group over the same space when either reduces along the row (prologues, epilogues, softmax and norms) |
//! | [`per_row`] | a map over a reduction's outer dims, as per-row work of the reduction |
//! | [`matmul_epilogue`] | an elementwise node reading a matmul's product, as its epilogue |
//! | [`linear_backward`] | a product reading another's left operand transposed (`dY^T @ X` beside `dY @ W`), as its twin |
//! | [`zero_table`] | an index-add/index-put into a table a group only fills with zeros: the table starts as zeros in VMEM (tried first: it replaces the fill it writes over) |

mod elementwise;
mod linear_backward;
mod matmul_epilogue;
mod per_row;
mod reduction;
mod tile;
mod zero_table;

use super::group::{Graph, Group, storages};
use crate::ir::Node;

/// A join rule: merges the node into the group and returns true, or leaves both unchanged.
type Join = fn(&mut Group, &Node, &Graph) -> bool;

/// The join rules, in the order they are tried.
const JOINS: &[(&str, Join)] = &[
    ("elementwise", elementwise::join),
    ("reduction", reduction::join),
    ("per-row", per_row::join),
    ("matmul epilogue", matmul_epilogue::join),
    ("linear backward", linear_backward::join),
];

/// Tries every join rule; returns the name of the rule that merged `n` into `g`.
pub(super) fn join(g: &mut Group, n: &Node, graph: &Graph) -> Option<&'static str> {
    // The one rule that replaces what it writes over.
    if zero_table::join(g, n, graph) {
        return Some("zero table");
    }
    // `n` must not write anything the group touches (no in-place updates inside a kernel).
    let touched = storages(&g.node);
    if n.outputs.iter().any(|v| touched.contains(&v.storage.id())) {
        return None;
    }
    JOINS
        .iter()
        .find(|(_, rule)| rule(g, n, graph))
        .map(|(name, _)| *name)
}
