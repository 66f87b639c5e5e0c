//! Per-row maps: a node over a reduction group's outer dims that reads the group's results
//! (`rsqrt(mean(x^2) + eps)` on `[N, 1]`) joins the group as per-row work, computed once per
//! row after the reduction instead of in a kernel of its own.

use super::super::group::{Graph, Group};
use super::tile::{self, Fit};
use crate::ir::Node;

/// Joins `n` to `g` as per-row work over `g`'s outer dims when `n` reads what `g` computes: an
/// unrelated per-row map would only add an operand and registers held across the whole row
/// kernel (a cross-entropy kernel over 8,192 classes ran 33% longer with a norm's `rsqrt`
/// beside it) to save a launch.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    n.inputs.iter().any(|v| g.written(v.storage.id()).is_some())
        && tile::fit(g, n) == Some(Fit::PerRow)
        && tile::merge(g, n, Fit::PerRow)
}
