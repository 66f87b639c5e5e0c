//! `tpuemu run`: assemble a program, put inputs in HBM, run it on a chip, report what it did.
//!
//! Arguments are bound by name: `--input NAME=FILE.safetensors[:TENSOR]` fills a buffer from a
//! tensor, `--alloc NAME=DTYPE:SHAPE` (or `NAME=BYTES`) makes a zeroed output buffer,
//! `--scalar NAME=VALUE` sets a scalar (an integer, or a float stored as f32 bits). `--output`
//! writes every `--alloc`ed buffer to a safetensors file with its dtype and shape.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;
use tpuemu_emulator::{ArgInit, Emulator};
use tpuemu_isa::trace::{Trace, TraceEvent, TraceMeta};
use tpuemu_isa::{ArgKind, Device, Program};

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
    /// Run on this many cores of the chip (SPMD, same arguments).
    #[arg(long, default_value_t = 1)]
    pub cores: u32,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// Reads a program from assembly or a binary.
pub fn load_program(path: &Path) -> Result<Program, CliError> {
    let bytes = std::fs::read(path).map_err(|source| CliError::Io {
        path: path.into(),
        source,
    })?;
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
    s.split_once('=')
        .ok_or_else(|| CliError::Other(format!("--{flag} `{s}`: expected NAME=...")))
}

/// An output buffer's layout.
struct OutSpec {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
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

fn parse_alloc(v: &str) -> Result<(u64, OutSpec), CliError> {
    if let Ok(bytes) = v.parse::<u64>() {
        return Ok((
            bytes,
            OutSpec {
                dtype: safetensors::Dtype::U8,
                shape: vec![bytes as usize],
            },
        ));
    }
    let bad = || {
        CliError::Other(format!(
            "--alloc `{v}`: expected DTYPE:SHAPE like f32:256x256, or a byte count"
        ))
    };
    let (dt, shape) = v.split_once(':').ok_or_else(bad)?;
    let (dtype, size) = dtype_of(dt).ok_or_else(bad)?;
    let shape: Vec<usize> = shape
        .split('x')
        .map(|d| d.trim().parse::<usize>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let bytes = shape.iter().product::<usize>() as u64 * size as u64;
    Ok((bytes, OutSpec { dtype, shape }))
}

fn read_input(v: &str) -> Result<Vec<u8>, CliError> {
    let (file, tensor) = match v.rsplit_once(':') {
        Some((f, t)) if !f.is_empty() && !t.contains('/') && f.ends_with(".safetensors") => {
            (f, Some(t))
        }
        _ => (v, None),
    };
    let bytes = std::fs::read(file).map_err(|source| CliError::Io {
        path: file.into(),
        source,
    })?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| CliError::Other(format!("{file}: not a safetensors file: {e}")))?;
    let names = st.names();
    let name = match tensor {
        Some(t) => t.to_string(),
        None if names.len() == 1 => names[0].to_string(),
        None => {
            return Err(CliError::Other(format!(
                "{file} holds {} tensors ({}); say which with {file}:NAME",
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
        .map_err(|_| CliError::Other(format!("{file} has no tensor `{name}`")))?;
    Ok(t.data().to_vec())
}

fn parse_scalar(v: &str) -> Result<u32, CliError> {
    if let Ok(i) = v.parse::<i64>()
        && (i32::MIN as i64..=u32::MAX as i64).contains(&i)
    {
        return Ok(i as u32);
    }
    v.parse::<f32>().map(f32::to_bits).map_err(|_| {
        CliError::Other(format!(
            "--scalar value `{v}` is neither an integer nor a float"
        ))
    })
}

/// Runs `tpuemu run`.
pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let program = load_program(&args.program)?;
    let preset = args.chip.preset()?;
    let mut inits: HashMap<String, ArgInit> = HashMap::new();
    let mut outs: Vec<(String, OutSpec)> = Vec::new();
    for i in &args.input {
        let (name, file) = split("input", i)?;
        inits.insert(name.to_string(), ArgInit::Bytes(read_input(file)?));
    }
    for a in &args.alloc {
        let (name, spec) = split("alloc", a)?;
        let (bytes, out) = parse_alloc(spec)?;
        inits.insert(name.to_string(), ArgInit::Zeroed(bytes));
        outs.push((name.to_string(), out));
    }
    for s in &args.scalar {
        let (name, v) = split("scalar", s)?;
        inits.insert(name.to_string(), ArgInit::Scalar(parse_scalar(v)?));
    }
    let mut bound = Vec::new();
    let mut missing = Vec::new();
    for a in &program.args {
        match inits.remove(&a.name) {
            Some(v) => bound.push(v),
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
    if let Some(extra) = inits.keys().next() {
        let names: Vec<&str> = program.args.iter().map(|a| a.name.as_str()).collect();
        return Err(CliError::Other(format!(
            "program `{}` has no argument `{extra}` (it has: {})",
            program.name,
            names.join(", ")
        )));
    }
    for (a, b) in program.args.iter().zip(&bound) {
        let ok = matches!(
            (a.kind, b),
            (ArgKind::Scalar, ArgInit::Scalar(_))
                | (ArgKind::Buffer, ArgInit::Bytes(_) | ArgInit::Zeroed(_))
        );
        if !ok {
            return Err(CliError::Other(format!(
                "argument `{}` is a {}",
                a.name,
                a.kind.name()
            )));
        }
    }

    let emu = Emulator::new(preset.clone()).map_err(|e| CliError::Other(e.to_string()))?;
    emu.set_timing_only(args.timing_only);
    emu.set_profiling(args.trace.is_some());
    if args.cores == 0 || args.cores > preset.cores_per_chip {
        return Err(CliError::Other(format!(
            "--cores {}: the {} has {} cores per chip",
            args.cores, preset.name, preset.cores_per_chip
        )));
    }
    let cores: Vec<u32> = (0..args.cores).collect();
    let start = std::time::Instant::now();
    let result = emu
        .run_program(&program, &bound, &cores, !args.timing_only)
        .map_err(|e| CliError::Other(e.to_string()))?;
    let host_seconds = start.elapsed().as_secs_f64();

    if let Some(path) = &args.trace {
        let trace = Trace {
            meta: TraceMeta {
                label: format!("run {}", program.name),
                generation: preset.name.clone(),
                clock_hz: preset.clock_hz,
                peak_bf16_flops: preset.peak_bf16_flops(),
                hbm_bytes_per_s: preset.hbm_bytes_per_s,
                chips: 1,
            },
            events: emu
                .drain_events()
                .into_iter()
                .filter(|e| !matches!(e, TraceEvent::Counter(_)))
                .collect(),
        };
        std::fs::write(path, tpuemu_isa::trace::chrome::to_chrome_json(&trace)).map_err(
            |source| CliError::Io {
                path: path.clone(),
                source,
            },
        )?;
    }
    if let Some(path) = &args.output {
        let mut views = Vec::new();
        for (name, spec) in &outs {
            let slot = program.arg_slot(name).expect("bound above");
            views.push((name.clone(), spec, &result.buffers[slot]));
        }
        let tensors: Vec<(String, safetensors::tensor::TensorView)> = views
            .iter()
            .map(|(n, s, data)| {
                safetensors::tensor::TensorView::new(s.dtype, s.shape.clone(), data)
                    .map(|v| (n.clone(), v))
                    .map_err(|e| CliError::Other(format!("output `{n}`: {e}")))
            })
            .collect::<Result<_, _>>()?;
        let bytes = safetensors::serialize(tensors, None)
            .map_err(|e| CliError::Other(format!("writing {}: {e}", path.display())))?;
        std::fs::write(path, bytes).map_err(|source| CliError::Io {
            path: path.clone(),
            source,
        })?;
    }

    let summary = report::launch_summary(&result.stats, &preset, host_seconds);
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
        text += &report::launch_table(&result.stats, &preset, host_seconds);
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
