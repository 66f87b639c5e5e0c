//! Rearrangements over windows and channel groups: `pixel_shuffle` / `pixel_unshuffle`,
//! `channel_shuffle`, and `im2col` / `col2im` (the shuffles read permuted splits of the input,
//! `im2col` reads the padded input through overlapping windows, `col2im` adds every patch
//! element at its image position with one index-add kernel). Registered in
//! [`super::rearrange`].

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, Combine};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_contiguous, map_shape};
use crate::ops::prims::{self, fill, put_rows, reshaped};
use crate::tensor::Tensor;

/// A contiguous copy of the view `l` of `x`, seen as `shape`.
pub(super) fn copy_as(op: &OpScope, x: &Tensor, l: Layout, shape: &[usize]) -> Result<Tensor> {
    let v = x.with_layout(l);
    let c = map_contiguous(op, &[&v], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
    Ok(reshaped(&c, shape))
}

/// `pixel_shuffle` (`up`) / `pixel_unshuffle`.
pub(super) fn pixel(x: &Tensor, r: i64, up: bool) -> Result<Tensor> {
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
        return Tensor::empty(op.rt(), &shape, x.dtype());
    }
    copy_as(&op, &xs, l, &shape)
}

/// `channel_shuffle(x, groups)`.
pub(super) fn channel_shuffle(name: &str, x: &Tensor, g: i64) -> Result<Tensor> {
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
        return Tensor::empty(op.rt(), x.shape(), x.dtype());
    }
    copy_as(&op, &xs, l, x.shape())
}

/// Output size of a sliding window.
pub(crate) fn out_size(n: usize, k: i64, d: i64, p: i64, s: i64) -> i64 {
    (n as i64 + 2 * p - d * (k - 1) - 1) / s + 1
}

/// `im2col(x, kernel_size, dilation, padding, stride)`: `[N, C*kh*kw, L]` (or unbatched).
pub(super) fn im2col(x: &Tensor, k: &[i64], d: &[i64], p: &[i64], s: &[i64]) -> Result<Tensor> {
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
pub(super) fn col2im(
    x: &Tensor,
    size: &[i64],
    k: &[i64],
    d: &[i64],
    p: &[i64],
    s: &[i64],
) -> Result<Tensor> {
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
        let src = map_contiguous(
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
    let out = map_contiguous(&op, &[&crop], &[dt], |_, r| vec![r[0]])?.remove(0);
    Ok(if batched {
        out
    } else {
        reshaped(&out, &[c, h, w])
    })
}
