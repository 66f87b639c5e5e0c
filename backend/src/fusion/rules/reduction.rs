//! Reductions with their prologue and epilogue: a tile node joins a tile group over the same
//! iteration space when one of them reduces along the row (softmax, norms, losses and their
//! backward), reading the group's full values element for element and its per-row values
//! broadcast along the row. `x * rsqrt(mean(x^2) + eps) * g` is one row kernel.

use super::super::group::{Graph, Group};
use super::tile::{self, Fit};
use crate::ir::{Node, NodeKind};

/// Joins `n` to `g` over the same space when either reduces.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let reduces = |k: &NodeKind| matches!(k, NodeKind::Tile { row_dims, .. } if *row_dims > 0);
    (reduces(&g.node.kind) || reduces(&n.kind))
        && tile::fit(g, n) == Some(Fit::Same)
        && tile::merge(g, n, Fit::Same)
}
