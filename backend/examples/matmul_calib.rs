//! Compares the matmul planner's time estimate with the emulator for every candidate tiling of
//! a few shapes (calibration of `kernels::matmul::plan`). `cargo run --release -p
//! tpuemu-backend --example matmul_calib -- M N K`.

use tpuemu_backend::DType;
use tpuemu_backend::ir::ProgBuilder;
use tpuemu_backend::kernels::matmul::{self, MatOperand, MatPlan, MatSpec};
use tpuemu_emulator::{ArgInit, Emulator, builtin};
use tpuemu_isa::Device;
use tpuemu_isa::ops::{MxuFmt, Precision};

fn main() {
    let a: Vec<u32> = std::env::args()
        .skip(1)
        .map(|x| x.parse().expect("M N K"))
        .collect();
    let (m, n, k) = (a[0], a[1], a[2]);
    let chip = std::env::var("CALIB_CHIP").unwrap_or_else(|_| "v5e".into());
    let emu = Emulator::new(builtin(&chip).expect("chip")).expect("emulator");
    emu.set_timing_only(true);
    let info = emu.topology().chips[0].clone();
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let y = b.cast(x, DType::BF16);
    b.output(y);
    let spec = MatSpec {
        batch: 1,
        m,
        n,
        k,
        fmt: MxuFmt::Bf16,
        prec: Precision::P1,
        a: MatOperand::contiguous(DType::BF16, m, k),
        w: MatOperand::contiguous(DType::BF16, k, n),
        extras: vec![],
        out: MatOperand::contiguous(DType::BF16, m, n),
        extra_outs: Vec::new(),
        epilogue: Some(b.finish()),
        twin: None,
        rows: None,
    };
    let f32_out = std::env::var("CALIB_F32").is_ok();
    let spec = if f32_out {
        MatSpec {
            out: MatOperand::contiguous(DType::F32, m, n),
            extra_outs: Vec::new(),
            epilogue: None,
            ..spec
        }
    } else {
        spec
    };
    let chosen = matmul::plan(&spec, &info, false).expect("plan");
    let mut rows = Vec::new();
    for tm in [128u32, 256, 512, 1024, 2048, 4096] {
        for tn in [128u32, 256, 512, 1024, 2048, 4096] {
            for tk in [128u32, 256, 512, 1024, 2048] {
                if tm > m.next_power_of_two()
                    || tn > n.next_power_of_two()
                    || tk > k.next_power_of_two()
                {
                    continue;
                }
                let p = MatPlan {
                    tm: tm.min(m),
                    tn: tn.min(n),
                    tk: tk.min(k),
                    resident: false,
                };
                if p.vmem_bytes(&spec) > info.core.vmem_bytes * 3 / 4 {
                    continue;
                }
                let est = matmul::estimate_seconds(&spec, &p, &info);
                let prog = matmul::build(&spec, &p, &info, "calib").expect("build");
                let args = vec![
                    ArgInit::Zeroed((m * k * 2) as u64),
                    ArgInit::Zeroed((k * n * 2) as u64),
                    ArgInit::Zeroed((m * n * if f32_out { 4 } else { 2 }) as u64),
                    ArgInit::Scalar(0),
                    ArgInit::Scalar(0),
                    ArgInit::Scalar(0),
                ];
                let tracing = p == chosen && std::env::var("CALIB_TRACE").is_ok();
                emu.set_profiling(tracing);
                let r = emu.run_program(&prog, &args, &[0], false).expect("run");
                if tracing {
                    let events = emu.drain_events();
                    let tr = tpuemu_isa::trace::Trace {
                        meta: Default::default(),
                        events,
                    };
                    std::fs::write(
                        "/tmp/calib.json",
                        tpuemu_isa::trace::chrome::to_chrome_json(&tr),
                    )
                    .expect("write");
                }
                if p == chosen || std::env::var("CALIB_ALL").is_ok() {
                    let c = &r.stats.cores[0];
                    println!(
                        "{p:?}: cycles {} instrs {} units {:?} mxu {:?} dma {:?}",
                        r.stats.cycles(),
                        c.instructions,
                        c.unit_busy,
                        c.mxu_busy,
                        c.dma_busy
                    );
                }
                rows.push((r.seconds, est, p));
            }
        }
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (t, e, p) in rows.iter().take(12) {
        println!(
            "{:>4} {:>4} {:>4}  real {:8.2} us  est {:8.2} us {}",
            p.tm,
            p.tn,
            p.tk,
            t * 1e6,
            e * 1e6,
            if *p == chosen { "<- chosen" } else { "" }
        );
    }
    if let Some((t, e, _)) = rows.iter().find(|r| r.2 == chosen) {
        println!(
            "chosen {:?}: real {:.2} us est {:.2} us",
            chosen,
            t * 1e6,
            e * 1e6
        );
    } else {
        println!("chosen {chosen:?} not in grid");
    }
}
