//! `torch.matmul`: PyTorch's dispatch over operand ranks onto `dot`, `mv`, `mm` and `bmm`, with
//! broadcast batch dims.

use super::{bmm, dot, mm, mv, relayout, reshaped};
use crate::error::{Result, TpuError};
use crate::layout::broadcast_shapes;
use crate::ops::helpers::OpScope;
use crate::ops::layout_ops;
use crate::tensor::Tensor;

/// `[..., r, c]` as `[batch, r, c]`: a view when the batch dims merge, else a contiguous copy.
fn flatten_batch(t: &Tensor) -> Result<Tensor> {
    let nd = t.dim();
    let (r, c) = (t.shape()[nd - 2], t.shape()[nd - 1]);
    let want = [t.shape()[..nd - 2].iter().product(), r, c];
    if nd == 3 {
        return Ok(t.clone());
    }
    if let Some(l) = t.layout().view_as(&want) {
        return Ok(t.with_layout(l));
    }
    Ok(reshaped(&layout_ops::contiguous(t)?, &want))
}

/// Broadcasts the batch dims of `a [..., m, k]` and `b [..., k, n]` (both at least 2-D) and
/// flattens them: the 3-D operands and the batch shape.
pub(crate) fn batch_operands(a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor, Vec<usize>)> {
    let (na, nb) = (a.dim(), b.dim());
    let batch = broadcast_shapes(&a.shape()[..na - 2], &b.shape()[..nb - 2])?;
    let expand = |t: &Tensor| -> Result<Tensor> {
        let nd = t.dim();
        let mut s: Vec<usize> = batch.clone();
        s.extend_from_slice(&t.shape()[nd - 2..]);
        flatten_batch(&relayout(t, |l| l.broadcast_to(&s))?)
    };
    Ok((expand(a)?, expand(b)?, batch))
}

/// `torch.matmul(a, b)` with PyTorch's rules: vector-vector is `dot`, matrix-vector `mv`,
/// matrix-matrix `mm`; a batched operand with a matrix or vector folds its batch into the rows
/// of one `mm`/`mv` when that needs no copy; otherwise the batch dims broadcast and the product
/// is one `bmm` (a vector operand is unsqueezed, and the added dim removed from the result).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let _op = OpScope::new("aten::matmul", &[a, b])?;
    let (da, db) = (a.dim(), b.dim());
    if da == 0 || db == 0 {
        return Err(TpuError::BadArgs(format!(
            "both arguments to matmul need to be at least 1D, but they are {da}D and {db}D"
        )));
    }
    match (da, db) {
        (1, 1) => dot(a, b),
        (2, 1) => mv(a, b),
        (1, 2) => {
            let r = mm(&relayout(a, |l| l.unsqueeze(0))?, b)?;
            Ok(reshaped(&r, &[b.shape()[1]]))
        }
        (2, 2) => mm(a, b),
        (_, 1 | 2) => {
            // Fold the batch into the rows when that is a view.
            let k = a.shape()[da - 1];
            let lead = &a.shape()[..da - 1];
            let rows: usize = lead.iter().product();
            if let Some(l) = a.layout().view_as(&[rows, k]) {
                let a2 = a.with_layout(l);
                let mut shape = lead.to_vec();
                let r = if db == 1 {
                    mv(&a2, b)?
                } else {
                    shape.push(b.shape()[1]);
                    mm(&a2, b)?
                };
                return Ok(reshaped(&r, &shape));
            }
            if db == 1 {
                let r = batched(a, &relayout(b, |l| l.unsqueeze(1))?)?;
                return relayout(&r, |l| l.squeeze(-1));
            }
            batched(a, b)
        }
        (1, _) => {
            let r = batched(&relayout(a, |l| l.unsqueeze(0))?, b)?;
            relayout(&r, |l| l.squeeze(-2))
        }
        _ => batched(a, b),
    }
}

/// The general `matmul` case: batch dims broadcast, one `bmm`.
fn batched(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a3, b3, mut shape) = batch_operands(a, b)?;
    let r = bmm(&a3, &b3)?;
    shape.extend_from_slice(&r.shape()[1..]);
    Ok(reshaped(&r, &shape))
}

impl Tensor {
    /// `self @ other` (`torch.matmul`).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        matmul(self, other)
    }
}
