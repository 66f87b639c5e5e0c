//! `tpuemu bench collective`: one collective over a slice (or several slices joined by the
//! data-centre network), its simulated time against the scaling book's model
//! ([`super::collective_model`]), and what the emulation cost on the host.
//!
//! `--bytes N` is the size of the whole array: gathered (all-gather), before scattering
//! (reduce-scatter), reduced (all-reduce), or held by each chip (all-to-all). `algbw` is
//! `N / seconds`; `busbw` scales it by what every link must carry (NCCL's convention:
//! `(n-1)/n` for all-gather, reduce-scatter and all-to-all, `2(n-1)/n` for all-reduce).
//!
//! A timing-only run of a collective whose every chip does the same thing translated (rings
//! that close in one hop) is simulated on one chip for all
//! ([`tpuemu_emulator::Emulator::launch_symmetric`]); `--full` simulates every chip (the same
//! cycles, tested).

use clap::{Args, ValueEnum};
use serde_json::json;
use tpuemu_backend::DType;
use tpuemu_backend::kernels::collective::{CollectiveOp, CollectiveSpec, RingChoice};
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_isa::Device;

use super::super::chip::load_preset;
use super::super::{CliError, report};
use super::collective_model;

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
    /// The slice: GENERATION:AxBxC (`v5e:16x16`, `v5p:4x4x4`, `v4:4x4x8`) or FILE.toml:AxB, at
    /// most the generation's largest slice; `SxGENERATION:AxB` for S slices joined by the
    /// data-centre network (`4xv5e:16x16`), whose axis is the last.
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
    /// Simulate every chip, even where one chip would do for all.
    #[arg(long)]
    pub full: bool,
    /// Write a Chrome trace of the run.
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: super::super::chip::LimitArgs,
}

/// A parsed `--slice`.
pub struct SliceSpec {
    /// The chips' preset (with `--set` overrides).
    pub preset: ChipPreset,
    /// Mesh of one slice.
    pub dims: Vec<u32>,
    /// Slices joined by the data-centre network.
    pub slices: u32,
}

impl SliceSpec {
    /// The emulated device.
    pub fn device(&self) -> Result<Emulator, tpuemu_emulator::PresetError> {
        if self.slices > 1 {
            Emulator::multi_slice(self.preset.clone(), self.slices, &self.dims)
        } else {
            Emulator::slice(self.preset.clone(), &self.dims)
        }
    }
}

/// Parses `[Sx]GEN:AxBxC` into a preset (with `--set` overrides), the mesh of a slice and the
/// number of slices.
pub fn parse_slice(text: &str, set: &[String]) -> Result<SliceSpec, CliError> {
    let err = |m: String| CliError::Other(format!("--slice `{text}`: {m}"));
    let (gen_name, dims) = text
        .rsplit_once(':')
        .ok_or_else(|| err("expected GENERATION:AxBxC, e.g. v5e:16x16".into()))?;
    let (slices, gen_name) = match gen_name.split_once('x') {
        Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            match n.parse::<u32>() {
                Ok(v) if v > 0 => (v, rest),
                _ => {
                    return Err(err(format!(
                        "`{n}` is not a number of slices; expected e.g. 4xv5e:16x16"
                    )));
                }
            }
        }
        _ => (1, gen_name),
    };
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
    preset.check_slice(&dims).map_err(|e| err(e.to_string()))?;
    Ok(SliceSpec {
        preset,
        dims,
        slices,
    })
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

fn fill(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8 & 0x3f
        })
        .collect()
}

/// The collective `args` ask for, on `topo`.
fn spec_of(args: &CollectiveArgs, axes: &[usize]) -> Result<CollectiveSpec, CliError> {
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
    let mut spec = CollectiveSpec::new(op, dtype, args.bytes / esz, axes);
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
    Ok(spec)
}

/// Runs `tpuemu bench collective`.
pub fn run(args: &CollectiveArgs) -> Result<(), CliError> {
    let slice = parse_slice(&args.slice, &args.set)?;
    let other = |e: String| CliError::Other(e);
    let emu = slice
        .device()
        .map_err(|e| other(format!("--slice `{}`: {e}", args.slice)))?;
    let preset = slice.preset;
    let topo = emu.topology().clone();
    let axes = parse_axes(&args.axes, &topo.mesh)?;
    let spec = spec_of(args, &axes)?;
    emu.set_timing_only(args.timing_only);
    emu.set_profiling(args.trace.is_some());
    emu.set_run_limits(args.limits.limits()?);
    let fill_chip = |chip: u32, bytes: usize| fill(bytes, chip + 1);
    let filler: Option<&dyn Fn(u32, usize) -> Vec<u8>> =
        (!args.timing_only).then_some(&fill_chip as &dyn Fn(u32, usize) -> Vec<u8>);
    let sim = tpuemu_workloads::collective::simulate(&emu, &spec, filler, args.full)
        .map_err(|e| other(e.to_string()))?;
    let (c, stats, done, host_seconds) = (
        &sim.collective,
        &sim.stats,
        &sim.completion,
        sim.host_seconds,
    );
    let secs = stats.cycles() as f64 / preset.clock_hz;
    let n = c.group_size() as f64;
    let bus = match spec.op {
        CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
        _ => (n - 1.0) / n,
    };
    let model = collective_model::model(c, &topo, &preset, args.bytes);
    let simulated_chips = if stats.represented_by.is_some() {
        1
    } else {
        topo.num_chips()
    };
    let mut v = report::launch_summary(stats, &preset, host_seconds);
    let extra = json!({
        "op": spec.op.name(),
        "slice": args.slice,
        "generation": preset.name,
        "mesh": topo.mesh,
        "wraparound": topo.wraparound,
        "dcn_axis": topo.dcn_axis,
        "axes": axes,
        "group_size": c.group_size(),
        "bidirectional": c.bidirectional(),
        "parts": c.parts(),
        "dtype": spec.dtype.name(),
        "bytes": args.bytes,
        "input_bytes_per_chip": c.input_bytes(),
        "output_bytes_per_chip": c.output_bytes(),
        "scratch_bytes_per_chip": c.scratch_bytes(),
        "chunk_bytes": c.chunk_bytes(),
        "functional": !args.timing_only,
        "simulated_chips": simulated_chips,
        "algbw_bytes_per_s": args.bytes as f64 / secs,
        "busbw_bytes_per_s": args.bytes as f64 / secs * bus,
        "model_seconds": model.seconds,
        "model_formula": model.formula,
        // A group of one chip moves nothing over ICI: no model to compare with.
        "seconds_over_model": (model.seconds > 0.0).then(|| secs / model.seconds),
        "ici_link_bytes_per_s": preset.ici_link_bytes_per_s,
        "ici_hop_latency_ns": preset.ici_hop_latency_ns,
        "dcn_bytes_per_s": preset.dcn_bytes_per_s,
        "dcn_latency_ns": preset.dcn_latency_ns,
        "ici_bytes": done.counters.ici_bytes,
        "program_instructions": c.program().instrs.len(),
        "peak_rss_bytes": super::peak_rss_bytes(),
    });
    for (k, x) in extra.as_object().expect("object") {
        v[k] = x.clone();
    }
    if let Some(path) = &args.trace {
        let label = format!(
            "{} {} bytes over axes {:?}",
            spec.op.name(),
            args.bytes,
            axes
        );
        report::write_trace(path, &emu, &preset, topo.num_chips() as u32, label)?;
    }
    if args.json {
        return super::super::write_output(
            None,
            (serde_json::to_string_pretty(&v).expect("JSON") + "\n").as_bytes(),
        );
    }
    super::super::write_output(None, text(&v).as_bytes())
}

/// The report for people.
fn text(v: &serde_json::Value) -> String {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let rings: Vec<&str> = v["bidirectional"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|b| {
                    if b.as_bool() == Some(true) {
                        "bidirectional"
                    } else {
                        "unidirectional"
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let parts: Vec<String> = v["parts"]
        .as_array()
        .map(|a| a.iter().map(|p| format!("{}", p["axes"])).collect())
        .unwrap_or_default();
    let secs = f("seconds_simulated");
    let ratio = v["seconds_over_model"]
        .as_f64()
        .map_or("nothing crosses a link".to_string(), |r| format!("{r:.2}x"));
    format!(
        "{} of {} bytes ({}) over axes {} of {} {} (wraparound {}): groups of {} chips, {} rings, {} parts walking axes {}\n\
         simulated time   {}\n\
         algbw            {:.2} GB/s (busbw {:.2} GB/s)\n\
         model            {}: {}\n\
         host time        {:.3} s ({} of {} chips simulated), peak RSS {} MiB, {} instructions per chip program\n",
        v["op"].as_str().unwrap_or(""),
        v["bytes"],
        v["dtype"].as_str().unwrap_or(""),
        v["axes"],
        v["generation"].as_str().unwrap_or(""),
        v["mesh"],
        v["wraparound"],
        v["group_size"],
        rings.join("/"),
        parts.len().max(1),
        parts.join(" "),
        report::seconds(secs),
        f("algbw_bytes_per_s") / 1e9,
        f("busbw_bytes_per_s") / 1e9,
        v["model_formula"].as_str().unwrap_or(""),
        ratio,
        f("host_seconds"),
        v["simulated_chips"],
        v["mesh"].as_array().map_or(0, |m| m
            .iter()
            .map(|x| x.as_u64().unwrap_or(1))
            .product::<u64>()),
        v["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20,
        v["program_instructions"],
    )
}
