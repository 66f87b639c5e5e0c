//! The plan cache: a recorded graph seen before reuses its fused groups.
//!
//! Planning a graph ([`super::plan_groups`], then [`super::split_open`]) depends only on its
//! structure: each node's kind, operands (layouts with offsets, dtypes), which operands share
//! a storage (aliasing), how large each storage is, which storages a live tensor still holds
//! (their values must be written back), which nodes belong to one operator call and in what
//! order the calls came. A [`GraphKey`] writes exactly that out ([`crate::ir::key`]), naming
//! storages and operator calls by first appearance. A plan is kept as a template whose views
//! name placeholder storages by those slots and whose operator tags name calls by rank; a
//! later graph with the same key binds its own storages and tags into a copy. A training
//! loop's steps hit from the second on; a changed shape, dtype or liveness misses and is
//! planned afresh.

use std::sync::Arc;

use super::FusedGroup;
use crate::ir::key::{IdMap, Key, KeyMap};
use crate::ir::{Node, NodeKind, OpTag, Shapes, View};
use crate::storage::{Storage, StorageRef};

/// Plans kept at most; past this the cache is cleared (a program that never repeats a graph
/// should not grow without bound).
const MAX_PLANS: usize = 4096;

/// A recorded graph's structure, and how its storages and operator calls are numbered.
pub(crate) struct GraphKey {
    key: Key,
    /// Storage id -> slot.
    slots: IdMap<usize>,
    /// Operator call id -> rank among the graph's calls.
    ranks: IdMap<usize>,
}

/// A graph's own storages and operator tags, by slot and rank (what a kept plan is bound to).
pub(crate) struct Binding {
    storages: Vec<StorageRef>,
    tags: Vec<OpTag>,
}

impl GraphKey {
    /// The key of `nodes` planned with `recent` operators kept open. Holds no storage while
    /// the graph is planned (liveness is a reference count): a kept plan takes them from the
    /// graph again ([`GraphKey::bind`]).
    pub fn of(nodes: &[Node], recent: usize) -> GraphKey {
        let mut ids: Vec<u64> = nodes.iter().map(|n| n.op.id).collect();
        ids.sort_unstable();
        ids.dedup();
        let ranks: IdMap<usize> = ids.iter().enumerate().map(|(r, id)| (*id, r)).collect();
        let mut slots: IdMap<usize> = IdMap::default();
        // Per slot: a view holding it, and how many operands of the graph name it.
        let mut held: Vec<(&View, usize)> = Vec::new();
        let mut k = Key::with_capacity(32 * nodes.len() + 8);
        k.0.extend([recent as u64, nodes.len() as u64]);
        // An operand's slot, counting the operand as one of the graph's references to it.
        fn slot_of<'a>(
            v: &'a View,
            slots: &mut IdMap<usize>,
            held: &mut Vec<(&'a View, usize)>,
        ) -> usize {
            let n = held.len();
            let s = *slots.entry(v.storage.id()).or_insert(n);
            if s == n {
                held.push((v, 0));
            }
            held[s].1 += 1;
            s
        }
        for n in nodes {
            k.word(ranks[&n.op.id] as u64);
            k.hashed(&&*n.op.name);
            // Views a kind holds are not operands: they do not count as the graph's
            // references (as `group::Graph` counts them).
            let mut inner = |k: &mut Key, v: &View| {
                // Kinds hold views only after fusion; recorded nodes hold none.
                k.word(v.storage.id());
                k.layout(&v.layout);
                k.word(v.layout.offset as u64);
                k.dtype(v.dtype);
            };
            k.kind(&n.kind, &mut inner);
            for side in [&n.inputs, &n.outputs] {
                k.word(side.len() as u64);
                for v in side {
                    let s = slot_of(v, &mut slots, &mut held);
                    k.word(s as u64);
                    k.layout(&v.layout);
                    k.word(v.layout.offset as u64);
                    k.dtype(v.dtype);
                }
            }
        }
        for (v, refs) in &held {
            let live = Arc::strong_count(&v.storage) > *refs;
            k.0.extend([v.storage.bytes(), live as u64]);
        }
        GraphKey {
            key: k,
            slots,
            ranks,
        }
    }

    /// `nodes`' storages and tags by this key's slots and ranks.
    fn bind(&self, nodes: &[Node]) -> Binding {
        let mut storages: Vec<Option<StorageRef>> = vec![None; self.slots.len()];
        let mut tags: Vec<Option<OpTag>> = vec![None; self.ranks.len()];
        for n in nodes {
            tags[self.ranks[&n.op.id]].get_or_insert_with(|| n.op.clone());
            for v in n.inputs.iter().chain(&n.outputs) {
                storages[self.slots[&v.storage.id()]].get_or_insert_with(|| v.storage.clone());
            }
        }
        Binding {
            storages: storages
                .into_iter()
                .map(|s| s.expect("every slot has a view"))
                .collect(),
            tags: tags
                .into_iter()
                .map(|t| t.expect("every rank has a node"))
                .collect(),
        }
    }
}

/// A plan as a template: placeholder storages whose ids are slots, tags whose ids are ranks
/// (a group's `op_ids` are ranks too). Bound a group at a time as the groups run, so that a
/// group's members (needed only when its fused node has no kernel) are bound only then.
pub(crate) struct Template {
    pub groups: Vec<FusedGroup>,
    pub open: Vec<Node>,
}

/// Plans by graph key.
#[derive(Default)]
pub(crate) struct PlanCache {
    plans: KeyMap<Arc<Template>>,
    /// Placeholder storages never get device memory; dropping them frees nothing.
    placeholders: Vec<StorageRef>,
}

impl PlanCache {
    /// The plan kept for the graph `gk` names, and `nodes`' storages and tags to bind it to
    /// (`nodes` is that graph).
    pub fn get(&self, gk: &GraphKey, nodes: &[Node]) -> Option<(Arc<Template>, Binding)> {
        let t = self.plans.get(&gk.key)?;
        Some((t.clone(), gk.bind(nodes)))
    }

    /// Keeps the plan `groups` + `open` made for the graph `gk` names. A plan that names a
    /// storage or call outside the graph is not kept.
    pub fn insert(&mut self, gk: GraphKey, groups: &[FusedGroup], open: &[Node]) {
        if self.plans.len() >= MAX_PLANS {
            self.plans.clear();
        }
        while self.placeholders.len() < gk.slots.len() {
            let slot = self.placeholders.len() as u64;
            self.placeholders.push(Arc::new(Storage::placeholder(slot)));
        }
        let node = |n: &Node| template_node(n, &gk, &self.placeholders);
        let groups: Option<Vec<FusedGroup>> = groups
            .iter()
            .map(|g| {
                Some(FusedGroup {
                    node: node(&g.node)?,
                    ops: g.ops.clone(),
                    op_ids: g
                        .op_ids
                        .iter()
                        .map(|id| gk.ranks.get(id).map(|r| *r as u64))
                        .collect::<Option<_>>()?,
                    joins: g.joins.clone(),
                    members: g.members.iter().map(node).collect::<Option<_>>()?,
                })
            })
            .collect();
        let open: Option<Vec<Node>> = open.iter().map(node).collect();
        if let (Some(groups), Some(open)) = (groups, open) {
            self.plans
                .insert(gk.key, Arc::new(Template { groups, open }));
        }
    }
}

/// Every view of `n`: its operands and the views its kind holds.
fn views_mut(n: &mut Node) -> impl Iterator<Item = &mut View> {
    let inner: Vec<&mut View> = match &mut n.kind {
        NodeKind::Matmul(m) => match m.rows.as_mut() {
            Some(r) => vec![&mut r.product_view, &mut r.product_out],
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    n.inputs.iter_mut().chain(n.outputs.iter_mut()).chain(inner)
}

/// `n` with its storages replaced by placeholders and its tag by its rank; `None` when it
/// names a storage or call the graph does not.
fn template_node(n: &Node, gk: &GraphKey, placeholders: &[StorageRef]) -> Option<Node> {
    let mut t = n.clone();
    for v in views_mut(&mut t) {
        let slot = *gk.slots.get(&v.storage.id())?;
        v.storage = placeholders[slot].clone();
    }
    t.op = OpTag {
        name: n.op.name.clone(),
        id: *gk.ranks.get(&n.op.id)? as u64,
        shapes: Shapes::default(),
    };
    Some(t)
}

impl Binding {
    /// A template node with the graph's storages and tag bound (the name stays the
    /// template's: a rule may have renamed the node).
    pub fn node(&self, t: &Node) -> Node {
        let mut n = t.clone();
        for v in views_mut(&mut n) {
            v.storage = self.storages[v.storage.id() as usize].clone();
        }
        let tag = &self.tags[t.op.id as usize];
        n.op.id = tag.id;
        n.op.shapes.clone_from(&tag.shapes);
        n
    }

    /// A template group's operator call ids.
    pub fn op_ids(&self, ranks: &[u64]) -> Vec<u64> {
        ranks.iter().map(|r| self.tags[*r as usize].id).collect()
    }
}
