//! Rearrangements: `roll`, `rot90`, `repeat`, `repeat_interleave` (three forms),
//! `block_diag`, `diag_embed`, `pixel_shuffle`, `pixel_unshuffle`, `channel_shuffle`,
//! `native_channel_shuffle`, `im2col`, `col2im`, `_chunk_cat`.
//!
//! Most are one copy of a strided view of the input (`repeat` and `repeat_interleave` read
//! broadcast dims, the shuffles read permuted splits, `im2col` reads the padded input through
//! overlapping windows); `roll` copies two pieces per dim; `col2im` adds every patch element at
//! its image position with one index-add kernel.

use super::views::diagonal_layout;
use super::windows::{channel_shuffle, col2im, copy_as, im2col, pixel};
use crate::dtype::{DType, Scalar, promote_types};
use crate::error::{Result, TpuError};
use crate::ir::{CmpKind, RedKind};
use crate::layout::{Layout, wrap_dim};
use crate::ops::aten;
use crate::ops::checks::check_values;
use crate::ops::helpers::{OpScope, map_contiguous, write_into};
use crate::ops::prims::{self, fill, reshaped, tile};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// `torch.roll(x, shifts, dims)`.
#[aten("aten::roll", dtypes = DType::ALL_TPU, shard = REP, call = Roll(self_, &shifts, &dims))]
fn roll(x: &Tensor, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
    let op = OpScope::new(Roll::NAME, &[x])?;
    if dims.is_empty() && shifts.len() == 1 {
        let flat = reshaped(&prims::dense(&op, x)?, &[x.numel()]);
        let r = roll_dim(&op, &flat, shifts[0], 0)?;
        return Ok(reshaped(&r, x.shape()));
    }
    if shifts.len() != dims.len() {
        return Err(TpuError::BadArgs(format!(
            "shifts and dimensions must align. shifts: {}, dims:{}",
            shifts.len(),
            dims.len()
        )));
    }
    let mut cur = x.clone();
    for (s, d) in shifts.iter().zip(dims) {
        let d = wrap_dim(*d, x.dim())?;
        cur = roll_dim(&op, &cur, *s, d)?;
    }
    if cur.shares_storage(x) {
        cur = prims::dense(
            &op,
            &map_contiguous(&op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0),
        )?;
    }
    Ok(cur)
}

fn roll_dim(op: &OpScope, x: &Tensor, shift: i64, d: usize) -> Result<Tensor> {
    let out = Tensor::empty(op.rt(), x.shape(), x.dtype())?;
    if x.numel() == 0 {
        return Ok(out);
    }
    let n = x.shape()[d] as i64;
    let s = shift.rem_euclid(n);
    let dd = d as i64;
    // out[s:] = x[:n-s], out[:s] = x[n-s:].
    if n - s > 0 {
        let dst = out.with_layout(out.layout().slice(dd, Some(s), None, 1)?);
        let src = x.with_layout(x.layout().slice(dd, Some(0), Some(n - s), 1)?);
        write_into(op, &dst, &[&src], |_, r| r[0])?;
    }
    if s > 0 {
        let dst = out.with_layout(out.layout().slice(dd, Some(0), Some(s), 1)?);
        let src = x.with_layout(x.layout().slice(dd, Some(n - s), None, 1)?);
        write_into(op, &dst, &[&src], |_, r| r[0])?;
    }
    Ok(out)
}

/// `torch.rot90(x, k, dims)`.
#[aten("aten::rot90", dtypes = DType::ALL_TPU, shard = REP, call = Rot90(self_, k, &dims))]
fn rot90(x: &Tensor, k: i64, dims: &[i64]) -> Result<Tensor> {
    let op = OpScope::new(Rot90::NAME, &[x])?;
    if dims.len() != 2 {
        return Err(TpuError::BadArgs(format!(
            "expected total rotation dims == 2, but got dims = {}",
            dims.len()
        )));
    }
    if x.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "expected total dims >= 2, but got total dims = {}",
            x.dim()
        )));
    }
    let (a, b) = (wrap_dim(dims[0], x.dim())?, wrap_dim(dims[1], x.dim())?);
    if a == b {
        return Err(TpuError::BadArgs(format!(
            "expected rotation dims to be different, but got dim0 = {a} and dim1 = {b}"
        )));
    }
    let flip = |l: &Layout, d: usize| {
        let mut l = l.clone();
        let n = l.shape[d] as isize;
        if n > 1 {
            l.offset = (l.offset as isize + (n - 1) * l.strides[d]) as usize;
        }
        l.strides[d] = -l.strides[d];
        l
    };
    let l = x.layout();
    let v = match k.rem_euclid(4) {
        1 => flip(l, b).transpose(a as i64, b as i64)?,
        2 => flip(&flip(l, a), b),
        3 => flip(l, a).transpose(a as i64, b as i64)?,
        _ => l.clone(),
    };
    let shape = v.shape.clone();
    if x.numel() == 0 {
        return Tensor::empty(op.rt(), &shape, x.dtype());
    }
    copy_as(&op, x, v, &shape)
}

/// `x.repeat(repeats)`.
#[aten("aten::repeat", dtypes = DType::ALL_TPU, shard = REP, call = Repeat(self_, &repeats))]
fn repeat(x: &Tensor, repeats: &[i64]) -> Result<Tensor> {
    let op = OpScope::new(Repeat::NAME, &[x])?;
    if repeats.len() < x.dim() {
        return Err(TpuError::BadArgs(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor".into(),
        ));
    }
    if repeats.iter().any(|r| *r < 0) {
        return Err(TpuError::BadArgs(format!(
            "Trying to create tensor with negative dimension: {repeats:?}"
        )));
    }
    let lead = repeats.len() - x.dim();
    let l = x.layout();
    let (mut shape, mut strides, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for (i, r) in repeats.iter().enumerate() {
        let (s, st) = if i < lead {
            (1, 0)
        } else {
            (l.shape[i - lead], l.strides[i - lead])
        };
        shape.extend([*r as usize, s]);
        strides.extend([0, st]);
        out.push(*r as usize * s);
    }
    if out.iter().product::<usize>() == 0 {
        return Tensor::empty(op.rt(), &out, x.dtype());
    }
    copy_as(
        &op,
        x,
        Layout {
            shape,
            strides,
            offset: l.offset,
        },
        &out,
    )
}

/// `repeat_interleave(x, repeats: int, dim)`.
#[aten(
    "aten::repeat_interleave.self_int",
    dtypes = DType::ALL_TPU,
    shard = REP,
    call = RepeatInterleaveSelfInt(self_, repeats, dim)
)]
fn repeat_interleave_int(x: &Tensor, repeats: i64, dim: Option<i64>) -> Result<Tensor> {
    let op = OpScope::new(RepeatInterleaveSelfInt::NAME, &[x])?;
    if repeats < 0 {
        return Err(TpuError::BadArgs("repeats can not be negative".into()));
    }
    let (x, d) = match dim {
        None => (reshaped(&prims::dense(&op, x)?, &[x.numel()]), 0),
        Some(d) => (x.clone(), wrap_dim(d, x.dim())?),
    };
    if x.dim() == 0 {
        let e = x.with_layout(x.layout().unsqueeze(0)?);
        return repeat_interleave_int(&e, repeats, Some(0));
    }
    let l = x.layout();
    let mut shape = l.shape.clone();
    let mut strides = l.strides.clone();
    shape.insert(d + 1, repeats as usize);
    strides.insert(d + 1, 0);
    let mut out = l.shape.clone();
    out[d] *= repeats as usize;
    if out.iter().product::<usize>() == 0 {
        return Tensor::empty(op.rt(), &out, x.dtype());
    }
    copy_as(
        &op,
        &x,
        Layout {
            shape,
            strides,
            offset: l.offset,
        },
        &out,
    )
}

/// `repeat_interleave(repeats)`: `i` repeated `repeats[i]` times, int64 (the total is read to
/// the host unless `output_size` gives it).
fn repeat_index(op: &OpScope, repeats: &Tensor, output_size: Option<i64>) -> Result<Tensor> {
    if repeats.dim() > 1 || !repeats.dtype().is_int() {
        return Err(TpuError::BadArgs(
            "repeat_interleave only accept 1D vector as repeat".into(),
        ));
    }
    let n = repeats.numel();
    let r = reshaped(&prims::dense(op, repeats)?, &[n]);
    let negative = || TpuError::BadArgs("repeats can not be negative".into());
    let check = check_values(
        op,
        &r,
        |p, v| {
            let zero = p.constant(Scalar::Int(0), DType::I32);
            p.cmp(CmpKind::Ge, v, zero, DType::I32)
        },
        move |_| negative(),
    )?;
    let incl = prims::scan(op, &r, RedKind::Sum, DType::I32, false)?;
    // The running counts fail with a negative repeat: reading the total raises it.
    check.guards(op.rt(), &[&incl]);
    let total = match output_size {
        Some(s) => s as usize,
        None if n == 0 => 0,
        None => {
            let t = prims::host_int(&incl.with_layout(incl.layout().select(0, n as i64 - 1)?))?;
            usize::try_from(t).map_err(|_| negative())?
        }
    };
    if total == 0 || n == 0 {
        return Tensor::empty(op.rt(), &[total], DType::I64);
    }
    // out[k] = #{i : incl[i] <= k}.
    let cv = incl.with_layout(Layout {
        shape: vec![total, n],
        strides: vec![0, 1],
        offset: 0,
    });
    let ks = prims::iota(op, total)?;
    Ok(tile(
        op,
        &[total, n],
        1,
        &[(&cv, false), (&ks, true)],
        &[(DType::I64, true)],
        |p, v| {
            let le = p.cmp(CmpKind::Le, v[0], v[1], DType::I32);
            let c = p.cast(le, DType::I32);
            vec![p.reduce(RedKind::Sum, c, DType::I32)]
        },
    )?
    .remove(0))
}

/// `torch.block_diag(tensors)`.
#[aten("aten::block_diag", dtypes = DType::ALL_TPU, shard = REP, call = BlockDiag(&tensors))]
fn block_diag(ts: &[Tensor]) -> Result<Tensor> {
    let refs: Vec<&Tensor> = ts.iter().collect();
    let rt = ts.first().map(|t| t.runtime().clone());
    let op = match rt {
        Some(_) => OpScope::new(BlockDiag::NAME, &refs)?,
        None => {
            return Err(TpuError::BadArgs(
                "block_diag: expected a non-empty list of tensors".into(),
            ));
        }
    };
    let mut dt = ts[0].dtype();
    let mut blocks = Vec::new();
    for (i, t) in ts.iter().enumerate() {
        dt = promote_types(dt, t.dtype());
        let (r, c) = match t.dim() {
            0 => (1, 1),
            1 => (1, t.shape()[0]),
            2 => (t.shape()[0], t.shape()[1]),
            n => {
                return Err(TpuError::BadArgs(format!(
                    "torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has {n} dimensions"
                )));
            }
        };
        blocks.push((r, c));
    }
    let (rows, cols) = blocks.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let out = fill(&op, &[rows, cols], Scalar::Int(0), dt)?;
    let (mut r0, mut c0) = (0i64, 0i64);
    for (t, (r, c)) in ts.iter().zip(blocks) {
        let dst = out.with_layout(
            out.layout()
                .slice(0, Some(r0), Some(r0 + r as i64), 1)?
                .slice(1, Some(c0), Some(c0 + c as i64), 1)?,
        );
        if r * c > 0 {
            let src = t.with_layout(
                t.layout()
                    .view_as(&[r, c])
                    .unwrap_or_else(|| Layout::contiguous(&[r, c])),
            );
            let src = if t.layout().view_as(&[r, c]).is_some() {
                src
            } else {
                reshaped(&prims::dense(&op, t)?, &[r, c])
            };
            write_into(&op, &dst, &[&src], |_, v| v[0])?;
        }
        r0 += r as i64;
        c0 += c as i64;
    }
    Ok(out)
}

/// `torch.diag_embed(x, offset, dim1, dim2)`.
#[aten("aten::diag_embed", dtypes = DType::ALL_TPU, shard = REP, call = DiagEmbed(self_, offset, dim1, dim2))]
fn diag_embed(x: &Tensor, offset: i64, dim1: i64, dim2: i64) -> Result<Tensor> {
    let op = OpScope::new(DiagEmbed::NAME, &[x])?;
    let nd = x.dim() + 1;
    let (a, b) = (wrap_dim(dim1, nd)?, wrap_dim(dim2, nd)?);
    if a == b {
        return Err(TpuError::BadArgs(format!(
            "diagonal dimensions cannot be identical {dim1}, {dim2}"
        )));
    }
    let n = *x.shape().last().unwrap_or(&1) + offset.unsigned_abs() as usize;
    let mut shape: Vec<usize> = x.shape()[..x.dim().saturating_sub(1)].to_vec();
    let (lo, hi) = (a.min(b), a.max(b));
    shape.insert(lo, n);
    shape.insert(hi, n);
    let out = fill(&op, &shape, Scalar::Int(0), x.dtype())?;
    let dst = out.with_layout(diagonal_layout(out.layout(), offset, a as i64, b as i64)?);
    if dst.numel() > 0 {
        write_into(&op, &dst, &[x], |_, v| v[0])?;
    }
    Ok(out)
}

/// `_chunk_cat(tensors, dim, num_chunks)`: each tensor split into `num_chunks` equal chunks
/// along `dim` (zero-padded), the chunks of all tensors joined: `[pre..., num_chunks, *]`.
#[aten("aten::_chunk_cat", dtypes = DType::ALL_TPU, shard = REP, call = ChunkCat(&tensors, dim, num_chunks))]
fn chunk_cat(ts: &[Tensor], dim: i64, chunks: i64) -> Result<Tensor> {
    let refs: Vec<&Tensor> = ts.iter().collect();
    if ts.is_empty() || chunks < 1 {
        return Err(TpuError::BadArgs(
            "_chunk_cat expects a non-empty input tensor list and a positive num_chunks".into(),
        ));
    }
    let op = OpScope::new(ChunkCat::NAME, &refs)?;
    let d = wrap_dim(dim, ts[0].dim())?;
    let pre: Vec<usize> = ts[0].shape()[..d].to_vec();
    let k = chunks as usize;
    let dt = ts
        .iter()
        .map(Tensor::dtype)
        .reduce(promote_types)
        .unwrap_or(DType::F32);
    let mut widths = Vec::new();
    for t in ts {
        if t.dim() <= d || t.shape()[..d] != pre[..] {
            return Err(TpuError::ShapeMismatch(
                "_chunk_cat expects same sizes of 0,...,dim-1 dimensions for all tensors".into(),
            ));
        }
        let cs = t.shape()[d].div_ceil(k);
        let post: usize = t.shape()[d + 1..].iter().product();
        widths.push((cs, post));
    }
    let total: usize = widths.iter().map(|(cs, post)| cs * post).sum();
    let mut shape = pre.clone();
    shape.extend([k, total]);
    let out = fill(&op, &shape, Scalar::Int(0), dt)?;
    let np = pre.len();
    let mut at = 0i64;
    for (t, (cs, post)) in ts.iter().zip(widths) {
        let size = t.shape()[d];
        let w = (cs * post) as i64;
        if size * post > 0 {
            // The region [pre..., k, cs, post] of this tensor's columns.
            let region = out
                .layout()
                .slice(np as i64 + 1, Some(at), Some(at + w), 1)?;
            let tv = t.with_layout(
                t.layout()
                    .view_as(&[pre.clone(), vec![size, post]].concat())
                    .unwrap_or_else(|| t.layout().clone()),
            );
            let tv = if tv.dim() == np + 2 {
                tv
            } else {
                reshaped(
                    &prims::dense(&op, t)?,
                    &[pre.clone(), vec![size, post]].concat(),
                )
            };
            for c in 0..k {
                let lo = (c * cs).min(size);
                let hi = ((c + 1) * cs).min(size);
                if hi <= lo {
                    continue;
                }
                let rows = hi - lo;
                let dst = out.with_layout(region.select(np as i64, c as i64)?);
                let dst = dst.with_layout(dst.layout().slice(
                    np as i64,
                    Some(0),
                    Some((rows * post) as i64),
                    1,
                )?);
                let dl = dst.layout();
                let mut dshape = dl.shape[..np].to_vec();
                dshape.extend([rows, post]);
                let mut dstr = dl.strides[..np].to_vec();
                dstr.extend([post as isize, 1]);
                let dst = dst.with_layout(Layout {
                    shape: dshape,
                    strides: dstr,
                    offset: dl.offset,
                });
                let src = tv.with_layout(tv.layout().slice(
                    np as i64,
                    Some(lo as i64),
                    Some(hi as i64),
                    1,
                )?);
                write_into(&op, &dst, &[&src], |_, v| v[0])?;
            }
        }
        at += w;
    }
    Ok(out)
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

const REP: Sharding = Sharding::Replicate("a rearrangement without a sharding rule");

#[aten("aten::repeat_interleave.Tensor", dtypes = &[DType::I32, DType::I64], shard = REP)]
fn repeat_interleave_tensor_op(a: RepeatInterleaveTensor<'_>) -> Result<Tensor> {
    let op = OpScope::new(RepeatInterleaveTensor::NAME, &[a.repeats])?;
    repeat_index(&op, a.repeats, a.output_size)
}

#[aten(
    "aten::repeat_interleave.self_Tensor",
    dtypes = DType::ALL_TPU,
    shard = REP,
    kind = Decomposition
)]
fn repeat_interleave_self_tensor_op(a: RepeatInterleaveSelfTensor<'_>) -> Result<Tensor> {
    let (x, r) = (a.self_, a.repeats);
    let op = OpScope::new(RepeatInterleaveSelfTensor::NAME, &[x, r])?;
    let (x, d) = match a.dim {
        None => (reshaped(&prims::dense(&op, x)?, &[x.numel()]), 0),
        Some(d) => (x.clone(), d),
    };
    let n = if x.dim() == 0 {
        1
    } else {
        x.shape()[wrap_dim(d, x.dim())?]
    };
    let r = if r.numel() == 1 && n != 1 {
        let rv = r.with_layout(Layout {
            shape: vec![n],
            strides: vec![0],
            offset: r.layout().offset,
        });
        map_contiguous(&op, &[&rv], &[r.dtype()], |_, v| vec![v[0]])?.remove(0)
    } else {
        r.clone()
    };
    let idx = repeat_index(&op, &r, a.output_size)?;
    crate::ops::data::index_select(&x, d, &idx)
}

#[aten("aten::pixel_shuffle", dtypes = DType::ALL_TPU, shard = REP)]
fn pixel_shuffle_op(a: PixelShuffle<'_>) -> Result<Tensor> {
    pixel(a.self_, a.upscale_factor, true)
}

#[aten("aten::pixel_unshuffle", dtypes = DType::ALL_TPU, shard = REP)]
fn pixel_unshuffle_op(a: PixelUnshuffle<'_>) -> Result<Tensor> {
    pixel(a.self_, a.downscale_factor, false)
}

#[aten("aten::channel_shuffle", dtypes = DType::ALL_TPU, shard = REP)]
fn channel_shuffle_op(a: ChannelShuffle<'_>) -> Result<Tensor> {
    channel_shuffle(ChannelShuffle::NAME, a.self_, a.groups)
}

#[aten("aten::native_channel_shuffle", dtypes = DType::ALL_TPU, shard = REP)]
fn native_channel_shuffle_op(a: NativeChannelShuffle<'_>) -> Result<Tensor> {
    channel_shuffle(NativeChannelShuffle::NAME, a.self_, a.groups)
}

#[aten("aten::im2col", dtypes = DType::ALL_TPU, shard = REP)]
fn im2col_op(a: Im2col<'_>) -> Result<Tensor> {
    im2col(a.self_, &a.kernel_size, &a.dilation, &a.padding, &a.stride)
}

#[aten("aten::col2im", dtypes = DType::ALL_TPU, shard = REP)]
fn col2im_op(a: Col2im<'_>) -> Result<Tensor> {
    col2im(
        a.self_,
        &a.output_size,
        &a.kernel_size,
        &a.dilation,
        &a.padding,
        &a.stride,
    )
}
