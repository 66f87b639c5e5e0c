//! Decoder-only transformer configurations: the built-in models with their published shapes,
//! any model as TOML, and the parameter and FLOP counts of one training step.
//!
//! Every built-in shape is copied from the model's published `config.json` (the source URL is
//! in [`ModelConfig::source`]). The parameter counts are *derived* from the shapes; the test
//! `llm_config.rs` checks them against the totals the publishers state, an independent fact.

use serde::{Deserialize, Serialize};

/// Errors of loading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither a built-in name nor a readable file.
    #[error("unknown model `{0}`: give a built-in name ({1}) or a .toml file")]
    Unknown(String, String),
    /// The file could not be read.
    #[error("cannot read model file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("model file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The shapes of a decoder-only transformer (Llama family: RMSNorm, rotary attention with
/// grouped-query heads, SwiGLU MLP, untied or tied output head; optionally mixture-of-experts
/// MLPs with top-k routing).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Name.
    pub name: String,
    /// Decoder layers.
    pub layers: usize,
    /// Model width (`hidden_size`).
    pub d_model: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention; equal to `heads` for multi-head attention).
    pub kv_heads: usize,
    /// Width of one head (default `d_model / heads`).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// MLP hidden width (`intermediate_size`), per expert.
    pub ffn: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Experts per MLP (1: a dense model).
    #[serde(default = "one")]
    pub experts: usize,
    /// Experts each token is routed to.
    #[serde(default = "one")]
    pub top_k: usize,
    /// Output head shares the embedding matrix.
    #[serde(default)]
    pub tied_embeddings: bool,
    /// RMSNorm on each head's queries and keys (Qwen3).
    #[serde(default)]
    pub qk_norm: bool,
    /// Where the shapes come from.
    #[serde(default)]
    pub source: String,
}

fn one() -> usize {
    1
}

/// A built-in model (shapes as published).
#[allow(clippy::too_many_arguments)]
fn model(
    name: &str,
    layers: usize,
    d_model: usize,
    heads: usize,
    kv_heads: usize,
    ffn: usize,
    vocab: usize,
    source: &str,
) -> ModelConfig {
    ModelConfig {
        name: name.into(),
        layers,
        d_model,
        heads,
        kv_heads,
        head_dim: None,
        ffn,
        vocab,
        experts: 1,
        top_k: 1,
        tied_embeddings: false,
        qk_norm: false,
        source: source.into(),
    }
}

/// Names of the built-in models.
pub const BUILTIN: [&str; 7] = [
    "llama2-7b",
    "llama2-70b",
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "qwen3-8b",
    "mixtral-8x7b",
];

impl ModelConfig {
    /// A built-in model by name (see [`BUILTIN`]).
    pub fn builtin(name: &str) -> Option<Self> {
        const HF: &str = "https://huggingface.co/";
        let m = match name {
            "llama2-7b" => model(
                name,
                32,
                4096,
                32,
                32,
                11008,
                32000,
                &format!("{HF}meta-llama/Llama-2-7b-hf/blob/main/config.json"),
            ),
            "llama2-70b" => model(
                name,
                80,
                8192,
                64,
                8,
                28672,
                32000,
                &format!("{HF}meta-llama/Llama-2-70b-hf/blob/main/config.json"),
            ),
            "llama3.1-8b" => model(
                name,
                32,
                4096,
                32,
                8,
                14336,
                128256,
                &format!("{HF}meta-llama/Llama-3.1-8B/blob/main/config.json"),
            ),
            "llama3.1-70b" => model(
                name,
                80,
                8192,
                64,
                8,
                28672,
                128256,
                &format!("{HF}meta-llama/Llama-3.1-70B/blob/main/config.json"),
            ),
            "llama3.1-405b" => model(
                name,
                126,
                16384,
                128,
                8,
                53248,
                128256,
                &format!("{HF}meta-llama/Llama-3.1-405B/blob/main/config.json"),
            ),
            "qwen3-8b" => ModelConfig {
                head_dim: Some(128),
                qk_norm: true,
                ..model(
                    name,
                    36,
                    4096,
                    32,
                    8,
                    12288,
                    151936,
                    &format!("{HF}Qwen/Qwen3-8B/blob/main/config.json"),
                )
            },
            "mixtral-8x7b" => ModelConfig {
                experts: 8,
                top_k: 2,
                ..model(
                    name,
                    32,
                    4096,
                    32,
                    8,
                    14336,
                    32000,
                    &format!("{HF}mistralai/Mixtral-8x7B-v0.1/blob/main/config.json"),
                )
            },
            _ => return None,
        };
        Some(m)
    }

    /// A built-in name, or a TOML file with the fields of [`ModelConfig`].
    pub fn load(name_or_file: &str) -> Result<Self, ConfigError> {
        if let Some(m) = Self::builtin(name_or_file) {
            return Ok(m);
        }
        if !name_or_file.ends_with(".toml") && !std::path::Path::new(name_or_file).exists() {
            return Err(ConfigError::Unknown(
                name_or_file.into(),
                BUILTIN.join(", "),
            ));
        }
        let text = std::fs::read_to_string(name_or_file).map_err(|source| ConfigError::Io {
            path: name_or_file.into(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: name_or_file.into(),
            message,
        })
    }

    /// Parses and checks a TOML configuration.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let m: ModelConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        m.check()?;
        Ok(m)
    }

    /// Checks the shapes are consistent.
    pub fn check(&self) -> Result<(), String> {
        let pos = [
            ("layers", self.layers),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
            ("experts", self.experts),
            ("top_k", self.top_k),
        ];
        if let Some((n, _)) = pos.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{n} must be positive"));
        }
        if self.head_dim == Some(0) {
            return Err("head_dim must be positive".into());
        }
        if self.head_dim.is_none() && !self.d_model.is_multiple_of(self.heads) {
            return Err(format!(
                "d_model {} is not a multiple of heads {}; give head_dim",
                self.d_model, self.heads
            ));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "heads {} is not a multiple of kv_heads {}",
                self.heads, self.kv_heads
            ));
        }
        if self.top_k > self.experts {
            return Err(format!(
                "top_k {} exceeds experts {}",
                self.top_k, self.experts
            ));
        }
        Ok(())
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.d_model / self.heads)
    }

    /// Parameters of the attention of one layer (q, k, v, o projections; q/k norms).
    pub fn attn_params(&self) -> u64 {
        let (d, hd) = (self.d_model as u64, self.head_dim() as u64);
        let q = d * hd * self.heads as u64;
        let kv = 2 * d * hd * self.kv_heads as u64;
        let norms = if self.qk_norm { 2 * hd } else { 0 };
        2 * q + kv + norms
    }

    /// Parameters of one expert's SwiGLU MLP (gate, up, down).
    pub fn expert_params(&self) -> u64 {
        3 * self.d_model as u64 * self.ffn as u64
    }

    /// Parameters of one layer (attention, every expert, router, two norms).
    pub fn layer_params(&self) -> u64 {
        let router = if self.experts > 1 {
            (self.d_model * self.experts) as u64
        } else {
            0
        };
        self.attn_params()
            + self.experts as u64 * self.expert_params()
            + router
            + 2 * self.d_model as u64
    }

    /// Embedding (and untied output head) and the final norm.
    pub fn outer_params(&self) -> u64 {
        let e = (self.vocab * self.d_model) as u64;
        e * if self.tied_embeddings { 1 } else { 2 } + self.d_model as u64
    }

    /// All parameters.
    pub fn params(&self) -> u64 {
        self.layers as u64 * self.layer_params() + self.outer_params()
    }

    /// Parameters a token uses (mixture of experts: `top_k` of the experts).
    pub fn active_params(&self) -> u64 {
        let inactive = (self.experts - self.top_k) as u64 * self.expert_params();
        self.params() - self.layers as u64 * inactive
    }

    /// Model FLOPs of one training step over `tokens` tokens in sequences of `seq`: PaLM's
    /// convention (Chowdhery et al. 2022, appendix B), `6 N T + 12 L H Q S T` — `N` the active
    /// parameters that multiply (all but the input embedding, which is a lookup), `L` layers,
    /// `H Q` the attention width (heads x head width), `S` the sequence; causal masking is not
    /// discounted, rematerialisation is not counted. See [`ModelConfig::model_flops_causal`]
    /// for the other convention.
    pub fn model_flops(&self, tokens: u64, seq: u64) -> f64 {
        self.flops(tokens, seq, 12.0)
    }

    /// Model FLOPs with causal attention's masked half not counted, `6 N T + 6 L H Q S T`:
    /// the work causal attention kernels do (they skip the masked blocks), and MaxText's
    /// convention (`maxtext_utils.py`: `causal_attention_flops = noncausal_attention_flops /
    /// 2`). A published MFU is only comparable in the convention it was computed in.
    pub fn model_flops_causal(&self, tokens: u64, seq: u64) -> f64 {
        self.flops(tokens, seq, 6.0)
    }

    /// `6 N T + a L H Q S T`.
    fn flops(&self, tokens: u64, seq: u64, a: f64) -> f64 {
        let lookup = (self.vocab * self.d_model) as u64;
        let n = if self.tied_embeddings {
            self.active_params()
        } else {
            self.active_params() - lookup
        };
        let attn = a * self.layers as f64 * (self.heads * self.head_dim()) as f64 * seq as f64;
        (6.0 * n as f64 + attn) * tokens as f64
    }
}
