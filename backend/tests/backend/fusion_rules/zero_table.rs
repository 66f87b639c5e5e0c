//! The zero-table rule (`fusion::rules::zero_table`): a table filled with zeros and indexed into
//! starts as zeros in VMEM and crosses HBM once; a table that is not zero is read.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;
use tpuemu_backend::dtype::DType;
use tpuemu_backend::ops::{self, Value};

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
