//! Rearrangements: `roll`, `rot90`, `repeat`, `repeat_interleave` (three forms),
//! `block_diag`, `diag_embed`, `pixel_shuffle`, `pixel_unshuffle`, `channel_shuffle`,
//! `native_channel_shuffle`, `im2col`, `col2im`, `_chunk_cat`.
//!
//! Most are one copy of a strided view of the input (`repeat` and `repeat_interleave` read
//! broadcast dims, the shuffles read permuted splits, `im2col` reads the padded input through
//! overlapping windows); `roll` copies two pieces per dim; `col2im` adds every patch element at
//! its image position with one index-add kernel.

use super::{t1, views::diagonal_layout};
use crate::dtype::{DType, Scalar, promote_types};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, Combine, RedKind};
use crate::layout::{Layout, wrap_dim};
use crate::ops::helpers::{OpScope, map, map_shape, write_into};
use crate::ops::prims::{self, fill, put_rows, reshaped, tile};
use crate::ops::registry::{OpDef, OpImpl};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

/// A contiguous copy of the view `l` of `x`, seen as `shape`.
fn copy_as(op: &OpScope, x: &Tensor, l: Layout, shape: &[usize]) -> Result<Tensor> {
    let v = x.with_layout(l);
    let c = map(op, &[&v], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
    Ok(reshaped(&c, shape))
}

/// `torch.roll(x, shifts, dims)`.
fn roll(x: &Tensor, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
    let op = OpScope::new("aten::roll", &[x])?;
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
            &map(&op, &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0),
        )?;
    }
    Ok(cur)
}

fn roll_dim(op: &OpScope, x: &Tensor, shift: i64, d: usize) -> Result<Tensor> {
    let out = Tensor::empty(op.rt(), x.shape(), x.dtype());
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
fn rot90(x: &Tensor, k: i64, dims: &[i64]) -> Result<Tensor> {
    let op = OpScope::new("aten::rot90", &[x])?;
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
        return Ok(Tensor::empty(op.rt(), &shape, x.dtype()));
    }
    copy_as(&op, x, v, &shape)
}

/// `x.repeat(repeats)`.
fn repeat(x: &Tensor, repeats: &[i64]) -> Result<Tensor> {
    let op = OpScope::new("aten::repeat", &[x])?;
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
        return Ok(Tensor::empty(op.rt(), &out, x.dtype()));
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
fn repeat_interleave_int(x: &Tensor, repeats: i64, dim: Option<i64>) -> Result<Tensor> {
    let op = OpScope::new("aten::repeat_interleave.self_int", &[x])?;
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
        return Ok(Tensor::empty(op.rt(), &out, x.dtype()));
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
    let incl = prims::scan(op, &r, RedKind::Sum, DType::I32, false)?;
    let total = match output_size {
        Some(s) => s as usize,
        None if n == 0 => 0,
        None => {
            prims::host_int(&incl.with_layout(incl.layout().select(0, n as i64 - 1)?))? as usize
        }
    };
    if total == 0 || n == 0 {
        return Ok(Tensor::empty(op.rt(), &[total], DType::I64));
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
fn block_diag(ts: &[Tensor]) -> Result<Tensor> {
    let refs: Vec<&Tensor> = ts.iter().collect();
    let rt = ts.first().map(|t| t.runtime().clone());
    let op = match rt {
        Some(_) => OpScope::new("aten::block_diag", &refs)?,
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
fn diag_embed(x: &Tensor, offset: i64, dim1: i64, dim2: i64) -> Result<Tensor> {
    let op = OpScope::new("aten::diag_embed", &[x])?;
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

/// `pixel_shuffle` (`up`) / `pixel_unshuffle`.
fn pixel(x: &Tensor, r: i64, up: bool) -> Result<Tensor> {
    let name = if up {
        "aten::pixel_shuffle"
    } else {
        "aten::pixel_unshuffle"
    };
    let op = OpScope::new(name, &[x])?;
    let nd = x.dim();
    if nd < 3 || r <= 0 {
        return Err(TpuError::BadArgs(format!(
            "{}: expected an input of at least 3 dims and a positive factor, got {:?} and {r}",
            name.trim_start_matches("aten::"),
            x.shape()
        )));
    }
    let r = r as usize;
    let (c, h, w) = (x.shape()[nd - 3], x.shape()[nd - 2], x.shape()[nd - 1]);
    let lead: Vec<usize> = x.shape()[..nd - 3].to_vec();
    let m = lead.len() as i64;
    let (split, perm, out): (Vec<usize>, Vec<i64>, Vec<usize>) = if up {
        if c % (r * r) != 0 {
            return Err(TpuError::BadArgs(format!(
                "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, but input.size(-3)={c} is not divisible by {}",
                r * r
            )));
        }
        let oc = c / (r * r);
        (
            vec![oc, r, r, h, w],
            vec![0, 3, 1, 4, 2],
            vec![oc, h * r, w * r],
        )
    } else {
        if h % r != 0 || w % r != 0 {
            return Err(TpuError::BadArgs(format!(
                "pixel_unshuffle expects height and width to be divisible by downscale_factor, got {h}x{w} and {r}"
            )));
        }
        (
            vec![c, h / r, r, w / r, r],
            vec![0, 2, 4, 1, 3],
            vec![c * r * r, h / r, w / r],
        )
    };
    let xs = reshaped(&prims::dense(&op, x)?, &[lead.clone(), split].concat());
    let full_perm: Vec<i64> = (0..m).chain(perm.iter().map(|p| p + m)).collect();
    let l = xs.layout().permute(&full_perm)?;
    let shape = [lead, out].concat();
    if x.numel() == 0 {
        return Ok(Tensor::empty(op.rt(), &shape, x.dtype()));
    }
    copy_as(&op, &xs, l, &shape)
}

/// `channel_shuffle(x, groups)`.
fn channel_shuffle(name: &str, x: &Tensor, g: i64) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    if x.dim() < 3 || g <= 0 || !x.shape()[1].is_multiple_of(g as usize) {
        return Err(TpuError::BadArgs(format!(
            "channel_shuffle expects groups to divide the number of channels, got input {:?} and groups {g}",
            x.shape()
        )));
    }
    let g = g as usize;
    let c = x.shape()[1];
    let mut split = vec![x.shape()[0], g, c / g];
    split.extend(&x.shape()[2..]);
    let xs = reshaped(&prims::dense(&op, x)?, &split);
    let l = xs.layout().transpose(1, 2)?;
    if x.numel() == 0 {
        return Ok(Tensor::empty(op.rt(), x.shape(), x.dtype()));
    }
    copy_as(&op, &xs, l, x.shape())
}

/// Output size of a sliding window.
pub(crate) fn out_size(n: usize, k: i64, d: i64, p: i64, s: i64) -> i64 {
    (n as i64 + 2 * p - d * (k - 1) - 1) / s + 1
}

/// `im2col(x, kernel_size, dilation, padding, stride)`: `[N, C*kh*kw, L]` (or unbatched).
fn im2col(x: &Tensor, k: &[i64], d: &[i64], p: &[i64], s: &[i64]) -> Result<Tensor> {
    let op = OpScope::new("aten::im2col", &[x])?;
    let batched = x.dim() == 4;
    if !(x.dim() == 3 || batched) || [k, d, p, s].iter().any(|v| v.len() != 2) {
        return Err(TpuError::BadArgs(format!(
            "im2col: expected a 3D or 4D input and 2 values per parameter, got {:?}",
            x.shape()
        )));
    }
    let xb = if batched {
        x.clone()
    } else {
        x.with_layout(x.layout().unsqueeze(0)?)
    };
    let (n, c, h, w) = (xb.shape()[0], xb.shape()[1], xb.shape()[2], xb.shape()[3]);
    let (oh, ow) = (
        out_size(h, k[0], d[0], p[0], s[0]),
        out_size(w, k[1], d[1], p[1], s[1]),
    );
    if oh <= 0 || ow <= 0 || k.iter().chain(d).chain(s).any(|v| *v <= 0) || p.iter().any(|v| *v < 0)
    {
        return Err(TpuError::BadArgs(format!(
            "im2col: the parameters give an empty output ({oh}x{ow}) for input {:?}",
            x.shape()
        )));
    }
    let padded = crate::ops::data::constant_pad_nd(&xb, &[p[1], p[1], p[0], p[0]], Scalar::Int(0))?;
    let pl = padded.layout();
    let l = Layout {
        shape: vec![n, c, k[0] as usize, k[1] as usize, oh as usize, ow as usize],
        strides: vec![
            pl.strides[0],
            pl.strides[1],
            pl.strides[2] * d[0] as isize,
            pl.strides[3] * d[1] as isize,
            pl.strides[2] * s[0] as isize,
            pl.strides[3] * s[1] as isize,
        ],
        offset: pl.offset,
    };
    let cols = vec![n, c * (k[0] * k[1]) as usize, (oh * ow) as usize];
    let out = copy_as(&op, &padded, l, &cols)?;
    Ok(if batched {
        out
    } else {
        reshaped(&out, &cols[1..])
    })
}

/// `col2im(x, output_size, kernel_size, dilation, padding, stride)`: the patches summed into
/// the image.
fn col2im(x: &Tensor, size: &[i64], k: &[i64], d: &[i64], p: &[i64], s: &[i64]) -> Result<Tensor> {
    let op = OpScope::new("aten::col2im", &[x])?;
    let batched = x.dim() == 3;
    if !(x.dim() == 2 || batched) || [size, k, d, p, s].iter().any(|v| v.len() != 2) {
        return Err(TpuError::BadArgs(format!(
            "col2im: expected a 2D or 3D input and 2 values per parameter, got {:?}",
            x.shape()
        )));
    }
    let xb = if batched {
        x.clone()
    } else {
        x.with_layout(x.layout().unsqueeze(0)?)
    };
    let (n, ckk, l) = (xb.shape()[0], xb.shape()[1], xb.shape()[2]);
    let kk = (k[0] * k[1]) as usize;
    if kk == 0 || ckk % kk != 0 {
        return Err(TpuError::BadArgs(format!(
            "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got input.size(1)={ckk} and kernel_size={k:?}"
        )));
    }
    let c = ckk / kk;
    let (h, w) = (size[0] as usize, size[1] as usize);
    let (oh, ow) = (
        out_size(h, k[0], d[0], p[0], s[0]),
        out_size(w, k[1], d[1], p[1], s[1]),
    );
    if oh * ow != l as i64 {
        return Err(TpuError::BadArgs(format!(
            "Given output_size={size:?}, kernel_size={k:?}, dilation={d:?}, padding={p:?}, stride={s:?}, expected size of input's dimension 2 to match the calculated number of sliding blocks {oh} * {ow} = {}, but got input.size(2)={l}.",
            oh * ow
        )));
    }
    let (hp, wp) = (h + 2 * p[0] as usize, w + 2 * p[1] as usize);
    let dt = x.dtype();
    let acc = if dt.is_float() { DType::F32 } else { dt };
    let img = fill(&op, &[n, c, hp, wp], Scalar::Int(0), acc)?;
    let shape6 = [n, c, k[0] as usize, k[1] as usize, oh as usize, ow as usize];
    let total: usize = shape6.iter().product();
    if total > 0 {
        prims::fits_i32(img.numel())?;
        let flat = map_shape(&op, &shape6, &[], &[DType::I32], |pb, _| {
            let i = DType::I32;
            let term = |pb: &mut crate::ir::ProgBuilder, a: u32, ka: i64, b: u32, kb: i64| {
                let x = pb.index(a);
                let kx = pb.constant(Scalar::Int(ka), i);
                let y = pb.index(b);
                let ky = pb.constant(Scalar::Int(kb), i);
                let u = pb.bin(BinOp::Mul, x, kx, i);
                let v = pb.bin(BinOp::Mul, y, ky, i);
                pb.bin(BinOp::Add, u, v, i)
            };
            let row = term(pb, 2, d[0], 4, s[0]);
            let col = term(pb, 3, d[1], 5, s[1]);
            let plane = term(pb, 0, (c * hp * wp) as i64, 1, (hp * wp) as i64);
            let wk = pb.constant(Scalar::Int(wp as i64), i);
            let r = pb.bin(BinOp::Mul, row, wk, i);
            let f = pb.bin(BinOp::Add, plane, r, i);
            vec![pb.bin(BinOp::Add, f, col, i)]
        })?
        .remove(0);
        let src = map(
            &op,
            &[&reshaped(&prims::dense(&op, &xb)?, &shape6)],
            &[acc],
            |_, r| vec![r[0]],
        )?
        .remove(0);
        put_rows(
            &op,
            &reshaped(&img, &[img.numel(), 1]),
            &reshaped(&flat, &[total]),
            &reshaped(&src, &[total, 1]),
            Combine::Add,
            true,
        )?;
    }
    let crop = img.with_layout(
        img.layout()
            .slice(2, Some(p[0]), Some(p[0] + h as i64), 1)?
            .slice(3, Some(p[1]), Some(p[1] + w as i64), 1)?,
    );
    let out = map(&op, &[&crop], &[dt], |_, r| vec![r[0]])?.remove(0);
    Ok(if batched {
        out
    } else {
        reshaped(&out, &[c, h, w])
    })
}

/// `_chunk_cat(tensors, dim, num_chunks)`: each tensor split into `num_chunks` equal chunks
/// along `dim` (zero-padded), the chunks of all tensors joined: `[pre..., num_chunks, *]`.
fn chunk_cat(ts: &[Tensor], dim: i64, chunks: i64) -> Result<Tensor> {
    let refs: Vec<&Tensor> = ts.iter().collect();
    if ts.is_empty() || chunks < 1 {
        return Err(TpuError::BadArgs(
            "_chunk_cat expects a non-empty input tensor list and a positive num_chunks".into(),
        ));
    }
    let op = OpScope::new("aten::_chunk_cat", &refs)?;
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

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let all = crate::ops::data::ALL;
    let k = OpImpl::Kernel;
    let rep = Sharding::Replicate("a rearrangement without a sharding rule");
    vec![
        OpDef::new("aten::roll", k, all, |_, a| {
            t1(roll(a.tensor(0)?, &a.ints(1)?, &a.ints(2)?))
        })
        .shard(rep),
        OpDef::new("aten::rot90", k, all, |_, a| {
            t1(rot90(a.tensor(0)?, a.int(1)?, &a.ints(2)?))
        })
        .shard(rep),
        OpDef::new("aten::repeat", k, all, |_, a| {
            t1(repeat(a.tensor(0)?, &a.ints(1)?))
        })
        .shard(rep),
        OpDef::new("aten::repeat_interleave.self_int", k, all, |_, a| {
            t1(repeat_interleave_int(
                a.tensor(0)?,
                a.int(1)?,
                a.opt_int(2)?,
            ))
        })
        .shard(rep),
        OpDef::new(
            "aten::repeat_interleave.Tensor",
            k,
            &[DType::I32, DType::I64],
            |_, a| {
                let r = a.tensor(0)?;
                let op = OpScope::new("aten::repeat_interleave.Tensor", &[r])?;
                t1(repeat_index(&op, r, a.opt_int(1)?))
            },
        )
        .shard(rep),
        OpDef::new(
            "aten::repeat_interleave.self_Tensor",
            OpImpl::Decomposition,
            all,
            |_, a| {
                let (x, r) = (a.tensor(0)?, a.tensor(1)?);
                let op = OpScope::new("aten::repeat_interleave.self_Tensor", &[x, r])?;
                let (x, d) = match a.opt_int(2)? {
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
                    map(&op, &[&rv], &[r.dtype()], |_, v| vec![v[0]])?.remove(0)
                } else {
                    r.clone()
                };
                let idx = repeat_index(&op, &r, a.opt_int(3)?)?;
                t1(crate::ops::data::index_select(&x, d, &idx))
            },
        )
        .shard(rep),
        OpDef::new("aten::block_diag", k, all, |_, a| {
            t1(block_diag(&a.tensors(0)?))
        })
        .shard(rep),
        OpDef::new("aten::diag_embed", k, all, |_, a| {
            t1(diag_embed(a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?))
        })
        .shard(rep),
        OpDef::new("aten::pixel_shuffle", k, all, |_, a| {
            t1(pixel(a.tensor(0)?, a.int(1)?, true))
        })
        .shard(rep),
        OpDef::new("aten::pixel_unshuffle", k, all, |_, a| {
            t1(pixel(a.tensor(0)?, a.int(1)?, false))
        })
        .shard(rep),
        OpDef::new("aten::channel_shuffle", k, all, |_, a| {
            t1(channel_shuffle(
                "aten::channel_shuffle",
                a.tensor(0)?,
                a.int(1)?,
            ))
        })
        .shard(rep),
        OpDef::new("aten::native_channel_shuffle", k, all, |_, a| {
            t1(channel_shuffle(
                "aten::native_channel_shuffle",
                a.tensor(0)?,
                a.int(1)?,
            ))
        })
        .shard(rep),
        OpDef::new("aten::im2col", k, all, |_, a| {
            t1(im2col(
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
            ))
        })
        .shard(rep),
        OpDef::new("aten::col2im", k, all, |_, a| {
            t1(col2im(
                a.tensor(0)?,
                &a.ints(1)?,
                &a.ints(2)?,
                &a.ints(3)?,
                &a.ints(4)?,
                &a.ints(5)?,
            ))
        })
        .shard(rep),
        OpDef::new("aten::_chunk_cat", k, all, |_, a| {
            t1(chunk_cat(&a.tensors(0)?, a.int(1)?, a.int(2)?))
        })
        .shard(rep),
    ]
}
