//! `tpuemu bench host`: how long this machine takes to emulate a training step, against PyTorch
//! CPU eager running the same step in float32 on the same machine, side by side.
//!
//! PyTorch runs `torch_step.py` (in this folder: the backend's workload written operator for
//! operator in PyTorch) in child processes from the project's Python environment, one per
//! thread count asked for (`--torch-threads`, default 1 and 2). Each round measures, for every
//! mode, PyTorch's step at every thread count and then the emulated step right after, so both
//! see the same load on a shared machine. The reference of a round is PyTorch's fastest thread
//! count in that round (on a loaded machine two OpenMP threads can be several times slower than
//! one); the report gives each round's ratio and the medians.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use clap::Args;
use serde_json::{Value, json};
use tpuemu_workloads::{MlpConfig, RunMode, Size, TransformerConfig, Workload};

use super::super::CliError;
use super::super::chip::ChipArgs;
use super::eager::{ModeArg, WorkloadArg, measure};

/// The PyTorch side of the comparison.
const TORCH_STEP: &str = include_str!("torch_step.py");

/// Arguments of `tpuemu bench host`.
#[derive(Args, Debug)]
pub struct HostArgs {
    /// The model.
    #[arg(long, value_enum, default_value = "transformer-block")]
    pub workload: WorkloadArg,
    /// Execution modes to measure (repeat the flag; default: strict, debug, defer, compile).
    #[arg(long, value_enum)]
    pub mode: Vec<ModeArg>,
    #[command(flatten)]
    pub chip: ChipArgs,
    /// The small configuration of the model, for quick checks.
    #[arg(long)]
    pub small: bool,
    /// Rounds (each measures PyTorch then tpuemu for every mode); the medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Steps per measurement (their mean is the round's figure).
    #[arg(long, default_value_t = 1)]
    pub steps: usize,
    /// PyTorch computes the backward with autograd instead of the same backward operators.
    #[arg(long)]
    pub torch_autograd: bool,
    /// PyTorch's intra-op thread counts to measure (the fastest is the reference).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1u32, 2])]
    pub torch_threads: Vec<u32>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// The Python interpreter: `TPUEMU_PYTHON`, else the project's environment
/// (`~/.cache/tpuemu/venv`), else `python3`.
pub fn python() -> String {
    if let Ok(p) = std::env::var("TPUEMU_PYTHON") {
        return p;
    }
    if let Some(home) = std::env::var_os("HOME") {
        let venv = std::path::Path::new(&home).join(".cache/tpuemu/venv/bin/python");
        if venv.exists() {
            return venv.to_string_lossy().into_owned();
        }
    }
    "python3".into()
}

/// A PyTorch process holding the model, ready to run steps.
struct Torch {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    version: String,
    threads: u64,
}

impl Torch {
    fn start(
        workload: Workload,
        size: Size,
        autograd: bool,
        threads: u32,
    ) -> Result<Self, CliError> {
        let config = match (workload, size) {
            (Workload::Mlp, Size::Full) => json!(MlpConfig::bench()),
            (Workload::Mlp, Size::Small) => json!(MlpConfig::small()),
            (Workload::TransformerBlock, Size::Full) => json!(TransformerConfig::demo()),
            (Workload::TransformerBlock, Size::Small) => json!(TransformerConfig::small()),
            (_, Size::Shape { width, seq }) => json!(
                TransformerConfig::shaped(width, seq)
                    .map_err(|e| CliError::Other(e.to_string()))?
            ),
        };
        let req = json!({"workload": workload.name(), "config": config, "autograd": autograd,
                         "threads": threads});
        let py = python();
        let mut child = Command::new(&py)
            .args(["-c", TORCH_STEP, &req.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| CliError::Other(format!("cannot run {py} for PyTorch: {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut t = Torch {
            child,
            stdin,
            stdout,
            version: String::new(),
            threads: 0,
        };
        let ready = t.line()?;
        t.version = ready["torch"].as_str().unwrap_or("?").to_string();
        t.threads = ready["threads"].as_u64().unwrap_or(0);
        Ok(t)
    }

    /// The next JSON line, or the child's error output.
    fn line(&mut self) -> Result<Value, CliError> {
        let mut s = String::new();
        let n = self
            .stdout
            .read_line(&mut s)
            .map_err(|e| CliError::Other(format!("PyTorch process: {e}")))?;
        if n == 0 {
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(CliError::Other(format!(
                "the PyTorch process ({}) ended: {} (set TPUEMU_PYTHON to a Python with torch)",
                python(),
                err.trim()
            )));
        }
        serde_json::from_str(&s)
            .map_err(|e| CliError::Other(format!("PyTorch process printed `{}`: {e}", s.trim())))
    }

    /// Runs `steps` steps; returns their mean wall seconds and the last loss.
    fn steps(&mut self, steps: usize) -> Result<(f64, f64), CliError> {
        writeln!(self.stdin, "{steps}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| CliError::Other(format!("PyTorch process: {e}")))?;
        let v = self.line()?;
        let secs: Vec<f64> = v["seconds"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        if secs.is_empty() {
            return Err(CliError::Other(format!("PyTorch process printed {v}")));
        }
        let mean = secs.iter().sum::<f64>() / secs.len() as f64;
        Ok((mean, v["loss"].as_f64().unwrap_or(f64::NAN)))
    }
}

impl Drop for Torch {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin);
        let _ = self.child.wait();
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// One mode's measurements over the rounds.
struct ModeRuns {
    mode: ModeArg,
    /// PyTorch's fastest time of each round.
    torch: Vec<f64>,
    /// PyTorch's time of each round at each thread count.
    torch_by_threads: Vec<Vec<f64>>,
    ours: Vec<f64>,
    loss: f32,
}

impl ModeRuns {
    fn ratios(&self) -> Vec<f64> {
        self.ours
            .iter()
            .zip(&self.torch)
            .map(|(o, t)| o / t)
            .collect()
    }
}

/// Runs `tpuemu bench host`.
pub fn run(args: &HostArgs) -> Result<(), CliError> {
    if args.rounds == 0 || args.steps == 0 {
        return Err(CliError::Other(
            "--rounds and --steps must be at least 1".into(),
        ));
    }
    let workload: Workload = args.workload.into();
    let size = if args.small { Size::Small } else { Size::Full };
    let modes = if args.mode.is_empty() {
        vec![
            ModeArg::Strict,
            ModeArg::Debug,
            ModeArg::Defer,
            ModeArg::Compile,
        ]
    } else {
        args.mode.clone()
    };
    if args.torch_threads.is_empty() || args.torch_threads.contains(&0) {
        return Err(CliError::Other(
            "--torch-threads: one or more thread counts of at least 1".into(),
        ));
    }
    let mut torches = args
        .torch_threads
        .iter()
        .map(|t| Torch::start(workload, size, args.torch_autograd, *t))
        .collect::<Result<Vec<_>, _>>()?;
    let mut runs: Vec<ModeRuns> = modes
        .iter()
        .map(|m| ModeRuns {
            mode: *m,
            torch: Vec::new(),
            torch_by_threads: vec![Vec::new(); torches.len()],
            ours: Vec::new(),
            loss: f32::NAN,
        })
        .collect();
    let mut torch_loss = f64::NAN;
    for _ in 0..args.rounds {
        for r in &mut runs {
            let mut t = f64::INFINITY;
            for (i, torch) in torches.iter_mut().enumerate() {
                let (ti, l) = torch.steps(args.steps)?;
                torch_loss = l;
                r.torch_by_threads[i].push(ti);
                t = t.min(ti);
            }
            let rep = measure(
                &args.chip,
                workload,
                size,
                RunMode::from(r.mode),
                args.steps,
                None,
            )?;
            r.torch.push(t);
            r.ours.push(rep.host_seconds);
            r.loss = rep.loss;
        }
    }
    let chip = args.chip.preset()?.name;
    if args.json {
        let v = json!({
            "workload": workload.name(),
            "chip": chip,
            "rounds": args.rounds,
            "steps": args.steps,
            "torch": {"version": torches[0].version,
                      "threads": torches.iter().map(|t| t.threads).collect::<Vec<_>>(),
                      "autograd": args.torch_autograd, "loss": torch_loss},
            "modes": runs.iter().map(|r| json!({
                "mode": RunMode::from(r.mode).name(),
                "host_seconds": r.ours,
                "torch_seconds": r.torch,
                "torch_seconds_by_threads": r.torch_by_threads,
                "ratios": r.ratios(),
                "median_host_seconds": median(&r.ours),
                "median_torch_seconds": median(&r.torch),
                "median_ratio": median(&r.ratios()),
                "loss": r.loss,
            })).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&v).expect("JSON");
        return super::super::write_output(None, format!("{text}\n").as_bytes());
    }
    let mut s = format!(
        "{} training step on {}: host seconds per step, {} round(s) x {} step(s), medians\n",
        workload.name(),
        chip,
        args.rounds,
        args.steps
    );
    let threads: Vec<String> = torches.iter().map(|t| t.threads.to_string()).collect();
    s += &format!(
        "PyTorch {} CPU eager float32{}, loss {:.4}; reference: its fastest of {} thread(s)\n",
        torches[0].version,
        if args.torch_autograd {
            " (autograd)"
        } else {
            ""
        },
        torch_loss,
        threads.join(" or ")
    );
    s += "mode       tpuemu (bf16)   PyTorch   tpuemu/PyTorch   per round   PyTorch by threads\n";
    for r in &runs {
        let per: Vec<String> = r.ratios().iter().map(|x| format!("{x:.2}")).collect();
        let by: Vec<String> = r
            .torch_by_threads
            .iter()
            .zip(&threads)
            .map(|(v, t)| format!("{t}: {:.3} s", median(v)))
            .collect();
        s += &format!(
            "{:<9}  {:>10.3} s  {:>7.3} s  {:>12.2}x     {}   {}\n",
            RunMode::from(r.mode).name(),
            median(&r.ours),
            median(&r.torch),
            median(&r.ratios()),
            per.join(" "),
            by.join(", ")
        );
    }
    super::super::write_output(None, s.as_bytes())
}
