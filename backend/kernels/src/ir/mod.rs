//! The graph IR: what operators produce and executors run.
//!
//! An operator becomes one or more [`Node`]s. A node reads [`View`]s (a storage, a layout and a
//! dtype) and writes views (usually fresh contiguous storages). The Strict executor runs each
//! operator's nodes at once; DeferAndFuse records them and fuses across operators; Compile does
//! the same for a whole graph. The kinds:
//! - [`NodeKind::Tile`]: elementwise work and reductions along the trailing dims (the general
//!   kernel: maps, broadcasts, copies, sums, softmax and norms), described by a [`prog::Prog`];
//! - [`NodeKind::Matmul`]: (batched) matrix products on the matrix units;
//! - [`NodeKind::Gather`] / [`NodeKind::IndexAdd`]: data-dependent row movement (embedding,
//!   index_select, and their backward);
//! - [`NodeKind::Attention`]: flash attention, forward or backward, as one kernel whose scores
//!   never leave VMEM.

pub mod key;
pub mod prog;
mod tag;

use crate::dtype::DType;
use crate::layout::Layout;
use crate::storage::StorageRef;

pub use prog::{BinOp, CmpKind, POp, PRef, Prog, ProgBuilder, RedKind, UnOp};
pub use tag::Names;
pub use tag::{OpName, OpTag, Shapes};

/// A storage seen through a layout, with a dtype.
#[derive(Clone, Debug)]
pub struct View {
    /// The memory.
    pub storage: StorageRef,
    /// Shape, strides and offset in elements.
    pub layout: Layout,
    /// Element type.
    pub dtype: DType,
}

/// A matrix product `out[b] = epilogue(a[b] @ w[b], extras...)`, batched over a leading dim.
#[derive(Clone, Debug, PartialEq)]
pub struct MatmulNode {
    /// Batch count (1 for `mm`).
    pub batch: usize,
    /// Rows of the product.
    pub m: usize,
    /// Columns of the product.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Matrix-unit precision for f32 operands, as set when the operator was called (a
    /// deferred or compiled product keeps the precision of its call).
    pub precision: MatmulPrecision,
    /// Applied to each output element: `Input(0)` is the f32 product, `Input(1 + i)` the extra
    /// input `2 + i` of the node (broadcast to `[batch, m, n]`); one output, converted to the
    /// output dtype.
    pub epilogue: Prog,
    /// A second product computed in the same kernel from the first one's LHS transposed (a
    /// linear layer's backward: `dX = dY @ W` beside `dW = dY^T @ X`), so that the shared
    /// operand crosses HBM once. Batch 1; its right-hand side is the node's last input and
    /// its product the node's last output; the extras and outputs of the epilogue above come
    /// before them.
    pub twin: Option<TwinProduct>,
    /// A reduction along the product's rows run on each finished output tile in VMEM
    /// (cross-entropy on the language-model head's logits), so that the product never
    /// crosses HBM: the node's inputs after the epilogue's extras are the row program's
    /// (but the product), its outputs the row program's. Not with a twin.
    pub rows: Option<Box<RowEpilogue>>,
}

/// The row reduction of a [`MatmulNode`]: a tile program over `[m, n]` reducing along the `n`
/// columns (`row_dims` 1), one of whose inputs is the product, as the epilogue computes it.
#[derive(Clone, Debug)]
pub struct RowEpilogue {
    /// The program, as a `Tile` node over `[m, n]` with one row dim runs it.
    pub prog: Prog,
    /// Which of its inputs is the product.
    pub product: u32,
    /// How many inputs it has, the product among them (the node's last `inputs - 1`).
    pub inputs: usize,
    /// The product as the row node read it (its storage is never written when the two run as
    /// one kernel; it holds the product when they run apart).
    pub product_view: View,
    /// The product as the matmul wrote it (the same elements, the product's own shape).
    pub product_out: View,
    /// The row node's iteration shape (`[m, n]`, or more dims of the same elements).
    pub shape: Vec<usize>,
}

impl PartialEq for RowEpilogue {
    fn eq(&self, o: &Self) -> bool {
        let (v, w) = (&self.product_view, &o.product_view);
        self.prog == o.prog
            && self.product == o.product
            && self.inputs == o.inputs
            && self.shape == o.shape
            && v.storage.id() == w.storage.id()
            && v.layout == w.layout
            && v.dtype == w.dtype
            && self.product_out.layout == o.product_out.layout
    }
}

/// The second product of a [`MatmulNode`]: `a^T [k, m] @ c [m, n]`, converted to its output's
/// dtype (no epilogue of its own).
#[derive(Clone, Debug, PartialEq)]
pub struct TwinProduct {
    /// Columns of the twin's product (its rows are the first product's `k`, its inner
    /// dimension the first product's `m`).
    pub n: usize,
}

impl MatmulNode {
    /// How many of the node's inputs (and outputs) are the twin's: its right-hand side (its
    /// product), last.
    pub fn twin_operands(&self) -> usize {
        usize::from(self.twin.is_some())
    }
}

impl Node {
    /// A product fused with a second product or a row reduction as two nodes of their own (see
    /// [`Node::split_pair`], [`Node::split_rows`]); `None` for any other node.
    pub fn split_fused(&self) -> Option<[Node; 2]> {
        self.split_pair().or_else(|| self.split_rows())
    }

    /// A product and its row reduction as two nodes: the product (with its epilogue) written
    /// to the storage the row node read it from, then the row node.
    pub fn split_rows(&self) -> Option<[Node; 2]> {
        let NodeKind::Matmul(mm) = &self.kind else {
            return None;
        };
        let r = mm.rows.as_ref()?;
        let first_row_in = self.inputs.len().checked_sub(r.inputs - 1)?;
        let mut product = mm.clone();
        product.rows = None;
        let mut row_inputs = self.inputs[first_row_in..].to_vec();
        row_inputs.insert(r.product as usize, r.product_view.clone());
        Some([
            Node {
                kind: NodeKind::Matmul(product),
                inputs: self.inputs[..first_row_in].to_vec(),
                outputs: vec![r.product_out.clone()],
                op: self.op.clone(),
            },
            Node {
                kind: NodeKind::Tile {
                    shape: r.shape.clone(),
                    row_dims: 1,
                    prog: r.prog.clone(),
                },
                inputs: row_inputs,
                outputs: self.outputs.clone(),
                op: self.op.clone(),
            },
        ])
    }

    /// A product pair's two products as nodes of their own: the first with its epilogue, then
    /// the twin (`a^T @ c`, converted to its output's dtype). `None` for any other node. For
    /// the chips and core counts the pair's kernel does not serve.
    pub fn split_pair(&self) -> Option<[Node; 2]> {
        let NodeKind::Matmul(mm) = &self.kind else {
            return None;
        };
        let t = mm.twin.as_ref()?;
        let (n_in, n_out) = (self.inputs.len() - 1, self.outputs.len() - 1);
        let mut first = mm.clone();
        first.twin = None;
        let a = &self.inputs[0];
        let at = View {
            storage: a.storage.clone(),
            layout: a.layout.transpose(-1, -2).ok()?,
            dtype: a.dtype,
        };
        let p2 = &self.outputs[n_out];
        let mut b = ProgBuilder::new();
        let r = b.input(0, DType::F32, false);
        let r = b.cast(r, p2.dtype);
        b.output(r);
        let twin = MatmulNode {
            batch: 1,
            m: mm.k,
            n: t.n,
            k: mm.m,
            precision: mm.precision,
            epilogue: b.finish(),
            twin: None,
            rows: None,
        };
        Some([
            Node {
                kind: NodeKind::Matmul(first),
                inputs: self.inputs[..n_in].to_vec(),
                outputs: self.outputs[..n_out].to_vec(),
                op: self.op.clone(),
            },
            Node {
                kind: NodeKind::Matmul(twin),
                inputs: vec![at, self.inputs[n_in].clone()],
                outputs: vec![p2.clone()],
                op: self.op.clone(),
            },
        ])
    }
}

/// Flash attention over `[batch, heads, rows, dim]` operands (any strides, inner stride 1).
///
/// Forward inputs: `q [B, H, L, E]`, `k [B, Hk, S, E]`, `v [B, Hk, S, Ev]`; outputs
/// `out [B, H, L, Ev]` (q's dtype) and `lse [B, H, L]` (f32, the logsumexp of each row of scaled,
/// masked scores). Backward inputs: `q`, `k`, `v`, `out`, `grad_out`, `lse`; outputs `dq`,
/// `dk`, `dv` (the inputs' shapes and dtype). Query head `h` reads key/value head
/// `h / (H / Hk)` (grouped-query attention when `Hk < H`).
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionNode {
    /// Batch size `B`.
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `Hk` (divides `H`).
    pub kv_heads: usize,
    /// Query rows `L`.
    pub l: usize,
    /// Key rows `S`.
    pub s: usize,
    /// Query/key width `E`.
    pub e: usize,
    /// Value width `Ev`.
    pub ev: usize,
    /// Query `i` sees key `j` only when `j <= i` (PyTorch's `is_causal`, top-left aligned).
    pub causal: bool,
    /// The scores' scale (`1 / sqrt(E)` by default).
    pub scale: f64,
    /// Matrix-unit precision for f32 operands.
    pub precision: MatmulPrecision,
    /// The backward pass instead of the forward.
    pub backward: bool,
}

/// Row gather: `out[i, :] = table[index[i], :]`.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherNode {
    /// Rows of the table.
    pub rows: usize,
    /// Elements per row.
    pub row_len: usize,
    /// Number of indices.
    pub count: usize,
    /// Fault (with a clear error) on indices outside the table instead of reading garbage.
    pub check_bounds: bool,
    /// Index-add and index-put only: the table starts as zeros, so its old contents are never
    /// read (set by the `zero table` fusion rule when a zero fill of the table precedes it).
    pub zero_table: bool,
}

/// How an index-put node combines a source row with the table row it lands on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Combine {
    /// `table += src` (bool: or).
    #[default]
    Add,
    /// `table = src`: the last row put at an index wins.
    Copy,
    /// `table *= src` (bool: and).
    Mul,
    /// `table = max(table, src)`, NaN wins.
    Max,
    /// `table = min(table, src)`, NaN wins.
    Min,
}

/// A user kernel (see [`crate::ops::custom`]): its program, and the scalars passed after the
/// buffers.
#[derive(Clone, Debug)]
pub struct CustomNode {
    /// The kernel.
    pub program: std::sync::Arc<tpuemu_isa::Program>,
    /// Scalar arguments after the input and output buffers.
    pub scalars: Vec<u32>,
}

/// What a node computes.
#[derive(Clone, Debug)]
pub enum NodeKind {
    /// Elementwise work over `shape` with reductions along its last `row_dims` dims. Inputs
    /// are full operands (broadcast to `shape`) or per-row operands (broadcast to the outer
    /// dims), as the program's `Input` nodes say; outputs are full or per-row as the program's
    /// output nodes are.
    Tile {
        /// The iteration space.
        shape: Vec<usize>,
        /// How many trailing dims form the row.
        row_dims: usize,
        /// What each element and row computes.
        prog: Prog,
    },
    /// Inputs: `a [batch, m, k]`, `w [batch, k, n]` (any strides), then the epilogue's extra
    /// inputs (broadcastable to `[batch, m, n]`); one output `[batch, m, n]`.
    Matmul(MatmulNode),
    /// Inputs: table `[rows, row_len]`, index `[count]` (int); output `[count, row_len]`.
    Gather(GatherNode),
    /// Inputs: `dst [rows, row_len]` (also the output, updated in place), index `[count]`,
    /// source `[count, row_len]`: `dst[index[i], :] += src[i, :]` in index order.
    IndexAdd(GatherNode),
    /// Like `IndexAdd`, combining each source row with its table row as [`Combine`] says
    /// (`scatter`, `index_put`, `scatter_reduce`, and compaction by computed positions).
    IndexPut(GatherNode, Combine),
    /// A user kernel: inputs then outputs as its buffer arguments (contiguous), then scalars.
    Custom(CustomNode),
    /// Flash attention, forward or backward (see [`AttentionNode`] for the operands).
    Attention(AttentionNode),
}

/// A unit of work.
#[derive(Clone, Debug)]
pub struct Node {
    /// What it computes.
    pub kind: NodeKind,
    /// What it reads.
    pub inputs: Vec<View>,
    /// What it writes.
    pub outputs: Vec<View>,
    /// The operator it came from, and its id (for traces and errors).
    pub op: OpTag,
}

/// Matrix-unit precision for f32 matmuls, as `torch.tpu`/JAX name it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum MatmulPrecision {
    /// One bf16 pass.
    Default,
    /// Three bf16 passes.
    High,
    /// Six bf16 passes.
    Highest,
}

impl MatmulPrecision {
    /// The ISA precision.
    pub fn isa(self) -> tpuemu_isa::ops::Precision {
        match self {
            MatmulPrecision::Default => tpuemu_isa::ops::Precision::P1,
            MatmulPrecision::High => tpuemu_isa::ops::Precision::P3,
            MatmulPrecision::Highest => tpuemu_isa::ops::Precision::P6,
        }
    }
}
