//! DeferAndFuse: running a recorded graph as few kernels as possible.
//!
//! The fusion pass walks the recorded nodes in order and grows a group while the next node can
//! join it:
//! - a tile node joins a tile group over the same iteration space when every value it reads
//!   from the group is read exactly as the group wrote it (full values element for element,
//!   per-row values broadcast along the row); elementwise chains, reductions with elementwise
//!   prologues and epilogues, and softmax/norm patterns become one kernel;
//! - an elementwise tile node joins a matmul as its epilogue (bias, activation, residual) when
//!   it reads the product element for element and the product is needed nowhere else.
//!
//! Values written inside a group and needed by no later node and no live tensor are dropped
//! from the group's outputs: they never get device memory and never touch HBM. Fused kernels
//! are cached by pattern (operators, shapes, dtypes; storages are arguments), so a training
//! loop generates each kernel once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::json;

use crate::error::Result;
use crate::ir::{MatmulNode, Node, NodeKind, OpTag, POp, PRef, Prog, View};
use crate::kernels::tile::spec::aligned_strides;
use crate::runtime::{Core, Runtime};

/// How many of the newest groups a node may join (bounds planning time on huge graphs).
const SEARCH_WINDOW: usize = 16;

/// A node being grown by fusion, with the operators it holds.
struct Group {
    node: Node,
    ops: Vec<String>,
    op_ids: Vec<u64>,
    /// For tile groups: the prog node computing each output.
    out_refs: Vec<PRef>,
    /// Storages each merged node read (one entry per node and storage), to tell values only
    /// the group reads from values needed outside it.
    read_ids: Vec<u64>,
}

/// How many references to each storage the graph holds (to tell graph-only storages from ones
/// live tensors still hold).
fn graph_refs(nodes: &[Node]) -> HashMap<u64, usize> {
    let mut refs: HashMap<u64, usize> = HashMap::new();
    for n in nodes {
        for v in n.inputs.iter().chain(&n.outputs) {
            *refs.entry(v.storage.id()).or_default() += 1;
        }
    }
    refs
}

/// The storages `n` reads, each once.
fn distinct_reads(n: &Node) -> Vec<u64> {
    let ids: BTreeSet<u64> = n.inputs.iter().map(|v| v.storage.id()).collect();
    ids.into_iter().collect()
}

fn storages(n: &Node) -> BTreeSet<u64> {
    n.inputs
        .iter()
        .chain(&n.outputs)
        .map(|v| v.storage.id())
        .collect()
}

/// Maps `prog`'s inputs through `map` (input index -> prog ref in `into`) and appends its nodes.
/// With `per_row`, every appended node is marked constant along the row (a per-row map merged
/// into a reduction's group).
fn append_prog(into: &mut Prog, prog: &Prog, map: &HashMap<u32, PRef>, per_row: bool) -> Vec<PRef> {
    let mut remap: Vec<PRef> = Vec::with_capacity(prog.nodes.len());
    for n in &prog.nodes {
        let r = |x: PRef| remap[x as usize];
        let new = match n.op {
            POp::Input(i) => {
                remap.push(map[&i]);
                continue;
            }
            POp::Const(c) => POp::Const(c),
            POp::Index(d) => POp::Index(d),
            POp::Bin(op, a, b) => POp::Bin(op, r(a), r(b)),
            POp::Un(op, a) => POp::Un(op, r(a)),
            POp::Cmp(op, a, b) => POp::Cmp(op, r(a), r(b)),
            POp::Select(c, a, b) => POp::Select(r(c), r(a), r(b)),
            POp::Cast(a) => POp::Cast(r(a)),
            POp::Reduce(k, a) => POp::Reduce(k, r(a)),
            POp::ArgMax(a) => POp::ArgMax(r(a)),
            POp::ArgMin(a) => POp::ArgMin(r(a)),
        };
        remap.push(into.push(new, n.dtype, n.per_row || per_row));
    }
    prog.outputs.iter().map(|o| remap[*o as usize]).collect()
}

impl Group {
    fn new(node: Node) -> Self {
        let out_refs = match &node.kind {
            NodeKind::Tile { prog, .. } => prog.outputs.clone(),
            _ => Vec::new(),
        };
        Group {
            read_ids: distinct_reads(&node),
            ops: vec![node.op.name.clone()],
            op_ids: vec![node.op.id],
            out_refs,
            node,
        }
    }

    /// Tries to add `n` to the group.
    fn try_merge(&mut self, n: &Node) -> bool {
        // `n` must not write anything the group touches (no in-place updates inside a kernel).
        let touched = storages(&self.node);
        if n.outputs.iter().any(|v| touched.contains(&v.storage.id())) {
            return false;
        }
        let NodeKind::Tile {
            shape: nshape,
            row_dims: nrows,
            prog: nprog,
        } = &n.kind
        else {
            return false;
        };
        let outputs: Vec<View> = self.node.outputs.clone();
        let n_in = self.node.inputs.len();
        let written = |id: u64| outputs.iter().position(|v| v.storage.id() == id);
        match &mut self.node.kind {
            NodeKind::Tile {
                shape,
                row_dims,
                prog,
            } => {
                // `n` over the same space, or (a per-row map) over the group's outer dims.
                let per_row_n = shape != nshape && *nrows == 0 && *row_dims > 0;
                if per_row_n {
                    if outer_dims(shape, *row_dims, nshape).is_none()
                        || nprog.nodes.iter().any(|x| {
                            matches!(
                                x.op,
                                POp::Index(_) | POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_)
                            )
                        })
                    {
                        return false;
                    }
                } else if shape != nshape || (*row_dims != *nrows && *row_dims != 0 && *nrows != 0)
                {
                    return false;
                }
                // `n`'s operands as the group sees them.
                let as_group = |v: &View| -> Option<View> {
                    if per_row_n {
                        per_row_view(v, shape, *row_dims, nshape)
                    } else {
                        Some(v.clone())
                    }
                };
                let rows = (*row_dims).max(*nrows);
                if prog.nodes.len() + nprog.nodes.len() > 96 {
                    return false;
                }
                // Each input of `n`: a value of the group, or a new operand.
                let mut map: HashMap<u32, PRef> = HashMap::new();
                let mut new_inputs: Vec<View> = Vec::new();
                let mut merged = prog.clone();
                let per_row_inputs: HashMap<u32, bool> = nprog
                    .nodes
                    .iter()
                    .filter_map(|x| {
                        if let POp::Input(i) = x.op {
                            Some((i, x.per_row))
                        } else {
                            None
                        }
                    })
                    .collect();
                for (i, v) in n.inputs.iter().enumerate() {
                    let i = i as u32;
                    let Some(v) = as_group(v) else { return false };
                    if let Some(k) = written(v.storage.id()) {
                        let w = &outputs[k];
                        let r = self.out_refs[k];
                        let produced_per_row = merged.node(r).per_row && rows > 0;
                        let ok = if per_row_n {
                            produced_per_row && same_layout_per_row(w, &v, shape, rows)
                        } else if produced_per_row {
                            same_per_row(w, &v, shape, rows)
                        } else {
                            w.layout == v.layout
                                && w.dtype == v.dtype
                                && !per_row_inputs.get(&i).copied().unwrap_or(false)
                        };
                        if !ok || w.dtype != v.dtype {
                            return false;
                        }
                        map.insert(i, r);
                    } else {
                        let pr = per_row_n || per_row_inputs.get(&i).copied().unwrap_or(false);
                        // An operand the group already reads the same way is read once.
                        let same =
                            self.node
                                .inputs
                                .iter()
                                .chain(&new_inputs)
                                .position(|u| same_view(u, &v))
                                .and_then(|k| {
                                    merged.nodes.iter().position(|x| {
                                        x.op == POp::Input(k as u32) && x.per_row == pr
                                    })
                                });
                        if let Some(r) = same {
                            map.insert(i, r as PRef);
                            continue;
                        }
                        let idx = (n_in + new_inputs.len()) as u32;
                        let r = merged.push(POp::Input(idx), v.dtype, pr);
                        map.insert(i, r);
                        new_inputs.push(v);
                    }
                }
                let mut new_outputs = Vec::new();
                for v in &n.outputs {
                    let Some(v) = as_group(v) else { return false };
                    new_outputs.push(v);
                }
                let outs = append_prog(&mut merged, nprog, &map, per_row_n);
                // A full-size output of `n` computed only from row-invariant values (a fill, a
                // function of a reduction's result) would be written per row: keep it apart.
                if !per_row_n
                    && *nrows == 0
                    && rows > 0
                    && outs.iter().any(|&o| merged.node(o).per_row)
                {
                    return false;
                }
                // Commit.
                merged.outputs.extend(outs.iter().copied());
                self.out_refs.extend(outs);
                *prog = merged;
                *row_dims = rows;
                self.node.inputs.extend(new_inputs);
                self.node.outputs.extend(new_outputs);
                self.ops.push(n.op.name.clone());
                self.op_ids.push(n.op.id);
                self.read_ids.extend(distinct_reads(n));
                true
            }
            NodeKind::Matmul(mm) => {
                if *nrows != 0 || !epilogue_shape(mm, nshape) {
                    return false;
                }
                // The epilogue so far computes output 0; `n` may read it element for element.
                let out = &outputs[0];
                let mut map: HashMap<u32, PRef> = HashMap::new();
                let mut merged = mm.epilogue.clone();
                let mut new_inputs = Vec::new();
                let mut reads_product = false;
                for (i, v) in n.inputs.iter().enumerate() {
                    if v.storage.id() == out.storage.id() {
                        if v.layout.shape.iter().product::<usize>() != out.layout.numel()
                            || !same_elements(&out.layout, &v.layout)
                            || v.dtype != out.dtype
                        {
                            return false;
                        }
                        map.insert(i as u32, merged.outputs[0]);
                        reads_product = true;
                    } else if written(v.storage.id()).is_some() {
                        return false;
                    } else {
                        let idx = (n_in - 1 + new_inputs.len()) as u32;
                        let r = merged.push(POp::Input(idx), v.dtype, false);
                        map.insert(i as u32, r);
                        new_inputs.push(v.clone());
                    }
                }
                if !reads_product
                    || n.outputs.len() != 1
                    || nprog.nodes.len() + merged.nodes.len() > 64
                {
                    return false;
                }
                let outs = append_prog(&mut merged, nprog, &map, false);
                // The epilogue now produces `n`'s output instead of the product.
                merged.outputs = outs;
                let mut new_out = n.outputs[0].clone();
                new_out.layout = out.layout.clone();
                if n.outputs[0].layout.numel() != out.layout.numel()
                    || !n.outputs[0].layout.is_contiguous()
                    || !out.layout.is_contiguous()
                {
                    return false;
                }
                new_out.layout = crate::layout::Layout::contiguous(&out.layout.shape);
                mm.epilogue = merged;
                self.node.inputs.extend(new_inputs);
                self.node.outputs[0] = new_out;
                self.ops.push(n.op.name.clone());
                self.op_ids.push(n.op.id);
                self.read_ids.extend(distinct_reads(n));
                true
            }
            _ => false,
        }
    }
}

/// Whether a matmul over `[batch, m, n]` can take an epilogue over `shape`.
fn epilogue_shape(mm: &MatmulNode, shape: &[usize]) -> bool {
    let numel: usize = shape.iter().product();
    numel == mm.batch * mm.m * mm.n && shape.last() == Some(&mm.n)
}

/// How many leading dims of `nshape` are the outer (non-row) dims of `shape`, when `nshape` is
/// those dims (`keepdim=False`) or those dims followed by size-1 row dims (`keepdim=True`).
fn outer_dims(shape: &[usize], row_dims: usize, nshape: &[usize]) -> Option<usize> {
    let outer = &shape[..shape.len() - row_dims];
    if nshape == outer
        || (nshape.len() == shape.len()
            && &nshape[..outer.len()] == outer
            && nshape[outer.len()..].iter().all(|&d| d == 1))
    {
        Some(outer.len())
    } else {
        None
    }
}

/// `v`, an operand of a node iterating over `nshape` (the group's outer dims, see
/// [`outer_dims`]), as a per-row operand of the group over `shape`.
fn per_row_view(v: &View, shape: &[usize], row_dims: usize, nshape: &[usize]) -> Option<View> {
    let k = outer_dims(shape, row_dims, nshape)?;
    let strides = aligned_strides(&v.layout, nshape, 0).ok()?;
    let layout = crate::layout::Layout {
        shape: nshape[..k].to_vec(),
        strides: strides[..k].to_vec(),
        offset: v.layout.offset,
    };
    Some(View {
        storage: v.storage.clone(),
        layout,
        dtype: v.dtype,
    })
}

/// Whether two per-row operands over `shape` address the same elements.
fn same_layout_per_row(a: &View, b: &View, shape: &[usize], rows: usize) -> bool {
    a.dtype == b.dtype
        && a.layout.offset == b.layout.offset
        && matches!(
            (aligned_strides(&a.layout, shape, rows), aligned_strides(&b.layout, shape, rows)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Whether two views read the same elements of the same storage the same way.
fn same_view(a: &View, b: &View) -> bool {
    a.storage.id() == b.storage.id() && a.dtype == b.dtype && a.layout == b.layout
}

/// Whether two layouts address the same elements in the same order.
fn same_elements(a: &crate::layout::Layout, b: &crate::layout::Layout) -> bool {
    a.is_contiguous() && b.is_contiguous() && a.offset == b.offset && a.numel() == b.numel()
}

/// Whether `read` (a consumer's view over `shape`) reads the per-row values `written` (a
/// producer's per-row output over the outer dims) broadcast along the row.
fn same_per_row(written: &View, read: &View, shape: &[usize], rows: usize) -> bool {
    if written.layout.offset != read.layout.offset {
        return false;
    }
    let (Ok(w), Ok(r)) = (
        aligned_strides(&written.layout, shape, rows),
        aligned_strides(&read.layout, shape, 0),
    ) else {
        return false;
    };
    w == r
}

/// Runs a recorded graph: fuses, drops dead intermediates, launches the groups in order.
/// A fused group ready to run: one node and the operators it holds.
pub(crate) struct FusedGroup {
    pub node: Node,
    pub ops: Vec<String>,
    pub op_ids: Vec<u64>,
}

/// Fuses a recorded graph into groups, in order. Values needed by a later node or by a live
/// tensor (one that holds the storage outside the graph) stay outputs of their group; the rest
/// are dropped.
pub(crate) fn plan_groups(nodes: Vec<Node>) -> Vec<FusedGroup> {
    let refs = graph_refs(&nodes);
    // Storages some tensor outside the graph still holds.
    let mut live_ids: BTreeSet<u64> = BTreeSet::new();
    for n in &nodes {
        for v in n.inputs.iter().chain(&n.outputs) {
            if Arc::strong_count(&v.storage) > refs.get(&v.storage.id()).copied().unwrap_or(0) {
                live_ids.insert(v.storage.id());
            }
        }
    }
    // How many nodes read each storage.
    let mut readers: HashMap<u64, usize> = HashMap::new();
    for n in &nodes {
        let ids: BTreeSet<u64> = n.inputs.iter().map(|v| v.storage.id()).collect();
        for id in ids {
            *readers.entry(id).or_default() += 1;
        }
    }
    let live = |v: &View| live_ids.contains(&v.storage.id());

    let mut groups: Vec<Group> = Vec::new();
    for n in &nodes {
        let reads: BTreeSet<u64> = n.inputs.iter().map(|v| v.storage.id()).collect();
        let writes: BTreeSet<u64> = n.outputs.iter().map(|v| v.storage.id()).collect();
        // `n` may move back to run with an earlier group only past groups it does not depend
        // on: none writes what `n` reads, none touches what `n` writes.
        let floor = groups
            .iter()
            .rposition(|g| {
                g.node
                    .outputs
                    .iter()
                    .any(|v| reads.contains(&v.storage.id()))
                    || storages(&g.node).iter().any(|id| writes.contains(id))
            })
            .unwrap_or(0)
            .max(groups.len().saturating_sub(SEARCH_WINDOW));
        let mut merged = false;
        for g in groups[floor..].iter_mut().rev() {
            // A matmul's product must be read by `n` alone before an epilogue can replace it.
            let ok = match &g.node.kind {
                NodeKind::Matmul(_) => {
                    let p = &g.node.outputs[0];
                    !live(p) && readers.get(&p.storage.id()).copied() == Some(1)
                }
                _ => true,
            };
            if ok && g.try_merge(n) {
                merged = true;
                break;
            }
        }
        if !merged {
            groups.push(Group::new(n.clone()));
        }
    }

    // Drop outputs no node outside the group reads and no live tensor holds.
    let mut plans = Vec::new();
    for mut g in groups {
        if let NodeKind::Tile { prog, .. } = &mut g.node.kind {
            let mut own_reads: HashMap<u64, usize> = HashMap::new();
            for id in &g.read_ids {
                *own_reads.entry(*id).or_default() += 1;
            }
            let mut keep_v = Vec::new();
            let mut keep_o = Vec::new();
            for (k, v) in g.node.outputs.iter().enumerate() {
                let id = v.storage.id();
                let outside = readers.get(&id).copied().unwrap_or(0)
                    > own_reads.get(&id).copied().unwrap_or(0);
                if live(v) || outside || (k + 1 == g.node.outputs.len() && keep_v.is_empty()) {
                    keep_v.push(v.clone());
                    keep_o.push(prog.outputs[k]);
                }
            }
            g.node.outputs = keep_v;
            prog.outputs = keep_o;
        }
        plans.push(FusedGroup {
            node: g.node,
            ops: g.ops,
            op_ids: g.op_ids,
        });
    }
    plans
}

/// Runs a recorded graph: fuses, drops dead intermediates, launches the groups in order.
pub(crate) fn run_graph(
    rt: &Runtime,
    core: &mut Core,
    nodes: Vec<Node>,
    ops: usize,
    reason: &str,
) -> Result<()> {
    let start_ns = core.q.host_ns;
    let plans = plan_groups(nodes);
    if core.debug_print {
        eprintln!(
            "[tpu] flush ({reason}): {ops} ops -> {} kernels",
            plans.len()
        );
        for g in &plans {
            eprintln!("[tpu]   group of {}: {}", g.ops.len(), g.ops.join(", "));
        }
    }
    for g in plans {
        let gid = core.next_group;
        core.next_group += 1;
        core.q.metrics.fused_groups += 1;
        *core.q.metrics.group_sizes.entry(g.ops.len()).or_default() += 1;
        let t0 = core.q.host_ns;
        let op_ids = g.op_ids.clone();
        let mut node = g.node;
        if g.ops.len() > 1 {
            node.op = OpTag {
                name: format!("fused[{}]", g.ops.join("+")),
                id: node.op.id,
                shapes: node.op.shapes.clone(),
            };
        }
        rt.execute(core, &node, Some(gid))?;
        let mut args = tpuemu_isa::trace::Args::new();
        args.insert("ops".into(), json!(g.ops));
        args.insert("op_ids".into(), json!(op_ids));
        let now = core.q.host_ns;
        core.prof
            .queue_span(format!("fused group {gid}"), t0, now, Some(gid), args);
    }
    let mut args = tpuemu_isa::trace::Args::new();
    args.insert("reason".into(), json!(reason));
    args.insert("ops".into(), json!(ops));
    let now = core.q.host_ns;
    core.prof
        .queue_span("flush".into(), start_ns, now, None, args);
    Ok(())
}
