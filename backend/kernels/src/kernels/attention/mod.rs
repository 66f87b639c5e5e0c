//! Flash attention: scaled dot-product attention as one kernel whose `L x S` scores never
//! leave VMEM (Dao et al., "FlashAttention", 2022; the online softmax of Milakov and
//! Gimelshein, 2018).
//!
//! For each (batch, key/value head) the kernel loads that head's keys and values into VMEM
//! once, then serves every query head of the group (grouped-query attention reads them once per
//! group). Queries stream in blocks of `bq` rows, double-buffered. For each query block:
//! - **forward** ([`forward`]): for each key block of `bk` columns, `S = Q K^T` on the matrix
//!   units (the block's rows dealt out over the units), then, row by row in the vector unit,
//!   the running maximum `m`, the weights `P = exp(scale S - m)` (in the inputs' dtype), the
//!   running sum `l` and the rescaling of the output accumulator, then `O += P V` on the
//!   matrix units. At the end `O / l` is stored, and `lse = m + log l` for the backward.
//! - **backward** ([`backward`]): the scores are recomputed from `Q`, `K` and `lse`;
//!   `dV += P^T dO`, `dP = dO V^T`, `dS = P (dP - D)` with `D = rowsum(dO * O)`,
//!   `dQ += scale dS K`, `dK += scale dS^T Q`, accumulated in f32 in VMEM.
//!
//! With a causal mask, key blocks entirely above the diagonal are skipped (never loaded into
//! a matrix unit), blocks entirely below it run unmasked in a loop, and only the blocks the
//! diagonal crosses are masked, by adding one of 17 precomputed bias tiles (0 or -inf) to
//! each group of 8 rows. Bytes through HBM: each operand read once (queries once per query
//! head, keys and values once per key/value head), each result written once.
//!
//! Both kernels are software-pipelined so that the matrix units and the vector unit work at
//! the same time (a product's results come back hundreds of cycles after it is issued):
//! - the scores (and, backward, `dP`) of key block `j + 2` are issued before the vector unit
//!   starts on block `j`, into a ring of three buffers; forward, the next query block's first
//!   scores are issued during the current one's last key blocks;
//! - forward, block `j` adds `P V` into one of two accumulators, `o[j % 2]`, so that the
//!   rescaling before the addition (folded into the softmax's pass) waits for the product of
//!   two blocks ago; the output is the last accumulator plus the other rescaled once more;
//! - the vector work runs as a wavefront over all of a block's groups of 8 rows
//!   ([`common::interleave`]), one register slot per step, an empty step after each
//!   long-latency one; backward, the weights and `dS` are one pass;
//! - backward, `dV` and `dK` deal the query rows (their K dimension) over the matrix units;
//! - the per-row sweeps that finish a block (forward `O / l` and `lse`, backward `D` and the
//!   f32 accumulators' conversion) run as wavefronts over the groups of 8 rows too, their
//!   tail-lane masks made once;
//! - a head's result stores stay in flight into the next head and are waited for only when
//!   their staging buffer is written again (`dK` and `dV` have one each); the semaphores are
//!   signalled once before the first head as if a head before it had stored, and the last
//!   head's stores are waited for at the end;
//! - with one query head per key/value head, a head's loads (keys, values, the first query
//!   rows, backward the logsumexp) are issued together and waited for once.
//!
//! `cargo run --release -p tpuemu-backend --example attention_calib -- B H HKV L E [causal]`
//! prints a shape's cycles and units' busy times (`CALIB_CHIP` picks the chip).
//!
//! The kernel takes operands with any strides whose innermost stride is 1; an operand the
//! kernel cannot take, or heads too long for VMEM, is reported as [`KernelError`] before
//! anything runs, and the operator falls back to its decomposition.

mod backward;
mod common;
mod forward;
mod layout;

use tpuemu_isa::ChipInfo;
use tpuemu_isa::ops::{MemFmt, MxuFmt, Precision};

use super::KernelError;
use crate::dtype::DType;
use crate::ir::{AttentionNode, Node};

pub use backward::build as build_backward;
pub use forward::build as build_forward;

/// Lanes of a vector register: the width of a key block.
const LANES: u32 = 128;

/// Element strides `[batch, head, row]` of one operand (its innermost stride is 1).
pub type Strides = [i64; 3];

/// What a flash-attention kernel computes, with its operands' layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnSpec {
    /// Shapes and options.
    pub node: AttentionNode,
    /// The operands' dtype (bf16 or f32).
    pub dtype: DType,
    /// Strides of every operand, in the node's order (inputs, then outputs).
    pub strides: Vec<Strides>,
}

impl AttnSpec {
    /// The kernel cache key.
    pub fn key(&self) -> String {
        format!(
            "attention {:?} {:?} {:?}",
            self.node, self.dtype, self.strides
        )
    }

    /// Element size in bytes.
    pub fn esz(&self) -> u32 {
        self.dtype.size() as u32
    }

    /// The vector load/store format of the operands.
    pub fn mem_fmt(&self) -> MemFmt {
        if self.dtype == DType::BF16 {
            MemFmt::Bf16
        } else {
            MemFmt::W32
        }
    }

    /// The matrix-unit format and precision.
    pub fn mxu(&self) -> (MxuFmt, Precision) {
        if self.dtype == DType::BF16 {
            (MxuFmt::Bf16, Precision::P1)
        } else {
            (MxuFmt::F32, self.node.precision.isa())
        }
    }

    /// Query heads per key/value head.
    pub fn group(&self) -> u32 {
        (self.node.heads / self.node.kv_heads) as u32
    }
}

/// Block sizes for `chip`: `(bq, bk)`.
pub fn blocks(n: &AttentionNode, chip: &ChipInfo) -> (u32, u32) {
    let c = &chip.core;
    let bk = LANES.min(c.mxu_rows).min(c.mxu_cols);
    // Enough query rows to give every matrix unit a full array's worth.
    let bq = (c.mxus * c.mxu_rows.max(8)).clamp(8, 512);
    let l8 = (n.l as u32).div_ceil(8) * 8;
    (bq.min(l8), bk)
}

/// The kernel spec of an attention node, and the storage offset of each operand (in
/// elements), in the node's order.
pub fn spec_of(node: &Node, n: &AttentionNode) -> Result<(AttnSpec, Vec<usize>), KernelError> {
    let views: Vec<_> = node.inputs.iter().chain(&node.outputs).collect();
    let dtype = node.inputs[0].dtype;
    if dtype != DType::BF16 && dtype != DType::F32 {
        return Err(KernelError::Unsupported(format!(
            "flash attention takes bf16 or f32, not {dtype:?}"
        )));
    }
    if n.kv_heads == 0 || !n.heads.is_multiple_of(n.kv_heads) {
        return Err(KernelError::Unsupported(
            "key/value heads must divide the query heads".into(),
        ));
    }
    let mut strides = Vec::new();
    for v in &views {
        let st = &v.layout.strides;
        let shape = &v.layout.shape;
        let is_lse = shape.len() == 3;
        let want = if v.dtype == DType::F32 && is_lse {
            DType::F32
        } else {
            dtype
        };
        if v.dtype != want {
            return Err(KernelError::Unsupported(
                "flash attention operands must share one dtype".into(),
            ));
        }
        let s: Strides = if is_lse {
            if shape[2] > 1 && st[2] != 1 {
                return Err(KernelError::Unsupported("lse rows must be dense".into()));
            }
            [st[0] as i64, st[1] as i64, 1]
        } else {
            if shape[3] > 1 && st[3] != 1 {
                return Err(KernelError::Unsupported(
                    "flash attention needs rows with inner stride 1".into(),
                ));
            }
            [st[0] as i64, st[1] as i64, st[2] as i64]
        };
        if s.iter().any(|x| *x < 0) {
            return Err(KernelError::Unsupported("negative strides".into()));
        }
        strides.push(s);
    }
    let offsets = views.iter().map(|v| v.layout.offset).collect();
    Ok((
        AttnSpec {
            node: n.clone(),
            dtype,
            strides,
        },
        offsets,
    ))
}

/// VMEM bytes the kernel needs on `chip`; an error when they do not fit.
pub fn check_fits(n: &AttentionNode, dtype: DType, chip: &ChipInfo) -> Result<(), KernelError> {
    let spec = AttnSpec {
        node: n.clone(),
        dtype,
        strides: Vec::new(),
    };
    let need = if n.backward {
        layout::BwdLayout::new(&spec, chip).end
    } else {
        layout::FwdLayout::new(&spec, chip).end
    };
    if need as u64 > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(format!(
            "flash attention needs {need} bytes of VMEM for one head ({} keys of width {} and {})",
            n.s, n.e, n.ev
        )));
    }
    if n.e as u64 * 4 * LANES as u64 > i32::MAX as u64 {
        return Err(KernelError::TooLarge("head too wide".into()));
    }
    Ok(())
}

/// A bump allocator of VMEM, 4 KiB aligned.
pub struct Bump {
    pub end: u32,
}

impl Bump {
    pub fn take(&mut self, bytes: u64) -> u32 {
        let a = self.end;
        let b = bytes.div_ceil(4096) * 4096;
        self.end = u32::try_from(self.end as u64 + b).unwrap_or(u32::MAX);
        a
    }
}

/// `x * k` as an i32 immediate, or an error naming `what`.
pub fn imm(x: i64, what: &str) -> Result<i32, KernelError> {
    i32::try_from(x).map_err(|_| KernelError::TooLarge(format!("{what} above 2 GiB")))
}
