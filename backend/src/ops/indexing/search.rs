//! Searches and counts: `bucketize` (`.Tensor`, `.Scalar`), `searchsorted` (`.Tensor`,
//! `.Scalar`), `isin` (three forms), `bincount`, `histc`, `histogram` (`.bin_ct`,
//! `.bins_tensor`).
//!
//! A search is a count: the insertion point of `v` among sorted boundaries is the number of
//! boundaries `b` with `!(b >= v)` (`right`: `!(b > v)`), which is what PyTorch's binary search
//! returns, NaN included (it goes last). One rows kernel per call counts over the boundaries of
//! each value (`values × boundaries` lane operations). `isin` is an `any` over the test
//! elements. Histograms compute each element's bin in a tile kernel, correct it against the
//! bin edges as PyTorch does, and add ones (or weights) into the bins with one index-add kernel.

use crate::dtype::{DType, Scalar, promote_types};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::prims::{self, fill, put_rows, reshaped, tile};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// Insertion points of `values` (any shape, or `[lead..., k]` against `[lead..., m]`) among
/// the boundaries `seq` (`[m]`, or `[lead..., m]`).
fn search_in(
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

/// The bin of `x` among `bins` equal bins over `[lo, hi]` (PyTorch's formula, corrected
/// against the linspace edges), or `bins` (a spare bin) when outside or NaN.
fn bin_of(p: &mut ProgBuilder, x: PRef, lo: f64, hi: f64, bins: usize) -> PRef {
    let (f, i) = (DType::F32, DType::I32);
    let x = p.cast(x, f);
    let l = p.constant(Scalar::Float(lo), f);
    let h = p.constant(Scalar::Float(hi), f);
    let nb = p.constant(Scalar::Float(bins as f64), f);
    let dx = p.bin(BinOp::Sub, x, l, f);
    let t = p.bin(BinOp::Mul, dx, nb, f);
    let w = p.bin(BinOp::Sub, h, l, f);
    let q = p.bin(BinOp::Div, t, w, f);
    let pos = p.un(UnOp::Trunc, q, f);
    let mut pos = p.cast(pos, i);
    // The edges, as linspace(lo, hi, bins + 1) computes them.
    let step = (hi as f32 - lo as f32) / bins as f32;
    let edge = |p: &mut ProgBuilder, k: PRef| {
        let kf = p.cast(k, f);
        let s = p.constant(Scalar::Float(step as f64), f);
        let a = p.bin(BinOp::Mul, kf, s, f);
        let from_lo = p.bin(BinOp::Add, l, a, f);
        let nbi = p.constant(Scalar::Int(bins as i64), i);
        let rk = p.bin(BinOp::Sub, nbi, k, i);
        let rf = p.cast(rk, f);
        let b = p.bin(BinOp::Mul, rf, s, f);
        let from_hi = p.bin(BinOp::Sub, h, b, f);
        let half = p.constant(Scalar::Int((bins / 2) as i64), i);
        let low_half = p.cmp(CmpKind::Lt, k, half, i);
        p.select(low_half, from_lo, from_hi, f)
    };
    let one = p.constant(Scalar::Int(1), i);
    let e0 = edge(p, pos);
    let below = p.cmp(CmpKind::Lt, x, e0, f);
    let dn = p.bin(BinOp::Sub, pos, one, i);
    pos = p.select(below, dn, pos, i);
    let next = p.bin(BinOp::Add, pos, one, i);
    let e1 = edge(p, next);
    let above = p.cmp(CmpKind::Ge, x, e1, f);
    let up = p.bin(BinOp::Add, pos, one, i);
    pos = p.select(above, up, pos, i);
    let last = p.constant(Scalar::Int(bins as i64 - 1), i);
    let at_hi = p.cmp(CmpKind::Eq, x, h, f);
    pos = p.select(at_hi, last, pos, i);
    let ge = p.cmp(CmpKind::Ge, x, l, f);
    let le = p.cmp(CmpKind::Le, x, h, f);
    let inside = p.bin(BinOp::And, ge, le, DType::Bool);
    let spare = p.constant(Scalar::Int(bins as i64), i);
    let zero = p.constant(Scalar::Int(0), i);
    let pos = p.bin(BinOp::Max, pos, zero, i);
    let pos = p.bin(BinOp::Min, pos, last, i);
    p.select(inside, pos, spare, i)
}

/// `[lo, hi]` of a histogram: the given range, else the data's (widened by `widen` each way
/// when empty or equal, as PyTorch does: 1 for `histc`, 0.5 for `histogram`).
fn range_of(x: &Tensor, lo: f64, hi: f64, widen: f64) -> Result<(f64, f64)> {
    let (mut lo, mut hi) = (lo, hi);
    if lo == hi && x.numel() > 0 {
        lo = crate::ops::reduce::amin(x, &[], false)?.item()?.to_f64();
        hi = crate::ops::reduce::amax(x, &[], false)?.item()?.to_f64();
    }
    if lo == hi {
        lo -= widen;
        hi += widen;
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(TpuError::BadArgs(format!(
            "torch.histc: range of [{lo}, {hi}] is not finite"
        )));
    }
    Ok((lo, hi))
}

/// Histogram counts of `x` (weighted) in `bins` equal bins over `[lo, hi]`, in `out`.
fn hist_counts(
    op: &OpScope,
    x: &Tensor,
    w: Option<&Tensor>,
    bins: usize,
    lo: f64,
    hi: f64,
    out: DType,
) -> Result<Tensor> {
    let f = DType::F32;
    let table = fill(op, &[bins + 1, 1], Scalar::Int(0), f)?;
    let n = x.numel();
    if n > 0 {
        let pos = map_contiguous(op, &[x], &[DType::I32], |p, r| {
            // Integer inputs are binned by their value in f32 (exact up to 2^24).
            let v = p.cast(r[0], f);
            vec![bin_of(p, v, lo, hi, bins)]
        })?
        .remove(0);
        let pos = reshaped(&pos, &[n]);
        let src = match w {
            Some(w) => map_contiguous(op, &[w], &[f], |_, r| vec![r[0]])?.remove(0),
            None => fill(op, &[n], Scalar::Int(1), f)?,
        };
        put_rows(
            op,
            &table,
            &pos,
            &reshaped(&src, &[n, 1]),
            Combine::Add,
            false,
        )?;
    }
    let head = table.with_layout(Layout::contiguous(&[bins]));
    Ok(map_shape(op, &[bins], &[&head], &[out], |_, r| vec![r[0]])?.remove(0))
}

/// `torch.histc(x, bins, min, max)`: counts in the input's dtype. Integer inputs are taken as
/// PyTorch's CUDA kernel takes them (its CPU kernel refuses them); Hugging Face's grouped
/// mixture-of-experts path calls `histc` on int32 expert ids on a "tpu" device.
#[aten("aten::histc", dtypes = DType::NUMERIC, shard = REP, call = Histc(self_, bins, min.to_f64(), max.to_f64()))]
fn histc(x: &Tensor, bins: i64, min: f64, max: f64) -> Result<Tensor> {
    let op = OpScope::new(Histc::NAME, &[x])?;
    if !(x.dtype().is_float() || matches!(x.dtype(), DType::I32 | DType::I64)) {
        return Err(TpuError::Unsupported(format!(
            "\"histogram_cpu\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    if bins <= 0 {
        return Err(TpuError::BadArgs("torch.histc(): bins must be > 0".into()));
    }
    if min > max {
        return Err(TpuError::BadArgs(
            "torch.histc: max must be larger than min".into(),
        ));
    }
    let (lo, hi) = range_of(x, min, max, 1.0)?;
    hist_counts(&op, x, None, bins as usize, lo, hi, x.dtype())
}

/// `torch.histogram(x, bins, range, weight, density)`: `(hist, bin_edges)`.
#[aten(
    "aten::histogram.bin_ct",
    dtypes = DType::FLOATING,
    shard = REP,
    call = HistogramBinCt(self_, bins, range, weight, density)
)]
fn histogram_bin_ct(
    x: &Tensor,
    bins: i64,
    range: Option<Vec<f64>>,
    w: Option<&Tensor>,
    density: bool,
) -> Result<(Tensor, Tensor)> {
    let mut ins = vec![x];
    ins.extend(w);
    let op = OpScope::new(HistogramBinCt::NAME, &ins)?;
    if bins <= 0 {
        return Err(TpuError::BadArgs(
            "torch.histogram(): bins must be > 0".into(),
        ));
    }
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "torch.histogram: input tensor and bins tensors should have the same dtype, got {}",
            x.dtype().scalar_type_name()
        )));
    }
    let (lo, hi) = match range {
        Some(r) if r.len() == 2 => range_of(x, r[0], r[1], 0.5)?,
        Some(_) => {
            return Err(TpuError::BadArgs(
                "torch.histogram(): range should have 2 elements".into(),
            ));
        }
        None => range_of(x, 0.0, 0.0, 0.5)?,
    };
    let b = bins as usize;
    let dt = x.dtype();
    let mut hist = hist_counts(&op, x, w, b, lo, hi, DType::F32)?;
    let edges = map_shape(&op, &[b + 1], &[], &[dt], |p, _| {
        let k = p.index(0);
        let f = DType::F32;
        let step = (hi as f32 - lo as f32) / b as f32;
        let kf = p.cast(k, f);
        let s = p.constant(Scalar::Float(step as f64), f);
        let a = p.bin(BinOp::Mul, kf, s, f);
        let l = p.constant(Scalar::Float(lo), f);
        let from_lo = p.bin(BinOp::Add, l, a, f);
        let nb = p.constant(Scalar::Int(b as i64), DType::I32);
        let rk = p.bin(BinOp::Sub, nb, k, DType::I32);
        let rf = p.cast(rk, f);
        let bb = p.bin(BinOp::Mul, rf, s, f);
        let h = p.constant(Scalar::Float(hi), f);
        let from_hi = p.bin(BinOp::Sub, h, bb, f);
        let half = p.constant(Scalar::Int((b / 2) as i64), DType::I32);
        let low = p.cmp(CmpKind::Lt, k, half, DType::I32);
        vec![p.select(low, from_lo, from_hi, f)]
    })?
    .remove(0);
    if density {
        let total = crate::ops::reduce::sum_all(&hist, None)?;
        let width = (hi - lo) / b as f64;
        hist = map_contiguous(&op, &[&hist, &total], &[DType::F32], |p, r| {
            let f = DType::F32;
            let wk = p.constant(Scalar::Float(width), f);
            let d = p.bin(BinOp::Mul, r[1], wk, f);
            vec![p.bin(BinOp::Div, r[0], d, f)]
        })?
        .remove(0);
    }
    let hist = map_contiguous(&op, &[&hist], &[dt], |_, r| vec![r[0]])?.remove(0);
    Ok((hist, edges))
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
