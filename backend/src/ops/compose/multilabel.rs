//! The multi-label margin loss (`F.multilabel_margin_loss`), composed from registered operators
//! as ATen's CPU kernel defines it.
//!
//! Per sample (a row of `C` classes), the targets are the labels `y[0..k]` before the first
//! `-1` (repeats count again); `is_target[d]` marks the classes named. The loss is
//! `sum over targets j, over classes d not named, of max(0, 1 - x[y[j]] + x[d])`, over `C`;
//! reduction `0` (none) keeps one loss per sample of a matrix, `1` averages over the samples,
//! any other value sums (PyTorch's kernel reads it so). Every label must lie in `-1..C`, also
//! after the first `-1`: PyTorch's "argument #2 'target' is out of range", checked on the
//! device. The pairs `(j, d)` are computed at once, `[N, C, C]`, in f32 (PyTorch's kernel sums
//! in double; the difference is rounding).
//!
//! The backward takes `is_target` as given (it is the forward's second output) and adds
//! `grad / C` (`grad / (C N)` for a mean) to `x[d]` and subtracts it from `x[y[j]]` for every
//! active pair.

use super::{op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::checks::{Pending, check_range};
use crate::ops::helpers::OpScope;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Why the loss replicates.
const WHOLE_ROWS: &str = "a loss over every class of a sample: no sharding rule yet";

/// The checked problem: samples `n`, classes `c`, the input and labels as `[n, c]`, the labels
/// clamped into `0..c` and where each is a target (f32 0/1, `[n, c]`).
struct Rows {
    n: usize,
    c: usize,
    x: Tensor,
    clamped: Tensor,
    valid: Tensor,
    check: Pending,
}

/// PyTorch's checks of the input and the labels (shapes and dtypes on the host, the label range
/// on the device) and the `[n, c]` forms.
fn rows(name: &str, x: &Tensor, y: &Tensor) -> Result<Rows> {
    if x.dtype() != DType::F32 {
        return Err(TpuError::Unsupported(format!(
            "\"multilabel_margin_loss_forward_out_frame\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    let shape = x.shape();
    let ok = match shape.len() {
        0 => true,
        1 => shape[0] != 0,
        2 => shape[1] != 0,
        _ => false,
    };
    if !ok {
        return Err(TpuError::BadArgs(format!(
            "Expected non-empty vector or matrix with optional 0-dim batch size, but got: {shape:?}"
        )));
    }
    let (n, c) = match shape.len() {
        2 => (shape[0], shape[1]),
        1 => (1, shape[0]),
        _ => (1, 1),
    };
    let target_ok = if shape.len() == 2 {
        y.shape() == [n, c]
    } else {
        y.dim() <= 1 && y.numel() == c
    };
    if !target_ok {
        return Err(TpuError::BadArgs(format!(
            "inconsistent target size: {:?} for input of size: {shape:?}",
            y.shape()
        )));
    }
    if y.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(format!(
            "expected scalar type Long but found {}",
            y.dtype().scalar_type_name()
        )));
    }
    let scope = OpScope::new(name, &[x, y])?;
    let check = check_range(&scope, y, -1, c as i64, |_| {
        TpuError::BadArgs("argument #2 'target' is out of range".into())
    })?;
    let rt = scope.rt();
    let dims = [n as i64, c as i64];
    let x = x.reshape(&dims)?;
    let y = y.reshape(&dims)?;
    let named =
        op(rt, "aten::ge.Scalar", vec![tv(&y), sv(Scalar::Int(0))])?.to_dtype(DType::F32)?;
    // The targets: the labels before the first -1 of their row.
    let valid = op(rt, "aten::cumprod", vec![tv(&named), Value::Int(1)])?;
    // Clamped into the classes: a label outside is the check's error, not a later gather's.
    let clamped = op(
        rt,
        "aten::clamp",
        vec![tv(&y), sv(Scalar::Int(0)), sv(Scalar::Int(c as i64 - 1))],
    )?;
    Ok(Rows {
        n,
        c,
        x,
        clamped,
        valid,
        check,
    })
}

/// The pairs that count, `[n, c, c]` (f32 0/1: target `j`, class `d` not a target, margin
/// positive), and the margins themselves.
fn active(rt: &Runtime, r: &Rows, is_target: &Tensor) -> Result<(Tensor, Tensor)> {
    let xy = r.x.gather(1, &r.clamped)?;
    // PyTorch's order: (1 - x[y[j]]) + x[d].
    let first = op(
        rt,
        "aten::rsub.Scalar",
        vec![tv(&xy), sv(Scalar::Int(1)), sv(Scalar::Int(1))],
    )?;
    let z = op(
        rt,
        "aten::add.Tensor",
        vec![tv(&first.unsqueeze(2)?), tv(&r.x.unsqueeze(1)?)],
    )?;
    let positive = op(rt, "aten::gt.Scalar", vec![tv(&z), sv(Scalar::Int(0))])?;
    let other = op(
        rt,
        "aten::rsub.Scalar",
        vec![tv(is_target), sv(Scalar::Int(1)), sv(Scalar::Int(1))],
    )?;
    let both = op(
        rt,
        "aten::mul.Tensor",
        vec![tv(&r.valid.unsqueeze(2)?), tv(&other.unsqueeze(1)?)],
    )?;
    let act = op(
        rt,
        "aten::mul.Tensor",
        vec![tv(&positive.to_dtype(DType::F32)?), tv(&both)],
    )?;
    Ok((act, z))
}

/// `multilabel_margin_loss_forward(x, y, reduction)`: the loss and `is_target`.
pub fn multilabel_margin_loss_forward(
    rt: &Runtime,
    x: &Tensor,
    y: &Tensor,
    reduction: i64,
) -> Result<(Tensor, Tensor)> {
    let name = MultilabelMarginLossForward::NAME;
    let r = rows(name, x, y)?;
    // Where each class is named by a target: the largest of the targets' marks per class.
    let zeros = op(rt, "aten::zeros_like", vec![tv(&r.x)])?;
    let is_target = op(
        rt,
        "aten::scatter_reduce.two",
        vec![
            tv(&zeros),
            Value::Int(1),
            tv(&r.clamped),
            tv(&r.valid),
            Value::Str("amax".into()),
            Value::Bool(true),
        ],
    )?;
    let (act, z) = active(rt, &r, &is_target)?;
    // Only the active pairs' margins (an inactive one may be NaN or infinite: not 0 times it).
    let on = op(rt, "aten::gt.Scalar", vec![tv(&act), sv(Scalar::Int(0))])?;
    let h = op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(&on), tv(&z), sv(Scalar::Float(0.0))],
    )?;
    let per = op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&h), Value::Ints(vec![1, 2]), Value::Bool(false)],
    )?;
    let per = op(
        rt,
        "aten::div.Scalar",
        vec![tv(&per), sv(Scalar::Int(r.c as i64))],
    )?;
    let loss = if reduction == 0 && x.dim() == 2 {
        per
    } else {
        let s = op(rt, "aten::sum", vec![tv(&per)])?;
        if reduction == 1 {
            op(
                rt,
                "aten::div.Scalar",
                vec![tv(&s), sv(Scalar::Int(r.n as i64))],
            )?
        } else {
            s
        }
    };
    // The target's shape, as PyTorch gives it.
    let shape: Vec<i64> = y.shape().iter().map(|&d| d as i64).collect();
    let is_target = is_target.reshape(&shape)?;
    r.check.guards(rt, &[&loss, &is_target]);
    Ok((loss, is_target))
}

/// `multilabel_margin_loss_backward(grad, x, y, reduction, is_target)`.
pub fn multilabel_margin_loss_backward(
    rt: &Runtime,
    g: &Tensor,
    x: &Tensor,
    y: &Tensor,
    reduction: i64,
    is_target: &Tensor,
) -> Result<Tensor> {
    let name = MultilabelMarginLossBackward::NAME;
    let r = rows(name, x, y)?;
    if is_target.numel() != r.n * r.c {
        return Err(TpuError::BadArgs(format!(
            "inconsistent is_target size: {:?} for target of size: {:?}",
            is_target.shape(),
            y.shape()
        )));
    }
    let marks = is_target
        .reshape(&[r.n as i64, r.c as i64])?
        .to_dtype(DType::F32)?;
    let (act, _) = active(rt, &r, &marks)?;
    // Each active pair adds to x[d] and takes from x[y[j]].
    let up = op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&act), Value::Ints(vec![1]), Value::Bool(false)],
    )?;
    let down = op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&act), Value::Ints(vec![2]), Value::Bool(false)],
    )?;
    let grad = op(
        rt,
        "aten::scatter_add",
        vec![
            tv(&up),
            Value::Int(1),
            tv(&r.clamped),
            tv(&op(rt, "aten::neg", vec![tv(&down)])?),
        ],
    )?;
    let scale = if reduction == 1 {
        (r.c * r.n) as f64
    } else {
        r.c as f64
    };
    let grad = op(
        rt,
        "aten::div.Scalar",
        vec![tv(&grad), sv(Scalar::Float(scale))],
    )?;
    // Times grad_output: one per sample (reduction none of a matrix) or one number.
    let go = if reduction == 0 && x.dim() == 2 {
        g.reshape(&[r.n as i64, 1])?
    } else {
        g.reshape(&[])?
    };
    let grad = op(rt, "aten::mul.Tensor", vec![tv(&grad), tv(&go)])?;
    let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    let grad = grad.reshape(&shape)?;
    r.check.guards(rt, &[&grad]);
    Ok(grad)
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::multilabel_margin_loss_forward",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(WHOLE_ROWS),
    kind = Decomposition
)]
fn multilabel_margin_loss_forward_op(
    rt: &Runtime,
    a: MultilabelMarginLossForward<'_>,
) -> Result<(Tensor, Tensor)> {
    multilabel_margin_loss_forward(rt, a.self_, a.target, a.reduction)
}

#[aten(
    "aten::multilabel_margin_loss_backward",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(WHOLE_ROWS),
    kind = Decomposition
)]
fn multilabel_margin_loss_backward_op(
    rt: &Runtime,
    a: MultilabelMarginLossBackward<'_>,
) -> Result<Tensor> {
    multilabel_margin_loss_backward(
        rt,
        a.grad_output,
        a.self_,
        a.target,
        a.reduction,
        a.is_target,
    )
}
