//! Integer convolutions (int32, int64) on the vector unit: the matrix units take bfloat16 and
//! float32 only, and PyTorch's CPU kernels convolve integers exactly in their dtype, so an
//! integer `convolution` is composed from registered operators — one exact integer
//! contraction per kernel offset, summed:
//!
//! `y[n, g·og + o, p] = Σ_k Σ_c W[g·og + o, c, k] · xpad[n, g·cg + c, p·stride + k·dilation]`
//!
//! where each offset `k` is a strided view of the zero-padded input (`[N, G, 1, cg, out...]`)
//! times a view of the weight (`[1, G, og, cg, 1...]`), summed over `cg` (`contract`, whose
//! `mul` and `sum` are the integer operators: int64 results beyond int32 are refused on the
//! device, never wrapped, as every int64 operator here; int32 wraps as PyTorch's does). A
//! partial sum that leaves int32 is refused even where the whole sum would come back inside.
//!
//! A transposed convolution is the plain convolution, with stride 1 and the same dilation, of
//! the input with `stride - 1` zeros between neighbours, padded by `dilation·(k-1) - padding`
//! (plus `output_padding` on the high side; a negative pad crops), with the weight flipped in
//! space and its in- and out-channels swapped per group. Integer tensors have no gradients, so
//! there is no backward. As on PyTorch's CPU, int32 has no transposed or dilated convolution
//! (its message is raised). The float paths (im2col + the matrix units) are in `conv.rs`.

use super::window::Window;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::ops::Value;
use crate::ops::compose::{contract, op, tv};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Whether `dt` takes the integer path.
pub(super) fn is_integer(dt: DType) -> bool {
    matches!(dt, DType::I32 | DType::I64)
}

/// PyTorch's CPU builds its transposed and dilated convolution kernels for int64 (and the
/// floating types) only: for int32 they raise, and so does the tpu, with the same message.
pub(super) fn cpu_kernels(dt: DType, transposed: bool, w: &Window) -> Result<()> {
    if dt == DType::I64 {
        return Ok(());
    }
    let kernel = if transposed {
        // 1-d transposed convolutions run the 2-d kernel.
        format!("slow_conv_transpose{}d_out_cpu", w.dims().max(2))
    } else if w.dil.iter().any(|&d| d > 1) {
        "slow_conv_dilated<>".to_string()
    } else {
        return Ok(());
    };
    Err(TpuError::Unsupported(format!(
        "\"{kernel}\" not implemented for '{}'",
        dt.scalar_type_name()
    )))
}

/// Every multi-index below `k` (the kernel offsets), first dim slowest.
fn offsets(k: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![Vec::new()];
    for &n in k {
        all = all
            .into_iter()
            .flat_map(|p| {
                (0..n).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    all
}

/// `constant_pad_nd(x, ...)` over the spatial dims (from dim 2) by `lo`/`hi` each (negative
/// crops).
fn pad_spatial(rt: &Runtime, x: &Tensor, lo: &[i64], hi: &[i64]) -> Result<Tensor> {
    let mut pad = Vec::with_capacity(2 * lo.len());
    for i in (0..lo.len()).rev() {
        pad.push(lo[i]);
        pad.push(hi[i]);
    }
    op(
        rt,
        "aten::constant_pad_nd",
        vec![tv(x), Value::Ints(pad), Value::Int(0)],
    )
}

/// The plain convolution, stride `stride` and dilation `dil`, of `xp` (`[N, G·cg, P...]`, the
/// padding already applied) with the weight views `w_at(k)` (`[G, og, cg]` with any strides,
/// for each kernel offset `k`): `[N, G·og, out...]`.
#[allow(clippy::too_many_arguments)]
fn plain(
    rt: &Runtime,
    xp: &Tensor,
    g: usize,
    og: usize,
    k: &[usize],
    stride: &[usize],
    dil: &[usize],
    w_at: impl Fn(&[usize]) -> Tensor,
) -> Result<Tensor> {
    let nd = k.len();
    let (n, c) = (xp.shape()[0], xp.shape()[1]);
    let cg = c / g;
    let out: Vec<usize> = (0..nd)
        .map(|i| (xp.shape()[2 + i] - dil[i] * (k[i] - 1) - 1) / stride[i] + 1)
        .collect();
    let st = xp.strides().to_vec();
    let mut shape = vec![n, g, 1, cg];
    shape.extend_from_slice(&out);
    let mut strides = vec![st[0], cg as isize * st[1], 0, st[1]];
    strides.extend((0..nd).map(|i| st[2 + i] * stride[i] as isize));
    let mut acc: Option<Tensor> = None;
    for kk in offsets(k) {
        let at: isize = (0..nd).map(|i| (kk[i] * dil[i]) as isize * st[2 + i]).sum();
        let v = xp.with_layout(Layout {
            shape: shape.clone(),
            strides: strides.clone(),
            offset: (xp.storage_offset() as isize + at) as usize,
        });
        let wk = w_at(&kk);
        let wl = wk.layout();
        let mut wshape = vec![1, g, og, cg];
        wshape.extend(std::iter::repeat_n(1, nd));
        let mut wstrides = vec![0, wl.strides[0], wl.strides[1], wl.strides[2]];
        wstrides.extend(std::iter::repeat_n(0, nd));
        let wv = wk.with_layout(Layout {
            shape: wshape,
            strides: wstrides,
            offset: wl.offset,
        });
        let t = contract(rt, &v, &wv, &[3])?; // [N, G, og, out...]
        acc = Some(match acc {
            None => t,
            Some(a) => op(rt, "aten::add.Tensor", vec![tv(&a), tv(&t)])?,
        });
    }
    let acc = acc.expect("a kernel has at least one offset");
    let mut y_shape = vec![n as i64, (g * og) as i64];
    y_shape.extend(out.iter().map(|&s| s as i64));
    op(rt, "aten::reshape", vec![tv(&acc), Value::Ints(y_shape)])
}

/// The weight's `[G, m, r]` view at spatial offset `kk` (any strides): `group` steps from one
/// group's channels to the next, `rows` and `cols` are the strides of the `m` and `r` channel
/// dims (swapped for a transposed convolution's weight).
#[allow(clippy::too_many_arguments)]
fn weight_at(
    w: &Tensor,
    g: usize,
    group: isize,
    rows: isize,
    cols: isize,
    kk: &[usize],
    m: usize,
    r: usize,
) -> Tensor {
    let l = w.layout();
    let at: isize = kk
        .iter()
        .zip(&l.strides[2..])
        .map(|(&i, &s)| i as isize * s)
        .sum();
    w.with_layout(Layout {
        shape: vec![g, m, r],
        strides: vec![group, rows, cols],
        offset: (l.offset as isize + at) as usize,
    })
}

/// Adds `bias` (`[C]`) along dim 1.
fn add_bias(rt: &Runtime, y: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let Some(b) = bias else { return Ok(y) };
    let mut shape = vec![1i64, b.shape()[0] as i64];
    shape.extend(std::iter::repeat_n(1, y.dim() - 2));
    let bv = op(rt, "aten::reshape", vec![tv(b), Value::Ints(shape)])?;
    op(rt, "aten::add.Tensor", vec![tv(&y), tv(&bv)])
}

/// The plain integer convolution of a batched `x` `[N, G·cg, S...]` with `weight`
/// `[G·og, cg, k...]` over the window `w`.
pub(super) fn forward(
    rt: &Runtime,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    g: usize,
    og: usize,
    w: &Window,
) -> Result<Tensor> {
    let pad: Vec<i64> = w.pad.iter().map(|&p| p as i64).collect();
    let xp = pad_spatial(rt, x, &pad, &pad)?;
    let cg = weight.shape()[1];
    let ws = weight.strides();
    let (s0, s1) = (ws[0], ws[1]);
    let y = plain(rt, &xp, g, og, &w.k, &w.stride, &w.dil, |kk| {
        weight_at(weight, g, og as isize * s0, s0, s1, kk, og, cg)
    })?;
    add_bias(rt, y, bias)
}

/// `x` with `s - 1` zeros between neighbours along each spatial dim `i` (`(S - 1)·s + 1`).
fn stuffed(rt: &Runtime, x: &Tensor, stride: &[usize]) -> Result<Tensor> {
    let mut z = x.clone();
    for (i, &s) in stride.iter().enumerate() {
        if s == 1 {
            continue;
        }
        let d = 2 + i;
        let size = z.shape()[d];
        // [.., S, 1, ..] padded to [.., S, s, ..], merged to S·s, cut after the last element.
        let u = op(
            rt,
            "aten::unsqueeze",
            vec![tv(&z), Value::Int(d as i64 + 1)],
        )?;
        let mut pad = vec![0i64; 2 * (u.dim() - d - 2)];
        pad.extend([0, s as i64 - 1]);
        let p = op(
            rt,
            "aten::constant_pad_nd",
            vec![tv(&u), Value::Ints(pad), Value::Int(0)],
        )?;
        let mut shape: Vec<i64> = z.shape().iter().map(|&v| v as i64).collect();
        shape[d] = (size * s) as i64;
        let m = op(rt, "aten::reshape", vec![tv(&p), Value::Ints(shape)])?;
        z = op(
            rt,
            "aten::narrow",
            vec![
                tv(&m),
                Value::Int(d as i64),
                Value::Int(0),
                Value::Int(((size - 1) * s + 1) as i64),
            ],
        )?;
    }
    Ok(z)
}

/// The transposed integer convolution of a batched `x` `[N, G·og, S...]` (the window's
/// positions, `w.out`) with `weight` `[G·og, cg, k...]`: `[N, G·cg, w.input...]`.
pub(super) fn transposed(
    rt: &Runtime,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    g: usize,
    og: usize,
    w: &Window,
) -> Result<Tensor> {
    let nd = w.dims();
    let cg = weight.shape()[1];
    let z = stuffed(rt, x, &w.stride)?;
    let mut lo = Vec::with_capacity(nd);
    let mut hi = Vec::with_capacity(nd);
    for i in 0..nd {
        let reach = (w.dil[i] * (w.k[i] - 1)) as i64;
        let l = reach - w.pad[i] as i64;
        // The output is `z + lo + hi - reach` long.
        lo.push(l);
        hi.push(w.input[i] as i64 - z.shape()[2 + i] as i64 - l + reach);
    }
    let zp = pad_spatial(rt, &z, &lo, &hi)?;
    let ws = weight.strides();
    let (s0, s1) = (ws[0], ws[1]);
    let ones = vec![1; nd];
    // Out-channel `c` of group `g` reads in-channel `o` at the flipped offset:
    // `W[g·og + o, c, k - 1 - kk]`.
    let y = plain(rt, &zp, g, cg, &w.k, &ones, &w.dil, |kk| {
        let flipped: Vec<usize> = kk.iter().zip(&w.k).map(|(&i, &n)| n - 1 - i).collect();
        weight_at(weight, g, og as isize * s0, s1, s0, &flipped, cg, og)
    })?;
    add_bias(rt, y, bias)
}
