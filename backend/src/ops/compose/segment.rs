//! `segment_reduce` and its backward, composed from registered operators as ATen's CPU kernels
//! define them.
//!
//! `data` is seen as `[B, D, T]` around `axis` (`B` the dims before it, `T` those after);
//! `lengths` (or `offsets`, one more) is `[B..., S]` and cuts each of the `B` rows of `D`
//! elements into `S` consecutive segments. Every element gets its segment's number (the
//! segments that end at or before it: the ends counted at their positions and summed along the
//! row; an element before the first segment or after the last gets the spare number `S`), and
//! one `scatter_reduce` along the axis reduces each segment into its slot of `[B, S + 1, T]`,
//! which starts at `initial` (or the reduction's identity: 0, 1, -inf, inf): so `initial` takes
//! part as one more element, as in PyTorch's kernel. A mean divides that sum by the segment's length; an
//! empty segment's mean is `initial`, NaN without one. The spare slot is dropped.
//!
//! PyTorch checks that no segment's length is negative (offsets: that none decreases) and,
//! unless `unsafe`, that each row of lengths sums to `D`: checked on the device here. The
//! offsets are used when both are given, as PyTorch does. With `unsafe`, elements past the last
//! segment are left out (PyTorch reads past the data when the lengths sum beyond it; here a
//! segment ends at the data's end). Lengths whose leading dims differ from the data's are
//! refused (PyTorch's kernel does not check them and reads out of bounds).
//!
//! The backward gives each element its segment's gradient: as it is (sum), over the length
//! (mean), shared among the elements equal to the result (max, min: NaN equal to NaN; as in
//! PyTorch's CPU kernel, only a positive gradient is shared, any other goes whole to each), or
//! times the product of the segment's other elements (prod: the result over the element; for a
//! zero or NaN, the others' product computed apart, as PyTorch's kernel does: the rest with
//! `initial`, NaN beside another NaN, else 0 beside another zero). An element in no segment
//! gets 0.

use super::{op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{CmpKind, PRef, ProgBuilder};
use crate::layout::wrap_dim;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::checks::{Pending, check_values};
use crate::ops::creation::full;
use crate::ops::helpers::OpScope;
use crate::ops::prims;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// PyTorch's message for lengths that do not cover the data.
const NOT_WHOLE: &str = "segment_reduce(): Expected all rows of lengths along axis to sum to \
                         data.size(lengths.dim()-1) when !unsafe.";

/// Why the segment reductions replicate.
const SEGMENTS: &str = "segments may cross any shard boundary: no sharding rule yet";

/// A segment reduction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
}

impl Kind {
    fn parse(reduce: &str) -> Result<Kind> {
        Ok(match reduce {
            "sum" => Kind::Sum,
            "prod" => Kind::Prod,
            "mean" => Kind::Mean,
            "max" | "amax" => Kind::Max,
            "min" | "amin" => Kind::Min,
            other => {
                return Err(TpuError::BadArgs(format!(
                    "reduce argument must be either sum, prod, mean, amax or amin, got {other}"
                )));
            }
        })
    }

    /// The `scatter_reduce` reduction.
    fn scatter(self) -> &'static str {
        match self {
            Kind::Sum | Kind::Mean => "sum",
            Kind::Prod => "prod",
            Kind::Max => "amax",
            Kind::Min => "amin",
        }
    }

    /// The value of a segment with no element and no `initial`, before a mean's division.
    fn identity(self) -> Scalar {
        match self {
            Kind::Sum | Kind::Mean => Scalar::Float(0.0),
            Kind::Prod => Scalar::Float(1.0),
            Kind::Max => Scalar::Float(f64::NEG_INFINITY),
            Kind::Min => Scalar::Float(f64::INFINITY),
        }
    }
}

/// The checked problem: `data` as `[b, d, t]`, `s` segments a row, each element's segment
/// number broadcast to `[b, d, t]` (int64, `s` for none), each segment's length `[b, s]`
/// (int64, inside the data), the output shape, and the device check of the segments.
struct Segments {
    b: usize,
    s: usize,
    t: usize,
    data: Tensor,
    id: Tensor,
    length: Tensor,
    out_shape: Vec<i64>,
    checks: Vec<Pending>,
}

/// PyTorch's checks and the segment of every element.
#[allow(clippy::too_many_arguments)]
fn segments(
    rt: &Runtime,
    name: &str,
    data: &Tensor,
    lengths: Option<&Tensor>,
    offsets: Option<&Tensor>,
    axis: i64,
    unsafe_: bool,
) -> Result<Segments> {
    // PyTorch's kernels take the offsets when both are given.
    let (segs, by_offsets) = match (lengths, offsets) {
        (_, Some(o)) => (o, true),
        (Some(l), None) => (l, false),
        (None, None) => {
            return Err(TpuError::BadArgs(
                "segment_reduce(): Either lengths or offsets must be defined.".into(),
            ));
        }
    };
    if !data.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"_segment_reduce_cpu\" not implemented for '{}'",
            data.dtype().scalar_type_name()
        )));
    }
    if !matches!(segs.dtype(), DType::I32 | DType::I64) {
        return Err(TpuError::DtypeMismatch(format!(
            "segment_reduce(): lengths and offsets must be int32 or int64, not {}",
            segs.dtype().name()
        )));
    }
    let ax = wrap_dim(axis, data.dim())?;
    if data.dim() < segs.dim() {
        return Err(TpuError::BadArgs(
            "Expected data.dim() >= lengths_value.dim() to be true, but got false.".into(),
        ));
    }
    if segs.dim() == 0 || ax != segs.dim() - 1 {
        let what = if by_offsets { "offsets" } else { "lengths" };
        return Err(TpuError::BadArgs(format!(
            "segment_reduce(): Expected axis to be the last dimension of {what} but got {axis}."
        )));
    }
    let shape = data.shape();
    if segs.shape()[..ax] != shape[..ax] {
        return Err(TpuError::ShapeMismatch(format!(
            "segment_reduce(): lengths of shape {:?} do not match the data's leading dims {:?}",
            segs.shape(),
            &shape[..ax]
        )));
    }
    let b: usize = shape[..ax].iter().product();
    let d = shape[ax];
    let t: usize = shape[ax + 1..].iter().product();
    let last = segs.shape()[ax];
    let s = if by_offsets {
        last.checked_sub(1).ok_or_else(|| {
            TpuError::BadArgs("segment_reduce(): offsets need at least one element".into())
        })?
    } else {
        last
    };
    let scope = OpScope::new(name, &[data, segs])?;
    let segs = segs
        .reshape(&[b as i64, last as i64])?
        .to_dtype(DType::I64)?;
    let (starts, ends, checks) = if by_offsets {
        let starts = narrow(rt, &segs, 0, s)?;
        let ends = narrow(rt, &segs, 1, s)?;
        let length = op(rt, "aten::sub.Tensor", vec![tv(&ends), tv(&starts)])?;
        (starts, ends, vec![no_negative_segment(&scope, &length)?])
    } else {
        let ends = op(rt, "aten::cumsum", vec![tv(&segs), Value::Int(1)])?;
        let starts = op(rt, "aten::sub.Tensor", vec![tv(&ends), tv(&segs)])?;
        let checks = if unsafe_ {
            vec![no_negative_segment(&scope, &segs)?]
        } else {
            let negative = check_values(&scope, &segs, nonnegative, |_| {
                TpuError::BadArgs("lengths contains negative value!".into())
            })?;
            // Each row's total: the last end (0 for a row of no segments).
            let total = op(
                rt,
                "aten::sum.dim_IntList",
                vec![tv(&segs), Value::Ints(vec![1]), Value::Bool(false)],
            )?;
            let whole = check_values(
                &scope,
                &total,
                move |p, v| {
                    let size = p.constant(Scalar::Int(d as i64), DType::I32);
                    p.cmp(CmpKind::Eq, v, size, DType::I32)
                },
                |_| TpuError::BadArgs(NOT_WHOLE.into()),
            )?;
            vec![negative, whole]
        };
        (starts, ends, checks)
    };
    // Each element's segment: how many segments end at or before it — the ends counted at
    // their positions (`[b, d + 1]`, an end past the data in the last slot) and summed along
    // the row, O(d + s); none before the first.
    let at = op(
        rt,
        "aten::clamp",
        vec![tv(&ends), sv(Scalar::Int(0)), sv(Scalar::Int(d as i64))],
    )?;
    let counts = op(
        rt,
        "aten::scatter_add",
        vec![
            tv(&full(rt, &[b, d + 1], Scalar::Int(0), DType::I64)?),
            Value::Int(1),
            tv(&at),
            tv(&full(rt, &[b, s], Scalar::Int(1), DType::I64)?),
        ],
    )?;
    let id = op(rt, "aten::cumsum", vec![tv(&counts), Value::Int(1)])?;
    let id = narrow(rt, &id, 0, d)?;
    let k = prims::iota(&scope, d)?.to_dtype(DType::I64)?;
    let id = if s > 0 {
        let first = narrow(rt, &starts, 0, 1)?;
        let before = op(
            rt,
            "aten::lt.Tensor",
            vec![tv(&k.reshape(&[1, d as i64])?), tv(&first)],
        )?;
        op(
            rt,
            "aten::where.ScalarSelf",
            vec![tv(&before), Value::Int(s as i64), tv(&id)],
        )?
    } else {
        id
    };
    let id = op(
        rt,
        "aten::expand",
        vec![
            tv(&id.reshape(&[b as i64, d as i64, 1])?),
            Value::Ints(vec![b as i64, d as i64, t as i64]),
        ],
    )?;
    // The elements a segment holds: its bounds inside the data.
    let clip = |x: &Tensor| {
        op(
            rt,
            "aten::clamp",
            vec![tv(x), sv(Scalar::Int(0)), sv(Scalar::Int(d as i64))],
        )
    };
    let length = op(
        rt,
        "aten::sub.Tensor",
        vec![tv(&clip(&ends)?), tv(&clip(&starts)?)],
    )?;
    let length = op(rt, "aten::clamp_min", vec![tv(&length), sv(Scalar::Int(0))])?;
    let mut out_shape: Vec<i64> = shape[..ax].iter().map(|&x| x as i64).collect();
    out_shape.push(s as i64);
    out_shape.extend(shape[ax + 1..].iter().map(|&x| x as i64));
    Ok(Segments {
        b,
        s,
        t,
        data: data.reshape(&[b as i64, d as i64, t as i64])?,
        id,
        length,
        out_shape,
        checks,
    })
}

/// PyTorch's check of every segment's length, `unsafe` or not.
fn no_negative_segment(scope: &OpScope, length: &Tensor) -> Result<Pending> {
    check_values(scope, length, nonnegative, |_| {
        TpuError::BadArgs("Expected segment_length >= 0 to be true, but got false.".into())
    })
}

/// Whether an int32 value is not negative.
fn nonnegative(p: &mut ProgBuilder, v: PRef) -> PRef {
    let zero = p.constant(Scalar::Int(0), DType::I32);
    p.cmp(CmpKind::Ge, v, zero, DType::I32)
}

/// `x[:, start .. start + len]` (dim 1).
fn narrow(rt: &Runtime, x: &Tensor, start: usize, len: usize) -> Result<Tensor> {
    op(
        rt,
        "aten::narrow",
        vec![
            tv(x),
            Value::Int(1),
            Value::Int(start as i64),
            Value::Int(len as i64),
        ],
    )
}

/// `[b, s + 1, t]` filled with `v` in `dtype`.
fn slots(rt: &Runtime, g: &Segments, v: Scalar, dtype: DType) -> Result<Tensor> {
    full(rt, &[g.b, g.s + 1, g.t], v, dtype)
}

/// `scatter_reduce` of `src [b, d, t]` into `into [b, s + 1, t]` by segment.
fn reduce_into(
    rt: &Runtime,
    g: &Segments,
    into: &Tensor,
    src: &Tensor,
    how: &str,
) -> Result<Tensor> {
    op(
        rt,
        "aten::scatter_reduce.two",
        vec![
            tv(into),
            Value::Int(1),
            tv(&g.id),
            tv(src),
            Value::Str(how.into()),
            Value::Bool(true),
        ],
    )
}

/// Each element's value of a per-segment `[b, s + 1, t]` tensor.
fn per_element(rt: &Runtime, g: &Segments, per_segment: &Tensor) -> Result<Tensor> {
    op(
        rt,
        "aten::gather",
        vec![tv(per_segment), Value::Int(1), tv(&g.id)],
    )
}

/// The segments' lengths as `[b, s + 1, t]` in `dtype` (the spare slot's is 1).
fn lengths_slots(rt: &Runtime, g: &Segments, dtype: DType) -> Result<Tensor> {
    let spare = full(rt, &[g.b, 1], Scalar::Int(1), DType::I64)?;
    let l = op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![g.length.clone(), spare]), Value::Int(1)],
    )?;
    let l = op(
        rt,
        "aten::expand",
        vec![
            tv(&l.reshape(&[g.b as i64, g.s as i64 + 1, 1])?),
            Value::Ints(vec![g.b as i64, g.s as i64 + 1, g.t as i64]),
        ],
    )?;
    l.to_dtype(dtype)
}

/// `x` with a spare slot of zeros after its `s` segments (dim 1).
fn with_spare(rt: &Runtime, g: &Segments, x: &Tensor) -> Result<Tensor> {
    let x = x.reshape(&[g.b as i64, g.s as i64, g.t as i64])?;
    let zero = slots(rt, g, Scalar::Float(0.0), x.dtype())?;
    let zero = narrow(rt, &zero, 0, 1)?;
    op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![x, zero]), Value::Int(1)],
    )
}

/// `segment_reduce(data, reduce, lengths, indices, offsets, axis, unsafe, initial)`.
#[allow(clippy::too_many_arguments)]
pub fn segment_reduce(
    rt: &Runtime,
    data: &Tensor,
    reduce: &str,
    lengths: Option<&Tensor>,
    indices: Option<&Tensor>,
    offsets: Option<&Tensor>,
    axis: i64,
    unsafe_: bool,
    initial: Option<Scalar>,
) -> Result<Tensor> {
    let kind = Kind::parse(reduce)?;
    if indices.is_some() {
        return Err(TpuError::BadArgs(
            "segment_reduce(): indices based reduction is not supported yet.".into(),
        ));
    }
    let name = SegmentReduce::NAME;
    let g = segments(rt, name, data, lengths, offsets, axis, unsafe_)?;
    let dt = data.dtype();
    let start = slots(rt, &g, initial.unwrap_or(kind.identity()), dt)?;
    let mut out = reduce_into(rt, &g, &start, &g.data, kind.scatter())?;
    if kind == Kind::Mean {
        let n = lengths_slots(rt, &g, dt)?;
        let mean = op(rt, "aten::div.Tensor", vec![tv(&out), tv(&n)])?;
        out = match initial {
            // An empty segment's mean is `initial` (its sum over no length would be infinite).
            Some(v) => {
                let empty = op(rt, "aten::eq.Scalar", vec![tv(&n), sv(Scalar::Int(0))])?;
                op(
                    rt,
                    "aten::where.ScalarSelf",
                    vec![tv(&empty), sv(v), tv(&mean)],
                )?
            }
            None => mean,
        };
    }
    let out = narrow(rt, &out, 0, g.s)?.reshape(&g.out_shape)?;
    for c in g.checks {
        c.guards(rt, &[&out]);
    }
    Ok(out)
}

/// `_segment_reduce_backward(grad, output, data, reduce, lengths, offsets, axis, initial)`: the
/// gradient with respect to `data`.
#[allow(clippy::too_many_arguments)]
pub fn segment_reduce_backward(
    rt: &Runtime,
    grad: &Tensor,
    output: &Tensor,
    data: &Tensor,
    reduce: &str,
    lengths: Option<&Tensor>,
    offsets: Option<&Tensor>,
    axis: i64,
    initial: Option<Scalar>,
) -> Result<Tensor> {
    let kind = Kind::parse(reduce)?;
    let name = SegmentReduceBackward::NAME;
    let g = segments(rt, name, data, lengths, offsets, axis, true)?;
    let dt = data.dtype();
    if grad.numel() != g.b * g.s * g.t || output.numel() != g.b * g.s * g.t {
        return Err(TpuError::ShapeMismatch(format!(
            "_segment_reduce_backward: grad {:?} and output {:?} do not match the segments {:?}",
            grad.shape(),
            output.shape(),
            g.out_shape
        )));
    }
    let ge = per_element(rt, &g, &with_spare(rt, &g, grad)?)?;
    let x = &g.data;
    let zero = sv(Scalar::Float(0.0));
    let out = match kind {
        Kind::Sum => ge,
        Kind::Mean => {
            let n = per_element(rt, &g, &lengths_slots(rt, &g, dt)?)?;
            op(rt, "aten::div.Tensor", vec![tv(&ge), tv(&n)])?
        }
        Kind::Max | Kind::Min => {
            let oe = per_element(rt, &g, &with_spare(rt, &g, output)?)?;
            let eq = op(rt, "aten::eq.Tensor", vec![tv(x), tv(&oe)])?;
            let both_nan = op(
                rt,
                "aten::logical_and",
                vec![
                    tv(&op(rt, "aten::isnan", vec![tv(x)])?),
                    tv(&op(rt, "aten::isnan", vec![tv(&oe)])?),
                ],
            )?;
            let tie = op(rt, "aten::logical_or", vec![tv(&eq), tv(&both_nan)])?;
            let ties = reduce_into(
                rt,
                &g,
                &slots(rt, &g, Scalar::Float(0.0), dt)?,
                &tie.to_dtype(dt)?,
                "sum",
            )?;
            let share = op(
                rt,
                "aten::div.Tensor",
                vec![tv(&ge), tv(&per_element(rt, &g, &ties)?)],
            )?;
            // PyTorch's CPU kernel divides a positive gradient only (`if (grad_input > 0)`):
            // a negative or zero one goes whole to every tie.
            let positive = op(rt, "aten::gt.Scalar", vec![tv(&ge), zero.clone()])?;
            let share = op(
                rt,
                "aten::where.self",
                vec![tv(&positive), tv(&share), tv(&ge)],
            )?;
            op(
                rt,
                "aten::where.ScalarOther",
                vec![tv(&tie), tv(&share), zero],
            )?
        }
        Kind::Prod => prod_backward(rt, &g, &ge, output, initial)?,
    };
    // An element in no segment has no gradient (its slot's values may be anything).
    let spare = op(
        rt,
        "aten::eq.Scalar",
        vec![tv(&g.id), sv(Scalar::Int(g.s as i64))],
    )?;
    let out = op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(&spare), sv(Scalar::Float(0.0)), tv(&out)],
    )?;
    let shape: Vec<i64> = data.shape().iter().map(|&x| x as i64).collect();
    out.reshape(&shape)?.to_dtype(dt)
}

/// The prod backward: `grad` times the product of the segment's other elements. For an
/// element that is neither 0 nor NaN that is the result over it; for a zero or NaN (PyTorch's
/// kernel computes theirs apart) the product of the segment's ordinary elements with `initial`
/// when it is the only one, else NaN when another is NaN, else 0.
fn prod_backward(
    rt: &Runtime,
    g: &Segments,
    ge: &Tensor,
    output: &Tensor,
    initial: Option<Scalar>,
) -> Result<Tensor> {
    let (x, dt) = (&g.data, g.data.dtype());
    let zero = || sv(Scalar::Float(0.0));
    let oe = per_element(rt, g, &with_spare(rt, g, output)?)?;
    let is_zero = op(rt, "aten::eq.Scalar", vec![tv(x), zero()])?;
    let is_nan = op(rt, "aten::isnan", vec![tv(x)])?;
    let special = op(rt, "aten::logical_or", vec![tv(&is_zero), tv(&is_nan)])?;
    let ordinary = op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(&special), sv(Scalar::Float(1.0)), tv(x)],
    )?;
    let rest = reduce_into(
        rt,
        g,
        &slots(rt, g, initial.unwrap_or(Scalar::Float(1.0)), dt)?,
        &ordinary,
        "prod",
    )?;
    // The other zeros and NaN of each element's segment.
    let others = |mark: &Tensor| -> Result<Tensor> {
        let m = mark.to_dtype(dt)?;
        let count = reduce_into(rt, g, &slots(rt, g, Scalar::Float(0.0), dt)?, &m, "sum")?;
        op(
            rt,
            "aten::sub.Tensor",
            vec![tv(&per_element(rt, g, &count)?), tv(&m)],
        )
    };
    let other_nan = op(rt, "aten::gt.Scalar", vec![tv(&others(&is_nan)?), zero()])?;
    let other_zero = op(rt, "aten::gt.Scalar", vec![tv(&others(&is_zero)?), zero()])?;
    let product = per_element(rt, g, &rest)?;
    let product = op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(&other_zero), zero(), tv(&product)],
    )?;
    let product = op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(&other_nan), sv(Scalar::Float(f64::NAN)), tv(&product)],
    )?;
    let at_special = op(rt, "aten::mul.Tensor", vec![tv(ge), tv(&product)])?;
    let ratio = op(rt, "aten::div.Tensor", vec![tv(&oe), tv(x)])?;
    let elsewhere = op(rt, "aten::mul.Tensor", vec![tv(ge), tv(&ratio)])?;
    op(
        rt,
        "aten::where.self",
        vec![tv(&special), tv(&at_special), tv(&elsewhere)],
    )
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::segment_reduce",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(SEGMENTS),
    kind = Decomposition
)]
fn segment_reduce_op(rt: &Runtime, a: SegmentReduce<'_>) -> Result<Tensor> {
    segment_reduce(
        rt, a.data, a.reduce, a.lengths, a.indices, a.offsets, a.axis, a.unsafe_, a.initial,
    )
}

#[aten(
    "aten::_segment_reduce_backward",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate(SEGMENTS),
    kind = Decomposition
)]
fn segment_reduce_backward_op(rt: &Runtime, a: SegmentReduceBackward<'_>) -> Result<Tensor> {
    segment_reduce_backward(
        rt, a.grad, a.output, a.data, a.reduce, a.lengths, a.offsets, a.axis, a.initial,
    )
}
