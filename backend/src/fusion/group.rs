//! A group being grown by the fusion rules, and what the planner knows about the whole graph
//! (who reads each storage, which storages live tensors still hold).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::views::{append_prog, same_view};
use crate::dtype::DType;
use crate::ir::{Node, NodeKind, POp, PRef, Prog, View};

/// A node being grown by fusion, with the operators it holds.
pub(super) struct Group {
    /// The fused node so far.
    pub node: Node,
    /// The operators merged into it, in order.
    pub ops: Vec<String>,
    /// Their operator-call ids.
    pub op_ids: Vec<u64>,
    /// For tile groups: the prog node computing each output.
    pub out_refs: Vec<PRef>,
    /// Storages each merged node read (one entry per node and storage), to tell values only
    /// the group reads from values needed outside it.
    pub read_ids: Vec<u64>,
    /// The rule that merged each operator after the first, in order.
    pub joins: Vec<&'static str>,
    /// The nodes as recorded, in order: what runs instead when the fused node has no kernel.
    pub members: Vec<Node>,
}

impl Group {
    /// A group of one node.
    pub fn new(mut node: Node) -> Self {
        let members = vec![node.clone()];
        read_each_operand_once(&mut node);
        let out_refs = match &node.kind {
            NodeKind::Tile { prog, .. } => prog.outputs.clone(),
            _ => Vec::new(),
        };
        Group {
            read_ids: distinct_reads(&node),
            ops: vec![node.op.name.to_string()],
            op_ids: vec![node.op.id],
            out_refs,
            joins: Vec::new(),
            members,
            node,
        }
    }

    /// Records that `n` joined the group.
    pub fn absorb(&mut self, n: &Node) {
        self.ops.push(n.op.name.to_string());
        self.op_ids.push(n.op.id);
        self.read_ids.extend(distinct_reads(n));
        self.members.push(n.clone());
    }

    /// Which of the group's outputs writes storage `id`.
    pub fn written(&self, id: u64) -> Option<usize> {
        self.node.outputs.iter().position(|v| v.storage.id() == id)
    }
}

/// What the planner knows about the recorded graph as a whole.
pub(super) struct Graph {
    /// How many nodes read each storage.
    readers: HashMap<u64, usize>,
    /// Storages some tensor outside the graph still holds.
    live: BTreeSet<u64>,
    /// Storages a node reducing along rows reads, directly or through elementwise nodes.
    row_read: BTreeSet<u64>,
}

impl Graph {
    /// The facts of `nodes`.
    pub fn new(nodes: &[Node]) -> Self {
        // How many references the graph itself holds to each storage.
        let mut refs: HashMap<u64, usize> = HashMap::new();
        for n in nodes {
            for v in n.inputs.iter().chain(&n.outputs) {
                *refs.entry(v.storage.id()).or_default() += 1;
            }
        }
        let mut live = BTreeSet::new();
        for n in nodes {
            for v in n.inputs.iter().chain(&n.outputs) {
                let id = v.storage.id();
                if Arc::strong_count(&v.storage) > refs.get(&id).copied().unwrap_or(0) {
                    live.insert(id);
                }
            }
        }
        let mut readers: HashMap<u64, usize> = HashMap::new();
        for n in nodes {
            for id in distinct_reads(n) {
                *readers.entry(id).or_default() += 1;
            }
        }
        // Latest first: a reduction's inputs, and the inputs of an elementwise node whose
        // result a reduction reads.
        let mut row_read = BTreeSet::new();
        for n in nodes.iter().rev() {
            let feeds = match n.kind {
                NodeKind::Tile { row_dims, .. } if row_dims > 0 => true,
                NodeKind::Tile { .. } => {
                    n.outputs.iter().any(|v| row_read.contains(&v.storage.id()))
                }
                _ => false,
            };
            if feeds {
                row_read.extend(distinct_reads(n));
            }
        }
        Graph {
            readers,
            live,
            row_read,
        }
    }

    /// Whether a node reducing along rows reads `v`, directly or through elementwise nodes
    /// (its kernel would take `v`'s producer as its prologue).
    pub fn read_by_a_reduction(&self, v: &View) -> bool {
        self.row_read.contains(&v.storage.id())
    }

    /// Whether a tensor outside the graph holds `v`'s storage.
    pub fn live(&self, v: &View) -> bool {
        self.live.contains(&v.storage.id())
    }

    /// How many nodes read storage `id`.
    pub fn readers(&self, id: u64) -> usize {
        self.readers.get(&id).copied().unwrap_or(0)
    }

    /// Whether `v` is needed only by one reader of the graph (so that a rule may replace it).
    pub fn private_to_one_reader(&self, v: &View) -> bool {
        !self.live(v) && self.readers(v.storage.id()) == 1
    }
}

/// Makes a tile node that names the same operand twice (`x * x`) read it once, as the rules
/// do for the operands of the nodes they merge.
pub(super) fn read_each_operand_once(node: &mut Node) {
    let NodeKind::Tile {
        prog,
        shape,
        row_dims,
    } = &mut node.kind
    else {
        return;
    };
    // A program that reads an input two ways is left as it is.
    let Some(reads) = input_reads(prog) else {
        return;
    };
    // For each input, another one read the same way, if any: an earlier one, or a per-row
    // one whose values this full one repeats along the row.
    let read = |k: usize| reads.get(&(k as u32));
    let twins: Vec<Option<usize>> = (0..node.inputs.len())
        .map(|i| {
            (0..i)
                .find(|&j| {
                    same_view(&node.inputs[j], &node.inputs[i])
                        && read(j).is_some()
                        && read(j) == read(i)
                })
                .or_else(|| {
                    (0..node.inputs.len()).find(|&j| {
                        matches!((read(i), read(j)), (Some((false, a)), Some((true, b))) if a == b)
                            && repeats_along_row(&node.inputs[i], &node.inputs[j], shape, *row_dims)
                    })
                })
        })
        .collect();
    // A twin that has a twin of its own would leave its reader without an input.
    let twins: Vec<Option<usize>> = twins
        .iter()
        .map(|t| t.filter(|j| twins[*j].is_none()))
        .collect();
    if twins.iter().all(Option::is_none) {
        return;
    }
    // The program again, over the distinct inputs.
    let mut read_once = Prog::default();
    let mut map: HashMap<u32, PRef> = HashMap::new();
    let mut inputs = Vec::new();
    for (i, v) in node.inputs.iter().enumerate() {
        if twins[i].is_some() {
            continue;
        }
        let k = inputs.len() as u32;
        inputs.push(v.clone());
        // Inputs the program never reads stay operands without a node, as they were.
        if let Some(x) = prog.nodes.iter().find(|x| x.op == POp::Input(i as u32)) {
            map.insert(i as u32, read_once.push(POp::Input(k), x.dtype, x.per_row));
        }
    }
    for (i, t) in twins.iter().enumerate() {
        if let Some(j) = t {
            map.insert(i as u32, map[&(*j as u32)]);
        }
    }
    read_once.outputs = append_prog(&mut read_once, prog, &map, false);
    *prog = read_once;
    node.inputs = inputs;
}

/// Whether `full`, read in full over the iteration space `shape`, is `per_row` (read once per
/// row: its shape is the outer dims) repeated along the `row_dims` trailing dims: the same
/// storage and dtype, stride 0 along the row, the outer dims addressed as `per_row` does.
fn repeats_along_row(full: &View, per_row: &View, shape: &[usize], row_dims: usize) -> bool {
    let (f, p) = (&full.layout, &per_row.layout);
    let outer = shape.len().saturating_sub(row_dims);
    row_dims > 0
        && full.storage.id() == per_row.storage.id()
        && full.dtype == per_row.dtype
        && f.shape == shape
        && f.offset == p.offset
        && f.strides[outer..].iter().all(|s| *s == 0)
        && p.shape[..] == shape[..outer]
        && p.strides[..] == f.strides[..outer]
}

/// How `prog` reads each input: per row or in full, and as which dtype; `None` when it reads
/// one two ways.
pub(super) fn input_reads(prog: &Prog) -> Option<HashMap<u32, (bool, DType)>> {
    let mut reads: HashMap<u32, (bool, DType)> = HashMap::new();
    for x in &prog.nodes {
        if let POp::Input(i) = x.op
            && *reads.entry(i).or_insert((x.per_row, x.dtype)) != (x.per_row, x.dtype)
        {
            return None;
        }
    }
    Some(reads)
}

/// The storages `n` reads, each once.
pub(super) fn distinct_reads(n: &Node) -> Vec<u64> {
    let ids: BTreeSet<u64> = n.inputs.iter().map(|v| v.storage.id()).collect();
    ids.into_iter().collect()
}

/// Every storage `n` reads or writes.
pub(super) fn storages(n: &Node) -> BTreeSet<u64> {
    n.inputs
        .iter()
        .chain(&n.outputs)
        .map(|v| v.storage.id())
        .collect()
}
