//! The MLP step written over DTensors, data-, tensor- and fully-sharded-parallel, against the
//! same step on one chip, in Strict, DeferAndFuse and Compile.

use std::sync::Arc;

use tpuemu_backend::{DType, Mode, Runtime, TpuError};
use tpuemu_dtensor::Placement;
use tpuemu_dtensor::{self as dtensor, DeviceMesh};
use tpuemu_emulator::{Emulator, builtin};
use tpuemu_isa::Device;
use tpuemu_workloads::MlpConfig;
use tpuemu_workloads::sharded_mlp::{self as mlp, MlpData, Parallel};

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

const R: Placement = Placement::Replicate;

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn single() -> Runtime {
    Runtime::new(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap())).unwrap()
}

/// How an MLP step is run on the mesh.
#[derive(Clone, Copy, Debug)]
enum Run {
    Eager(Mode),
    Compiled,
}

fn small_mlp() -> MlpData {
    MlpData::new(
        MlpConfig {
            batch: 16,
            d_in: 32,
            hidden: 64,
            classes: 16,
            dtype: DType::F32,
        },
        7,
    )
}

/// Runs `form` along mesh dimension `dim` as `how` says, checks every result (loss, updated
/// parameters, gradients) against the same step on one chip and the parameters' placements,
/// and returns the collectives each rank ran, by name.
fn check_mlp(
    m: &DeviceMesh,
    form: Parallel,
    dim: usize,
    how: Run,
) -> std::collections::BTreeMap<String, u64> {
    let data = small_mlp();
    let rt = single();
    let want = mlp::reference_step(&data.tensors(&rt).unwrap()).unwrap();
    m.reset_metrics();
    let xs = data.distribute(m, form, dim).unwrap();
    let got = match how {
        Run::Eager(mode) => {
            m.set_mode(mode).unwrap();
            let got = mlp::parallel_step(form, dim, &xs).unwrap();
            m.set_mode(Mode::Strict).unwrap();
            got
        }
        Run::Compiled => {
            let mut f =
                dtensor::compile(m, "mlp_step", move |xs| mlp::parallel_step(form, dim, xs));
            let got = f.call(&xs).unwrap();
            // A second call reuses the compiled plan and gives the same bits.
            let again = f.call(&xs).unwrap();
            assert_eq!(f.compiles(), 1);
            for (a, b) in got.iter().zip(&again) {
                assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            }
            got
        }
    };
    assert_eq!(got.len(), want.len());
    let names = ["loss", "w1", "b1", "w2", "b2", "dw1", "db1", "dw2", "db2"];
    for (i, ((g, w), name)) in got.iter().zip(&want).zip(names).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{form:?} {how:?} {name}: shape");
        // Sharded contractions sum in another order (and the default matmul precision rounds
        // operands to bf16 the same way on both sides): f32 rounding differences only.
        assert_close(
            &g.to_f64_vec().unwrap(),
            &w.to_f64_vec().unwrap(),
            2e-4,
            &format!("{form:?} {how:?} {name}"),
        );
        if i >= 1 {
            // Updated parameters and gradients are placed like the parameters.
            let mut ps = vec![R; m.ndim()];
            ps[dim] = form.placements()[2 + (i - 1) % 4];
            assert_eq!(
                g.placements(),
                &ps[..],
                "{form:?} {how:?} {name}: placements"
            );
        }
    }
    let mut colls = std::collections::BTreeMap::new();
    for mt in m.metrics() {
        assert!(
            mt.sharding_fallbacks.is_empty(),
            "{:?}",
            mt.sharding_fallbacks
        );
        for (k, v) in &mt.ops_by_name {
            if k.starts_with("c10d::") {
                *colls.entry(k.clone()).or_insert(0) += v;
            }
        }
    }
    let ranks = m.num_ranks() as u64;
    for v in colls.values_mut() {
        assert_eq!(*v % ranks, 0, "every rank runs every collective");
        *v /= ranks;
    }
    colls
}

#[test]
fn data_parallel_mlp_step_all_reduces_gradients() {
    let m = mesh(&[4], &[("dp", 4)]);
    for how in [
        Run::Eager(Mode::Strict),
        Run::Eager(Mode::DeferAndFuse),
        Run::Compiled,
    ] {
        let c = check_mlp(&m, Parallel::Data, 0, how);
        if !matches!(how, Run::Compiled) {
            // Four gradients plus the loss's total weight.
            assert!(
                c.get("c10d::all_reduce").copied().unwrap_or(0) >= 4,
                "{how:?}: {c:?}"
            );
            assert!(!c.contains_key("c10d::reduce_scatter"), "{how:?}: {c:?}");
        }
    }
}

#[test]
fn tensor_parallel_mlp_step_is_column_then_row_parallel() {
    let m = mesh(&[4], &[("tp", 4)]);
    for how in [
        Run::Eager(Mode::Strict),
        Run::Eager(Mode::DeferAndFuse),
        Run::Compiled,
    ] {
        let c = check_mlp(&m, Parallel::Tensor, 0, how);
        if !matches!(how, Run::Compiled) {
            // Megatron: the row-parallel layer's partial logits are all-reduced; no gather of
            // the hidden activations.
            assert!(c.contains_key("c10d::all_reduce"), "{how:?}: {c:?}");
            assert!(!c.contains_key("c10d::all_gather"), "{how:?}: {c:?}");
        }
    }
}

#[test]
fn fully_sharded_mlp_step_gathers_parameters_and_scatters_gradients() {
    let m = mesh(&[4], &[("fsdp", 4)]);
    for how in [
        Run::Eager(Mode::Strict),
        Run::Eager(Mode::DeferAndFuse),
        Run::Compiled,
    ] {
        let c = check_mlp(&m, Parallel::FullyShard, 0, how);
        if !matches!(how, Run::Compiled) {
            assert!(
                c.get("c10d::all_gather").copied().unwrap_or(0) >= 4,
                "{how:?}: {c:?}"
            );
            assert!(
                c.get("c10d::reduce_scatter").copied().unwrap_or(0) >= 4,
                "{how:?}: {c:?}"
            );
        }
    }
}

#[test]
fn mlp_step_along_one_dimension_of_a_2d_mesh() {
    let m = mesh24();
    check_mlp(&m, Parallel::Tensor, 1, Run::Eager(Mode::Strict));
    check_mlp(&m, Parallel::Data, 0, Run::Eager(Mode::DeferAndFuse));
}

#[test]
fn mlp_step_with_wrong_inputs_is_an_error() {
    let m = mesh(&[4], &[("dp", 4)]);
    let xs = small_mlp().distribute(&m, Parallel::Data, 0).unwrap();
    let e = mlp::parallel_step(Parallel::Data, 0, &xs[..3]).unwrap_err();
    assert!(matches!(e, TpuError::BadArgs(_)), "{e}");
}
