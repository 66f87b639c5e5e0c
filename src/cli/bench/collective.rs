//! `tpuemu bench collective`: one collective over a slice of chips, its simulated time against
//! the scaling book's ICI model, and what the emulation cost on the host.
//!
//! `--bytes N` is the size of the whole array: gathered (all-gather), before scattering
//! (reduce-scatter), reduced (all-reduce), or held by each chip (all-to-all). `algbw` is
//! `N / seconds`; `busbw` scales it by what every link must carry (NCCL's convention:
//! `(n-1)/n` for all-gather, reduce-scatter and all-to-all, `2(n-1)/n` for all-reduce).
//! The model (the scaling book's, "How to Scale Your Model", part 3, with its exact ring factor):
//! `(n-1)/n * V / W` per ring stage (all-gather, reduce-scatter; all-reduce is both), `W` the
//! axis's bandwidth (both directions of a link where the axis wraps, one otherwise, so no
//! wraparound takes twice as long), at least the hop latency times the hops a chain walks (`n/2`
//! on a ring, `n-1` on a line); all-to-all is the busiest link's bytes over its bandwidth, routed
//! as the emulator routes. For large arrays over 16 chips `(n-1)/n` is 0.94: the book's plain
//! `V / W` is 7% above the exact figure.

use std::collections::HashMap;
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde_json::json;
use tpuemu_backend::DType;
use tpuemu_backend::kernels::collective::{
    BufferSlice, ChipBuffers, Collective, CollectiveOp, CollectiveSpec, RingChoice,
};
use tpuemu_emulator::ici::{Ici, LinkId};
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_isa::{Device, Topology};

use super::super::chip::load_preset;
use super::super::{CliError, report};

/// The collective.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Op {
    /// Every chip ends with every shard.
    AllGather,
    /// Every chip ends with its block of the sum.
    ReduceScatter,
    /// Every chip ends with the sum.
    AllReduce,
    /// Every chip sends block j to rank j.
    AllToAll,
}

/// Element type.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Dtype {
    /// 4-byte floats.
    F32,
    /// bfloat16 (sums add in f32 and round on the wire).
    Bf16,
    /// 4-byte integers (sums wrap).
    I32,
}

/// Ring choice per axis.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Ring {
    /// Bidirectional where the axis wraps, unidirectional elsewhere.
    Auto,
    /// One direction on every axis.
    Uni,
    /// Both directions on every axis of more than two chips.
    Bi,
}

/// Arguments of `tpuemu bench collective`.
#[derive(Args, Debug)]
pub struct CollectiveArgs {
    /// The collective.
    #[arg(long, value_enum)]
    pub op: Op,
    /// The slice: GENERATION:AxBxC (`v5e:16x16`, `v5p:4x4x4`, `v4:4x4x8`) or FILE.toml:AxB.
    #[arg(long, default_value = "v5e:4x4")]
    pub slice: String,
    /// Mesh axes the collective runs over, comma-separated (`0`, `1`, `0,1`), first outermost.
    #[arg(long, default_value = "0")]
    pub axes: String,
    /// Bytes of the whole array: gathered (all-gather), before scattering (reduce-scatter),
    /// reduced (all-reduce), or held by each chip (all-to-all).
    #[arg(long, allow_negative_numbers = true)]
    pub bytes: u64,
    /// Element type.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: Dtype,
    /// Ring choice.
    #[arg(long, value_enum, default_value = "auto")]
    pub ring: Ring,
    /// Bytes per pipelined chunk, a positive multiple of 1024 elements (default: an eighth of a
    /// ring stage's block, within 32-512 KiB).
    #[arg(long, allow_negative_numbers = true)]
    pub chunk_bytes: Option<u32>,
    /// Override a preset field, e.g. `--set ici_wrap_multiple=1024` (no wraparound).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Time only: no data is written, moved or added.
    #[arg(long)]
    pub timing_only: bool,
    /// Write a Chrome trace of the run.
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: super::super::chip::LimitArgs,
}

/// Parses `GEN:AxBxC` into a preset (with `--set` overrides) and the mesh.
pub fn parse_slice(text: &str, set: &[String]) -> Result<(ChipPreset, Vec<u32>), CliError> {
    let err = |m: String| CliError::Other(format!("--slice `{text}`: {m}"));
    let (gen_name, dims) = text
        .rsplit_once(':')
        .ok_or_else(|| err("expected GENERATION:AxBxC, e.g. v5e:16x16".into()))?;
    let mut preset = load_preset(gen_name).map_err(|e| err(e.to_string()))?;
    for s in set {
        let (field, value) = s
            .split_once('=')
            .ok_or_else(|| CliError::Other(format!("--set `{s}`: expected FIELD=VALUE")))?;
        preset
            .set(field.trim(), value.trim())
            .map_err(|e| CliError::Other(e.to_string()))?;
    }
    let dims = dims
        .split('x')
        .map(|d| match d.trim().parse::<u32>() {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(err(format!(
                "`{d}` is not a chip count; expected positive integers joined by x, e.g. 16x16"
            ))),
        })
        .collect::<Result<Vec<u32>, _>>()?;
    if dims.len() > preset.ici_dims as usize {
        return Err(err(format!(
            "{} slices have at most {} axes ({}D {}), {} given",
            preset.name,
            preset.ici_dims,
            preset.ici_dims,
            if preset.ici_dims == 3 {
                "torus"
            } else {
                "torus or mesh"
            },
            dims.len()
        )));
    }
    Ok((preset, dims))
}

fn parse_axes(text: &str, mesh: &[u32]) -> Result<Vec<usize>, CliError> {
    text.split(',')
        .map(|a| match a.trim().parse::<usize>() {
            Ok(v) if v < mesh.len() => Ok(v),
            _ => Err(CliError::Other(format!(
                "--axes `{text}`: `{a}` is not an axis of the {}-axis mesh {mesh:?}; expected numbers from 0 to {}",
                mesh.len(),
                mesh.len() - 1
            ))),
        })
        .collect()
}

/// The busiest link's bytes when every chip of chip 0's group pushes `block` bytes to every
/// other, routed as the emulator routes (dimension by dimension, the short way round, ties `+`).
fn a2a_busiest_link(topo: &Topology, axes: &[usize], block: u64) -> u64 {
    let ici = Ici::new(topo.mesh.clone(), topo.wraparound.clone(), 1.0, 1);
    let members: Vec<u32> = (0..topo.num_chips() as u32)
        .filter(|&c| {
            ici.coords(c)
                .iter()
                .enumerate()
                .all(|(k, x)| axes.contains(&k) || *x == 0)
        })
        .collect();
    let mut load: HashMap<LinkId, u64> = HashMap::new();
    for &s in &members {
        for &d in &members {
            for link in ici.route(s, d) {
                *load.entry(link).or_default() += block;
            }
        }
    }
    load.values().copied().max().unwrap_or(0)
}

/// The scaling book's estimate of the collective's time.
fn model_seconds(c: &Collective, topo: &Topology, preset: &ChipPreset, bytes: u64) -> f64 {
    let link = preset.ici_link_bytes_per_s;
    let hop = preset.ici_hop_latency_ns * 1e-9;
    let spec = c.spec();
    if spec.op == CollectiveOp::AllToAll {
        let block = bytes / c.group_size() as u64;
        return a2a_busiest_link(topo, &spec.axes, block) as f64 / link;
    }
    let mut len = bytes as f64;
    let mut total = 0.0;
    for (&a, &bi) in spec.axes.iter().zip(&c.bidirectional()) {
        let n = topo.mesh[a] as f64;
        if n < 2.0 {
            continue;
        }
        let (w, hops) = if bi {
            (2.0 * link, (n / 2.0).floor())
        } else {
            (link, n - 1.0)
        };
        // All-gather and reduce-scatter move the array of this stage once; each stage of a
        // reduce-scatter works on the previous one's block (and an all-gather's in reverse).
        total += ((n - 1.0) / n * len / w).max(hops * hop);
        len /= n;
    }
    if spec.op == CollectiveOp::AllReduce {
        2.0 * total
    } else {
        total
    }
}

fn fill(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8 & 0x3f
        })
        .collect()
}

/// Runs `tpuemu bench collective`.
pub fn run(args: &CollectiveArgs) -> Result<(), CliError> {
    let (preset, mesh) = parse_slice(&args.slice, &args.set)?;
    let axes = parse_axes(&args.axes, &mesh)?;
    let dtype = match args.dtype {
        Dtype::F32 => DType::F32,
        Dtype::Bf16 => DType::BF16,
        Dtype::I32 => DType::I32,
    };
    let op = match args.op {
        Op::AllGather => CollectiveOp::AllGather,
        Op::ReduceScatter => CollectiveOp::ReduceScatter,
        Op::AllReduce => CollectiveOp::AllReduce,
        Op::AllToAll => CollectiveOp::AllToAll,
    };
    let esz = dtype.size() as u64;
    if args.bytes == 0 || !args.bytes.is_multiple_of(esz) {
        return Err(CliError::Other(format!(
            "--bytes {}: expected a positive multiple of the {}-byte {} element",
            args.bytes,
            esz,
            dtype.name()
        )));
    }
    let other = |e: String| CliError::Other(e);
    let emu = Emulator::slice(preset.clone(), &mesh).map_err(|e| other(e.to_string()))?;
    emu.set_timing_only(args.timing_only);
    emu.set_profiling(args.trace.is_some());
    emu.set_run_limits(args.limits.limits()?);
    let topo = emu.topology().clone();
    let mut spec = CollectiveSpec::new(op, dtype, args.bytes / esz, &axes);
    spec.ring = match args.ring {
        Ring::Auto => RingChoice::Auto,
        Ring::Uni => RingChoice::Unidirectional,
        Ring::Bi => RingChoice::Bidirectional,
    };
    if let Some(c) = args.chunk_bytes
        && (c == 0 || !(c as u64).is_multiple_of(1024 * esz))
    {
        return Err(CliError::Other(format!(
            "--chunk-bytes {c}: expected a positive multiple of {} bytes (1024 {} elements)",
            1024 * esz,
            dtype.name()
        )));
    }
    spec.chunk_bytes = args.chunk_bytes;
    let c = Collective::new(&spec, &topo).map_err(|e| other(e.to_string()))?;
    let dev = |e: tpuemu_isa::DeviceError| CliError::Other(e.to_string());
    let pid = emu.load(c.program()).map_err(dev)?;
    let mut bufs = Vec::new();
    for chip in 0..topo.num_chips() as u32 {
        let input = emu.alloc(chip, c.input_bytes()).map_err(dev)?;
        let output = emu.alloc(chip, c.output_bytes()).map_err(dev)?;
        if !args.timing_only {
            let data = fill(c.input_bytes() as usize, chip + 1);
            emu.write(input, 0, &data, 0.0).map_err(dev)?;
        }
        bufs.push(ChipBuffers {
            chip,
            input: BufferSlice::whole(input),
            output: BufferSlice::whole(output),
        });
    }
    let submit = emu.synchronize().map_err(dev)?.end_ns;
    let t0 = Instant::now();
    let id = c
        .launch(&emu, pid, &bufs, submit)
        .map_err(|e| other(e.to_string()))?;
    let done = emu.wait(id).map_err(dev)?;
    let host_seconds = t0.elapsed().as_secs_f64();
    let stats = emu.stats(id).expect("the launch exists");
    let secs = stats.cycles() as f64 / preset.clock_hz;
    let n = c.group_size() as f64;
    let bus = match op {
        CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
        _ => (n - 1.0) / n,
    };
    let model = model_seconds(&c, &topo, &preset, args.bytes);
    let mut v = report::launch_summary(&stats, &preset, host_seconds);
    let extra = json!({
        "op": op.name(),
        "slice": args.slice,
        "generation": preset.name,
        "mesh": topo.mesh,
        "wraparound": topo.wraparound,
        "axes": axes,
        "group_size": c.group_size(),
        "bidirectional": c.bidirectional(),
        "dtype": dtype.name(),
        "bytes": args.bytes,
        "input_bytes_per_chip": c.input_bytes(),
        "output_bytes_per_chip": c.output_bytes(),
        "scratch_bytes_per_chip": c.scratch_bytes(),
        "chunk_bytes": c.chunk_bytes(),
        "functional": !args.timing_only,
        "algbw_bytes_per_s": args.bytes as f64 / secs,
        "busbw_bytes_per_s": args.bytes as f64 / secs * bus,
        "model_seconds": model,
        // A group of one chip moves nothing over ICI: no model to compare with.
        "seconds_over_model": (model > 0.0).then(|| secs / model),
        "ici_link_bytes_per_s": preset.ici_link_bytes_per_s,
        "ici_hop_latency_ns": preset.ici_hop_latency_ns,
        "ici_bytes": done.counters.ici_bytes,
        "program_instructions": c.program().instrs.len(),
        "peak_rss_bytes": super::peak_rss_bytes(),
    });
    for (k, x) in extra.as_object().expect("object") {
        v[k] = x.clone();
    }
    if let Some(path) = &args.trace {
        let label = format!("{} {} bytes over axes {:?}", op.name(), args.bytes, axes);
        report::write_trace(path, &emu, &preset, topo.num_chips() as u32, label)?;
    }
    if args.json {
        return super::super::write_output(
            None,
            (serde_json::to_string_pretty(&v).expect("JSON") + "\n").as_bytes(),
        );
    }
    let ring = |bi: &bool| {
        if *bi {
            "bidirectional"
        } else {
            "unidirectional"
        }
    };
    let text = format!(
        "{} of {} bytes ({}) over axes {:?} of {} {:?} (wraparound {:?}): groups of {} chips, {} rings\n\
         simulated time   {}\n\
         algbw            {:.2} GB/s (busbw {:.2} GB/s)\n\
         model            {} ((n-1)/n V/W per ring stage, W = {} GB/s per link direction): {}\n\
         host time        {:.3} s, peak RSS {} MiB, {} instructions per chip program\n",
        op.name(),
        args.bytes,
        dtype.name(),
        axes,
        preset.name,
        topo.mesh,
        topo.wraparound,
        c.group_size(),
        c.bidirectional()
            .iter()
            .map(ring)
            .collect::<Vec<_>>()
            .join("/"),
        report::seconds(secs),
        args.bytes as f64 / secs / 1e9,
        args.bytes as f64 / secs * bus / 1e9,
        report::seconds(model),
        preset.ici_link_bytes_per_s / 1e9,
        if model > 0.0 {
            format!("{:.2}x", secs / model)
        } else {
            "nothing crosses a link".to_string()
        },
        host_seconds,
        super::peak_rss_bytes().unwrap_or(0) >> 20,
        c.program().instrs.len(),
    );
    super::super::write_output(None, text.as_bytes())
}
