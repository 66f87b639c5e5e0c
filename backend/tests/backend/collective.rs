//! Collectives on emulated slices against a host reference that sums in the rings' order, so
//! f32 and bf16 results match bit for bit: every op, 1-D and 2-D slices, wrapping and
//! non-wrapping axes, odd and even rings, several axes, chunk tails, buffers at offsets, bad
//! specs and buffer lists, a mismatched launch that ends in a deadlock report, and launches
//! simulated on one chip for all against every chip.

use tpuemu_backend::DType;
use tpuemu_backend::kernels::KernelError;
use tpuemu_backend::kernels::collective::{
    self, BufferSlice, ChipBuffers, Collective, CollectiveError, CollectiveOp, CollectiveSpec,
    PartInfo, RingChoice,
};
use tpuemu_emulator::{ChipPreset, Emulator, builtin};
use tpuemu_isa::{Device, DeviceError};

use CollectiveOp::*;

/// A slice of `gen` chips; `wrap_multiple` overrides which axes wrap (1: every axis above 2).
fn slice(generation: &str, dims: &[u32], wrap_multiple: Option<u32>) -> Emulator {
    let mut p: ChipPreset = builtin(generation).unwrap();
    if let Some(m) = wrap_multiple {
        p.ici_wrap_multiple = m;
    }
    Emulator::slice(p, dims).unwrap()
}

/// Deterministic values of mixed magnitude (so that the order of f32 additions shows).
fn values(seed: u32, n: usize, dtype: DType) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let u = (x >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            match dtype {
                DType::I32 => ((x >> 4) % 2001) as f32 - 1000.0,
                DType::BF16 => half::bf16::from_f32(u * 3.0).to_f32(),
                _ => u * [1.0, 1e-3, 1e3, 7.0][(x >> 28) as usize % 4],
            }
        })
        .collect()
}

fn to_bytes(v: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect(),
        DType::I32 => v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect(),
        _ => unreachable!(),
    }
}

fn from_bytes(b: &[u8], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F32 => b
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        DType::BF16 => b
            .chunks(2)
            .map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f32())
            .collect(),
        DType::I32 => b
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        _ => unreachable!(),
    }
}

/// `a + b` as the device adds in the dtype's lane, then rounded to the dtype.
fn add(a: f32, b: f32, dtype: DType, round: bool) -> f32 {
    match dtype {
        DType::I32 => (a as i32).wrapping_add(b as i32) as f32,
        DType::BF16 if round => half::bf16::from_f32(a + b).to_f32(),
        _ => a + b,
    }
}

fn round(x: f32, dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Chip ids of each group, in rank order (first axis outermost).
fn groups(mesh: &[u32], axes: &[usize]) -> Vec<Vec<u32>> {
    let n: u32 = mesh.iter().product();
    let coords = |c: u32| {
        let mut rest = c;
        mesh.iter()
            .map(|d| {
                let x = rest % d;
                rest /= d;
                x
            })
            .collect::<Vec<u32>>()
    };
    let mut out: std::collections::BTreeMap<Vec<u32>, Vec<(u32, u32)>> = Default::default();
    for c in 0..n {
        let co = coords(c);
        let mut key = co.clone();
        let mut rank = 0;
        for &a in axes {
            rank = rank * mesh[a] + co[a];
            key[a] = 0;
        }
        out.entry(key).or_default().push((rank, c));
    }
    out.into_values()
        .map(|mut g| {
            g.sort();
            g.into_iter().map(|(_, c)| c).collect()
        })
        .collect()
}

/// Per chain: its direction (`true`: the `+` way) and how many hops it carries each piece.
type Reach = Vec<(bool, [usize; 2])>;

/// One ring's reduce-scatter on the host, in the device's order: returns each rank's block.
/// A block is rows of `row` elements; on a bidirectional ring each row's first half is piece 0,
/// its second half piece 1.
fn ring_rs(x: &[Vec<f32>], bidir: bool, dtype: DType, row: usize) -> Vec<Vec<f32>> {
    let n = x.len();
    let be = x[0].len() / n;
    let reach: Reach = if !bidir {
        vec![(true, [n - 1, 0])]
    } else if n % 2 == 1 {
        let r = (n - 1) / 2;
        vec![(true, [r, r]), (false, [r, r])]
    } else {
        let h = n / 2;
        vec![(true, [h, h - 1]), (false, [h - 1, h])]
    };
    (0..n)
        .map(|q| {
            let mut out = vec![0f32; be];
            for (i, o) in out.iter_mut().enumerate() {
                let h = usize::from(bidir && i % row >= row / 2);
                let at = q * be + i;
                // Partial arriving from each chain (message of the chip one hop away).
                let partial = |plus: bool, r: usize| -> Option<f32> {
                    if r == 0 {
                        return None;
                    }
                    let chip = |d: usize| if plus { (q + n - d) % n } else { (q + d) % n };
                    let mut p = x[chip(r)][at];
                    for d in (1..r).rev() {
                        p = add(p, x[chip(d)][at], dtype, true);
                    }
                    Some(p)
                };
                let p: Vec<Option<f32>> = reach.iter().map(|(pl, r)| partial(*pl, r[h])).collect();
                let mut s = match p[0] {
                    Some(a) => add(a, x[q][at], dtype, false),
                    None => x[q][at],
                };
                if let Some(Some(m)) = p.get(1) {
                    s = add(s, *m, dtype, false);
                }
                *o = round(s, dtype);
            }
            out
        })
        .collect()
}

/// Reduce-scatter of one part on the host: each chip's tensor over `axes` (spec positions,
/// ascending, row-major) of rows of `s` elements is reduced over the part's axes in its order.
fn part_rs(
    mesh: &[u32],
    axes: &[usize],
    bidir: &[bool],
    order: &[usize],
    mut cur: Vec<Vec<f32>>,
    s: usize,
    dtype: DType,
) -> Vec<Vec<f32>> {
    let mut rem: Vec<usize> = (0..axes.len()).collect();
    for &a in order {
        let pos = rem.iter().position(|&x| x == a).unwrap();
        let n = mesh[axes[a]] as usize;
        // Rows of the remaining axes before and after `a` (row-major).
        let outer: usize = rem[..pos].iter().map(|&x| mesh[axes[x]] as usize).product();
        let inner: usize = rem[pos + 1..]
            .iter()
            .map(|&x| mesh[axes[x]] as usize)
            .product::<usize>()
            * s;
        let mut next = vec![Vec::new(); cur.len()];
        for g in groups(mesh, &[axes[a]]) {
            // Each member's data as n blocks, block q = index q along `a`.
            let x: Vec<Vec<f32>> = g
                .iter()
                .map(|c| {
                    let t = &cur[*c as usize];
                    (0..n)
                        .flat_map(|q| {
                            (0..outer).flat_map(move |o| {
                                let at = (o * n + q) * inner;
                                t[at..at + inner].to_vec()
                            })
                        })
                        .collect()
                })
                .collect();
            let blocks = if n == 1 {
                x
            } else {
                ring_rs(&x, bidir[a], dtype, s)
            };
            for (c, b) in g.iter().zip(blocks) {
                next[*c as usize] = b;
            }
        }
        cur = next;
        rem.remove(pos);
    }
    cur
}

/// The expected outputs of `op` for per-chip inputs `ins`.
fn reference(
    op: CollectiveOp,
    mesh: &[u32],
    axes: &[usize],
    bidir: &[bool],
    parts: &[PartInfo],
    ins: &[Vec<f32>],
    dtype: DType,
) -> Vec<Vec<f32>> {
    let mut outs = vec![Vec::new(); ins.len()];
    match op {
        AllGather => {
            for g in groups(mesh, axes) {
                let all: Vec<f32> = g.iter().flat_map(|c| ins[*c as usize].clone()).collect();
                for c in g {
                    outs[c as usize] = all.clone();
                }
            }
        }
        AllToAll => {
            for g in groups(mesh, axes) {
                let n = g.len();
                let b = ins[g[0] as usize].len() / n;
                for (r, &c) in g.iter().enumerate() {
                    outs[c as usize] = (0..n)
                        .flat_map(|j| ins[g[j] as usize][r * b..(r + 1) * b].to_vec())
                        .collect();
                }
            }
        }
        ReduceScatter | AllReduce => {
            // Part by part (its elements of every shard), axis by axis in the part's order.
            let group: usize = axes.iter().map(|&a| mesh[a] as usize).product();
            let shard = ins[0].len() / group;
            let mut cur = vec![vec![0f32; shard]; ins.len()];
            // A group of one chip copies: one part, no axes.
            let whole = [PartInfo {
                first: 0,
                elements: shard as u64,
                axes: Vec::new(),
            }];
            let parts = if parts.is_empty() { &whole[..] } else { parts };
            for part in parts {
                let (c0, s) = (part.first as usize, part.elements as usize);
                let mine: Vec<Vec<f32>> = ins
                    .iter()
                    .map(|x| {
                        (0..group)
                            .flat_map(|r| x[r * shard + c0..r * shard + c0 + s].to_vec())
                            .collect()
                    })
                    .collect();
                let order: Vec<usize> = part
                    .axes
                    .iter()
                    .map(|t| axes.iter().position(|a| a == t).unwrap())
                    .collect();
                let done = part_rs(mesh, axes, bidir, &order, mine, s, dtype);
                for (c, d) in done.into_iter().enumerate() {
                    cur[c][c0..c0 + s].copy_from_slice(&d);
                }
            }
            if op == ReduceScatter {
                return cur;
            }
            return reference(AllGather, mesh, axes, bidir, parts, &cur, dtype);
        }
    }
    outs
}

/// Runs `spec` on `emu` with every chip's input at `in_off` and output at `out_off` of one
/// shared buffer, and checks the result against the reference.
fn check_at(emu: &Emulator, spec: &CollectiveSpec, in_off: u64, out_off: u64) {
    let topo = emu.topology().clone();
    let c = Collective::new(spec, &topo).unwrap();
    let esz = spec.dtype.size() as u64;
    let n_in = (c.input_bytes() / esz) as usize;
    let mut ins = Vec::new();
    let mut bufs = Vec::new();
    for chip in 0..topo.num_chips() as u32 {
        let v = values(chip + 1, n_in, spec.dtype);
        let size = (in_off + c.input_bytes()).max(out_off + c.output_bytes()) + 64;
        let buf = emu.alloc(chip, size).unwrap();
        emu.write(buf, in_off, &to_bytes(&v, spec.dtype), 0.0)
            .unwrap();
        ins.push(v);
        bufs.push(ChipBuffers {
            chip,
            input: BufferSlice {
                buffer: buf,
                offset: in_off,
            },
            output: BufferSlice {
                buffer: buf,
                offset: out_off,
            },
        });
    }
    let pid = emu.load(c.program()).unwrap();
    let submit = emu.synchronize().unwrap().end_ns;
    let id = c.launch(emu, pid, &bufs, submit).unwrap();
    emu.wait(id)
        .unwrap_or_else(|e| panic!("{} {:?}: {e}", spec.op.name(), spec.axes));
    let want = reference(
        spec.op,
        &topo.mesh,
        &spec.axes,
        &c.bidirectional(),
        &c.parts(),
        &ins,
        spec.dtype,
    );
    for b in &bufs {
        let mut out = vec![0u8; c.output_bytes() as usize];
        emu.read(b.output.buffer, out_off, &mut out, 0.0).unwrap();
        let got = from_bytes(&out, spec.dtype);
        let w = &want[b.chip as usize];
        assert_eq!(got.len(), w.len());
        for (i, (g, x)) in got.iter().zip(w).enumerate() {
            assert!(
                g.to_bits() == x.to_bits(),
                "{} {:?} {:?} on {:?}: chip {} element {i}: got {g}, want {x}",
                spec.op.name(),
                spec.dtype,
                spec.axes,
                topo.mesh,
                b.chip
            );
        }
        emu.free(b.input.buffer).unwrap();
    }
}

fn check(emu: &Emulator, spec: &CollectiveSpec) {
    // Output first, input after it, at odd offsets.
    let out = spec.dtype.size() as u64 * 3;
    let c = Collective::new(spec, emu.topology()).unwrap();
    check_at(emu, spec, out + c.output_bytes() + 40, out);
}

fn spec(op: CollectiveOp, dtype: DType, elements: u64, axes: &[usize]) -> CollectiveSpec {
    let mut s = CollectiveSpec::new(op, dtype, elements, axes);
    s.chunk_bytes = Some(4096);
    s
}

#[test]
fn every_op_on_a_mesh_without_wraparound() {
    // v5e axes shorter than 16 chips do not wrap: unidirectional rings.
    let emu = slice("v5e", &[4, 3], None);
    assert_eq!(emu.topology().wraparound, vec![false, false]);
    for op in CollectiveOp::ALL {
        for axes in [&[0][..], &[1], &[0, 1], &[1, 0]] {
            check(&emu, &spec(op, DType::F32, 12 * 1100, axes));
        }
    }
}

#[test]
fn every_op_on_wrapping_rings_odd_and_even() {
    // Bidirectional rings: 4 chips (the opposite block split both ways) and 5 chips.
    let emu = slice("v5e", &[4, 5], Some(1));
    assert_eq!(emu.topology().wraparound, vec![true, true]);
    for op in CollectiveOp::ALL {
        for axes in [&[0][..], &[1], &[1, 0]] {
            check(&emu, &spec(op, DType::F32, 20 * 2600, axes));
        }
    }
}

#[test]
fn sums_in_bf16_and_i32() {
    let emu = slice("v5e", &[4, 2], Some(1));
    for dtype in [DType::BF16, DType::I32] {
        for op in [ReduceScatter, AllReduce] {
            for axes in [&[0][..], &[0, 1]] {
                check(&emu, &spec(op, dtype, 8 * 3000, axes));
            }
        }
        check(&emu, &spec(AllGather, dtype, 8 * 1000, &[0, 1]));
        check(&emu, &spec(AllToAll, dtype, 8 * 1000, &[1, 0]));
    }
}

#[test]
fn a_one_dimensional_pod_axis_and_tiny_shards() {
    // A full 16-chip v5e axis wraps; one element per chip, and pieces of zero elements.
    let emu = slice("v5e", &[16], None);
    assert_eq!(emu.topology().wraparound, vec![true]);
    for op in CollectiveOp::ALL {
        check(&emu, &CollectiveSpec::new(op, DType::F32, 16, &[0]));
        check(&emu, &CollectiveSpec::new(op, DType::F32, 16 * 3, &[0]));
    }
}

#[test]
fn three_dimensional_slices_and_forced_rings() {
    // v4: a 4x4x4 cube wraps on every axis; force unidirectional rings on it, and
    // bidirectional ones on a slice that does not wrap.
    let emu = slice("v4", &[4, 2, 3], Some(1));
    for op in [AllReduce, AllGather] {
        check(&emu, &spec(op, DType::F32, 24 * 1500, &[2, 0, 1]));
    }
    let mut s = spec(AllReduce, DType::F32, 24 * 1500, &[0, 2]);
    s.ring = RingChoice::Unidirectional;
    check(&emu, &s);
    let emu = slice("v5e", &[5], None);
    let mut s = spec(ReduceScatter, DType::F32, 5 * 2048, &[0]);
    s.ring = RingChoice::Bidirectional;
    check(&emu, &s);
}

#[test]
fn an_axis_of_one_chip_copies() {
    let emu = slice("v5e", &[4, 1], None);
    for op in CollectiveOp::ALL {
        check(&emu, &spec(op, DType::F32, 4096, &[1]));
    }
}

#[test]
fn chunk_tails_and_offsets() {
    // Blocks that are not whole chunks nor whole (8, 128) tiles, at unaligned offsets.
    let emu = slice("v5e", &[3], Some(1));
    for op in CollectiveOp::ALL {
        let s = spec(op, DType::F32, 3 * 5 * 1031, &[0]);
        check_at(&emu, &s, 7 * 4, 3 * 5 * 1031 * 4 + 100);
    }
}

#[test]
fn bad_specs_are_errors() {
    let emu = slice("v5e", &[4, 4], None);
    let topo = emu.topology();
    let err = |s: CollectiveSpec| match Collective::new(&s, topo) {
        Err(KernelError::Unsupported(m)) | Err(KernelError::TooLarge(m)) => m,
        other => panic!("expected an error, got {:?}", other.map(|_| ())),
    };
    let m = err(CollectiveSpec::new(AllGather, DType::F32, 10, &[0]));
    assert!(
        m.contains("10 elements") && m.contains("multiple of 4"),
        "{m}"
    );
    let m = err(CollectiveSpec::new(AllReduce, DType::F32, 64, &[2]));
    assert!(m.contains("axis 2 does not exist"), "{m}");
    let m = err(CollectiveSpec::new(AllReduce, DType::F32, 64, &[1, 1]));
    assert!(m.contains("twice"), "{m}");
    let m = err(CollectiveSpec::new(AllReduce, DType::I64, 64, &[0]));
    assert!(m.contains("int64"), "{m}");
    let m = err(CollectiveSpec::new(AllReduce, DType::F32, 1 << 30, &[0]));
    assert!(m.contains("bytes per chip"), "{m}");
    // Moves of any dtype are fine.
    Collective::new(&CollectiveSpec::new(AllToAll, DType::I64, 64, &[0]), topo).unwrap();
}

#[test]
fn bad_buffer_lists_are_errors() {
    let emu = slice("v5e", &[4, 2], None);
    let s = CollectiveSpec::new(AllGather, DType::F32, 4096, &[0]);
    let bufs: Vec<ChipBuffers> = (0..8)
        .map(|chip| {
            let b = emu.alloc(chip, 1 << 16).unwrap();
            ChipBuffers {
                chip,
                input: BufferSlice::whole(b),
                output: BufferSlice {
                    buffer: b,
                    offset: 8192,
                },
            }
        })
        .collect();
    let err = |b: &[ChipBuffers]| match collective::run(&emu, &s, b, 0.0) {
        Err(CollectiveError::Buffers(m)) => m,
        other => panic!("expected a buffer error, got {other:?}"),
    };
    // Chips 0..4 are the group of row 0; chip 4 alone is part of row 1's group.
    assert!(err(&bufs[..5]).contains("has 1 of its 4 chips"));
    let mut overlap = bufs.clone();
    overlap[2].output.offset = 100;
    let m = err(&overlap);
    assert!(m.contains("overlap") || m.contains("differ"), "{m}");
    let mut uneven = bufs.clone();
    uneven[1].output.offset = 16384;
    assert!(err(&uneven).contains("output offsets differ"));
    // One whole group runs on its own.
    collective::run(&emu, &s, &bufs[..4], 0.0).unwrap();
}

#[test]
fn a_rank_that_skips_the_collective_deadlocks_the_rest() {
    // The classic mismatch: every chip but one calls the all-gather; chip 2 returns at once (its
    // program starts with "if chip == 2: halt"). Nobody faults; chips 0, 1 and 3 end up waiting
    // for bytes that never come, and the launch ends with the device's deadlock report.
    use tpuemu_isa::ops::{CmpOp, SysReg};
    use tpuemu_isa::{Instr, SReg, SSrc};
    let emu = slice("v5e", &[4], None);
    let s = CollectiveSpec::new(AllGather, DType::F32, 4096, &[0]);
    let c = Collective::new(&s, emu.topology()).unwrap();
    let mut p = c.program().clone();
    let r = SReg::n(30);
    let body: Vec<Instr> = p
        .instrs
        .iter()
        .map(|i| match i.branch_target() {
            Some(t) => i.with_branch_target(t + 3),
            None => *i,
        })
        .collect();
    let end = body.len() as u32 + 3;
    p.instrs = vec![
        Instr::SSys {
            dst: r,
            reg: SysReg::Chip,
        },
        Instr::SCmp {
            op: CmpOp::Eq,
            dst: r,
            a: r,
            b: SSrc::Imm(2),
        },
        Instr::BrIf {
            cond: tpuemu_isa::ops::BrCond::NonZero,
            reg: r,
            target: end,
        },
    ];
    p.instrs.extend(body);
    let bufs: Vec<ChipBuffers> = (0..4)
        .map(|chip| ChipBuffers {
            chip,
            input: BufferSlice::whole(emu.alloc(chip, 4096).unwrap()),
            output: BufferSlice::whole(emu.alloc(chip, 16384).unwrap()),
        })
        .collect();
    let pid = emu.load(&p).unwrap();
    let id = c.launch(&emu, pid, &bufs, 0.0).unwrap();
    match emu.wait(id) {
        Err(DeviceError::Deadlock(report)) => {
            let text = report.to_string();
            for chip in [0, 1, 3] {
                assert!(
                    text.contains(&format!("chip {chip} core 0: waits at pc")),
                    "{text}"
                );
            }
            assert!(text.contains("chip 2 core 0: finished"), "{text}");
            assert!(text.contains("sem.wait sem0"), "{text}");
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

/// Runs `spec` timing-only on every chip of `emu`, through `launch_symmetric` or not; returns
/// the cycles and whether one chip stood for all.
fn timed(emu: &Emulator, spec: &CollectiveSpec, symmetric: bool) -> (u64, bool) {
    let topo = emu.topology().clone();
    let c = Collective::new(spec, &topo).unwrap();
    emu.set_timing_only(true);
    let bufs: Vec<ChipBuffers> = (0..topo.num_chips() as u32)
        .map(|chip| ChipBuffers {
            chip,
            input: BufferSlice::whole(emu.alloc(chip, c.input_bytes()).unwrap()),
            output: BufferSlice::whole(emu.alloc(chip, c.output_bytes()).unwrap()),
        })
        .collect();
    let pid = emu.load(c.program()).unwrap();
    let submit = emu.synchronize().unwrap().end_ns;
    let id = if symmetric {
        c.launch_with(emu, pid, &bufs, submit, &|l| emu.launch_symmetric(l))
    } else {
        c.launch(emu, pid, &bufs, submit)
    }
    .unwrap();
    emu.wait(id).unwrap();
    let stats = emu.stats(id).unwrap();
    (stats.cycles(), stats.represented_by.is_some())
}

#[test]
fn a_symmetric_launch_folds_only_what_one_chip_can_stand_for() {
    // Rings closing in one hop: one chip for all, the same cycles as every chip.
    for (op, axes) in [(AllReduce, &[0, 1][..]), (ReduceScatter, &[1, 0][..])] {
        let s = CollectiveSpec::new(op, DType::F32, 16 * 4096, axes);
        let full = timed(&slice("v5e", &[4, 4], Some(4)), &s, false);
        let one = timed(&slice("v5e", &[4, 4], Some(4)), &s, true);
        assert_eq!((one.0, one.1, full.1), (full.0, true, false), "{op:?}");
        let topo = slice("v5e", &[4, 4], Some(4)).topology().clone();
        assert!(
            Collective::new(&s, &topo)
                .unwrap()
                .translation_symmetric(&topo)
        );
    }
    // An all-to-all sends over several hops: the emulator notices and simulates every chip.
    let emu = slice("v5e", &[8], Some(8));
    let s = CollectiveSpec::new(AllToAll, DType::F32, 8 * 4096, &[0]);
    let c = Collective::new(&s, emu.topology()).unwrap();
    assert!(!c.translation_symmetric(emu.topology()));
    let full = timed(&slice("v5e", &[8], Some(8)), &s, false);
    let tried = timed(&emu, &s, true);
    assert_eq!(tried, (full.0, false));
    // A line's rings close over several hops: not symmetric.
    let line = slice("v5e", &[4, 4], None);
    let s = CollectiveSpec::new(AllGather, DType::F32, 16 * 4096, &[0]);
    assert!(
        !Collective::new(&s, line.topology())
            .unwrap()
            .translation_symmetric(line.topology())
    );
}

#[test]
fn parts_start_on_different_axes() {
    let emu = slice("v4", &[4, 4, 4], None);
    let c = Collective::new(
        &CollectiveSpec::new(AllReduce, DType::F32, 64 * 3 * 4096, &[0, 1, 2]),
        emu.topology(),
    )
    .unwrap();
    let firsts: Vec<usize> = c.parts().iter().map(|p| p.axes[0]).collect();
    assert_eq!(firsts, vec![0, 1, 2]);
    // Equal shares on equal axes; together the whole shard.
    let total: u64 = c.parts().iter().map(|p| p.elements).sum();
    assert_eq!(total, 3 * 4096);
    assert!(c.parts().iter().all(|p| p.elements == 4096));
}
