//! A linear layer's backward: `dX = dY @ W` and `dW = dY^T @ X` both read the output
//! gradient `dY`, once by rows and once transposed. The second of the two products joins the
//! first as its twin ([`crate::ir::TwinProduct`]): one kernel that loads each block of `dY`'s
//! columns once and folds it into both products (`kernels::matmul::pair`), so `dY` crosses HBM
//! once instead of twice; on the demo's language-model head that is the 8 MiB logits gradient.
//! XLA's multi-output fusion of sibling consumers does the same for operands read by two
//! products.
//!
//! Either product may come first (PyTorch's autograd records `dX` first; a hand-written
//! backward may not). The product reading `dY` by rows keeps the epilogue (a residual's
//! gradient added to `dX`, say); the twin must be plain. A runtime that cannot hold the pair
//! in VMEM, or that splits products over cores, runs the two products as they were
//! (`Node::split_pair`).

use super::super::group::{Graph, Group};
use super::matmul_epilogue::MAX_OPERANDS;
use crate::ir::{MatmulNode, Node, NodeKind, TwinProduct, View};
use crate::kernels::matmul::is_plain_epilogue;

/// Joins matmul `n` to matmul group `g` when one reads the other's left operand transposed.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let (NodeKind::Matmul(gm), NodeKind::Matmul(nm)) = (&g.node.kind, &n.kind) else {
        return false;
    };
    if gm.twin.is_some() || gm.rows.is_some() || !plain(n, nm) {
        return false;
    }
    // The two must be independent: `n` reads nothing the group writes.
    if n.inputs.iter().any(|v| g.written(v.storage.id()).is_some()) {
        return false;
    }
    // The twin's right operand and product take two of the kernel's registers.
    let operands = g.node.inputs.len() + g.node.outputs.len() - 2;
    let pair = if transposed(&g.node.inputs[0], gm, &n.inputs[0], nm)
        && operands + 2 <= MAX_OPERANDS
        && worth_it(gm)
    {
        pair_of(&g.node, gm, n, nm)
    } else if g.members.len() == 1
        && plain(&g.node, gm)
        && transposed(&n.inputs[0], nm, &g.node.inputs[0], gm)
        && worth_it(nm)
    {
        pair_of(n, nm, &g.node, gm)
    } else {
        return false;
    };
    g.absorb(n);
    g.node = pair;
    true
}

/// Whether pairing pays for `first` (the product reading `dY` by rows): the pair reads `dY`
/// (`m x k`) once less but finishes `first` (`m x n`, accumulated over every block of `dY`)
/// only after the last block, its epilogue and stores exposed instead of running under other
/// tiles' products. Worth it when `dY` is at least as wide as the first product: the
/// language-model head (8,192 against 512), the attention projections (512 against 512), the
/// gate and up projections (1,408 against 512); not the down projection (512 against 1,408,
/// with SwiGLU's backward in its epilogue: measured 21.3 us paired against 23.3 us apart).
fn worth_it(first: &MatmulNode) -> bool {
    first.k >= first.n
}

/// A product as recorded: `a`, `w`, one output, the default epilogue.
fn plain(n: &Node, mm: &MatmulNode) -> bool {
    n.inputs.len() == 2 && n.outputs.len() == 1 && is_plain_epilogue(&mm.epilogue)
}

/// Whether `a2`, the left operand of `m2`, is `a1` (the left operand of `m1`, read by rows)
/// transposed: the same elements, rows and columns swapped, both products batch 1.
fn transposed(a1: &View, m1: &MatmulNode, a2: &View, m2: &MatmulNode) -> bool {
    let (l1, l2) = (&a1.layout, &a2.layout);
    let last2 = |l: &crate::layout::Layout| -> Option<([usize; 2], [isize; 2])> {
        let d = l.ndim();
        (d >= 2 && l.shape[..d - 2].iter().all(|&s| s == 1)).then(|| {
            (
                [l.shape[d - 2], l.shape[d - 1]],
                [l.strides[d - 2], l.strides[d - 1]],
            )
        })
    };
    let (Some((s1, t1)), Some((s2, t2))) = (last2(l1), last2(l2)) else {
        return false;
    };
    m1.batch == 1
        && m2.batch == 1
        && m1.precision == m2.precision
        && a1.storage.id() == a2.storage.id()
        && a1.dtype == a2.dtype
        && l1.offset == l2.offset
        && s1 == [m1.m, m1.k]
        && s2 == [s1[1], s1[0]]
        && t2 == [t1[1], t1[0]]
        // Rows of A contiguous and apart (the twin then reads it transposed), more than one
        // of each, and a twin with columns: what the pair's kernel takes.
        && t1[1] == 1
        && t1[0] != 1
        && s1[0] > 1
        && s1[1] > 1
        && m2.n > 0
        && m2.m == m1.k
        && m2.k == m1.m
}

/// The pair of `first` (reading `dY` by rows, with its epilogue) and `twin` (plain): the
/// first's inputs then the twin's right operand; the first's outputs then the twin's product.
fn pair_of(first: &Node, fm: &MatmulNode, twin: &Node, tm: &MatmulNode) -> Node {
    let mut mm = fm.clone();
    mm.twin = Some(TwinProduct { n: tm.n });
    let mut inputs = first.inputs.clone();
    inputs.push(twin.inputs[1].clone());
    let mut outputs = first.outputs.clone();
    outputs.push(twin.outputs[0].clone());
    Node {
        kind: NodeKind::Matmul(mm),
        inputs,
        outputs,
        op: first.op.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{data, run_both, run_both_on};
    use crate::Tensor;
    use crate::dtype::DType;

    /// `dY [m, v]`, `W [v, d]`, `X [m, d]` in bf16, as a linear layer's backward sees them.
    fn operands(rt: &crate::Runtime, m: usize, v: usize, d: usize) -> Vec<Tensor> {
        let t = |n: usize, seed: u32, shape: &[usize]| {
            Tensor::from_slice(rt, &data(n, seed), shape)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        vec![
            t(m * v, 31, &[m, v]),
            t(v * d, 32, &[v, d]),
            t(m * d, 33, &[m, d]),
        ]
    }

    #[test]
    fn a_linear_backward_reads_its_gradient_once() {
        // Edges everywhere: m and d not multiples of the 128-wide array, v above one block.
        let (m, v, d) = (200usize, 1000usize, 200usize);
        for dx_first in [true, false] {
            let r = run_both(
                |rt| operands(rt, m, v, d),
                |t| {
                    let dx = || t[0].mm(&t[1]).unwrap();
                    let dw = || t[0].t().unwrap().mm(&t[2]).unwrap();
                    if dx_first {
                        let x = dx();
                        vec![x, dw()]
                    } else {
                        let w = dw();
                        vec![dx(), w]
                    }
                },
            );
            // Each product folds its inner dimension in the same slices in the same order as
            // its own kernel: the same bits.
            assert_eq!(r.strict, r.fused, "dX first: {dx_first}");
            // By hand: one kernel reading dY, W and X once and writing dX and dW once (bf16);
            // Strict reads dY twice.
            assert_eq!(r.joins(), [("linear backward", 1)]);
            assert_eq!((r.kernels, r.strict_kernels), (1, 2));
            let min = 2 * (m * v + 2 * v * d + 2 * m * d) as u64;
            assert!(
                r.hbm_bytes >= min && r.hbm_bytes <= min + min / 16,
                "{} bytes for a minimum of {min}",
                r.hbm_bytes
            );
            assert!(r.strict_hbm_bytes >= min + 2 * (m * v) as u64);
        }
    }

    #[test]
    fn the_input_gradient_keeps_its_epilogue_beside_its_twin() {
        // dX + a residual's gradient, as the block's backward adds them; recorded in
        // PyTorch's order (dX, dW, then the add).
        let (m, v, d) = (256usize, 512usize, 128usize);
        let r = run_both(
            |rt| {
                let mut t = operands(rt, m, v, d);
                t.push(
                    Tensor::from_slice(rt, &data(m * d, 34), &[m, d])
                        .unwrap()
                        .to_dtype(DType::BF16)
                        .unwrap(),
                );
                t
            },
            |t| {
                let dx = t[0].mm(&t[1]).unwrap();
                let dw = t[0].t().unwrap().mm(&t[2]).unwrap();
                vec![dx.add(&t[3]).unwrap(), dw]
            },
        );
        assert_eq!(r.strict, r.fused);
        // By hand: the add reads dX element for element and nothing else does: it joins as
        // the epilogue and dX never reaches HBM. One kernel reading dY, W, X and the residual
        // gradient once, writing the sum and dW.
        assert_eq!(r.joins(), [("linear backward", 1), ("matmul epilogue", 1)]);
        assert_eq!((r.kernels, r.strict_kernels), (1, 3));
        let min = 2 * (m * v + 2 * v * d + 3 * m * d) as u64;
        assert!(
            r.hbm_bytes >= min && r.hbm_bytes <= min + min / 16,
            "{} bytes for a minimum of {min}",
            r.hbm_bytes
        );
    }

    #[test]
    fn a_pair_the_chip_cannot_hold_runs_as_its_two_products() {
        // A 256 KiB VMEM holds each product's tiles but not the pair's 512 x 512 f32
        // accumulator (1 MiB); a v4 splits products over its two cores, which the pair's
        // accumulator cannot be. Both run the two products as recorded, with the same bits.
        let (m, v, d) = (512usize, 1024usize, 512usize);
        let mut small = tpuemu_emulator::builtin("v5e").unwrap();
        small.vmem_bytes = 256 << 10;
        for chip in [small, tpuemu_emulator::builtin("v4").unwrap()] {
            let name = chip.name.clone();
            let r = run_both_on(
                chip,
                |rt| operands(rt, m, v, d),
                |t| {
                    let dx = t[0].mm(&t[1]).unwrap();
                    vec![dx, t[0].t().unwrap().mm(&t[2]).unwrap()]
                },
            );
            assert_eq!(r.strict, r.fused, "{name}");
            assert_eq!(r.joins(), [("linear backward", 1)], "{name}");
            assert_eq!(r.kernels, r.strict_kernels, "{name}");
        }
    }

    #[test]
    fn degenerate_gradients_stay_two_products() {
        // One row of dY, one column of dY, rows of dY overlapping (row stride 1), an empty
        // twin: found by review, where the pair read A the wrong way or planned empty tiles.
        let cases: [(usize, usize, usize, bool); 3] = [
            (1, 256, 128, false),
            (256, 1, 1, false),
            (128, 256, 128, true),
        ];
        for (m, v, d, hankel) in cases {
            let r = run_both(
                |rt| {
                    let mut t = operands(rt, m, v, d);
                    if hankel {
                        t[0] = Tensor::from_slice(rt, &data(m + v, 94), &[m + v])
                            .unwrap()
                            .to_dtype(DType::BF16)
                            .unwrap();
                    }
                    t
                },
                |t| {
                    let dy = if hankel {
                        crate::ops::layout_ops::as_strided(
                            &t[0],
                            &[m as i64, v as i64],
                            &[1, 1],
                            None,
                        )
                        .unwrap()
                    } else {
                        t[0].clone()
                    };
                    vec![dy.mm(&t[1]).unwrap(), dy.t().unwrap().mm(&t[2]).unwrap()]
                },
            );
            assert_eq!(r.strict, r.fused, "{m} x {v}, hankel {hankel}");
            assert!(r.joins.is_empty(), "{m} x {v}: {:?}", r.joins);
        }
        let (m, v, d) = (128usize, 256usize, 128usize);
        let r = run_both(
            |rt| {
                let mut t = operands(rt, m, v, d);
                t.push(crate::ops::creation::zeros(rt, &[m, 0], DType::BF16).unwrap());
                t
            },
            |t| {
                vec![
                    t[0].mm(&t[1]).unwrap(),
                    t[0].t().unwrap().mm(&t[3]).unwrap(),
                ]
            },
        );
        assert_eq!(r.strict, r.fused);
        assert!(r.joins.is_empty(), "{:?}", r.joins);
    }

    #[test]
    fn products_of_unrelated_operands_stay_apart() {
        // dY @ W and Z^T @ X with Z of dY's shape: no operand is shared, no pair.
        let (m, v, d) = (128usize, 256usize, 128usize);
        let r = run_both(
            |rt| {
                let mut t = operands(rt, m, v, d);
                t.push(
                    Tensor::from_slice(rt, &data(m * v, 35), &[m, v])
                        .unwrap()
                        .to_dtype(DType::BF16)
                        .unwrap(),
                );
                t
            },
            |t| {
                vec![
                    t[0].mm(&t[1]).unwrap(),
                    t[3].t().unwrap().mm(&t[2]).unwrap(),
                ]
            },
        );
        assert_eq!(r.strict, r.fused);
        assert_eq!(r.kernels, 2);
        assert!(r.joins.is_empty());
    }
}
