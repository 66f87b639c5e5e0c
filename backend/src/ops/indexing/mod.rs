//! Indexing operators: advanced indexing (`index.Tensor`, `index_put`, their `_unsafe_` and
//! masked forms), compaction by a mask (`nonzero`, `masked_select`, `masked_scatter`, `where`),
//! element scatters (`scatter*`, `take`, `put`), puts along a dim (`index_add`, `index_copy`,
//! `index_fill`, `index_reduce`), searches (`bucketize`, `searchsorted`, `isin`, `bincount`,
//! `histc`, `histogram`), `unique*`, the backward of view operators and the `*_scatter` forms,
//! and the embedding-bag family.
//!
//! Every operator moves data with the row kernels: [`Gather`](crate::ir::NodeKind::Gather)
//! reads table rows at computed offsets, [`IndexPut`](crate::ir::NodeKind::IndexPut) writes
//! (copies, adds, multiplies, maxes) rows at computed offsets in index order. The offsets come
//! from small tile kernels over the index tensors, which replace an index outside its dimension
//! by -1 so that the row kernel faults (an error at the operator, at once in Debug mode, at the
//! next synchronisation otherwise) rather than touch other memory. Operators whose output shape
//! depends on values (`nonzero`, `masked_select`, `unique*`, `bincount`) read one count back to
//! the host, as every TPU runtime must.

pub(crate) mod advanced;
pub(crate) mod along;
pub(crate) mod compact;
pub(crate) mod histogram;
pub(crate) mod scatter;
pub(crate) mod search;
pub(crate) mod unique;
pub(crate) mod view_backward;

pub use advanced::{index, index_put};
pub use compact::{masked_scatter, masked_select, nonzero};

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};
use crate::tensor::Tensor;

/// Checks an index tensor's dtype (int32 or int64).
pub(crate) fn check_index(what: &str, t: &Tensor) -> Result<()> {
    if !matches!(t.dtype(), DType::I32 | DType::I64) {
        return Err(TpuError::DtypeMismatch(format!(
            "{what}(): Expected dtype int32/int64 for index, got {}",
            t.dtype().scalar_type_name()
        )));
    }
    Ok(())
}

/// How an index maps into `[0, size)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Bound {
    /// Negative indices count from the end; anything else outside gives -1 (the row kernel
    /// faults on it).
    Check,
    /// Negative indices count from the end, then clamped to `[0, size)`.
    ClampWrap,
    /// Clamped to `[0, size)` as given (negative become 0).
    Clamp,
}

/// `idx` (i32 lanes) mapped into `[0, size)` as `bound` says.
pub(crate) fn bounded(p: &mut ProgBuilder, idx: PRef, size: usize, bound: Bound) -> PRef {
    let i = DType::I32;
    let idx = p.cast(idx, i);
    let zero = p.constant(Scalar::Int(0), i);
    let n = p.constant(Scalar::Int(size as i64), i);
    let v = if bound == Bound::Clamp {
        idx
    } else {
        let neg = p.cmp(CmpKind::Lt, idx, zero, i);
        let up = p.bin(BinOp::Add, idx, n, i);
        p.select(neg, up, idx, i)
    };
    match bound {
        Bound::Check => {
            let ge = p.cmp(CmpKind::Ge, v, zero, i);
            let lt = p.cmp(CmpKind::Lt, v, n, i);
            let ok = p.bin(BinOp::And, ge, lt, DType::Bool);
            let bad = p.constant(Scalar::Int(-1), i);
            p.select(ok, v, bad, i)
        }
        Bound::Clamp | Bound::ClampWrap => {
            let top = p.constant(Scalar::Int(size as i64 - 1), i);
            let v = p.bin(BinOp::Min, v, top, i);
            p.bin(BinOp::Max, v, zero, i)
        }
    }
}

/// `flat` when `idx` was valid (not -1), else -1.
pub(crate) fn keep_invalid(p: &mut ProgBuilder, idx: PRef, flat: PRef) -> PRef {
    let i = DType::I32;
    let bad = p.constant(Scalar::Int(-1), i);
    let ok = p.cmp(CmpKind::Ne, idx, bad, i);
    p.select(ok, flat, bad, i)
}
