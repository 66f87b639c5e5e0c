//! Published training runs on TPU slices that `tpuemu predict` can size, with their sources:
//! the rows `tpuemu predict --table published` re-runs and compares against, and the one run per
//! generation a calibrated preset figure was fitted to.
//!
//! Every figure here is copied from its source, never from this tool's output. MaxText's
//! "optimized models" table (`docs/reference/models/tiering.md` in AI-Hypercomputer/maxtext)
//! gives the MFU and the approximate tokens/s per device of each run; the configuration (batch
//! per device, sequence, remat policy, split) comes from the benchmark configuration it links
//! (`benchmarks/maxtext_trillium_model_configs.py`, `benchmarks/maxtext_v5p_model_configs.py`).
//!
//! **Convention.** MaxText's `calculate_tflops_training_per_device` counts `6 N' T` for the
//! weights that multiply (`N'`: no input embedding) plus attention, which its PR #1988 halved
//! for causal masks; the table's footnote says some older results predate the halving. So each
//! row names its [`Convention`]: `Full` (`6 N' T + 12 L H Q S T`, [`super::ModelConfig::
//! model_flops`], `predict`'s `mfu`) or `Halved` (`6 N' T + 6 L H Q S T`, `mfu_causal`), the one
//! in which its MFU follows from its tokens/s and the model's shapes (checked by
//! `workloads/tests/llm_config.rs`, within 3%, and better than in the other convention).
//!
//! Where our model of the run differs from the recipe (host offload, a remat policy we do not
//! have, dropped tokens), [`PublishedRun::differences`] says so: the comparison is then of
//! like with nearly like, and the table shows it.

/// What a published run is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The run a calibrated preset figure was fitted to (at most one per generation).
    Fit,
    /// Compared only: nothing was fitted to it.
    Validation,
}

/// How a published MFU counts causal attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Convention {
    /// Causal attention counted in full (PaLM's `12 L H Q S T`).
    Full,
    /// Its masked half not counted (`6 L H Q S T`).
    Halved,
}

/// One published training run, and how `predict` is set up to reproduce it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PublishedRun {
    /// The run as `predict` takes it (batch per chip: MaxText's `per_device_batch_size`, a
    /// device being a chip; remat: the closest of ours to the recipe's policy).
    pub run: Configuration,
    /// Published tokens/s per chip.
    pub tokens_per_s_per_chip: f64,
    /// Published MFU (fraction), in `convention`.
    pub mfu: f64,
    /// How the published MFU counts causal attention.
    pub convention: Convention,
    /// Fit or validation.
    pub role: Role,
    /// Where the figures come from.
    pub source: &'static str,
    /// What the recipe does that our run of it does not, or "none".
    pub differences: &'static str,
}

const TIERING: &str = "MaxText docs/reference/models/tiering.md (AI-Hypercomputer/maxtext)";

/// The published runs, in the order the table shows them.
pub const PUBLISHED: &[PublishedRun] = &[
    PublishedRun {
        run: Configuration {
            model: "llama3.1-8b",
            slice: "v6e:16x16",
            parallel: "fsdp=256",
            seq: 8192,
            batch_per_chip: 4,
            remat: "full",
        },
        tokens_per_s_per_chip: 7207.0,
        mfu: 0.4546,
        convention: Convention::Full,
        role: Role::Fit,
        source: TIERING,
        differences: "the recipe (llama3_1_8b_8192) saves the q/k/v/output projections and each \
                      layer's input in host memory (remat_policy custom, offload); ours \
                      recomputes the whole layer (remat full), about 4% more matrix work",
    },
    PublishedRun {
        run: Configuration {
            model: "llama2-70b",
            slice: "v6e:16x16",
            parallel: "fsdp=256",
            seq: 4096,
            batch_per_chip: 4,
            remat: "full",
        },
        tokens_per_s_per_chip: 900.0,
        mfu: 0.438,
        convention: Convention::Full,
        role: Role::Validation,
        source: TIERING,
        differences: "none (the recipe llama2_70b_4096: remat full, FSDP over 256 chips)",
    },
    PublishedRun {
        run: Configuration {
            model: "llama3.1-70b",
            slice: "v6e:16x16",
            parallel: "fsdp=256",
            seq: 8192,
            batch_per_chip: 5,
            remat: "full",
        },
        tokens_per_s_per_chip: 960.0,
        mfu: 0.5033,
        convention: Convention::Full,
        role: Role::Validation,
        source: TIERING,
        differences: "the recipe (llama3_1_70b_8192) saves q/k/v and each layer's input in host \
                      memory; ours recomputes the layer and keeps its input in HBM (so our \
                      footprint does not fit where the recipe's does)",
    },
    PublishedRun {
        run: Configuration {
            model: "mixtral-8x7b",
            slice: "v6e:16x16",
            parallel: "fsdp=256",
            seq: 4096,
            batch_per_chip: 12,
            remat: "full",
        },
        tokens_per_s_per_chip: 3899.0,
        mfu: 0.3523,
        convention: Convention::Full,
        role: Role::Validation,
        source: TIERING,
        differences: "the recipe (mixtral_8x7b_dropped) drops tokens beyond 1.25x an expert's \
                      share and offloads projections to host memory; ours routes every token, \
                      balanced, and recomputes the layer",
    },
    PublishedRun {
        run: Configuration {
            model: "llama2-70b",
            slice: "v5p:8x8x8",
            parallel: "fsdp=512",
            seq: 4096,
            batch_per_chip: 4,
            remat: "mlp",
        },
        tokens_per_s_per_chip: 692.0,
        mfu: 0.654,
        convention: Convention::Halved,
        role: Role::Validation,
        source: TIERING,
        differences: "the recipe (llama2_70b_v5p_128 scaled to 512 chips) saves every matrix \
                      product's output but the MLP's first (save_dot_except_mlpwi), as our \
                      remat mlp; its other savings (which elementwise results it keeps) may \
                      differ",
    },
];

/// The published runs of one generation (`v6e`).
pub fn of_generation(generation: &str) -> impl Iterator<Item = &'static PublishedRun> {
    PUBLISHED
        .iter()
        .filter(move |r| r.run.slice.split(':').next() == Some(generation))
}

/// Runs in MaxText's table that `predict` does not size, and why (shown under the table).
pub const NOT_SIZED: &[(&str, &str)] = &[
    (
        "llama3.1-405b on v6e-256 (38.55%, 123 tokens/s)",
        "the recipe runs over two slices joined by the data-centre network (dcn_fsdp=2) with \
         tensor parallelism inside a slice; predict sizes one slice",
    ),
    (
        "mixtral-8x22b on v6e-256",
        "not a built-in model (a TOML file can describe it; not compared)",
    ),
    (
        "mixtral-8x7b on v5p 8x4x4 (52.56%, 2,909 tokens/s)",
        "the recipe does not state its batch per chip",
    ),
];

/// A configuration `predict` runs: a published run's, or one of the rest of
/// workloads/README.md's table ([`UNPUBLISHED`], `tpuemu predict --table all`).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Configuration {
    /// A built-in model name.
    pub model: &'static str,
    /// The slice.
    pub slice: &'static str,
    /// The split.
    pub parallel: &'static str,
    /// Tokens per sequence.
    pub seq: usize,
    /// Sequences per chip.
    pub batch_per_chip: usize,
    /// `predict --remat`.
    pub remat: &'static str,
}

const fn c(
    model: &'static str,
    slice: &'static str,
    parallel: &'static str,
    seq: usize,
    batch_per_chip: usize,
) -> Configuration {
    Configuration {
        model,
        slice,
        parallel,
        seq,
        batch_per_chip,
        remat: "full",
    }
}

/// The table's other rows (remat full): every built-in model on a full v5e and v6e pod and a
/// v5p slice, at the largest batch that fits or one sequence a chip.
pub const UNPUBLISHED: &[Configuration] = &[
    c("llama2-70b", "v5e:16x16", "fsdp=256", 4096, 1),
    c("llama2-7b", "v5e:16x16", "fsdp=256", 4096, 2),
    c("llama3.1-405b", "v5e:16x16", "fsdp=256", 8192, 1),
    c("llama3.1-70b", "v5e:16x16", "fsdp=256", 4096, 1),
    c("llama3.1-8b", "v5e:16x16", "fsdp=256", 8192, 1),
    c("mixtral-8x7b", "v5e:16x16", "fsdp=256", 8192, 1),
    c("qwen3-8b", "v5e:16x16", "fsdp=256", 8192, 1),
    c("llama2-70b", "v5p:8x8x4", "fsdp=256", 4096, 2),
    c("llama2-7b", "v5p:8x8x4", "fsdp=256", 4096, 4),
    c("llama3.1-405b", "v5p:16x8x4", "fsdp=128,tp=4", 4096, 1),
    c("llama3.1-405b", "v5p:8x8x4", "fsdp=64,tp=4", 8192, 1),
    c("llama3.1-70b", "v5p:8x8x4", "fsdp=256", 8192, 2),
    c("llama3.1-8b", "v5p:8x8x4", "fsdp=256", 8192, 2),
    c("mixtral-8x7b", "v5p:8x8x4", "fsdp=256", 8192, 2),
    c("mixtral-8x7b", "v5p:8x8x4", "ep=8,fsdp=32", 8192, 2),
    c("qwen3-8b", "v5p:8x8x4", "fsdp=256", 8192, 2),
    c("llama2-7b", "v6e:16x16", "fsdp=256", 4096, 4),
    c("llama3.1-405b", "v6e:16x16", "fsdp=256", 8192, 1),
    c("llama3.1-70b", "v6e:16x16", "fsdp=256", 8192, 1),
    c("llama3.1-8b", "v6e:16x16", "fsdp=256", 8192, 2),
    c("mixtral-8x7b", "v6e:16x16", "fsdp=256", 8192, 1),
    c("mixtral-8x7b", "v6e:8x16", "fsdp=128", 8192, 1),
    c("mixtral-8x7b", "v6e:8x16", "ep=8,fsdp=16", 8192, 1),
    c("qwen3-8b", "v6e:16x16", "fsdp=256", 8192, 2),
];
