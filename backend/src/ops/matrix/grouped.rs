//! `_grouped_mm` (`torch.nn.functional.grouped_mm`): one matrix product per group, the groups
//! given by the cumulative offsets `offs` (int32) along one dimension — what mixture-of-experts
//! layers call, Hugging Face's among them on a "tpu" device.
//!
//! The four forms, as PyTorch defines them (`G` groups):
//! - `[M, K] x [G, K, N]`, `offs [G]` split M: rows `offs[g-1]..offs[g]` times `B[g]`, `[M, N]`;
//! - `[G, M, K] x [K, N]`, `offs` split N: `A[g]` times columns `offs[g-1]..offs[g]`, `[M, N]`;
//! - `[M, K] x [K, N]`, `offs` split K: `A[:, ks] @ B[ks, :]` per group, `[G, M, N]` (the weight
//!   gradient of the first form);
//! - `[G, M, K] x [G, K, N]` without offsets: `bmm`.
//!
//! Rows (columns) past `offs[G-1]` are zero (PyTorch leaves them unwritten). The offsets stay
//! on the device: each group's share of the split dimension is a 0/1 mask computed from them
//! (`count[i] = #{g : i < offs[g]}` is `G - g` exactly for the indices of group `g`), so the
//! operator records and fuses like any other and never waits for the host. The cost of that
//! choice: every group's product runs over the whole split dimension (masked), `G` times the
//! matrix-unit work of a kernel that skips other groups' tiles (as TPU "megablox" kernels do by
//! prefetching the group sizes into scalar memory); the simulated time is that upper bound.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::aten;
use crate::ops::creation;
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

const NAME: &str = GroupedMm::NAME;

/// `mask[g, i]` (in `dtype`): 1 when index `i` of a split dimension of `len` belongs to group
/// `g` under the cumulative offsets `offs`, else 0.
fn group_mask(offs: &Tensor, len: usize, dtype: DType) -> Result<Tensor> {
    let g = offs.shape()[0] as i64;
    let rt = offs.runtime();
    let idx = creation::arange(
        rt,
        Scalar::Int(0),
        Scalar::Int(len as i64),
        Scalar::Int(1),
        Some(DType::I32),
    )?;
    // below[g, i] = i < offs[g]; count[i] = sum over g.
    let below = idx.unsqueeze(0)?.lt(&offs.unsqueeze(1)?)?;
    let count = below.to_dtype(DType::I32)?.sum(&[0], false)?;
    let want = creation::arange(
        rt,
        Scalar::Int(g),
        Scalar::Int(0),
        Scalar::Int(-1),
        Some(DType::I32),
    )?;
    let count = count.to_dtype(DType::I32)?;
    count.unsqueeze(0)?.eq(&want.unsqueeze(1)?)?.to_dtype(dtype)
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(TpuError::ShapeMismatch(format!("{NAME}: {}", msg())))
    }
}

/// `torch._grouped_mm(a, b, offs, bias, out_dtype)`; see the module doc for the forms.
#[aten(
    "aten::_grouped_mm",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("groups are given by offsets on the device"),
    kind = Decomposition,
    call = GroupedMm(self_, mat2, offs, bias, out_dtype)
)]
pub fn grouped_mm(
    a: &Tensor,
    b: &Tensor,
    offs: Option<&Tensor>,
    bias: Option<&Tensor>,
    out_dtype: Option<DType>,
) -> Result<Tensor> {
    if bias.is_some() {
        return Err(TpuError::Unsupported(format!(
            "{NAME}: bias is not supported (PyTorch's own kernels refuse it too)"
        )));
    }
    if !a.dtype().is_float() || a.dtype() != b.dtype() {
        return Err(TpuError::Unsupported(format!(
            "{NAME}: expected two float operands of one dtype, got {:?} and {:?}",
            a.dtype(),
            b.dtype()
        )));
    }
    if let Some(d) = out_dtype
        && d != a.dtype()
        && d != DType::F32
    {
        return Err(TpuError::Unsupported(format!(
            "{NAME}: out_dtype {d:?} (the operands' dtype or float32)"
        )));
    }
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let out = match (sa.len(), sb.len(), offs) {
        (3, 3, None) => {
            check(sa[0] == sb[0] && sa[2] == sb[1], || {
                format!("batched operands {sa:?} and {sb:?} do not match")
            })?;
            a.bmm(b)?
        }
        (_, _, None) => {
            return Err(TpuError::BadArgs(format!(
                "{NAME}: operands of {} and {} dims need offs",
                sa.len(),
                sb.len()
            )));
        }
        (2, 3, Some(o)) => {
            let g = offs_len(o)?;
            check(sb[0] == g && sa[1] == sb[1], || {
                format!("[M, K] x [G, K, N] with G = {g}: got {sa:?} and {sb:?}")
            })?;
            let m = group_mask(o, sa[0], a.dtype())?; // [G, M]
            let am = a.unsqueeze(0)?.mul(&m.unsqueeze(2)?)?; // [G, M, K]
            am.bmm(b)?.sum(&[0], false)?
        }
        (3, 2, Some(o)) => {
            let g = offs_len(o)?;
            check(sa[0] == g && sa[2] == sb[0], || {
                format!("[G, M, K] x [K, N] with G = {g}: got {sa:?} and {sb:?}")
            })?;
            let m = group_mask(o, sb[1], b.dtype())?; // [G, N]
            let bm = b.unsqueeze(0)?.mul(&m.unsqueeze(1)?)?; // [G, K, N]
            a.bmm(&bm)?.sum(&[0], false)?
        }
        (2, 2, Some(o)) => {
            let g = offs_len(o)?;
            check(sa[1] == sb[0], || {
                format!("[M, K] x [K, N]: got {sa:?} and {sb:?}")
            })?;
            let m = group_mask(o, sa[1], a.dtype())?; // [G, K]
            let am = a.unsqueeze(0)?.mul(&m.unsqueeze(1)?)?; // [G, M, K]
            let gi = g as i64;
            let bb = b
                .unsqueeze(0)?
                .expand(&[gi, sb[0] as i64, sb[1] as i64])?
                .contiguous()?;
            am.bmm(&bb)?
        }
        _ => {
            return Err(TpuError::BadArgs(format!(
                "{NAME}: operands of {} and {} dims (2 or 3 each) with offs",
                sa.len(),
                sb.len()
            )));
        }
    };
    match out_dtype {
        Some(d) if d != out.dtype() => out.to_dtype(d),
        _ => Ok(out),
    }
}

fn offs_len(o: &Tensor) -> Result<usize> {
    if o.dim() != 1 || o.dtype() != DType::I32 {
        return Err(TpuError::BadArgs(format!(
            "{NAME}: offs must be a 1-D int32 tensor, got {:?} {:?}",
            o.dtype(),
            o.shape()
        )));
    }
    Ok(o.shape()[0])
}
