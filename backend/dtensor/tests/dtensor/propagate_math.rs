//! Sharding propagation for pointwise operators, matrix products, reductions, softmax and the
//! norms, each against the same operator on one chip.

use super::*;

#[test]
fn pointwise_follows_shards_and_keeps_partials() {
    let m = mesh24();
    // Shards agree: no communication, the output keeps them.
    let o = check_op(
        &m,
        "aten::mul.Tensor",
        &[
            inp(&[8, 8], &[S(0), S(1)], 1),
            inp(&[8, 8], &[S(0), S(1)], 2),
        ],
        vec![],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
    // A broadcast operand is sliced locally to follow the sharded one.
    let o = check_op(
        &m,
        "aten::add.Tensor",
        &[inp(&[8, 8], &[R, S(1)], 1), inp(&[8], &[R, R], 2)],
        vec![],
        0.0,
    );
    assert_eq!(o[0].placements(), &[R, S(1)]);
    // Partial + Partial stays partial; Partial + Replicate too (the replicated one is kept on
    // one rank).
    let o = check_op(
        &m,
        "aten::add.Tensor",
        &[inp(&[8, 8], &[P, R], 1), inp(&[8, 8], &[P, R], 2)],
        vec![],
        1e-6,
    );
    assert_eq!(o[0].placements(), &[P, R]);
    let o = check_op(
        &m,
        "aten::sub.Tensor",
        &[inp(&[8, 8], &[R, P], 1), inp(&[8, 8], &[R, R], 2)],
        vec![],
        1e-6,
    );
    assert_eq!(o[0].placements(), &[R, P]);
    // Partial x Replicate stays partial; a nonlinear operator resolves the partial first.
    let o = check_op(
        &m,
        "aten::mul.Tensor",
        &[inp(&[8, 8], &[R, P], 1), inp(&[8, 8], &[R, R], 2)],
        vec![],
        1e-6,
    );
    assert_eq!(o[0].placements(), &[R, P]);
    let o = check_op(&m, "aten::exp", &[inp(&[8, 8], &[R, P], 1)], vec![], 1e-5);
    assert!(!o[0].placements().contains(&P));
    let o = check_op(
        &m,
        "aten::mul.Scalar",
        &[inp(&[8, 8], &[P, S(0)], 1)],
        vec![Value::Float(0.5)],
        1e-6,
    );
    assert_eq!(o[0].placements(), &[P, S(0)]);
    // Mismatched shards: the cheaper side moves.
    let o = check_op(
        &m,
        "aten::maximum",
        &[inp(&[8, 8], &[S(0), R], 1), inp(&[8, 8], &[S(1), R], 2)],
        vec![],
        0.0,
    );
    assert!(o[0].placements()[0].is_shard());
    // where: a boolean condition (from a comparison) with sharded and broadcast operands.
    let rt = single();
    let (c0, a0, b0) = (vals(64, 1), vals(64, 2), vals(8, 3));
    let host =
        |v: &[f32], shape: &[usize]| Value::Tensor(Tensor::from_slice(&rt, v, shape).unwrap());
    let cond = ops::call(
        &rt,
        "aten::gt.Scalar",
        vec![host(&c0, &[8, 8]), Value::Float(0.0)],
    )
    .unwrap();
    let want = ops::call(
        &rt,
        "aten::where.self",
        vec![cond[0].clone(), host(&a0, &[8, 8]), host(&b0, &[8])],
    )
    .unwrap();
    let dc = dtensor::call(
        &m,
        "aten::gt.Scalar",
        vec![
            distribute_slice(&m, &c0, &[8, 8], &[S(0), S(1)])
                .unwrap()
                .into(),
            Value::Float(0.0).into(),
        ],
    )
    .unwrap();
    let got = dtensor::call(
        &m,
        "aten::where.self",
        vec![
            dc[0].clone(),
            distribute_slice(&m, &a0, &[8, 8], &[R, S(1)])
                .unwrap()
                .into(),
            distribute_slice(&m, &b0, &[8], &[R, R]).unwrap().into(),
        ],
    )
    .unwrap();
    let Value::Tensor(w) = &want[0] else { panic!() };
    assert_close(
        &t(&got[0]).to_f64_vec().unwrap(),
        &w.to_f64_vec().unwrap(),
        0.0,
        "where",
    );
}

#[test]
fn matmul_column_row_and_batch_parallel() {
    let m = mesh24();
    // Column parallel: Replicate x Shard(1) -> Shard(1).
    let o = check_op(
        &m,
        "aten::mm",
        &[inp(&[8, 16], &[R, R], 1), inp(&[16, 8], &[R, S(1)], 2)],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[R, S(1)]);
    // Row parallel: Shard(1) x Shard(0) -> Partial.
    let o = check_op(
        &m,
        "aten::mm",
        &[inp(&[8, 16], &[R, S(1)], 1), inp(&[16, 8], &[R, S(0)], 2)],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[R, P]);
    // Data parallel on one mesh dimension, column parallel on the other.
    let o = check_op(
        &m,
        "aten::mm",
        &[inp(&[8, 16], &[S(0), R], 1), inp(&[16, 8], &[R, S(1)], 2)],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
    // addmm with a row-parallel product: the bias is added once.
    let o = check_op(
        &m,
        "aten::addmm",
        &[
            inp(&[8], &[R, R], 3),
            inp(&[8, 16], &[R, S(1)], 1),
            inp(&[16, 8], &[R, S(0)], 2),
        ],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[R, P]);
    let o = check_op(
        &m,
        "aten::addmm",
        &[
            inp(&[8], &[R, R], 3),
            inp(&[8, 16], &[S(0), R], 1),
            inp(&[16, 8], &[R, S(1)], 2),
        ],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
    // bmm: batch on dp, row parallel on tp.
    let o = check_op(
        &m,
        "aten::bmm",
        &[
            inp(&[2, 8, 16], &[S(0), S(2)], 1),
            inp(&[2, 16, 8], &[S(0), S(1)], 2),
        ],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[S(0), P]);
    check_op(
        &m,
        "aten::mv",
        &[inp(&[8, 16], &[R, S(1)], 1), inp(&[16], &[R, S(0)], 2)],
        vec![],
        1e-5,
    );
    let o = check_op(
        &m,
        "aten::dot",
        &[inp(&[16], &[S(0), S(0)], 1), inp(&[16], &[S(0), S(0)], 2)],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[P, P]);
    // Attention sharded over batch and heads.
    let o = check_op(
        &m,
        "aten::scaled_dot_product_attention",
        &[
            inp(&[2, 4, 8, 16], &[S(0), S(1)], 1),
            inp(&[2, 4, 8, 16], &[S(0), S(1)], 2),
            inp(&[2, 4, 8, 16], &[S(0), S(1)], 3),
        ],
        vec![Value::None, Value::Float(0.0), Value::Bool(true)],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
}

#[test]
fn reductions_over_sharded_dims_are_partial() {
    let m = mesh24();
    let o = check_op(
        &m,
        "aten::sum.dim_IntList",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![Value::Ints(vec![0]), Value::Bool(false)],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[P, S(0)]);
    let o = check_op(
        &m,
        "aten::mean.dim",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![Value::Ints(vec![0, 1]), Value::Bool(true)],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[P, P]);
    let o = check_op(
        &m,
        "aten::sum",
        &[inp(&[8, 8], &[P, S(1)], 1)],
        vec![],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[P, P]);
    let o = check_op(
        &m,
        "aten::amax",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![Value::Ints(vec![1]), Value::Bool(false)],
        0.0,
    );
    assert_eq!(o[0].placements(), &[S(0), Placement::Partial(Reduce::Max)]);
    check_op(
        &m,
        "aten::min",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![],
        0.0,
    );
    // Not decomposable: the reduced dimension is gathered first.
    let o = check_op(
        &m,
        "aten::var.correction",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![Value::Ints(vec![1]), Value::Int(1), Value::Bool(false)],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[S(0), S(0)]);
    let o = check_op(
        &m,
        "aten::max.dim",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![Value::Int(1), Value::Bool(true)],
        0.0,
    );
    assert!(!o[1].placements().contains(&S(1)));
    check_op(
        &m,
        "aten::argmax",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![],
        0.0,
    );
}

#[test]
fn softmax_and_norms_keep_unsharded_dims() {
    let m = mesh24();
    let o = check_op(
        &m,
        "aten::_softmax",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![Value::Int(-1), Value::Bool(false)],
        1e-5,
    );
    // The softmax dimension is not sharded any more (tp moved its shard to dimension 0 with
    // an all-to-all, cheaper than gathering).
    assert_eq!(o[0].placements(), &[S(0), S(0)]);
    let o = check_op(
        &m,
        "aten::_log_softmax",
        &[inp(&[8, 8], &[S(0), R], 1)],
        vec![Value::Int(1), Value::Bool(false)],
        1e-5,
    );
    assert_eq!(o[0].placements(), &[S(0), R]);
    let o = check_op(
        &m,
        "aten::native_layer_norm",
        &[inp(&[4, 8, 16], &[S(0), S(1)], 1)],
        vec![
            Value::Ints(vec![16]),
            Value::None,
            Value::None,
            Value::Float(1e-5),
        ],
        1e-4,
    );
    assert_eq!(o[0].placements(), &[S(0), S(1)]);
    let rest = [Value::Ints(vec![16]), Value::Float(1e-6)];
    let rt = single();
    let x = vals(4 * 8 * 16, 1);
    let w = vals(16, 2);
    let want = ops::call(
        &rt,
        "aten::rms_norm",
        vec![
            Value::Tensor(Tensor::from_slice(&rt, &x, &[4, 8, 16]).unwrap()),
            rest[0].clone(),
            Value::Tensor(Tensor::from_slice(&rt, &w, &[16]).unwrap()),
            rest[1].clone(),
        ],
    )
    .unwrap();
    let got = dtensor::call(
        &m,
        "aten::rms_norm",
        vec![
            distribute_slice(&m, &x, &[4, 8, 16], &[S(1), S(2)])
                .unwrap()
                .into(),
            rest[0].clone().into(),
            distribute_slice(&m, &w, &[16], &[R, R]).unwrap().into(),
            rest[1].clone().into(),
        ],
    )
    .unwrap();
    let got = t(&got[0]);
    // The normalised dimension is not sharded any more (gathered, or moved by an all-to-all);
    // the other shard stays.
    assert_eq!(got.placements()[0], S(1));
    assert_ne!(got.placements()[1], S(2));
    let Value::Tensor(want) = &want[0] else {
        panic!()
    };
    assert_close(
        &got.to_f64_vec().unwrap(),
        &want.to_f64_vec().unwrap(),
        1e-5,
        "rms_norm",
    );
}
