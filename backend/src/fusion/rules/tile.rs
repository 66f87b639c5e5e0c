//! The mechanics the tile rules share: splicing a tile node's program into a tile group's.
//!
//! Every value `n` reads from the group must be read exactly as the group wrote it (full
//! values element for element, per-row values broadcast along the row); anything else `n`
//! reads becomes a new operand (read once when the group already reads it the same way).

use std::collections::HashMap;

use super::super::group::Group;
use super::super::views::{
    append_prog, outer_dims, per_row_view, same_layout_per_row, same_per_row, same_view,
};
use crate::ir::{Node, NodeKind, POp, PRef, View};

/// Most program nodes a fused tile kernel takes (bounds register pressure and code size).
pub(super) const MAX_NODES: usize = 96;

/// How `n` relates to the group's iteration space.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fit {
    /// The same space (elementwise chains, a reduction's prologue or epilogue).
    Same,
    /// A map over the group's outer dims (per-row work of a reduction).
    PerRow,
}

/// How `n` fits the tile group `g`, if it does.
pub(super) fn fit(g: &Group, n: &Node) -> Option<Fit> {
    let (
        NodeKind::Tile {
            shape, row_dims, ..
        },
        NodeKind::Tile {
            shape: nshape,
            row_dims: nrows,
            prog: nprog,
        },
    ) = (&g.node.kind, &n.kind)
    else {
        return None;
    };
    if shape != nshape && *nrows == 0 && *row_dims > 0 {
        let row_free = !nprog.nodes.iter().any(|x| {
            matches!(
                x.op,
                POp::Index(_) | POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_)
            )
        });
        return (outer_dims(shape, *row_dims, nshape).is_some() && row_free).then_some(Fit::PerRow);
    }
    (shape == nshape && (row_dims == nrows || *row_dims == 0 || *nrows == 0)).then_some(Fit::Same)
}

/// Merges tile node `n` into tile group `g` as `fit` says; false (and `g` unchanged) when a
/// value `n` reads from the group is not read as it was written.
pub(super) fn merge(g: &mut Group, n: &Node, fit: Fit) -> bool {
    let NodeKind::Tile {
        shape: nshape,
        row_dims: nrows,
        prog: nprog,
    } = &n.kind
    else {
        return false;
    };
    let outputs: Vec<View> = g.node.outputs.clone();
    let n_in = g.node.inputs.len();
    let per_row_n = fit == Fit::PerRow;
    let NodeKind::Tile {
        shape,
        row_dims,
        prog,
    } = &g.node.kind
    else {
        return false;
    };
    // `n`'s operands as the group sees them.
    let as_group = |v: &View| -> Option<View> {
        if per_row_n {
            per_row_view(v, shape, *row_dims, nshape)
        } else {
            Some(v.clone())
        }
    };
    let rows = (*row_dims).max(*nrows);
    if prog.nodes.len() + nprog.nodes.len() > MAX_NODES {
        return false;
    }
    // A fill writes a constant, which a program marks constant along the row: in a node that
    // reduces along the row that would make the fill's output a per-row one, written once a
    // row instead of in full. A fill stays out of a reduction's kernel.
    if rows > 0 {
        let fills = |rd: usize, p: &crate::ir::Prog, outs: &[PRef]| {
            rd == 0 && outs.iter().any(|r| p.node(*r).per_row)
        };
        if fills(*row_dims, prog, &g.out_refs)
            || (!per_row_n && fills(*nrows, nprog, &nprog.outputs))
        {
            return false;
        }
    }
    let mut map: HashMap<u32, PRef> = HashMap::new();
    let mut new_inputs: Vec<View> = Vec::new();
    let mut merged = prog.clone();
    let per_row_inputs: HashMap<u32, bool> = nprog
        .nodes
        .iter()
        .filter_map(|x| match x.op {
            POp::Input(i) => Some((i, x.per_row)),
            _ => None,
        })
        .collect();
    for (i, v) in n.inputs.iter().enumerate() {
        let i = i as u32;
        let Some(v) = as_group(v) else { return false };
        if let Some(k) = g.written(v.storage.id()) {
            // A value of the group: read exactly as written.
            let w = &outputs[k];
            let r = g.out_refs[k];
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
            let same = g
                .node
                .inputs
                .iter()
                .chain(&new_inputs)
                .position(|u| same_view(u, &v))
                .and_then(|k| {
                    merged
                        .nodes
                        .iter()
                        .position(|x| x.op == POp::Input(k as u32) && x.per_row == pr)
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
    // A full-size output of `n` computed only from row-invariant values (a fill, a function of
    // a reduction's result) would be written per row: keep it apart.
    if !per_row_n && *nrows == 0 && rows > 0 && outs.iter().any(|&o| merged.node(o).per_row) {
        return false;
    }
    // Commit.
    merged.outputs.extend(outs.iter().copied());
    g.out_refs.extend(outs);
    let NodeKind::Tile { row_dims, prog, .. } = &mut g.node.kind else {
        return false;
    };
    *prog = merged;
    *row_dims = rows;
    g.node.inputs.extend(new_inputs);
    g.node.outputs.extend(new_outputs);
    g.absorb(n);
    true
}
