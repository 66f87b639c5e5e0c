//! `tpuemu run`: assemble a program, put inputs in HBM, run it on a chip, report what it did.
//!
//! Arguments are bound by name: `--input NAME=FILE.safetensors[:TENSOR]` fills a buffer from a
//! tensor, `--alloc NAME=DTYPE:SHAPE` (or `NAME=BYTES`) makes a zeroed output buffer,
//! `--scalar NAME=VALUE` sets a scalar (an integer, or a float stored as f32 bits). `--output`
//! writes every `--alloc`ed buffer to a safetensors file with its dtype and shape.
//!
//! Every size from the command line is checked where it enters: an `--alloc` whose byte count
//! overflows or exceeds the chip's HBM, a `--scalar` outside 32 bits or f32, a name bound twice,
//! a file longer than its limit are errors naming the argument and the value. The run stops at
//! `--max-instructions` / `--max-cycles` with a fault naming the pc and the instruction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;
use tpuemu_emulator::{ArgInit, ChipPreset, Emulator, LaunchStats};
use tpuemu_isa::trace::{Trace, TraceEvent, TraceMeta};
use tpuemu_isa::{ArgKind, BufferId, Device, Program};

use super::chip::ChipArgs;
use super::{CliError, report};

/// Arguments of `tpuemu run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The program: assembly (`.s`) or a program binary.
    pub program: PathBuf,
    #[command(flatten)]
    pub chip: ChipArgs,
    /// Fill buffer NAME from a safetensors file (the tensor TENSOR, NAME, or the only one).
    #[arg(long, value_name = "NAME=FILE[:TENSOR]")]
    pub input: Vec<String>,
    /// Allocate a zeroed buffer NAME: `f32:256x256` (dtype and shape) or a byte count.
    #[arg(long, value_name = "NAME=DTYPE:SHAPE|BYTES")]
    pub alloc: Vec<String>,
    /// Set scalar NAME to an integer or a float (stored as f32 bits).
    #[arg(long, value_name = "NAME=VALUE")]
    pub scalar: Vec<String>,
    /// Write the allocated buffers to this safetensors file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write a Chrome trace (open in chrome://tracing, Perfetto or `tpuemu viz`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Only time the program: no data is computed.
    #[arg(long)]
    pub timing_only: bool,
    /// Run on this many cores of the chip (SPMD, same arguments): 1 to the chip's cores.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=16),
        allow_negative_numbers = true
    )]
    pub cores: u32,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// Reads a program from assembly or a binary.
pub fn load_program(path: &Path) -> Result<Program, CliError> {
    let bytes = read_bounded(path, MAX_PROGRAM_BYTES, "a program")?;
    if bytes.starts_with(b"TPUEMU\0P") {
        return tpuemu_isa::decode_program(&bytes).map_err(|source| CliError::Decode {
            path: path.into(),
            source,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Other(format!(
            "{}: neither assembly text nor a program binary",
            path.display()
        ))
    })?;
    tpuemu_isa::assemble(&text).map_err(|error| CliError::Asm {
        path: path.into(),
        source_line: text
            .lines()
            .nth(error.line.saturating_sub(1))
            .unwrap_or("")
            .to_string(),
        error: Box::new(error),
    })
}

fn split<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str), CliError> {
    match s.split_once('=') {
        Some((name, v)) if !name.trim().is_empty() => Ok((name.trim(), v)),
        _ => Err(CliError::Other(format!(
            "--{flag} {s:?}: expected NAME=..., with a non-empty NAME"
        ))),
    }
}

/// An output buffer's layout.
struct OutSpec {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    bytes: u64,
}

fn dtype_of(name: &str) -> Option<(safetensors::Dtype, usize)> {
    use safetensors::Dtype::*;
    Some(match name {
        "f32" => (F32, 4),
        "bf16" => (BF16, 2),
        "f16" => (F16, 2),
        "i32" => (I32, 4),
        "i64" => (I64, 8),
        "u8" | "bool" => (U8, 1),
        _ => return None,
    })
}

/// `--alloc NAME=DTYPE:SHAPE` or `NAME=BYTES`: the byte count (with checked arithmetic, at most
/// the chip's HBM) and the layout `--output` writes.
fn parse_alloc(arg: &str, v: &str, hbm_bytes: u64) -> Result<OutSpec, CliError> {
    let err = |why: String| CliError::Other(format!("--alloc {arg:?}: {why}"));
    let (dtype, esize, shape) =
        if v.trim().bytes().all(|b| b.is_ascii_digit()) && !v.trim().is_empty() {
            let bytes: u64 = v.trim().parse().map_err(|_| {
                err(format!(
                    "{v} bytes does not fit 64 bits; the chip has {hbm_bytes} bytes of HBM"
                ))
            })?;
            (safetensors::Dtype::U8, 1u64, vec![bytes])
        } else {
            let (dt, shape) = v.split_once(':').ok_or_else(|| {
                err("expected DTYPE:SHAPE like f32:256x256, or a byte count".into())
            })?;
            let (dtype, size) = dtype_of(dt.trim()).ok_or_else(|| {
                err(format!(
                    "unknown dtype `{dt}`; expected f32, bf16, f16, i32, i64, u8 or bool"
                ))
            })?;
            let dims = shape
                .split('x')
                .map(|d| {
                    d.trim().parse::<u64>().map_err(|_| {
                        err(format!(
                            "dimension `{d}` is not a whole number from 0 to 2^64 - 1"
                        ))
                    })
                })
                .collect::<Result<Vec<u64>, _>>()?;
            (dtype, size as u64, dims)
        };
    let bytes = shape
        .iter()
        .try_fold(esize as u128, |acc, &d| acc.checked_mul(d as u128))
        .filter(|&b| b <= hbm_bytes as u128)
        .ok_or_else(|| {
            err(format!(
                "{} elements of {esize} bytes are more than the chip's {hbm_bytes} bytes of HBM",
                shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(" x ")
            ))
        })? as u64;
    let shape = shape
        .into_iter()
        .map(|d| {
            usize::try_from(d).map_err(|_| err(format!("dimension {d} does not fit this host")))
        })
        .collect::<Result<_, _>>()?;
    Ok(OutSpec {
        dtype,
        shape,
        bytes,
    })
}

/// Reads at most `max` bytes of `path`; a longer file (or an endless one, `/dev/zero`) is an
/// error naming the limit.
pub fn read_bounded(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, CliError> {
    use std::io::Read;
    let io = |source| CliError::Io {
        path: path.into(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    f.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(CliError::Other(format!(
            "{}: more than {max} bytes; {what} is at most {max} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

fn read_input(arg: &str, v: &str, hbm_bytes: u64) -> Result<Vec<u8>, CliError> {
    let (file, tensor) = match v.rsplit_once(':') {
        Some((f, t)) if !f.is_empty() && !t.contains('/') && f.ends_with(".safetensors") => {
            (f, Some(t))
        }
        _ => (v, None),
    };
    // The header (at most 100 MB, the safetensors format's own limit) plus the chip's HBM.
    let bytes = read_bounded(
        Path::new(file),
        hbm_bytes.saturating_add(100_000_008),
        "an input file (a safetensors header and at most the chip's HBM)",
    )?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
        CliError::Other(format!(
            "--input {arg:?}: {file} is not a safetensors file: {e}"
        ))
    })?;
    let names = st.names();
    let name = match tensor {
        Some(t) => t.to_string(),
        None if names.len() == 1 => names[0].to_string(),
        None => {
            return Err(CliError::Other(format!(
                "--input {arg:?}: {file} holds {} tensors ({}); say which with {file}:NAME",
                names.len(),
                names
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    let t = st
        .tensor(&name)
        .map_err(|_| CliError::Other(format!("--input {arg:?}: {file} has no tensor `{name}`")))?;
    Ok(t.data().to_vec())
}

/// `--scalar NAME=VALUE`: an integer that fits 32 bits (-2^31 to 2^32 - 1, decimal or 0x hex)
/// or a finite f32 (`1.5`, `-2e-3`; `inf` and `nan` as words), stored as its bits.
fn parse_scalar(arg: &str, v: &str) -> Result<u32, CliError> {
    let t = v.trim();
    let err = |why: &str| CliError::Other(format!("--scalar {arg:?}: {why}"));
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let int = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(i128::from_str_radix(hex, 16))
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        Some(digits.parse::<i128>())
    } else {
        None
    };
    if let Some(parsed) = int {
        let i = parsed
            .ok()
            .map(|i| if neg { -i } else { i })
            .filter(|i| (i32::MIN as i128..=u32::MAX as i128).contains(i))
            .ok_or_else(|| {
                err(&format!(
                    "{t} does not fit a 32-bit register (-2147483648 to 4294967295)"
                ))
            })?;
        return Ok(i as u32);
    }
    let f: f32 = t
        .parse()
        .map_err(|_| err(&format!("`{t}` is neither an integer nor a number")))?;
    let word = t.trim_start_matches(['-', '+']).to_ascii_lowercase();
    let named = matches!(word.as_str(), "inf" | "infinity" | "nan");
    if !f.is_finite() && !named {
        return Err(err(&format!(
            "{t} is outside the f32 range (about ±3.4e38); write inf or nan for those"
        )));
    }
    Ok(f.to_bits())
}

/// Writes the `--alloc`ed buffers to a safetensors file, reading each from HBM in pieces (a
/// large sparse buffer is never held in host memory whole).
fn write_outputs(
    emu: &Emulator,
    path: &Path,
    outs: &[(String, OutSpec, BufferId)],
) -> Result<(), CliError> {
    use std::io::Write;
    let io = |source| CliError::Io {
        path: path.into(),
        source,
    };
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (name, spec, _) in outs {
        header.insert(
            name.clone(),
            json!({
                "dtype": serde_json::to_value(spec.dtype).expect("a dtype serializes"),
                "shape": spec.shape,
                "data_offsets": [at, at + spec.bytes],
            }),
        );
        at += spec.bytes;
    }
    let mut text = serde_json::to_string(&header).expect("JSON");
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    f.write_all(&(text.len() as u64).to_le_bytes())
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    const PIECE: u64 = 1 << 20;
    let mut buf = vec![0u8; PIECE as usize];
    for (name, spec, id) in outs {
        let mut off = 0u64;
        while off < spec.bytes {
            let n = PIECE.min(spec.bytes - off) as usize;
            emu.read(*id, off, &mut buf[..n], 0.0)
                .map_err(|e| CliError::Other(format!("reading output `{name}`: {e}")))?;
            f.write_all(&buf[..n]).map_err(io)?;
            off += n as u64;
        }
    }
    f.flush().map_err(io)
}

/// The largest program file `tpuemu run` and `tpuemu asm` read: 256 MiB (16 million
/// instructions in binary form).
pub const MAX_PROGRAM_BYTES: u64 = 256 << 20;

/// Runs `tpuemu run`.
pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let program = load_program(&args.program)?;
    let preset = args.chip.preset()?;
    let limits = args.chip.limits.limits()?;
    check_flags(args, &preset)?;
    let (inits, mut outs) = parse_bindings(args, preset.hbm_bytes)?;
    let bound = match_arguments(&program, inits)?;

    let emu = Emulator::new(preset.clone()).map_err(|e| CliError::Other(e.to_string()))?;
    emu.set_timing_only(args.timing_only);
    emu.set_profiling(args.trace.is_some());
    emu.set_run_limits(limits);
    let cores: Vec<u32> = (0..args.cores).collect();
    let start = std::time::Instant::now();
    let (stats, written) = emu
        .run_program_then(&program, &bound, &cores, |emu, ids| match &args.output {
            Some(path) => {
                let outs: Vec<(String, OutSpec, BufferId)> = std::mem::take(&mut outs)
                    .into_iter()
                    .map(|(name, spec)| {
                        let slot = program.arg_slot(&name).expect("bound above");
                        (name, spec, ids[slot].expect("a buffer"))
                    })
                    .collect();
                write_outputs(emu, path, &outs)
            }
            None => Ok(()),
        })
        .map_err(|e| CliError::Other(e.to_string()))?;
    let host_seconds = start.elapsed().as_secs_f64();
    written?;

    if let Some(path) = &args.trace {
        write_trace(&emu, &program, &preset, path)?;
    }
    print_report(args, &program, &preset, &stats, host_seconds)
}

/// Flag combinations the chip or the run cannot honour: more cores than the chip has,
/// `--output` with `--timing-only`.
fn check_flags(args: &RunArgs, preset: &ChipPreset) -> Result<(), CliError> {
    if args.cores > preset.cores_per_chip {
        return Err(CliError::Other(format!(
            "--cores {}: the {} has {} core{} per chip",
            args.cores,
            preset.name,
            preset.cores_per_chip,
            if preset.cores_per_chip == 1 { "" } else { "s" }
        )));
    }
    if args.output.is_some() && args.timing_only {
        return Err(CliError::Other(
            "--output needs the data a run computes; --timing-only computes none".into(),
        ));
    }
    Ok(())
}

/// Argument values by name, each with the flag that gave it.
type Bindings = HashMap<String, (String, ArgInit)>;

/// Parses `--input`, `--alloc` and `--scalar` into values by name (a name bound twice is an
/// error), and the `--alloc`ed buffers' layouts in order.
fn parse_bindings(
    args: &RunArgs,
    hbm: u64,
) -> Result<(Bindings, Vec<(String, OutSpec)>), CliError> {
    let mut inits: Bindings = HashMap::new();
    let mut outs: Vec<(String, OutSpec)> = Vec::new();
    let mut bind = |flag: &str, name: &str, arg: &str, init: ArgInit| {
        let given = format!("--{flag} {arg}");
        match inits.insert(name.to_string(), (given.clone(), init)) {
            Some((first, _)) => Err(CliError::Other(format!(
                "argument `{name}` is bound twice: {first} and {given}"
            ))),
            None => Ok(()),
        }
    };
    for i in &args.input {
        let (name, file) = split("input", i)?;
        bind("input", name, i, ArgInit::Bytes(read_input(i, file, hbm)?))?;
    }
    for a in &args.alloc {
        let (name, spec) = split("alloc", a)?;
        let out = parse_alloc(a, spec, hbm)?;
        bind("alloc", name, a, ArgInit::Zeroed(out.bytes))?;
        outs.push((name.to_string(), out));
    }
    for s in &args.scalar {
        let (name, v) = split("scalar", s)?;
        bind("scalar", name, s, ArgInit::Scalar(parse_scalar(s, v)?))?;
    }
    Ok((inits, outs))
}

/// The program's arguments in order, from the values bound by name: every argument needs a
/// value of its kind, and every value an argument.
fn match_arguments(program: &Program, mut inits: Bindings) -> Result<Vec<ArgInit>, CliError> {
    let mut bound = Vec::new();
    let mut missing = Vec::new();
    for a in &program.args {
        match inits.remove(&a.name) {
            Some((given, v)) => bound.push((given, v)),
            None => missing.push(format!("{} ({})", a.name, a.kind.name())),
        }
    }
    if !missing.is_empty() {
        return Err(CliError::Other(format!(
            "program `{}` needs arguments {}: bind buffers with --input NAME=FILE or --alloc NAME=DTYPE:SHAPE and scalars with --scalar NAME=VALUE",
            program.name,
            missing.join(", ")
        )));
    }
    let mut extra: Vec<&String> = inits.keys().collect();
    extra.sort();
    if let Some(extra) = extra.first() {
        let names: Vec<&str> = program.args.iter().map(|a| a.name.as_str()).collect();
        return Err(CliError::Other(format!(
            "program `{}` has no argument `{extra}` (it has: {})",
            program.name,
            names.join(", ")
        )));
    }
    for (a, (given, b)) in program.args.iter().zip(&bound) {
        let ok = matches!(
            (a.kind, b),
            (ArgKind::Scalar, ArgInit::Scalar(_))
                | (ArgKind::Buffer, ArgInit::Bytes(_) | ArgInit::Zeroed(_))
        );
        if !ok {
            return Err(CliError::Other(format!(
                "{given}: argument `{}` is a {}; bind it with {}",
                a.name,
                a.kind.name(),
                if a.kind == ArgKind::Buffer {
                    "--input or --alloc"
                } else {
                    "--scalar"
                }
            )));
        }
    }
    Ok(bound.into_iter().map(|(_, b)| b).collect())
}

/// Writes the run's events (counters left out) to `path` as a Chrome trace.
fn write_trace(
    emu: &Emulator,
    program: &Program,
    preset: &ChipPreset,
    path: &Path,
) -> Result<(), CliError> {
    let trace = Trace {
        meta: TraceMeta {
            label: format!("run {}", program.name),
            generation: preset.name.clone(),
            clock_hz: preset.clock_hz,
            peak_bf16_flops: preset.peak_bf16_flops(),
            hbm_bytes_per_s: preset.hbm_bytes_per_s,
            chips: 1,
            ..Default::default()
        },
        events: emu
            .drain_events()
            .into_iter()
            .filter(|e| !matches!(e, TraceEvent::Counter(_)))
            .collect(),
    };
    std::fs::write(path, tpuemu_isa::trace::chrome::to_chrome_json(&trace)).map_err(|source| {
        CliError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Prints what the run did: a table, or JSON with `--json`.
fn print_report(
    args: &RunArgs,
    program: &Program,
    preset: &ChipPreset,
    stats: &LaunchStats,
    host_seconds: f64,
) -> Result<(), CliError> {
    let summary = report::launch_summary(stats, preset, host_seconds);
    if args.json {
        let mut v = summary;
        v["program"] = json!(program.name);
        v["chip"] = json!(preset.name);
        super::write_output(
            None,
            (serde_json::to_string_pretty(&v).expect("JSON") + "\n").as_bytes(),
        )
    } else {
        let mut text = format!("program {} on {}\n", program.name, preset.name);
        text += &report::launch_table(stats, preset, host_seconds);
        if let Some(p) = &args.trace {
            text += &format!(
                "trace: {} (open with `tpuemu viz {}`, chrome://tracing or ui.perfetto.dev)\n",
                p.display(),
                p.display()
            );
        }
        super::write_output(None, text.as_bytes())
    }
}
