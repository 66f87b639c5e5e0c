//! Searches and counts: `bucketize` (`.Tensor`, `.Scalar`), `searchsorted` (`.Tensor`,
//! `.Scalar`), `isin` (three forms), `bincount` (histograms: `histogram.rs`, on `search_in`).
//!
//! A search is a count: the insertion point of `v` among sorted boundaries is the number of
//! boundaries `b` with `!(b >= v)` (`right`: `!(b > v)`), which is what PyTorch's binary search
//! returns, NaN included (it goes last). One rows kernel per call counts over the boundaries of
//! each value (`values × boundaries` lane operations). `isin` is an `any` over the test
//! elements.

use crate::dtype::{DType, Scalar, promote_types};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, RedKind};
use crate::layout::Layout;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::prims::{self, fill, put_rows, reshaped, tile};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// Insertion points of `values` (any shape, or `[lead..., k]` against `[lead..., m]`) among
/// the boundaries `seq` (`[m]`, or `[lead..., m]`).
pub(super) fn search_in(
    op: &OpScope,
    seq: &Tensor,
    values: &Tensor,
    right: bool,
    out: DType,
) -> Result<Tensor> {
    let dt = promote_types(seq.dtype(), values.dtype());
    let m = *seq.shape().last().unwrap_or(&1);
    let vshape = values.shape().to_vec();
    let mut shape = vshape.clone();
    shape.push(m);
    let sv = if seq.dim() <= 1 {
        let l = seq.layout();
        let st = if seq.dim() == 1 { l.strides[0] } else { 0 };
        let mut strides = vec![0isize; shape.len()];
        *strides.last_mut().expect("a dim") = st;
        seq.with_layout(Layout {
            shape: shape.clone(),
            strides,
            offset: l.offset,
        })
    } else {
        if seq.dim() != values.dim().max(1)
            || seq.shape()[..seq.dim() - 1] != vshape[..vshape.len().saturating_sub(1)]
        {
            return Err(TpuError::ShapeMismatch(format!(
                "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor must match, but we got boundaries tensor {:?} and input value tensor {:?}",
                seq.shape(),
                values.shape()
            )));
        }
        let l = seq.layout();
        let mut strides = l.strides.clone();
        strides.insert(strides.len() - 1, 0);
        seq.with_layout(Layout {
            shape: shape.clone(),
            strides,
            offset: l.offset,
        })
    };
    if values.numel() == 0 {
        return Tensor::empty(op.rt(), &vshape, out);
    }
    if m == 0 {
        return fill(op, &vshape, Scalar::Int(0), out);
    }
    Ok(tile(
        op,
        &shape,
        1,
        &[(&sv, false), (values, true)],
        &[(out, true)],
        |p, r| {
            let (b, v) = (p.cast(r[0], dt), p.cast(r[1], dt));
            let past = p.cmp(if right { CmpKind::Gt } else { CmpKind::Ge }, b, v, dt);
            let one = p.constant(Scalar::Bool(true), DType::Bool);
            let before = p.bin(BinOp::Xor, past, one, DType::Bool);
            let c = p.cast(before, DType::I32);
            vec![p.reduce(RedKind::Sum, c, DType::I32)]
        },
    )?
    .remove(0))
}

fn out_dtype(out_int32: bool) -> DType {
    if out_int32 { DType::I32 } else { DType::I64 }
}

/// `searchsorted(seq, values, out_int32, right, side, sorter)` under the overload's name `name`.
fn searchsorted(
    name: &str,
    seq: &Tensor,
    values: Result<&Tensor, Scalar>,
    out_int32: bool,
    right: bool,
    side: Option<&str>,
    sorter: Option<&Tensor>,
) -> Result<Tensor> {
    let mut ins = vec![seq];
    ins.extend(values.as_ref().ok().copied());
    ins.extend(sorter);
    let op = OpScope::new(name, &ins)?;
    let mut right = right;
    match side {
        Some("right") => right = true,
        Some("left") if right => {
            return Err(TpuError::BadArgs(
                "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True".into(),
            ));
        }
        Some("left") | None => {}
        Some(other) => {
            return Err(TpuError::BadArgs(format!(
                "torch.searchsorted(): side can only be 'left' or 'right' but got {other}"
            )));
        }
    }
    let seq = match sorter {
        Some(s) => crate::ops::data::gather(seq, -1, s)?,
        None => seq.clone(),
    };
    let v = match values {
        Ok(t) => t.clone(),
        Err(s) => fill(&op, &[], s, s.dtype())?,
    };
    search_in(&op, &seq, &v, right, out_dtype(out_int32))
}

/// `bucketize(values, boundaries, out_int32, right)`.
fn bucketize(
    values: Result<&Tensor, Scalar>,
    b: &Tensor,
    out_int32: bool,
    right: bool,
    name: &str,
) -> Result<Tensor> {
    let mut ins = vec![b];
    ins.extend(values.as_ref().ok().copied());
    let op = OpScope::new(name, &ins)?;
    if b.dim() != 1 {
        return Err(TpuError::BadArgs(format!(
            "boundaries tensor must be 1 dimension, but got dim({})",
            b.dim()
        )));
    }
    let v = match values {
        Ok(t) => t.clone(),
        Err(s) => fill(&op, &[], s, s.dtype())?,
    };
    search_in(&op, b, &v, right, out_dtype(out_int32))
}

/// `isin(elements, test, invert)` for tensors.
fn isin(e: &Tensor, test: &Tensor, invert: bool, name: &str, extra: &[&Tensor]) -> Result<Tensor> {
    let mut ins = vec![e, test];
    ins.extend(extra);
    let op = OpScope::new(name, &ins)?;
    let dt = promote_types(e.dtype(), test.dtype());
    let nt = test.numel();
    if nt == 0 {
        return fill(&op, e.shape(), Scalar::Bool(invert), DType::Bool);
    }
    let t = reshaped(&prims::dense(&op, test)?, &[nt]);
    let mut shape = e.shape().to_vec();
    shape.push(nt);
    let mut strides = vec![0isize; shape.len()];
    *strides.last_mut().expect("a dim") = 1;
    let tv = t.with_layout(Layout {
        shape: shape.clone(),
        strides,
        offset: t.layout().offset,
    });
    if e.numel() == 0 {
        return Tensor::empty(op.rt(), e.shape(), DType::Bool);
    }
    Ok(tile(
        &op,
        &shape,
        1,
        &[(&tv, false), (e, true)],
        &[(DType::Bool, true)],
        |p, r| {
            let eq = p.cmp(CmpKind::Eq, r[0], r[1], dt);
            let c = p.cast(eq, DType::I32);
            let any = p.reduce(RedKind::Max, c, DType::I32);
            vec![if invert {
                let one = p.constant(Scalar::Int(1), DType::I32);
                p.bin(BinOp::Xor, any, one, DType::I32)
            } else {
                any
            }]
        },
    )?
    .remove(0))
}

/// A number as a zero-dimensional tensor under `op`.
fn number(op: &OpScope, s: Scalar) -> Result<Tensor> {
    fill(op, &[], s, s.dtype())
}

/// `bincount(x, weights, minlength)`: counts (or summed weights) of each value of a 1-D
/// non-negative integer tensor.
#[aten(
    "aten::bincount",
    dtypes = &[DType::I32, DType::I64, DType::Bool, DType::F32],
    shard = REP,
    call = Bincount(self_, weights, minlength)
)]
fn bincount(x: &Tensor, weights: Option<&Tensor>, minlength: i64) -> Result<Tensor> {
    let mut ins = vec![x];
    ins.extend(weights);
    let op = OpScope::new(Bincount::NAME, &ins)?;
    if x.dim() != 1 || !x.dtype().is_int() && x.dtype() != DType::Bool {
        return Err(TpuError::BadArgs(
            "bincount only supports 1-d non-negative integral inputs.".into(),
        ));
    }
    if minlength < 0 {
        return Err(TpuError::BadArgs("minlength should be >= 0".into()));
    }
    let out = match weights {
        None => DType::I64,
        Some(w) if w.dtype() == DType::F32 => DType::F32,
        Some(w) => {
            return Err(TpuError::Unsupported(format!(
                "bincount with {} weights gives float64, which TPUs do not have",
                w.dtype().scalar_type_name()
            )));
        }
    };
    if let Some(w) = weights
        && w.shape() != x.shape()
    {
        return Err(TpuError::ShapeMismatch(
            "weights should be 1-d and have the same length as input".into(),
        ));
    }
    let n = x.numel();
    let (lo, hi) = if n == 0 {
        (0, -1)
    } else {
        let lo = crate::ops::reduce::amin(x, &[], false)?.item()?.to_i64();
        let hi = crate::ops::reduce::amax(x, &[], false)?.item()?.to_i64();
        (lo, hi)
    };
    if lo < 0 {
        return Err(TpuError::BadArgs(
            "bincount only supports 1-d non-negative integral inputs.".into(),
        ));
    }
    let len = ((hi + 1).max(minlength)) as usize;
    let acc = if out == DType::I64 {
        DType::I32
    } else {
        DType::F32
    };
    let table = fill(&op, &[len, 1], Scalar::Int(0), acc)?;
    if n > 0 {
        let idx = prims::dense(&op, x)?;
        let src = match weights {
            Some(w) => map_contiguous(&op, &[w], &[acc], |_, r| vec![r[0]])?.remove(0),
            None => fill(&op, &[n], Scalar::Int(1), acc)?,
        };
        put_rows(
            &op,
            &table,
            &idx,
            &reshaped(&src, &[n, 1]),
            Combine::Add,
            true,
        )?;
    }
    Ok(
        map_shape(&op, &[len], &[&reshaped(&table, &[len])], &[out], |_, r| {
            vec![r[0]]
        })?
        .remove(0),
    )
}

/// The rule of the searches and counts (but `isin` of a tensor's elements).
const REP: Sharding = Sharding::Replicate("each value is searched among all boundaries");

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::bucketize.Tensor", dtypes = DType::NUMERIC, shard = REP)]
fn bucketize_tensor_op(a: BucketizeTensor<'_>) -> Result<Tensor> {
    let v = Ok(a.self_);
    bucketize(v, a.boundaries, a.out_int32, a.right, BucketizeTensor::NAME)
}

#[aten("aten::bucketize.Scalar", dtypes = DType::NUMERIC, shard = REP)]
fn bucketize_scalar_op(a: BucketizeScalar<'_>) -> Result<Tensor> {
    let v = Err(a.self_);
    bucketize(v, a.boundaries, a.out_int32, a.right, BucketizeScalar::NAME)
}

#[aten("aten::searchsorted.Tensor", dtypes = DType::NUMERIC, shard = REP)]
fn searchsorted_tensor_op(a: SearchsortedTensor<'_>) -> Result<Tensor> {
    let (seq, v) = (a.sorted_sequence, Ok(a.self_));
    let name = SearchsortedTensor::NAME;
    searchsorted(name, seq, v, a.out_int32, a.right, a.side, a.sorter)
}

#[aten("aten::searchsorted.Scalar", dtypes = DType::NUMERIC, shard = REP)]
fn searchsorted_scalar_op(a: SearchsortedScalar<'_>) -> Result<Tensor> {
    let (seq, v) = (a.sorted_sequence, Err(a.self_));
    let name = SearchsortedScalar::NAME;
    searchsorted(name, seq, v, a.out_int32, a.right, a.side, a.sorter)
}

#[aten(
    "aten::isin.Tensor_Tensor",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No)
)]
fn isin_tensor_tensor_op(a: IsinTensorTensor<'_>) -> Result<Tensor> {
    let name = IsinTensorTensor::NAME;
    isin(a.elements, a.test_elements, a.invert, name, &[])
}

#[aten(
    "aten::isin.Tensor_Scalar",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No)
)]
fn isin_tensor_scalar_op(a: IsinTensorScalar<'_>) -> Result<Tensor> {
    let e = a.elements;
    let op = OpScope::new(IsinTensorScalar::NAME, &[e])?;
    let t = number(&op, a.test_element)?;
    isin(e, &t, a.invert, "aten::isin", &[])
}

#[aten("aten::isin.Scalar_Tensor", dtypes = DType::ALL_TPU, shard = REP)]
fn isin_scalar_tensor_op(a: IsinScalarTensor<'_>) -> Result<Tensor> {
    let t = a.test_elements;
    let op = OpScope::new(IsinScalarTensor::NAME, &[t])?;
    let e = number(&op, a.element)?;
    isin(&e, t, a.invert, "aten::isin", &[])
}
