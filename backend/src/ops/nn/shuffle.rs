//! Channel rearrangements: `pixel_shuffle`, `pixel_unshuffle` and `channel_shuffle`. Each is a
//! view of the input with its dims split and permuted, copied to a contiguous result by one
//! tile kernel (PyTorch's CPU kernels return a contiguous tensor too).

use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape};
use crate::tensor::Tensor;

/// `x` seen with the (row-major) `split` shape, permuted by `perm`, copied contiguously and
/// seen with `out` shape.
fn rearrange(
    op: &OpScope,
    x: &Tensor,
    split: &[usize],
    perm: &[i64],
    out: &[usize],
) -> Result<Tensor> {
    let x = match x.layout().view_as(split) {
        Some(l) => x.with_layout(l),
        None => {
            let c = map_shape(op, x.shape(), &[x], &[x.dtype()], |_, r| vec![r[0]])?.remove(0);
            c.with_layout(Layout::contiguous(split))
        }
    };
    let v = x.with_layout(x.layout().permute(perm)?);
    let c = map_shape(op, v.shape(), &[&v], &[v.dtype()], |_, r| vec![r[0]])?.remove(0);
    Ok(c.with_layout(Layout::contiguous(out)))
}

/// The permutation keeping the `lead` batch dims and then following `tail` (indices into the
/// dims after the batch dims).
fn perm_of(lead: usize, tail: &[usize]) -> Vec<i64> {
    (0..lead)
        .chain(tail.iter().map(|t| lead + t))
        .map(|d| d as i64)
        .collect()
}

/// `F.pixel_shuffle(x, r)`: `[*, C·r², H, W]` to `[*, C, H·r, W·r]`.
pub fn pixel_shuffle(x: &Tensor, r: i64) -> Result<Tensor> {
    let op = OpScope::new("aten::pixel_shuffle", &[x])?;
    if x.dim() < 3 {
        return Err(TpuError::BadArgs(format!(
            "pixel_shuffle expects input to have at least 3 dimensions, but got input with {} dimension(s)",
            x.dim()
        )));
    }
    if r <= 0 {
        return Err(TpuError::BadArgs(format!(
            "pixel_shuffle expects a positive upscale_factor, but got {r}"
        )));
    }
    let r = r as usize;
    let n = x.dim();
    let (c, h, w) = (x.shape()[n - 3], x.shape()[n - 2], x.shape()[n - 1]);
    if !c.is_multiple_of(r * r) {
        return Err(TpuError::BadArgs(format!(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, but input.size(-3)={c} is not divisible by {}",
            r * r
        )));
    }
    let lead = &x.shape()[..n - 3];
    let oc = c / (r * r);
    let split: Vec<usize> = lead.iter().copied().chain([oc, r, r, h, w]).collect();
    let out: Vec<usize> = lead.iter().copied().chain([oc, h * r, w * r]).collect();
    rearrange(&op, x, &split, &perm_of(n - 3, &[0, 3, 1, 4, 2]), &out)
}

/// `F.pixel_unshuffle(x, r)`: `[*, C, H·r, W·r]` to `[*, C·r², H, W]`.
pub fn pixel_unshuffle(x: &Tensor, r: i64) -> Result<Tensor> {
    let op = OpScope::new("aten::pixel_unshuffle", &[x])?;
    if x.dim() < 3 {
        return Err(TpuError::BadArgs(format!(
            "pixel_unshuffle expects input to have at least 3 dimensions, but got input with {} dimension(s)",
            x.dim()
        )));
    }
    if r <= 0 {
        return Err(TpuError::BadArgs(format!(
            "pixel_unshuffle expects a positive downscale_factor, but got {r}"
        )));
    }
    let r = r as usize;
    let n = x.dim();
    let (c, h, w) = (x.shape()[n - 3], x.shape()[n - 2], x.shape()[n - 1]);
    if !h.is_multiple_of(r) || !w.is_multiple_of(r) {
        return Err(TpuError::BadArgs(format!(
            "pixel_unshuffle expects height ({h}) and width ({w}) to be divisible by downscale_factor ({r})"
        )));
    }
    let lead = &x.shape()[..n - 3];
    let split: Vec<usize> = lead
        .iter()
        .copied()
        .chain([c, h / r, r, w / r, r])
        .collect();
    let out: Vec<usize> = lead
        .iter()
        .copied()
        .chain([c * r * r, h / r, w / r])
        .collect();
    rearrange(&op, x, &split, &perm_of(n - 3, &[0, 2, 4, 1, 3]), &out)
}

/// `F.channel_shuffle(x, groups)`: `[N, g·k, *]` seen as `[N, g, k, *]`, transposed to
/// `[N, k, g, *]`.
pub fn channel_shuffle(x: &Tensor, groups: i64) -> Result<Tensor> {
    let op = OpScope::new("aten::channel_shuffle", &[x])?;
    if x.dim() < 3 {
        return Err(TpuError::BadArgs(format!(
            "channel_shuffle expects input to have at least 3 dimensions, but got input with {} dimension(s)",
            x.dim()
        )));
    }
    if groups <= 0 {
        return Err(TpuError::BadArgs(format!(
            "Number of groups to divide channels in must be positive. Value of groups:{groups}"
        )));
    }
    let g = groups as usize;
    let c = x.shape()[1];
    if !c.is_multiple_of(g) {
        return Err(TpuError::BadArgs(format!(
            "Number of channels must be divisible by groups. Got {c} channels and {g} groups."
        )));
    }
    let mut split = vec![x.shape()[0], g, c / g];
    split.extend_from_slice(&x.shape()[2..]);
    let mut perm: Vec<i64> = vec![0, 2, 1];
    perm.extend((3..split.len()).map(|d| d as i64));
    rearrange(&op, x, &split, &perm, x.shape())
}
