//! Storage classification: which slot of a compiled graph each storage the graph touches binds
//! to (an input, a captured storage, a fresh output, or an offset in the arena of
//! intermediates), and where returned tensors come from.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::fusion::FusedGroup;
use crate::ir::View;
use crate::layout::Layout;
use crate::storage::StorageRef;
use crate::tensor::Tensor;

use super::{Returned, Slot, plan};

/// How the storages of a captured graph bind to the compiled graph's slots.
pub(super) struct Storages {
    /// Index of the input each input storage belongs to, by storage id.
    input_ids: HashMap<u64, usize>,
    /// Index of the output storage each computed, returned storage becomes, by storage id.
    out_ids: BTreeMap<u64, usize>,
    /// Output storages: bytes.
    pub out_storages: Vec<u64>,
    /// What binds to each slot.
    pub slots: Vec<Slot>,
    /// Slot of each storage bound whole (inputs, captured storages, outputs), by storage id.
    slot_of: HashMap<u64, usize>,
    /// Offset in the arena of each intermediate, by storage id.
    arena_off: HashMap<u64, u64>,
    /// The arena's slot, if the graph has intermediates.
    pub arena_slot: Option<usize>,
    /// Bytes the arena needs.
    pub arena_bytes: u64,
    /// Ids of the storages some kernel of the graph writes.
    written: HashSet<u64>,
}

/// An intermediate and its lifetime: storage, first and last group that uses it.
type ArenaMember = (StorageRef, usize, usize);

impl Storages {
    /// Classifies every storage `groups` touch; storages with ids from `first_new` on were
    /// made during the capture.
    pub fn classify(
        inputs: &[Tensor],
        outputs: &[Tensor],
        groups: &[FusedGroup],
        first_new: u64,
    ) -> Self {
        let input_ids: HashMap<u64, usize> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| (t.storage.id(), i))
            .collect();
        let written = written(groups);
        let (out_ids, out_storages) = output_storages(outputs, &written, first_new);
        let mut s = Storages {
            input_ids,
            out_ids,
            out_storages,
            slots: Vec::new(),
            slot_of: HashMap::new(),
            arena_off: HashMap::new(),
            arena_slot: None,
            arena_bytes: 0,
            written: HashSet::new(),
        };
        let arena_members = s.bind_slots(groups, &written, first_new);
        s.written = written;
        s.plan_arena(&arena_members);
        s
    }

    /// Gives inputs, captured storages and outputs their slots, in order of first use, and
    /// returns the intermediates, which live in the arena.
    fn bind_slots(
        &mut self,
        groups: &[FusedGroup],
        written: &HashSet<u64>,
        first_new: u64,
    ) -> Vec<ArenaMember> {
        let mut arena_members: Vec<ArenaMember> = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            for v in g.node.inputs.iter().chain(&g.node.outputs) {
                let id = v.storage.id();
                if let Some(i) = self.input_ids.get(&id) {
                    self.bind(id, Slot::Input(*i));
                } else if id < first_new || !written.contains(&id) {
                    self.bind(id, Slot::Fixed(v.storage.clone()));
                } else if let Some(j) = self.out_ids.get(&id) {
                    self.bind(id, Slot::Output(*j));
                } else if let Some(m) = arena_members.iter_mut().find(|m| m.0.id() == id) {
                    m.2 = gi;
                } else {
                    arena_members.push((v.storage.clone(), gi, gi));
                }
            }
        }
        // Outputs that no group wrote (e.g. a view of an input returned as is) still need slots.
        let outs: Vec<(u64, usize)> = self.out_ids.iter().map(|(id, j)| (*id, *j)).collect();
        for (id, j) in outs {
            self.bind(id, Slot::Output(j));
        }
        arena_members
    }

    /// Binds storage `id` to a new slot holding `slot`, unless it has one already.
    fn bind(&mut self, id: u64, slot: Slot) {
        let slots = &mut self.slots;
        self.slot_of.entry(id).or_insert_with(|| {
            slots.push(slot);
            slots.len() - 1
        });
    }

    /// Places the intermediates in the arena and, if there are any, gives the arena a slot.
    fn plan_arena(&mut self, members: &[ArenaMember]) {
        let plan = plan::arena(
            &members
                .iter()
                .map(|(s, a, b)| (s.bytes(), *a, *b))
                .collect::<Vec<_>>(),
        );
        self.arena_off = members
            .iter()
            .zip(&plan.offsets)
            .map(|(m, o)| (m.0.id(), *o))
            .collect();
        self.arena_bytes = plan.bytes;
        self.arena_slot = if members.is_empty() {
            None
        } else {
            self.slots.push(Slot::Arena);
            Some(self.slots.len() - 1)
        };
    }

    /// Whether `v` is an intermediate (it lives in the arena).
    pub fn in_arena(&self, v: &View) -> bool {
        self.arena_off.contains_key(&v.storage.id())
    }

    /// The slot `v`'s storage binds to.
    pub fn slot_for(&self, v: &View) -> Result<usize> {
        self.slot_of
            .get(&v.storage.id())
            .copied()
            .or(self.arena_slot.filter(|_| self.in_arena(v)))
            .ok_or_else(|| TpuError::Device("compiled graph: storage without a slot".into()))
    }

    /// Where `v`'s storage starts in the arena, in elements of `v` (0 outside the arena).
    pub fn arena_elems(&self, v: &View) -> usize {
        self.arena_off
            .get(&v.storage.id())
            .map_or(0, |o| (*o / v.dtype.size() as u64) as usize)
    }

    /// The slots a call writes whole: fresh outputs, and inputs and captured storages the graph
    /// updates in place (the arena excluded).
    pub fn written_slots(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .slot_of
            .iter()
            .filter(|(id, _)| self.written.contains(id))
            .map(|(_, slot)| *slot)
            .collect();
        v.sort_unstable();
        v
    }

    /// Where each returned tensor's storage comes from at each call, with its layout and dtype.
    ///
    /// Outputs the graph computed get fresh storages per call; inputs, captured tensors and
    /// views of them are returned as views, aliasing what they alias in eager mode.
    pub fn results(&self, outputs: &[Tensor]) -> Vec<(Returned, Layout, DType)> {
        outputs
            .iter()
            .map(|t| {
                let id = t.storage.id();
                let src = match (self.out_ids.get(&id), self.input_ids.get(&id)) {
                    (Some(j), _) => Returned::Output(*j),
                    (None, Some(i)) => Returned::Input(*i),
                    (None, None) => Returned::Fixed(t.storage.clone()),
                };
                (src, t.layout.clone(), t.dtype)
            })
            .collect()
    }
}

/// Storages some group writes. One made during the capture that no group writes holds what the
/// host uploaded into it (a constant such as a random stream's key): it is captured as it is,
/// like a weight.
fn written(groups: &[FusedGroup]) -> HashSet<u64> {
    groups
        .iter()
        .flat_map(|g| g.node.outputs.iter().map(|v| v.storage.id()))
        .collect()
}

/// The storages of `outputs` the graph computes, numbered in order of first return, and their
/// sizes in bytes.
fn output_storages(
    outputs: &[Tensor],
    written: &HashSet<u64>,
    first_new: u64,
) -> (BTreeMap<u64, usize>, Vec<u64>) {
    let mut out_ids: BTreeMap<u64, usize> = BTreeMap::new();
    let mut out_storages = Vec::new();
    for t in outputs {
        let id = t.storage.id();
        if id >= first_new && written.contains(&id) && !out_ids.contains_key(&id) {
            out_ids.insert(id, out_storages.len());
            out_storages.push(t.storage.bytes());
        }
    }
    (out_ids, out_storages)
}
