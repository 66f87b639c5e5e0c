//! DTensor: meshes, placements, redistribution, sharding propagation per operator family, the
//! replicate fallback, compilation, and the data-, tensor- and fully-sharded-parallel MLP
//! steps against the same step on one chip, in Strict, DeferAndFuse and Compile.

use std::sync::Arc;

use tpuemu_backend::dtensor::mlp::{self, MlpData, Parallel};
use tpuemu_backend::dtensor::{
    self, DTensor, DValue, DeviceMesh, Placement, Reduce, distribute_slice, distribute_tensor,
};
use tpuemu_backend::models::MlpConfig;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Mode, Runtime, Tensor, TpuError};
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
