//! Pooling: `max_pool{1,2,3}d_with_indices`, `avg_pool{1,2,3}d`, and `max_unpool{2,3}d`
//! (adaptive pooling is in `adaptive.rs`).
//!
//! - Fixed windows (max and average pooling) are one rows kernel over the windows of the
//!   padded input ([`windows`]: a strided view `[N, C, out..., k...]`, no copy), the row being
//!   one window. Max pooling pads with `-inf` and returns the first maximum (NaN counts as the
//!   maximum) with its index into the input plane, computed in the kernel from the window's
//!   position and the argmax. Average pooling pads with zeros and divides by PyTorch's divisor
//!   (the window clipped to the padded input, or to the input without `count_include_pad`, or
//!   `divisor_override`), computed in the kernel from the output coordinates. int64 average
//!   pooling is PyTorch's CPU integer kernel: the window's sum (the registered `sum`: beyond
//!   int32 refused on the device) divided rounding toward zero; int32 raises as the CPU does.
//! - Adaptive pooling (windows of varying start and size) is in `adaptive.rs`.
//! - `max_unpool` scatters the values into a zeroed output with the index-add kernel.

use super::F;
use super::window::{Window, padded, per_dim, windows};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, GatherNode, NodeKind, PRef, ProgBuilder, RedKind};
use crate::layout::Layout;
use crate::ops::Value;
use crate::ops::compose;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::tensor::Tensor;

pub(super) const I: DType = DType::I32;

pub(super) fn ic(p: &mut ProgBuilder, v: i64) -> PRef {
    p.constant(Scalar::Int(v), I)
}

/// The input seen batched (`[N, C, spatial...]`): an unbatched `[C, spatial...]` gets `N = 1`.
fn batched(name: &str, x: &Tensor, nd: usize) -> Result<(Tensor, bool)> {
    if x.dim() == nd + 2 {
        Ok((x.clone(), false))
    } else if x.dim() == nd + 1 {
        Ok((x.with_layout(x.layout().unsqueeze(0)?), true))
    } else {
        Err(TpuError::BadArgs(format!(
            "{name}: Expected {}D or {}D input tensor, but got {:?}",
            nd + 1,
            nd + 2,
            x.shape()
        )))
    }
}

fn unbatched(t: Tensor, was: bool) -> Result<Tensor> {
    if was {
        Ok(t.with_layout(t.layout().squeeze(0)?))
    } else {
        Ok(t)
    }
}

/// Kernel, stride (empty: the kernel), padding and dilation as a window over `x`'s spatial
/// dims, checking PyTorch's rules.
#[allow(clippy::too_many_arguments)]
fn pool_window(
    name: &str,
    x: &Tensor,
    nd: usize,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    ceil_mode: bool,
) -> Result<Window> {
    let k = per_dim(name, "kernel_size", kernel, nd, 1)?;
    let s = if stride.is_empty() {
        k.clone()
    } else {
        per_dim(name, "stride", stride, nd, 1)?
    };
    let p = per_dim(name, "padding", padding, nd, 0)?;
    let d = per_dim(name, "dilation", dilation, nd, 1)?;
    if k.iter().any(|&v| v <= 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: kernel_size must be greater than zero, but got {kernel:?}"
        )));
    }
    if s.iter().any(|&v| v <= 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: stride must be greater than zero, but got {stride:?}"
        )));
    }
    if d.iter().any(|&v| v <= 0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: dilation must be greater than zero, but got {dilation:?}"
        )));
    }
    for i in 0..nd {
        if p[i] < 0 || p[i] > k[i] / 2 {
            return Err(TpuError::BadArgs(format!(
                "{name}: pad should be at most half of effective kernel size, but got pad={}, kernel_size={} and dilation={}",
                p[i], k[i], d[i]
            )));
        }
    }
    let u = |v: &[i64]| v.iter().map(|&a| a as usize).collect::<Vec<_>>();
    let spatial = &x.shape()[x.dim() - nd..];
    Window::new(spatial, &u(&k), &u(&s), &u(&p), &u(&d), ceil_mode).ok_or_else(|| {
        TpuError::BadArgs(format!(
            "{name}: Given input size: {:?}. Calculated output size is too small",
            x.shape()
        ))
    })
}

/// The lowest value of `dt` (max pooling's padding).
pub(super) fn lowest(dt: DType) -> Scalar {
    match dt {
        DType::I32 => Scalar::Int(i32::MIN as i64),
        // int64 lanes hold 32 bits on the device: no value lies below i32::MIN.
        DType::I64 => Scalar::Int(i32::MIN as i64),
        DType::Bool => Scalar::Bool(false),
        _ => Scalar::Float(f64::NEG_INFINITY),
    }
}

/// `max_pool{nd}d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)`: the maxima
/// and their flat indices into each input plane (int64).
#[allow(clippy::too_many_arguments)]
pub fn max_pool_with_indices(
    name: &str,
    nd: usize,
    x: &Tensor,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    ceil_mode: bool,
) -> Result<(Tensor, Tensor)> {
    let op = OpScope::new(name, &[x])?;
    let (xb, was) = batched(name, x, nd)?;
    let w = pool_window(name, &xb, nd, kernel, stride, padding, dilation, ceil_mode)?;
    let dt = xb.dtype();
    let mut out_shape = xb.shape()[..2].to_vec();
    out_shape.extend_from_slice(&w.out);
    if out_shape.iter().product::<usize>() == 0 {
        let v = Tensor::empty(op.rt(), &out_shape, dt)?;
        let i = Tensor::empty(op.rt(), &out_shape, DType::I64)?;
        return Ok((unbatched(v, was)?, unbatched(i, was)?));
    }
    let xp = padded(&op, &xb, &w, lowest(dt))?;
    let v = windows(&xp, &w);
    let row: Vec<usize> = (2 + nd..2 + 2 * nd).collect();
    let ct = if dt.is_float() { F } else { dt };
    let w2 = w.clone();
    let mut out = rows(
        &op,
        v.shape(),
        &row,
        false,
        &[&v],
        &[false],
        &[(dt, true), (DType::I64, true)],
        |p, r| {
            let val = p.cast(r[0], ct);
            let m = p.reduce(RedKind::Max, val, ct);
            let a = p.arg(true, val);
            let a = p.cast(a, I);
            // The window offset of each dim from the flat row index, then the input position
            // `o·s - p + k·d`, flattened over the plane.
            let mut rem = a;
            let mut ks = vec![p.constant(Scalar::Int(0), I); nd];
            for i in (0..nd).rev() {
                let kk = ic(p, w2.k[i] as i64);
                ks[i] = p.bin(BinOp::Rem, rem, kk, I);
                rem = p.bin(BinOp::Div, rem, kk, I);
            }
            let mut flat = ic(p, 0);
            for (i, &ki) in ks.iter().enumerate() {
                let o = p.index((2 + i) as u32);
                let s = ic(p, w2.stride[i] as i64);
                let os = p.bin(BinOp::Mul, o, s, I);
                let pd = ic(p, w2.pad[i] as i64);
                let base = p.bin(BinOp::Sub, os, pd, I);
                let d = ic(p, w2.dil[i] as i64);
                let kd = p.bin(BinOp::Mul, ki, d, I);
                let pos = p.bin(BinOp::Add, base, kd, I);
                let size = ic(p, w2.input[i] as i64);
                let scaled = p.bin(BinOp::Mul, flat, size, I);
                flat = p.bin(BinOp::Add, scaled, pos, I);
            }
            // The position is constant along the row, but built from coordinates the program
            // does not know to be: a max over the row makes it a per-row value.
            let flat = p.reduce(RedKind::Max, flat, I);
            vec![m, flat]
        },
    )?;
    let idx = out.remove(1);
    let val = out.remove(0);
    Ok((unbatched(val, was)?, unbatched(idx, was)?))
}

/// `avg_pool{nd}d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)`.
#[allow(clippy::too_many_arguments)]
pub fn avg_pool(
    name: &str,
    nd: usize,
    x: &Tensor,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let (xb, was) = batched(name, x, nd)?;
    if !xb.dtype().is_float() && xb.dtype() != DType::I64 {
        return Err(TpuError::Unsupported(format!(
            "\"{}\" not implemented for '{}'",
            // PyTorch's kernel names: 1-d runs the 2-d kernel.
            if nd == 3 {
                "avg_pool3d_out_frame"
            } else {
                "avg_pool2d"
            },
            xb.dtype().scalar_type_name()
        )));
    }
    if divisor_override == Some(0) {
        return Err(TpuError::BadArgs(format!(
            "{name}: divisor must be not zero"
        )));
    }
    let w = pool_window(name, &xb, nd, kernel, stride, padding, &[], ceil_mode)?;
    let dt = xb.dtype();
    let mut out_shape = xb.shape()[..2].to_vec();
    out_shape.extend_from_slice(&w.out);
    if out_shape.iter().product::<usize>() == 0 {
        return unbatched(Tensor::empty(op.rt(), &out_shape, dt)?, was);
    }
    let xp = padded(&op, &xb, &w, Scalar::Int(0))?;
    let v = windows(&xp, &w);
    if dt == DType::I64 {
        let y = int_avg_pool(&op, &v, &w, &out_shape, count_include_pad, divisor_override)?;
        return unbatched(y, was);
    }
    let row: Vec<usize> = (2 + nd..2 + 2 * nd).collect();
    let w2 = w.clone();
    let y = rows(
        &op,
        v.shape(),
        &row,
        false,
        &[&v],
        &[false],
        &[(dt, true)],
        |p, r| {
            let val = p.cast(r[0], F);
            let s = p.reduce(RedKind::Sum, val, F);
            let div = divisor(p, &w2, count_include_pad, divisor_override);
            // Constant along the row (see `max_pool_with_indices`).
            let div = p.reduce(RedKind::Max, div, F);
            vec![p.bin(BinOp::Div, s, div, F)]
        },
    )?
    .remove(0);
    unbatched(y, was)
}

/// Integer average pooling as PyTorch's CPU kernel computes it: the window's sum in int64
/// (the registered `sum`, so a sum beyond int32 is refused on the device, never wrapped), then
/// divided by the divisor rounding toward zero (C++'s integer `/`: `[-7, 2]` gives -2).
/// `v` is the windows view `[N, C, out..., k...]`.
fn int_avg_pool(
    op: &OpScope,
    v: &Tensor,
    w: &Window,
    out_shape: &[usize],
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> Result<Tensor> {
    let nd = w.dims();
    if divisor_override.is_some_and(|d| i32::try_from(d).is_err()) {
        return Err(TpuError::Unsupported(format!(
            "avg_pool{nd}d: an int64 divisor_override beyond int32 ({}): the tpu computes int64 in 32-bit lanes",
            divisor_override.unwrap_or_default()
        )));
    }
    let rt = op.rt();
    let dims: Vec<i64> = (2 + nd..2 + 2 * nd).map(|d| d as i64).collect();
    let s = compose::op(
        rt,
        "aten::sum.dim_IntList",
        vec![
            Value::Tensor(v.clone()),
            Value::Ints(dims),
            Value::Bool(false),
            Value::Dtype(DType::I64),
        ],
    )?;
    let w2 = w.clone();
    let d = map_shape(op, out_shape, &[], &[DType::I64], |p, _| {
        let d = divisor_count(p, &w2, count_include_pad, divisor_override);
        vec![p.cast(d, DType::I64)]
    })?
    .remove(0);
    compose::op(
        rt,
        "aten::div.Tensor_mode",
        vec![
            Value::Tensor(s),
            Value::Tensor(d),
            Value::Str("trunc".into()),
        ],
    )
}

/// Average pooling's divisor at the output position given by the iteration coordinates
/// `2..2+nd`: the window clipped to the padded input (or to the input without
/// `count_include_pad`), or `divisor_override`.
fn divisor(
    p: &mut ProgBuilder,
    w: &Window,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> PRef {
    match divisor_override {
        Some(d) => p.constant(Scalar::Float(d as f64), F),
        None => {
            let count = divisor_count(p, w, count_include_pad, None);
            p.cast(count, F)
        }
    }
}

/// [`divisor`] as an int32 (`divisor_override` taken to fit).
fn divisor_count(
    p: &mut ProgBuilder,
    w: &Window,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> PRef {
    let nd = w.dims();
    match divisor_override {
        Some(d) => ic(p, d),
        None => {
            let mut count = ic(p, 1);
            for i in 0..nd {
                let o = p.index((2 + i) as u32);
                let st = ic(p, w.stride[i] as i64);
                let os = p.bin(BinOp::Mul, o, st, I);
                let pd = ic(p, w.pad[i] as i64);
                let start = p.bin(BinOp::Sub, os, pd, I);
                let kk = ic(p, w.k[i] as i64);
                let end0 = p.bin(BinOp::Add, start, kk, I);
                let lim = ic(p, (w.input[i] + w.pad[i]) as i64);
                let end = p.bin(BinOp::Min, end0, lim, I);
                let n = if count_include_pad {
                    p.bin(BinOp::Sub, end, start, I)
                } else {
                    let zero = ic(p, 0);
                    let s0 = p.bin(BinOp::Max, start, zero, I);
                    let inp = ic(p, w.input[i] as i64);
                    let e0 = p.bin(BinOp::Min, end, inp, I);
                    p.bin(BinOp::Sub, e0, s0, I)
                };
                count = p.bin(BinOp::Mul, count, n, I);
            }
            count
        }
    }
}

/// `avg_pool{nd}d_backward(grad, x, kernel, stride, padding, ceil_mode, count_include_pad,
/// divisor_override)`: each output's gradient divided by its divisor, spread over its window
/// (a stride-0 view as columns) and summed back by [`col2im`].
#[allow(clippy::too_many_arguments)]
pub fn avg_pool_backward(
    name: &str,
    nd: usize,
    grad: &Tensor,
    x: &Tensor,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[grad, x])?;
    let (xb, was) = batched(name, x, nd)?;
    let (gb, _) = batched(name, grad, nd)?;
    let w = pool_window(name, &xb, nd, kernel, stride, padding, &[], ceil_mode)?;
    let mut out_shape = xb.shape()[..2].to_vec();
    out_shape.extend_from_slice(&w.out);
    if gb.shape() != out_shape.as_slice() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_output of shape {:?} does not match the pooled shape {out_shape:?}",
            gb.shape()
        )));
    }
    let dt = x.dtype();
    if xb.numel() == 0 || gb.numel() == 0 {
        let z = map_shape(&op, xb.shape(), &[], &[dt], |p, _| {
            vec![p.constant(Scalar::Int(0), dt)]
        })?
        .remove(0);
        return unbatched(z, was);
    }
    let w2 = w.clone();
    let gd = map_shape(&op, &out_shape, &[&gb], &[F], |p, r| {
        let g = p.cast(r[0], F);
        let d = divisor(p, &w2, count_include_pad, divisor_override);
        vec![p.bin(BinOp::Div, g, d, F)]
    })?
    .remove(0);
    // Columns [N, C, k..., out...]: the same value for every kernel offset.
    let l = gd.layout();
    let mut shape = l.shape[..2].to_vec();
    let mut strides = l.strides[..2].to_vec();
    shape.extend_from_slice(&w.k);
    strides.extend(std::iter::repeat_n(0, nd));
    shape.extend_from_slice(&w.out);
    strides.extend_from_slice(&l.strides[2..]);
    let cols = gd.with_layout(Layout {
        shape,
        strides,
        offset: l.offset,
    });
    let acc = super::window::col2im(&op, &cols, &w)?;
    let r = map_shape(&op, xb.shape(), &[&acc], &[dt], |_, r| vec![r[0]])?.remove(0);
    unbatched(r, was)
}

/// `max_pool{nd}d_with_indices_backward(grad, x, ..., indices)`: each gradient added at its
/// maximum's index in the input plane (index-add kernel).
pub fn max_pool_backward(
    name: &str,
    nd: usize,
    grad: &Tensor,
    x: &Tensor,
    indices: &Tensor,
) -> Result<Tensor> {
    if !grad.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "{name}: \"max_pool_backward\" not implemented for {}",
            grad.dtype().name()
        )));
    }
    let op = OpScope::new(name, &[grad, x, indices])?;
    let spatial: Vec<i64> = x.shape()[x.dim() - nd..]
        .iter()
        .map(|&s| s as i64)
        .collect();
    scatter_planes(&op, name, nd, grad, indices, &spatial, false)
}

/// `max_unpool{nd}d(x, indices, output_size)`: `x`'s values scattered to their flat indices in
/// zeroed output planes of `output_size` (a duplicated index sums its values; PyTorch keeps
/// one of them).
pub fn max_unpool(
    name: &str,
    nd: usize,
    x: &Tensor,
    indices: &Tensor,
    output_size: &[i64],
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x, indices])?;
    if indices.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: elements in indices should be type int64 but got: {}",
            indices.dtype().name()
        )));
    }
    if x.shape() != indices.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: Expected shape of indices to be same as that of the input tensor ({:?}) but got indices tensor with shape: {:?}",
            x.shape(),
            indices.shape()
        )));
    }
    if output_size.len() != nd {
        return Err(TpuError::BadArgs(format!(
            "{name}: There should be exactly {nd} elements but got {}",
            output_size.len()
        )));
    }
    if x.dim() != nd + 1 && x.dim() != nd + 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Input to max_unpooling{nd}d should be a {}d or {}d Tensor, but got a tensor with {} dimensions.",
            nd + 1,
            nd + 2,
            x.dim()
        )));
    }
    scatter_planes(&op, name, nd, x, indices, output_size, true)
}

/// Scatters `x`'s values (planes `[lead..., spatial...]`) to their flat `indices` in zeroed
/// planes of `output_size`, adding duplicates.
fn scatter_planes(
    op: &OpScope,
    name: &str,
    nd: usize,
    x: &Tensor,
    indices: &Tensor,
    output_size: &[i64],
    average: bool,
) -> Result<Tensor> {
    let _ = name;
    let lead = x.dim() - nd;
    let planes: usize = x.shape()[..lead].iter().product();
    let per_in: usize = x.shape()[lead..].iter().product();
    let per_out: usize = output_size.iter().map(|&o| o.max(0) as usize).product();
    let mut out_shape = x.shape()[..lead].to_vec();
    out_shape.extend(output_size.iter().map(|&o| o.max(0) as usize));
    let dt = x.dtype();
    let zeros = |op: &OpScope| {
        map_shape(op, &[planes * per_out, 1], &[], &[F], |p, _| {
            vec![p.constant(Scalar::Int(0), F)]
        })
        .map(|mut v| v.remove(0))
    };
    let sums = zeros(op)?;
    let counts = zeros(op)?;
    let count = planes * per_in;
    if count > 0 && per_out > 0 {
        // Global row indices: plane · per_out + index.
        let iv = match indices.layout().view_as(&[planes, per_in]) {
            Some(l) => indices.with_layout(l),
            None => {
                let c = map_shape(op, indices.shape(), &[indices], &[DType::I64], |_, r| {
                    vec![r[0]]
                })?
                .remove(0);
                c.with_layout(Layout::contiguous(&[planes, per_in]))
            }
        };
        let gidx = map_shape(op, &[planes, per_in], &[&iv], &[DType::I64], |p, r| {
            let pl = p.index(0);
            let pl = p.cast(pl, DType::I64);
            let po = p.constant(Scalar::Int(per_out as i64), DType::I64);
            let base = p.bin(BinOp::Mul, pl, po, DType::I64);
            vec![p.bin(BinOp::Add, base, r[0], DType::I64)]
        })?
        .remove(0);
        let gidx = gidx.with_layout(Layout::contiguous(&[count]));
        let src = map_shape(op, x.shape(), &[x], &[F], |_, r| vec![r[0]])?.remove(0);
        let src = src.with_layout(Layout::contiguous(&[count, 1]));
        let ones = map_shape(op, &[count, 1], &[], &[F], |p, _| {
            vec![p.constant(Scalar::Float(1.0), F)]
        })?
        .remove(0);
        let pairs: &[(&Tensor, &Tensor)] = if average {
            &[(&src, &sums), (&ones, &counts)]
        } else {
            &[(&src, &sums)]
        };
        for &(s, dst) in pairs {
            op.submit(
                NodeKind::IndexAdd(GatherNode {
                    rows: planes * per_out,
                    row_len: 1,
                    count,
                    check_bounds: true,
                    zero_table: false,
                }),
                vec![gidx.view(), s.view()],
                vec![dst.view()],
            )?;
        }
    }
    let out = if average {
        // An index written more than once keeps one value (PyTorch keeps the last; max
        // pooling's indices repeat one value): the mean of what arrived.
        map_shape(
            op,
            &[planes * per_out, 1],
            &[&sums, &counts],
            &[dt],
            |p, r| {
                let zero = p.constant(Scalar::Float(0.0), F);
                let some = p.cmp(CmpKind::Gt, r[1], zero, F);
                let q = p.bin(BinOp::Div, r[0], r[1], F);
                vec![p.select(some, q, zero, F)]
            },
        )?
        .remove(0)
    } else {
        map_shape(op, &[planes * per_out, 1], &[&sums], &[dt], |_, r| {
            vec![r[0]]
        })?
        .remove(0)
    };
    Ok(out.with_layout(Layout::contiguous(&out_shape)))
}
