//! Region operators: `masked_fill`, `tril`/`triu`, `constant_pad_nd` and `flip`, as tile
//! kernels over the output.

use super::super::aten;
use super::super::helpers::{OpScope, dims_of, map, map_contiguous, write_into};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind};
use crate::ops::sharding::{Lin, Sharding, Special};
use crate::tensor::Tensor;

fn check_mask(mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(format!(
            "masked_fill_ only supports boolean masks, but got mask with dtype {}",
            mask.dtype()
        )));
    }
    Ok(())
}

/// `x.masked_fill(mask, value)`: `value` (converted to `x`'s dtype) where `mask` is true; the
/// result has the broadcast shape of `x` and `mask`.
pub fn masked_fill(x: &Tensor, mask: &Tensor, value: Scalar) -> Result<Tensor> {
    let op = OpScope::new(MaskedFillScalar::NAME, &[x, mask])?;
    check_mask(mask)?;
    let d = x.dtype();
    Ok(map(&op, &[x, mask], &[d], |p, r| {
        let v = p.constant(value, d);
        vec![p.select(r[1], v, r[0], d)]
    })?
    .remove(0))
}

/// `x.masked_fill(mask, value)` with a zero-dimensional tensor `value`.
#[aten(
    "aten::masked_fill.Tensor",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = MaskedFillTensor(self_, mask, value)
)]
pub fn masked_fill_tensor(x: &Tensor, mask: &Tensor, value: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(MaskedFillTensor::NAME, &[x, mask, value])?;
    check_mask(mask)?;
    if value.dim() != 0 {
        return Err(TpuError::BadArgs(format!(
            "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {} dimension(s).",
            value.dim()
        )));
    }
    let d = x.dtype();
    Ok(map(&op, &[x, mask, value], &[d], |p, r| {
        let v = p.cast(r[2], d);
        vec![p.select(r[1], v, r[0], d)]
    })?
    .remove(0))
}

/// `tril` (`lower`) or `triu` of the last two dims, keeping the diagonals `j - i <= k`
/// (`>= k` for `triu`).
fn triangle(name: &str, x: &Tensor, diagonal: i64, lower: bool) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let short = name.trim_start_matches("aten::");
    if x.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "{short}: input tensor must have at least 2 dimensions"
        )));
    }
    let n = x.dim();
    let (rows, cols) = (x.shape()[n - 2] as i64, x.shape()[n - 1] as i64);
    // Beyond these the result no longer changes; clamping keeps the constant in i32.
    let k = diagonal.clamp(-rows - 1, cols + 1);
    let d = x.dtype();
    Ok(map(&op, &[x], &[d], |p, r| {
        let i32t = DType::I32;
        let (i, j) = (p.index(n as u32 - 2), p.index(n as u32 - 1));
        let diff = p.bin(BinOp::Sub, j, i, i32t);
        let kc = p.constant(Scalar::Int(k), i32t);
        let keep = p.cmp(
            if lower { CmpKind::Le } else { CmpKind::Ge },
            diff,
            kc,
            i32t,
        );
        let zero = p.constant(Scalar::Int(0), d);
        vec![p.select(keep, r[0], zero, d)]
    })?
    .remove(0))
}

/// `torch.tril(x, diagonal)`.
pub fn tril(x: &Tensor, diagonal: i64) -> Result<Tensor> {
    triangle(Tril::NAME, x, diagonal, true)
}

/// `torch.triu(x, diagonal)`.
pub fn triu(x: &Tensor, diagonal: i64) -> Result<Tensor> {
    triangle(Triu::NAME, x, diagonal, false)
}

/// `torch.constant_pad_nd(x, pad, value)`: `pad` holds (before, after) pairs from the last dim
/// backwards; negative amounts crop.
#[aten(
    "aten::constant_pad_nd",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Special(Special::Pad),
    call = ConstantPadNd(self_, &pad, value)
)]
pub fn constant_pad_nd(x: &Tensor, pad: &[i64], value: Scalar) -> Result<Tensor> {
    let op = OpScope::new(ConstantPadNd::NAME, &[x])?;
    if !pad.len().is_multiple_of(2) {
        return Err(TpuError::BadArgs(format!(
            "Length of pad must be even but instead it equals {}",
            pad.len()
        )));
    }
    let n = x.dim();
    if pad.len() / 2 > n {
        return Err(TpuError::BadArgs(format!(
            "Length of pad should be no more than twice the number of dimensions of the input. Pad length is {} while the input has {n} dimensions.",
            pad.len()
        )));
    }
    let mut shape = x.shape().to_vec();
    let mut src = x.layout().clone();
    let mut starts = vec![0usize; n];
    for (i, pair) in pad.chunks_exact(2).enumerate() {
        let d = n - 1 - i;
        let (lo, hi) = (pair[0], pair[1]);
        let size = shape[d] as i64;
        let new = size + lo + hi;
        if new < 0 {
            return Err(TpuError::ShapeMismatch(format!(
                "The input size {size}, plus negative padding {lo} and {hi} resulted in a negative output size, which is invalid. Check dimension {d} of your input."
            )));
        }
        let start = (-lo).max(0).min(size);
        let end = (size - (-hi).max(0)).max(start);
        src = src.slice(d as i64, Some(start), Some(end), 1)?;
        starts[d] = lo.max(0) as usize;
        shape[d] = new as usize;
    }
    let d = x.dtype();
    let out = Tensor::empty(op.rt(), &shape, d)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if src.shape != shape {
        write_into(&op, &out, &[], |p, _| p.constant(value, d))?;
    }
    if src.numel() > 0 {
        let mut dst = out.layout().clone();
        for (k, (&start, &len)) in starts.iter().zip(&src.shape).enumerate() {
            dst = dst.slice(k as i64, Some(start as i64), Some((start + len) as i64), 1)?;
        }
        write_into(
            &op,
            &out.with_layout(dst),
            &[&x.with_layout(src)],
            |_, r| r[0],
        )?;
    }
    Ok(out)
}

/// `torch.flip(x, dims)`: a copy with the order of `dims` reversed.
pub fn flip(x: &Tensor, dims: &[i64]) -> Result<Tensor> {
    let op = OpScope::new(Flip::NAME, &[x])?;
    let dims = dims_of(dims, x.dim(), false)?;
    let mut l = x.layout().clone();
    if x.numel() > 0 {
        let ndim = l.ndim();
        for d in dims.into_iter().filter(|d| *d < ndim) {
            let (n, st) = (l.shape[d] as isize, l.strides[d]);
            if n > 1 {
                l.offset = (l.offset as isize + (n - 1) * st) as usize;
                l.strides[d] = -st;
            }
        }
    }
    let v = x.with_layout(l);
    Ok(map_contiguous(&op, &[&v], &[x.dtype()], |_, r| vec![r[0]])?.remove(0))
}

impl Tensor {
    /// `self.masked_fill(mask, value)`.
    pub fn masked_fill(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        masked_fill(self, mask, value.into())
    }

    /// `self.tril(diagonal)`.
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        tril(self, diagonal)
    }

    /// `self.triu(diagonal)`.
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        triu(self, diagonal)
    }

    /// `self.flip(dims)`.
    pub fn flip(&self, dims: &[i64]) -> Result<Tensor> {
        flip(self, dims)
    }

    /// `torch.nn.functional.pad(self, pad, value=value)` (constant mode).
    pub fn pad(&self, pad: &[i64], value: impl Into<Scalar>) -> Result<Tensor> {
        constant_pad_nd(self, pad, value.into())
    }
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::masked_fill.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn masked_fill_scalar_op(a: MaskedFillScalar<'_>) -> Result<Tensor> {
    masked_fill(a.self_, a.mask, a.value)
}

#[aten("aten::tril", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Tril))]
fn tril_op(a: Tril<'_>) -> Result<Tensor> {
    tril(a.self_, a.diagonal)
}

#[aten("aten::triu", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Tril))]
fn triu_op(a: Triu<'_>) -> Result<Tensor> {
    triu(a.self_, a.diagonal)
}

#[aten("aten::flip", dtypes = DType::ALL_TPU, shard = Sharding::Special(Special::Flip))]
fn flip_op(a: Flip<'_>) -> Result<Tensor> {
    flip(a.self_, &a.dims)
}
