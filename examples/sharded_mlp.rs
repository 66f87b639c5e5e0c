//! One MLP training step, sharded three ways over a v5e 2x4 slice (8 chips), checked against the
//! same step on one chip:
//!
//! - data parallel on mesh dimension `dp` (batch sharded, gradients all-reduced),
//! - Megatron tensor parallel on `tp` (first layer column-parallel, second row-parallel, one
//!   all-reduce of the logits),
//! - FSDP on `dp` (parameters all-gathered before use, gradients reduce-scattered),
//!
//! each in Strict, DeferAndFuse and compiled. Prints the largest difference from one chip, the
//! collectives each rank ran and the simulated step time (host dispatch included, as the
//! runtime's host model counts it) of a second step, once the first has generated the kernels.
//!
//! ```text
//! cargo run --release --example sharded_mlp
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use tpuemu::backend::{DType, Mode, Runtime};
use tpuemu::dtensor::{self, DTensor, DeviceMesh};
use tpuemu::emulator::{Emulator, builtin};
use tpuemu::workloads::MlpConfig;
use tpuemu::workloads::sharded_mlp::{self as mlp, MlpData, Parallel};

type Error = Box<dyn std::error::Error>;

fn v5e() -> Result<tpuemu::emulator::ChipPreset, Error> {
    Ok(builtin("v5e").ok_or("no v5e preset")?)
}

fn main() -> Result<(), Error> {
    let cfg = MlpConfig {
        batch: 64,
        d_in: 128,
        hidden: 512,
        classes: 64,
        dtype: DType::F32,
    };
    let data = MlpData::new(cfg, 1);
    let one = Runtime::new(Arc::new(Emulator::new(v5e()?)?))?;
    let inputs = data.tensors(&one)?;
    // A first step generates the kernels (a compile cost per new kernel); the second is timed.
    let first = mlp::reference_step(&inputs)?;
    one.sync()?;
    drop(first);
    let start = one.host_time_ns();
    let out = mlp::reference_step(&inputs)?;
    one.sync()?;
    let one_ns = one.host_time_ns() - start;
    let want: Vec<Vec<f64>> = out
        .iter()
        .map(|t| t.to_f64_vec())
        .collect::<Result<_, _>>()?;
    println!(
        "MLP step (batch {}, {} -> {} -> {}, f32) on one v5e chip: {:.1} us simulated\n",
        cfg.batch,
        cfg.d_in,
        cfg.hidden,
        cfg.classes,
        one_ns / 1e3
    );
    println!(
        "{:<5} {:<14} {:>10} {:>13}  collectives per rank",
        "form", "mode", "max |diff|", "simulated"
    );
    for (form, dim) in [
        (Parallel::Data, 0),
        (Parallel::Tensor, 1),
        (Parallel::FullyShard, 0),
    ] {
        for mode in ["strict", "defer-and-fuse", "compiled"] {
            let device = Arc::new(Emulator::slice(v5e()?, &[2, 4])?);
            let mesh = DeviceMesh::new(device, &[("dp", 2), ("tp", 4)])?;
            let xs = data.distribute(&mesh, form, dim)?;
            let mut compiled = dtensor::compile(&mesh, "mlp_step", move |xs: &[DTensor]| {
                mlp::parallel_step(form, dim, xs)
            });
            if mode == "defer-and-fuse" {
                mesh.set_mode(Mode::DeferAndFuse)?;
            }
            // A first step generates the kernels (compiled: traces and compiles the plan); the
            // second is timed.
            // (Its results stay alive until it has run, as a training loop's would.)
            let first = match mode {
                "compiled" => compiled.call(&xs)?,
                _ => mlp::parallel_step(form, dim, &xs)?,
            };
            mesh.sync()?;
            drop(first);
            mesh.reset_metrics();
            let start = mesh.host_time_ns();
            let got = match mode {
                "compiled" => compiled.call(&xs)?,
                _ => mlp::parallel_step(form, dim, &xs)?,
            };
            mesh.sync()?;
            let elapsed = mesh.host_time_ns() - start;
            let mut diff = 0f64;
            for (g, w) in got.iter().zip(&want) {
                for (a, b) in g.to_f64_vec()?.iter().zip(w) {
                    diff = diff.max((a - b).abs());
                }
            }
            let mut colls: BTreeMap<String, u64> = BTreeMap::new();
            for (k, v) in &mesh.metrics()[0].ops_by_name {
                if let Some(name) = k.strip_prefix("c10d::") {
                    *colls.entry(name.to_string()).or_default() += v;
                }
            }
            let colls: Vec<String> = colls.iter().map(|(k, v)| format!("{v} {k}")).collect();
            println!(
                "{:<5} {:<14} {:>10.2e} {:>10.1} us  {}",
                form.name(),
                mode,
                diff,
                elapsed / 1e3,
                colls.join(", ")
            );
        }
    }
    Ok(())
}
