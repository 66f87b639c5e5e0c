//! Convolution on the matrix units: `convolution` (1-D, 2-D and 3-D, grouped, dilated,
//! strided, padded, transposed) and `convolution_backward`, as im2col + matmul (the lowering
//! XLA and cuDNN's implicit GEMM use).
//!
//! - Forward: the input's windows (a strided view of the zero-padded input, [`windows`]) are
//!   copied into columns `[N, C·k, L]` by one tile kernel, and one matrix-unit node multiplies
//!   the weight `[O, C·k]` (the same for every batch element: a stride-0 batch dim) by them,
//!   with the bias added in its epilogue. Groups become the batch of the product (`[G, O/G,
//!   C/G·k] @ [G, C/G·k, N·L]`), followed by one copy into `[N, O, L]`.
//! - Transposed: the product `Wᵀ @ x` gives columns that [`col2im`] adds into an f32 buffer
//!   (one tile kernel per kernel offset), cropped by the padding; the bias is added by the
//!   final copy.
//! - Backward: the input gradient is the transposed convolution of `grad_output` (and for a
//!   transposed convolution, the plain one); the weight gradient is one batched product of
//!   `grad_output` with the input's columns; the bias gradient sums `grad_output`.
//!
//! Integer (int32, int64) convolutions take the vector unit instead (`conv_int.rs`).
//!
//! Numerics follow the matrix units (see [`crate::ops::matrix`]): f32 at the runtime's
//! precision (DEFAULT: one bf16 pass), bf16 exact products with f32 accumulation, f16 through
//! f32.

use super::conv_int;
use super::window::{Window, col2im, im2col, materialize, per_dim};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::BinOp;
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape};
use crate::ops::matrix::product;
use crate::tensor::Tensor;

/// The arguments shared by `convolution` and its backward.
#[derive(Clone, Debug)]
pub struct ConvParams {
    /// Stride per spatial dim (one value repeats).
    pub stride: Vec<i64>,
    /// Padding per spatial dim.
    pub padding: Vec<i64>,
    /// Dilation per spatial dim.
    pub dilation: Vec<i64>,
    /// Transposed convolution.
    pub transposed: bool,
    /// Extra size on the high side of a transposed convolution's output.
    pub output_padding: Vec<i64>,
    /// Groups.
    pub groups: i64,
}

/// Resolved shapes of one convolution (batched input).
struct Geo {
    n: usize,
    g: usize,
    /// Input channels per group.
    cg: usize,
    /// Output channels per group.
    og: usize,
    /// The window over the (non-transposed) input: `w.input` is the input's spatial size,
    /// `w.out` the output's. For a transposed convolution, over its output.
    w: Window,
}

pub(super) fn to_usize(name: &str, what: &str, v: &[i64], min: i64) -> Result<Vec<usize>> {
    v.iter()
        .map(|&x| {
            if x < min {
                Err(TpuError::BadArgs(format!(
                    "{name}: {what} should be at least {min}, but got {what}={v:?}"
                )))
            } else {
                Ok(x as usize)
            }
        })
        .collect()
}

/// Checks the operands and resolves the geometry; `x` is batched (`[N, C, spatial...]`).
fn geometry(name: &str, x: &Tensor, weight: &Tensor, p: &ConvParams) -> Result<Geo> {
    let nd = weight.dim().saturating_sub(2);
    if nd == 0 || x.dim() != nd + 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected {}-dimensional input for {}-dimensional weight {:?}, but got {}-dimensional input of size {:?} instead",
            weight.dim(),
            weight.dim(),
            weight.shape(),
            x.dim(),
            x.shape()
        )));
    }
    let stride = to_usize(
        name,
        "stride",
        &per_dim(name, "stride", &p.stride, nd, 1)?,
        1,
    )?;
    let pad = to_usize(
        name,
        "padding",
        &per_dim(name, "padding", &p.padding, nd, 0)?,
        0,
    )?;
    let dil = to_usize(
        name,
        "dilation",
        &per_dim(name, "dilation", &p.dilation, nd, 1)?,
        1,
    )?;
    let opad = to_usize(
        name,
        "output_padding",
        &per_dim(name, "output_padding", &p.output_padding, nd, 0)?,
        0,
    )?;
    if p.groups < 1 {
        return Err(TpuError::BadArgs(format!(
            "{name}: non-positive groups is not supported"
        )));
    }
    let g = p.groups as usize;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let k: Vec<usize> = weight.shape()[2..].to_vec();
    let spatial: Vec<usize> = x.shape()[2..].to_vec();
    if !p.transposed {
        let o = weight.shape()[0];
        if !o.is_multiple_of(g) || c != weight.shape()[1] * g {
            return Err(TpuError::ShapeMismatch(format!(
                "{name}: Given groups={g}, weight of size {:?}, expected input{:?} to have {} channels, but got {c} channels instead",
                weight.shape(),
                x.shape(),
                weight.shape()[1] * g
            )));
        }
        let w = Window::new(&spatial, &k, &stride, &pad, &dil, false).ok_or_else(|| {
            TpuError::ShapeMismatch(format!(
                "{name}: Calculated padded input size per channel: {:?}. Kernel size: {k:?}. Kernel size can't be greater than actual input size",
                spatial.iter().zip(&pad).map(|(s, p)| s + 2 * p).collect::<Vec<_>>()
            ))
        })?;
        Ok(Geo {
            n,
            g,
            cg: c / g,
            og: o / g,
            w,
        })
    } else {
        if c != weight.shape()[0] || !c.is_multiple_of(g) {
            return Err(TpuError::ShapeMismatch(format!(
                "{name}: Given transposed=1, weight of size {:?}, expected input{:?} to have {} channels, but got {c} channels instead",
                weight.shape(),
                x.shape(),
                weight.shape()[0]
            )));
        }
        for i in 0..nd {
            if opad[i] >= stride[i] && opad[i] >= dil[i] {
                return Err(TpuError::BadArgs(format!(
                    "{name}: output padding must be smaller than either stride or dilation, but got output_padding={opad:?}, stride={stride:?}, dilation={dil:?}"
                )));
            }
        }
        // The output size of the transposed convolution.
        let mut out = Vec::with_capacity(nd);
        for i in 0..nd {
            let full = (spatial[i] as i64 - 1) * stride[i] as i64
                + (dil[i] * (k[i] - 1)) as i64
                + opad[i] as i64
                + 1;
            let o = full - 2 * pad[i] as i64;
            if o <= 0 {
                return Err(TpuError::ShapeMismatch(format!(
                    "{name}: the transposed convolution's output size {o} is too small (input {spatial:?}, kernel {k:?}, padding {pad:?})"
                )));
            }
            out.push(o as usize);
        }
        // The window runs over the transposed convolution's output (its "input" here), and
        // its positions are the transposed convolution's input.
        let w = Window {
            k,
            stride,
            pad,
            dil,
            input: out,
            out: spatial,
        };
        Ok(Geo {
            n,
            g,
            cg: weight.shape()[1],
            og: c / g,
            w,
        })
    }
}

/// The dtype the convolution computes in (one dtype for both operands): the matrix units' for
/// floats (f16 as f32), or the integer's own (`conv_int.rs`, on the vector unit).
fn mxu_dtype(name: &str, x: &Tensor, weight: &Tensor) -> Result<DType> {
    if x.dtype() != weight.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: Input type ({}) and weight type ({}) should be the same",
            x.dtype().name(),
            weight.dtype().name()
        )));
    }
    match x.dtype() {
        // Integers take the vector unit (`conv_int.rs`).
        DType::F32 | DType::BF16 | DType::I32 | DType::I64 => Ok(x.dtype()),
        DType::F16 => Ok(DType::F32),
        d => Err(TpuError::Unsupported(format!(
            "{name}: {} convolutions are not supported on TPU (floating point on the matrix units; int32 and int64 on the vector unit)",
            d.name()
        ))),
    }
}

fn cast_to(op: &OpScope, t: &Tensor, d: DType) -> Result<Tensor> {
    if t.dtype() == d {
        Ok(t.clone())
    } else {
        materialize(op, t, d)
    }
}

/// A contiguous tensor of `shape` seen with another shape.
pub(super) fn reshape(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    match t.layout().view_as(shape) {
        Some(l) => Ok(t.with_layout(l)),
        None => Err(TpuError::Device(format!(
            "internal: view {:?} as {shape:?}",
            t.shape()
        ))),
    }
}

/// `[G, m, k]` seen from a contiguous-by-groups tensor whose first dim holds `G·m` rows of `k`.
fn grouped(t: &Tensor, g: usize) -> Result<Tensor> {
    let rows = t.shape()[0];
    let k: usize = t.shape()[1..].iter().product();
    let c = if t.is_contiguous() {
        t.clone()
    } else {
        return Err(TpuError::Device(
            "internal: grouped operand not contiguous".into(),
        ));
    };
    reshape(&c, &[g, rows / g, k])
}

/// `y[n, o, L] = Σ W[o, c·k] · cols(x)[n, c·k, L] (+ bias[o])`: the plain convolution of a
/// batched input in the MXU dtype `md`, result in `out` dtype.
fn conv_forward(
    op: &OpScope,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    geo: &Geo,
    md: DType,
    out: DType,
) -> Result<Tensor> {
    let w = &geo.w;
    let (n, g, cg, og) = (geo.n, geo.g, geo.cg, geo.og);
    let kp = w.k_numel();
    let lp = w.out_numel();
    let mut out_shape = vec![n, g * og];
    out_shape.extend_from_slice(&w.out);
    let x = cast_to(op, x, md)?;
    let wt = cast_to(op, &materialize_if_needed(op, weight)?, md)?;
    let cols = im2col(op, &x, w)?; // [N, C, k..., L...]
    if n * lp == 0 || og == 0 {
        return zeros_plus_bias(op, &out_shape, bias, out);
    }
    if g == 1 || n == 1 {
        // Batch over N with the weight broadcast (g == 1), or over groups (n == 1).
        let (batch, a, b) = if g == 1 {
            let wl = Layout {
                shape: vec![n, og, cg * kp],
                strides: vec![0, (cg * kp) as isize, 1],
                offset: 0,
            };
            (n, wt.with_layout(wl), reshape(&cols, &[n, cg * kp, lp])?)
        } else {
            (g, grouped(&wt, g)?, reshape(&cols, &[g, cg * kp, lp])?)
        };
        let _ = batch;
        // The bias as [batch, m, 1]: [1, O, 1] broadcast over N, or [G, og, 1].
        let extras: Vec<Tensor> = bias
            .map(|bv| {
                let bs = bv.strides()[0];
                let (shape, strides) = if g == 1 {
                    (vec![1, og, 1], vec![0, bs, 0])
                } else {
                    (vec![g, og, 1], vec![og as isize * bs, bs, 0])
                };
                bv.with_layout(Layout {
                    shape,
                    strides,
                    offset: bv.storage_offset(),
                })
            })
            .into_iter()
            .collect();
        let refs: Vec<&Tensor> = extras.iter().collect();
        let y = product(op, &a, &b, out, &refs, |p, prod, r| match r.first() {
            Some(&bb) => {
                let bb = p.cast(bb, DType::F32);
                p.bin(BinOp::Add, prod, bb, DType::F32)
            }
            None => prod,
        })?;
        return reshape(&y, &out_shape);
    }
    // Groups and batch: columns ordered [G, C/G·k, N, L] so that each group is one product.
    let c4 = reshape(&cols, &[n, g, cg * kp, lp])?;
    let perm = c4.with_layout(c4.layout().permute(&[1, 2, 0, 3])?);
    let gc = materialize(op, &perm, md)?; // [G, Cg·k, N, L]
    let b = reshape(&gc, &[g, cg * kp, n * lp])?;
    let a = grouped(&wt, g)?;
    let y = product(op, &a, &b, DType::F32, &[], |_, prod, _| prod)?; // [G, og, N·L]
    let y4 = reshape(&y, &[g, og, n, lp])?;
    let yp = y4.with_layout(y4.layout().permute(&[2, 0, 1, 3])?); // [N, G, og, L]
    let r = match bias {
        Some(bv) => {
            let bl = Layout {
                shape: vec![n, g, og, lp],
                strides: vec![0, og as isize * bv.strides()[0], bv.strides()[0], 0],
                offset: bv.storage_offset(),
            };
            let bb = bv.with_layout(bl);
            map_shape(op, &[n, g, og, lp], &[&yp, &bb], &[out], |p, r| {
                let b = p.cast(r[1], DType::F32);
                vec![p.bin(BinOp::Add, r[0], b, DType::F32)]
            })?
            .remove(0)
        }
        None => materialize(op, &yp, out)?,
    };
    reshape(&r, &out_shape)
}

pub(super) fn materialize_if_needed(op: &OpScope, t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() {
        Ok(t.clone())
    } else {
        materialize(op, t, t.dtype())
    }
}

/// Zeros (plus the bias along dim 1) of `shape`.
pub(super) fn zeros_plus_bias(
    op: &OpScope,
    shape: &[usize],
    bias: Option<&Tensor>,
    out: DType,
) -> Result<Tensor> {
    match bias {
        Some(b) if shape.iter().all(|&s| s > 0) => {
            let mut bs = vec![0isize; shape.len()];
            bs[1] = b.strides()[0];
            let bb = b.with_layout(Layout {
                shape: shape.to_vec(),
                strides: bs,
                offset: b.storage_offset(),
            });
            Ok(map_shape(op, shape, &[&bb], &[out], |_, r| vec![r[0]])?.remove(0))
        }
        _ => Ok(map_shape(op, shape, &[], &[out], |p, _| {
            vec![p.constant(Scalar::Int(0), out)]
        })?
        .remove(0)),
    }
}

/// The transposed convolution of a batched `x` `[N, G·og, S...]` (the window's positions) with
/// `weight` `[G·og, cg, k...]`: `col2im(Wᵀ @ x)` cropped by the padding, `[N, G·cg, out...]`,
/// plus the bias, in `out` dtype.
fn conv_transposed(
    op: &OpScope,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    geo: &Geo,
    md: DType,
    out: DType,
) -> Result<Tensor> {
    let w = &geo.w;
    let (n, g, cg, og) = (geo.n, geo.g, geo.cg, geo.og);
    let kp = w.k_numel();
    let sp = w.out_numel();
    let mut out_shape = vec![n, g * cg];
    out_shape.extend_from_slice(&w.input);
    if n * sp == 0 || og == 0 || cg == 0 {
        return zeros_plus_bias(op, &out_shape, bias, out);
    }
    let x = cast_to(op, x, md)?;
    let wt = cast_to(op, &materialize_if_needed(op, weight)?, md)?;
    // Wᵀ per group: [G, cg·k, og] (a transposed view of [G, og, cg·k]).
    let wg = grouped(&wt, g)?;
    let wtl = wg.layout().transpose(1, 2)?;
    let wt_g = wg.with_layout(wtl);
    // Columns [lead(N, G·cg) ..., k..., S...] with any layout.
    let cols = if g == 1 {
        let a = wt_g.with_layout(Layout {
            shape: vec![n, cg * kp, og],
            strides: vec![0, wt_g.layout().strides[1], wt_g.layout().strides[2]],
            offset: wt_g.layout().offset,
        });
        let xc = materialize_if_needed(op, &x)?;
        let b = reshape(&xc, &[n, og, sp])?;
        let c = product(op, &a, &b, DType::F32, &[], |_, prod, _| prod)?; // [N, cg·k, S]
        let mut s = vec![n, cg];
        s.extend_from_slice(&w.k);
        s.extend_from_slice(&w.out);
        reshape(&c, &s)?
    } else {
        // x as [G, og, N, S].
        let xc = materialize_if_needed(op, &x)?;
        let x4 = reshape(&xc, &[n, g, og, sp])?;
        let xp = x4.with_layout(x4.layout().permute(&[1, 2, 0, 3])?);
        let xg = materialize(op, &xp, md)?;
        let b = reshape(&xg, &[g, og, n * sp])?;
        let c = product(op, &wt_g, &b, DType::F32, &[], |_, prod, _| prod)?; // [G, cg·k, N·S]
        // [G, cg, k..., N, S...] seen as [N, G·cg, k..., S...].
        let nd = w.dims();
        let mut s = vec![g, cg];
        s.extend_from_slice(&w.k);
        s.push(n);
        s.extend_from_slice(&w.out);
        let c = reshape(&c, &s)?;
        let l = c.layout();
        let mut shape = vec![n, g * cg];
        let mut strides = vec![l.strides[2 + nd], l.strides[1]];
        shape.extend_from_slice(&w.k);
        strides.extend_from_slice(&l.strides[2..2 + nd]);
        shape.extend_from_slice(&w.out);
        strides.extend_from_slice(&l.strides[3 + nd..]);
        c.with_layout(Layout {
            shape,
            strides,
            offset: l.offset,
        })
    };
    let acc = col2im(op, &cols, w)?; // f32 [N, G·cg, out...]
    let r = match bias {
        Some(bv) => {
            let mut bs = vec![0isize; out_shape.len()];
            bs[1] = bv.strides()[0];
            let bb = bv.with_layout(Layout {
                shape: out_shape.clone(),
                strides: bs,
                offset: bv.storage_offset(),
            });
            map_shape(op, &out_shape, &[&acc, &bb], &[out], |p, r| {
                let b = p.cast(r[1], DType::F32);
                vec![p.bin(BinOp::Add, r[0], b, DType::F32)]
            })?
            .remove(0)
        }
        None => materialize(op, &acc, out)?,
    };
    Ok(r)
}

/// Adds a batch dim to an unbatched input (`[C, spatial...]`); says whether it did.
fn batchify(x: &Tensor, weight: &Tensor) -> Result<(Tensor, bool)> {
    if x.dim() + 1 == weight.dim() {
        Ok((x.with_layout(x.layout().unsqueeze(0)?), true))
    } else {
        Ok((x.clone(), false))
    }
}

pub(super) fn unbatch(t: Tensor, was: bool) -> Result<Tensor> {
    if was {
        Ok(t.with_layout(t.layout().squeeze(0)?))
    } else {
        Ok(t)
    }
}

/// `torch.ops.aten.convolution(input, weight, bias, stride, padding, dilation, transposed,
/// output_padding, groups)`.
pub fn convolution(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    p: &ConvParams,
) -> Result<Tensor> {
    let name = "aten::convolution";
    let mut ins = vec![input, weight];
    ins.extend(bias);
    let op = OpScope::new(name, &ins)?;
    let (x, was) = batchify(input, weight)?;
    let geo = geometry(name, &x, weight, p)?;
    let md = mxu_dtype(name, &x, weight)?;
    if let Some(b) = bias
        && b.dtype() != x.dtype()
    {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: Input type ({}) and bias type ({}) should be the same",
            x.dtype().name(),
            b.dtype().name()
        )));
    }
    if x.shape()[2..].contains(&0) && x.shape()[0] != 0 && x.shape()[1] != 0 {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: Only zero batch or zero channel inputs are supported, but got input shape: {:?}",
            x.shape()
        )));
    }
    if let Some(b) = bias {
        let ch = if p.transposed {
            geo.g * geo.cg
        } else {
            geo.g * geo.og
        };
        if b.dim() != 1 || b.shape()[0] != ch {
            return Err(TpuError::ShapeMismatch(format!(
                "{name}: Given weight of size {:?}, expected bias to be 1-dimensional with {ch} elements, but got bias of size {:?} instead",
                weight.shape(),
                b.shape()
            )));
        }
    }
    let out = x.dtype();
    let y = if conv_int::is_integer(md) {
        let (spatial, o) = if p.transposed {
            (&geo.w.input, geo.g * geo.cg)
        } else {
            (&geo.w.out, geo.g * geo.og)
        };
        let mut shape = vec![geo.n, o];
        shape.extend_from_slice(spatial);
        conv_int::cpu_kernels(md, p.transposed, &geo.w)?;
        if shape.contains(&0) || geo.w.k.contains(&0) || x.shape()[1] == 0 {
            zeros_plus_bias(&op, &shape, bias, out)?
        } else if p.transposed {
            conv_int::transposed(op.rt(), &x, weight, bias, geo.g, geo.og, &geo.w)?
        } else {
            conv_int::forward(op.rt(), &x, weight, bias, geo.g, geo.og, &geo.w)?
        }
    } else if p.transposed {
        conv_transposed(&op, &x, weight, bias, &geo, md, out)?
    } else {
        conv_forward(&op, &x, weight, bias, &geo, md, out)?
    };
    unbatch(y, was)
}

/// `convolution_backward(grad_output, input, weight, bias_sizes, ..., output_mask)`: the
/// gradients of the input, the weight and the bias (each `None` where the mask is false).
pub fn convolution_backward(
    grad: &Tensor,
    input: &Tensor,
    weight: &Tensor,
    p: &ConvParams,
    mask: [bool; 3],
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let name = "aten::convolution_backward";
    let op = OpScope::new(name, &[grad, input, weight])?;
    let (x, was) = batchify(input, weight)?;
    let (g, _) = batchify(grad, weight)?;
    let geo = geometry(name, &x, weight, p)?;
    let md = mxu_dtype(name, &x, weight)?;
    if conv_int::is_integer(md) {
        return Err(TpuError::Unsupported(format!(
            "{name}: the gradient of an integer ({}) convolution: only floating point tensors have gradients",
            md.name()
        )));
    }
    let dt = x.dtype();
    let gi = if mask[0] {
        // Plain: the transposed convolution of grad (over the input's window); transposed:
        // the plain convolution of grad.
        let r = if p.transposed {
            // The same window, over grad (its size is `w.input`) with `x`'s size as output;
            // the weight `[G·og, cg, k]` is a plain one from `cg` to `og` channels per group.
            conv_forward(&op, &g, weight, None, &geo, md, dt)?
        } else {
            conv_transposed(&op, &g, weight, None, &geo, md, dt)?
        };
        Some(unbatch(r, was)?)
    } else {
        None
    };
    let gw = if mask[1] {
        Some(weight_grad(&op, &g, &x, weight, &geo, md, p.transposed)?)
    } else {
        None
    };
    let gb = if mask[2] {
        let ch = g.shape()[1];
        let nd = g.dim() - 2;
        let mut dims = vec![0i64];
        dims.extend((0..nd).map(|i| (i + 2) as i64));
        let s = crate::ops::reduce::sum(&g, &dims, false, None)?;
        debug_assert_eq!(s.shape(), &[ch]);
        Some(s)
    } else {
        None
    };
    Ok((gi, gw, gb))
}

/// The weight gradient: per group, `grad [og, N·L] @ cols(x)ᵀ [N·L, cg·k]` (plain), or
/// `x [og, N·S] @ cols(grad)ᵀ` (transposed, whose weight is `[G·og, cg, k]`).
fn weight_grad(
    op: &OpScope,
    grad: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    geo: &Geo,
    md: DType,
    transposed: bool,
) -> Result<Tensor> {
    let w = &geo.w;
    let (n, g) = (geo.n, geo.g);
    let kp = w.k_numel();
    // (rows operand, column source, rows per group, column channels per group)
    let (lhs, src, rg, cgc) = if transposed {
        (x, grad, geo.og, geo.cg)
    } else {
        (grad, x, geo.og, geo.cg)
    };
    let lp = w.out_numel();
    let lhs = cast_to(op, lhs, md)?;
    let src = cast_to(op, src, md)?;
    let cols = im2col(op, &src, w)?; // [N, G·cgc, k..., L...]
    if n * lp == 0 || kp * cgc * rg == 0 {
        return zeros_plus_bias(op, weight.shape(), None, weight.dtype());
    }
    // A: [G, rg, N·L]; B: [G, N·L, cgc·k] (a transposed view of [G, cgc·k, N·L]).
    let lc = materialize_if_needed(op, &lhs)?;
    let l4 = reshape(&lc, &[n, g, rg, lp])?;
    let a = materialize(op, &l4.with_layout(l4.layout().permute(&[1, 2, 0, 3])?), md)?;
    let a = reshape(&a, &[g, rg, n * lp])?;
    let c4 = reshape(&cols, &[n, g, cgc * kp, lp])?;
    let b = materialize(op, &c4.with_layout(c4.layout().permute(&[1, 2, 0, 3])?), md)?;
    let b = reshape(&b, &[g, cgc * kp, n * lp])?;
    let b = b.with_layout(b.layout().transpose(1, 2)?);
    let y = product(op, &a, &b, weight.dtype(), &[], |_, prod, _| prod)?; // [G, rg, cgc·k]
    reshape(&y, weight.shape())
}
