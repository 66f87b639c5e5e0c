//! `any` and `all` (every element, one dim, or a list of dims): whether some (every) element is
//! non-zero, as a bool; NaN counts as non-zero. One rows kernel reduces `x != 0` by maximum
//! (`any`) or minimum (`all`); over no elements `any` is false and `all` is true.

use super::reduce;
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{CmpKind, RedKind};
use crate::ops::helpers::{OpScope, dims_of};
use crate::tensor::Tensor;

/// `any`/`all` of `x` over `dims` (`None` or empty: every dim).
pub fn any_all(
    name: &str,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    any: bool,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let dims = dims_of(dims.unwrap_or(&[]), x.dim(), true)?;
    let dt = x.dtype();
    let kind = if any { RedKind::Max } else { RedKind::Min };
    Ok(reduce(
        &op,
        x,
        &dims,
        keepdim,
        &[(DType::Bool, Scalar::Bool(!any))],
        None,
        |p, v, _| {
            let zero = p.constant(Scalar::Int(0), dt);
            let nz = p.cmp(CmpKind::Ne, v, zero, dt);
            let nz = p.cast(nz, DType::I32);
            let r = p.reduce(kind, nz, DType::I32);
            vec![p.cast(r, DType::Bool)]
        },
    )?
    .remove(0))
}

/// `torch.count_nonzero(x, dims)`: how many elements are non-zero (NaN counts), as int64;
/// `None` or an empty list counts over every dim.
pub fn count_nonzero(name: &str, x: &Tensor, dims: Option<&[i64]>) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let dims = dims_of(dims.unwrap_or(&[]), x.dim(), true)?;
    let dt = x.dtype();
    Ok(reduce(
        &op,
        x,
        &dims,
        false,
        &[(DType::I64, Scalar::Int(0))],
        None,
        |p, v, _| {
            let zero = p.constant(Scalar::Int(0), dt);
            let nz = p.cmp(CmpKind::Ne, v, zero, dt);
            let nz = p.cast(nz, DType::I32);
            vec![p.reduce(RedKind::Sum, nz, DType::I64)]
        },
    )?
    .remove(0))
}
