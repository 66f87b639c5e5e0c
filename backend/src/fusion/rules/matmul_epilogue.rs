//! Matmul epilogues: an elementwise node that reads a matmul's product element for element
//! joins the matmul (bias, scaling, activation, residual add, SwiGLU's `silu(gate) * up`),
//! run on each finished output tile in VMEM. When nothing else needs the value it reads, its
//! result replaces it: `x @ w + b` then `gelu` then `+ residual` is one matmul kernel that
//! reads `x`, `w`, `b` and the residual once and writes only the result. When something else
//! does (training saves the product for the backward), the value stays an output and the
//! result is one more, written from the same tile (up to four outputs); the planner drops the
//! outputs no one outside the group reads when the group is done.

use std::collections::HashMap;

use super::super::group::{Graph, Group};
use super::super::views::{append_prog, epilogue_shape, in_product_space, same_elements};
use crate::ir::{Node, NodeKind, POp, PRef};
use crate::layout::Layout;

/// Most nodes of an epilogue program.
const MAX_NODES: usize = 64;

/// Most outputs of a matmul with its epilogue.
const MAX_OUTPUTS: usize = 4;

/// Most extra inputs and outputs together: each takes a scalar register of the kernel for its
/// address (15 in all: a scratch, A, W and the epilogue's own up to 5 leave 7).
pub(super) const MAX_OPERANDS: usize = 7;

/// Joins elementwise node `n` to matmul group `g` as its epilogue.
pub(super) fn join(g: &mut Group, n: &Node, graph: &Graph) -> bool {
    let NodeKind::Tile {
        shape: nshape,
        row_dims: 0,
        prog: nprog,
    } = &n.kind
    else {
        return false;
    };
    let NodeKind::Matmul(mm) = &g.node.kind else {
        return false;
    };
    let product = g.node.outputs[0].clone();
    if !epilogue_shape(mm, nshape) || n.outputs.len() != 1 {
        return false;
    }
    // A pair's twin (its right operand, its product) comes last and has no epilogue; its two
    // more operands take two of the kernel's registers.
    let tw = mm.twin_operands();
    let n_in = g.node.inputs.len() - tw;
    let n_out = g.node.outputs.len() - tw;
    // The epilogue so far computes the group's outputs; `n` may read any of them element for
    // element.
    let mut map: HashMap<u32, PRef> = HashMap::new();
    let mut merged = mm.epilogue.clone();
    let mut new_inputs = Vec::new();
    let mut reads: Vec<usize> = Vec::new();
    for (i, v) in n.inputs.iter().enumerate() {
        if let Some(k) = g.written(v.storage.id()) {
            if k >= n_out {
                return false;
            }
            let out = &g.node.outputs[k];
            if v.layout.numel() != out.layout.numel()
                || !same_elements(&out.layout, &v.layout)
                || v.dtype != out.dtype
            {
                return false;
            }
            map.insert(i as u32, merged.outputs[k]);
            if !reads.contains(&k) {
                reads.push(k);
            }
        } else {
            // The operand over the product's [batch, m, n]: `n` may see the product through a
            // view (`addmm(..).view(8, 32, 64) + r`).
            let Some(v) = in_product_space(v, nshape, mm) else {
                return false;
            };
            let idx = (n_in - 1 + new_inputs.len()) as u32;
            let r = merged.push(POp::Input(idx), v.dtype, false);
            map.insert(i as u32, r);
            new_inputs.push(v);
        }
    }
    let written = &n.outputs[0];
    if reads.is_empty()
        || nprog.nodes.len() + merged.nodes.len() > MAX_NODES
        || written.layout.numel() != product.layout.numel()
        || !written.layout.is_contiguous()
        || !product.layout.is_contiguous()
    {
        return false;
    }
    // `n` replaces the one value it reads when nothing else needs it; otherwise the value
    // stays an output (saved for the backward, say) and `n`'s result is one more, unless a
    // reduction reads that result: the reduction's kernel would take `n` as its prologue,
    // reading the product once, where one more output is written and read back.
    let extras = n_in - 2 + new_inputs.len();
    let replaced = match reads[..] {
        [k] if graph.private_to_one_reader(&g.node.outputs[k]) => Some(k),
        _ if n_out >= MAX_OUTPUTS
            || (graph.read_by_a_reduction(written) && !graph.live(written)) =>
        {
            return false;
        }
        _ => None,
    };
    if extras + n_out + usize::from(replaced.is_none()) > MAX_OPERANDS - 2 * tw {
        return false;
    }
    let outs = append_prog(&mut merged, nprog, &map, false);
    // Laid out as the product, where `n` writes it (a contiguous view may start anywhere).
    let mut new_out = written.clone();
    new_out.layout = Layout::contiguous(&product.layout.shape);
    new_out.layout.offset = written.layout.offset;
    match replaced {
        Some(k) => {
            merged.outputs[k] = outs[0];
            g.node.outputs[k] = new_out;
        }
        None => {
            merged.outputs.push(outs[0]);
            g.node.outputs.insert(n_out, new_out);
        }
    }
    let NodeKind::Matmul(mm) = &mut g.node.kind else {
        return false;
    };
    mm.epilogue = merged;
    g.node.inputs.splice(n_in..n_in, new_inputs);
    g.absorb(n);
    true
}
