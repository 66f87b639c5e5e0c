//! Matmul epilogues: an elementwise node that reads a matmul's product element for element
//! joins the matmul (bias, scaling, activation, residual add, SwiGLU's `silu(gate) * up`
//! when `up` is an operand), run on each finished output tile in VMEM, when nothing else needs
//! the product. Its other operands are re-expressed over the product's `[batch, m, n]`, so
//! that a node iterating over a view of the product (`[256, 64]` seen as `[8, 32, 64]`) joins
//! as well.

use std::collections::HashMap;

use super::super::group::{Graph, Group};
use super::super::views::{append_prog, epilogue_shape, in_product_space, same_elements};
use crate::ir::{Node, NodeKind, POp, PRef};
use crate::layout::Layout;

/// Most nodes of an epilogue program.
const MAX_NODES: usize = 64;

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
    // The product must be read by `n` alone: the epilogue replaces it.
    let out = g.node.outputs[0].clone();
    if !graph.private_to_one_reader(&out) || !epilogue_shape(mm, nshape) || n.outputs.len() != 1
    {
        return false;
    }
    let n_in = g.node.inputs.len();
    // The epilogue so far computes output 0; `n` may read it element for element.
    let mut map: HashMap<u32, PRef> = HashMap::new();
    let mut merged = mm.epilogue.clone();
    let mut new_inputs = Vec::new();
    let mut reads_product = false;
    for (i, v) in n.inputs.iter().enumerate() {
        if v.storage.id() == out.storage.id() {
            if v.layout.numel() != out.layout.numel()
                || !same_elements(&out.layout, &v.layout)
                || v.dtype != out.dtype
            {
                return false;
            }
            map.insert(i as u32, merged.outputs[0]);
            reads_product = true;
        } else if g.written(v.storage.id()).is_some() {
            return false;
        } else {
            // The operand over the product's [batch, m, n].
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
    if !reads_product
        || nprog.nodes.len() + merged.nodes.len() > MAX_NODES
        || written.layout.numel() != out.layout.numel()
        || !written.layout.is_contiguous()
        || !out.layout.is_contiguous()
    {
        return false;
    }
    let outs = append_prog(&mut merged, nprog, &map, false);
    // The epilogue now produces `n`'s output instead of the product, laid out as the product.
    merged.outputs = outs;
    let mut new_out = written.clone();
    new_out.layout = Layout::contiguous(&out.layout.shape);
    let NodeKind::Matmul(mm) = &mut g.node.kind else {
        return false;
    };
    mm.epilogue = merged;
    g.node.inputs.extend(new_inputs);
    g.node.outputs[0] = new_out;
    g.absorb(n);
    true
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{data, run_both};
    use crate::Tensor;
    use crate::ops::matrix::addmm;
    use crate::dtype::Scalar;

    #[test]
    fn bias_activation_and_residual_through_a_view_are_one_kernel() {
        let (m, k, n) = (256usize, 64usize, 128usize);
        let (a0, w0, b0, r0) = (data(m * k, 5), data(k * n, 6), data(n, 7), data(m * n, 8));
        let r = run_both(
            |rt| {
                vec![
                    Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                    Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                    Tensor::from_slice(rt, &b0, &[n]).unwrap(),
                    Tensor::from_slice(rt, &r0, &[8, 32, n]).unwrap(),
                ]
            },
            |t| {
                let one = Scalar::Int(1);
                let h = addmm(&t[2], &t[0], &t[1], one, one).unwrap();
                let h = h.gelu("tanh").unwrap().view_shape(&[8, 32, n as i64]).unwrap();
                vec![h.add(&t[3]).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused);
        // Hand minimum: A, W, the bias and the residual read once, the result written once.
        assert_eq!(r.kernels, 1);
        let min = 4 * (m * k + k * n + n + 2 * m * n) as u64;
        assert!(
            r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
            "{} bytes for a minimum of {min}",
            r.hbm_bytes
        );
    }
}
