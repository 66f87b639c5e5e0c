//! The backwards of `embedding_bag` (`embedding_bag`'s module has the forward and what a bag
//! is): `_embedding_bag_backward` (the weight's gradient) and
//! `_embedding_bag_per_sample_weights_backward`, composed from registered operators.

use super::embedding_bag::{BAGS, Mode, bag_numbers};
use super::{op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::checks::check_range;
use crate::ops::creation::full;
use crate::ops::helpers::OpScope;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Each position's bag, for a backward: `offset2bag` when the forward gave it, else (a sum's
/// forward leaves it empty) counted from the offsets' first `bags` starts; clamped to the
/// gradient's `bags` rows (`bags` > 0).
fn bags_of(
    rt: &Runtime,
    offsets: &Tensor,
    offset2bag: &Tensor,
    n: usize,
    bags: usize,
) -> Result<Tensor> {
    let i64_ = DType::I64;
    let bag = if offset2bag.numel() == n && n > 0 {
        offset2bag.to_dtype(i64_)?
    } else {
        bag_numbers(rt, &offsets.to_dtype(i64_)?, n, bags)?
    };
    // Inside the gradient's rows (an offset2bag passed in is not trusted to be).
    op(
        rt,
        "aten::clamp",
        vec![
            tv(&bag),
            sv(Scalar::Int(0)),
            sv(Scalar::Int(bags as i64 - 1)),
        ],
    )
}

/// The arguments of `_embedding_bag_backward`.
struct Backward<'a> {
    grad: &'a Tensor,
    indices: &'a Tensor,
    offsets: &'a Tensor,
    offset2bag: &'a Tensor,
    bag_size: &'a Tensor,
    maximum_indices: &'a Tensor,
    num_weights: i64,
    scale_grad_by_freq: bool,
    mode: i64,
    sparse: bool,
    per_sample_weights: Option<&'a Tensor>,
    padding_idx: i64,
}

/// The weight's gradient `[num_weights, d]`: each counted position's bag gradient added to its
/// index's row — times its per-sample weight (sum), over the bag's size (mean), over how often
/// its index occurs (`scale_grad_by_freq`); in `max` mode each bag's gradient goes to the rows
/// `maximum_indices` names (an empty bag gives nothing). Positions of `padding_idx` give
/// nothing. A sum whose `include_last_offset` ended short of the indices: positions past the
/// last offset count in the last bag here (PyTorch's CPU kernel reads past the gradient).
/// `scale_grad_by_freq` divides by the index's own count among the indices, as documented
/// (PyTorch's CPU kernel takes the count of another index in some orders — indices
/// `[0, 0, 1]` in one bag give row 1 a gradient of 0 there; that is not copied).
fn embedding_bag_backward(rt: &Runtime, name: &str, a: Backward<'_>) -> Result<Tensor> {
    if a.sparse {
        return Err(TpuError::Unsupported(
            "embedding_bag with sparse=True: sparse gradients are not computed on the tpu".into(),
        ));
    }
    let mode = Mode::parse(a.mode, "Unknown mode for embedding_bag_backward with mode")?;
    if a.per_sample_weights.is_some() && mode != Mode::Sum {
        return Err(TpuError::BadArgs(
            "embedding_bag_backward: per_sample_weights only supported for mode='sum'".into(),
        ));
    }
    let grad = a.grad;
    if !grad.dtype().is_float() {
        return Err(TpuError::DtypeMismatch(format!(
            "embedding_bag_backward: expected a floating-point gradient, got {}",
            grad.dtype().scalar_type_name()
        )));
    }
    if grad.dim() != 2 {
        return Err(TpuError::BadArgs(format!(
            "embedding_bag_backward: expected a 2-D gradient, got {:?}",
            grad.shape()
        )));
    }
    let (bags, d) = (grad.shape()[0], grad.shape()[1]);
    let v = usize::try_from(a.num_weights)
        .map_err(|_| TpuError::BadArgs(format!("num_weights {} is negative", a.num_weights)))?;
    let n = a.indices.numel();
    let scope = OpScope::new(name, &[grad, a.indices])?;
    let (f32_, i64_) = (DType::F32, DType::I64);
    let indices = a.indices.reshape(&[-1])?.to_dtype(i64_)?;
    let clamped = op(
        rt,
        "aten::clamp",
        vec![
            tv(&indices),
            sv(Scalar::Int(0)),
            sv(Scalar::Int(v.max(1) as i64 - 1)),
        ],
    )?;
    let g = grad.to_dtype(f32_)?;
    let zero = full(rt, &[v, d], Scalar::Float(0.0), f32_)?;
    let out = if n == 0 || bags == 0 || v == 0 {
        zero
    } else if mode == Mode::Max {
        // Each bag's gradient, column by column, into the row that gave its maximum.
        let nonempty = op(
            rt,
            "aten::gt.Scalar",
            vec![tv(a.bag_size), sv(Scalar::Int(0))],
        )?;
        let g = op(
            rt,
            "aten::where.ScalarOther",
            vec![
                tv(&nonempty.reshape(&[bags as i64, 1])?),
                tv(&g),
                sv(Scalar::Float(0.0)),
            ],
        )?;
        let rows = op(
            rt,
            "aten::clamp",
            vec![
                tv(&a.maximum_indices.to_dtype(i64_)?),
                sv(Scalar::Int(0)),
                sv(Scalar::Int(v as i64 - 1)),
            ],
        )?;
        op(
            rt,
            "aten::scatter_add",
            vec![tv(&zero), Value::Int(0), tv(&rows), tv(&g)],
        )?
    } else {
        let bag = bags_of(rt, a.offsets, a.offset2bag, n, bags)?;
        // Each position's factor: counted, its per-sample weight, 1 / its bag's size (mean),
        // 1 / its index's count (scale_grad_by_freq).
        let mut w = full(rt, &[n], Scalar::Float(1.0), f32_)?;
        if let Some(p) = a.per_sample_weights {
            w = op(rt, "aten::mul.Tensor", vec![tv(&w), tv(&p.to_dtype(f32_)?)])?;
        }
        if mode == Mode::Mean {
            let size = op(
                rt,
                "aten::index_select",
                vec![tv(&a.bag_size.to_dtype(f32_)?), Value::Int(0), tv(&bag)],
            )?;
            let size = op(
                rt,
                "aten::clamp_min",
                vec![tv(&size), sv(Scalar::Float(1.0))],
            )?;
            w = op(rt, "aten::div.Tensor", vec![tv(&w), tv(&size)])?;
        }
        if a.scale_grad_by_freq {
            let counts = op(
                rt,
                "aten::scatter_add",
                vec![
                    tv(&full(rt, &[v], Scalar::Float(0.0), f32_)?),
                    Value::Int(0),
                    tv(&clamped),
                    tv(&full(rt, &[n], Scalar::Float(1.0), f32_)?),
                ],
            )?;
            let freq = op(
                rt,
                "aten::index_select",
                vec![tv(&counts), Value::Int(0), tv(&clamped)],
            )?;
            w = op(rt, "aten::div.Tensor", vec![tv(&w), tv(&freq)])?;
        }
        let rows = op(
            rt,
            "aten::index_select",
            vec![tv(&g), Value::Int(0), tv(&bag)],
        )?;
        let rows = op(
            rt,
            "aten::mul.Tensor",
            vec![tv(&rows), tv(&w.reshape(&[n as i64, 1])?)],
        )?;
        // padding_idx's positions left out, not multiplied by 0 (an infinite gradient there
        // must not give NaN).
        let rows = if a.padding_idx >= 0 {
            let keep = op(
                rt,
                "aten::ne.Scalar",
                vec![tv(&indices), sv(Scalar::Int(a.padding_idx))],
            )?;
            op(
                rt,
                "aten::where.ScalarOther",
                vec![
                    tv(&keep.reshape(&[n as i64, 1])?),
                    tv(&rows),
                    sv(Scalar::Float(0.0)),
                ],
            )?
        } else {
            rows
        };
        op(
            rt,
            "aten::index_add",
            vec![tv(&zero), Value::Int(0), tv(&clamped), tv(&rows)],
        )?
    };
    let out = out.to_dtype(grad.dtype())?;
    let check = check_range(&scope, &indices, 0, v as i64, move |x| {
        TpuError::BadArgs(format!(
            "An index of input takes value {x} which is not in the valid range [0, {v})"
        ))
    })?;
    check.guards(rt, &[&out]);
    Ok(out)
}

/// `_embedding_bag_per_sample_weights_backward`: each position's gradient, the dot product of
/// its bag's gradient and its index's row (0 for `padding_idx`).
#[allow(clippy::too_many_arguments)]
fn per_sample_weights_backward(
    rt: &Runtime,
    grad: &Tensor,
    weight: &Tensor,
    indices: &Tensor,
    offsets: &Tensor,
    offset2bag: &Tensor,
    mode: i64,
    padding_idx: i64,
) -> Result<Tensor> {
    if mode != 0 {
        return Err(TpuError::BadArgs(
            "embedding_bag_backward: per_sample_weights only supported for mode='sum'".into(),
        ));
    }
    if grad.dim() != 2 || weight.dim() != 2 || grad.shape()[1] != weight.shape()[1] {
        return Err(TpuError::ShapeMismatch(format!(
            "embedding_bag_backward: gradient {:?} and weight {:?} do not match",
            grad.shape(),
            weight.shape()
        )));
    }
    let (bags, v) = (grad.shape()[0], weight.shape()[0]);
    let n = indices.numel();
    let (f32_, i64_) = (DType::F32, DType::I64);
    if n == 0 || bags == 0 || v == 0 {
        return full(rt, &[n], Scalar::Float(0.0), grad.dtype());
    }
    let indices = indices.reshape(&[-1])?.to_dtype(i64_)?;
    let clamped = op(
        rt,
        "aten::clamp",
        vec![
            tv(&indices),
            sv(Scalar::Int(0)),
            sv(Scalar::Int(v as i64 - 1)),
        ],
    )?;
    let scope = OpScope::new(
        "aten::_embedding_bag_per_sample_weights_backward",
        &[grad, weight],
    )?;
    let check = check_range(&scope, &indices, 0, v as i64, move |x| {
        TpuError::BadArgs(format!(
            "An index of input takes value {x} which is not in the valid range [0, {v})"
        ))
    })?;
    let bag = bags_of(rt, offsets, offset2bag, n, bags)?;
    let g = op(
        rt,
        "aten::index_select",
        vec![tv(&grad.to_dtype(f32_)?), Value::Int(0), tv(&bag)],
    )?;
    let w = op(
        rt,
        "aten::index_select",
        vec![tv(&weight.to_dtype(f32_)?), Value::Int(0), tv(&clamped)],
    )?;
    let dot = op(
        rt,
        "aten::sum.dim_IntList",
        vec![
            tv(&op(rt, "aten::mul.Tensor", vec![tv(&g), tv(&w)])?),
            Value::Ints(vec![1]),
            Value::Bool(false),
        ],
    )?;
    let dot = if padding_idx >= 0 {
        let pad = op(
            rt,
            "aten::eq.Scalar",
            vec![tv(&indices), sv(Scalar::Int(padding_idx))],
        )?;
        op(
            rt,
            "aten::where.ScalarSelf",
            vec![tv(&pad), sv(Scalar::Float(0.0)), tv(&dot)],
        )?
    } else {
        dot
    };
    let dot = dot.to_dtype(grad.dtype())?;
    check.guards(rt, &[&dot]);
    Ok(dot)
}

#[aten(
    "aten::_embedding_bag_backward",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(BAGS),
    kind = Decomposition
)]
fn embedding_bag_backward_op(rt: &Runtime, a: EmbeddingBagBackward<'_>) -> Result<Tensor> {
    embedding_bag_backward(
        rt,
        "aten::_embedding_bag_backward",
        Backward {
            grad: a.grad,
            indices: a.indices,
            offsets: a.offsets,
            offset2bag: a.offset2bag,
            bag_size: a.bag_size,
            maximum_indices: a.maximum_indices,
            num_weights: a.num_weights,
            scale_grad_by_freq: a.scale_grad_by_freq,
            mode: a.mode,
            sparse: a.sparse,
            per_sample_weights: a.per_sample_weights,
            padding_idx: a.padding_idx,
        },
    )
}

#[aten(
    "aten::_embedding_bag_per_sample_weights_backward",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(BAGS),
    kind = Decomposition
)]
fn per_sample_weights_backward_op(
    rt: &Runtime,
    a: EmbeddingBagPerSampleWeightsBackward<'_>,
) -> Result<Tensor> {
    per_sample_weights_backward(
        rt,
        a.grad,
        a.weight,
        a.indices,
        a.offsets,
        a.offset2bag,
        a.mode,
        a.padding_idx,
    )
}
