//! `replication_pad{1,2,3}d` and `reflection_pad{1,2,3}d`: one dim at a time, each a fresh
//! tensor written by up to three tile kernels — the (cropped) input in the middle and the two
//! borders as views of the input: the edge element repeated (a stride-0 view) for replication,
//! the elements next to the edge in reverse order (a negative-stride view) for reflection.
//! Their backward operators add each output element's gradient into the input element it
//! read (`index_add` along one dim at a time, in f32).

use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::ops::Value;
use crate::ops::compose::{op, tv};
use crate::ops::helpers::{OpScope, map_shape, write_into};
use crate::tensor::Tensor;

/// `x` seen along `dim` as `len` elements starting at `start` with step `step` (in elements
/// of that dim; 0 repeats one element, -1 walks backwards).
fn along(x: &Tensor, dim: usize, start: usize, len: usize, step: isize) -> Tensor {
    let l = x.layout();
    let mut shape = l.shape.clone();
    let mut strides = l.strides.clone();
    let off = l.offset as isize + start as isize * l.strides[dim];
    shape[dim] = len;
    strides[dim] = l.strides[dim] * step;
    x.with_layout(Layout {
        shape,
        strides,
        offset: off as usize,
    })
}

/// Pads (or crops, where negative) `x` along `dim` by `lo` and `hi`.
fn pad_dim(
    op: &OpScope,
    x: &Tensor,
    dim: usize,
    lo: i64,
    hi: i64,
    reflect: bool,
) -> Result<Tensor> {
    if lo == 0 && hi == 0 {
        return Ok(x.clone());
    }
    let n = x.shape()[dim] as i64;
    let size = n + lo + hi;
    let mut shape = x.shape().to_vec();
    shape[dim] = size.max(0) as usize;
    let out = Tensor::empty(op.rt(), &shape, x.dtype())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    // The kept middle of the input and where it goes.
    let (src0, src1) = ((-lo).max(0), n - (-hi).max(0));
    let dst0 = lo.max(0);
    if src1 > src0 {
        let src = along(x, dim, src0 as usize, (src1 - src0) as usize, 1);
        let dst = along(&out, dim, dst0 as usize, (src1 - src0) as usize, 1);
        write_into(op, &dst, &[&src], |_, r| r[0])?;
    }
    if lo > 0 {
        let src = if reflect {
            along(x, dim, lo as usize, lo as usize, -1)
        } else {
            along(x, dim, 0, lo as usize, 0)
        };
        let dst = along(&out, dim, 0, lo as usize, 1);
        write_into(op, &dst, &[&src], |_, r| r[0])?;
    }
    if hi > 0 {
        let src = if reflect {
            along(x, dim, (n - 2) as usize, hi as usize, -1)
        } else {
            along(x, dim, (n - 1) as usize, hi as usize, 0)
        };
        let dst = along(&out, dim, (size - hi) as usize, hi as usize, 1);
        write_into(op, &dst, &[&src], |_, r| r[0])?;
    }
    Ok(out)
}

/// `replication_pad{nd}d` / `reflection_pad{nd}d(x, padding)`: `padding` holds (left, right)
/// pairs from the last dim backwards.
pub fn pad_nd(name: &str, nd: usize, x: &Tensor, padding: &[i64], reflect: bool) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    check_padding(name, nd, x, padding, reflect)?;
    let r = x.dim();
    let mut cur = x.clone();
    for (i, pair) in padding.chunks_exact(2).enumerate() {
        cur = pad_dim(&op, &cur, r - 1 - i, pair[0], pair[1], reflect)?;
    }
    if cur.shares_storage(x) {
        cur = map_shape(&op, cur.shape(), &[&cur], &[cur.dtype()], |_, r| vec![r[0]])?.remove(0);
    }
    Ok(cur)
}

/// PyTorch's checks of a padding and the input it pads.
fn check_padding(name: &str, nd: usize, x: &Tensor, padding: &[i64], reflect: bool) -> Result<()> {
    if padding.len() != 2 * nd {
        return Err(TpuError::BadArgs(format!(
            "{name}: padding size is expected to be {}, but got: {}",
            2 * nd,
            padding.len()
        )));
    }
    if x.dim() != nd + 1 && x.dim() != nd + 2 {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected {}D or {}D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: {:?}",
            nd + 1,
            nd + 2,
            x.shape()
        )));
    }
    let r = x.dim();
    for (i, pair) in padding.chunks_exact(2).enumerate() {
        let d = r - 1 - i;
        let n = x.shape()[d] as i64;
        if reflect && (pair[0] >= n || pair[1] >= n) {
            return Err(TpuError::BadArgs(format!(
                "{name}: Argument #4: Padding size should be less than the corresponding input dimension, but got: padding ({}, {}) at dimension {d} of input {:?}",
                pair[0],
                pair[1],
                x.shape()
            )));
        }
        if n + pair[0] + pair[1] < 1 {
            return Err(TpuError::BadArgs(format!(
                "{name}: input (W: {n}) is too small. Calculated output W: {}",
                n + pair[0] + pair[1]
            )));
        }
        if !reflect && n == 0 && (pair[0] > 0 || pair[1] > 0) {
            return Err(TpuError::BadArgs(format!(
                "{name}: input tensor must have non-zero size in the padded dimensions"
            )));
        }
    }
    Ok(())
}

/// The input index each output position of a padded dim reads (negative padding crops).
fn source_indices(n: i64, lo: i64, size: i64, reflect: bool) -> Vec<f64> {
    (0..size)
        .map(|j| {
            let i = j - lo;
            let src = if !reflect {
                i.clamp(0, n - 1)
            } else if i < 0 {
                -i
            } else if i >= n {
                2 * (n - 1) - i
            } else {
                i
            };
            src as f64
        })
        .collect()
}

/// `replication_pad{nd}d_backward` / `reflection_pad{nd}d_backward(grad_output, x, padding)`:
/// each output element's gradient added into the input element it was read from, one dim at
/// a time (`index_add` in f32, rounded once to `x`'s dtype).
pub fn pad_nd_backward(
    name: &str,
    nd: usize,
    g: &Tensor,
    x: &Tensor,
    padding: &[i64],
    reflect: bool,
) -> Result<Tensor> {
    check_padding(name, nd, x, padding, reflect)?;
    let r = x.dim();
    let mut want = x.shape().to_vec();
    for (i, pair) in padding.chunks_exact(2).enumerate() {
        let d = r - 1 - i;
        want[d] = (x.shape()[d] as i64 + pair[0] + pair[1]) as usize;
    }
    if g.shape() != want.as_slice() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: grad_output has shape {:?}, expected {want:?} (the input {:?} padded by {padding:?})",
            g.shape(),
            x.shape()
        )));
    }
    let rt = x.runtime();
    let mut cur = g.to_dtype(DType::F32)?;
    for (i, pair) in padding.chunks_exact(2).enumerate() {
        let d = r - 1 - i;
        let n = x.shape()[d] as i64;
        let size = n + pair[0] + pair[1];
        let idx = source_indices(n, pair[0], size, reflect);
        let idx = Tensor::from_f64s(
            rt,
            idx.into_iter(),
            size as usize,
            &[size as usize],
            DType::I64,
        )?;
        let mut shape = cur.shape().to_vec();
        shape[d] = n as usize;
        let zeros = crate::ops::linalg::zeros(rt, &shape, DType::F32)?;
        cur = op(
            rt,
            "aten::index_add",
            vec![
                tv(&zeros),
                Value::Int(d as i64),
                tv(&idx),
                tv(&cur),
                Value::Int(1),
            ],
        )?;
    }
    cur.to_dtype(x.dtype())
}
