//! The demo's transformer-block training step (2 x 256 tokens, width 512, bf16) gives the same
//! bits and the same simulated cycles as the emulator did before its interpreter was made fast,
//! in every execution mode and for any host thread count.
//!
//! The pinned checksums were computed with the interpreter as it was before the speed work
//! (commit e0d7468, the per-element interpreter): FNV-1a 64 of every output's bytes (loss and the
//! twelve gradients), and of every launch's statistics (start and end cycle, per core: end
//! cycle, instructions, busy cycles of every unit, matrix unit and DMA engine, FLOPs, HBM bytes,
//! first and last matrix-unit cycles) with the runtime's simulated host clock. A change to any
//! output bit or any cycle of any launch changes them. The defer and compile cycles (and defer's
//! launch count) were re-pinned when the `zero table` fusion rule and the one-hot row sums
//! changed their kernels; their output bits did not change.

use std::sync::Arc;

use tpuemu_backend::compile::compile;
use tpuemu_backend::{HostCosts, Mode, Runtime, Tensor};
use tpuemu_emulator::{Emulator, builtin};
use tpuemu_isa::LaunchId;
use tpuemu_workloads::{Transformer, TransformerConfig};

/// FNV-1a, 64 bits: a fixed, dependency-free hash.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, b: &[u8]) {
        for x in b {
            self.0 ^= *x as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// The step's checksums in one mode: (outputs, cycles, launches, loss).
fn step_checksums(mode: &str) -> (u64, u64, u64, f32) {
    let emu = Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap());
    let rt = Runtime::new(emu.clone()).unwrap();
    // The host costs the pins were computed with, spelt out (the defaults are measured on the
    // bridge and move when it gets faster): dispatch 6 µs, launch 3 µs, flush 10 µs, recording
    // a deferred operator 1.5 µs and a view what dispatching costs. The host clock is part of
    // the checksum.
    rt.set_costs(HostCosts {
        op_dispatch_ns: 6000.0,
        view_ns: 6000.0,
        launch_ns: 3000.0,
        record_ns: 1500.0,
        flush_ns: 10_000.0,
        flush_op_ns: 0.0,
        compile_ns: 200_000.0,
    });
    rt.set_mode(Mode::Strict).unwrap();
    let m = Arc::new(Transformer::new(&rt, TransformerConfig::demo()).unwrap());
    rt.sync().unwrap();
    let inputs = [m.tokens.clone(), m.targets.clone()];
    let outs: Vec<Tensor> = if mode == "compile" {
        let mm = m.clone();
        let mut g = compile(&rt, "step", move |xs: &[Tensor]| {
            let r = mm.step(&xs[0], &xs[1])?;
            Ok(std::iter::once(r.loss).chain(r.grads).collect())
        });
        g.call(&inputs).unwrap()
    } else {
        rt.set_mode(match mode {
            "strict" => Mode::Strict,
            "debug" => Mode::Debug,
            _ => Mode::DeferAndFuse,
        })
        .unwrap();
        let r = m.step(&inputs[0], &inputs[1]).unwrap();
        std::iter::once(r.loss).chain(r.grads).collect()
    };
    let mut out = Fnv::new();
    for t in &outs {
        out.bytes(&t.to_bytes().unwrap());
    }
    let loss = outs[0].to_vec::<f32>().unwrap()[0];
    rt.sync().unwrap();
    let mut cycles = Fnv::new();
    let mut launches = 0;
    while let Some(s) = emu.stats(LaunchId(launches)) {
        // `represented_by` (added after the pins, always null for one chip) is left out, so
        // the pins still cover exactly the statistics they were computed from.
        assert_eq!(s.represented_by, None);
        let json = serde_json::to_string(&s).unwrap();
        let json = json.replace(",\"represented_by\":null", "");
        cycles.bytes(json.as_bytes());
        launches += 1;
    }
    cycles.bytes(&rt.host_time_ns().to_bits().to_le_bytes());
    (out.0, cycles.0, launches, loss)
}

/// (mode, outputs checksum, cycles checksum, launches), computed before the speed work. The
/// defer cycles were re-pinned when fusion groups began reading an operand named twice by a
/// group's first node (`x * x`) once: fewer HBM bytes, same outputs. All four were re-pinned
/// when the block's attention became the flash-attention kernels (new outputs: the weights
/// reach the matrix unit unnormalised; still the same bits in every mode). The cycles were
/// re-pinned when the flash-attention kernels were software-pipelined (same outputs), and when
/// sums over leading dims (RMSNorm's weight gradients) moved to the matrix units: three more
/// launches (their rows of ones), same outputs; and when cross-entropy's forward and backward
/// became one pass over the logits (nll_loss sums its total weight from the targets in a kernel
/// of its own: one more launch in the eager modes) and row kernels unrolled by their real
/// register use, same outputs; and when row kernels moved per-row choices out of their
/// per-element selects, same outputs; and when matmul epilogues began writing saved products
/// beside their activations (SwiGLU forward and backward fused into their products), and the
/// block released its values after their last use, same outputs; and (Compile) when a per-row
/// map joined only a group whose results it reads, same outputs; and when row kernels freed the
/// per-row values' comparison masks for their chunk loops, and when comparisons read only by
/// selects stayed in masks, same outputs; and when the select rewrite dropped the nodes it
/// replaced, same outputs; and when row kernels freed per-row values after their last reader
/// and interleaved their unrolled copies, and tile programs merged repeated nodes and read an
/// operand named per row and broadcast once, same outputs; and when the flash-attention
/// kernels' row sweeps ran as wavefronts and their stores stayed in flight across heads, and
/// a head's loads were waited for together, same outputs; and when gathers kept a sliding
/// window of row copies in flight, and when a zero embedding-gradient table touched by few
/// indices was written back sparsely, and when row kernels scheduled each copy's
/// accumulations and stores with the other copies' work, tested their loops at the top and
/// shared their temporaries across copies, and when row kernels took at least four tiles, and
/// when their chunk loops that feed the transcendental unit were software-pipelined, same
/// outputs; and (defer) when view operators got a host cost of their own in every mode (no
/// longer the recording cost), same outputs; and (eager modes) when the embedding's indices and
/// the loss's class targets began to be checked on the device (one rows kernel each, fused
/// with others in DeferAndFuse; a graph captured for compilation was not checked then), same
/// outputs; and (compile) when compiled graphs began to run those checks too (their flags
/// outputs of the graph), same outputs; and when a tile kernel of a single tile became
/// straight-line code (no loop, cursors or pending-byte bookkeeping), same outputs.
const PINNED: [(&str, u64, u64, u64); 4] = [
    ("strict", 0x3c72_d720_d88a_2721, 0xa98b_ca67_b416_7312, 98),
    ("debug", 0x3c72_d720_d88a_2721, 0x5678_8b4d_7253_1122, 98),
    ("defer", 0x3c72_d720_d88a_2721, 0x7705_bd25_0f62_d772, 39),
    ("compile", 0x3c72_d720_d88a_2721, 0x0ee1_c827_5e5f_883b, 4),
];

fn check(mode: &str) {
    let (out, cycles, launches, loss) = step_checksums(mode);
    let want = PINNED.iter().find(|p| p.0 == mode).unwrap();
    assert!(
        loss.is_finite() && loss > 0.0,
        "{mode}: loss {loss} is not a cross-entropy"
    );
    assert_eq!(
        (out, cycles, launches),
        (want.1, want.2, want.3),
        "{mode}: outputs {out:#x}, cycles {cycles:#x}, {launches} launches differ from the pinned ones"
    );
}

#[test]
fn demo_step_bits_and_cycles_are_pinned_strict() {
    check("strict");
}

#[test]
fn demo_step_bits_and_cycles_are_pinned_debug() {
    check("debug");
}

#[test]
fn demo_step_bits_and_cycles_are_pinned_defer() {
    check("defer");
}

#[test]
fn demo_step_bits_and_cycles_are_pinned_compile() {
    check("compile");
}

/// The same bits and cycles on one host thread and on three (the matrix unit's tile products
/// split over threads, and any work run beside the interpreter).
#[test]
fn demo_step_is_the_same_on_one_and_three_host_threads() {
    let on = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| step_checksums("compile"))
    };
    let want = PINNED.iter().find(|p| p.0 == "compile").unwrap();
    for threads in [1, 3] {
        let (out, cycles, launches, _) = on(threads);
        assert_eq!(
            (out, cycles, launches),
            (want.1, want.2, want.3),
            "compile on {threads} host threads"
        );
    }
}
