//! Which groups a node depends on, and moving independent groups out of a join's way.
//!
//! A node may join an earlier group only if it depends on no group after it. When it does,
//! the join can still be made if those groups (and the groups between that they depend on)
//! depend on neither the target group nor anything they would move past: they are moved, in
//! order, to just before the target group. A backward that reads a scalar reduced from the
//! targets alone (`nll_loss`'s total weight) thus joins the forward pass over the same rows.

use std::collections::BTreeSet;

use super::group::{Group, storages};
use crate::ir::Node;

/// What a node (or group) reads and writes, by storage.
pub(super) struct Access {
    reads: BTreeSet<u64>,
    writes: BTreeSet<u64>,
}

impl Access {
    /// The storages `n` reads and writes.
    pub fn of(n: &Node) -> Self {
        Access {
            reads: n.inputs.iter().map(|v| v.storage.id()).collect(),
            writes: n.outputs.iter().map(|v| v.storage.id()).collect(),
        }
    }

    /// Whether this, running later, must stay after `earlier`: `earlier` writes what this
    /// reads (read after write), or touches what this writes (write after read or write).
    pub fn after(&self, earlier: &Node) -> bool {
        earlier
            .outputs
            .iter()
            .any(|v| self.reads.contains(&v.storage.id()))
            || storages(earlier).iter().any(|id| self.writes.contains(id))
    }
}

/// The groups after `groups[at]` that a node with access `n` must stay after, with the groups
/// between that they must stay after, in order; `None` when one of them must stay after
/// `groups[at]` itself (then nothing can move and the node cannot join `groups[at]`).
pub(super) fn movable(groups: &[Group], at: usize, n: &Access) -> Option<Vec<usize>> {
    let mut moved: Vec<usize> = Vec::new(); // newest first
    for j in (at + 1..groups.len()).rev() {
        let g = &groups[j].node;
        let needed = n.after(g) || moved.iter().any(|&m| Access::of(&groups[m].node).after(g));
        if needed {
            moved.push(j);
        }
    }
    if moved
        .iter()
        .any(|&m| Access::of(&groups[m].node).after(&groups[at].node))
    {
        return None;
    }
    moved.reverse();
    Some(moved)
}

/// Moves `groups[moved]` (ascending indices, all after `at`), in order, to just before
/// `groups[at]`.
pub(super) fn hoist(groups: &mut Vec<Group>, at: usize, moved: &[usize]) {
    let mut taken = Vec::with_capacity(moved.len());
    for &m in moved.iter().rev() {
        taken.push(groups.remove(m));
    }
    for (k, g) in taken.into_iter().rev().enumerate() {
        groups.insert(at + k, g);
    }
}
