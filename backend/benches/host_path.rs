//! Host time of one eager operator through the backend's boxed entry (`ops::call`, what the
//! Python bridge calls): a chain of `y = y + x` on a [8, 128] float32 tensor, on an emulated
//! v5e, in Strict and DeferAndFuse. Each iteration is one chain of [`CHAIN`] operators and a
//! sync, so the time per operator is the reported time / `CHAIN` and includes the emulation
//! of the kernels (Strict: one 1,024-element add each; DeferAndFuse: one fused kernel per
//! flush).
//!
//!     cargo bench -p tpuemu-backend --bench host_path

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{Mode, Runtime, Tensor};
use tpuemu_emulator::{Emulator, builtin};

/// The allocator the CLI and the Python extension use.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Operators per measured chain.
const CHAIN: usize = 50;

fn chain(rt: &Runtime, x: &Tensor, y: &Tensor) {
    let mut y = y.clone();
    for _ in 0..CHAIN {
        let out = ops::call(
            rt,
            "aten::add.Tensor",
            vec![Value::Tensor(y.clone()), Value::Tensor(x.clone())],
        )
        .expect("add");
        let Some(Value::Tensor(t)) = out.into_iter().next() else {
            panic!("add returned no tensor")
        };
        y = t;
    }
    rt.sync().expect("sync");
}

fn bench(c: &mut Criterion) {
    for (name, mode) in [("strict", Mode::Strict), ("defer", Mode::DeferAndFuse)] {
        let emu = Emulator::new(builtin("v5e").expect("preset")).expect("emulator");
        let rt = Runtime::new(Arc::new(emu)).expect("runtime");
        rt.set_mode(mode).expect("mode");
        let xs: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5).collect();
        let x = Tensor::from_slice(&rt, &xs, &[8, 128]).expect("x");
        let y = Tensor::from_slice(&rt, &xs, &[8, 128]).expect("y");
        chain(&rt, &x, &y);
        c.bench_function(&format!("chain of {CHAIN} adds [8,128] f32, {name}"), |b| {
            b.iter(|| chain(&rt, &x, &y))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
