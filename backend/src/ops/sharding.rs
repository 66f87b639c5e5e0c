//! How an operator runs on sharded tensors: each operator declares its rule next to its
//! kernel; `dtensor::propagate` implements the rules.
//!
//! Most operators belong to a family whose rule needs only a parameter (an elementwise
//! operator says how it treats `Partial` inputs; a reduction says what it reduces and where
//! its arguments are). Operators with a rule of their own (`mm`, `cat`, `native_layer_norm`)
//! name it with a variant, so that the compiler checks every rule is implemented.

/// How an elementwise operator treats `Partial(sum)` inputs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lin {
    /// Not linear: partial inputs are reduced first.
    No,
    /// Linear in all inputs together (`add`, `neg`, a cast to a float).
    All,
    /// Linear in the first input, the others replicated (`div.Tensor`, activation backwards).
    First,
    /// Linear in either of two inputs, the other replicated (`mul.Tensor`).
    Either,
}

/// What a reduction computes, for the placement of a reduced, sharded dimension.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RedOp {
    /// A sum: `Partial(sum)`.
    Sum,
    /// A mean: `Partial(sum)` of each rank's term scaled by `1/shards`.
    Mean,
    /// A maximum: `Partial(max)`.
    Max,
    /// A minimum: `Partial(min)`.
    Min,
    /// Anything else (`prod`, `var`, arg-reductions): the reduced dims are gathered first.
    Other,
}

/// Where a reduction's dimensions come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dims {
    /// Every dimension.
    All,
    /// An `int[1]?` list at this argument (absent or empty: every dimension).
    List(usize),
    /// One `int` at this argument.
    One(usize),
    /// An `int?` at this argument (absent: every dimension, flattened).
    OptOne(usize),
}

/// Sharding rules of single operators.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Special {
    /// `mm`.
    Mm,
    /// `addmm`.
    Addmm,
    /// `bmm`.
    Bmm,
    /// `baddbmm`.
    Baddbmm,
    /// `mv`.
    Mv,
    /// `dot`.
    Dot,
    /// `scaled_dot_product_attention`.
    Attention,
    /// `_scaled_dot_product_flash_attention_for_cpu` (also returns the log-sum-exp).
    FlashAttention,
    /// `_softmax`, `_log_softmax`.
    Softmax,
    /// Their backward.
    SoftmaxBackward,
    /// `native_layer_norm` (3 results).
    LayerNorm,
    /// `rms_norm` (1 result).
    RmsNorm,
    /// `native_layer_norm_backward`.
    LayerNormBackward,
    /// `nll_loss_forward`, `nll_loss2d_forward`.
    NllLoss,
    /// `nll_loss_backward`.
    NllLossBackward,
    /// `cat`.
    Cat,
    /// `stack`.
    Stack,
    /// `split.Tensor`.
    Split,
    /// `index_select`.
    IndexSelect,
    /// `gather`.
    Gather,
    /// `embedding`.
    Embedding,
    /// `embedding_dense_backward`.
    EmbeddingBackward,
    /// `tril`, `triu`.
    Tril,
    /// `flip`.
    Flip,
    /// `constant_pad_nd`.
    Pad,
}

/// View operators: shard dimensions map through the view.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ViewKind {
    /// `view`, `_unsafe_view`, `reshape`: the target shape is made local.
    Reshape,
    /// `expand`.
    Expand,
    /// `slice.Tensor`.
    Slice,
    /// `permute`.
    Permute,
    /// `transpose.int`.
    Transpose,
    /// `t`.
    T,
    /// `select.int`.
    Select,
    /// `unsqueeze`.
    Unsqueeze,
    /// `squeeze.dim`.
    SqueezeDim,
}

/// An operator's sharding rule.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sharding {
    /// Elementwise, with its linearity; `inplace` when it writes its first input.
    Pointwise {
        /// How it treats partial inputs.
        lin: Lin,
        /// It writes its first input (its placement cannot change).
        inplace: bool,
    },
    /// A reduction.
    Reduction {
        /// What it computes.
        kind: RedOp,
        /// Which dimensions.
        dims: Dims,
        /// The `keepdim` argument, if it has one.
        keepdim: Option<usize>,
        /// How many results (2 for `max.dim`: values and indices).
        outputs: usize,
    },
    /// A view.
    View(ViewKind),
    /// A rule of its own.
    Special(Special),
    /// A creation operator: its result is replicated.
    Creation,
    /// No rule, on purpose: the operator runs on replicated inputs (and counts in
    /// `metrics().sharding_fallbacks`). The reason is shown by `tpuemu ops`.
    Replicate(&'static str),
}

impl Sharding {
    /// An elementwise operator that does not write its inputs.
    pub const fn pointwise(lin: Lin) -> Self {
        Sharding::Pointwise {
            lin,
            inplace: false,
        }
    }

    /// A reduction with one result.
    pub const fn reduction(kind: RedOp, dims: Dims, keepdim: Option<usize>) -> Self {
        Sharding::Reduction {
            kind,
            dims,
            keepdim,
            outputs: 1,
        }
    }

    /// The family name (`pointwise`, `reduction`, ...), `None` for replicated fallbacks.
    pub fn family(&self) -> Option<&'static str> {
        Some(match self {
            Sharding::Pointwise { .. } => "pointwise",
            Sharding::Reduction { .. } => "reduction",
            Sharding::View(_) => "view",
            Sharding::Special(s) => match s {
                Special::Mm
                | Special::Addmm
                | Special::Bmm
                | Special::Baddbmm
                | Special::Mv
                | Special::Dot
                | Special::Attention
                | Special::FlashAttention => "matrix",
                Special::Softmax
                | Special::SoftmaxBackward
                | Special::LayerNorm
                | Special::RmsNorm
                | Special::LayerNormBackward
                | Special::NllLoss
                | Special::NllLossBackward => "nn",
                _ => "data",
            },
            Sharding::Creation => "creation",
            Sharding::Replicate(_) => return None,
        })
    }
}
