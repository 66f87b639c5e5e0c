//! DTensor: meshes, placements, redistribution, sharding propagation per operator family, the
//! replicate fallback and compilation (the sharded MLP steps are tested with the workloads).

use std::sync::Arc;

use tpuemu_backend::dtensor::{
    self, DTensor, DValue, DeviceMesh, Placement, Reduce, distribute_slice, distribute_tensor,
};
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{Runtime, Tensor, TpuError};
use tpuemu_emulator::{Emulator, builtin};
use tpuemu_isa::Device;

use Placement::{Replicate as R, Shard as S};
const P: Placement = Placement::PARTIAL;

fn device(dims: &[u32]) -> Arc<dyn Device> {
    Arc::new(Emulator::slice(builtin("v5e").unwrap(), dims).unwrap())
}

fn mesh(topo: &[u32], dims: &[(&str, usize)]) -> DeviceMesh {
    DeviceMesh::new(device(topo), dims).unwrap()
}

/// The usual 2-D mesh: ("dp", 2) x ("tp", 4) over a v5e 2x4 slice.
fn mesh24() -> DeviceMesh {
    mesh(&[2, 4], &[("dp", 2), ("tp", 4)])
}

fn single() -> Runtime {
    Runtime::new(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap())).unwrap()
}

fn vals(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + seed * 13) % 29) as f32 / 4.0 - 3.5)
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn t(v: &DValue) -> DTensor {
    v.tensor().cloned().expect("a DTensor")
}

#[test]
fn mesh_maps_ranks_to_chips_and_groups() {
    let m = mesh24();
    assert_eq!(m.shape(), &[2, 4]);
    assert_eq!(m.dim_named("tp").unwrap(), 1);
    assert_eq!(m.topology_axes(0), &[0]);
    assert_eq!(m.topology_axes(1), &[1]);
    // Rank (dp, tp) is the chip at topology coordinates (dp, tp); chips are numbered x-fastest.
    let chips: Vec<u32> = (0..8).map(|r| m.chip(r)).collect();
    assert_eq!(chips, vec![0, 2, 4, 6, 1, 3, 5, 7]);
    assert_eq!(m.coords(6), vec![1, 2]);
    assert_eq!(m.rank_at(&[1, 2]), 6);
    assert_eq!(m.groups(1), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(
        m.groups(0),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
    // A 1-D mesh over the whole slice: rank r is chip r.
    let m = mesh(&[2, 4], &[("dp", 8)]);
    assert_eq!(m.topology_axes(0), &[0, 1]);
    assert_eq!(
        (0..8).map(|r| m.chip(r)).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
}

#[test]
fn mesh_errors_are_values() {
    let d = device(&[2, 4]);
    let e = DeviceMesh::new(d.clone(), &[("a", 4), ("b", 2)]).unwrap_err();
    assert!(
        e.to_string().contains("does not cover whole topology axes"),
        "{e}"
    );
    let e = DeviceMesh::new(d.clone(), &[("a", 4)]).unwrap_err();
    assert!(e.to_string().contains("has 4 ranks but"), "{e}");
    let e = DeviceMesh::new(d.clone(), &[("a", 2), ("a", 4)]).unwrap_err();
    assert!(e.to_string().contains("used twice"), "{e}");
    let e = DeviceMesh::new(d, &[]).unwrap_err();
    assert!(e.to_string().contains("at least one"), "{e}");
    let m = mesh24();
    assert!(m.dim_named("pp").is_err());
}

#[test]
fn distribute_and_read_back_every_placement() {
    let m = mesh24();
    let x = vals(8 * 12, 1);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    for ps in [
        [R, R],
        [S(0), R],
        [R, S(1)],
        [S(0), S(1)],
        [S(1), S(0)],
        [S(0), S(0)],
        [P, S(0)],
        [S(1), P],
        [P, P],
        [Placement::Partial(Reduce::Max), S(1)],
    ] {
        let d = distribute_slice(&m, &x, &[8, 12], &ps).unwrap();
        assert_eq!(d.shape(), &[8, 12]);
        assert_eq!(d.placements(), &ps);
        assert_close(&d.to_f64_vec().unwrap(), &want, 0.0, &format!("{ps:?}"));
    }
    // Local shapes: [Shard(0), Shard(0)] nests dp outside tp: 8 rows in 8 pieces.
    let d = distribute_slice(&m, &x, &[8, 12], &[S(0), S(0)]).unwrap();
    assert_eq!(d.to_local(0).shape(), &[1, 12]);
    // Rank (1, 2) holds row 1 * 4 + 2.
    let r = m.rank_at(&[1, 2]);
    let got = d.to_local(r).to_vec::<f32>().unwrap();
    assert_eq!(got, x[6 * 12..7 * 12].to_vec());
    // From a tensor on another runtime.
    let rt = single();
    let src = Tensor::from_slice(&rt, &x, &[8, 12]).unwrap();
    let d = distribute_tensor(&m, &src, &[R, S(1)]).unwrap();
    assert_eq!(d.to_local(3).shape(), &[8, 3]);
    assert_close(&d.to_f64_vec().unwrap(), &want, 0.0, "from a tensor");
}

#[test]
fn bad_placements_are_errors() {
    let m = mesh24();
    let x = vals(6 * 8, 0);
    let e = distribute_slice(&m, &x, &[6, 8], &[R, S(0)]).unwrap_err();
    assert!(e.to_string().contains("cannot be split evenly"), "{e}");
    let e = distribute_slice(&m, &x, &[6, 8], &[R]).unwrap_err();
    assert!(
        e.to_string().contains("one placement per mesh dimension"),
        "{e}"
    );
    let e = distribute_slice(&m, &x, &[6, 8], &[R, S(2)]).unwrap_err();
    assert!(matches!(e, TpuError::BadDim(_)), "{e}");
    let d = distribute_slice(&m, &x, &[6, 8], &[R, S(1)]).unwrap();
    let e = d.redistribute(&[S(0), S(0)]).unwrap_err();
    assert!(e.to_string().contains("cannot be split evenly"), "{e}");
    // A plain tensor among DTensor arguments.
    let rt = single();
    let plain = Tensor::from_slice(&rt, &x, &[6, 8]).unwrap();
    let e = dtensor::call(
        &m,
        "aten::add.Tensor",
        vec![d.clone().into(), Value::Tensor(plain).into()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("mixed Tensor and DTensor"), "{e}");
    // Locals of the wrong runtime.
    let e = DTensor::from_local(&m, vec![d.to_local(1).clone(); 8], &[R, S(1)]).unwrap_err();
    assert!(e.to_string().contains("not on that rank's runtime"), "{e}");
}

const ALL: [Placement; 4] = [S(0), S(1), R, P];

#[test]
fn redistribute_between_placements() {
    // 1-D: every pair.
    let m = mesh(&[4], &[("x", 4)]);
    let x = vals(8 * 4, 2);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    for from in ALL {
        let d = distribute_slice(&m, &x, &[8, 4], &[from]).unwrap();
        for to in ALL {
            let r = d.redistribute(&[to]).unwrap();
            assert_eq!(r.placements(), &[to]);
            assert_close(
                &r.to_f64_vec().unwrap(),
                &want,
                1e-6,
                &format!("{from} -> {to}"),
            );
        }
    }
}

#[test]
fn redistribute_on_a_2d_mesh() {
    let m = mesh24();
    let x = vals(8 * 8, 3);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let targets = [
        [R, R],
        [S(0), S(1)],
        [S(1), S(0)],
        [S(0), S(0)],
        [P, S(1)],
        [S(1), P],
    ];
    for a in ALL {
        for b in ALL {
            let d = distribute_slice(&m, &x, &[8, 8], &[a, b]).unwrap();
            for to in targets {
                let r = d.redistribute(&to).unwrap();
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    1e-6,
                    &format!("[{a}, {b}] -> {to:?}"),
                );
            }
        }
    }
}

#[test]
fn a_shard_over_both_mesh_dimensions_moves_in_one_collective() {
    // Shard(0) on dp and on tp (a Shard on the flattened mesh): gathering or reduce-scattering
    // it is one collective over both dimensions, on both topology axes at once.
    let m = mesh24();
    let x = vals(8 * 8, 5);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let count = |m: &DeviceMesh, name: &str| -> u64 {
        m.metrics()
            .iter()
            .map(|mt| mt.ops_by_name.get(name).copied().unwrap_or(0))
            .sum()
    };
    for (from, to, coll) in [
        ([S(0), S(0)], [R, R], "c10d::all_gather"),
        ([P, P], [S(0), S(0)], "c10d::reduce_scatter"),
        ([P, P], [R, R], "c10d::all_reduce"),
    ] {
        let d = distribute_slice(&m, &x, &[8, 8], &from).unwrap();
        m.reset_metrics();
        let r = d.redistribute(&to).unwrap();
        assert_eq!(r.placements(), &to);
        assert_close(&r.to_f64_vec().unwrap(), &want, 1e-6, coll);
        // One launch per rank (each rank counts the collectives it joins).
        assert_eq!(count(&m, coll), m.num_ranks() as u64, "{from:?} -> {to:?}");
    }
}

/// Runs `name` on DTensors and on the same tensors on one chip; returns the DTensor results.
fn check_op(
    m: &DeviceMesh,
    name: &str,
    inputs: &[(Vec<f32>, Vec<usize>, Vec<Placement>)],
    rest: Vec<Value>,
    tol: f64,
) -> Vec<DTensor> {
    let rt = single();
    let mut dargs: Vec<DValue> = Vec::new();
    let mut args: Vec<Value> = Vec::new();
    for (v, shape, ps) in inputs {
        dargs.push(distribute_slice(m, v, shape, ps).unwrap().into());
        args.push(Value::Tensor(Tensor::from_slice(&rt, v, shape).unwrap()));
    }
    dargs.extend(rest.iter().cloned().map(DValue::Value));
    args.extend(rest);
    let want = ops::call(&rt, name, args).unwrap();
    let got = dtensor::call(m, name, dargs).unwrap();
    let mut out = Vec::new();
    for (w, g) in want.iter().zip(&got) {
        if let (Value::Tensor(w), DValue::Tensor(g)) = (w, g) {
            assert_eq!(g.shape(), w.shape(), "{name}: shape");
            assert_close(
                &g.to_f64_vec().unwrap(),
                &w.to_f64_vec().unwrap(),
                tol,
                name,
            );
            out.push(g.clone());
        }
    }
    out
}

fn inp(shape: &[usize], ps: &[Placement], seed: usize) -> (Vec<f32>, Vec<usize>, Vec<Placement>) {
    (
        vals(shape.iter().product(), seed),
        shape.to_vec(),
        ps.to_vec(),
    )
}

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

#[test]
fn an_operator_without_a_rule_runs_replicated_and_is_counted() {
    let m = mesh24();
    let o = check_op(
        &m,
        "aten::as_strided",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![
            Value::Ints(vec![4, 4]),
            Value::Ints(vec![1, 8]),
            Value::Int(2),
        ],
        0.0,
    );
    assert_eq!(o[0].placements(), &[R, R]);
    for mt in m.metrics() {
        assert_eq!(mt.sharding_fallbacks.get("aten::as_strided"), Some(&1));
        assert!(mt.report().contains("ShardingFallbacks"));
    }
}

#[test]
fn every_registered_operator_declares_a_rule_or_a_reason_to_run_replicated() {
    let mut undeclared = Vec::new();
    for (name, def) in ops::registry() {
        match def.sharding {
            ops::Sharding::Replicate(reason) => {
                assert!(
                    !reason.is_empty(),
                    "{name} runs replicated without a reason"
                );
                assert!(dtensor::sharding_rule(name).is_none());
                if reason == "no rule declared" {
                    undeclared.push(*name);
                }
            }
            _ => assert!(dtensor::sharding_rule(name).is_some(), "{name}"),
        }
    }
    assert!(
        undeclared.is_empty(),
        "operators that declare no sharding rule: {undeclared:?}"
    );
    // A rule that the fallback test above exercises.
    assert_eq!(dtensor::sharding_rule("aten::as_strided"), None);
    assert_eq!(dtensor::sharding_rule("aten::mm"), Some("matrix"));
    assert_eq!(
        dtensor::sharding_rule("aten::add_.Tensor"),
        Some("pointwise")
    );
}

#[test]
fn in_place_operators_keep_their_placement() {
    let m = mesh24();
    let x = distribute_slice(&m, &vals(64, 1), &[8, 8], &[S(0), S(1)]).unwrap();
    let y = distribute_slice(&m, &vals(64, 2), &[8, 8], &[R, R]).unwrap();
    let out = dtensor::call(&m, "aten::copy_", vec![x.clone().into(), y.clone().into()]).unwrap();
    assert_eq!(t(&out[0]).placements(), &[S(0), S(1)]);
    assert_eq!(x.to_vec::<f32>().unwrap(), vals(64, 2));
    let p = distribute_slice(&m, &vals(64, 1), &[8, 8], &[P, R]).unwrap();
    let e = dtensor::call(
        &m,
        "aten::fill_.Scalar",
        vec![p.into(), Value::Float(1.0).into()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("in place"), "{e}");
}
