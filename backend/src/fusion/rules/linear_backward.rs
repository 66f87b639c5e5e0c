//! A linear layer's backward: `dX = dY @ W` and `dW = dY^T @ X` both read the output
//! gradient `dY`, once by rows and once transposed. The second of the two products joins the
//! first as its twin ([`crate::ir::TwinProduct`]): one kernel that loads each block of `dY`'s
//! columns once and folds it into both products (`kernels::matmul::pair`), so `dY` crosses HBM
//! once instead of twice; on the demo's language-model head that is the 8 MiB logits gradient.
//! XLA's multi-output fusion of sibling consumers does the same for operands read by two
//! products.
//!
//! Either product may come first (PyTorch's autograd records `dX` first; a hand-written
//! backward may not). The product reading `dY` by rows keeps the epilogue (a residual's
//! gradient added to `dX`, say); the twin must be plain. A runtime that cannot hold the pair
//! in VMEM, or that splits products over cores, runs the two products as they were
//! (`Node::split_pair`).

use super::super::group::{Graph, Group};
use super::matmul_epilogue::MAX_OPERANDS;
use crate::ir::{MatmulNode, Node, NodeKind, TwinProduct, View};
use crate::kernels::matmul::is_plain_epilogue;

/// Joins matmul `n` to matmul group `g` when one reads the other's left operand transposed.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let (NodeKind::Matmul(gm), NodeKind::Matmul(nm)) = (&g.node.kind, &n.kind) else {
        return false;
    };
    if gm.twin.is_some() || gm.rows.is_some() || !plain(n, nm) {
        return false;
    }
    // The two must be independent: `n` reads nothing the group writes.
    if n.inputs.iter().any(|v| g.written(v.storage.id()).is_some()) {
        return false;
    }
    // The twin's right operand and product take two of the kernel's registers.
    let operands = g.node.inputs.len() + g.node.outputs.len() - 2;
    let pair = if transposed(&g.node.inputs[0], gm, &n.inputs[0], nm)
        && operands + 2 <= MAX_OPERANDS
        && worth_it(gm)
    {
        pair_of(&g.node, gm, n, nm)
    } else if g.members.len() == 1
        && plain(&g.node, gm)
        && transposed(&n.inputs[0], nm, &g.node.inputs[0], gm)
        && worth_it(nm)
    {
        pair_of(n, nm, &g.node, gm)
    } else {
        return false;
    };
    g.absorb(n);
    g.node = pair;
    true
}

/// Whether pairing pays for `first` (the product reading `dY` by rows): the pair reads `dY`
/// (`m x k`) once less but finishes `first` (`m x n`, accumulated over every block of `dY`)
/// only after the last block, its epilogue and stores exposed instead of running under other
/// tiles' products. Worth it when `dY` is at least as wide as the first product: the
/// language-model head (8,192 against 512), the attention projections (512 against 512), the
/// gate and up projections (1,408 against 512); not the down projection (512 against 1,408,
/// with SwiGLU's backward in its epilogue: measured 21.3 us paired against 23.3 us apart).
fn worth_it(first: &MatmulNode) -> bool {
    first.k >= first.n
}

/// A product as recorded: `a`, `w`, one output, the default epilogue.
fn plain(n: &Node, mm: &MatmulNode) -> bool {
    n.inputs.len() == 2 && n.outputs.len() == 1 && is_plain_epilogue(&mm.epilogue)
}

/// Whether `a2`, the left operand of `m2`, is `a1` (the left operand of `m1`, read by rows)
/// transposed: the same elements, rows and columns swapped, both products batch 1.
fn transposed(a1: &View, m1: &MatmulNode, a2: &View, m2: &MatmulNode) -> bool {
    let (l1, l2) = (&a1.layout, &a2.layout);
    let last2 = |l: &crate::layout::Layout| -> Option<([usize; 2], [isize; 2])> {
        let d = l.ndim();
        (d >= 2 && l.shape[..d - 2].iter().all(|&s| s == 1)).then(|| {
            (
                [l.shape[d - 2], l.shape[d - 1]],
                [l.strides[d - 2], l.strides[d - 1]],
            )
        })
    };
    let (Some((s1, t1)), Some((s2, t2))) = (last2(l1), last2(l2)) else {
        return false;
    };
    m1.batch == 1
        && m2.batch == 1
        && m1.precision == m2.precision
        && a1.storage.id() == a2.storage.id()
        && a1.dtype == a2.dtype
        && l1.offset == l2.offset
        && s1 == [m1.m, m1.k]
        && s2 == [s1[1], s1[0]]
        && t2 == [t1[1], t1[0]]
        // Rows of A contiguous and apart (the twin then reads it transposed), more than one
        // of each, and a twin with columns: what the pair's kernel takes.
        && t1[1] == 1
        && t1[0] != 1
        && s1[0] > 1
        && s1[1] > 1
        && m2.n > 0
        && m2.m == m1.k
        && m2.k == m1.m
}

/// The pair of `first` (reading `dY` by rows, with its epilogue) and `twin` (plain): the
/// first's inputs then the twin's right operand; the first's outputs then the twin's product.
fn pair_of(first: &Node, fm: &MatmulNode, twin: &Node, tm: &MatmulNode) -> Node {
    let mut mm = fm.clone();
    mm.twin = Some(TwinProduct { n: tm.n });
    let mut inputs = first.inputs.clone();
    inputs.push(twin.inputs[1].clone());
    let mut outputs = first.outputs.clone();
    outputs.push(twin.outputs[0].clone());
    Node {
        kind: NodeKind::Matmul(mm),
        inputs,
        outputs,
        op: first.op.clone(),
    }
}
