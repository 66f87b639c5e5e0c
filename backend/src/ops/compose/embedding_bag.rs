//! `_embedding_bag` and `_embedding_bag_forward_only` (what `F.embedding_bag` and
//! `nn.EmbeddingBag` call), composed from registered operators as ATen's CPU kernel defines
//! them; their backwards are in `embedding_bag_grad`.
//!
//! `indices` (1-D, `N`) are cut into `B` bags by `offsets`: bag `b` starts at `offsets[b]`
//! (`offsets[0]` must be 0); with `include_last_offset` the last offset is the end of the last
//! bag and there is one bag fewer than offsets. Every position's bag (`offset2bag`) is how many
//! bag starts after the first lie at or before it (the starts counted at their positions and
//! summed along the indices, O(N + B)). The rows `weight[indices]` are reduced into their bags:
//! `sum` (each row times its `per_sample_weights`), `mean` (the sum over the bag's size) or
//! `max`; an index equal to `padding_idx` (when it is not negative) takes no part (it is left
//! out, not multiplied by 0: an infinite row there does not make its bag NaN), and an empty bag
//! is 0. Values are reduced in f32 and rounded to the weight's dtype; a mean rounds the sum
//! first and then the quotient, as the CPU computes it in the weight's dtype.
//!
//! The other outputs are PyTorch CPU's, quirks included: in `sum` mode `bag_size` and
//! `max_indices` are zeros and `offset2bag` is empty unless a `padding_idx` is given; in `mean`
//! mode `max_indices` repeats `bag_size`; in `max` mode `max_indices[b, d]` is the index whose
//! row gave the maximum — the first in bag order on ties, and NaN only when the bag's first row
//! holds it there (the CPU kernel starts from the first row and replaces on `>`). With
//! `include_last_offset`, positions past the last offset belong to the last bag (its size,
//! `offset2bag`, its maximum, and its sum when a `padding_idx` is given); a sum or mean without
//! one leaves them out of the sum but not the size, as the CPU's fast path does; and
//! `_embedding_bag_forward_only`'s sum gives `bag_size` and `max_indices` one element per
//! offset. Indices and offsets of two integer types give int64 outputs (PyTorch promotes).
//!
//! Checked on the device as the CPU checks: every index inside the weight's rows, `offsets[0]`
//! zero, the last offset at most `N`; offsets that decrease are refused (PyTorch's kernels
//! then fail inside or read out of range).

use super::{op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::CmpKind;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::checks::{Pending, check_range, check_values};
use crate::ops::creation::full;
use crate::ops::helpers::OpScope;
use crate::ops::prims;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Why the bag reductions replicate.
pub(super) const BAGS: &str = "bags may cross any shard boundary: no sharding rule yet";

/// The reduction of a bag.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    Sum,
    Mean,
    Max,
}

impl Mode {
    /// PyTorch's mode number (0 sum, 1 mean, 2 max); another is refused with `why`.
    pub(super) fn parse(mode: i64, why: &str) -> Result<Mode> {
        match mode {
            0 => Ok(Mode::Sum),
            1 => Ok(Mode::Mean),
            2 => Ok(Mode::Max),
            _ => Err(TpuError::BadArgs(why.into())),
        }
    }
}

/// The arguments of one call.
struct Bag<'a> {
    weight: &'a Tensor,
    indices: &'a Tensor,
    offsets: &'a Tensor,
    mode: i64,
    per_sample_weights: Option<&'a Tensor>,
    include_last_offset: bool,
    padding_idx: i64,
    /// `_embedding_bag_forward_only` (its sum's `bag_size` has one element per offset).
    forward_only: bool,
}

/// The four outputs: the bags, `offset2bag`, `bag_size`, `max_indices`.
type Outputs = (Tensor, Tensor, Tensor, Tensor);

fn embedding_bag(rt: &Runtime, name: &str, a: Bag<'_>) -> Result<Outputs> {
    let mode = Mode::parse(a.mode, "`mode` must be sum, mean, or max.")?;
    let (weight, indices, offsets) = (a.weight, a.indices, a.offsets);
    for (t, arg) in [(indices, "indices"), (offsets, "offsets")] {
        if !matches!(t.dtype(), DType::I32 | DType::I64) {
            return Err(TpuError::DtypeMismatch(format!(
                "Expected tensor for argument #1 '{arg}' to have one of the following scalar \
                 types: Long, Int; but got {} instead (while checking arguments for \
                 embedding_bag)",
                t.dtype().scalar_type_name()
            )));
        }
    }
    if !weight.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"embedding_bag_cpu\" not implemented for '{}'",
            weight.dtype().scalar_type_name()
        )));
    }
    if weight.dim() != 2 {
        return Err(TpuError::BadArgs(format!(
            "weight has to be a 2D Tensor, but got Tensor of dimension {}",
            weight.dim()
        )));
    }
    if indices.dim() != 1 || offsets.dim() != 1 {
        return Err(TpuError::BadArgs(format!(
            "input has to be a 1D Tensor with offsets a 1D Tensor, but got input of dimension \
             {} and offsets of dimension {}",
            indices.dim(),
            offsets.dim()
        )));
    }
    if let Some(p) = a.per_sample_weights {
        if mode != Mode::Sum {
            return Err(TpuError::BadArgs(
                "embedding_bag: per_sample_weights only supported with mode='sum'".into(),
            ));
        }
        if p.shape() != indices.shape() {
            return Err(TpuError::ShapeMismatch(format!(
                "embedding_bag: If per_sample_weights ({:?}) is not None, then it must have \
                 the same shape as the input ({:?})",
                p.shape(),
                indices.shape()
            )));
        }
        if p.dtype() != weight.dtype() {
            return Err(TpuError::DtypeMismatch(format!(
                "expected scalar type {} but found {}",
                weight.dtype().scalar_type_name(),
                p.dtype().scalar_type_name()
            )));
        }
    }
    let (v, d) = (weight.shape()[0], weight.shape()[1]);
    let n = indices.numel();
    let count = offsets.numel();
    let bags = if a.include_last_offset {
        count.checked_sub(1).ok_or_else(|| {
            TpuError::BadArgs("include_last_offset: number of offsets should be at least 1".into())
        })?
    } else {
        count
    };
    let scope = OpScope::new(name, &[weight, indices, offsets])?;
    let mut checks: Vec<Pending> = vec![check_range(&scope, indices, 0, v as i64, move |x| {
        TpuError::BadArgs(format!(
            "An index of input takes value {x} which is not in the valid range [0, {v})"
        ))
    })?];
    let i64_ = DType::I64;
    let offsets = offsets.to_dtype(i64_)?;
    if count > 0 {
        let first = narrow(rt, &offsets, 0, 1)?;
        checks.push(check_values(
            &scope,
            &first,
            |p, x| {
                let zero = p.constant(Scalar::Int(0), DType::I32);
                p.cmp(CmpKind::Eq, x, zero, DType::I32)
            },
            |x| {
                TpuError::BadArgs(format!(
                    "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to \
                     start from position 0. However, got {x}"
                ))
            },
        )?);
        let last = narrow(rt, &offsets, count - 1, 1)?;
        checks.push(check_values(
            &scope,
            &last,
            move |p, x| {
                let len = p.constant(Scalar::Int(n as i64), DType::I32);
                p.cmp(CmpKind::Le, x, len, DType::I32)
            },
            move |x| {
                TpuError::BadArgs(format!(
                    "offsets[-1] can not be greater than input's length {n} but got \
                     offsets[-1] of {x}"
                ))
            },
        )?);
        if count > 1 {
            let step = op(
                rt,
                "aten::sub.Tensor",
                vec![
                    tv(&narrow(rt, &offsets, 1, count - 1)?),
                    tv(&narrow(rt, &offsets, 0, count - 1)?),
                ],
            )?;
            checks.push(check_values(
                &scope,
                &step,
                |p, x| {
                    let zero = p.constant(Scalar::Int(0), DType::I32);
                    p.cmp(CmpKind::Ge, x, zero, DType::I32)
                },
                |_| TpuError::BadArgs("embedding_bag: offsets must not decrease".into()),
            )?);
        }
    }
    let idx_dtype = if indices.dtype() == DType::I64 || a.offsets.dtype() == DType::I64 {
        DType::I64
    } else {
        DType::I32
    };
    let indices = indices.to_dtype(i64_)?;
    // With no bag, every position is out (bag number 0 of an empty output is dropped below).
    let bag = if bags == 0 {
        full(rt, &[n], Scalar::Int(0), i64_)?
    } else {
        bag_numbers(rt, &offsets, n, bags)?
    };
    let pos = prims::iota(&scope, n)?.to_dtype(i64_)?;
    // The positions that count: not padding, inside a bag.
    let counted = if a.padding_idx >= 0 {
        op(
            rt,
            "aten::ne.Scalar",
            vec![tv(&indices), sv(Scalar::Int(a.padding_idx))],
        )?
    } else {
        full(rt, &[n], Scalar::Bool(true), DType::Bool)?
    };
    let counted = if bags == 0 {
        full(rt, &[n], Scalar::Bool(false), DType::Bool)?
    } else {
        counted
    };
    // Summed: every counted position with a padding_idx (the CPU's slow path); else those
    // before the last offset with include_last_offset (its fast path stops there).
    let summed = if a.include_last_offset && count > 0 && a.padding_idx < 0 {
        let end = narrow(rt, &offsets, count - 1, 1)?;
        op(
            rt,
            "aten::logical_and",
            vec![
                tv(&counted),
                tv(&op(rt, "aten::lt.Tensor", vec![tv(&pos), tv(&end)])?),
            ],
        )?
    } else {
        counted.clone()
    };
    // The rows, the indices clamped first (an index outside is the check's error).
    let clamped = op(
        rt,
        "aten::clamp",
        vec![
            tv(&indices),
            sv(Scalar::Int(0)),
            sv(Scalar::Int(v.max(1) as i64 - 1)),
        ],
    )?;
    let f32_ = DType::F32;
    let rows = op(
        rt,
        "aten::index_select",
        vec![tv(&weight.to_dtype(f32_)?), Value::Int(0), tv(&clamped)],
    )?;
    let slots = bags.max(1);
    let size = op(
        rt,
        "aten::scatter_add",
        vec![
            tv(&full(rt, &[slots], Scalar::Int(0), i64_)?),
            Value::Int(0),
            tv(&bag),
            tv(&counted.to_dtype(i64_)?),
        ],
    )?;
    let size = narrow(rt, &size, 0, bags)?;
    let zeros = |shape: &[usize]| full(rt, shape, Scalar::Int(0), i64_);
    let (out, offset2bag, bag_size, max_indices) = match mode {
        Mode::Sum | Mode::Mean => {
            let weighted = match a.per_sample_weights {
                Some(p) => op(
                    rt,
                    "aten::mul.Tensor",
                    vec![tv(&rows), tv(&p.to_dtype(f32_)?.reshape(&[n as i64, 1])?)],
                )?,
                None => rows.clone(),
            };
            // Left out, not multiplied by 0 (an infinite row must not give NaN).
            let contrib = op(
                rt,
                "aten::where.ScalarOther",
                vec![
                    tv(&summed.reshape(&[n as i64, 1])?),
                    tv(&weighted),
                    sv(Scalar::Float(0.0)),
                ],
            )?;
            let sum = op(
                rt,
                "aten::index_add",
                vec![
                    tv(&full(rt, &[slots, d], Scalar::Float(0.0), f32_)?),
                    Value::Int(0),
                    tv(&bag),
                    tv(&contrib),
                ],
            )?;
            let sum = narrow(rt, &sum, 0, bags)?;
            if mode == Mode::Sum {
                let offset2bag = if a.padding_idx >= 0 {
                    bag.clone()
                } else {
                    zeros(&[0])?
                };
                // The forward-only sum sizes them by the offsets (one more with
                // include_last_offset), as the CPU does.
                let len = if a.forward_only { count } else { bags };
                (sum, offset2bag, zeros(&[len])?, zeros(&[len])?)
            } else {
                // An empty bag's mean is 0 (its sum over a size of at least 1).
                let denom = op(rt, "aten::clamp_min", vec![tv(&size), sv(Scalar::Int(1))])?;
                // The sum rounded to the weight's dtype first (the CPU's mean divides that).
                let sum = sum.to_dtype(weight.dtype())?.to_dtype(f32_)?;
                let mean = op(
                    rt,
                    "aten::div.Tensor",
                    vec![
                        tv(&sum),
                        tv(&denom.to_dtype(f32_)?.reshape(&[bags as i64, 1])?),
                    ],
                )?;
                (mean, bag.clone(), size.clone(), size)
            }
        }
        Mode::Max => {
            let (m, which) = bag_max(rt, n, bags, d, &rows, &bag, &counted, &pos)?;
            // The index at the winning position (0 for an empty bag).
            let found = op(
                rt,
                "aten::lt.Scalar",
                vec![tv(&which), sv(Scalar::Int(n as i64))],
            )?;
            let at = op(
                rt,
                "aten::clamp",
                vec![
                    tv(&which),
                    sv(Scalar::Int(0)),
                    sv(Scalar::Int(n.max(1) as i64 - 1)),
                ],
            )?;
            let picked = if n == 0 {
                zeros(&[bags, d])?
            } else {
                op(
                    rt,
                    "aten::index_select",
                    vec![tv(&indices), Value::Int(0), tv(&at.reshape(&[-1])?)],
                )?
                .reshape(&[bags as i64, d as i64])?
            };
            let max_indices = op(
                rt,
                "aten::where.ScalarOther",
                vec![tv(&found), tv(&picked), Value::Int(0)],
            )?;
            (m, bag.clone(), size, max_indices)
        }
    };
    let out = out.to_dtype(weight.dtype())?;
    let to_idx = |t: Tensor| t.to_dtype(idx_dtype);
    let outputs = (
        out,
        to_idx(offset2bag)?,
        to_idx(bag_size)?,
        to_idx(max_indices)?,
    );
    for c in checks {
        c.guards(rt, &[&outputs.0, &outputs.1, &outputs.2, &outputs.3]);
    }
    Ok(outputs)
}

/// Each bag's maximum `[bags, d]` (0 when empty) and the position that gave it (`n` when
/// empty), as the CPU kernel finds them: from the bag's first counted row, replaced by a
/// greater one (so a NaN wins only as the first row; the first of equal rows wins).
#[allow(clippy::too_many_arguments)]
fn bag_max(
    rt: &Runtime,
    n: usize,
    bags: usize,
    d: usize,
    rows: &Tensor,
    bag: &Tensor,
    counted: &Tensor,
    pos: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (f32_, i64_) = (DType::F32, DType::I64);
    let slots = bags.max(1);
    let none = Scalar::Int(n as i64);
    // Each bag's first counted position.
    let first_pos = op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(counted), tv(pos), sv(none)],
    )?;
    let first = op(
        rt,
        "aten::scatter_reduce.two",
        vec![
            tv(&full(rt, &[slots], none, i64_)?),
            Value::Int(0),
            tv(bag),
            tv(&first_pos),
            Value::Str("amin".into()),
            Value::Bool(true),
        ],
    )?;
    let by_pos = |t: &Tensor| -> Result<Tensor> {
        let bag2 = op(
            rt,
            "aten::expand",
            vec![
                tv(&bag.reshape(&[n as i64, 1])?),
                Value::Ints(vec![n as i64, d as i64]),
            ],
        )?;
        op(
            rt,
            "aten::scatter_reduce.two",
            vec![
                tv(&full(rt, &[slots, d], none, i64_)?),
                Value::Int(0),
                tv(&bag2),
                tv(t),
                Value::Str("amin".into()),
                Value::Bool(true),
            ],
        )
    };
    let counted2 = counted.reshape(&[n as i64, 1])?;
    let nan = op(rt, "aten::isnan", vec![tv(rows)])?;
    // The largest counted number of each bag (NaN left out).
    let number = op(
        rt,
        "aten::logical_and",
        vec![
            tv(&counted2),
            tv(&op(rt, "aten::logical_not", vec![tv(&nan)])?),
        ],
    )?;
    let vals = op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(&number), tv(rows), sv(Scalar::Float(f64::NEG_INFINITY))],
    )?;
    let m = op(
        rt,
        "aten::scatter_reduce.two",
        vec![
            tv(&full(
                rt,
                &[slots, d],
                Scalar::Float(f64::NEG_INFINITY),
                f32_,
            )?),
            Value::Int(0),
            tv(&op(
                rt,
                "aten::expand",
                vec![
                    tv(&bag.reshape(&[n as i64, 1])?),
                    Value::Ints(vec![n as i64, d as i64]),
                ],
            )?),
            tv(&vals),
            Value::Str("amax".into()),
            Value::Bool(true),
        ],
    )?;
    // The first position holding it.
    let at_max = op(
        rt,
        "aten::eq.Tensor",
        vec![
            tv(rows),
            tv(&op(
                rt,
                "aten::index_select",
                vec![tv(&m), Value::Int(0), tv(bag)],
            )?),
        ],
    )?;
    let hit = op(rt, "aten::logical_and", vec![tv(&number), tv(&at_max)])?;
    let pos2 = op(
        rt,
        "aten::expand",
        vec![
            tv(&pos.reshape(&[n as i64, 1])?),
            Value::Ints(vec![n as i64, d as i64]),
        ],
    )?;
    let which = by_pos(&op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(&hit), tv(&pos2), sv(none)],
    )?)?;
    // A NaN in the bag's first row stays.
    let first_at = op(
        rt,
        "aten::clamp",
        vec![
            tv(&first),
            sv(Scalar::Int(0)),
            sv(Scalar::Int(n.max(1) as i64 - 1)),
        ],
    )?;
    let (m, which) = if n == 0 {
        (m, which)
    } else {
        let first_nan = op(
            rt,
            "aten::logical_and",
            vec![
                tv(&op(
                    rt,
                    "aten::index_select",
                    vec![tv(&nan), Value::Int(0), tv(&first_at)],
                )?),
                tv(&op(rt, "aten::lt.Scalar", vec![tv(&first), sv(none)])?
                    .reshape(&[slots as i64, 1])?),
            ],
        )?;
        let m = op(
            rt,
            "aten::where.ScalarSelf",
            vec![tv(&first_nan), sv(Scalar::Float(f64::NAN)), tv(&m)],
        )?;
        let which = op(
            rt,
            "aten::where.self",
            vec![
                tv(&first_nan),
                tv(&op(
                    rt,
                    "aten::expand",
                    vec![
                        tv(&first.reshape(&[slots as i64, 1])?),
                        Value::Ints(vec![slots as i64, d as i64]),
                    ],
                )?),
                tv(&which),
            ],
        )?;
        (m, which)
    };
    // An empty bag is 0.
    let empty = op(rt, "aten::eq.Scalar", vec![tv(&first), sv(none)])?;
    let m = op(
        rt,
        "aten::where.ScalarSelf",
        vec![
            tv(&empty.reshape(&[slots as i64, 1])?),
            sv(Scalar::Float(0.0)),
            tv(&m),
        ],
    )?;
    Ok((narrow(rt, &m, 0, bags)?, narrow(rt, &which, 0, bags)?))
}

/// `x[start .. start + len]` along dim 0.
pub(super) fn narrow(rt: &Runtime, x: &Tensor, start: usize, len: usize) -> Result<Tensor> {
    op(
        rt,
        "aten::narrow",
        vec![
            tv(x),
            Value::Int(0),
            Value::Int(start as i64),
            Value::Int(len as i64),
        ],
    )
}

/// Each of `n` positions' bag: the starts of bags `1..bags` (int64 `offsets`) counted at
/// their positions and summed along the positions, O(n + bags).
pub(super) fn bag_numbers(rt: &Runtime, offsets: &Tensor, n: usize, bags: usize) -> Result<Tensor> {
    let i64_ = DType::I64;
    let starts = if bags > 1 && offsets.numel() >= bags {
        narrow(rt, offsets, 1, bags - 1)?
    } else {
        full(rt, &[0], Scalar::Int(0), i64_)?
    };
    let at = op(
        rt,
        "aten::clamp",
        vec![tv(&starts), sv(Scalar::Int(0)), sv(Scalar::Int(n as i64))],
    )?;
    let marks = op(
        rt,
        "aten::scatter_add",
        vec![
            tv(&full(rt, &[n + 1], Scalar::Int(0), i64_)?),
            Value::Int(0),
            tv(&at),
            tv(&full(rt, &[at.numel()], Scalar::Int(1), i64_)?),
        ],
    )?;
    narrow(
        rt,
        &op(rt, "aten::cumsum", vec![tv(&marks), Value::Int(0)])?,
        0,
        n,
    )
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::_embedding_bag",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(BAGS),
    kind = Decomposition
)]
fn embedding_bag_op(rt: &Runtime, a: EmbeddingBag<'_>) -> Result<Outputs> {
    embedding_bag(
        rt,
        "aten::_embedding_bag",
        Bag {
            weight: a.weight,
            indices: a.indices,
            offsets: a.offsets,
            mode: a.mode,
            per_sample_weights: a.per_sample_weights,
            include_last_offset: a.include_last_offset,
            padding_idx: a.padding_idx,
            forward_only: false,
        },
    )
}

#[aten(
    "aten::_embedding_bag_forward_only",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(BAGS),
    kind = Decomposition
)]
fn embedding_bag_forward_only_op(rt: &Runtime, a: EmbeddingBagForwardOnly<'_>) -> Result<Outputs> {
    embedding_bag(
        rt,
        "aten::_embedding_bag_forward_only",
        Bag {
            weight: a.weight,
            indices: a.indices,
            offsets: a.offsets,
            mode: a.mode,
            per_sample_weights: a.per_sample_weights,
            include_last_offset: a.include_last_offset,
            padding_idx: a.padding_idx,
            forward_only: true,
        },
    )
}
