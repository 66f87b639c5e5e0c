//! Sharding propagation for views, data movement, embedding and a mean loss over a sharded
//! batch, each against the same operator on one chip.

use super::*;

#[test]
fn views_map_shard_dims() {
    let m = mesh24();
    let x = inp(&[4, 8, 16], &[S(0), S(2)], 1);
    let o = check_op(
        &m,
        "aten::view",
        std::slice::from_ref(&x),
        vec![Value::Ints(vec![32, 16])],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
    let o = check_op(
        &m,
        "aten::reshape",
        std::slice::from_ref(&x),
        vec![Value::Ints(vec![4, 8, 4, 4])],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), S(2)]);
    // Splitting the sharded dimension 16 into [2, 8] over 4 shards: 2 does not divide.
    let o = check_op(
        &m,
        "aten::view",
        std::slice::from_ref(&x),
        vec![Value::Ints(vec![4, 8, 2, 8])],
        0.0,
    );
    assert_eq!(o[0].placements()[0], S(0));
    let o = check_op(
        &m,
        "aten::permute",
        std::slice::from_ref(&x),
        vec![Value::Ints(vec![2, 0, 1])],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(1), S(0)]);
    let o = check_op(
        &m,
        "aten::transpose.int",
        std::slice::from_ref(&x),
        vec![Value::Int(0), Value::Int(1)],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(1), S(2)]);
    let o = check_op(
        &m,
        "aten::unsqueeze",
        std::slice::from_ref(&x),
        vec![Value::Int(1)],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), S(3)]);
    let o = check_op(
        &m,
        "aten::select.int",
        std::slice::from_ref(&x),
        vec![Value::Int(1), Value::Int(3)],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
    // Selecting inside the sharded dimension resolves its shard first (a gather, or an
    // all-to-all that moves it to another dimension, whichever moves fewer bytes).
    let o = check_op(
        &m,
        "aten::select.int",
        std::slice::from_ref(&x),
        vec![Value::Int(0), Value::Int(3)],
        0.0,
    );
    assert_eq!(o[0].placements()[1], S(1));
    let o = check_op(
        &m,
        "aten::slice.Tensor",
        std::slice::from_ref(&x),
        vec![Value::Int(2), Value::Int(0), Value::Int(16), Value::Int(1)],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), S(2)]);
    check_op(
        &m,
        "aten::slice.Tensor",
        std::slice::from_ref(&x),
        vec![Value::Int(2), Value::Int(1), Value::Int(9), Value::Int(2)],
        0.0,
    );
    let o = check_op(
        &m,
        "aten::expand",
        &[inp(&[8, 1], &[S(0), R], 1)],
        vec![Value::Ints(vec![2, 8, 4])],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(1), R]);
    let o = check_op(&m, "aten::t", &[inp(&[8, 16], &[P, S(1)], 1)], vec![], 0.0);
    assert_eq!(o[0].placements(), &[P, S(0)]);
}

#[test]
fn data_movement_and_embedding() {
    let m = mesh24();
    let (a, b) = (vals(8 * 8, 1), vals(8 * 8, 2));
    let rt = single();
    let want = ops::call(
        &rt,
        "aten::cat",
        vec![
            Value::Tensors(vec![
                Tensor::from_slice(&rt, &a, &[8, 8]).unwrap(),
                Tensor::from_slice(&rt, &b, &[8, 8]).unwrap(),
            ]),
            Value::Int(1),
        ],
    )
    .unwrap();
    let got = dtensor::call(
        &m,
        "aten::cat",
        vec![
            DValue::Tensors(vec![
                distribute_slice(&m, &a, &[8, 8], &[S(0), S(1)]).unwrap(),
                distribute_slice(&m, &b, &[8, 8], &[S(0), R]).unwrap(),
            ]),
            Value::Int(1).into(),
        ],
    )
    .unwrap();
    let got = t(&got[0]);
    assert_eq!(got.placements()[0], S(0));
    let Value::Tensor(w) = &want[0] else { panic!() };
    assert_close(
        &got.to_f64_vec().unwrap(),
        &w.to_f64_vec().unwrap(),
        0.0,
        "cat",
    );
    // Embedding: a vocabulary-parallel table (rows sharded) gives a partial output.
    let table = vals(16 * 8, 3);
    let idx: Vec<i64> = vec![0, 5, 15, 3, 8, 12, 7, 1];
    let want = ops::call(
        &rt,
        "aten::embedding",
        vec![
            Value::Tensor(Tensor::from_slice(&rt, &table, &[16, 8]).unwrap()),
            Value::Tensor(Tensor::from_slice(&rt, &idx, &[8]).unwrap()),
        ],
    )
    .unwrap();
    let Value::Tensor(want) = &want[0] else {
        panic!()
    };
    for (tp, ip, out) in [
        ([R, S(0)], [S(0), R], [S(0), P]),
        ([R, S(1)], [S(0), R], [S(0), S(1)]),
        ([R, R], [S(0), S(0)], [S(0), S(0)]),
    ] {
        let got = dtensor::call(
            &m,
            "aten::embedding",
            vec![
                distribute_slice(&m, &table, &[16, 8], &tp).unwrap().into(),
                distribute_slice(&m, &idx, &[8], &ip).unwrap().into(),
            ],
        )
        .unwrap();
        let got = t(&got[0]);
        assert_eq!(got.placements(), &out, "embedding {tp:?} {ip:?}");
        assert_close(
            &got.to_f64_vec().unwrap(),
            &want.to_f64_vec().unwrap(),
            0.0,
            "embedding",
        );
    }
}

#[test]
fn mean_loss_over_a_sharded_batch() {
    let m = mesh24();
    let rt = single();
    let logp = vals(8 * 16, 5);
    let target: Vec<i64> = (0..8).map(|i| (i * 5 % 16) as i64).collect();
    let args = |x: Value, t: Value| vec![x, t, Value::None, Value::Int(1), Value::Int(-100)];
    let want = ops::call(
        &rt,
        "aten::nll_loss_forward",
        args(
            Value::Tensor(Tensor::from_slice(&rt, &logp, &[8, 16]).unwrap()),
            Value::Tensor(Tensor::from_slice(&rt, &target, &[8]).unwrap()),
        ),
    )
    .unwrap();
    let d = |v: Value| DValue::Value(v);
    let got = dtensor::call(
        &m,
        "aten::nll_loss_forward",
        vec![
            distribute_slice(&m, &logp, &[8, 16], &[S(0), S(0)])
                .unwrap()
                .into(),
            distribute_slice(&m, &target, &[8], &[S(0), S(0)])
                .unwrap()
                .into(),
            d(Value::None),
            d(Value::Int(1)),
            d(Value::Int(-100)),
        ],
    )
    .unwrap();
    assert_eq!(t(&got[0]).placements(), &[P, P]);
    assert_eq!(t(&got[1]).placements(), &[R, R]);
    for (g, w) in got.iter().zip(&want) {
        let Value::Tensor(w) = w else { panic!() };
        assert_close(
            &t(g).to_f64_vec().unwrap(),
            &w.to_f64_vec().unwrap(),
            1e-6,
            "nll",
        );
    }
}
