//! A table filled with zeros and then indexed into (`embedding_dense_backward`: zeros, then
//! an index-add of the gradient rows; `scatter_add` into `zeros`): the index kernel starts the
//! table as zeros in VMEM instead of reading it, so the table crosses HBM once (written) rather
//! than three times (zero fill written, read back, written), a reduction fused with the fill
//! that produces its accumulator.

use super::super::group::{Graph, Group};
use super::super::views::same_view;
use crate::dtype::Scalar;
use crate::ir::{Node, NodeKind, POp, Prog};

/// Joins an index-add or index-put `n` to a group that only fills `n`'s table with zeros.
/// Unlike the other rules it lets `n` write what the group wrote: the fill is replaced, not
/// extended.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let (NodeKind::IndexAdd(gn) | NodeKind::IndexPut(gn, _)) = &n.kind else {
        return false;
    };
    if gn.zero_table || g.members.len() != 1 {
        return false;
    }
    let NodeKind::Tile { prog, .. } = &g.node.kind else {
        return false;
    };
    let fills = g.node.inputs.is_empty()
        && g.node.outputs.len() == 1
        && prog.outputs.len() == 1
        && is_zero(prog, prog.outputs[0]);
    // The same elements, and nothing else of `n` reads them (index and source are other
    // storages).
    let table = g.node.outputs.first();
    if !fills
        || !table.is_some_and(|t| same_view(t, &n.outputs[0]))
        || n.inputs
            .iter()
            .any(|v| v.storage.id() == n.outputs[0].storage.id())
    {
        return false;
    }
    let mut node = n.clone();
    match &mut node.kind {
        NodeKind::IndexAdd(gn) | NodeKind::IndexPut(gn, _) => gn.zero_table = true,
        _ => unreachable!("matched above"),
    }
    g.absorb(n);
    g.node = node;
    g.out_refs.clear();
    true
}

/// Whether prog node `r` is the constant zero (all bits zero in any dtype: not `-0.0`), cast
/// or not.
fn is_zero(prog: &Prog, r: u32) -> bool {
    match prog.node(r).op {
        POp::Const(Scalar::Int(0) | Scalar::Bool(false)) => true,
        POp::Const(Scalar::Float(f)) => f.to_bits() == 0,
        POp::Cast(a) => is_zero(prog, a),
        _ => false,
    }
}
