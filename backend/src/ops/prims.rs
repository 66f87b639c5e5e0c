//! Building blocks shared by the data-movement, indexing, ordering and nn families: tile nodes
//! over an explicit iteration space, row puts ([`NodeKind::IndexPut`]), scans and stable ranks.
//!
//! Scans and ranks are tile kernels over a doubled iteration space: the running value at `i`
//! is a reduction over `j` of `j <= i ? x[j] : identity`, and the rank of `x[i]` in a row is
//! the number of `x[j]` that sort before it. A row of `n` elements costs `n²` lane operations
//! (on the 1024-lane vector unit, `n²/1024` instructions). Scans of rows above
//! [`SCAN_BLOCKED_ABOVE`] elements run in two levels instead (`n·B + (n/B)²` with blocks of `B ≈
//! √n`); ranks stay quadratic, which bounds `sort`/`topk` to rows of some tens of thousands of
//! elements in practice.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, GatherNode, NodeKind, PRef, ProgBuilder, RedKind};
use crate::layout::{Layout, wrap_dim};
use crate::ops::helpers::{OpScope, map_shape, write_into};
use crate::tensor::Tensor;

/// Scans of rows longer than this run in two levels.
pub const SCAN_BLOCKED_ABOVE: usize = 512;

/// A tile node over `shape` whose last `row_dims` dims form the row. `inputs` are (tensor,
/// per-row): a full input broadcasts to `shape`, a per-row input to the outer dims. `outs` are
/// (dtype, per-row): new contiguous tensors of `shape` or of the outer dims. `f` gets the inputs'
/// program nodes and returns one node per output.
pub fn tile(
    op: &OpScope,
    shape: &[usize],
    row_dims: usize,
    inputs: &[(&Tensor, bool)],
    outs: &[(DType, bool)],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    let outer = &shape[..shape.len() - row_dims];
    let mut b = ProgBuilder::new();
    let mut views = Vec::new();
    let mut refs = Vec::new();
    for (i, (t, per_row)) in inputs.iter().enumerate() {
        let mut v = t.view();
        v.layout = t
            .layout()
            .broadcast_to(if *per_row { outer } else { shape })?;
        refs.push(b.input(i as u32, t.dtype(), *per_row));
        views.push(v);
    }
    let nodes = f(&mut b, &refs);
    if nodes.len() != outs.len() {
        return Err(op.err("internal: program outputs do not match the outputs"));
    }
    let mut tensors = Vec::new();
    for (r, (d, per_row)) in nodes.iter().zip(outs) {
        let r = b.cast(*r, *d);
        b.output(r);
        tensors.push(Tensor::empty(
            op.rt(),
            if *per_row { outer } else { shape },
            *d,
        )?);
    }
    op.submit(
        NodeKind::Tile {
            shape: shape.to_vec(),
            row_dims,
            prog: b.finish(),
        },
        views,
        tensors.iter().map(Tensor::view).collect(),
    )?;
    Ok(tensors)
}

/// A new tensor of `shape` filled with `value`.
pub fn fill(op: &OpScope, shape: &[usize], value: Scalar, dtype: DType) -> Result<Tensor> {
    Ok(map_shape(op, shape, &[], &[dtype], |p, _| {
        vec![p.constant(value, dtype)]
    })?
    .remove(0))
}

/// `0, 1, ..., n-1` as int32.
pub fn iota(op: &OpScope, n: usize) -> Result<Tensor> {
    Ok(map_shape(op, &[n], &[], &[DType::I32], |p, _| vec![p.index(0)])?.remove(0))
}

/// A contiguous copy of `t` (or `t` when it already is contiguous).
pub fn dense(op: &OpScope, t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() {
        return Ok(t.clone());
    }
    Ok(crate::ops::helpers::map_contiguous(op, &[t], &[t.dtype()], |_, r| vec![r[0]])?.remove(0))
}

/// `t` (contiguous) seen as `shape`.
pub fn reshaped(t: &Tensor, shape: &[usize]) -> Tensor {
    let offset = t.layout().offset;
    t.with_layout(Layout {
        offset,
        ..Layout::contiguous(shape)
    })
}

/// `x` with dim `d` moved last (a view).
pub fn dim_last(x: &Tensor, d: usize) -> Result<Tensor> {
    let n = x.dim();
    let perm: Vec<i64> = (0..n)
        .filter(|k| *k != d)
        .chain([d])
        .map(|k| k as i64)
        .collect();
    Ok(x.with_layout(x.layout().permute(&perm)?))
}

/// The inverse of [`dim_last`]: the last dim of `y` moved back to position `d`.
pub fn dim_back(y: &Tensor, d: usize) -> Result<Tensor> {
    let n = y.dim();
    let mut perm: Vec<i64> = (0..n as i64 - 1).collect();
    perm.insert(d, n as i64 - 1);
    Ok(y.with_layout(y.layout().permute(&perm)?))
}

/// `x` with dim `dim` last, and the dim (a 0-d tensor is seen as one element): how the scans,
/// sorts and ranks see their input.
pub fn along(x: &Tensor, dim: i64) -> Result<(Tensor, usize)> {
    let d = wrap_dim(dim, x.dim())?;
    if x.dim() == 0 {
        return Ok((x.with_layout(x.layout().unsqueeze(0)?), 0));
    }
    Ok((dim_last(x, d)?, d))
}

/// A result computed by [`along`]'s view, back in `x`'s dim order and rank (0-d stays 0-d).
pub fn back(x: &Tensor, y: &Tensor, d: usize) -> Result<Tensor> {
    if x.dim() == 0 {
        return Ok(y.with_layout(y.layout().squeeze(0)?));
    }
    dim_back(y, d)
}

/// `dst[index[i], :] = combine(dst[index[i], :], src[i, :])` in index order: `dst` a `[rows,
/// row_len]` view with unit steps along its rows, `index` a contiguous int vector, `src`
/// `[count, row_len]`. With `check_bounds`, an index outside `[0, rows)` faults the kernel.
///
/// int64 sums and products accumulate in 32-bit lanes: one that leaves int32 is refused on the
/// device (`ops::wide`), told by the same accumulation in f32 (and, for sums, of magnitudes).
pub fn put_rows(
    op: &OpScope,
    dst: &Tensor,
    index: &Tensor,
    src: &Tensor,
    combine: Combine,
    check_bounds: bool,
) -> Result<()> {
    let wide = dst.dtype() == DType::I64
        && matches!(combine, Combine::Add | Combine::Mul)
        && index.numel() > 0
        && dst.numel() > 0
        && crate::ops::checks::checks_on(op);
    if !wide {
        return put_rows_unchecked(op, dst, index, src, combine, check_bounds);
    }
    let count = index.numel();
    if combine == Combine::Mul {
        crate::ops::wide::checkable_product(count + 1)?;
    }
    // The accumulation again in f32 (and of magnitudes), from dst's values before it.
    let f = DType::F32;
    let shadow = |t: &Tensor, magnitude: bool| -> Result<Tensor> {
        Ok(map_shape(op, t.shape(), &[t], &[f], |p, r| {
            let v = p.cast(r[0], f);
            vec![if magnitude {
                p.un(crate::ir::UnOp::Abs, v, f)
            } else {
                v
            }]
        })?
        .remove(0))
    };
    let (e_dst, e_src) = (shadow(dst, false)?, shadow(src, false)?);
    let magnitudes = if combine == Combine::Add {
        Some((shadow(dst, true)?, shadow(src, true)?))
    } else {
        None
    };
    put_rows_unchecked(op, dst, index, src, combine, check_bounds)?;
    put_rows_unchecked(op, &e_dst, index, &e_src, combine, check_bounds)?;
    let check = match magnitudes {
        Some((a_dst, a_src)) => {
            put_rows_unchecked(op, &a_dst, index, &a_src, Combine::Add, check_bounds)?;
            crate::ops::wide::sums_fit(op, &e_dst, &a_dst, count + 1)?
        }
        None => crate::ops::wide::products_fit(op, dst, &e_dst)?,
    };
    check.guards(op.rt(), &[dst]);
    Ok(())
}

/// [`put_rows`] without the int64 check.
fn put_rows_unchecked(
    op: &OpScope,
    dst: &Tensor,
    index: &Tensor,
    src: &Tensor,
    combine: Combine,
    check_bounds: bool,
) -> Result<()> {
    let (rows, row_len) = (dst.shape()[0], dst.shape()[1]);
    let count = index.numel();
    if count == 0 || row_len == 0 {
        return Ok(());
    }
    let src = if src.layout().shape[1] <= 1 || src.layout().strides[1] == 1 {
        src.clone()
    } else {
        dense(op, src)?
    };
    op.submit(
        NodeKind::IndexPut(
            GatherNode {
                rows,
                row_len,
                count,
                check_bounds,
                zero_table: false,
            },
            combine,
        ),
        vec![index.view(), src.view()],
        vec![dst.view()],
    )
}

/// The identity of a reduction in `dtype`'s lanes.
pub fn identity(kind: RedKind, dtype: DType) -> Scalar {
    let float = dtype.is_float();
    match kind {
        RedKind::Sum => Scalar::Int(0),
        RedKind::Prod => Scalar::Int(1),
        RedKind::Max if float => Scalar::Float(f64::NEG_INFINITY),
        RedKind::Max if dtype == DType::Bool => Scalar::Int(0),
        RedKind::Max => Scalar::Int(i32::MIN as i64),
        RedKind::Min if float => Scalar::Float(f64::INFINITY),
        RedKind::Min if dtype == DType::Bool => Scalar::Int(1),
        RedKind::Min => Scalar::Int(i32::MAX as i64),
    }
}

/// The running reduction along the last dim of `x` (any layout), inclusive (`strict`: exclusive),
/// computed in `acc`: a new contiguous tensor of `x`'s shape and dtype `acc`.
pub fn scan(op: &OpScope, x: &Tensor, kind: RedKind, acc: DType, strict: bool) -> Result<Tensor> {
    let n = *x
        .shape()
        .last()
        .ok_or_else(|| op.err("internal: scan of a scalar"))?;
    if x.numel() == 0 {
        return Tensor::empty(op.rt(), x.shape(), acc);
    }
    if n <= SCAN_BLOCKED_ABOVE {
        return scan_direct(op, x, kind, acc, strict);
    }
    // Two levels: blocks of `b`, the row padded with the identity to `nb * b`.
    let b = ((n as f64).sqrt().ceil() as usize).next_multiple_of(8);
    let nb = n.div_ceil(b);
    let outer = &x.shape()[..x.dim() - 1];
    let padded_shape: Vec<usize> = outer.iter().copied().chain([nb * b]).collect();
    let xp = fill(op, &padded_shape, identity(kind, acc), acc)?;
    let last = padded_shape.len() as i64 - 1;
    let head = xp.with_layout(xp.layout().slice(last, Some(0), Some(n as i64), 1)?);
    write_into(op, &head, &[x], |_, r| r[0])?;
    let blocks_shape: Vec<usize> = outer.iter().copied().chain([nb, b]).collect();
    let blocks = reshaped(&xp, &blocks_shape);
    let within = scan_direct(op, &blocks, kind, acc, false)?;
    let totals = within.with_layout(within.layout().select(-1, b as i64 - 1)?);
    let before = scan_direct(op, &totals, kind, acc, true)?;
    let before = before.with_layout(before.layout().unsqueeze(-1)?);
    let red = kind;
    let joined = map_shape(op, &blocks_shape, &[&within, &before], &[acc], |p, r| {
        vec![combine(p, red, r[0], r[1], acc)]
    })?
    .remove(0);
    let flat = reshaped(&joined, &padded_shape);
    let mut out = flat.with_layout(flat.layout().slice(last, Some(0), Some(n as i64), 1)?);
    if strict {
        // Exclusive: shift by one (the identity first).
        let sh = fill(op, x.shape(), identity(kind, acc), acc)?;
        let tail = sh.with_layout(sh.layout().slice(last, Some(1), None, 1)?);
        let src = out.with_layout(out.layout().slice(last, Some(0), Some(n as i64 - 1), 1)?);
        write_into(op, &tail, &[&src], |_, r| r[0])?;
        out = sh;
    }
    Ok(out)
}

/// `a ⊕ b` for a reduction kind.
pub fn combine(p: &mut ProgBuilder, kind: RedKind, a: PRef, b: PRef, dtype: DType) -> PRef {
    let op = match kind {
        RedKind::Sum => BinOp::Add,
        RedKind::Prod => BinOp::Mul,
        RedKind::Max => BinOp::Max,
        RedKind::Min => BinOp::Min,
    };
    p.bin(op, a, b, dtype)
}

/// The quadratic scan: one rows kernel over `[outer..., i, j]`.
fn scan_direct(
    op: &OpScope,
    x: &Tensor,
    kind: RedKind,
    acc: DType,
    strict: bool,
) -> Result<Tensor> {
    let nd = x.dim();
    let n = x.shape()[nd - 1];
    let (xj, ii, shape) = pairwise(op, x)?;
    let id = identity(kind, acc);
    let jd = nd as u32;
    Ok(tile(
        op,
        &shape,
        1,
        &[(&xj, false), (&ii, true)],
        &[(acc, true)],
        |p, r| {
            let j = p.index(jd);
            let keep = p.cmp(
                if strict { CmpKind::Lt } else { CmpKind::Le },
                j,
                r[1],
                DType::I32,
            );
            let v = p.cast(r[0], acc);
            let e = p.constant(id, acc);
            let v = p.select(keep, v, e, acc);
            vec![p.reduce(kind, v, acc)]
        },
    )?
    .remove(0))
    .inspect(|t| debug_assert_eq!(t.shape().last(), Some(&n)))
}

/// For a row-wise pairwise kernel over `x [outer..., n]`: `x` seen as `[outer..., i, j]` (the
/// element `j`, broadcast along `i`), the per-row index `i`, and the iteration shape.
pub fn pairwise(op: &OpScope, x: &Tensor) -> Result<(Tensor, Tensor, Vec<usize>)> {
    let nd = x.dim();
    let n = x.shape()[nd - 1];
    let l = x.layout();
    let mut shape = l.shape.clone();
    shape.insert(nd - 1, n);
    let mut strides = l.strides.clone();
    strides.insert(nd - 1, 0);
    let xj = x.with_layout(Layout {
        shape: shape.clone(),
        strides,
        offset: l.offset,
    });
    let io = iota(op, n)?;
    let mut ishape = vec![1usize; nd];
    ishape[nd - 1] = n;
    let ii = reshaped(&io, &ishape);
    Ok((xj, ii, shape))
}

/// Whether a float lane value is NaN (`a != a`).
pub fn isnan(p: &mut ProgBuilder, a: PRef) -> PRef {
    p.cmp(CmpKind::Ne, a, a, DType::F32)
}

/// `before(a, b)`: whether `a` sorts strictly before `b` (ascending: NaN last; descending: NaN
/// first), and `same(a, b)` (NaN equal to NaN), in `dtype`.
pub fn order(
    p: &mut ProgBuilder,
    a: PRef,
    b: PRef,
    dtype: DType,
    descending: bool,
) -> (PRef, PRef) {
    let ct = if dtype.is_float() {
        DType::F32
    } else {
        DType::I32
    };
    let (a, b) = (p.cast(a, dtype), p.cast(b, dtype));
    let (a, b) = (p.cast(a, ct), p.cast(b, ct));
    let cmp = if descending { CmpKind::Gt } else { CmpKind::Lt };
    let strict = p.cmp(cmp, a, b, ct);
    let eq = p.cmp(CmpKind::Eq, a, b, ct);
    if !dtype.is_float() {
        return (strict, eq);
    }
    let (na, nb) = (isnan(p, a), isnan(p, b));
    let t = DType::Bool;
    let one = p.constant(Scalar::Bool(true), t);
    // Ascending: a number before NaN; descending: NaN before a number.
    let (first, second) = if descending { (na, nb) } else { (nb, na) };
    let not_second = p.bin(BinOp::Xor, second, one, t);
    let nan_order = p.bin(BinOp::And, first, not_second, t);
    let before = p.bin(BinOp::Or, strict, nan_order, t);
    let both = p.bin(BinOp::And, na, nb, t);
    let same = p.bin(BinOp::Or, eq, both, t);
    (before, same)
}

/// The stable rank of each element within its row (the last dim of `x`): how many elements
/// sort before it, ties broken by position. int32, `x`'s shape.
pub fn ranks(op: &OpScope, x: &Tensor, descending: bool) -> Result<Tensor> {
    let nd = x.dim();
    let (xj, ii, shape) = pairwise(op, x)?;
    let dt = x.dtype();
    let jd = nd as u32;
    Ok(tile(
        op,
        &shape,
        1,
        &[(&xj, false), (x, true), (&ii, true)],
        &[(DType::I32, true)],
        |p, r| {
            let (before, same) = order(p, r[0], r[1], dt, descending);
            let j = p.index(jd);
            let earlier = p.cmp(CmpKind::Lt, j, r[2], DType::I32);
            let tie = p.bin(BinOp::And, same, earlier, DType::Bool);
            let counts = p.bin(BinOp::Or, before, tie, DType::Bool);
            let c = p.cast(counts, DType::I32);
            vec![p.reduce(RedKind::Sum, c, DType::I32)]
        },
    )?
    .remove(0))
}

/// Moves each element of `src [outer..., n]` to position `pos` (int32, same shape) of its row
/// in a new contiguous `[outer..., k]` tensor of dtype `dtype`; elements with `pos` outside
/// `[0, k)` are dropped. Every position below `k` must receive exactly one element.
pub fn place(op: &OpScope, src: &Tensor, pos: &Tensor, k: usize, dtype: DType) -> Result<Tensor> {
    let shape = src.shape().to_vec();
    let nd = shape.len();
    let outer: Vec<usize> = shape[..nd - 1].to_vec();
    let rows: usize = outer.iter().product();
    let mut out_shape = outer.clone();
    out_shape.push(k);
    if rows * k == 0 {
        return Tensor::empty(op.rt(), &out_shape, dtype);
    }
    fits_i32(rows * k + 1)?;
    let dummy = (rows * k) as i64;
    let flat = map_shape(op, &shape, &[pos], &[DType::I32], |p, r| {
        let i = DType::I32;
        let mut f = p.cast(r[0], i);
        let mut stride = k as i64;
        for d in (0..nd - 1).rev() {
            let c = p.index(d as u32);
            let s = p.constant(Scalar::Int(stride), i);
            let t = p.bin(BinOp::Mul, c, s, i);
            f = p.bin(BinOp::Add, f, t, i);
            stride *= shape[d] as i64;
        }
        let kk = p.constant(Scalar::Int(k as i64), i);
        let zero = p.constant(Scalar::Int(0), i);
        let below = p.cmp(CmpKind::Lt, r[0], kk, i);
        let nonneg = p.cmp(CmpKind::Ge, r[0], zero, i);
        let keep = p.bin(BinOp::And, below, nonneg, DType::Bool);
        let dm = p.constant(Scalar::Int(dummy), i);
        vec![p.select(keep, f, dm, i)]
    })?
    .remove(0);
    let n = src.numel();
    let flat = reshaped(&flat, &[n]);
    let values = map_shape(op, &shape, &[src], &[dtype], |_, r| vec![r[0]])?.remove(0);
    let values = reshaped(&values, &[n, 1]);
    let dst = Tensor::empty(op.rt(), &[rows * k + 1, 1], dtype)?;
    put_rows(op, &dst, &flat, &values, Combine::Copy, false)?;
    let head = dst.with_layout(dst.layout().slice(0, Some(0), Some(dummy), 1)?);
    Ok(head.with_layout(Layout::contiguous(&out_shape)))
}

/// Refuses sizes beyond the device's 32-bit index lanes.
pub fn fits_i32(n: usize) -> Result<()> {
    if n > i32::MAX as usize {
        return Err(TpuError::Unsupported(format!(
            "{n} elements exceed the device's 32-bit indices"
        )));
    }
    Ok(())
}

/// The value of a one-element integer tensor, read to the host (a synchronisation point: what
/// operators whose output shape depends on values need, as on any TPU runtime).
pub fn host_int(t: &Tensor) -> Result<i64> {
    Ok(t.item()?.to_i64())
}
