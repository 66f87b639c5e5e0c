//! Host time of one small launch on an emulated v5e chip, the emulator's share of an eager
//! operator: `add`, a one-tile `[8, 128]` float32 add laid out as the backend's one-tile
//! kernels are (two DMAs in on one semaphore, one wait, load, load, add, store, one DMA out,
//! one wait); and `halt`, a program of one instruction (the fixed cost of a launch).
//!
//!     cargo bench -p tpuemu-emulator --bench launch

use criterion::{Criterion, criterion_group, criterion_main};
use tpuemu_emulator::{Emulator, builtin};
use tpuemu_isa::assemble;
use tpuemu_isa::device::{CoreRef, Device, KernelArg, Launch, LaunchTarget};

/// The allocator the CLI and the Python extension use.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ADD: &str = "
.program add
.arg x buffer
.arg y buffer
.arg z buffer
    smov s1, 4096
    smov s2, 0
    smov s3, 4096
    smov s4, 8192
    dma vmem[s2], hbm.x[s2], len=s1, sem=sem0
    dma vmem[s3], hbm.y[s2], len=s1, sem=sem0
    smov s5, 8192
    sem.wait sem0, s5
    vld.w32 v1, [s2]
    vld.w32 v2, [s3]
    vadd.f32 v3, v1, v2
    vst.w32 v3, [s4]
    dma hbm.z[s2], vmem[s4], len=s1, sem=sem1
    sem.wait sem1, s1
    halt
";

const HALT: &str = "
.program halt
    halt
";

fn bench(c: &mut Criterion) {
    let emu = Emulator::new(builtin("v5e").expect("preset")).expect("emulator");
    let chip = 0;
    let bufs: Vec<_> = (0..3)
        .map(|_| emu.alloc(chip, 4096).expect("alloc"))
        .collect();
    let x: Vec<u8> = (0..1024u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    emu.write(bufs[0], 0, &x, 0.0).expect("write");
    emu.write(bufs[1], 0, &x, 0.0).expect("write");
    for (name, src, args) in [
        (
            "add",
            ADD,
            bufs.iter().map(|b| KernelArg::Buffer(*b)).collect(),
        ),
        ("halt", HALT, Vec::new()),
    ] {
        let program = assemble(src).expect("assembles");
        let id = emu.load(&program).expect("load");
        let launch = Launch {
            program: id,
            targets: vec![LaunchTarget {
                core: CoreRef { chip, core: 0 },
                args,
            }],
            submit_ns: 0.0,
            op_id: None,
            group_id: None,
        };
        c.bench_function(&format!("launch {name}"), |b| {
            b.iter(|| {
                let l = emu.launch(&launch).expect("launch");
                emu.wait(l).expect("runs")
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
