//! Hostile programs and chip figures (issue 19): runaway loops stop at the run limit with a
//! fault naming the pc and the instruction, in functional and in timing-only mode; sizes a
//! program computes in its registers are checked before anything is copied or queued; chip
//! figures outside their documented ranges are refused by name; and a property: any valid
//! program halts, faults at a located instruction, or hits the limit.

use proptest::prelude::*;
use tpuemu_emulator::{ArgInit, ChipPreset, Emulator, RunLimits, builtin};
use tpuemu_isa::trace::TraceEvent;
use tpuemu_isa::{ArgKind, Device, DeviceError, Fault, Program, assemble};

#[path = "../../../isa/tests/isa/strategies.rs"]
#[allow(dead_code)]
mod strategies;

fn emu(limits: RunLimits, timing_only: bool) -> Emulator {
    let e = Emulator::new(builtin("v5e").unwrap()).unwrap();
    e.set_run_limits(limits);
    e.set_timing_only(timing_only);
    e
}

fn fault_of(e: DeviceError) -> Fault {
    match e {
        DeviceError::Fault(f) => *f,
        other => panic!("expected a fault, got {other}"),
    }
}

fn run_src(src: &str, limits: RunLimits, timing_only: bool) -> Result<(), DeviceError> {
    let p = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    emu(limits, timing_only)
        .run_program(&p, &[], &[0], !timing_only)
        .map(|_| ())
}

const SPIN: &str = ".program spin\n smov s1, 0\ntop:\n sadd s1, s1, 1\n br top\n";

#[test]
fn a_loop_that_never_halts_stops_at_the_instruction_limit() {
    for timing_only in [false, true] {
        let limits = RunLimits::new(10_000, 1 << 40).unwrap();
        let f = fault_of(run_src(SPIN, limits, timing_only).unwrap_err());
        // `smov` is the 1st instruction, then `sadd` the 2nd, 4th, ... and `br` the 3rd, 5th,
        // ...: the 10_001st, the first over the limit, is a `br` at pc 2.
        assert_eq!((f.pc, f.instr.as_str()), (2, "br @1"), "{f}");
        assert!(f.reason.contains("more than 10000 units of work"), "{f}");
        assert!(f.reason.contains("--max-instructions"), "{f}");
    }
}

#[test]
fn the_bytes_a_dma_copies_count_toward_the_limit_in_a_functional_run() {
    // Ten 4 KiB DMAs from HBM and their waits: 2 + 20 instructions, and 10 * 4096 / 256 = 160
    // more units for the bytes copied, 182 in all. A limit of 100 stops the functional run
    // (below); the timing-only run copies nothing and does 22 units.
    let mut src = String::from(".program dmas\n.arg buf buffer\n smov s1, 0\n smov s3, 4096\n");
    for _ in 0..10 {
        src += " dma vmem[s1], hbm.buf[s1], len=s3, sem=sem0\n sem.wait sem0, s3\n";
    }
    let p = assemble(&src).unwrap_or_else(|e| panic!("{e}"));
    let run = |limit: u64, timing_only: bool| {
        emu(RunLimits::new(limit, 1 << 40).unwrap(), timing_only).run_program(
            &p,
            &[ArgInit::Zeroed(4096)],
            &[0],
            false,
        )
    };
    let f = fault_of(run(100, false).unwrap_err());
    assert!(f.reason.contains("more than 100 units of work"), "{f}");
    // 2 + 5 * (1 + 16 + 1) = 92 units before the 6th DMA (pc 12), 109 after it: the wait
    // after it (pc 13) is the first instruction over the limit.
    assert_eq!(f.pc, 13, "{f}");
    run(100, true).unwrap();
    run(182, false).unwrap();
    assert!(run(181, false).is_err());
}

#[test]
fn a_loop_that_never_halts_stops_at_the_cycle_limit() {
    for timing_only in [false, true] {
        let limits = RunLimits::new(1 << 40, 5_000).unwrap();
        let f = fault_of(run_src(SPIN, limits, timing_only).unwrap_err());
        assert!(f.pc == 1 || f.pc == 2, "{f}");
        assert!(f.reason.contains("more than 5000 cycles"), "{f}");
        assert!(f.reason.contains("--max-cycles"), "{f}");
        // It stopped near the limit: at most one instruction per cycle, so far fewer than the
        // 2^40 the instruction limit allows (a cycle takes at least one instruction here).
    }
    // A program that halts within the limits is untouched by them.
    let limits = RunLimits::new(100, 1000).unwrap();
    run_src(".program ok\n smov s1, 3\n sadd s1, s1, 1\n", limits, false).unwrap();
}

#[test]
fn the_default_limits_stop_a_runaway_loop() {
    // The defaults are finite and within the accepted range; they are what every command and
    // the backend use unless told otherwise.
    let d = RunLimits::default();
    assert!(
        d.max_instructions <= 1 << 32 && d.max_cycles <= 1 << 44,
        "{d:?}"
    );
    assert_eq!(RunLimits::new(d.max_instructions, d.max_cycles), Ok(d));
}

#[test]
fn a_dma_of_2_pow_32_one_byte_elements_is_refused_not_copied() {
    // Descriptor in SMEM at byte 64: 1 dimension, 1-byte elements, 2^32 - 1 of them, source
    // stride 1, destination stride 0 (every byte lands on the same one).
    let src = ".program big\n.smem 64, 1, 1, 0xffffffff, 1, 0\n smov s1, 64\n smov s2, 0\n dma vmem[s2], vmem[s2], desc=s1, sem=sem0\n";
    for timing_only in [false, true] {
        let f = fault_of(run_src(src, RunLimits::default(), timing_only).unwrap_err());
        assert_eq!(f.pc, 2, "{f}");
        assert!(f.instr.starts_with("dma "), "{f}");
        // The source range (2^32 - 1 bytes) leaves VMEM, or the destination would be written
        // 2^32 times: either way the fault names the sizes.
        assert!(
            f.reason.contains("4294967295") || f.reason.contains("out-of-bounds"),
            "{f}"
        );
    }
    // Source stride 0 as well: the source stays in bounds, the byte count is refused.
    let src = ".program big\n.smem 64, 1, 1, 0xffffffff, 0, 0\n smov s1, 64\n smov s2, 0\n dma vmem[s2], vmem[s2], desc=s1, sem=sem0\n";
    let f = fault_of(run_src(src, RunLimits::default(), false).unwrap_err());
    assert!(f.reason.contains("moves 4294967295 bytes"), "{f}");
    // Four dimensions of 2^32 - 1: more than 2^64 bytes, named as such, not wrapped.
    let src = ".program huge\n.smem 64, 4, 1, 0xffffffff, 0, 0, 0xffffffff, 0, 0, 0xffffffff, 0, 0, 0xffffffff, 0, 0\n smov s1, 64\n smov s2, 0\n dma vmem[s2], vmem[s2], desc=s1, sem=sem0\n";
    let f = fault_of(run_src(src, RunLimits::default(), false).unwrap_err());
    assert!(f.reason.contains("more than 2^64"), "{f}");
}

#[test]
fn a_matrix_unit_queues_no_more_results_than_vmem_holds() {
    // rows = 2^32 - 1 with stride 0: one LHS row re-read, 2^32 result rows queued.
    let src = ".program q\n smov s1, 128\n smov s2, 0\n mxu.lw.bf16 mxu0, [s2], rows=s1, cols=s1, stride=s1\n smov s3, 0xffffffff\n mxu.mm.bf16.p1 mxu0, [s2], rows=s3, stride=s2\n";
    for timing_only in [false, true] {
        let f = fault_of(run_src(src, RunLimits::default(), timing_only).unwrap_err());
        assert_eq!(f.pc, 4, "{f}");
        assert!(f.reason.contains("streaming 4294967295 rows"), "{f}");
        assert!(f.reason.contains("bytes of VMEM"), "{f}");
    }
}

#[test]
fn semaphore_amounts_above_2_pow_31_are_not_negative() {
    // Signal 2^31 + 1: as a signed 32-bit value that is negative, and a wait for 1 would then
    // deadlock. Unsigned, the wait for 1 is satisfied.
    let ok = ".program s\n smov s1, 0x80000001\n sem.signal sem0, s1\n smov s2, 1\n sem.wait sem0, s2\n sem.wait sem0, s1\n";
    let e = run_src(ok, RunLimits::default(), false);
    // The second wait needs 2^31 + 1 more after taking 1: a deadlock, reported as one.
    assert!(matches!(e, Err(DeviceError::Deadlock(_))), "{e:?}");
    let ok = ".program s\n smov s1, 0x80000001\n sem.signal sem0, s1\n sem.wait sem0, s1\n";
    run_src(ok, RunLimits::default(), false).unwrap();
    // Waiting for 2^31 + 1 with nothing signalled is a deadlock, never satisfied at once.
    let stuck = ".program s\n smov s1, 0x80000001\n sem.wait sem0, s1\n";
    assert!(matches!(
        run_src(stuck, RunLimits::default(), false),
        Err(DeviceError::Deadlock(_))
    ));
}

#[test]
fn a_traced_loop_keeps_a_bounded_trace_with_a_note() {
    // A loop of 1.2 million marked regions: each is at least one span; the per-core limit
    // (2^20 spans, `recorder::MAX_SPANS_PER_CORE`) keeps the trace near a million spans, and a
    // note says how many were dropped.
    let src = ".program marks\n.marker \"m\"\n smov s1, 1200000\ntop:\n mark.begin \"m\"\n mark.end\n ssub s1, s1, 1\n brnz s1, top\n";
    let p = assemble(src).unwrap();
    let e = emu(RunLimits::default(), true);
    e.set_profiling(true);
    e.run_program(&p, &[], &[0], false).unwrap();
    let events = e.drain_events();
    assert!(
        // Plus the launch's own spans and the note.
        events.len() <= (1 << 20) + 8,
        "{} events",
        events.len()
    );
    let note = events
        .iter()
        .find_map(|ev| match ev {
            TraceEvent::Span(s) if s.name.starts_with("trace limit:") => Some(s),
            _ => None,
        })
        .expect("a note saying spans were dropped");
    let dropped = note.args["dropped_spans"].as_u64().unwrap();
    let kept = events.len() as u64;
    // Every region is one span: kept + dropped covers all 1.2 million of them.
    assert!(
        kept + dropped >= 1_200_000,
        "kept {kept}, dropped {dropped}"
    );
}

#[test]
fn chip_figures_out_of_range_are_refused_by_name() {
    for (field, value) in [
        ("clock_hz", "inf"),
        ("clock_hz", "nan"),
        ("hbm_latency_ns", "1e300"),
        ("ici_link_bytes_per_s", "1e-300"),
        ("smem_bytes", "1099511627776"),
        ("vmem_bytes", "18446744073709551615"),
        ("hbm_bytes", "-1"),
    ] {
        let mut p = builtin("v5e").unwrap();
        let e = p
            .set(field, value)
            .expect_err(&format!("{field}={value} accepted"));
        let text = e.to_string();
        assert!(text.contains(field), "{field}: {text}");
        assert!(text.contains("expected"), "{field}: {text}");
    }
    // A newline cannot smuggle in a second key, in --set or in a value.
    let mut p = builtin("v5e").unwrap();
    assert!(p.set("clock_hz", "1e9\nhbm_bytes = 1").is_err());
    assert!(p.set("clock_hz\nhbm_bytes", "1").is_err());
    assert_eq!(p.hbm_bytes, builtin("v5e").unwrap().hbm_bytes);
    // A TOML file with an absurd figure names it.
    let e = ChipPreset::from_toml("base = \"v5e\"\nvmem_bytes = 1099511627776\n").unwrap_err();
    assert!(e.to_string().contains("vmem_bytes"), "{e}");
}

/// Arguments for `p`: zeroed 4 KiB buffers and the given scalars.
fn args_for(p: &Program, scalars: &[u32]) -> Vec<ArgInit> {
    p.args
        .iter()
        .enumerate()
        .map(|(i, a)| match a.kind {
            ArgKind::Buffer => ArgInit::Zeroed(4096),
            ArgKind::Scalar => ArgInit::Scalar(scalars[i % scalars.len()]),
        })
        .collect()
}

proptest! {
    // Bounded for CI: 1024 programs of up to 24 instructions, each run under small limits in
    // either mode (under a second in all).
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn any_program_halts_faults_where_it_stopped_or_hits_the_limit(
        p in strategies::program(),
        scalars in proptest::collection::vec(any::<u32>(), 1..4),
        timing_only in any::<bool>(),
    ) {
        let e = emu(RunLimits::new(20_000, 2_000_000).unwrap(), timing_only);
        let args = args_for(&p, &scalars);
        match e.run_program(&p, &args, &[0], !timing_only) {
            Ok(_) => {}
            Err(DeviceError::Fault(f)) => {
                // Located: a pc inside the program and the instruction there, as text, or the
                // end of the program (a check at exit, such as a semaphore left counting).
                match p.instrs.get(f.pc as usize) {
                    Some(_) => prop_assert_eq!(&f.instr, &p.instr_text(f.pc as usize)),
                    None => {
                        prop_assert_eq!(f.pc as usize, p.instrs.len());
                        prop_assert!(f.instr.contains("past the end"), "{}", f);
                    }
                }
                prop_assert!(!f.reason.is_empty());
            }
            Err(DeviceError::Deadlock(r)) => prop_assert!(!r.to_string().is_empty()),
            // Refused at load (an instruction this chip lacks, such as a fifth matrix unit):
            // located too, by pc.
            Err(DeviceError::InvalidProgram { reason, .. }) => {
                prop_assert!(reason.starts_with("pc "), "{}", reason)
            }
            Err(other) => prop_assert!(false, "neither a halt, a fault nor a deadlock: {}", other),
        }
        // The device goes on after whatever happened.
        let after = assemble(".program ok\n smov s1, 1\n").unwrap();
        prop_assert!(e.run_program(&after, &[], &[0], false).is_ok());
    }
}

/// Pieces of chip TOML: field names, values in and out of range, and syntax.
const TOML_FRAGMENTS: &[&str] = &[
    "base = \"v5e\"",
    "base = \"v9\"",
    "name = \"x\"",
    "clock_hz = ",
    "hbm_bytes = ",
    "vmem_bytes = ",
    "smem_bytes = ",
    "mxu_rows = ",
    "cores_per_chip = ",
    "hbm_latency_ns = ",
    "ici_link_bytes_per_s = ",
    "mxu_model = ",
    "[costs]",
    "valu_latency = ",
    "[sources]",
    "[[x]]",
    "1e9",
    "inf",
    "nan",
    "-1",
    "0",
    "1e300",
    "1e-300",
    "18446744073709551615",
    "9223372036854775807",
    "1099511627776",
    "\"scale_sim\"",
    "\"pipelined\"",
    "\"",
    "=",
    "\n",
    "[",
    "]",
    "{",
    "}",
    ",",
    "#",
    "é",
];

proptest! {
    // Bounded for CI: a few hundred texts and overrides, well under a second.
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn chip_toml_is_accepted_within_range_or_refused_never_a_panic(
        parts in proptest::collection::vec(proptest::sample::select(TOML_FRAGMENTS), 0..24),
    ) {
        let text = parts.join(" ");
        if let Ok(p) = ChipPreset::from_toml(&text) {
            // Whatever is accepted is within its ranges and survives a round trip.
            prop_assert!(p.validate().is_ok());
            prop_assert!(p.peak_bf16_flops().is_finite() && p.peak_bf16_flops() > 0.0);
            prop_assert_eq!(ChipPreset::from_toml(&p.to_toml()).ok(), Some(p));
        }
    }

    #[test]
    fn set_overrides_are_accepted_within_range_or_refused_by_name(
        field in proptest::sample::select(&[
            "clock_hz", "hbm_bytes", "vmem_bytes", "smem_bytes", "mxu_rows", "cores_per_chip",
            "hbm_latency_ns", "ici_link_bytes_per_s", "mxu_model", "costs.valu_latency",
            "costs", "name", "nonsense", "clock_hz\nhbm_bytes",
        ][..]),
        value in proptest::sample::select(TOML_FRAGMENTS),
        tail in "\\PC{0,8}",
    ) {
        let mut p = builtin("v5e").unwrap();
        let value = format!("{value}{tail}");
        match p.set(field, &value) {
            Ok(()) => prop_assert!(p.validate().is_ok()),
            Err(e) => {
                let text = e.to_string();
                let named = field.split('.').next_back().unwrap_or(field);
                prop_assert!(
                    text.contains(named) || text.contains(field.trim()),
                    "`{}` not named in: {}", field, text
                );
            }
        }
    }
}
