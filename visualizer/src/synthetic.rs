//! A synthetic trace of any size with the shape of a real one: Python-level calls (`python`)
//! around host operators (`aten`), fused groups on the queue, launches on `dispatch`, flows
//! from each group's last operator to its kernels, and per chip kernels, an HBM-in-use
//! counter, nested regions, unit instructions (scalar, valu, vld, vst, xlu, eup, two MXUs; a
//! unit's instructions overlap, as pipelined ones do), DMA transfers and ICI sends.
//! Deterministic in `n`.
//!
//! Used by the benchmark, the tests and `cargo run --example synthetic` to make big traces.

use serde_json::json;
use tpuemu_isa::instr::Unit;
use tpuemu_isa::reg::Mxu;
use tpuemu_isa::trace::{Counter, Flow, Span, Trace, TraceEvent, TraceMeta, Track};

/// Chips in a synthetic trace.
pub const SYNTHETIC_CHIPS: u32 = 4;

/// A small deterministic generator (64-bit LCG, top bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const PY: [&str; 3] = [
    "torch.nn.Linear.forward",
    "torch.nn.functional.softmax",
    "model.block",
];

const OPS: [&str; 6] = [
    "aten::add.Tensor",
    "aten::mul.Tensor",
    "aten::mm",
    "aten::relu",
    "aten::_softmax",
    "aten::sum.dim_IntList",
];

/// A trace with about `n` events, nearly all of them spans (1% are flows).
pub fn synthetic_trace(n: usize) -> Trace {
    let meta = TraceMeta {
        label: format!("synthetic {n}"),
        generation: "v5e".into(),
        clock_hz: 1.5e9,
        peak_bf16_flops: 197e12,
        hbm_bytes_per_s: 819e9,
        chips: SYNTHETIC_CHIPS,
        ..Default::default()
    };
    let mut s = Synth {
        g: Lcg(0x5eed),
        ns_per_cycle: 1e9 / meta.clock_hz,
        events: Vec::with_capacity(n + 1024),
        t_host: 0.0,
        t_dev: vec![0.0; SYNTHETIC_CHIPS as usize],
        hbm: vec![64.0 * 1048576.0; SYNTHETIC_CHIPS as usize],
        op: 0,
        group: 0,
        flow: 0,
    };
    // Flows are a small fraction of the events, so counting events sizes the trace.
    while s.events.len() < n {
        s.group += 1;
        let host_group = s.host_group();
        for chip in 0..SYNTHETIC_CHIPS {
            s.chip_kernel(chip, &host_group);
        }
    }
    Trace {
        meta,
        events: s.events,
    }
}

/// A host track of lane `lane`.
fn host(lane: &str) -> Track {
    Track::Host { lane: lane.into() }
}

/// The units of a core whose instructions a synthetic kernel issues; the last two are MXUs.
const UNITS: [Unit; 8] = [
    Unit::Scalar,
    Unit::Valu,
    Unit::VLoad,
    Unit::VStore,
    Unit::Xlu,
    Unit::Eup,
    Unit::Mxu(Mxu::n(0)),
    Unit::Mxu(Mxu::n(1)),
];

/// The state of [`synthetic_trace`] as it generates fused groups one after another.
struct Synth {
    g: Lcg,
    ns_per_cycle: f64,
    events: Vec<TraceEvent>,
    /// Host clock (ns).
    t_host: f64,
    /// When each chip is next free (ns).
    t_dev: Vec<f64>,
    /// HBM in use on each chip (bytes).
    hbm: Vec<f64>,
    /// Last operator, group and flow ids given.
    op: u64,
    group: u64,
    flow: u64,
}

/// What the host did for a fused group: the kernels on every chip refer to it.
struct HostGroup {
    op_ids: Vec<u64>,
    names: Vec<&'static str>,
    /// When the group's last operator ended (the flows start there).
    last_op_end: f64,
    launch_end: f64,
    program: String,
}

impl Synth {
    fn cycles(&self, t: f64) -> u64 {
        (t / self.ns_per_cycle).round() as u64
    }

    fn push(&mut self, s: Span) {
        self.events.push(TraceEvent::Span(s));
    }

    /// Host: a few operators inside a Python call, then the flush that fuses them, then the
    /// launch.
    fn host_group(&mut self) -> HostGroup {
        let group = self.group;
        let mut op_ids = Vec::new();
        let mut names = Vec::new();
        let py_start = self.t_host;
        for _ in 0..(2 + self.g.below(4)) {
            self.op += 1;
            let name = OPS[self.g.below(OPS.len() as u64) as usize];
            let d = 800.0 + self.g.below(2400) as f64;
            let mut s = Span::new(host("aten"), name, self.t_host, self.t_host + d);
            s.op_id = Some(self.op);
            s.args
                .insert("shapes".into(), json!([[128, 256], [128, 256]]));
            s.args.insert("dtypes".into(), json!(["bf16", "bf16"]));
            s.args.insert("mode".into(), json!("defer_and_fuse"));
            self.push(s);
            op_ids.push(self.op);
            names.push(name);
            self.t_host += d + 100.0;
        }
        let last_op_end = self.t_host - 100.0;
        let py = PY[self.g.below(PY.len() as u64) as usize];
        self.push(Span::new(host("python"), py, py_start, last_op_end));
        let mut q = Span::new(
            host("queue"),
            format!("fused group {group}"),
            self.t_host,
            self.t_host + 600.0,
        );
        q.group_id = Some(group);
        q.args.insert("ops".into(), json!(names));
        q.args.insert("op_ids".into(), json!(op_ids));
        q.args.insert("kernels".into(), json!(SYNTHETIC_CHIPS));
        self.push(q);
        self.t_host += 700.0;
        let program = format!("fused_{group}");
        let mut l = Span::new(
            host("dispatch"),
            format!("launch {program}"),
            self.t_host,
            self.t_host + 1500.0,
        );
        l.args.insert("program".into(), json!(program));
        self.push(l);
        let launch_end = self.t_host + 1500.0;
        self.t_host = launch_end + 200.0;
        HostGroup {
            op_ids,
            names,
            last_op_end,
            launch_end,
            program,
        }
    }

    /// The group's kernel on `chip`: unit instructions and DMAs, an ICI send every fourth
    /// group, regions, the kernel span, its flow from the host and the HBM counter.
    fn chip_kernel(&mut self, chip: u32, host_group: &HostGroup) {
        let c = chip as usize;
        let start = self.t_dev[c].max(host_group.launch_end + 300.0 + 50.0 * f64::from(chip));
        let (end, flops, bytes) = self.instructions(chip, start, host_group.op_ids.last().copied());
        if self.group.is_multiple_of(4) {
            self.ici_send(chip, end);
        }
        self.regions(chip, start, end);
        let program = &host_group.program;
        let mut k = Span::new(Track::Kernel { chip, core: 0 }, program.clone(), start, end);
        k.cycles = Some((self.cycles(start), self.cycles(end)));
        k.op_id = host_group.op_ids.last().copied();
        k.group_id = Some(self.group);
        k.args.insert("flops".into(), json!(flops));
        k.args.insert("hbm_bytes".into(), json!(bytes));
        k.args.insert("program".into(), json!(program));
        k.args
            .insert("source_op".into(), json!(host_group.names.last()));
        self.push(k);
        self.flow += 1;
        self.events.push(TraceEvent::Flow(Flow {
            id: self.flow,
            name: "launch".into(),
            from: host("aten"),
            from_ns: host_group.last_op_end,
            to: Track::Kernel { chip, core: 0 },
            to_ns: start,
        }));
        self.t_dev[c] = end + 50.0;
        // HBM: the group's outputs are allocated at its start, some freed at its end.
        for (t, delta) in [
            (start, 1048576.0 * (1 + self.g.below(8)) as f64),
            (end, -(524288.0 * self.g.below(16) as f64)),
        ] {
            self.hbm[c] = (self.hbm[c] + delta).max(0.0);
            self.events.push(TraceEvent::Counter(Counter {
                chip: Some(chip),
                name: "hbm_bytes_in_use".into(),
                ns: t,
                value: self.hbm[c],
            }));
        }
    }

    /// The kernel's unit instructions from `start` (a unit's pipelined ones overlap) and a DMA
    /// every 24 instructions; returns the kernel's end, its MXU FLOPs and DMA bytes.
    fn instructions(&mut self, chip: u32, start: f64, op_id: Option<u64>) -> (f64, u64, u64) {
        let ns_per_cycle = self.ns_per_cycle;
        let mut cursors = [start; 8];
        let mut issue = start;
        let (mut flops, mut bytes) = (0u64, 0u64);
        let mut dma_at = [start; 2];
        let instrs = 48 + self.g.below(96);
        for k in 0..instrs {
            let u = self.g.below(UNITS.len() as u64) as usize;
            // Vector ALU instructions are pipelined: they overlap on their lane.
            let s0 = if UNITS[u] == Unit::Valu {
                issue
            } else {
                cursors[u].max(issue)
            };
            let d = ns_per_cycle * (1 + self.g.below(if u >= 6 { 24 } else { 6 })) as f64;
            let name = match UNITS[u] {
                Unit::Scalar => "sadd",
                Unit::Valu => "vadd.f32",
                Unit::VLoad => "vld",
                Unit::VStore => "vst",
                Unit::Xlu => "vreduce.sum",
                Unit::Eup => "vexp",
                _ => "mxu.mm",
            };
            let track = Track::Unit {
                chip,
                core: 0,
                unit: UNITS[u],
            };
            let mut s = Span::new(track, name, s0, s0 + d);
            s.cycles = Some((self.cycles(s0), self.cycles(s0 + d)));
            s.op_id = op_id;
            s.group_id = Some(self.group);
            if u >= 6 {
                let f = 2 * 128 * 128 * 8;
                flops += f;
                s.args.insert("flops".into(), json!(f));
            }
            self.push(s);
            cursors[u] = cursors[u].max(s0 + d);
            issue += ns_per_cycle * (1 + self.g.below(2)) as f64;
            if k % 24 == 0 {
                bytes += self.dma(chip, k, issue, &mut dma_at);
            }
        }
        let end = cursors
            .iter()
            .chain(dma_at.iter())
            .fold(issue, |a, &b| a.max(b));
        (end, flops, bytes)
    }

    /// The DMA issued with instruction `k` at `issue`, on the engine `k` picks (`dma_at`:
    /// when each engine is free); returns its bytes.
    fn dma(&mut self, chip: u32, k: u64, issue: f64, dma_at: &mut [f64; 2]) -> u64 {
        let e = (k / 24 % 2) as usize;
        let b = 8192 * (1 + self.g.below(8));
        let ds = dma_at[e].max(issue);
        let dd = b as f64 / 400.0; // about 400 bytes per ns
        let dir = if k == 0 {
            "dma hbm->vmem"
        } else {
            "dma vmem->hbm"
        };
        let mut s = Span::new(
            Track::Dma {
                chip,
                engine: e as u32,
            },
            dir,
            ds,
            ds + dd,
        );
        s.args.insert("bytes".into(), json!(b));
        s.group_id = Some(self.group);
        self.push(s);
        dma_at[e] = ds + dd;
        b
    }

    /// An ICI send of 64 KiB to the next chip at `at`.
    fn ici_send(&mut self, chip: u32, at: f64) {
        let b = 65536;
        let mut s = Span::new(
            Track::Link {
                chip,
                link: "x+".into(),
            },
            "rdma",
            at,
            at + 80.0,
        );
        s.args.insert("bytes".into(), json!(b));
        s.args
            .insert("to_chip".into(), json!((chip + 1) % SYNTHETIC_CHIPS));
        self.push(s);
    }

    /// Regions: the kernel body, split in two tiles, the first with an inner loop.
    fn regions(&mut self, chip: u32, start: f64, end: f64) {
        let region = Track::Marker { chip, core: 0 };
        let mid = start + (end - start) / 2.0;
        self.push(Span::new(region.clone(), "body", start, end));
        self.push(Span::new(region.clone(), "tile 0", start, mid));
        self.push(Span::new(region.clone(), "tile 1", mid, end));
        self.push(Span::new(
            region,
            "loop",
            start,
            start + (mid - start) / 2.0,
        ));
    }
}

/// The operators of [`mode_pair`]'s step, in order, with their kernels' device time (ns),
/// FLOPs and HBM bytes.
const STEP: [(&str, f64, u64, u64); 6] = [
    ("aten::mm", 8000.0, 268_435_456, 1_572_864),
    ("aten::add.Tensor", 2600.0, 0, 1_048_576),
    ("aten::mul.Tensor", 2400.0, 0, 1_048_576),
    ("aten::_softmax", 5200.0, 0, 2_097_152),
    ("aten::mm", 8000.0, 268_435_456, 1_572_864),
    ("aten::relu", 2100.0, 0, 1_048_576),
];

/// Two traces of the same `ops` operators (a repeating step of matmuls and element-wise
/// operators), as Strict and DeferAndFuse runs record them: Strict launches one kernel per
/// operator after a 9 µs dispatch each; DeferAndFuse records each operator in 1.5 µs, fuses
/// every three into one kernel (a third less device time and 40% fewer HBM bytes than the
/// three alone) and launches it from the queue. Both have pipelined vector instructions that
/// overlap on their lane, scalar, load, store and MXU instructions, two DMA engines and the
/// HBM-in-use counter. For tests and screenshots of the comparison views.
pub fn mode_pair(ops: usize) -> (Trace, Trace) {
    (mode_trace(ops, false), mode_trace(ops, true))
}

pub(crate) fn mode_trace(ops: usize, defer: bool) -> Trace {
    let meta = TraceMeta {
        label: if defer { "step defer" } else { "step strict" }.into(),
        generation: "v5e".into(),
        clock_hz: 1.5e9,
        peak_bf16_flops: 197e12,
        hbm_bytes_per_s: 819e9,
        chips: 1,
        ..Default::default()
    };
    let host = |lane: &str| Track::Host { lane: lane.into() };
    let mut events = Vec::new();
    let (mut t_host, mut t_dev, mut hbm) = (0.0f64, 0.0f64, 96.0 * 1048576.0);
    let group_size = if defer { 3 } else { 1 };
    let mut op = 0usize;
    let mut group = 0u64;
    while op < ops {
        group += 1;
        let members: Vec<usize> = (op..(op + group_size).min(ops)).collect();
        op += members.len();
        let mut ids = Vec::new();
        for &i in &members {
            let (name, ..) = STEP[i % STEP.len()];
            let d = if defer { 1500.0 } else { 9000.0 };
            let mut s = Span::new(host("aten"), name, t_host, t_host + d);
            s.op_id = Some(i as u64 + 1);
            s.args
                .insert("mode".into(), json!(if defer { "defer" } else { "strict" }));
            events.push(TraceEvent::Span(s));
            ids.push(i as u64 + 1);
            t_host += d;
        }
        let names: Vec<&str> = members.iter().map(|&i| STEP[i % STEP.len()].0).collect();
        let (mut dur, mut flops, mut bytes) = (0.0, 0u64, 0u64);
        for &i in &members {
            let (_, d, f, b) = STEP[i % STEP.len()];
            (dur, flops, bytes) = (dur + d, flops + f, bytes + b);
        }
        let (program, gid) = if defer {
            let mut q = Span::new(
                host("queue"),
                format!("fused group {group}"),
                t_host,
                t_host + 3000.0,
            );
            q.group_id = Some(group);
            q.args.insert("op_ids".into(), json!(ids));
            q.args.insert("ops".into(), json!(names));
            events.push(TraceEvent::Span(q));
            t_host += 3000.0;
            dur *= if members.len() > 1 { 0.67 } else { 1.0 };
            bytes = if members.len() > 1 {
                bytes * 6 / 10
            } else {
                bytes
            };
            let p = if members.len() > 1 {
                format!("fused[{}]", names.join("+"))
            } else {
                names[0].trim_start_matches("aten::").to_string()
            };
            (p, Some(group))
        } else {
            (names[0].trim_start_matches("aten::").to_string(), None)
        };
        let start = t_dev.max(t_host + 500.0);
        let end = start + dur;
        let mut k = Span::new(
            Track::Kernel { chip: 0, core: 0 },
            program.clone(),
            start,
            end,
        );
        k.op_id = ids.first().copied();
        k.group_id = gid;
        k.args.insert("flops".into(), json!(flops));
        k.args.insert("hbm_bytes".into(), json!(bytes));
        k.args.insert("program".into(), json!(program));
        events.push(TraceEvent::Span(k));
        events.push(TraceEvent::Flow(Flow {
            id: group,
            name: "launch".into(),
            from: host("aten"),
            from_ns: t_host.min(start),
            to: Track::Kernel { chip: 0, core: 0 },
            to_ns: start,
        }));
        kernel_units(&mut events, start, end, flops > 0, bytes);
        for (t, delta) in [(start, bytes as f64 / 2.0), (end, -(bytes as f64) / 3.0)] {
            hbm += delta;
            events.push(TraceEvent::Counter(Counter {
                chip: Some(0),
                name: "hbm_bytes_in_use".into(),
                ns: t,
                value: hbm,
            }));
        }
        t_dev = end + 200.0;
    }
    Trace { meta, events }
}

/// A kernel's instructions on the units of core 0 of chip 0 and its DMAs: vector ALU
/// instructions issued every 2 cycles and busy 16 (eight in flight), scalar, load and store
/// instructions back to back, MXU pushes for matmuls; loads and stores of `bytes` on two DMA
/// engines.
fn kernel_units(events: &mut Vec<TraceEvent>, start: f64, end: f64, mxu: bool, bytes: u64) {
    let cyc = 1e9 / 1.5e9;
    let unit = |u| Track::Unit {
        chip: 0,
        core: 0,
        unit: u,
    };
    let mut push = |track: Track, name: &str, s: f64, e: f64| {
        events.push(TraceEvent::Span(Span::new(track, name, s, e.min(end))));
    };
    let body = end - start;
    let mut t = start + 0.05 * body;
    while t < start + 0.9 * body {
        push(unit(Unit::Valu), "vadd.f32", t, t + 16.0 * cyc);
        t += 2.0 * cyc + (t * 7.0) % 40.0;
    }
    for (u, name, step) in [
        (Unit::Scalar, "sadd", 3.0),
        (Unit::VLoad, "vld", 9.0),
        (Unit::VStore, "vst", 13.0),
    ] {
        let mut t = start;
        while t < end - step * cyc {
            push(unit(u), name, t, t + step * cyc);
            t += step * cyc * 4.0;
        }
    }
    if mxu {
        let mut t = start + 0.1 * body;
        while t < end - 64.0 * cyc {
            push(unit(Unit::Mxu(Mxu::n(0))), "mxu.mm", t, t + 64.0 * cyc);
            t += 80.0 * cyc;
        }
    }
    for (engine, name, s, e) in [
        (0, "dma hbm->vmem", start, start + 0.45 * body),
        (1, "dma vmem->hbm", start + 0.5 * body, end),
    ] {
        let mut sp = Span::new(Track::Dma { chip: 0, engine }, name, s, e);
        sp.args.insert("bytes".into(), json!(bytes / 2));
        events.push(TraceEvent::Span(sp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_the_requested_size_and_all_lane_kinds() {
        let t = synthetic_trace(5000);
        let spans = t.spans().count();
        assert!((5000 * 9 / 10..5000 + 2000).contains(&spans), "{spans}");
        assert!(t.flows().count() > 0);
        let tracks: std::collections::BTreeSet<_> = t.spans().map(|s| s.track.clone()).collect();
        for probe in [
            Track::Host {
                lane: "aten".into(),
            },
            Track::Host {
                lane: "queue".into(),
            },
            Track::Host {
                lane: "dispatch".into(),
            },
            Track::Host {
                lane: "python".into(),
            },
            Track::Kernel { chip: 3, core: 0 },
            Track::Marker { chip: 0, core: 0 },
            Track::Dma { chip: 1, engine: 1 },
            Track::Link {
                chip: 2,
                link: "x+".into(),
            },
        ] {
            assert!(tracks.contains(&probe), "{probe:?}");
        }
        assert!(t.counters().count() > 50);
        assert_eq!(synthetic_trace(5000), t, "deterministic");
    }

    #[test]
    fn mode_pair_fuses_three_operators_per_kernel() {
        let (strict, defer) = mode_pair(12);
        let kernels = |t: &Trace| {
            t.spans()
                .filter(|s| matches!(s.track, Track::Kernel { .. }))
                .count()
        };
        assert_eq!((kernels(&strict), kernels(&defer)), (12, 4));
        let ops = |t: &Trace| t.spans().filter(|s| s.name.starts_with("aten::")).count();
        assert_eq!((ops(&strict), ops(&defer)), (12, 12));
        assert!(defer.counters().count() == 8 && strict.counters().count() == 24);
    }
}
