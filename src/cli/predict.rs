//! `tpuemu predict`: a large model's training step on a slice — step time, tokens/s/chip, MFU,
//! where the time goes, per-chip HBM and whether it fits — from the backend's own kernels and
//! collectives run in timing-only mode (`tpuemu_workloads::llm::predict`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use tpuemu_backend::runtime::Runtime;
use tpuemu_dtensor::DeviceMesh;
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_isa::Device;
use tpuemu_workloads::llm::comm::CommTimer;
use tpuemu_workloads::llm::predict::{Prediction, predict};
use tpuemu_workloads::llm::{ModelConfig, Parallel, Remat, StepSpec};

use super::CliError;
use super::chip::load_preset;

/// Arguments of `tpuemu predict`.
#[derive(Args, Debug)]
pub struct PredictArgs {
    /// A built-in model (llama2-7b, llama2-70b, llama3.1-8b, llama3.1-70b, llama3.1-405b,
    /// qwen3-8b, mixtral-8x7b) or a TOML file with layers, d_model, heads, kv_heads, ffn, vocab
    /// [, head_dim, experts, top_k, tied_embeddings, qk_norm]
    #[arg(long, required_unless_present = "table")]
    pub model: Option<String>,
    /// The slice: GENERATION:AxB[xC], e.g. v6e:16x16, v5p:4x4x4
    #[arg(long, required_unless_present = "table")]
    pub slice: Option<String>,
    /// Regenerate workloads/README.md's table as Markdown: `published` re-runs every published
    /// training run this tool can size (MaxText's optimized-models table) against its
    /// published tokens/s and MFU; `all` adds the table's other rows (a few minutes: one
    /// prediction a row; `--set`, `--loss-chunk`, `--no-overlap`, `--no-repeat` apply to every
    /// row)
    #[arg(long, value_name = "published|all", value_parser = ["published", "all"], conflicts_with_all = ["model", "slice", "parallel", "tp", "ep", "trace", "seq", "batch_per_chip", "remat"])]
    pub table: Option<String>,
    /// With --table: only the rows whose model or slice contains this text
    #[arg(long, requires = "table")]
    pub only: Option<String>,
    /// Tokens per sequence
    #[arg(long, default_value_t = 8192)]
    pub seq: usize,
    /// Sequences per chip (the global batch is this times the chips)
    #[arg(long, default_value_t = 1)]
    pub batch_per_chip: usize,
    /// The split: comma-separated dp=N, ep=N, fsdp=N, tp=N whose product is the number of
    /// chips (default: fsdp over every chip not used by the others). The mesh is (dp, ep, fsdp,
    /// tp) over the slice's axes in order: each must cover whole axes
    #[arg(long)]
    pub parallel: Option<String>,
    /// Tensor-parallel size (Megatron column/row splits)
    #[arg(long)]
    pub tp: Option<usize>,
    /// Expert-parallel size (mixture-of-experts models): each chip holds experts/ep of every
    /// layer's experts and exchanges tokens with its group by all-to-all
    #[arg(long)]
    pub ep: Option<usize>,
    /// What the backward recomputes: full (each layer's forward; the usual choice at long
    /// sequences), mlp (the MLP's gate and up products, as MaxText's save_dot_except_mlpwi),
    /// attention (the attention probabilities, as flash attention), none
    #[arg(long, default_value = "full")]
    pub remat: String,
    /// Tokens per chunk of the output head and loss
    #[arg(long, default_value_t = 1024)]
    pub loss_chunk: usize,
    /// Run collectives in place instead of overlapping them with compute
    #[arg(long)]
    pub no_overlap: bool,
    /// Simulate every layer, attention chunk, loss chunk and expert instead of one of each
    /// (slow; for checking the repetition shortcut)
    #[arg(long)]
    pub no_repeat: bool,
    /// Override a preset field, e.g. `--set ici_link_bytes_per_s=1e11`
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Write a Chrome trace of one chip's step
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Print JSON for machines
    #[arg(long)]
    pub json: bool,
}

pub(super) fn parse_slice(text: &str, set: &[String]) -> Result<(ChipPreset, Vec<u32>), CliError> {
    let err = |m: String| CliError::Other(format!("--slice `{text}`: {m}"));
    let (name, dims) = text
        .rsplit_once(':')
        .ok_or_else(|| err("expected GENERATION:AxB[xC], e.g. v6e:16x16".into()))?;
    let mut preset = load_preset(name)?;
    for s in set {
        let (f, v) = s
            .split_once('=')
            .ok_or_else(|| CliError::Other(format!("--set `{s}`: expected FIELD=VALUE")))?;
        preset
            .set(f.trim(), v.trim())
            .map_err(|e| CliError::Other(e.to_string()))?;
    }
    let dims = dims
        .split('x')
        .map(|d| match d.trim().parse::<u32>() {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(err(format!("`{d}` is not a positive chip count"))),
        })
        .collect::<Result<Vec<u32>, _>>()?;
    Ok((preset, dims))
}

/// Sets a size given both by its own flag and in `--parallel`, refusing a disagreement.
fn set_flagged(
    slot: &mut usize,
    flag: Option<usize>,
    name: &str,
    v: usize,
) -> Result<(), CliError> {
    if let Some(f) = flag.filter(|f| *f != v) {
        return Err(CliError::Other(format!(
            "--{name} {f} and --parallel {name}={v} disagree"
        )));
    }
    *slot = v;
    Ok(())
}

fn parse_parallel(args: &PredictArgs, chips: usize) -> Result<Parallel, CliError> {
    let mut p = Parallel {
        dp: 1,
        ep: args.ep.unwrap_or(1),
        fsdp: 0,
        tp: args.tp.unwrap_or(1),
    };
    if [args.tp, args.ep].contains(&Some(0)) {
        return Err(CliError::Other(
            "--tp and --ep must be positive integers".into(),
        ));
    }
    if let Some(text) = &args.parallel {
        for part in text.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                CliError::Other(format!(
                    "--parallel `{part}`: expected NAME=SIZE (dp, ep, fsdp, tp)"
                ))
            })?;
            let v: usize = v.trim().parse().ok().filter(|v| *v > 0).ok_or_else(|| {
                CliError::Other(format!(
                    "--parallel `{part}`: the size must be a positive integer"
                ))
            })?;
            match k.trim() {
                "dp" => p.dp = v,
                "fsdp" => p.fsdp = v,
                "tp" => set_flagged(&mut p.tp, args.tp, "tp", v)?,
                "ep" => set_flagged(&mut p.ep, args.ep, "ep", v)?,
                other => {
                    return Err(CliError::Other(format!(
                        "--parallel: unknown dimension `{other}` (dp, ep, fsdp or tp)"
                    )));
                }
            }
        }
    }
    if p.fsdp == 0 {
        p.fsdp = (chips / (p.dp * p.ep * p.tp)).max(1);
    }
    let used = p.dp * p.ep * p.fsdp * p.tp;
    if used != chips {
        return Err(CliError::Other(format!(
            "--parallel: dp={} x ep={} x fsdp={} x tp={} = {used} chips, but the slice has {chips}",
            p.dp, p.ep, p.fsdp, p.tp
        )));
    }
    Ok(p)
}

/// Runs `tpuemu predict`.
pub fn run(args: &PredictArgs) -> Result<(), CliError> {
    if let Some(which) = &args.table {
        return super::predict_table::run(args, which);
    }
    if args.only.is_some() {
        return Err(CliError::Other(
            "predict: --only picks rows of --table; give --table published or all".into(),
        ));
    }
    let (model, slice) = match (&args.model, &args.slice) {
        (Some(m), Some(s)) => (m.as_str(), s.as_str()),
        _ => {
            return Err(CliError::Other(
                "predict: --model and --slice are needed (or --table)".into(),
            ));
        }
    };
    let t0 = Instant::now();
    let p = predict_one(args, model, slice)?.map_err(CliError::Other)?;
    let host_s = t0.elapsed().as_secs_f64();
    let chip = p.chip.clone();
    let p = p.prediction;
    if let Some(path) = &args.trace {
        let json = tpuemu_isa::trace::chrome::to_chrome_json(&p.trace(&chip));
        std::fs::write(path, json).map_err(|source| CliError::Io {
            path: path.clone(),
            source,
        })?;
    }
    if args.json {
        let mut v = serde_json::to_value(&p).map_err(|e| CliError::Other(e.to_string()))?;
        v["host_seconds"] = serde_json::json!(host_s);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", report(&p, slice, host_s));
        if let Some(path) = &args.trace {
            println!(
                "trace             {} (open with `tpuemu viz` or ui.perfetto.dev)",
                path.display()
            );
        }
    }
    Ok(())
}

/// A prediction and the chip it was made for.
pub(super) struct Predicted {
    pub prediction: Prediction,
    pub chip: tpuemu_isa::ChipInfo,
}

/// One prediction of `model` on `slice` with the rest of `args` (split, sequence, batch,
/// remat, overrides, overlap and repetition switches): an error where the run cannot be set up
/// (a bad model, slice, split or override); `Ok(Err(message))` where it was set up and its
/// simulation failed (an operand beyond what a kernel addresses).
pub(super) fn predict_one(
    args: &PredictArgs,
    model: &str,
    slice_text: &str,
) -> Result<Result<Predicted, String>, CliError> {
    let model = ModelConfig::load(model).map_err(|e| CliError::Other(e.to_string()))?;
    let (preset, dims) = parse_slice(slice_text, &args.set)?;
    let remat = Remat::parse(&args.remat).ok_or_else(|| {
        CliError::Other(format!(
            "--remat `{}`: expected none, attention, mlp or full",
            args.remat
        ))
    })?;
    let generation = preset.name.clone();
    let slice = Emulator::slice(preset.clone(), &dims)
        .map_err(|e| CliError::Other(format!("--slice {slice_text}: {e}")))?;
    slice.set_timing_only(true);
    let chips = slice.topology().num_chips();
    let par = parse_parallel(args, chips)?;
    let spec = StepSpec {
        model,
        seq: args.seq,
        batch_per_chip: args.batch_per_chip,
        par,
        remat,
        loss_chunk: args.loss_chunk,
        kernel_operand_bytes: StepSpec::KERNEL_OPERAND_BYTES,
    };
    spec.check().map_err(|e| CliError::Other(e.to_string()))?;
    let chip = slice.topology().chips[0].clone();
    // The chip that stands for all: the slice's chip with room for any footprint (the
    // footprint is checked against the real capacity, not by failing an allocation). 4 TiB,
    // the largest HBM a preset may declare, holds any one chip's share of the built-in models.
    let mut solo = preset.clone();
    solo.hbm_bytes = solo.hbm_bytes.max(1 << 42);
    let solo = Emulator::new(solo).map_err(|e| CliError::Other(e.to_string()))?;
    solo.set_timing_only(true);
    let rt = Runtime::meta(Arc::new(solo), 0).map_err(|e| CliError::Other(e.to_string()))?;
    let mesh = DeviceMesh::new(Arc::new(slice), &spec.mesh_dims())
        .map_err(|e| CliError::Other(format!("--parallel over {slice_text}: {e}")))?;
    // Symmetric collectives on one chip standing for all, on a slice of their own
    // (`--no-repeat` simulates every chip).
    let mut timer = if args.no_repeat {
        CommTimer::new(mesh)
    } else {
        let sym = Emulator::slice(preset.clone(), &dims)
            .map_err(|e| CliError::Other(format!("--slice {slice_text}: {e}")))?;
        sym.set_timing_only(true);
        CommTimer::new(mesh).with_emulator(Arc::new(sym))
    };
    let prediction = predict(
        &spec,
        rt,
        &mut timer,
        &chip,
        &generation,
        !args.no_overlap,
        !args.no_repeat,
    )
    .map_err(|e| {
        let text = e.to_string();
        let hint = if text.contains("does not fit") || text.contains("address") {
            " (one tensor of a chip's step is larger than one kernel addresses: split the model \
             further with --tp, or shorten --seq or --loss-chunk)"
        } else {
            ""
        };
        format!("predict: {text}{hint}{}", state_verdict(&spec, &chip))
    });
    Ok(prediction.map(|prediction| Predicted { prediction, chip }))
}

/// When a step cannot be simulated: whether the parameters and optimizer state (16 bytes per
/// parameter over the chips that shard them) and the gathered layers (the one in use and the
/// one prefetched, and a reduction's buffer) already exceed a chip's HBM.
fn state_verdict(spec: &StepSpec, chip: &tpuemu_isa::ChipInfo) -> String {
    let state = 16.0 * spec.local_params();
    let gathered = spec.gathered_bytes() as f64;
    if state + gathered <= chip.hbm_bytes as f64 {
        return String::new();
    }
    let u = tpuemu_isa::units::ByteUnit::of(chip.hbm_bytes);
    let unit = u.bytes as f64;
    format!(
        "; besides, its parameters and optimizer state ({:.1} {n}) and gathered layers ({:.1} \
         {n}) alone exceed a chip's {:.1} {n}: OUT OF MEMORY (shard over more chips, or add --tp)",
        state / unit,
        gathered / unit,
        u.of_bytes(chip.hbm_bytes),
        n = u.name
    )
}

fn report(p: &Prediction, slice: &str, host_s: f64) -> String {
    let s = &p.spec;
    let pct = |x: f64| 100.0 * x / p.step_s;
    let par: Vec<String> = s
        .mesh_dims()
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let mut o = String::new();
    o += &format!(
        "{} ({:.2}B parameters) on {slice} ({} chips), seq {}, {} sequences per chip, {}, remat {:?}\n",
        s.model.name,
        s.model.params() as f64 / 1e9,
        p.chips,
        s.seq,
        s.batch_per_chip,
        if par.is_empty() {
            "one chip".to_string()
        } else {
            par.join(" ")
        },
        s.remat
    );
    o += &format!("step time         {:.3} s\n", p.step_s);
    o += &format!("tokens/s/chip     {:.0}\n", p.tokens_per_s_per_chip);
    o += &format!(
        "MFU               {:.1}% with causal attention counted in full (PaLM's 6ND + 12LHQST: {:.3e} model FLOPs per step over {} chips' peak); {:.1}% with it halved (MaxText's, the work the kernels do: {:.3e}); the matrix units did {:.3e} per chip\n",
        100.0 * p.mfu,
        p.model_flops,
        p.chips,
        100.0 * p.mfu_causal,
        p.model_flops_causal,
        p.mxu_flops_per_chip
    );
    o += &format!(
        "breakdown         MXU busy {:.3} s ({:.1}%), HBM-bound and vector {:.3} s ({:.1}%), exposed communication {:.3} s ({:.1}%), idle {:.3} s ({:.1}%)\n",
        p.mxu_busy_s,
        pct(p.mxu_busy_s),
        p.hbm_vector_s,
        pct(p.hbm_vector_s),
        p.exposed_comm_s,
        pct(p.exposed_comm_s),
        p.idle_s,
        pct(p.idle_s)
    );
    o += &format!(
        "collectives       {:.3} s in all, {} ({} distinct, each timed once)\n",
        p.comm_s,
        if p.overlap {
            "overlapped where the schedule allows"
        } else {
            "in place"
        },
        p.collectives_timed
    );
    let h = &p.hbm;
    // In the unit the vendor states the chip's HBM in (v5e: 16 GB, v4: 32 GiB).
    let u = tpuemu_isa::units::ByteUnit::of(h.capacity);
    o += &format!(
        "HBM per chip      {:.1} {} = state {:.1} + gathered weights {:.1} + activations {:.1} + transient {:.1}, of {:.1} {}: {}\n",
        u.of_bytes(h.total),
        u.name,
        u.of_bytes(h.state),
        u.of_bytes(h.gathered),
        u.of_bytes(h.activations),
        u.of_bytes(h.transient),
        u.of_bytes(h.capacity),
        u.name,
        if p.fits { "fits" } else { "OUT OF MEMORY" }
    );
    if let Some(sug) = &p.suggestion {
        o += &format!("                  {sug}\n");
    }
    for sc in &p.shortcuts {
        o += &format!("shortcut          {sc}\n");
    }
    o += &format!("host time         {host_s:.1} s\n");
    o
}
