//! `amax`/`amin`, `max`/`min` (whole tensor, or along a dim with indices), `argmax`/`argmin`:
//! NaN propagates to the values and counts as the extreme for the indices; ties give the first
//! index.

use super::split::Split;
use super::{check_nonempty, reduce};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::RedKind;
use crate::layout::wrap_dim;
use crate::ops::helpers::{OpScope, dims_of};
use crate::tensor::Tensor;

/// Maxima and minima of chunks combine exactly.
fn exact_split(kind: RedKind, dt: DType) -> Split {
    Split::Assoc {
        kind,
        pre: dt,
        acc: dt,
        mean: false,
    }
}

/// `amax`/`amin` over `dims` (empty: all).
fn extreme(name: &str, x: &Tensor, dims: &[i64], keepdim: bool, max: bool) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    check_nonempty(if max { "amax()" } else { "amin()" }, x, Some(dims))?;
    let d = dims_of(dims, x.dim(), true)?;
    let dt = x.dtype();
    let kind = if max { RedKind::Max } else { RedKind::Min };
    Ok(reduce(
        &op,
        x,
        &d,
        keepdim,
        &[(dt, Scalar::Int(0))],
        Some(exact_split(kind, dt)),
        |p, v, _| vec![p.reduce(kind, v, dt)],
    )?
    .remove(0))
}

/// `torch.amax(x, dims, keepdim)`: NaN propagates; an empty `dims` reduces everything.
pub fn amax(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    extreme("aten::amax", x, dims, keepdim, true)
}

/// `torch.amin(x, dims, keepdim)`.
pub fn amin(x: &Tensor, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    extreme("aten::amin", x, dims, keepdim, false)
}

/// `max`/`min` of every element (`aten::max`, `aten::min`).
fn extreme_all(x: &Tensor, max: bool) -> Result<Tensor> {
    let op = OpScope::new(if max { "aten::max" } else { "aten::min" }, &[x])?;
    check_nonempty(if max { "max()" } else { "min()" }, x, None)?;
    let dims: Vec<usize> = (0..x.dim()).collect();
    let dt = x.dtype();
    let kind = if max { RedKind::Max } else { RedKind::Min };
    Ok(reduce(
        &op,
        x,
        &dims,
        false,
        &[(dt, Scalar::Int(0))],
        Some(exact_split(kind, dt)),
        |p, v, _| vec![p.reduce(kind, v, dt)],
    )?
    .remove(0))
}

/// `torch.max(x)`: the largest element (NaN if any is NaN).
pub fn max_all(x: &Tensor) -> Result<Tensor> {
    extreme_all(x, true)
}

/// `torch.min(x)`: the smallest element (NaN if any is NaN).
pub fn min_all(x: &Tensor) -> Result<Tensor> {
    extreme_all(x, false)
}

/// `max.dim`/`min.dim`: values and int64 indices (the first extreme; NaN counts as extreme).
fn extreme_dim(x: &Tensor, dim: i64, keepdim: bool, max: bool) -> Result<(Tensor, Tensor)> {
    let name = if max {
        "aten::max.dim"
    } else {
        "aten::min.dim"
    };
    let op = OpScope::new(name, &[x])?;
    let d = wrap_dim(dim, x.dim())?;
    check_nonempty(if max { "max()" } else { "min()" }, x, Some(&[dim]))?;
    let dt = x.dtype();
    let kind = if max { RedKind::Max } else { RedKind::Min };
    let mut out = reduce(
        &op,
        x,
        &[d],
        keepdim,
        &[(dt, Scalar::Int(0)), (DType::I64, Scalar::Int(0))],
        None,
        |p, v, _| vec![p.reduce(kind, v, dt), p.arg(max, v)],
    )?;
    let indices = out.remove(1);
    Ok((out.remove(0), indices))
}

/// `torch.max(x, dim, keepdim)`: `(values, indices)`.
pub fn max_dim(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    extreme_dim(x, dim, keepdim, true)
}

/// `torch.min(x, dim, keepdim)`: `(values, indices)`.
pub fn min_dim(x: &Tensor, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
    extreme_dim(x, dim, keepdim, false)
}

/// `argmax`/`argmin`: `dim` None flattens (with `keepdim`, every dim becomes size 1).
fn arg_extreme(x: &Tensor, dim: Option<i64>, keepdim: bool, max: bool) -> Result<Tensor> {
    let (name, short) = if max {
        ("aten::argmax", "argmax()")
    } else {
        ("aten::argmin", "argmin()")
    };
    let op = OpScope::new(name, &[x])?;
    if x.dtype() == DType::Bool {
        return Err(TpuError::Unsupported(format!(
            "\"{}_cpu\" not implemented for 'Bool'",
            if max { "argmax" } else { "argmin" }
        )));
    }
    let dims: Vec<usize> = match dim {
        None => (0..x.dim()).collect(),
        Some(d) => vec![wrap_dim(d, x.dim())?],
    };
    match dim {
        None => check_nonempty(short, x, None)?,
        Some(d) => check_nonempty(short, x, Some(&[d]))?,
    }
    Ok(reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(DType::I64, Scalar::Int(0))],
        None,
        |p, v, _| vec![p.arg(max, v)],
    )?
    .remove(0))
}

/// `torch.argmax(x, dim, keepdim)`: the index of the first maximum (NaN counts as the maximum).
pub fn argmax(x: &Tensor, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
    arg_extreme(x, dim, keepdim, true)
}

/// `torch.argmin(x, dim, keepdim)`: the index of the first minimum (NaN counts as the minimum).
pub fn argmin(x: &Tensor, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
    arg_extreme(x, dim, keepdim, false)
}
