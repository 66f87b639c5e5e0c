//! Backward operators that place gradients by index: `nll_loss_backward` (one elementwise
//! kernel comparing each class index with the row's target) and `embedding_dense_backward`
//! (zeros, then the gradient rows added at their indices in index order).

use super::{F, as_shape, k, mul, zeros};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, GatherNode, NodeKind, UnOp};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_shape, write_into};
use crate::ops::layout_ops;
use crate::ops::sharding::{Sharding, Special};
use crate::tensor::Tensor;

/// `nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index,
/// total_weight)`: the gradient of `-weight[t] * self[i, t]` (averaged over `total_weight` for
/// `mean`): `-w[t] * g` at each row's target class, 0 elsewhere and on rows whose target is
/// `ignore_index`. Targets are not range-checked here (the forward `nll_loss` checks them).
#[allow(clippy::too_many_arguments)]
#[aten(
    "aten::nll_loss_backward",
    dtypes = DType::NUMERIC,
    shard = Sharding::Special(Special::NllLossBackward),
    call = NllLossBackward(grad_output, self_, target, weight, reduction, ignore_index, total_weight)
)]
pub fn nll_loss_backward(
    grad_output: &Tensor,
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: i64,
    ignore_index: i64,
    total_weight: &Tensor,
) -> Result<Tensor> {
    let mut ins = vec![grad_output, input, target];
    ins.extend(weight);
    ins.push(total_weight);
    let op = OpScope::new(NllLossBackward::NAME, &ins)?;
    if !(1..=2).contains(&input.dim()) {
        return Err(TpuError::BadArgs("input tensor should be 1D or 2D".into()));
    }
    if target.dim() > 1 {
        return Err(TpuError::BadArgs(
            "0D or 1D target tensor expected, multi-target not supported".into(),
        ));
    }
    let no_batch = input.dim() == 1 && target.dim() == 0;
    if !no_batch && input.shape()[0] != target.numel() {
        return Err(TpuError::ShapeMismatch(format!(
            "size mismatch (got input: {:?}, target: {:?})",
            input.shape(),
            target.shape()
        )));
    }
    if !target.dtype().is_int() {
        return Err(TpuError::DtypeMismatch(format!(
            "expected scalar type Long but found {}",
            target.dtype().scalar_type_name()
        )));
    }
    if !input.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"nll_loss_backward\" not implemented for '{}'",
            input.dtype().scalar_type_name()
        )));
    }
    if total_weight.numel() != 1 {
        return Err(TpuError::ShapeMismatch(format!(
            "expected total_weight to be a single element tensor, got: {:?} ({} elements)",
            total_weight.shape(),
            total_weight.numel()
        )));
    }
    let classes = input.shape()[input.dim() - 1];
    if let Some(w) = weight
        && w.numel() != classes
    {
        return Err(TpuError::ShapeMismatch(format!(
            "weight tensor should be defined either for all {classes} classes or no classes but got weight tensor of shape: {:?}",
            w.shape()
        )));
    }
    let mean = match reduction {
        0 => false,
        1 => true,
        2 => false,
        r => {
            return Err(TpuError::BadArgs(format!(
                "{r} is not a valid value for reduction"
            )));
        }
    };
    let batched = input.dim() == 2;
    // Per-row operands as [N, 1] (or scalars without a batch dim).
    let g = if reduction == 0 && batched {
        let rows_n = input.shape()[0];
        if grad_output.dim() != 1 || grad_output.shape()[0] != rows_n {
            return Err(TpuError::ShapeMismatch(format!(
                "Expected a tensor of dimension 1 and tensor.size[0] == {rows_n} but got: dimension {} and tensor.size[0] == {}",
                grad_output.dim(),
                grad_output.shape().first().copied().unwrap_or(1)
            )));
        }
        as_shape(grad_output, &[rows_n, 1], "grad_output")?
    } else {
        if grad_output.numel() != 1 {
            return Err(TpuError::ShapeMismatch(format!(
                "Expected a single element grad_output tensor, but got: {:?}",
                grad_output.shape()
            )));
        }
        as_shape(grad_output, &[], "grad_output")?
    };
    let t = if batched {
        as_shape(target, &[input.shape()[0], 1], "target")?
    } else {
        as_shape(target, &[], "target")?
    };
    let tw = as_shape(total_weight, &[], "total_weight")?;
    let w = weight
        .map(|w| as_shape(w, &[classes], "weight"))
        .transpose()?;
    let mut inputs = vec![&g, &t, &tw];
    inputs.extend(w.as_ref());
    let out = input.dtype();
    let class_dim = (input.dim() - 1) as u32;
    Ok(map_shape(&op, input.shape(), &inputs, &[out], |p, r| {
        let c = p.index(class_dim);
        let tv = p.cast(r[1], DType::I32);
        let hit = p.cmp(CmpKind::Eq, c, tv, DType::I32);
        let ign = p.constant(Scalar::Int(ignore_index), DType::I32);
        let kept = p.cmp(CmpKind::Ne, tv, ign, DType::I32);
        let on = p.bin(BinOp::And, hit, kept, DType::I32);
        // PyTorch computes `-(g / total_weight)` in the input's dtype, then `w[t] * grad`.
        let gv = p.cast(r[0], F);
        let gv = if mean {
            let twv = p.cast(r[2], F);
            let q = p.bin(BinOp::Div, gv, twv, F);
            let q = p.round(q, out);
            p.cast(q, F)
        } else {
            gv
        };
        let ng = p.un(UnOp::Neg, gv, F);
        let val = if r.len() > 3 {
            let wv = p.cast(r[3], F);
            mul(p, wv, ng)
        } else {
            ng
        };
        let zero = k(p, 0.0);
        vec![p.select(on, val, zero, F)]
    })?
    .remove(0))
}

/// `nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index,
/// total_weight)`: [`nll_loss_backward`] of the pixels as rows — `self` `[N, C, H, W]` seen
/// as `[N·H·W, C]`, `target` `[N, H, W]` as `[N·H·W]` (and `reduction='none'`'s
/// `grad_output` likewise) — its result laid back as `[N, C, H, W]`.
#[allow(clippy::too_many_arguments)]
#[aten(
    "aten::nll_loss2d_backward",
    dtypes = DType::NUMERIC,
    shard = Sharding::Replicate("the class dim of a pixel's row is dim 1: no sharding rule yet"),
    kind = Decomposition,
    call = NllLoss2dBackward(grad_output, self_, target, weight, reduction, ignore_index, total_weight)
)]
pub fn nll_loss2d_backward(
    grad_output: &Tensor,
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: i64,
    ignore_index: i64,
    total_weight: &Tensor,
) -> Result<Tensor> {
    crate::ops::nn::spatial_shapes(input, target)?;
    let (xs, ts) = (input.shape(), target.shape());
    let (n, c, h, w) = (xs[0] as i64, xs[1] as i64, xs[2] as i64, xs[3] as i64);
    let rows = input.permute(&[0, 2, 3, 1])?.reshape(&[n * h * w, c])?;
    let t = target.reshape(&[n * h * w])?;
    let g = if reduction == 0 {
        if grad_output.shape() != ts {
            return Err(TpuError::ShapeMismatch(format!(
                "grad_output must have the target's shape {ts:?} for reduction='none', got {:?}",
                grad_output.shape()
            )));
        }
        grad_output.reshape(&[n * h * w])?
    } else {
        grad_output.clone()
    };
    let r = nll_loss_backward(&g, &rows, &t, weight, reduction, ignore_index, total_weight)?;
    r.reshape(&[n, h, w, c])?
        .permute(&[0, 3, 1, 2])?
        .contiguous()
}

/// `embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
/// scale_grad_by_freq)`: a `[num_weights, D]` gradient where row `indices[i]` accumulates
/// `grad_output[i]` in index order (rounding after each addition, as PyTorch's CPU kernel
/// does); the `padding_idx` row stays zero. With `scale_grad_by_freq` each gradient row is
/// first divided by how often its index occurs.
#[aten(
    "aten::embedding_dense_backward",
    dtypes = DType::NUMERIC,
    shard = Sharding::Special(Special::EmbeddingBackward),
    call = EmbeddingDenseBackward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
)]
pub fn embedding_dense_backward(
    grad_output: &Tensor,
    indices: &Tensor,
    num_weights: i64,
    padding_idx: i64,
    scale_grad_by_freq: bool,
) -> Result<Tensor> {
    let op = OpScope::new(EmbeddingDenseBackward::NAME, &[grad_output, indices])?;
    if !matches!(indices.dtype(), DType::I32 | DType::I64) {
        return Err(TpuError::DtypeMismatch(format!(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got {} instead (while checking arguments for embedding_backward)",
            indices.dtype().scalar_type_name()
        )));
    }
    if !grad_output.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"embedding_dense_backward\" not implemented for '{}'",
            grad_output.dtype().scalar_type_name()
        )));
    }
    let rows_n = usize::try_from(num_weights)
        .map_err(|_| TpuError::BadArgs(format!("num_weights must be >= 0, got {num_weights}")))?;
    let d = if grad_output.dim() == 0 {
        1
    } else {
        grad_output.shape()[grad_output.dim() - 1]
    };
    let count = indices.numel();
    if grad_output.numel() != count * d {
        return Err(TpuError::ShapeMismatch(format!(
            "embedding_dense_backward: grad_output of shape {:?} does not hold a gradient row for each of the {count} indices {:?}",
            grad_output.shape(),
            indices.shape()
        )));
    }
    let dtype = grad_output.dtype();
    let src = as_shape(grad_output, &[count, d], "grad_output")?;
    let idx = as_shape(indices, &[count], "indices")?;
    let idx = if idx.is_contiguous() {
        idx
    } else {
        layout_ops::contiguous(&idx)?
    };
    let src = if src.layout().shape[1] <= 1 || src.layout().strides[1] == 1 {
        src
    } else {
        layout_ops::contiguous(&src)?
    };
    let node = |rows| GatherNode {
        rows,
        row_len: d,
        count,
        check_bounds: true,
        zero_table: false,
    };
    let src = if scale_grad_by_freq && count > 0 && d > 0 {
        // How often each index occurs, read back per gradient row.
        let counts = zeros(&op, &[rows_n, 1], F)?;
        let ones = map_shape(&op, &[count, 1], &[], &[F], |p, _| vec![k(p, 1.0)])?.remove(0);
        op.submit(
            NodeKind::IndexAdd(GatherNode {
                rows: rows_n,
                row_len: 1,
                count,
                check_bounds: true,
                zero_table: false,
            }),
            vec![idx.view(), ones.view()],
            vec![counts.view()],
        )?;
        let per_row = Tensor::empty(op.rt(), &[count, 1], F)?;
        op.submit(
            NodeKind::Gather(GatherNode {
                rows: rows_n,
                row_len: 1,
                count,
                check_bounds: true,
                zero_table: false,
            }),
            vec![counts.view(), idx.view()],
            vec![per_row.view()],
        )?;
        map_shape(&op, &[count, d], &[&src, &per_row], &[dtype], |p, r| {
            let g = p.cast(r[0], F);
            let c = p.cast(r[1], F);
            let one = k(p, 1.0);
            let s = p.bin(BinOp::Div, one, c, F);
            vec![mul(p, g, s)]
        })?
        .remove(0)
    } else {
        src
    };
    let out = zeros(&op, &[rows_n, d], dtype)?;
    op.submit(
        NodeKind::IndexAdd(node(rows_n)),
        vec![idx.view(), src.view()],
        vec![out.view()],
    )?;
    if (0..num_weights).contains(&padding_idx) && d > 0 {
        let row = out.with_layout(out.layout().select(0, padding_idx)?);
        write_into(&op, &row, &[], |p, _| p.constant(Scalar::Int(0), dtype))?;
    }
    Ok(out)
}
