//! Runs the flash-attention kernels (forward and backward) of one shape in timing-only mode
//! and prints their cycles, the busy cycles of each unit and the matrix units' utilisation, to
//! see what bounds them. `cargo run --release -p tpuemu-backend --example attention_calib --
//! B H HKV L E [causal]` (`CALIB_CHIP=v6e` picks the chip; default v5e; bf16 operands).

use tpuemu_backend::DType;
use tpuemu_backend::MatmulPrecision;
use tpuemu_backend::ir::AttentionNode;
use tpuemu_backend::kernels::attention::{AttnSpec, build_backward, build_forward};
use tpuemu_emulator::{ArgInit, Emulator, builtin};
use tpuemu_isa::Device;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 5 {
        eprintln!("usage: attention_calib B H HKV L E [causal]");
        std::process::exit(2);
    }
    let num = |i: usize| -> usize { a[i].parse().expect("a number") };
    let (b, h, hk, l, e) = (num(0), num(1), num(2), num(3), num(4));
    let causal = a.get(5).is_some_and(|s| s == "causal");
    let chip = std::env::var("CALIB_CHIP").unwrap_or_else(|_| "v5e".into());
    let emu = Emulator::new(builtin(&chip).expect("chip")).expect("emulator");
    emu.set_timing_only(true);
    let info = emu.topology().chips[0].clone();
    let clock = info.core.clock_hz;
    let row = |rows: usize, heads: usize| [(heads * rows * e) as i64, (rows * e) as i64, e as i64];
    let lse = [(h * l) as i64, l as i64, 1];
    let (qs, ks) = (row(l, h), row(l, hk));
    // Model FLOPs: 2 products forward, 5 backward, each 2 L S E per head (half when causal).
    let per = 2.0 * (b * h) as f64 * (l * l * e) as f64 * if causal { 0.5 } else { 1.0 };
    for backward in [false, true] {
        let node = AttentionNode {
            batch: b,
            heads: h,
            kv_heads: hk,
            l,
            s: l,
            e,
            ev: e,
            causal,
            scale: 1.0 / (e as f64).sqrt(),
            precision: MatmulPrecision::Default,
            backward,
        };
        let strides = if backward {
            vec![qs, ks, ks, qs, qs, lse, qs, ks, ks]
        } else {
            vec![qs, ks, ks, qs, lse]
        };
        let spec = AttnSpec {
            node,
            dtype: DType::BF16,
            strides,
        };
        let prog = if backward {
            build_backward(&spec, &info, "calib", 1)
        } else {
            build_forward(&spec, &info, "calib", 1)
        }
        .expect("build");
        let (qb, kb, lb) = (
            (b * h * l * e * 2) as u64,
            (b * hk * l * e * 2) as u64,
            (b * h * l * 4) as u64,
        );
        let bufs: Vec<u64> = if backward {
            vec![qb, kb, kb, qb, qb, lb, qb, kb, kb]
        } else {
            vec![qb, kb, kb, qb, lb]
        };
        let mut args: Vec<ArgInit> = bufs.iter().map(|n| ArgInit::Zeroed(*n)).collect();
        args.extend(bufs.iter().map(|_| ArgInit::Scalar(0)));
        let r = emu.run_program(&prog, &args, &[0], false).expect("run");
        let c = &r.stats.cores[0];
        let flops = per * if backward { 5.0 } else { 2.0 };
        let peak = info.peak_bf16_flops / info.cores as f64;
        println!(
            "{}: {:.1} us, {} cycles ({} instructions); MXU utilisation {:.1}%",
            if backward { "backward" } else { "forward" },
            r.seconds * 1e6,
            r.stats.cycles(),
            c.instructions,
            100.0 * flops / r.seconds / peak,
        );
        println!(
            "  unit busy (scalar, valu, vld, vst, xlu, eup): {:?}; mxu {:?}; dma {:?}; clock {clock}",
            c.unit_busy, c.mxu_busy, c.dma_busy
        );
    }
}
