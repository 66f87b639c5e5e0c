//! After planning: a product whose only reader is a group reducing along the product's rows
//! (the language-model head's logits and the cross-entropy that reads them) becomes one
//! kernel, the reduction run on each finished output tile in VMEM
//! ([`crate::ir::RowEpilogue`]): the product never crosses HBM (written once and read once
//! apart: 16 MiB of the demo block's step). XLA fuses a reduction into its producer the same
//! way when the producer's output tile holds whole rows.
//!
//! The merged kernel runs where the reduction's group ran, so the product moves later, past
//! the groups between, which must not write what it reads. A chip whose VMEM cannot hold
//! tiles of whole rows runs the two parts apart (`Node::split_rows`).

use super::group::{Graph, Group, read_each_operand_once, storages};
use super::views::same_elements;
use crate::ir::{NodeKind, RowEpilogue};

/// How many groups back a reduction looks for the product it reads.
const WINDOW: usize = 16;

/// The joins metric's name for the merge.
pub(super) const RULE: &str = "row epilogue";

/// Merges each product into the later row-reduction group that alone reads it.
pub(super) fn merge(groups: &mut Vec<Group>, graph: &Graph) {
    let mut j = 0;
    while j < groups.len() {
        match producer(groups, j, graph) {
            Some((i, input)) => {
                let product = groups.remove(i);
                merge_into(product, &mut groups[j - 1], input);
                // `j - 1` now holds the merged group; look at the next one.
            }
            None => j += 1,
        }
    }
}

/// The group before `j` whose product group `j` reduces along its rows and alone reads, and
/// which may move to `j`; with the index of the input of `j` that reads it. Group `j`'s node
/// first reads each operand once (as `finish` would make it), so that input is unique.
fn producer(groups: &mut [Group], j: usize, graph: &Graph) -> Option<(usize, usize)> {
    let NodeKind::Tile {
        shape, row_dims: 1, ..
    } = &groups[j].node.kind
    else {
        return None;
    };
    let shape = shape.clone();
    read_each_operand_once(&mut groups[j].node);
    for i in (j.saturating_sub(WINDOW)..j).rev() {
        let g = &groups[i];
        let NodeKind::Matmul(mm) = &g.node.kind else {
            continue;
        };
        let [p] = &g.node.outputs[..] else {
            continue;
        };
        let reads: Vec<usize> = groups[j]
            .node
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, v)| v.storage.id() == p.storage.id())
            .map(|(k, _)| k)
            .collect();
        let [k] = reads[..] else {
            if reads.is_empty() {
                continue;
            }
            return None;
        };
        let v = &groups[j].node.inputs[k];
        let own = groups[j]
            .members
            .iter()
            .filter(|m| m.inputs.iter().any(|x| x.storage.id() == p.storage.id()))
            .count();
        let fits = mm.twin.is_none()
            && mm.rows.is_none()
            && mm.batch == 1
            && mm.epilogue.outputs.len() == 1
            && !graph.live(p)
            && graph.readers(p.storage.id()) == own
            && v.dtype == p.dtype
            && same_elements(&v.layout, &p.layout)
            && shape.iter().product::<usize>() == mm.m * mm.n
            && shape.last() == Some(&mm.n);
        // The product moves past the groups between and joins the reduction's: none of them
        // may write what it reads (the reduction's outputs are stored tile by tile while later
        // tiles still load the product's operands).
        let read = storages(&g.node);
        let free = groups[i + 1..=j].iter().all(|h| {
            h.node
                .outputs
                .iter()
                .all(|o| !read.contains(&o.storage.id()))
        });
        return (fits && free).then_some((i, k));
    }
    None
}

/// Makes `rows` (a tile group reducing along rows) the product group `product` with `rows`'
/// program as its row epilogue; `input` is the input of `rows` that reads the product.
fn merge_into(product: Group, rows: &mut Group, input: usize) {
    let NodeKind::Tile { shape, prog, .. } = &rows.node.kind else {
        unreachable!("checked by `producer`");
    };
    let NodeKind::Matmul(mut mm) = product.node.kind.clone() else {
        unreachable!("checked by `producer`");
    };
    let mut inputs = rows.node.inputs.clone();
    let product_view = inputs.remove(input);
    mm.rows = Some(Box::new(RowEpilogue {
        prog: prog.clone(),
        product: input as u32,
        inputs: rows.node.inputs.len(),
        product_view,
        product_out: product.node.outputs[0].clone(),
        shape: shape.clone(),
    }));
    let mut node = product.node.clone();
    node.kind = NodeKind::Matmul(mm);
    node.inputs.extend(inputs);
    node.outputs = rows.node.outputs.clone();
    rows.node = node;
    // The product's operators come first, then the merge, then the reduction's.
    let mut joins = product.joins;
    joins.push(RULE);
    prepend(joins, &mut rows.joins);
    prepend(product.ops, &mut rows.ops);
    prepend(product.op_ids, &mut rows.op_ids);
    prepend(product.members, &mut rows.members);
    prepend(product.read_ids, &mut rows.read_ids);
    rows.out_refs.clear();
}

/// `to` with `front` before its own items.
fn prepend<T>(mut front: Vec<T>, to: &mut Vec<T>) {
    front.append(to);
    *to = front;
}
