//! `nll_loss_forward` and `nll_loss2d_forward` with PyTorch's semantics for the reductions,
//! class weights and `ignore_index`.

use super::F;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind, UnOp};
use crate::ops::checks::check_range_except;
use crate::ops::creation;
use crate::ops::helpers::{OpScope, rows};
use crate::ops::prims::reshaped;
use crate::ops::reduce::reduced_shape;
use crate::tensor::Tensor;

/// How a loss reduces over the batch (PyTorch's `reduction` enum: 0, 1, 2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reduction {
    /// One loss per sample.
    None,
    /// The weighted mean.
    Mean,
    /// The sum.
    Sum,
}

impl Reduction {
    /// From PyTorch's enum value.
    pub fn from_i64(r: i64) -> Result<Reduction> {
        match r {
            0 => Ok(Reduction::None),
            1 => Ok(Reduction::Mean),
            2 => Ok(Reduction::Sum),
            _ => Err(TpuError::BadArgs(format!(
                "{r} is not a valid value for reduction"
            ))),
        }
    }
}

/// The target dtype check of both nll overloads: PyTorch reads any target that is not uint8
/// as int64.
fn check_target_dtype(target: &Tensor) -> Result<()> {
    if target.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(format!(
            "expected scalar type Long but found {}",
            target.dtype().scalar_type_name()
        )));
    }
    Ok(())
}

/// The shared implementation: `x` has the classes along `class_dim`, `target` the shape of `x`
/// without it.
fn nll_impl(
    op: &OpScope,
    x: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
    ignore_index: i64,
    class_dim: usize,
) -> Result<(Tensor, Tensor)> {
    let dt = x.dtype();
    if !dt.is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"nll_loss_out_frame\" not implemented for '{}'",
            dt.scalar_type_name()
        )));
    }
    let classes = x.shape()[class_dim];
    check_target_dtype(target)?;
    let check = check_range_except(op, target, 0, classes as i64, Some(ignore_index), |t| {
        TpuError::IndexOutOfRange(format!("Target {t} is out of bounds."))
    })?;
    let batched = x.dim() > 1;
    let none = reduction == Reduction::None && batched;
    if target.numel() == 0 || classes == 0 {
        return empty_nll(op, x, class_dim, reduction, none);
    }
    let w = match weight {
        Some(w) => Some(class_weight(op, w, classes, x.dim(), class_dim)?),
        None => None,
    };
    let mut inputs: Vec<&Tensor> = vec![x, target];
    inputs.extend(w.as_ref());
    let nll = Nll {
        op,
        x_shape: x.shape().to_vec(),
        class_dim,
        inputs,
        dt,
        sample: PerSample {
            col_dim: (x.dim() - 1) as u32, // the class dim is last in the iteration space
            ignore: i32::try_from(ignore_index).ok(),
            classes,
        },
    };
    let mean = reduction == Reduction::Mean;
    let (loss, total) = if none {
        nll.per_sample_losses()
    } else if !batched {
        nll.one_sample(mean)
    } else {
        nll.batch(mean)
    }?;
    check.guards(op.rt(), &[&loss, &total]);
    Ok((loss, total))
}

/// The result when there are no samples (or no classes: every row is empty and selects
/// nothing): zeros, or NaN for a mean; a zero total weight.
fn empty_nll(
    op: &OpScope,
    x: &Tensor,
    class_dim: usize,
    reduction: Reduction,
    none: bool,
) -> Result<(Tensor, Tensor)> {
    let (rt, dt) = (op.rt(), x.dtype());
    let shape = reduced_shape(x.shape(), &[class_dim], false);
    let zero = Scalar::Int(0);
    let out = if none {
        creation::full(rt, &shape, zero, dt)?
    } else if reduction == Reduction::Mean {
        creation::full(rt, &[], Scalar::Float(f64::NAN), dt)?
    } else {
        creation::full(rt, &[], zero, dt)?
    };
    Ok((out, creation::full(rt, &[], zero, dt)?))
}

/// The class weight `w` along the class dim of an `ndim`-dim input, broadcast over the dims
/// after it.
fn class_weight(
    op: &OpScope,
    w: &Tensor,
    classes: usize,
    ndim: usize,
    class_dim: usize,
) -> Result<Tensor> {
    let mut shape = vec![classes];
    shape.extend(std::iter::repeat_n(1, ndim - class_dim - 1));
    let l = w
        .layout()
        .view_as(&[classes])
        .and_then(|flat| flat.view_as(&shape))
        .ok_or_else(|| op.err("internal: weight view"))?;
    Ok(w.with_layout(l))
}

/// The per-sample part of the rows kernels: each sample's loss and weight from its row of `x`.
#[derive(Clone, Copy)]
struct PerSample {
    /// The class dim's index in the iteration space (the last).
    col_dim: u32,
    /// `ignore_index`, if an int32 can hold it (else no target equals it).
    ignore: Option<i32>,
    classes: usize,
}

impl PerSample {
    /// Loss and weight of the sample whose row is `r` (`x`, target, optional weight).
    fn build(&self, p: &mut ProgBuilder, r: &[PRef]) -> (PRef, PRef) {
        let col = p.index(self.col_dim);
        let t = p.cast(r[1], DType::I32);
        let hit = p.cmp(CmpKind::Eq, col, t, DType::I32);
        let zero = p.constant(Scalar::Float(0.0), F);
        let xv = p.cast(r[0], F);
        let xs = p.select(hit, xv, zero, F);
        let picked = p.reduce(RedKind::Sum, xs, F);
        let wt = if r.len() > 2 {
            let wv = p.cast(r[2], F);
            let ws = p.select(hit, wv, zero, F);
            p.reduce(RedKind::Sum, ws, F)
        } else {
            p.constant(Scalar::Float(1.0), F)
        };
        let prod = p.bin(BinOp::Mul, picked, wt, F);
        let loss = p.un(UnOp::Neg, prod, F);
        // Samples whose target is `ignore_index` count for nothing.
        let (valid, loss, wt) = match self.ignore {
            Some(ig) => {
                let igc = p.constant(Scalar::Int(ig as i64), DType::I32);
                let valid = p.cmp(CmpKind::Ne, t, igc, DType::I32);
                let l = p.select(valid, loss, zero, F);
                let w = p.select(valid, wt, zero, F);
                (Some(valid), l, w)
            }
            None => (None, loss, wt),
        };
        // Any other target outside [0, C) poisons its loss (a kernel cannot raise).
        let lo = p.constant(Scalar::Int(0), DType::I32);
        let hi = p.constant(Scalar::Int(self.classes as i64), DType::I32);
        let below = p.cmp(CmpKind::Lt, t, lo, DType::I32);
        let above = p.cmp(CmpKind::Ge, t, hi, DType::I32);
        let mut bad = p.bin(BinOp::Or, below, above, DType::Bool);
        if let Some(v) = valid {
            bad = p.bin(BinOp::And, bad, v, DType::Bool);
        }
        let nan = p.constant(Scalar::Float(f64::NAN), F);
        let loss = p.select(bad, nan, loss, F);
        (loss, wt)
    }
}

/// The reduced outputs from a summed loss and weight: the loss (divided by the weight for a
/// mean) and the total weight.
fn finish(p: &mut ProgBuilder, loss: PRef, wt: PRef, mean: bool) -> Vec<PRef> {
    let out = if mean {
        p.bin(BinOp::Div, loss, wt, F)
    } else {
        loss
    };
    vec![out, wt]
}

/// An nll loss over samples with at least one class: its rows kernels, one per reduction.
struct Nll<'a> {
    op: &'a OpScope,
    x_shape: Vec<usize>,
    class_dim: usize,
    /// `x`, the target and the optional class weight.
    inputs: Vec<&'a Tensor>,
    dt: DType,
    sample: PerSample,
}

/// Which inputs are read once per row (the target).
const PER_ROW: [bool; 3] = [false, true, false];

impl Nll<'_> {
    /// `none` on a batch: the per-sample losses and a zero total weight.
    fn per_sample_losses(&self) -> Result<(Tensor, Tensor)> {
        let loss = self.sample_losses(self.dt)?;
        Ok((
            loss,
            creation::full(self.op.rt(), &[], Scalar::Int(0), self.dt)?,
        ))
    }

    /// Each sample's loss, as `dt`.
    fn sample_losses(&self, dt: DType) -> Result<Tensor> {
        let sample = self.sample;
        Ok(rows(
            self.op,
            &self.x_shape,
            &[self.class_dim],
            false,
            &self.inputs,
            &PER_ROW,
            &[(dt, true)],
            |p, r| vec![sample.build(p, r).0],
        )?
        .remove(0))
    }

    /// One sample: the row statistics are the result.
    fn one_sample(&self, mean: bool) -> Result<(Tensor, Tensor)> {
        let (dt, sample) = (self.dt, self.sample);
        let mut o = rows(
            self.op,
            &self.x_shape,
            &[self.class_dim],
            false,
            &self.inputs,
            &PER_ROW,
            &[(dt, true), (dt, true)],
            |p, r| {
                let (l, w) = sample.build(p, r);
                finish(p, l, w, mean)
            },
        )?;
        let tw = o.remove(1);
        Ok((o.remove(0), tw))
    }

    /// A batch: per-sample losses and weights in f32, then their sums over the batch.
    fn batch(&self, mean: bool) -> Result<(Tensor, Tensor)> {
        let (dt, sample) = (self.dt, self.sample);
        if let (&[_, target], Some(ignore)) = (self.inputs.as_slice(), sample.ignore) {
            return self.unweighted_batch(target, ignore, mean);
        }
        let mut o = rows(
            self.op,
            &self.x_shape,
            &[self.class_dim],
            false,
            &self.inputs,
            &PER_ROW,
            &[(F, true), (F, true)],
            |p, r| {
                let (l, w) = sample.build(p, r);
                vec![l, w]
            },
        )?;
        let (losses, weights) = (o.remove(0), o.remove(0));
        let shape = losses.shape().to_vec();
        let all: Vec<usize> = (0..shape.len()).collect();
        let mut o = rows(
            self.op,
            &shape,
            &all,
            false,
            &[&losses, &weights],
            &[false, false],
            &[(dt, true), (dt, true)],
            |p, r| {
                let l = p.reduce(RedKind::Sum, r[0], F);
                let w = p.reduce(RedKind::Sum, r[1], F);
                finish(p, l, w, mean)
            },
        )?;
        let tw = o.remove(1);
        Ok((o.remove(0), tw))
    }
}

impl Nll<'_> {
    /// A batch without class weights: a sample weighs 1 unless its target is `ignore`, so the
    /// total weight is summed from the targets alone, in a kernel of its own recorded first;
    /// then the per-sample losses (f32) and their sum, divided by the total for a mean. A
    /// backward reading the total (`nll_loss_backward`) then waits on the targets only and may
    /// fuse with the forward pass over the same rows. The values are those of [`Self::batch`]'s
    /// other path: the same f32 sums in the same order, the same division.
    fn unweighted_batch(
        &self,
        target: &Tensor,
        ignore: i32,
        mean: bool,
    ) -> Result<(Tensor, Tensor)> {
        let dt = self.dt;
        let shape = target.shape().to_vec();
        let all: Vec<usize> = (0..shape.len()).collect();
        // The targets as one row of `[1, ...]`: a space of its own, which the sum of the
        // losses (over `[...]`) does not fuse with, so that the total keeps depending on the
        // targets alone.
        let one_row: Vec<usize> = [1].iter().chain(&shape).copied().collect();
        let tw = rows(
            self.op,
            &one_row,
            &all.iter().map(|d| d + 1).collect::<Vec<_>>(),
            false,
            &[target],
            &[false],
            &[(F, true), (dt, true)],
            |p, r| {
                let t = p.cast(r[0], DType::I32);
                let ig = p.constant(Scalar::Int(ignore as i64), DType::I32);
                let valid = p.cmp(CmpKind::Ne, t, ig, DType::I32);
                let (one, zero) = (
                    p.constant(Scalar::Float(1.0), F),
                    p.constant(Scalar::Float(0.0), F),
                );
                let w = p.select(valid, one, zero, F);
                let total = p.reduce(RedKind::Sum, w, F);
                vec![total, total]
            },
        )?;
        let (total_f32, total) = (reshaped(&tw[0], &[]), reshaped(&tw[1], &[]));
        let losses = self.sample_losses(F)?;
        let loss = rows(
            self.op,
            &shape,
            &all,
            false,
            &[&losses, &total_f32],
            &[false, true],
            &[(dt, true)],
            |p, r| {
                let l = p.reduce(RedKind::Sum, r[0], F);
                vec![finish(p, l, r[1], mean)[0]]
            },
        )?
        .remove(0);
        Ok((loss, total))
    }
}

/// `torch.nll_loss_forward(x, target, weight, reduction, ignore_index)`: `x` is `[C]` or
/// `[N, C]` (log-probabilities), `target` `[]` or `[N]` (int64). Returns `(output,
/// total_weight)` as PyTorch does: `none` on a batch gives per-sample losses and a zero total
/// weight; otherwise the weighted sum (or its mean over the weights of the non-ignored samples,
/// NaN when there are none) and the total weight.
pub fn nll_loss_forward(
    x: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
    ignore_index: i64,
) -> Result<(Tensor, Tensor)> {
    let mut inputs = vec![x, target];
    inputs.extend(weight);
    let op = OpScope::new("aten::nll_loss_forward", &inputs)?;
    if x.dim() == 0 || x.dim() > 2 {
        return Err(TpuError::ShapeMismatch(
            "input tensor should be 1D or 2D".into(),
        ));
    }
    if target.dim() > 1 {
        return Err(TpuError::ShapeMismatch(
            "0D or 1D target tensor expected, multi-target not supported".into(),
        ));
    }
    let no_batch = x.dim() == 1 && target.dim() == 0;
    if !no_batch && (target.dim() == 0 || x.shape()[0] != target.shape()[0]) {
        return Err(TpuError::ShapeMismatch(format!(
            "size mismatch (got input: {:?}, target: {:?})",
            x.shape(),
            target.shape()
        )));
    }
    let classes = x.shape()[x.dim() - 1];
    if let Some(w) = weight
        && (w.dim() != 1 || w.numel() != classes)
    {
        return Err(TpuError::ShapeMismatch(format!(
            "weight tensor should be defined either for all {classes} classes or no classes but got weight tensor of shape: {:?}",
            w.shape()
        )));
    }
    let class_dim = if x.dim() == 1 { 0 } else { 1 };
    nll_impl(&op, x, target, weight, reduction, ignore_index, class_dim)
}

/// Refuses what `nll_loss2d` (and its backward) cannot take: an input that is not `[N, C, H, W]`,
/// a target that is not `[N, H, W]` of the same `N`, `H`, `W` (PyTorch's messages).
pub(crate) fn spatial_shapes(x: &Tensor, target: &Tensor) -> Result<()> {
    if target.dim() != 3 {
        return Err(TpuError::ShapeMismatch(format!(
            "only batches of spatial targets supported (3D tensors) but got targets of dimension: {}",
            target.dim()
        )));
    }
    if x.dim() != 4 {
        return Err(TpuError::ShapeMismatch(format!(
            "only batches of spatial inputs supported (4D tensors), but got input of dimension: {}",
            x.dim()
        )));
    }
    let (xs, ts) = (x.shape(), target.shape());
    if xs[0] != ts[0] || xs[2] != ts[1] || xs[3] != ts[2] {
        // PyTorch's wording, spacing included.
        return Err(TpuError::ShapeMismatch(format!(
            "size mismatch (got input: {xs:?} , target: {ts:?}"
        )));
    }
    Ok(())
}

/// `torch.nll_loss2d_forward(x, target, weight, reduction, ignore_index)`: `x` is
/// `[N, C, H, W]`, `target` `[N, H, W]`.
pub fn nll_loss2d_forward(
    x: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
    ignore_index: i64,
) -> Result<(Tensor, Tensor)> {
    let mut inputs = vec![x, target];
    inputs.extend(weight);
    let op = OpScope::new("aten::nll_loss2d_forward", &inputs)?;
    spatial_shapes(x, target)?;
    if weight.is_some_and(|w| w.numel() != x.shape()[1]) {
        return Err(TpuError::ShapeMismatch(
            "weight tensor should be defined either for all or no classes".into(),
        ));
    }
    nll_impl(&op, x, target, weight, reduction, ignore_index, 1)
}
