//! Matmul epilogues: an elementwise node that reads a matmul's product element for element
//! joins the matmul (bias, scaling, activation, residual add, SwiGLU's `silu(gate) * up`
//! when `up` is an operand), run on each finished output tile in VMEM, when nothing else needs
//! the product. `x @ w + b` then `gelu` then `+ residual` is one matmul kernel that reads
//! `x`, `w`, `b` and the residual once and writes only the result.

use std::collections::HashMap;

use super::super::group::{Graph, Group};
use super::super::views::{append_prog, epilogue_shape, same_elements};
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
    if !graph.private_to_one_reader(&out) || !epilogue_shape(mm, nshape) || n.outputs.len() != 1 {
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
            let idx = (n_in - 1 + new_inputs.len()) as u32;
            let r = merged.push(POp::Input(idx), v.dtype, false);
            map.insert(i as u32, r);
            new_inputs.push(v.clone());
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

    #[test]
    fn bias_activation_and_residual_are_one_kernel() {
        let (m, k, n) = (256usize, 64usize, 128usize);
        let (a0, w0, b0, r0) = (data(m * k, 5), data(k * n, 6), data(n, 7), data(m * n, 8));
        let r = run_both(
            |rt| {
                vec![
                    Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                    Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                    Tensor::from_slice(rt, &b0, &[n]).unwrap(),
                    Tensor::from_slice(rt, &r0, &[m, n]).unwrap(),
                ]
            },
            |t| {
                let h = t[0].matmul(&t[1]).unwrap().add(&t[2]).unwrap();
                vec![h.gelu("tanh").unwrap().add(&t[3]).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused);
        // By hand: the bias add, the gelu and the residual add each read the value before
        // them element for element and nothing else reads it: three epilogue joins, one
        // kernel. A, W, the bias and the residual are read once and the result written once
        // (up to re-reads of A or W blocks that the tiling needs).
        assert_eq!(r.strict_kernels, 4);
        assert_eq!(r.kernels, 1);
        assert_eq!(r.joins(), [("matmul epilogue", 3)]);
        let min = 4 * (m * k + k * n + n + 2 * m * n) as u64;
        assert!(
            r.hbm_bytes >= min && r.hbm_bytes <= min + min / 8,
            "{} bytes for a minimum of {min}",
            r.hbm_bytes
        );
    }

    #[test]
    fn a_product_read_twice_stays_a_product() {
        let (m, k, n) = (128usize, 64usize, 128usize);
        let (a0, w0) = (data(m * k, 9), data(k * n, 10));
        let r = run_both(
            |rt| {
                vec![
                    Tensor::from_slice(rt, &a0, &[m, k]).unwrap(),
                    Tensor::from_slice(rt, &w0, &[k, n]).unwrap(),
                ]
            },
            |t| {
                let h = t[0].matmul(&t[1]).unwrap();
                let y = h.relu().unwrap();
                vec![y.add(&h.add_scalar(1.0).unwrap()).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused);
        // By hand: relu and + 1 both read the product, so neither may replace it: the matmul
        // runs alone, and relu, + 1 and the add form one elementwise kernel (two joins).
        assert_eq!(r.strict_kernels, 4);
        assert_eq!(r.kernels, 2);
        assert_eq!(r.joins(), [("elementwise", 2)]);
    }
}
