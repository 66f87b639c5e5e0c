//! DTensor: meshes, placements, redistribution, sharding propagation per operator family, the
//! replicate fallback and compilation (the sharded MLP steps are tested with the workloads).
//! The tests are in `placement`, `propagate_math`, `propagate_data` and `fallback`; the meshes,
//! values and the one-chip comparison they share are here.

use std::sync::Arc;

use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{Runtime, Tensor, TpuError};
use tpuemu_dtensor::{
    self as dtensor, DTensor, DValue, DeviceMesh, Placement, Reduce, distribute_slice,
    distribute_tensor,
};
use tpuemu_emulator::{Emulator, builtin};
use tpuemu_isa::Device;

use Placement::{Replicate as R, Shard as S};
const P: Placement = Placement::PARTIAL;

#[path = "dtensor/placement.rs"]
mod placement;

#[path = "dtensor/propagate_math.rs"]
mod propagate_math;

#[path = "dtensor/propagate_data.rs"]
mod propagate_data;

#[path = "dtensor/fallback.rs"]
mod fallback;

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
