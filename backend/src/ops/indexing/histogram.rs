//! Histograms: `histc`, `histogram` (`.bin_ct`, `.bins_tensor`) and `histogramdd`'s three
//! operators (`_histogramdd_bin_edges`, `_histogramdd_from_bin_cts`,
//! `_histogramdd_from_bin_tensors`).
//!
//! Each element's bin is computed in a tile kernel — among equal bins by PyTorch's formula,
//! corrected against the linspace edges as PyTorch corrects it, or among given edges by
//! PyTorch's upper-bound search (`search::search_in`) — with a spare bin for elements outside
//! the edges (or NaN); a `d`-dimensional point's bin is the row-major combination of its
//! coordinates' bins. One index-add kernel adds ones (or weights) into the bins, in f32; the
//! counts are cast to the input's dtype. A range taken from the data (no `range`) reads the
//! minimum and maximum back to the host, as PyTorch's CPU kernels do.

use super::search::search_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, PRef, ProgBuilder, UnOp};
use crate::layout::Layout;
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map, map_contiguous, map_shape};
use crate::ops::prims::{fill, put_rows, reshaped};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// The sharding rule of a histogram: every element may land in any bin.
const REP: Sharding = Sharding::Replicate("every element may land in any bin");

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
    let edge = |p: &mut ProgBuilder, k: PRef| edge_at(p, k, (l, h), lo, hi, bins);
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

/// The edges of `bins` equal bins over `[lo, hi]` in `dt`, as PyTorch's `linspace` computes
/// them (from `lo` in the first half, from `hi` in the second).
fn linspace_edges(op: &OpScope, lo: f64, hi: f64, bins: usize, dt: DType) -> Result<Tensor> {
    Ok(map_shape(op, &[bins + 1], &[], &[dt], |p, _| {
        let k = p.index(0);
        let f = DType::F32;
        let ends = (
            p.constant(Scalar::Float(lo), f),
            p.constant(Scalar::Float(hi), f),
        );
        vec![edge_at(p, k, ends, lo, hi, bins)]
    })?
    .remove(0))
}

/// Edge `k` (an int) of `bins` equal bins over `[lo, hi]` (`ends`: the two as f32 constants)
/// as PyTorch's `linspace` computes it: `lo + k * step` in the first half, `hi - (bins - k) *
/// step` in the second, in f32.
fn edge_at(
    p: &mut ProgBuilder,
    k: PRef,
    ends: (PRef, PRef),
    lo: f64,
    hi: f64,
    bins: usize,
) -> PRef {
    let (f, i) = (DType::F32, DType::I32);
    let step = (hi as f32 - lo as f32) / bins as f32;
    let kf = p.cast(k, f);
    let s = p.constant(Scalar::Float(step as f64), f);
    let a = p.bin(BinOp::Mul, kf, s, f);
    let from_lo = p.bin(BinOp::Add, ends.0, a, f);
    let nb = p.constant(Scalar::Int(bins as i64), i);
    let rk = p.bin(BinOp::Sub, nb, k, i);
    let rf = p.cast(rk, f);
    let b = p.bin(BinOp::Mul, rf, s, f);
    let from_hi = p.bin(BinOp::Sub, ends.1, b, f);
    let half = p.constant(Scalar::Int((bins / 2) as i64), i);
    let low = p.cmp(CmpKind::Lt, k, half, i);
    p.select(low, from_lo, from_hi, f)
}

/// Adds one (or the element's weight) into bin `pos[i]` for every element `i` (`pos` an int
/// vector; `bins` is the spare bin of elements counted nowhere): the `[bins]` counts, f32.
fn count_at(op: &OpScope, pos: &Tensor, w: Option<&Tensor>, bins: usize) -> Result<Tensor> {
    let f = DType::F32;
    let table = fill(op, &[bins + 1, 1], Scalar::Int(0), f)?;
    let n = pos.numel();
    if n > 0 {
        let src = match w {
            Some(w) => map_contiguous(op, &[w], &[f], |_, r| vec![r[0]])?.remove(0),
            None => fill(op, &[n], Scalar::Int(1), f)?,
        };
        put_rows(
            op,
            &table,
            &reshaped(pos, &[n]),
            &reshaped(&src, &[n, 1]),
            Combine::Add,
            false,
        )?;
    }
    let head = table.with_layout(Layout::contiguous(&[bins]));
    Ok(map_shape(op, &[bins], &[&head], &[f], |_, r| vec![r[0]])?.remove(0))
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
    let pos = map_contiguous(op, &[x], &[DType::I32], |p, r| {
        // Integer inputs are binned by their value in f32 (exact up to 2^24).
        let v = p.cast(r[0], DType::F32);
        vec![bin_of(p, v, lo, hi, bins)]
    })?
    .remove(0);
    let counts = count_at(op, &pos, w, bins)?;
    copied(op, &counts, out)
}

/// A contiguous copy of `t` in `dt` (a new tensor even when `t` already is one: an output).
fn copied(op: &OpScope, t: &Tensor, dt: DType) -> Result<Tensor> {
    Ok(map_contiguous(op, &[t], &[dt], |_, r| vec![r[0]])?.remove(0))
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

/// PyTorch's name of a dtype in its histogram messages (a `TypeMeta` name).
fn meta_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::BF16 => "c10::BFloat16",
        DType::F16 => "c10::Half",
        DType::I64 => "long int",
        DType::I32 => "int",
        _ => d.name(),
    }
}

/// `n` elements of the 1-D `t` from element `k` on, as a view.
fn run_of(t: &Tensor, k: usize, n: usize) -> Tensor {
    let l = t.layout();
    let step = l.strides[0];
    t.with_layout(Layout {
        shape: vec![n],
        strides: vec![step],
        offset: (l.offset as isize + k as isize * step) as usize,
    })
}

/// The checks PyTorch makes of a histogram's input and weight: a floating dtype, and a weight
/// of the input's dtype and of `points` (the shape of the input's points; PyTorch names the
/// input `[points..., d]`).
fn check_input(x: &Tensor, w: Option<&Tensor>, points: &[usize], d: usize) -> Result<()> {
    let dt = x.dtype();
    if !dt.is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"histogramdd\" not implemented for '{}'",
            dt.scalar_type_name()
        )));
    }
    if let Some(w) = w {
        if w.dtype() != dt {
            return Err(TpuError::BadArgs(format!(
                "torch.histogramdd: if weight tensor is provided, it should have the same dtype as the input tensor, but got {} and {}",
                meta_name(w.dtype()),
                meta_name(dt)
            )));
        }
        if w.shape() != points {
            return Err(TpuError::BadArgs(format!(
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor excluding its innermost dimension, but got input with shape {:?} and weight with shape {:?}",
                [points, &[d]].concat(),
                w.shape()
            )));
        }
    }
    Ok(())
}

/// The checks PyTorch makes of the edges of dimension `dim`; the number of bins.
fn check_edges(x: &Tensor, edges: &Tensor, dim: usize) -> Result<usize> {
    if edges.dtype() != x.dtype() {
        return Err(TpuError::BadArgs(format!(
            "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input with dtype {} and bins for dimension {dim} with dtype {}",
            meta_name(x.dtype()),
            meta_name(edges.dtype())
        )));
    }
    if edges.dim() != 1 {
        return Err(TpuError::BadArgs(format!(
            "torch.histogramdd: bins tensor should have one dimension, but got {} dimensions in the bins tensor for dimension {dim}",
            edges.dim()
        )));
    }
    match edges.numel() {
        0 => Err(TpuError::BadArgs(format!(
            "torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements in the bins tensor for dimension {dim}"
        ))),
        1 => Err(TpuError::BadArgs(format!(
            "torch.histogram(): bins must be > 0, but got 0 for dimension {dim}"
        ))),
        m => Ok(m - 1),
    }
}

/// The bin of each of `values` (an f32-exact vector) among `edges` (`bins + 1` of them),
/// PyTorch's way: `v` with `edges[0] <= v <= edges[bins]` (NaN never) goes to the bin before
/// the first edge above it, the last edge closing the last bin; any other `v` to the spare
/// bin `bins`.
fn edge_positions(op: &OpScope, values: &Tensor, edges: &Tensor, bins: usize) -> Result<Tensor> {
    let above = search_in(op, edges, values, true, DType::I32)?;
    let (first, last) = (run_of(edges, 0, 1), run_of(edges, bins, 1));
    Ok(map(
        op,
        &[values, &above, &first, &last],
        &[DType::I32],
        |p, r| {
            let (f, i) = (DType::F32, DType::I32);
            let one = p.constant(Scalar::Int(1), i);
            let pos = p.bin(BinOp::Sub, r[1], one, i);
            let spare = p.constant(Scalar::Int(bins as i64), i);
            let last_bin = p.constant(Scalar::Int(bins as i64 - 1), i);
            // Inside [first, last] with unsorted edges the count may say anything: kept in range.
            let zero = p.constant(Scalar::Int(0), i);
            let pos = p.bin(BinOp::Max, pos, zero, i);
            let pos = p.bin(BinOp::Min, pos, last_bin, i);
            // bfloat16 and half values are exact in f32.
            let (v, lo, hi) = (p.cast(r[0], f), p.cast(r[2], f), p.cast(r[3], f));
            let ge = p.cmp(CmpKind::Ge, v, lo, f);
            let le = p.cmp(CmpKind::Le, v, hi, f);
            let inside = p.bin(BinOp::And, ge, le, DType::Bool);
            vec![p.select(inside, pos, spare, i)]
        },
    )?
    .remove(0))
}

/// `hist / sum(hist)`, then divided along each dimension `d` by its bins' widths
/// (`edges[d][k + 1] - edges[d][k]`), as PyTorch divides.
fn density(op: &OpScope, hist: &Tensor, edges: &[Tensor]) -> Result<Tensor> {
    let f = DType::F32;
    let total = crate::ops::reduce::sum_all(hist, None)?;
    let mut h = map(op, &[hist, &total], &[f], |p, r| {
        vec![p.bin(BinOp::Div, r[0], r[1], f)]
    })?
    .remove(0);
    let shape = hist.shape().to_vec();
    for (d, e) in edges.iter().enumerate() {
        let bins = shape[d];
        // The edges from `from` on, laid along dimension d of the histogram.
        let along = |from: usize| {
            let l = e.layout();
            let mut strides = vec![0isize; shape.len()];
            strides[d] = l.strides[0];
            e.with_layout(Layout {
                shape: shape.clone(),
                strides,
                offset: (l.offset as isize + from as isize * l.strides[0]) as usize,
            })
        };
        debug_assert_eq!(e.numel(), bins + 1);
        let (lo, hi) = (along(0), along(1));
        h = map(op, &[&h, &lo, &hi], &[f], |p, r| {
            let (l, u) = (p.cast(r[1], f), p.cast(r[2], f));
            let width = p.bin(BinOp::Sub, u, l, f);
            vec![p.bin(BinOp::Div, r[0], width, f)]
        })?
        .remove(0);
    }
    Ok(h)
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
    density_: bool,
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
    let range = match range {
        Some(r) if r.len() != 2 => {
            return Err(TpuError::BadArgs(
                "torch.histogram(): range should have 2 elements".into(),
            ));
        }
        r => r,
    };
    let (lo, hi) = outer_edges(x, range.as_deref().map(|r| (r[0], r[1])), 0)?;
    let b = bins as usize;
    let dt = x.dtype();
    let edges = linspace_edges(&op, lo, hi, b, dt)?;
    let mut hist = hist_counts(&op, x, w, b, lo, hi, DType::F32)?;
    if density_ {
        hist = density(&op, &hist, std::slice::from_ref(&edges))?;
    }
    Ok((copied(&op, &hist, dt)?, edges))
}

/// The outer edges of dimension `dim` of a histogram of `values` (PyTorch's
/// `select_outer_bin_edges`): the range given, else the data's minimum and maximum, else (no
/// data) `[0, 1]`; an empty range widened by 0.5 each way.
fn outer_edges(values: &Tensor, range: Option<(f64, f64)>, dim: usize) -> Result<(f64, f64)> {
    let (lo, hi) = match range {
        Some((lo, hi)) => (lo, hi),
        None if values.numel() == 0 => (0.0, 1.0),
        None => (
            crate::ops::reduce::amin(values, &[], false)?
                .item()?
                .to_f64(),
            crate::ops::reduce::amax(values, &[], false)?
                .item()?
                .to_f64(),
        ),
    };
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(TpuError::BadArgs(format!(
            "torch.histogramdd: dimension {dim}'s range [{lo}, {hi}] is not finite"
        )));
    }
    if lo > hi {
        return Err(TpuError::BadArgs(format!(
            "torch.histogramdd: min should not exceed max, but got min {lo} max {hi} for dimension {dim}"
        )));
    }
    Ok(if lo == hi {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    })
}

/// `torch.histogram(x, bins, weight, density)` with the bin edges given: `(hist, bin_edges)`.
#[aten(
    "aten::histogram.bins_tensor",
    dtypes = DType::FLOATING,
    shard = REP,
    call = HistogramBinsTensor(self_, bins, weight, density)
)]
fn histogram_bins_tensor(
    x: &Tensor,
    edges: &Tensor,
    w: Option<&Tensor>,
    density_: bool,
) -> Result<(Tensor, Tensor)> {
    let mut ins = vec![x, edges];
    ins.extend(w);
    let op = OpScope::new(HistogramBinsTensor::NAME, &ins)?;
    check_input(x, w, x.shape(), 1)?;
    let bins = check_edges(x, edges, 0)?;
    let flat = reshaped(&copied(&op, x, x.dtype())?, &[x.numel()]);
    let pos = edge_positions(&op, &flat, edges, bins)?;
    let mut hist = count_at(&op, &pos, w, bins)?;
    if density_ {
        hist = density(&op, &hist, std::slice::from_ref(edges))?;
    }
    Ok((
        copied(&op, &hist, x.dtype())?,
        copied(&op, edges, x.dtype())?,
    ))
}

/// A `histogramdd` input's points: the input as `[n, d]` (contiguous), `n` and `d`.
fn points(op: &OpScope, x: &Tensor, w: Option<&Tensor>) -> Result<(Tensor, usize, usize)> {
    if x.dim() < 2 {
        return Err(TpuError::BadArgs(
            "torch.histogramdd: input tensor should have at least 2 dimensions".into(),
        ));
    }
    let shape = x.shape();
    let d = shape[shape.len() - 1];
    check_input(x, w, &shape[..shape.len() - 1], d)?;
    let n = x.numel().checked_div(d).unwrap_or(0);
    Ok((reshaped(&copied(op, x, x.dtype())?, &[n, d]), n, d))
}

/// Coordinate `k` of the `n` points of `flat` (`[n, d]`), contiguous.
fn column(op: &OpScope, flat: &Tensor, k: usize, n: usize, d: usize) -> Result<Tensor> {
    let view = flat.with_layout(Layout {
        shape: vec![n],
        strides: vec![d as isize],
        offset: flat.layout().offset + k,
    });
    copied(op, &view, flat.dtype())
}

/// `bins` checked against the points' dimension `d`, as counts.
fn bin_counts(bins: &[i64], d: usize) -> Result<Vec<usize>> {
    if bins.len() != d {
        return Err(TpuError::BadArgs(
            "histogramdd: The size of bins must be equal to the innermost dimension of the input."
                .into(),
        ));
    }
    bins.iter()
        .enumerate()
        .map(|(k, &b)| {
            usize::try_from(b).ok().filter(|&b| b > 0).ok_or_else(|| {
                TpuError::BadArgs(format!(
                    "torch.histogram(): bins must be > 0, but got {b} for dimension {k}"
                ))
            })
        })
        .collect()
}

/// The outer edges of every dimension of the points (`range`: `2d` numbers).
fn outer_edges_nd(
    op: &OpScope,
    flat: &Tensor,
    n: usize,
    d: usize,
    range: Option<&[f64]>,
) -> Result<Vec<(f64, f64)>> {
    if let Some(r) = range
        && r.len() != 2 * d
    {
        return Err(TpuError::BadArgs(format!(
            "torch.histogramdd: for a {d}-dimensional histogram range should have {} elements, but got {}",
            2 * d,
            r.len()
        )));
    }
    (0..d)
        .map(|k| {
            let given = range.map(|r| (r[2 * k], r[2 * k + 1]));
            let col = if given.is_none() && n > 0 {
                column(op, flat, k, n, d)?
            } else {
                flat.clone()
            };
            outer_edges(&col, given, k)
        })
        .collect()
}

/// The histogram of points whose coordinates' bins are `pos` (one int vector a dimension,
/// each with its spare bin `cts[k]`): `[cts...]` f32 counts, a point outside any dimension's
/// edges counted nowhere.
fn counts_nd(op: &OpScope, pos: &[Tensor], cts: &[usize], w: Option<&Tensor>) -> Result<Tensor> {
    let total: usize = cts.iter().product();
    let refs: Vec<&Tensor> = pos.iter().collect();
    let flat = map_shape(op, &[pos[0].numel()], &refs, &[DType::I32], |p, r| {
        let i = DType::I32;
        let mut at = p.constant(Scalar::Int(0), i);
        let mut inside = None;
        for (k, &c) in cts.iter().enumerate() {
            let spare = p.constant(Scalar::Int(c as i64), i);
            let ok = p.cmp(CmpKind::Lt, r[k], spare, i);
            inside = Some(match inside {
                None => ok,
                Some(all) => p.bin(BinOp::And, all, ok, DType::Bool),
            });
            let stride: usize = cts[k + 1..].iter().product();
            let s = p.constant(Scalar::Int(stride as i64), i);
            let term = p.bin(BinOp::Mul, r[k], s, i);
            at = p.bin(BinOp::Add, at, term, i);
        }
        let none = p.constant(Scalar::Int(total as i64), i);
        let inside = inside.expect("a dimension");
        vec![p.select(inside, at, none, i)]
    })?
    .remove(0);
    let counts = count_at(op, &flat, w, total)?;
    Ok(reshaped(&counts, cts))
}

/// `torch.histogramdd`'s edges from bin counts: each dimension's `linspace` over its range.
#[aten(
    "aten::_histogramdd_bin_edges",
    dtypes = DType::FLOATING,
    shard = REP,
    call = PrivateHistogramddBinEdges(self_, &bins, range, weight)
)]
fn histogramdd_bin_edges(
    x: &Tensor,
    bin_ct: &[i64],
    range: Option<Vec<f64>>,
    w: Option<&Tensor>,
) -> Result<Vec<Tensor>> {
    let mut ins = vec![x];
    ins.extend(w);
    let op = OpScope::new(PrivateHistogramddBinEdges::NAME, &ins)?;
    let (flat, n, d) = points(&op, x, w)?;
    let cts = bin_counts(bin_ct, d)?;
    let outer = outer_edges_nd(&op, &flat, n, d, range.as_deref())?;
    cts.iter()
        .zip(outer)
        .map(|(&b, (lo, hi))| linspace_edges(&op, lo, hi, b, x.dtype()))
        .collect()
}

/// `torch.histogramdd`'s counts in equal bins (the edges `_histogramdd_bin_edges` gives).
#[aten(
    "aten::_histogramdd_from_bin_cts",
    dtypes = DType::FLOATING,
    shard = REP,
    call = PrivateHistogramddFromBinCts(self_, &bins, range, weight, density)
)]
fn histogramdd_from_bin_cts(
    x: &Tensor,
    bins: &[i64],
    range: Option<Vec<f64>>,
    w: Option<&Tensor>,
    density_: bool,
) -> Result<Tensor> {
    let mut ins = vec![x];
    ins.extend(w);
    let op = OpScope::new(PrivateHistogramddFromBinCts::NAME, &ins)?;
    let (flat, n, d) = points(&op, x, w)?;
    let cts = bin_counts(bins, d)?;
    let outer = outer_edges_nd(&op, &flat, n, d, range.as_deref())?;
    let mut pos = Vec::with_capacity(d);
    for (k, (&b, &(lo, hi))) in cts.iter().zip(&outer).enumerate() {
        let col = column(&op, &flat, k, n, d)?;
        pos.push(
            map_contiguous(&op, &[&col], &[DType::I32], |p, r| {
                let v = p.cast(r[0], DType::F32);
                vec![bin_of(p, v, lo, hi, b)]
            })?
            .remove(0),
        );
    }
    let mut hist = counts_nd(&op, &pos, &cts, w)?;
    if density_ {
        let edges = cts
            .iter()
            .zip(&outer)
            .map(|(&b, &(lo, hi))| linspace_edges(&op, lo, hi, b, DType::F32))
            .collect::<Result<Vec<_>>>()?;
        hist = density(&op, &hist, &edges)?;
    }
    copied(&op, &hist, x.dtype())
}

/// `torch.histogramdd`'s counts among given edges, one edge vector a dimension.
#[aten(
    "aten::_histogramdd_from_bin_tensors",
    dtypes = DType::FLOATING,
    shard = REP,
    call = PrivateHistogramddFromBinTensors(self_, &bins, weight, density)
)]
fn histogramdd_from_bin_tensors(
    x: &Tensor,
    bins: &[Tensor],
    w: Option<&Tensor>,
    density_: bool,
) -> Result<Tensor> {
    let mut ins = vec![x];
    ins.extend(bins.iter());
    ins.extend(w);
    let op = OpScope::new(PrivateHistogramddFromBinTensors::NAME, &ins)?;
    let (flat, n, d) = points(&op, x, w)?;
    if bins.len() != d {
        return Err(TpuError::BadArgs(format!(
            "torch.histogramdd: expected {d} sequences of bin edges for a {d}-dimensional histogram but got {}",
            bins.len()
        )));
    }
    let mut cts = Vec::with_capacity(d);
    let mut pos = Vec::with_capacity(d);
    for (k, e) in bins.iter().enumerate() {
        let b = check_edges(x, e, k)?;
        let col = column(&op, &flat, k, n, d)?;
        pos.push(edge_positions(&op, &col, e, b)?);
        cts.push(b);
    }
    let mut hist = counts_nd(&op, &pos, &cts, w)?;
    if density_ {
        hist = density(&op, &hist, bins)?;
    }
    copied(&op, &hist, x.dtype())
}
