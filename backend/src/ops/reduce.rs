//! Reductions: `sum`, `mean`, `prod`, `amax`/`amin`, `max`/`min` (whole tensor, or along a dim
//! with indices), `argmax`/`argmin`, `var`/`std`, `any`/`all`, `aminmax`, `var_mean`/`std_mean`,
//! `count_nonzero`, `linalg_vector_norm` (and the `norm` overloads), `logsumexp`.
//!
//! Each is one tile kernel built by [`rows`]: the reduced dims form the row and the program
//! reduces along it. Float inputs (bf16 and f16 included) accumulate in f32 and are rounded once
//! at the output; integer and bool inputs accumulate in the device's 32-bit integer lanes and
//! sum to int64 as PyTorch's do. A zero-dimensional input is reduced as a one-element row.
//!
//! A reduction of every element of a large tensor (above 64K elements) takes two kernels
//! instead: partial reductions of equal rows, then their combination (module `split`).
//!
//! A reduction over an empty row launches no kernel: the result is filled with the value of the
//! reduction over no elements (0 for `sum`, 1 for `prod`, NaN for `mean`, `var` and `std`), and
//! the reductions that have no such value (`amax`, `max`, `argmax`, ...) raise PyTorch's error.

mod columns;
mod extremes;
mod logical;
mod moments;
mod norms;
mod pairs;
mod split;
mod sum;

use super::args::Args;
use super::creation;
use super::helpers::{OpScope, rows};
use super::registry::{OpDef, OpImpl};
use super::{t1, t2};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{PRef, ProgBuilder};
use crate::ops::sharding::{Dims, RedOp, Sharding};
use crate::tensor::Tensor;
use split::Split;

pub use extremes::{amax, amin, argmax, argmin, max_all, max_dim, min_all, min_dim};
pub use logical::{any_all, count_nonzero};
pub use moments::{std, var};
pub use norms::{logsumexp, vector_norm};
pub use pairs::{aminmax, var_mean};
pub use sum::{mean, mean_all, prod, prod_dim, sum, sum_all};

/// The shape of a reduction's result: `x_shape` without `dims`, or with them as size 1 when
/// `keepdim`.
pub(crate) fn reduced_shape(x_shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    (0..x_shape.len())
        .filter_map(|d| match (dims.contains(&d), keepdim) {
            (false, _) => Some(x_shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Reduces `x` over `dims` (sorted, distinct) with one rows kernel: `f` gets the program, the
/// input node (in `x`'s dtype) and the row length, and returns one per-row value per output.
/// `outs` gives each output's dtype and its value when the row is empty. A single-output
/// reduction that can be split (`split`) reduces a large tensor's every element in two kernels
/// instead.
/// [`reduce`] in one rows kernel, never split (for other operators' own reductions).
pub(crate) fn reduce_unsplit(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    outs: &[(DType, Scalar)],
    f: impl FnOnce(&mut ProgBuilder, PRef, usize) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    reduce(op, x, dims, keepdim, outs, None, f)
}

fn reduce(
    op: &OpScope,
    x: &Tensor,
    dims: &[usize],
    keepdim: bool,
    outs: &[(DType, Scalar)],
    split: Option<Split>,
    f: impl FnOnce(&mut ProgBuilder, PRef, usize) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    // A zero-dimensional tensor is a row of one element (and stays zero-dimensional).
    let (x, dims, keepdim) = if x.dim() == 0 {
        (x.with_layout(x.layout().unsqueeze(0)?), vec![0], false)
    } else {
        (x.clone(), dims.to_vec(), keepdim)
    };
    let row_len: usize = dims.iter().map(|d| x.shape()[*d]).product();
    if row_len == 0 {
        let shape = reduced_shape(x.shape(), &dims, keepdim);
        return outs
            .iter()
            .map(|(d, v)| creation::full(op.rt(), &shape, *v, *d))
            .collect();
    }
    if let Some(sp) = split
        && dims.len() == x.dim()
        && row_len > split::SPLIT_ABOVE
        && outs.len() == 1
        && let Some(t) = split::reduce_all(op, &x, keepdim, outs[0].0, sp)?
    {
        return Ok(vec![t]);
    }
    let out: Vec<(DType, bool)> = outs.iter().map(|(d, _)| (*d, true)).collect();
    rows(
        op,
        x.shape(),
        &dims,
        keepdim,
        &[&x],
        &[false],
        &out,
        |p, r| f(p, r[0], row_len),
    )
}

/// PyTorch's check that no reduced dim is empty (`amax`, `max`, `argmax`, ...): `given` are the
/// dims as the caller wrote them, `None` for a reduction over everything.
fn check_nonempty(name: &str, x: &Tensor, given: Option<&[i64]>) -> Result<()> {
    if x.numel() != 0 {
        return Ok(());
    }
    match given {
        None | Some([]) => Err(TpuError::BadArgs(format!(
            "{name}: Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument."
        ))),
        Some(dims) => {
            for &d in dims {
                if x.size(d)? == 0 {
                    return Err(TpuError::IndexOutOfRange(format!(
                        "{name}: Expected reduction dim {d} to have non-zero size."
                    )));
                }
            }
            Ok(())
        }
    }
}

impl Tensor {
    /// `self.sum(dims, keepdim)`; an empty `dims` sums everything.
    pub fn sum(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        sum(self, dims, keepdim, None)
    }

    /// `self.sum()`: every element.
    pub fn sum_all(&self) -> Result<Tensor> {
        sum_all(self, None)
    }

    /// `self.mean(dims, keepdim)`.
    pub fn mean(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        mean(self, dims, keepdim, None)
    }

    /// `self.mean()`: every element.
    pub fn mean_all(&self) -> Result<Tensor> {
        mean_all(self, None)
    }

    /// `self.prod()`: every element.
    pub fn prod(&self) -> Result<Tensor> {
        prod(self, None)
    }

    /// `self.amax(dims, keepdim)`.
    pub fn amax(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        amax(self, dims, keepdim)
    }

    /// `self.amin(dims, keepdim)`.
    pub fn amin(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        amin(self, dims, keepdim)
    }

    /// `self.max(dim, keepdim)`: `(values, indices)`.
    pub fn max_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        max_dim(self, dim, keepdim)
    }

    /// `self.min(dim, keepdim)`: `(values, indices)`.
    pub fn min_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        min_dim(self, dim, keepdim)
    }

    /// `self.argmax(dim, keepdim)`.
    pub fn argmax(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        argmax(self, dim, keepdim)
    }

    /// `self.argmin(dim, keepdim)`.
    pub fn argmin(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        argmin(self, dim, keepdim)
    }

    /// `self.var(dims, correction=correction, keepdim=keepdim)`; an empty `dims` reduces
    /// everything.
    pub fn var(&self, dims: &[i64], correction: f64, keepdim: bool) -> Result<Tensor> {
        var(self, Some(dims), Some(correction), keepdim)
    }

    /// `self.std(dims, correction=correction, keepdim=keepdim)`.
    pub fn std(&self, dims: &[i64], correction: f64, keepdim: bool) -> Result<Tensor> {
        std(self, Some(dims), Some(correction), keepdim)
    }
}

/// An optional `Scalar` argument as f64.
fn opt_f64(a: &Args, i: usize) -> Result<Option<f64>> {
    a.get(i)
        .map(|_| a.scalar(i).map(Scalar::to_f64))
        .transpose()
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let all = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    let num = DType::NUMERIC;
    let float = DType::FLOATING;
    let k = OpImpl::Kernel;
    vec![
        OpDef::new("aten::sum", k, all, |_, a| {
            t1(sum_all(a.tensor(0)?, a.opt_dtype(1)?))
        })
        .shard(Sharding::reduction(RedOp::Sum, Dims::All, None)),
        OpDef::new("aten::sum.dim_IntList", k, all, |_, a| {
            t1(sum(
                a.tensor(0)?,
                &a.opt_ints(1)?.unwrap_or_default(),
                a.bool(2)?,
                a.opt_dtype(3)?,
            ))
        })
        .shard(Sharding::reduction(RedOp::Sum, Dims::List(1), Some(2))),
        OpDef::new("aten::mean", k, all, |_, a| {
            t1(mean_all(a.tensor(0)?, a.opt_dtype(1)?))
        })
        .shard(Sharding::reduction(RedOp::Mean, Dims::All, None)),
        OpDef::new("aten::mean.dim", k, all, |_, a| {
            t1(mean(
                a.tensor(0)?,
                &a.opt_ints(1)?.unwrap_or_default(),
                a.bool(2)?,
                a.opt_dtype(3)?,
            ))
        })
        .shard(Sharding::reduction(RedOp::Mean, Dims::List(1), Some(2))),
        OpDef::new("aten::prod", k, all, |_, a| {
            t1(prod(a.tensor(0)?, a.opt_dtype(1)?))
        })
        .shard(Sharding::reduction(RedOp::Other, Dims::All, None)),
        OpDef::new("aten::prod.dim_int", k, all, |_, a| {
            t1(prod_dim(
                a.tensor(0)?,
                a.int(1)?,
                a.bool(2)?,
                a.opt_dtype(3)?,
            ))
        })
        .shard(Sharding::reduction(RedOp::Other, Dims::One(1), Some(2))),
        OpDef::new("aten::amax", k, all, |_, a| {
            t1(amax(a.tensor(0)?, &a.ints(1)?, a.bool(2)?))
        })
        .shard(Sharding::reduction(RedOp::Max, Dims::List(1), Some(2))),
        OpDef::new("aten::amin", k, all, |_, a| {
            t1(amin(a.tensor(0)?, &a.ints(1)?, a.bool(2)?))
        })
        .shard(Sharding::reduction(RedOp::Min, Dims::List(1), Some(2))),
        OpDef::new("aten::max", k, all, |_, a| t1(max_all(a.tensor(0)?)))
            .shard(Sharding::reduction(RedOp::Max, Dims::All, None)),
        OpDef::new("aten::min", k, all, |_, a| t1(min_all(a.tensor(0)?)))
            .shard(Sharding::reduction(RedOp::Min, Dims::All, None)),
        OpDef::new("aten::max.dim", k, all, |_, a| {
            t2(max_dim(a.tensor(0)?, a.int(1)?, a.bool(2)?))
        })
        .shard(Sharding::Reduction {
            kind: RedOp::Other,
            dims: Dims::One(1),
            keepdim: Some(2),
            outputs: 2,
        }),
        OpDef::new("aten::min.dim", k, all, |_, a| {
            t2(min_dim(a.tensor(0)?, a.int(1)?, a.bool(2)?))
        })
        .shard(Sharding::Reduction {
            kind: RedOp::Other,
            dims: Dims::One(1),
            keepdim: Some(2),
            outputs: 2,
        }),
        OpDef::new("aten::argmax", k, num, |_, a| {
            t1(argmax(a.tensor(0)?, a.opt_int(1)?, a.bool(2)?))
        })
        .shard(Sharding::reduction(RedOp::Other, Dims::OptOne(1), Some(2))),
        OpDef::new("aten::argmin", k, num, |_, a| {
            t1(argmin(a.tensor(0)?, a.opt_int(1)?, a.bool(2)?))
        })
        .shard(Sharding::reduction(RedOp::Other, Dims::OptOne(1), Some(2))),
        OpDef::new("aten::var.correction", k, float, |_, a| {
            t1(var(
                a.tensor(0)?,
                a.opt_ints(1)?.as_deref(),
                opt_f64(a, 2)?,
                a.bool(3)?,
            ))
        })
        .shard(Sharding::reduction(RedOp::Other, Dims::List(1), Some(3))),
        OpDef::new("aten::std.correction", k, float, |_, a| {
            t1(std(
                a.tensor(0)?,
                a.opt_ints(1)?.as_deref(),
                opt_f64(a, 2)?,
                a.bool(3)?,
            ))
        })
        .shard(Sharding::reduction(RedOp::Other, Dims::List(1), Some(3))),
    ]
    .into_iter()
    .chain(more_defs())
    .collect()
}

/// An `unbiased` argument as a correction.
fn unbiased(a: &Args, i: usize) -> Result<Option<f64>> {
    Ok(Some(if a.bool_or(i, true)? { 1.0 } else { 0.0 }))
}

fn two_out(dims: Dims, keepdim: Option<usize>) -> Sharding {
    Sharding::Reduction {
        kind: RedOp::Other,
        dims,
        keepdim,
        outputs: 2,
    }
}

/// `any`/`all`, `aminmax`, `var_mean`/`std_mean`, the vector norms and `logsumexp`.
fn more_defs() -> Vec<OpDef> {
    let all = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    let float = DType::FLOATING;
    let (k, dec) = (OpImpl::Kernel, OpImpl::Decomposition);
    let red = |dims, keep| Sharding::reduction(RedOp::Other, dims, keep);
    vec![
        OpDef::new("aten::any", k, all, |_, a| {
            t1(any_all("aten::any", a.tensor(0)?, None, false, true))
        })
        .shard(red(Dims::All, None)),
        OpDef::new("aten::any.dim", k, all, |_, a| {
            let d = [a.int(1)?];
            t1(any_all(
                "aten::any.dim",
                a.tensor(0)?,
                Some(&d),
                a.bool(2)?,
                true,
            ))
        })
        .shard(red(Dims::One(1), Some(2))),
        OpDef::new("aten::any.dims", k, all, |_, a| {
            let d = a.opt_ints(1)?;
            t1(any_all(
                "aten::any.dims",
                a.tensor(0)?,
                d.as_deref(),
                a.bool(2)?,
                true,
            ))
        })
        .shard(red(Dims::List(1), Some(2))),
        OpDef::new("aten::all", k, all, |_, a| {
            t1(any_all("aten::all", a.tensor(0)?, None, false, false))
        })
        .shard(red(Dims::All, None)),
        OpDef::new("aten::all.dim", k, all, |_, a| {
            let d = [a.int(1)?];
            t1(any_all(
                "aten::all.dim",
                a.tensor(0)?,
                Some(&d),
                a.bool(2)?,
                false,
            ))
        })
        .shard(red(Dims::One(1), Some(2))),
        OpDef::new("aten::all.dims", k, all, |_, a| {
            let d = a.opt_ints(1)?;
            t1(any_all(
                "aten::all.dims",
                a.tensor(0)?,
                d.as_deref(),
                a.bool(2)?,
                false,
            ))
        })
        .shard(red(Dims::List(1), Some(2))),
        OpDef::new("aten::count_nonzero", k, all, |_, a| {
            let d = a.opt_int(1)?.map(|d| vec![d]);
            t1(count_nonzero(
                "aten::count_nonzero",
                a.tensor(0)?,
                d.as_deref(),
            ))
        })
        .shard(red(Dims::OptOne(1), None)),
        OpDef::new("aten::count_nonzero.dim_IntList", k, all, |_, a| {
            let d = a.ints(1)?;
            t1(count_nonzero(
                "aten::count_nonzero.dim_IntList",
                a.tensor(0)?,
                Some(&d),
            ))
        })
        .shard(red(Dims::List(1), None)),
        OpDef::new("aten::aminmax", k, all, |_, a| {
            t2(aminmax(a.tensor(0)?, a.opt_int(1)?, a.bool(2)?))
        })
        .shard(two_out(Dims::OptOne(1), Some(2))),
        OpDef::new("aten::var_mean.correction", k, float, |_, a| {
            let d = a.opt_ints(1)?;
            t2(var_mean(
                "aten::var_mean.correction",
                a.tensor(0)?,
                d.as_deref(),
                opt_f64(a, 2)?,
                a.bool(3)?,
                false,
            ))
        })
        .shard(two_out(Dims::List(1), Some(3))),
        OpDef::new("aten::std_mean.correction", k, float, |_, a| {
            let d = a.opt_ints(1)?;
            t2(var_mean(
                "aten::std_mean.correction",
                a.tensor(0)?,
                d.as_deref(),
                opt_f64(a, 2)?,
                a.bool(3)?,
                true,
            ))
        })
        .shard(two_out(Dims::List(1), Some(3))),
        OpDef::new("aten::var_mean", k, float, |_, a| {
            let c = unbiased(a, 1)?;
            t2(var_mean(
                "aten::var_mean",
                a.tensor(0)?,
                None,
                c,
                false,
                false,
            ))
        })
        .shard(two_out(Dims::All, None)),
        OpDef::new("aten::std_mean", k, float, |_, a| {
            let c = unbiased(a, 1)?;
            t2(var_mean(
                "aten::std_mean",
                a.tensor(0)?,
                None,
                c,
                false,
                true,
            ))
        })
        .shard(two_out(Dims::All, None)),
        OpDef::new("aten::var_mean.dim", k, float, |_, a| {
            let d = a.opt_ints(1)?;
            let c = unbiased(a, 2)?;
            t2(var_mean(
                "aten::var_mean.dim",
                a.tensor(0)?,
                d.as_deref(),
                c,
                a.bool(3)?,
                false,
            ))
        })
        .shard(two_out(Dims::List(1), Some(3))),
        OpDef::new("aten::std_mean.dim", k, float, |_, a| {
            let d = a.opt_ints(1)?;
            let c = unbiased(a, 2)?;
            t2(var_mean(
                "aten::std_mean.dim",
                a.tensor(0)?,
                d.as_deref(),
                c,
                a.bool(3)?,
                true,
            ))
        })
        .shard(two_out(Dims::List(1), Some(3))),
        OpDef::new("aten::linalg_vector_norm", k, float, |_, a| {
            let d = a.opt_ints(2)?;
            t1(vector_norm(
                "aten::linalg_vector_norm",
                a.tensor(0)?,
                a.scalar_or(1, Scalar::Int(2))?.to_f64(),
                d.as_deref(),
                a.bool(3)?,
                a.opt_dtype(4)?,
            ))
        })
        .shard(red(Dims::List(2), Some(3))),
        OpDef::new("aten::norm.Scalar", dec, float, |_, a| {
            let p = a.scalar_or(1, Scalar::Int(2))?.to_f64();
            t1(vector_norm(
                "aten::norm.Scalar",
                a.tensor(0)?,
                p,
                None,
                false,
                None,
            ))
        })
        .shard(red(Dims::All, None)),
        OpDef::new("aten::norm.ScalarOpt_dim", dec, float, |_, a| {
            let p = opt_f64(a, 1)?.unwrap_or(2.0);
            let d = a.ints(2)?;
            t1(vector_norm(
                "aten::norm.ScalarOpt_dim",
                a.tensor(0)?,
                p,
                Some(&d),
                a.bool(3)?,
                None,
            ))
        })
        .shard(red(Dims::List(2), Some(3))),
        OpDef::new("aten::norm.ScalarOpt_dim_dtype", dec, float, |_, a| {
            let p = opt_f64(a, 1)?.unwrap_or(2.0);
            let d = a.ints(2)?;
            t1(vector_norm(
                "aten::norm.ScalarOpt_dim_dtype",
                a.tensor(0)?,
                p,
                Some(&d),
                a.bool(3)?,
                a.opt_dtype(4)?,
            ))
        })
        .shard(red(Dims::List(2), Some(3))),
        OpDef::new("aten::norm.ScalarOpt_dtype", dec, float, |_, a| {
            let p = opt_f64(a, 1)?.unwrap_or(2.0);
            t1(vector_norm(
                "aten::norm.ScalarOpt_dtype",
                a.tensor(0)?,
                p,
                None,
                false,
                a.opt_dtype(2)?,
            ))
        })
        .shard(red(Dims::All, None)),
        OpDef::new("aten::logsumexp", k, all, |_, a| {
            t1(logsumexp(a.tensor(0)?, &a.ints(1)?, a.bool(2)?))
        })
        .shard(red(Dims::List(1), Some(2))),
    ]
}
