//! What is predicted: a model, a batch, and how the work is split over the slice's chips.

use super::config::ModelConfig;
use tpuemu_backend::error::{Result, TpuError};

/// How the step is parallel: the mesh `(dp, ep, fsdp, tp)` over the slice's chips, in that
/// order (dimensions of size 1 are left out; the mesh dimensions take the slice's topology axes
/// in order, so each must cover whole axes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Parallel {
    /// Data parallel: parameters replicated, gradients all-reduced.
    pub dp: usize,
    /// Expert parallel (mixture-of-experts models): the experts of a layer dealt over `ep`
    /// chips (`experts / ep` each), every token's rows sent to its experts' chips and back by
    /// all-to-all, two forward and two backward per layer (and the forward's two again when
    /// the backward recomputes it, `--remat full`). The chips of an expert-parallel
    /// group hold different sequences, and the rest of the model (attention, router, norms,
    /// embedding and head) is sharded FSDP-style over `ep x fsdp` chips together; an expert's
    /// own parameters over the `fsdp` chips (as torchtitan's FSDP2 with expert parallelism).
    pub ep: usize,
    /// Fully sharded data parallel: parameters `Shard(0)`, all-gathered per layer before use
    /// (forward and again in backward), gradients reduce-scattered.
    pub fsdp: usize,
    /// Megatron tensor parallel: attention heads and MLP columns split (column-parallel q, k,
    /// v, gate, up; row-parallel o, down; vocabulary-parallel embedding and head); two
    /// all-reduces of the activations forward and two backward per layer. A tensor-parallel
    /// group of `tp` chips shares its `tp x batch_per_chip` sequences.
    pub tp: usize,
}

/// Activation rematerialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Remat {
    /// Every activation the backward needs is kept. Attention runs on the flash-attention
    /// kernels, so what it keeps is its output and each row's logsumexp, never the `S x S`
    /// weights (the backward kernel recomputes them).
    None,
    /// The attention weights are recomputed in the backward: with the flash-attention kernels
    /// that is what `None` does too (kept as a name for scripts that ask for it).
    Attention,
    /// Every activation is kept but the MLP's first products (gate and up) and their
    /// activation, which the backward recomputes from the kept MLP input: MaxText's
    /// `save_dot_except_mlpwi` (about 55% of a dense layer's forward FLOPs run again).
    Mlp,
    /// Only each layer's input is kept; the layer's forward runs again in the backward.
    Full,
}

impl Remat {
    /// `none`, `attention`, `mlp`, `full`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Remat::None),
            "attention" => Some(Remat::Attention),
            "mlp" => Some(Remat::Mlp),
            "full" => Some(Remat::Full),
            _ => None,
        }
    }
}

/// One training step to predict.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepSpec {
    /// The model.
    pub model: ModelConfig,
    /// Tokens per sequence.
    pub seq: usize,
    /// Sequences per chip (the global batch is this times the number of chips).
    pub batch_per_chip: usize,
    /// The split over chips.
    pub par: Parallel,
    /// What the backward recomputes.
    pub remat: Remat,
    /// Tokens per chunk of the output head and loss (the logits of a chunk are the largest
    /// transient; chunks are identical and repeat).
    pub loss_chunk: usize,
    /// The largest operand one kernel addresses, in bytes ([`StepSpec::KERNEL_OPERAND_BYTES`];
    /// smaller only to exercise [`StepSpec::micro_batches`] on small models).
    pub kernel_operand_bytes: usize,
}

impl StepSpec {
    /// 2 GiB: the largest operand one of the backend's kernels addresses.
    pub const KERNEL_OPERAND_BYTES: usize = 1 << 31;

    /// The mesh `(name, size)` dimensions (sizes above 1, in the order dp, ep, fsdp, tp).
    pub fn mesh_dims(&self) -> Vec<(&'static str, usize)> {
        let p = &self.par;
        [("dp", p.dp), ("ep", p.ep), ("fsdp", p.fsdp), ("tp", p.tp)]
            .into_iter()
            .filter(|(_, s)| *s > 1)
            .collect()
    }

    /// The mesh dimension index of `name`, if it is in the mesh.
    pub fn dim(&self, name: &str) -> Option<usize> {
        self.mesh_dims().iter().position(|(n, _)| *n == name)
    }

    /// The mesh dimensions named `names` that are in the mesh, and the chips they span.
    fn group(&self, names: &[&str]) -> Group {
        let dims: Vec<usize> = names.iter().filter_map(|n| self.dim(n)).collect();
        let size = self
            .mesh_dims()
            .iter()
            .filter(|(n, _)| names.contains(n))
            .map(|(_, s)| *s)
            .product();
        Group { dims, size }
    }

    /// The chips a layer's flat buffer (and the embedding and head) is sharded over: `ep x
    /// fsdp`.
    pub fn param_group(&self) -> Group {
        self.group(&["ep", "fsdp"])
    }

    /// The chips one expert's parameters are sharded over under expert parallelism: `fsdp`.
    pub fn expert_group(&self) -> Group {
        self.group(&["fsdp"])
    }

    /// Chips.
    pub fn chips(&self) -> usize {
        self.par.dp * self.par.ep * self.par.fsdp * self.par.tp
    }

    /// Experts on a chip (all of them without expert parallelism).
    pub fn local_experts(&self) -> usize {
        self.model.experts / self.par.ep
    }

    /// Sequences one chip's tensor-parallel group works on (every chip of the group holds them).
    pub fn local_batch(&self) -> usize {
        self.batch_per_chip * self.par.tp
    }

    /// Tokens one chip's kernels see.
    pub fn local_tokens(&self) -> usize {
        self.local_batch() * self.seq
    }

    /// Passes a layer's work on a chip is split into (micro-batches of `batch_per_chip /
    /// passes` sequences each, one after another with the layer's weights gathered once): the
    /// fewest that keep the per-layer operands that grow with the tokens and a layer's width
    /// below the 2 GiB one kernel addresses: the MLP's bf16 `[rows, ffn]` products (an
    /// expert's rows are `tokens x top_k x ep / experts`, twice the tokens for Mixtral at
    /// ep=8), the dispatched `[tokens x top_k, d]` rows, the attention's `[tokens, heads x
    /// head_dim]`; 1 when none is that large (or no split helps).
    pub fn micro_batches(&self) -> usize {
        let limit = self.kernel_operand_bytes;
        let m = &self.model;
        let tp = self.par.tp;
        let largest = |n: usize| {
            let rows = if m.experts > 1 {
                (n * m.top_k * self.par.ep).div_ceil(m.experts).max(n)
            } else {
                n
            };
            let mlp = rows * 2 * (m.ffn / tp);
            let dispatched = if m.experts > 1 {
                n * m.top_k * 2 * m.d_model
            } else {
                0
            };
            let attention = n * 2 * (m.heads / tp) * m.head_dim();
            mlp.max(dispatched).max(attention)
        };
        let b = self.batch_per_chip;
        (1..=b)
            .filter(|k| b.is_multiple_of(*k))
            .find(|k| largest(self.local_tokens() / k) < limit)
            .unwrap_or(1)
    }

    /// The same step with `batch_per_chip` sequences a chip (a micro-batch's spec).
    pub fn with_batch(&self, batch_per_chip: usize) -> StepSpec {
        StepSpec {
            batch_per_chip,
            ..self.clone()
        }
    }

    /// Tokens of the whole step (all chips).
    pub fn global_tokens(&self) -> u64 {
        (self.batch_per_chip * self.seq * self.chips()) as u64
    }

    /// Checks the split fits the model.
    pub fn check(&self) -> Result<()> {
        let m = &self.model;
        let p = &self.par;
        let bad = |s: String| Err(TpuError::BadArgs(s));
        if p.dp == 0 || p.ep == 0 || p.fsdp == 0 || p.tp == 0 {
            return bad("parallel sizes must be positive".into());
        }
        if p.ep > 1 && m.experts == 1 {
            return bad(format!(
                "ep={}: expert parallelism needs a mixture-of-experts model, and {} has no experts",
                p.ep, m.name
            ));
        }
        if !m.experts.is_multiple_of(p.ep) {
            return bad(format!(
                "ep={} does not divide the model's {} experts; choose an expert-parallel size that divides them",
                p.ep, m.experts
            ));
        }
        if self.seq == 0 || self.batch_per_chip == 0 {
            return bad("--seq and --batch-per-chip must be positive".into());
        }
        for (what, n) in [
            ("heads", m.heads),
            ("kv_heads", m.kv_heads),
            ("ffn", m.ffn),
            ("vocab", m.vocab),
        ] {
            if !n.is_multiple_of(p.tp) {
                return bad(format!(
                    "tp={} does not divide the model's {what} ({n}); choose a tensor-parallel size that divides heads {}, kv_heads {}, ffn {} and vocab {}",
                    p.tp, m.heads, m.kv_heads, m.ffn, m.vocab
                ));
            }
        }
        if !self
            .local_tokens()
            .is_multiple_of(self.loss_chunk.min(self.local_tokens()))
        {
            return bad(format!(
                "the loss chunk {} does not divide the {} tokens of a chip",
                self.loss_chunk,
                self.local_tokens()
            ));
        }
        Ok(())
    }

    /// Elements of one layer's parameters on a tensor-parallel rank, padded to a multiple of
    /// the sharding group ([`StepSpec::param_group`]) times 128: the flat buffer FSDP shards.
    /// Under expert parallelism the experts are not in it ([`StepSpec::expert_flat`]).
    pub fn layer_flat(&self) -> usize {
        let m = &self.model;
        let mut raw = m.layer_params();
        if self.par.ep > 1 {
            raw -= m.experts as u64 * m.expert_params();
        }
        (raw as usize / self.par.tp).next_multiple_of(self.param_group().size * 128)
    }

    /// Elements of a chip's experts of one layer on a tensor-parallel rank under expert
    /// parallelism, padded to a multiple of the expert group ([`StepSpec::expert_group`])
    /// times 128; 0 without expert parallelism (the experts are in the layer's buffer).
    pub fn expert_flat(&self) -> usize {
        if self.par.ep == 1 {
            return 0;
        }
        let raw = self.local_experts() as u64 * self.model.expert_params();
        (raw as usize / self.par.tp).next_multiple_of(self.expert_group().size * 128)
    }

    /// Elements of the embedding (or the head) on a tensor-parallel rank, padded as
    /// [`StepSpec::layer_flat`].
    pub fn table_flat(&self) -> usize {
        let m = &self.model;
        (m.vocab / self.par.tp * m.d_model).next_multiple_of(self.param_group().size * 128)
    }

    /// Bytes of flat bf16 buffers a chip holds besides its shards at the worst moment: for each
    /// of a layer's buffers (the layer's; its experts' under expert parallelism), the gathered
    /// copy in use, the one prefetched and the unsharded gradient being reduced when the buffer
    /// is sharded, the gradient alone when it is resident; or the embedding's, if larger.
    pub fn gathered_bytes(&self) -> u64 {
        let (pg, eg) = (self.param_group(), self.expert_group());
        let held = |flat: usize, sharded: bool| 2 * flat as u64 * if sharded { 3 } else { 1 };
        let layer = held(self.layer_flat(), pg.size > 1) + held(self.expert_flat(), eg.size > 1);
        layer.max(held(self.table_flat(), pg.size > 1))
    }

    /// Parameters on one chip (its shard of every buffer, padding left out).
    pub fn local_params(&self) -> f64 {
        let p = &self.par;
        self.model.params() as f64 / (p.tp * p.fsdp * p.ep) as f64
    }
}

/// Mesh dimensions a buffer is sharded over, and the chips they span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Mesh dimension indices (empty: not sharded).
    pub dims: Vec<usize>,
    /// Chips (1 when not sharded).
    pub size: usize,
}
