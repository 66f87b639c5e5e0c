//! The step prediction's shortcuts against full simulation on small configurations, and its
//! figures against bounds derived by hand from the chip's published peak and bandwidth.

use std::sync::Arc;

use tpuemu_backend::runtime::Runtime;
use tpuemu_dtensor::DeviceMesh;
use tpuemu_emulator::{Emulator, builtin};
use tpuemu_isa::Device;
use tpuemu_workloads::llm::comm::{CommTimer, PeerComm};
use tpuemu_workloads::llm::ctx::{CollKind, Ctx, Event};
use tpuemu_workloads::llm::predict::{predict, schedule, simulate_chip, time_collectives};
use tpuemu_workloads::llm::{ModelConfig, Parallel, Remat, StepSpec, step};

fn small(layers: usize) -> ModelConfig {
    ModelConfig::from_toml(&format!(
        "name='small'\nlayers={layers}\nd_model=256\nheads=4\nkv_heads=2\nffn=512\nvocab=1024\n"
    ))
    .unwrap()
}

fn spec(model: ModelConfig, par: Parallel) -> StepSpec {
    StepSpec {
        model,
        seq: 128,
        batch_per_chip: 2,
        par,
        remat: Remat::Attention,
        loss_chunk: 128,
        kernel_operand_bytes: StepSpec::KERNEL_OPERAND_BYTES,
    }
}

fn slice(chip_gen: &str, dims: &[u32]) -> Arc<Emulator> {
    let e = Arc::new(Emulator::slice(builtin(chip_gen).unwrap(), dims).unwrap());
    e.set_timing_only(true);
    e
}

fn mesh(spec: &StepSpec, dev: Arc<Emulator>) -> DeviceMesh {
    DeviceMesh::new(dev, &spec.mesh_dims()).unwrap()
}

fn one_chip(chip_gen: &str) -> Runtime {
    Runtime::meta(
        Arc::new(Emulator::new(builtin(chip_gen).unwrap()).unwrap()),
        0,
    )
    .unwrap()
}

/// Full simulation: every chip of the slice runs the whole step (no repetition), collectives
/// between them for real; the step time is the last chip's.
fn full(spec: &StepSpec, dev: Arc<Emulator>) -> f64 {
    let mesh = mesh(spec, dev);
    let comms = PeerComm::for_mesh(&mesh);
    let start: f64 = mesh
        .runtimes()
        .iter()
        .map(|r| {
            r.sync().unwrap();
            r.host_time_ns()
        })
        .fold(0.0, f64::max);
    let ends: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                let rt = mesh.runtime(c.rank()).clone();
                s.spawn(move || {
                    let mut ctx = Ctx::new(rt.clone(), &mut c, false).unwrap();
                    step::run(&mut ctx, spec).unwrap();
                    rt.sync().unwrap();
                    rt.host_time_ns()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    ends.into_iter().fold(0.0, f64::max) - start
}

/// The shortcut, scheduled without overlap (as the full simulation runs): one chip's step with
/// identical work simulated once, collectives timed on the slice.
fn shortcut_no_overlap(spec: &StepSpec, chip_gen: &str, dev: Arc<Emulator>) -> f64 {
    let shape = spec.mesh_dims().iter().map(|(_, s)| *s).collect();
    let (events, _) = simulate_chip(spec, one_chip(chip_gen), shape, true).unwrap();
    let mut timer = CommTimer::new(mesh(spec, dev));
    let comm = time_collectives(&events, &mut timer).unwrap();
    schedule(&events, &comm, false).step_ns
}

/// One chip's step alone (no collectives), with or without the repetition shortcut, ns.
fn one_chip_step(spec: &StepSpec, chip_gen: &str, shortcut: bool) -> f64 {
    let (ev, _) = simulate_chip(spec, one_chip(chip_gen), vec![], shortcut).unwrap();
    schedule(&ev, &vec![0.0; ev.len()], false).step_ns
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    eprintln!(
        "{what}: shortcut {a:.0} ns, full {b:.0} ns, ratio {:.4}",
        a / b
    );
    assert!(
        (a / b - 1.0).abs() <= tol,
        "{what}: shortcut {a:.0} ns, full {b:.0} ns"
    );
}

#[test]
fn repeating_one_layer_matches_simulating_every_layer() {
    let s = spec(
        small(4),
        Parallel {
            dp: 1,
            ep: 1,
            fsdp: 1,
            tp: 1,
        },
    );
    let total = |shortcut: bool| one_chip_step(&s, "v5e", shortcut);
    close(total(true), total(false), 0.02, "4 layers on one chip");
}

#[test]
fn repeating_attention_chunk_pairs_on_a_two_core_chip_matches_simulating_every_one() {
    // v5p: attention in chunks of two key/value heads, one per TensorCore.
    let s = spec(
        small(2),
        Parallel {
            dp: 1,
            ep: 1,
            fsdp: 1,
            tp: 1,
        },
    );
    let total = |shortcut: bool| one_chip_step(&s, "v5p", shortcut);
    close(total(true), total(false), 0.02, "2 layers on one v5p chip");
}

#[test]
fn one_chip_standing_for_four_matches_the_full_simulation_fsdp() {
    let s = spec(
        small(2),
        Parallel {
            dp: 1,
            ep: 1,
            fsdp: 4,
            tp: 1,
        },
    );
    let a = shortcut_no_overlap(&s, "v5e", slice("v5e", &[2, 2]));
    let b = full(&s, slice("v5e", &[2, 2]));
    close(a, b, 0.05, "FSDP over v5e 2x2");
}

#[test]
fn one_chip_standing_for_four_matches_the_full_simulation_tp_and_dp() {
    let s = spec(
        small(2),
        Parallel {
            dp: 2,
            ep: 1,
            fsdp: 1,
            tp: 2,
        },
    );
    let a = shortcut_no_overlap(&s, "v5e", slice("v5e", &[2, 2]));
    let b = full(&s, slice("v5e", &[2, 2]));
    close(a, b, 0.05, "dp=2 x tp=2 over v5e 2x2");
}

#[test]
fn the_prediction_respects_the_flop_and_hbm_bounds() {
    let model = small(4);
    let s = spec(
        model.clone(),
        Parallel {
            dp: 1,
            ep: 1,
            fsdp: 4,
            tp: 1,
        },
    );
    let dev = slice("v6e", &[4]);
    let chip = dev.topology().chips[0].clone();
    let mut timer = CommTimer::new(mesh(&s, dev));
    for overlap in [false, true] {
        let p = predict(&s, one_chip("v6e"), &mut timer, &chip, "v6e", overlap, true).unwrap();
        assert!(p.mfu > 0.0 && p.mfu <= 1.0, "{}", p.mfu);
        // FLOP bound: the model FLOPs of a chip at the published peak (918 TFLOP/s).
        let flop_bound = model.model_flops(s.global_tokens(), 128) / 4.0 / 918e12;
        assert!(p.step_s >= flop_bound, "{} < {flop_bound}", p.step_s);
        // HBM bound: each chip reads every weight (bf16) at least twice (forward, backward)
        // at the published 1.64 TB/s.
        let hbm_bound = 2.0 * 2.0 * model.params() as f64 / 1.64e12;
        assert!(p.step_s >= hbm_bound, "{} < {hbm_bound}", p.step_s);
        let parts = p.mxu_busy_s + p.hbm_vector_s + p.exposed_comm_s + p.idle_s;
        assert!(
            (parts / p.step_s - 1.0).abs() < 1e-6,
            "{parts} vs {}",
            p.step_s
        );
    }
}

#[test]
fn overlap_hides_communication_but_not_more_than_there_is() {
    let s = spec(
        small(4),
        Parallel {
            dp: 1,
            ep: 1,
            fsdp: 4,
            tp: 1,
        },
    );
    let shape = s.mesh_dims().iter().map(|(_, s)| *s).collect();
    let (events, _) = simulate_chip(&s, one_chip("v5e"), shape, true).unwrap();
    let mut timer = CommTimer::new(mesh(&s, slice("v5e", &[4])));
    let comm = time_collectives(&events, &mut timer).unwrap();
    let seq = schedule(&events, &comm, false);
    let ovl = schedule(&events, &comm, true);
    let compute: f64 = events
        .iter()
        .map(|e| match &e.event {
            Event::Compute { ns, .. } => ns * e.times as f64,
            _ => 0.0,
        })
        .sum();
    assert!((seq.step_ns - (compute + seq.comm_ns)).abs() < 1.0);
    assert!(ovl.step_ns <= seq.step_ns);
    assert!(ovl.step_ns >= compute.max(ovl.comm_ns));
}

#[test]
fn flat_buffers_split_into_buckets_that_cover_them_and_divide_over_the_group() {
    use tpuemu_workloads::llm::step::{BUCKET_BYTES, buckets};
    // Llama 3.1 70B's layer (855,654,400 parameters) over 256 chips, padded as FSDP pads it.
    for (flat, k) in [
        (855_654_400usize.next_multiple_of(256 * 128), 256),
        (4096 * 128, 4),
        (1, 1),
    ] {
        let b = buckets(flat, k);
        assert_eq!(b.iter().sum::<usize>(), flat, "{flat} over {k}");
        assert!(b.iter().all(|x| 2 * x <= BUCKET_BYTES && *x > 0), "{b:?}");
        assert!(b[..b.len() - 1].iter().all(|x| x % (k * 128) == 0), "{b:?}");
        // No more buckets than the size limit needs.
        assert_eq!(b.len(), (2 * flat).div_ceil(BUCKET_BYTES).max(1), "{b:?}");
    }
}

#[test]
fn a_mixture_of_experts_runs_and_repeating_one_expert_matches_simulating_each() {
    let moe = ModelConfig::from_toml(
        "name='moe'\nlayers=2\nd_model=256\nheads=4\nkv_heads=2\nffn=256\nvocab=1024\nexperts=4\ntop_k=2\n",
    )
    .unwrap();
    let s = spec(
        moe,
        Parallel {
            dp: 1,
            ep: 1,
            fsdp: 1,
            tp: 1,
        },
    );
    let total = |shortcut: bool| one_chip_step(&s, "v5e", shortcut);
    close(
        total(true),
        total(false),
        0.02,
        "4 experts, top 2, on one chip",
    );
}

fn moe(layers: usize) -> ModelConfig {
    ModelConfig::from_toml(&format!(
        "name='moe'\nlayers={layers}\nd_model=256\nheads=4\nkv_heads=2\nffn=256\nvocab=1024\nexperts=4\ntop_k=2\n"
    ))
    .unwrap()
}

#[test]
fn one_chip_standing_for_four_matches_the_full_simulation_expert_parallel() {
    let s = spec(
        moe(2),
        Parallel {
            dp: 1,
            ep: 2,
            fsdp: 2,
            tp: 1,
        },
    );
    let a = shortcut_no_overlap(&s, "v5e", slice("v5e", &[2, 2]));
    let b = full(&s, slice("v5e", &[2, 2]));
    close(a, b, 0.05, "ep=2 x fsdp=2 over v5e 2x2");
}

/// The collectives of one chip's step: `(kind, label, bytes)` of every occurrence.
fn collectives(s: &StepSpec) -> (Vec<(CollKind, String, u64)>, u64) {
    let shape = s.mesh_dims().iter().map(|(_, s)| *s).collect();
    let (events, _) = simulate_chip(s, one_chip("v5e"), shape, false).unwrap();
    let mut flops = 0;
    let mut out = Vec::new();
    for e in &events {
        match &e.event {
            Event::Comm { coll, bytes, .. } => out.push((coll.kind, coll.label.clone(), *bytes)),
            Event::Compute { mxu_flops, .. } => flops += mxu_flops * e.times,
            Event::WaitAll => {}
        }
    }
    (out, flops)
}

#[test]
fn expert_parallelism_exchanges_every_routed_row_and_gathers_only_its_experts() {
    let par = |ep: usize, fsdp: usize| Parallel {
        dp: 1,
        ep,
        fsdp,
        tp: 1,
    };
    let ep = spec(moe(2), par(2, 2));
    let (colls, ep_flops) = collectives(&ep);
    // By hand: a chip has 2 sequences of 128 tokens, each routed to 2 experts: 512 rows of
    // 256 bf16 values, 262,144 bytes, sent by every all-to-all; two forward (tokens out,
    // outputs back) and two backward per layer, 2 layers.
    let a2a: Vec<_> = colls.iter().filter(|c| c.0 == CollKind::AllToAll).collect();
    assert_eq!(a2a.len(), 8, "{a2a:?}");
    assert!(a2a.iter().all(|c| c.2 == 512 * 256 * 2), "{a2a:?}");
    // Experts: 2 of the 4 on a chip, 3 x 256 x 256 parameters each, sharded over fsdp=2:
    // 196,608 bf16 values (393,216 bytes) of each gather's input.
    let experts: Vec<_> = colls
        .iter()
        .filter(|c| c.0 == CollKind::AllGather && c.1.starts_with("expert"))
        .collect();
    assert_eq!(experts.len(), 4, "{experts:?}");
    assert!(experts.iter().all(|c| c.2 == 393_216), "{experts:?}");
    // The rest of a layer: q, o (256 x 256 each), k, v (256 x 128 each), the router (4 x
    // 256) and two norms (256 each): 198,144 values over ep x fsdp = 4 chips.
    let layer: Vec<_> = colls
        .iter()
        .filter(|c| c.0 == CollKind::AllGather && c.1.starts_with("layer"))
        .collect();
    assert_eq!(layer.len(), 4, "{layer:?}");
    assert!(layer.iter().all(|c| c.2 == 198_144 / 4 * 2), "{layer:?}");
    // Without expert parallelism: no all-to-all, and (routing balanced) the chip's matrix
    // units do the same work: 4 experts of 128 rows instead of 2 of 256.
    let (colls, flops) = collectives(&spec(moe(2), par(1, 4)));
    assert!(colls.iter().all(|c| c.0 != CollKind::AllToAll));
    assert_eq!(flops, ep_flops);
}

#[test]
fn expert_parallelism_needs_experts_it_divides() {
    let par = Parallel {
        dp: 1,
        ep: 2,
        fsdp: 2,
        tp: 1,
    };
    let e = spec(small(2), par).check().unwrap_err().to_string();
    assert!(e.contains("needs a mixture-of-experts model"), "{e}");
    let e = spec(moe(2), Parallel { ep: 8, ..par })
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not divide the model's 4 experts"), "{e}");
}

#[test]
fn a_collective_matmul_starts_after_the_first_chunk_of_its_product() {
    use tpuemu_workloads::llm::ctx::{Coll, Counted, When};
    let compute = |ns: f64| Counted {
        event: Event::Compute {
            label: "c".into(),
            ns,
            busy_ns: ns,
            mxu_flops: 0,
            hbm_bytes: 0,
            kernels: 1,
        },
        times: 1,
    };
    let comm = |when: When| Counted {
        event: Event::Comm {
            coll: Coll {
                kind: CollKind::AllReduce,
                dims: vec![0],
                when,
                label: "tp".into(),
            },
            bytes: 1,
            ns: None,
        },
        times: 1,
    };
    // By hand: a 100 ns product in 4 chunks, a 60 ns reduction, 50 ns of compute after it.
    // As a collective matmul the reduction starts at 25 ns (the first chunk done) and ends
    // when the last chunk's share (15 ns) has followed the product: 115 ns, then 50 ns: 165
    // ns. In place (or without overlap): 100 + 60 + 50 = 210 ns.
    let overlapped = [
        compute(100.0),
        comm(When::Overlapped { chunks: 4 }),
        compute(50.0),
    ];
    let times = [0.0, 60.0, 0.0];
    assert_eq!(schedule(&overlapped, &times, true).step_ns, 165.0);
    assert_eq!(schedule(&overlapped, &times, false).step_ns, 210.0);
    // A reduction longer than the product's last three chunks is exposed by the difference:
    // 25 + 120 = 145, then 50 ns: 195 ns.
    let times = [0.0, 120.0, 0.0];
    let t = schedule(&overlapped, &times, true);
    assert_eq!(t.step_ns, 195.0);
    assert_eq!(t.exposed_comm_ns, 45.0);
    let in_place = [compute(100.0), comm(When::Now), compute(50.0)];
    assert_eq!(schedule(&in_place, &times, true).step_ns, 270.0);
}

#[test]
fn an_output_head_above_two_gib_is_split_into_vocabulary_slices_below_it() {
    use tpuemu_workloads::llm::step::{HEAD_SLICE_BYTES, head_slices};
    // Llama 3.1 405B's untied head: 128,256 x 16,384 bf16 = 4.2 GB: two slices of 2.1 GB
    // (1.96 GiB). 70B's (x 8,192: 2.1 GB) and Qwen3 8B's (151,936 x 4,096) fit one kernel.
    assert_eq!(head_slices(128_256, 16_384), 2);
    assert_eq!(head_slices(128_256, 8_192), 1);
    assert_eq!(head_slices(151_936, 4_096), 1);
    for (v, d) in [(128_256usize, 16_384usize), (100_003, 16_384)] {
        let k = head_slices(v, d);
        assert!(v.is_multiple_of(k));
        // A prime vocabulary has no slicing: one slice, as large as it is.
        assert!(
            v / k * d * 2 <= HEAD_SLICE_BYTES || k == 1,
            "{v} x {d}: {k}"
        );
    }
}

#[test]
fn remat_mlp_recomputes_the_gate_and_up_products_and_keeps_the_rest() {
    // FSDP over two chips, the small model: 2 layers, d 256, ffn 512, 256 tokens a chip.
    let par = Parallel {
        dp: 1,
        ep: 1,
        fsdp: 2,
        tp: 1,
    };
    let run = |remat: Remat| {
        let s = StepSpec {
            remat,
            ..spec(small(2), par)
        };
        let dev = slice("v5e", &[2]);
        let chip = dev.topology().chips[0].clone();
        let mut timer = CommTimer::new(mesh(&s, dev));
        predict(&s, one_chip("v5e"), &mut timer, &chip, "v5e", true, true).unwrap()
    };
    let (none, mlp, full) = (run(Remat::None), run(Remat::Mlp), run(Remat::Full));
    // By hand: per layer two products of [256 tokens, 256] x [256, 512], 2 x 256 x 256 x 512
    // FLOPs each, run again: 2 layers x 2 x 67,108,864 = 268,435,456 more than keeping all.
    assert_eq!(
        mlp.mxu_flops_per_chip - none.mxu_flops_per_chip,
        2.0 * 2.0 * (2 * 256 * 256 * 512) as f64
    );
    assert!(full.mxu_flops_per_chip > mlp.mxu_flops_per_chip);
    // Memory: the kept activations lose gate, up and their product (3 x [256, 512] bf16 =
    // 786,432 bytes) in each of the 2 layers, and the backward holds one layer's again: one
    // layer's worth fewer.
    assert_eq!(
        none.hbm.activations - mlp.hbm.activations,
        3 * 256 * 512 * 2
    );
    assert!(full.hbm.activations < mlp.hbm.activations);
}

#[test]
fn a_symmetric_collective_on_one_chip_takes_what_it_takes_on_every_chip() {
    use tpuemu_backend::DType;
    use tpuemu_backend::kernels::collective::{CollectiveOp, CollectiveSpec};
    // FSDP over a 16-chip ring that wraps (a whole v5e axis), and over 2 chips. Every gather,
    // scatter and reduction the timer times on one chip standing for all must take exactly
    // what the same collective takes with every chip simulated (`tpuemu bench collective
    // --full`), and stay within 5% of the DTensor redistribution on every chip that the timer
    // ran before (which also charges the runtime's side of the call: 0 ns at 64 KiB, 15 us
    // of 550 at a 48 MiB gather, measured).
    for (chip, dims) in [
        ("v5e", vec![16u32]),
        ("v6e", vec![2]),
        ("v5e", vec![16, 16]),
    ] {
        let chips = dims.iter().product::<u32>() as usize;
        let s = spec(
            small(2),
            Parallel {
                dp: 1,
                ep: 1,
                fsdp: chips,
                tp: 1,
            },
        );
        // Each timer on a slice of its own (a launch on a slice moves its clock).
        let mut every = CommTimer::new(mesh(&s, slice(chip, &dims)));
        let dev = slice(chip, &dims);
        let mut one = CommTimer::new(mesh(&s, dev.clone())).with_emulator(dev.clone());
        for (kind, op) in [
            (CollKind::AllGather, CollectiveOp::AllGather),
            (CollKind::ReduceScatter, CollectiveOp::ReduceScatter),
            (CollKind::AllReduce, CollectiveOp::AllReduce),
        ] {
            // One gather of one size on the 256 chips of a 16x16 slice: its group spans both
            // axes (the order the DTensor collective lists them in is what this checks there).
            if chips > 16 && kind != CollKind::AllGather {
                continue;
            }
            let sizes: &[u64] = if chips > 16 {
                &[64 * 1024]
            } else {
                &[64 * 1024, 3 * 1024 * 1024]
            };
            for &bytes in sizes {
                let n = bytes / 2;
                let elements = if kind == CollKind::AllGather {
                    n * chips as u64
                } else {
                    n
                };
                // The group's topology axes in the DTensor collective's order (last first);
                // the comparison with the DTensor redistribution below checks the order.
                let axes: Vec<usize> = if dims.len() == 2 { vec![1, 0] } else { vec![0] };
                let spec = CollectiveSpec::new(op, DType::BF16, elements, &axes);
                let full = tpuemu_workloads::collective::simulate(&dev, &spec, None, true).unwrap();
                assert_eq!(full.stats.represented_by, None, "every chip simulated");
                let want = full.seconds(dev.topology().chips[0].core.clock_hz) * 1e9;
                let got = one.time(kind, &[0], bytes, DType::BF16).unwrap();
                assert_eq!(got, want, "{chip} {dims:?} {kind:?} {bytes} bytes");
                let before = every.time(kind, &[0], bytes, DType::BF16).unwrap();
                assert!(
                    (before - got).abs() / before < 0.05,
                    "{chip} {dims:?} {kind:?} {bytes} bytes: {before} ns by DTensor, {got} by one chip"
                );
            }
        }
        assert_eq!(one.runs_on_one_chip(), one.runs(), "{chip} {dims:?}");
    }
}

#[test]
fn a_layer_in_micro_batches_does_the_same_matrix_work() {
    // The small model's MLP products are [256 tokens, 512] bf16 = 262,144 bytes: with kernels
    // that address 200,000 bytes a layer runs in 2 passes of 128 tokens. Same FLOPs (the
    // products split by rows), every kept layer found again in the backward, with the
    // repetition shortcut and without, for each remat policy.
    let par = Parallel {
        dp: 1,
        ep: 1,
        fsdp: 2,
        tp: 1,
    };
    for remat in [Remat::Full, Remat::Mlp, Remat::None] {
        let run = |limit: usize, shortcut: bool| {
            let s = StepSpec {
                remat,
                kernel_operand_bytes: limit,
                ..spec(small(2), par)
            };
            let dev = slice("v5e", &[2]);
            let chip = dev.topology().chips[0].clone();
            let mut timer = CommTimer::new(mesh(&s, dev));
            let p = predict(
                &s,
                one_chip("v5e"),
                &mut timer,
                &chip,
                "v5e",
                true,
                shortcut,
            );
            (s.micro_batches(), p.unwrap())
        };
        let (one, whole) = run(StepSpec::KERNEL_OPERAND_BYTES, true);
        assert_eq!(one, 1);
        for shortcut in [true, false] {
            let (passes, split) = run(200_000, shortcut);
            assert_eq!(passes, 2);
            assert_eq!(
                split.mxu_flops_per_chip, whole.mxu_flops_per_chip,
                "{remat:?}, shortcut {shortcut}"
            );
            // The kept activations are the same bytes; the backward's working set is a pass's.
            assert!(split.hbm.activations <= whole.hbm.activations, "{remat:?}");
        }
    }
}
