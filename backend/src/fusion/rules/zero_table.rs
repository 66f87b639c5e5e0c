//! A table filled with zeros and then indexed into (`embedding_dense_backward`: zeros, then
//! an index-add of the gradient rows; `scatter_add` into `zeros`): the index kernel starts the
//! table as zeros in VMEM instead of reading it, so the table crosses HBM once (written) rather
//! than three times (zero fill written, read back, written), a reduction fused with the fill
//! that produces its accumulator.

use super::super::group::{Graph, Group};
use super::super::views::same_view;
use crate::dtype::Scalar;
use crate::ir::{Node, NodeKind, POp, Prog};

/// Joins an index-add or index-put `n` to a group that only fills `n`'s table with zeros.
/// Unlike the other rules it lets `n` write what the group wrote: the fill is replaced, not
/// extended.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let (NodeKind::IndexAdd(gn) | NodeKind::IndexPut(gn, _)) = &n.kind else {
        return false;
    };
    if gn.zero_table || g.members.len() != 1 {
        return false;
    }
    let NodeKind::Tile { prog, .. } = &g.node.kind else {
        return false;
    };
    let fills = g.node.inputs.is_empty()
        && g.node.outputs.len() == 1
        && prog.outputs.len() == 1
        && is_zero(prog, prog.outputs[0]);
    // The same elements, and nothing else of `n` reads them (index and source are other
    // storages).
    let table = g.node.outputs.first();
    if !fills
        || !table.is_some_and(|t| same_view(t, &n.outputs[0]))
        || n.inputs
            .iter()
            .any(|v| v.storage.id() == n.outputs[0].storage.id())
    {
        return false;
    }
    let mut node = n.clone();
    match &mut node.kind {
        NodeKind::IndexAdd(gn) | NodeKind::IndexPut(gn, _) => gn.zero_table = true,
        _ => unreachable!("matched above"),
    }
    g.absorb(n);
    g.node = node;
    g.out_refs.clear();
    true
}

/// Whether prog node `r` is the constant zero (all bits zero in any dtype: not `-0.0`), cast
/// or not.
fn is_zero(prog: &Prog, r: u32) -> bool {
    match prog.node(r).op {
        POp::Const(Scalar::Int(0) | Scalar::Bool(false)) => true,
        POp::Const(Scalar::Float(f)) => f.to_bits() == 0,
        POp::Cast(a) => is_zero(prog, a),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{data, run_both};
    use crate::Tensor;
    use crate::dtype::DType;
    use crate::ops::{self, Value};

    #[test]
    fn an_embedding_gradient_crosses_hbm_once() {
        // 64 gradient rows of 256 into a table of 200 rows, then of 512 rows, indices
        // repeating: 50 distinct rows ((i * 37) % 50 over 64 indices, 37 prime to 50).
        let (d, count, distinct) = (256usize, 64usize, 50u64);
        for rows in [200usize, 512] {
            let g0 = data(count * d, 11);
            let idx: Vec<i64> = (0..count as i64).map(|i| (i * 37) % 50).collect();
            let r = run_both(
                |rt| {
                    vec![
                        Tensor::from_slice(rt, &g0, &[count, d])
                            .unwrap()
                            .to_dtype(DType::BF16)
                            .unwrap(),
                        Tensor::from_slice(rt, &idx, &[count]).unwrap(),
                    ]
                },
                |t| {
                    let out = ops::call(
                        t[0].runtime(),
                        "aten::embedding_dense_backward",
                        vec![
                            Value::Tensor(t[0].clone()),
                            Value::Tensor(t[1].clone()),
                            Value::Int(rows as i64),
                            Value::Int(-1),
                            Value::Bool(false),
                        ],
                    )
                    .unwrap();
                    match &out[0] {
                        Value::Tensor(t) => vec![t.clone()],
                        _ => unreachable!(),
                    }
                },
            );
            // Same additions in the same (index) order from the same zeros: the same bits.
            assert_eq!(r.strict, r.fused);
            // By hand: one kernel that reads the indices (8 bytes each) and the gradient rows
            // (bf16) and writes the table (bf16) once. Strict fills the table (written), then
            // reads it and writes it back. In the table of 512 rows the indices touch at most
            // a quarter of the rows, so the kernel writes zeros over the table while it adds
            // and then the 50 touched rows again.
            let table = (rows * d * 2) as u64;
            let once = (count * 8 + count * d * 2) as u64 + table;
            let again = if rows == 512 {
                distinct * d as u64 * 2
            } else {
                0
            };
            assert_eq!(r.joins(), [("zero table", 1)]);
            assert_eq!(r.kernels, 1);
            assert_eq!(r.hbm_bytes, once + again, "{rows} rows");
            assert_eq!(r.strict_kernels, 2);
            assert_eq!(r.strict_hbm_bytes, once + 2 * table);
        }
    }

    #[test]
    fn a_table_that_is_not_zero_is_read() {
        // An index-add into ones must read them: the rule does not apply.
        let (rows, d, count) = (64usize, 128usize, 16usize);
        let src = data(count * d, 3);
        let idx: Vec<i64> = (0..count as i64).map(|i| (i * 5) % rows as i64).collect();
        let r = run_both(
            |rt| {
                vec![
                    Tensor::from_slice(rt, &src, &[count, d]).unwrap(),
                    Tensor::from_slice(rt, &idx, &[count]).unwrap(),
                ]
            },
            |t| {
                let ones = ops::creation::ones(t[0].runtime(), &[rows, d], DType::F32).unwrap();
                let out = ops::call(
                    t[0].runtime(),
                    "aten::index_add",
                    vec![
                        Value::Tensor(ones),
                        Value::Int(0),
                        Value::Tensor(t[1].clone()),
                        Value::Tensor(t[0].clone()),
                    ],
                )
                .unwrap();
                match &out[0] {
                    Value::Tensor(t) => vec![t.clone()],
                    _ => unreachable!(),
                }
            },
        );
        assert_eq!(r.strict, r.fused);
        assert!(!r.joins.contains_key("zero table"));
        // The table is written by the fill and read and written by the index-add.
        assert!(r.hbm_bytes >= 3 * (rows * d * 4) as u64);
    }
}
