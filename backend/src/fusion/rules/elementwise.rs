//! Elementwise chains: an elementwise tile node joins an elementwise tile group over the same
//! iteration space, reading the group's values element for element. `exp(x * 3 + 1) - x`
//! becomes one kernel that reads `x` once and writes the result once.

use super::super::group::{Graph, Group};
use super::tile::{self, Fit};
use crate::ir::{Node, NodeKind};

/// Joins `n` to `g` when both are elementwise over the same space.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let both_elementwise = matches!(
        (&g.node.kind, &n.kind),
        (
            NodeKind::Tile { row_dims: 0, .. },
            NodeKind::Tile { row_dims: 0, .. }
        )
    );
    both_elementwise && tile::fit(g, n) == Some(Fit::Same) && tile::merge(g, n, Fit::Same)
}
