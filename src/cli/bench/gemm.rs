//! `tpuemu bench gemm`: generate the GEMM kernel, run it on the emulated chip, print the figures.
//!
//! `mxu_cycles` counts from the first weight-load cycle to the last result leaving an array, as
//! SCALE-Sim counts compute cycles; every figure comes from running the generated program.
//! `host_seconds` is the emulation of one launch alone (not data generation or upload), the median
//! of `launches` launches (`--repeat`, or as many as fit in a quarter second).

use std::time::Instant;

use clap::{Args, ValueEnum};
use serde_json::json;
use tpuemu_backend::kernels::gemm::{self, GemmSpec};
use tpuemu_emulator::{Emulator, LaunchStats, MxuModel};
use tpuemu_isa::ops::{MxuFmt, Precision};
use tpuemu_isa::{BufferId, CoreRef, Device, KernelArg, Launch, LaunchTarget, ProgramId};

use super::super::chip::ChipArgs;
use super::super::{CliError, report};
use super::numpy::Numpy;

/// Without `--repeat`: launches until this much host time was spent emulating...
const AUTO_BUDGET_SECONDS: f64 = 0.25;
/// ...or this many launches ran.
const AUTO_MAX_LAUNCHES: u32 = 1000;
/// With `--numpy`, the pause before each timed run (numpy's product, the launch): numpy's BLAS
/// threads busy-wait for a while after a product (OpenBLAS's `THREAD_TIMEOUT`), as the
/// emulator's threads do after a launch; on a 2-core machine either would take a core from the
/// other's timed run, so each starts once the other has gone quiet.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(250);

/// Without `--repeat`, `--numpy` runs at least this many launches (each after a numpy product).
const NUMPY_MIN_LAUNCHES: u32 = 5;

/// The median (the upper one of an even count).
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Input dtype.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Dtype {
    /// bfloat16 inputs (one pass).
    Bf16,
    /// f32 inputs (passes per --precision).
    F32,
}

/// Matmul precision for f32 inputs, as `torch.tpu`/JAX name them.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Prec {
    /// One bf16 pass.
    Default,
    /// Three bf16 passes.
    High,
    /// Six bf16 passes.
    Highest,
}

/// Arguments of `tpuemu bench gemm`.
#[derive(Args, Debug)]
pub struct GemmArgs {
    /// Rows of A and C. (1 to 2^32 - 1; the operands must fit the chip's HBM).
    #[arg(
        long,
        default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..),
        allow_negative_numbers = true
    )]
    pub m: u32,
    /// Columns of B and C. (1 to 2^32 - 1; the operands must fit the chip's HBM).
    #[arg(
        long,
        default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..),
        allow_negative_numbers = true
    )]
    pub n: u32,
    /// Columns of A, rows of B. (1 to 2^32 - 1; the operands must fit the chip's HBM).
    #[arg(
        long,
        default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..),
        allow_negative_numbers = true
    )]
    pub k: u32,
    #[command(flatten)]
    pub chip: ChipArgs,
    /// Input dtype.
    #[arg(long, value_enum, default_value = "bf16")]
    pub dtype: Dtype,
    /// Precision of f32 matmuls.
    #[arg(long, value_enum, default_value = "default")]
    pub precision: Prec,
    /// Time only: no data is generated or computed.
    #[arg(long)]
    pub timing_only: bool,
    /// Also time numpy's f32 matmul of the same size (the project's Python environment, or
    /// `TPUEMU_PYTHON`), one product before each launch, side by side; the ratio is the median
    /// of the launches' ratios (at least 5 launches).
    #[arg(long)]
    pub numpy: bool,
    /// Run the launch this many times and report the median host time. Default: as many
    /// launches as fit in a quarter second of emulation (at most 1000; one with `--trace`), so
    /// short runs report a steady figure rather than a cold first launch. 1 to 1000000.
    #[arg(
        long,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000),
        allow_negative_numbers = true
    )]
    pub repeat: Option<u32>,
    /// Write a Chrome trace of the run.
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

fn fill(n: usize, fmt: MxuFmt, seed: u32) -> Vec<u8> {
    let mut x = seed;
    let mut next = move || {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        ((x >> 8) as f32 / (1u32 << 24) as f32) * 2.0 - 1.0
    };
    match fmt {
        MxuFmt::Bf16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(next()).to_le_bytes())
            .collect(),
        MxuFmt::F32 => (0..n).flat_map(|_| next().to_le_bytes()).collect(),
    }
}

/// Runs `tpuemu bench gemm`.
pub fn run(args: &GemmArgs) -> Result<(), CliError> {
    let (preset, emu) = args.chip.emulator()?;
    let (fmt, prec) = match (args.dtype, args.precision) {
        (Dtype::Bf16, _) => (MxuFmt::Bf16, Precision::P1),
        (Dtype::F32, Prec::Default) => (MxuFmt::F32, Precision::P1),
        (Dtype::F32, Prec::High) => (MxuFmt::F32, Precision::P3),
        (Dtype::F32, Prec::Highest) => (MxuFmt::F32, Precision::P6),
    };
    // A (m x k), B (k x n) and the f32 result (m x n) must fit HBM: checked before anything is
    // planned or allocated, in 128 bits.
    let (m, n, k) = (args.m as u128, args.n as u128, args.k as u128);
    let need = (m * k + k * n) * fmt.bytes() as u128 + m * n * 4;
    if need > preset.hbm_bytes as u128 {
        return Err(CliError::Other(format!(
            "--m {} --n {} --k {}: the operands and result need {need} bytes of HBM; the {} has {}",
            args.m, args.n, args.k, preset.name, preset.hbm_bytes
        )));
    }
    emu.set_timing_only(args.timing_only);
    emu.set_profiling(args.trace.is_some());
    let info = emu.topology().chips[0].clone();
    // Split the rows over the chip's cores when they divide evenly (megacore chips).
    let cores = if args.m.is_multiple_of(preset.cores_per_chip * 8) {
        preset.cores_per_chip
    } else {
        1
    };
    let rows = args.m / cores;
    let spec = GemmSpec {
        m: rows,
        n: args.n,
        k: args.k,
        fmt,
        prec,
    };
    let resident = preset.mxu_model == MxuModel::ScaleSim;
    let plan = gemm::plan(&spec, &info, resident).map_err(|e| CliError::Other(e.to_string()))?;
    let program = gemm::build(&spec, &plan, &info).map_err(|e| CliError::Other(e.to_string()))?;
    let pid = emu
        .load(&program)
        .map_err(|e| CliError::Other(e.to_string()))?;

    let (targets, bufs) = operands(&emu, args, fmt, rows, cores)?;
    let (max_launches, budget) = match (args.repeat, &args.trace) {
        (Some(n), _) => (n, f64::INFINITY),
        (None, Some(_)) => (1, f64::INFINITY),
        (None, None) => (AUTO_MAX_LAUNCHES, AUTO_BUDGET_SECONDS),
    };
    let min_launches = match (args.numpy, args.repeat) {
        (true, None) => NUMPY_MIN_LAUNCHES.min(max_launches),
        _ => 1,
    };
    let mut numpy = match args.numpy {
        true => Some(Numpy::start(args.m, args.n, args.k)?),
        false => None,
    };
    let Timed {
        times,
        numpy_times,
        stats,
    } = time_launches(
        &emu,
        pid,
        &targets,
        numpy.as_mut(),
        (min_launches, max_launches),
        budget,
    )?;
    let launches = times.len();
    let ratios: Vec<f64> = times.iter().zip(&numpy_times).map(|(t, n)| t / n).collect();
    let host_seconds = median(&times);

    let cycles = stats.cycles();
    let secs = cycles as f64 / preset.clock_hz;
    let flops = 2.0 * args.m as f64 * args.n as f64 * args.k as f64;
    let peak = preset.peak_bf16_flops();
    let mut v = report::launch_summary(&stats, &preset, host_seconds);
    let extra = json!({
        "chip": preset.name,
        "m": args.m, "n": args.n, "k": args.k,
        "dtype": format!("{fmt}"),
        "passes": prec.passes(),
        "cores": cores,
        "tiles": {"tm": plan.tm, "tn": plan.tn, "tk": plan.tk, "resident": plan.resident},
        "functional": !args.timing_only,
        "mxu_cycles": stats.mxu_cycles(),
        "flops": flops,
        "utilization": flops / secs / peak,
        "peak_bf16_flops": peak,
        "program_instructions": program.instrs.len(),
        "launches": launches,
        "peak_rss_bytes": super::peak_rss_bytes(),
    });
    for (k, x) in extra.as_object().expect("object") {
        v[k] = x.clone();
    }
    if let Some(np) = &numpy {
        v["numpy_version"] = json!(np.version);
        v["numpy_seconds"] = json!(median(&numpy_times));
        v["numpy_seconds_each"] = json!(numpy_times);
        v["host_seconds_each"] = json!(times);
        v["host_over_numpy"] = json!(median(&ratios));
        v["host_over_numpy_each"] = json!(ratios);
    }
    if let Some(path) = &args.trace {
        let label = format!("gemm {}x{}x{}", args.m, args.n, args.k);
        report::write_trace(path, &emu, &preset, 1, label)?;
    }
    for b in bufs {
        let _ = emu.free(b);
    }
    if args.json {
        return super::super::write_output(
            None,
            (serde_json::to_string_pretty(&v).expect("JSON") + "\n").as_bytes(),
        );
    }
    let mut text = format!(
        "GEMM {}x{}x{} {} on {} ({} core{}, tiles {}x{}x{}{})\n",
        args.m,
        args.n,
        args.k,
        fmt,
        preset.name,
        cores,
        if cores > 1 { "s" } else { "" },
        plan.tm,
        plan.tn,
        plan.tk,
        if plan.resident {
            ", operands resident"
        } else {
            ""
        }
    );
    text += &format!(
        "mxu_cycles       {}\nutilization      {:.1}% of {:.1} TFLOP/s\n",
        stats.mxu_cycles(),
        100.0 * flops / secs / peak,
        peak / 1e12
    );
    text += &report::launch_table(&stats, &preset, host_seconds);
    text += &format!("host time is the median of {launches} launch(es)\n");
    if let Some(np) = &numpy {
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        text += &format!(
            "numpy {} f32 matmul {:.3} s, median of {} run before each launch; emulation takes {:.2}x (median of the launches' ratios: {})\n",
            np.version,
            median(&numpy_times),
            numpy_times.len(),
            median(&ratios),
            each.join(" ")
        );
    }
    super::super::write_output(None, text.as_bytes())
}

/// Allocates B (shared) and, per core, its rows of A and of the result, filled unless timing
/// only; returns the launch targets and every buffer (to free).
fn operands(
    emu: &Emulator,
    args: &GemmArgs,
    fmt: MxuFmt,
    rows: u32,
    cores: u32,
) -> Result<(Vec<LaunchTarget>, Vec<BufferId>), CliError> {
    let esz = fmt.bytes() as u64;
    let dev = |e: tpuemu_isa::DeviceError| CliError::Other(e.to_string());
    let b = emu
        .alloc(0, args.k as u64 * args.n as u64 * esz)
        .map_err(dev)?;
    if !args.timing_only {
        emu.write(b, 0, &fill(args.k as usize * args.n as usize, fmt, 2), 0.0)
            .map_err(dev)?;
    }
    let mut targets = Vec::new();
    let mut bufs: Vec<BufferId> = vec![b];
    for c in 0..cores {
        let a = emu
            .alloc(0, rows as u64 * args.k as u64 * esz)
            .map_err(dev)?;
        let out = emu.alloc(0, rows as u64 * args.n as u64 * 4).map_err(dev)?;
        if !args.timing_only {
            emu.write(
                a,
                0,
                &fill(rows as usize * args.k as usize, fmt, 1 + c),
                0.0,
            )
            .map_err(dev)?;
        }
        bufs.extend([a, out]);
        targets.push(LaunchTarget {
            core: CoreRef { chip: 0, core: c },
            args: vec![
                KernelArg::Buffer(a),
                KernelArg::Buffer(b),
                KernelArg::Buffer(out),
                KernelArg::Scalar(0),
                KernelArg::Scalar(0),
                KernelArg::Scalar(0),
            ],
        });
    }
    Ok((targets, bufs))
}

/// What [`time_launches`] measured: host seconds per launch, numpy's seconds before each (with
/// `--numpy`), and the last launch's statistics.
struct Timed {
    times: Vec<f64>,
    numpy_times: Vec<f64>,
    stats: LaunchStats,
}

/// Launches the GEMM program `launches.0` to `launches.1` times (more while under `budget`
/// seconds of host time), timing each, after a numpy product when `numpy` is given.
fn time_launches(
    emu: &Emulator,
    program: ProgramId,
    targets: &[LaunchTarget],
    mut numpy: Option<&mut Numpy>,
    (min_launches, max_launches): (u32, u32),
    budget: f64,
) -> Result<Timed, CliError> {
    let dev = |e: tpuemu_isa::DeviceError| CliError::Other(e.to_string());
    let mut times = Vec::new();
    let mut numpy_times = Vec::new();
    let mut stats = None;
    let mut spent = 0.0;
    while times.len() < max_launches as usize
        && (spent < budget || times.len() < min_launches as usize)
    {
        if let Some(np) = numpy.as_deref_mut() {
            std::thread::sleep(SETTLE);
            numpy_times.push(np.seconds()?);
            std::thread::sleep(SETTLE);
        }
        let submit = emu.synchronize().map_err(dev)?.end_ns;
        let t0 = Instant::now();
        let id = emu
            .launch(&Launch {
                program,
                targets: targets.to_vec(),
                submit_ns: submit,
                op_id: None,
                group_id: None,
            })
            .map_err(dev)?;
        emu.wait(id).map_err(dev)?;
        let t = t0.elapsed().as_secs_f64();
        spent += t;
        times.push(t);
        stats = emu.stats(id);
    }
    Ok(Timed {
        times,
        numpy_times,
        stats: stats.expect("at least one launch"),
    })
}
