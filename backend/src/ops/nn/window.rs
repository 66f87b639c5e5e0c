//! Sliding windows over the trailing (spatial) dims of a tensor, the shared machinery of
//! convolution, pooling, `im2col` and `col2im`.
//!
//! A window geometry ([`Window`]) gives per spatial dim the kernel size, stride, padding before,
//! dilation, input size and output size. [`padded`] writes the input into a buffer padded with
//! a constant, [`windows`] sees that buffer as `[lead..., out..., k...]` with strides (no copy:
//! element `(o, k)` is at `o·stride + k·dilation`), and [`col2im`] adds columns
//! `[lead..., k..., out...]` back into their positions: one tile kernel per kernel offset, each
//! adding a strided view of the columns into a strided view of an f32 buffer.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::BinOp;
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape, write_into};
use crate::tensor::Tensor;

/// A window over the spatial dims.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Window {
    /// Kernel size.
    pub k: Vec<usize>,
    /// Stride.
    pub stride: Vec<usize>,
    /// Padding before (and, unless the output needs more or less, after).
    pub pad: Vec<usize>,
    /// Dilation.
    pub dil: Vec<usize>,
    /// Input size.
    pub input: Vec<usize>,
    /// Output size.
    pub out: Vec<usize>,
}

/// `v` as one value per spatial dim: a single value repeats, an empty list takes `default`.
pub(crate) fn per_dim(
    name: &str,
    what: &str,
    v: &[i64],
    n: usize,
    default: i64,
) -> Result<Vec<i64>> {
    match v.len() {
        0 => Ok(vec![default; n]),
        1 => Ok(vec![v[0]; n]),
        l if l == n => Ok(v.to_vec()),
        l => Err(TpuError::BadArgs(format!(
            "{name}: expected {what} to be a single integer value or a list of {n} values to match the convolution dimensions, but got {what}={v:?} ({l} values)"
        ))),
    }
}

impl Window {
    /// Output size `floor((in + 2p - d(k-1) - 1) / s) + 1` (or `ceil` in `ceil_mode`, where the
    /// last window must start inside the input or its left padding).
    pub fn new(
        input: &[usize],
        k: &[usize],
        stride: &[usize],
        pad: &[usize],
        dil: &[usize],
        ceil_mode: bool,
    ) -> Option<Window> {
        let mut out = Vec::with_capacity(input.len());
        for i in 0..input.len() {
            let span = dil[i] * (k[i].max(1) - 1) + 1;
            let total = input[i] + 2 * pad[i];
            if total < span || stride[i] == 0 {
                return None;
            }
            let num = total - span;
            let mut o = if ceil_mode {
                num.div_ceil(stride[i]) + 1
            } else {
                num / stride[i] + 1
            };
            if ceil_mode && (o - 1) * stride[i] >= input[i] + pad[i] {
                o -= 1;
            }
            out.push(o);
        }
        Some(Window {
            k: k.to_vec(),
            stride: stride.to_vec(),
            pad: pad.to_vec(),
            dil: dil.to_vec(),
            input: input.to_vec(),
            out,
        })
    }

    /// Number of spatial dims.
    pub fn dims(&self) -> usize {
        self.k.len()
    }

    /// The extent each window position reaches: `(out-1)·s + d(k-1) + 1`.
    pub fn reach(&self) -> Vec<usize> {
        (0..self.dims())
            .map(|i| {
                if self.out[i] == 0 {
                    0
                } else {
                    (self.out[i] - 1) * self.stride[i] + self.dil[i] * (self.k[i] - 1) + 1
                }
            })
            .collect()
    }

    /// The padded buffer's size: the input with its padding before, extended to the reach.
    pub fn buffer(&self) -> Vec<usize> {
        let r = self.reach();
        (0..self.dims())
            .map(|i| (self.pad[i] + self.input[i]).max(r[i]))
            .collect()
    }

    /// Elements per window.
    pub fn k_numel(&self) -> usize {
        self.k.iter().product()
    }

    /// Output positions.
    pub fn out_numel(&self) -> usize {
        self.out.iter().product()
    }
}

/// `x` (`[lead..., input...]`) written into a fresh buffer `[lead..., buffer...]` filled with
/// `value`, at offset `pad` along each spatial dim; `x` itself when no padding is needed.
pub(crate) fn padded(op: &OpScope, x: &Tensor, w: &Window, value: Scalar) -> Result<Tensor> {
    let buf = w.buffer();
    if buf == w.input {
        return Ok(x.clone());
    }
    let lead = x.dim() - w.dims();
    let mut shape = x.shape()[..lead].to_vec();
    shape.extend_from_slice(&buf);
    let d = x.dtype();
    let out = map_shape(op, &shape, &[], &[d], |p, _| vec![p.constant(value, d)])?.remove(0);
    if x.numel() > 0 {
        let mut dst = out.layout().clone();
        for i in 0..w.dims() {
            let (s, n) = (w.pad[i] as i64, w.input[i] as i64);
            dst = dst.slice((lead + i) as i64, Some(s), Some(s + n), 1)?;
        }
        write_into(op, &out.with_layout(dst), &[x], |_, r| r[0])?;
    }
    Ok(out)
}

/// The windows of a padded buffer `xp` (`[lead..., buffer...]`) as a view
/// `[lead..., out..., k...]`.
pub(crate) fn windows(xp: &Tensor, w: &Window) -> Tensor {
    let l = xp.layout();
    let lead = l.ndim() - w.dims();
    let mut shape = l.shape[..lead].to_vec();
    let mut strides = l.strides[..lead].to_vec();
    for i in 0..w.dims() {
        shape.push(w.out[i]);
        strides.push(l.strides[lead + i] * w.stride[i] as isize);
    }
    for i in 0..w.dims() {
        shape.push(w.k[i]);
        strides.push(l.strides[lead + i] * w.dil[i] as isize);
    }
    xp.with_layout(Layout {
        shape,
        strides,
        offset: l.offset,
    })
}

/// `x` seen through `layout`, copied to a contiguous tensor of that shape.
pub(crate) fn materialize(op: &OpScope, x: &Tensor, dtype: DType) -> Result<Tensor> {
    Ok(map_shape(op, x.shape(), &[x], &[dtype], |_, r| vec![r[0]])?.remove(0))
}

/// The columns of `x` (`[lead..., input...]`, padded with zeros): a contiguous
/// `[lead..., k..., out...]` tensor (`im2col`'s order).
pub(crate) fn im2col(op: &OpScope, x: &Tensor, w: &Window) -> Result<Tensor> {
    let xp = padded(op, x, w, Scalar::Int(0))?;
    let v = windows(&xp, w);
    let lead = x.dim() - w.dims();
    let n = w.dims();
    let perm: Vec<i64> = (0..lead)
        .chain((0..n).map(|i| lead + n + i))
        .chain((0..n).map(|i| lead + i))
        .map(|d| d as i64)
        .collect();
    let v = v.with_layout(v.layout().permute(&perm)?);
    materialize(op, &v, x.dtype())
}

/// Adds the columns `cols` (`[lead..., k..., out...]`, any layout) into an f32 buffer of
/// `w.buffer()`'s size at their window positions (`o·s + k·d`), and returns the f32 region
/// `[pad, pad + input)` of it, seen as `[lead..., input...]`.
pub(crate) fn col2im(op: &OpScope, cols: &Tensor, w: &Window) -> Result<Tensor> {
    let n = w.dims();
    let lead = cols.dim() - 2 * n;
    let mut shape = cols.shape()[..lead].to_vec();
    let buf = w.buffer();
    shape.extend_from_slice(&buf);
    let acc = map_shape(op, &shape, &[], &[DType::F32], |p, _| {
        vec![p.constant(Scalar::Float(0.0), DType::F32)]
    })?
    .remove(0);
    if cols.numel() > 0 {
        let bl = acc.layout().clone();
        let kshape = &w.k;
        for kidx in crate::ops::nn::window::positions(kshape) {
            // Destination: `[lead..., out...]` at offset Σ k·d·stride.
            let mut dshape = bl.shape[..lead].to_vec();
            let mut dstr = bl.strides[..lead].to_vec();
            let mut off = bl.offset as isize;
            for (i, &ki) in kidx.iter().enumerate() {
                dshape.push(w.out[i]);
                dstr.push(bl.strides[lead + i] * w.stride[i] as isize);
                off += bl.strides[lead + i] * (ki * w.dil[i]) as isize;
            }
            let dst = acc.with_layout(Layout {
                shape: dshape,
                strides: dstr,
                offset: off as usize,
            });
            let mut src = cols.layout().clone();
            for &ki in &kidx {
                // Selecting removes the dim: the next kernel dim moves to `lead`.
                src = src.select(lead as i64, ki as i64)?;
            }
            let src = cols.with_layout(src);
            write_into(op, &dst, &[&dst, &src], |p, r| {
                let a = p.cast(r[0], DType::F32);
                let b = p.cast(r[1], DType::F32);
                p.bin(BinOp::Add, a, b, DType::F32)
            })?;
        }
    }
    let mut l = acc.layout().clone();
    for i in 0..n {
        let (s, len) = (w.pad[i] as i64, w.input[i] as i64);
        l = l.slice((lead + i) as i64, Some(s), Some(s + len), 1)?;
    }
    Ok(acc.with_layout(l))
}

/// Every multi-index of `shape`, row-major.
pub(crate) fn positions(shape: &[usize]) -> Vec<Vec<usize>> {
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total);
    for mut f in 0..total {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = f % shape[d];
            f /= shape[d];
        }
        out.push(idx);
    }
    out
}
