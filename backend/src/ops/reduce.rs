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

use super::aten;
use super::creation;
use super::helpers::{OpScope, rows};
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

/// An `unbiased` argument as a correction.
fn unbiased(unbiased: bool) -> Option<f64> {
    Some(if unbiased { 1.0 } else { 0.0 })
}

/// A one-output reduction's rule that is neither a sum, a mean, a max nor a min.
fn red(dims: Dims, keepdim: Option<usize>) -> Sharding {
    Sharding::reduction(RedOp::Other, dims, keepdim)
}

fn two_out(dims: Dims, keepdim: Option<usize>) -> Sharding {
    Sharding::Reduction {
        kind: RedOp::Other,
        dims,
        keepdim,
        outputs: 2,
    }
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::sum", dtypes = DType::ALL_TPU, shard = Sharding::reduction(RedOp::Sum, Dims::All, None))]
fn sum_op(a: Sum<'_>) -> Result<Tensor> {
    sum_all(a.self_, a.dtype)
}

#[aten(
    "aten::sum.dim_IntList",
    dtypes = DType::ALL_TPU,
    shard = Sharding::reduction(RedOp::Sum, Dims::List(1), Some(2))
)]
fn sum_dim_int_list_op(a: SumDimIntList<'_>) -> Result<Tensor> {
    sum(a.self_, &a.dim.unwrap_or_default(), a.keepdim, a.dtype)
}

#[aten("aten::mean", dtypes = DType::ALL_TPU, shard = Sharding::reduction(RedOp::Mean, Dims::All, None))]
fn mean_op(a: Mean<'_>) -> Result<Tensor> {
    mean_all(a.self_, a.dtype)
}

#[aten(
    "aten::mean.dim",
    dtypes = DType::ALL_TPU,
    shard = Sharding::reduction(RedOp::Mean, Dims::List(1), Some(2))
)]
fn mean_dim_op(a: MeanDim<'_>) -> Result<Tensor> {
    mean(a.self_, &a.dim.unwrap_or_default(), a.keepdim, a.dtype)
}

#[aten("aten::prod", dtypes = DType::ALL_TPU, shard = red(Dims::All, None))]
fn prod_op(a: Prod<'_>) -> Result<Tensor> {
    prod(a.self_, a.dtype)
}

#[aten("aten::prod.dim_int", dtypes = DType::ALL_TPU, shard = red(Dims::One(1), Some(2)))]
fn prod_dim_int_op(a: ProdDimInt<'_>) -> Result<Tensor> {
    prod_dim(a.self_, a.dim, a.keepdim, a.dtype)
}

#[aten(
    "aten::amax",
    dtypes = DType::ALL_TPU,
    shard = Sharding::reduction(RedOp::Max, Dims::List(1), Some(2))
)]
fn amax_op(a: Amax<'_>) -> Result<Tensor> {
    amax(a.self_, &a.dim, a.keepdim)
}

#[aten(
    "aten::amin",
    dtypes = DType::ALL_TPU,
    shard = Sharding::reduction(RedOp::Min, Dims::List(1), Some(2))
)]
fn amin_op(a: Amin<'_>) -> Result<Tensor> {
    amin(a.self_, &a.dim, a.keepdim)
}

#[aten("aten::max", dtypes = DType::ALL_TPU, shard = Sharding::reduction(RedOp::Max, Dims::All, None))]
fn max_op(a: Max<'_>) -> Result<Tensor> {
    max_all(a.self_)
}

#[aten("aten::min", dtypes = DType::ALL_TPU, shard = Sharding::reduction(RedOp::Min, Dims::All, None))]
fn min_op(a: Min<'_>) -> Result<Tensor> {
    min_all(a.self_)
}

#[aten("aten::max.dim", dtypes = DType::ALL_TPU, shard = two_out(Dims::One(1), Some(2)))]
fn max_dim_op(a: MaxDim<'_>) -> Result<(Tensor, Tensor)> {
    max_dim(a.self_, a.dim, a.keepdim)
}

#[aten("aten::min.dim", dtypes = DType::ALL_TPU, shard = two_out(Dims::One(1), Some(2)))]
fn min_dim_op(a: MinDim<'_>) -> Result<(Tensor, Tensor)> {
    min_dim(a.self_, a.dim, a.keepdim)
}

#[aten("aten::argmax", dtypes = DType::NUMERIC, shard = red(Dims::OptOne(1), Some(2)))]
fn argmax_op(a: Argmax<'_>) -> Result<Tensor> {
    argmax(a.self_, a.dim, a.keepdim)
}

#[aten("aten::argmin", dtypes = DType::NUMERIC, shard = red(Dims::OptOne(1), Some(2)))]
fn argmin_op(a: Argmin<'_>) -> Result<Tensor> {
    argmin(a.self_, a.dim, a.keepdim)
}

#[aten("aten::var.correction", dtypes = DType::FLOATING, shard = red(Dims::List(1), Some(3)))]
fn var_correction_op(a: VarCorrection<'_>) -> Result<Tensor> {
    let c = a.correction.map(Scalar::to_f64);
    var(a.self_, a.dim.as_deref(), c, a.keepdim)
}

#[aten("aten::std.correction", dtypes = DType::FLOATING, shard = red(Dims::List(1), Some(3)))]
fn std_correction_op(a: StdCorrection<'_>) -> Result<Tensor> {
    let c = a.correction.map(Scalar::to_f64);
    std(a.self_, a.dim.as_deref(), c, a.keepdim)
}

#[aten("aten::any", dtypes = DType::ALL_TPU, shard = red(Dims::All, None))]
fn any_op(a: Any<'_>) -> Result<Tensor> {
    any_all(Any::NAME, a.self_, None, false, true)
}

#[aten("aten::any.dim", dtypes = DType::ALL_TPU, shard = red(Dims::One(1), Some(2)))]
fn any_dim_op(a: AnyDim<'_>) -> Result<Tensor> {
    any_all(AnyDim::NAME, a.self_, Some(&[a.dim]), a.keepdim, true)
}

#[aten("aten::any.dims", dtypes = DType::ALL_TPU, shard = red(Dims::List(1), Some(2)))]
fn any_dims_op(a: AnyDims<'_>) -> Result<Tensor> {
    any_all(AnyDims::NAME, a.self_, a.dim.as_deref(), a.keepdim, true)
}

#[aten("aten::all", dtypes = DType::ALL_TPU, shard = red(Dims::All, None))]
fn all_op(a: All<'_>) -> Result<Tensor> {
    any_all(All::NAME, a.self_, None, false, false)
}

#[aten("aten::all.dim", dtypes = DType::ALL_TPU, shard = red(Dims::One(1), Some(2)))]
fn all_dim_op(a: AllDim<'_>) -> Result<Tensor> {
    any_all(AllDim::NAME, a.self_, Some(&[a.dim]), a.keepdim, false)
}

#[aten("aten::all.dims", dtypes = DType::ALL_TPU, shard = red(Dims::List(1), Some(2)))]
fn all_dims_op(a: AllDims<'_>) -> Result<Tensor> {
    any_all(AllDims::NAME, a.self_, a.dim.as_deref(), a.keepdim, false)
}

#[aten("aten::count_nonzero", dtypes = DType::ALL_TPU, shard = red(Dims::OptOne(1), None))]
fn count_nonzero_op(a: CountNonzero<'_>) -> Result<Tensor> {
    let d = a.dim.map(|d| vec![d]);
    count_nonzero(CountNonzero::NAME, a.self_, d.as_deref())
}

#[aten(
    "aten::count_nonzero.dim_IntList",
    dtypes = DType::ALL_TPU,
    shard = red(Dims::List(1), None)
)]
fn count_nonzero_dim_int_list_op(a: CountNonzeroDimIntList<'_>) -> Result<Tensor> {
    count_nonzero(CountNonzeroDimIntList::NAME, a.self_, Some(&a.dim))
}

#[aten("aten::aminmax", dtypes = DType::ALL_TPU, shard = two_out(Dims::OptOne(1), Some(2)))]
fn aminmax_op(a: Aminmax<'_>) -> Result<(Tensor, Tensor)> {
    aminmax(a.self_, a.dim, a.keepdim)
}

#[aten(
    "aten::var_mean.correction",
    dtypes = DType::FLOATING,
    shard = two_out(Dims::List(1), Some(3))
)]
fn var_mean_correction_op(a: VarMeanCorrection<'_>) -> Result<(Tensor, Tensor)> {
    let c = a.correction.map(Scalar::to_f64);
    var_mean(
        VarMeanCorrection::NAME,
        a.self_,
        a.dim.as_deref(),
        c,
        a.keepdim,
        false,
    )
}

#[aten(
    "aten::std_mean.correction",
    dtypes = DType::FLOATING,
    shard = two_out(Dims::List(1), Some(3))
)]
fn std_mean_correction_op(a: StdMeanCorrection<'_>) -> Result<(Tensor, Tensor)> {
    let c = a.correction.map(Scalar::to_f64);
    var_mean(
        StdMeanCorrection::NAME,
        a.self_,
        a.dim.as_deref(),
        c,
        a.keepdim,
        true,
    )
}

#[aten("aten::var_mean", dtypes = DType::FLOATING, shard = two_out(Dims::All, None))]
fn var_mean_op(a: VarMean<'_>) -> Result<(Tensor, Tensor)> {
    var_mean(
        VarMean::NAME,
        a.self_,
        None,
        unbiased(a.unbiased),
        false,
        false,
    )
}

#[aten("aten::std_mean", dtypes = DType::FLOATING, shard = two_out(Dims::All, None))]
fn std_mean_op(a: StdMean<'_>) -> Result<(Tensor, Tensor)> {
    var_mean(
        StdMean::NAME,
        a.self_,
        None,
        unbiased(a.unbiased),
        false,
        true,
    )
}

#[aten("aten::var_mean.dim", dtypes = DType::FLOATING, shard = two_out(Dims::List(1), Some(3)))]
fn var_mean_dim_op(a: VarMeanDim<'_>) -> Result<(Tensor, Tensor)> {
    let c = unbiased(a.unbiased);
    var_mean(
        VarMeanDim::NAME,
        a.self_,
        a.dim.as_deref(),
        c,
        a.keepdim,
        false,
    )
}

#[aten("aten::std_mean.dim", dtypes = DType::FLOATING, shard = two_out(Dims::List(1), Some(3)))]
fn std_mean_dim_op(a: StdMeanDim<'_>) -> Result<(Tensor, Tensor)> {
    let c = unbiased(a.unbiased);
    var_mean(
        StdMeanDim::NAME,
        a.self_,
        a.dim.as_deref(),
        c,
        a.keepdim,
        true,
    )
}

#[aten("aten::linalg_vector_norm", dtypes = DType::FLOATING, shard = red(Dims::List(2), Some(3)))]
fn linalg_vector_norm_op(a: LinalgVectorNorm<'_>) -> Result<Tensor> {
    let (p, d) = (a.ord.to_f64(), a.dim.as_deref());
    vector_norm(LinalgVectorNorm::NAME, a.self_, p, d, a.keepdim, a.dtype)
}

#[aten(
    "aten::norm.Scalar",
    dtypes = DType::FLOATING,
    shard = red(Dims::All, None),
    kind = Decomposition
)]
fn norm_scalar_op(a: NormScalar<'_>) -> Result<Tensor> {
    vector_norm(NormScalar::NAME, a.self_, a.p.to_f64(), None, false, None)
}

/// A `Scalar? p` of the `norm` overloads: 2 when `None`.
fn norm_p(p: Option<Scalar>) -> f64 {
    p.map_or(2.0, Scalar::to_f64)
}

#[aten(
    "aten::norm.ScalarOpt_dim",
    dtypes = DType::FLOATING,
    shard = red(Dims::List(2), Some(3)),
    kind = Decomposition
)]
fn norm_scalar_opt_dim_op(a: NormScalarOptDim<'_>) -> Result<Tensor> {
    let p = norm_p(a.p);
    vector_norm(
        NormScalarOptDim::NAME,
        a.self_,
        p,
        Some(&a.dim),
        a.keepdim,
        None,
    )
}

#[aten(
    "aten::norm.ScalarOpt_dim_dtype",
    dtypes = DType::FLOATING,
    shard = red(Dims::List(2), Some(3)),
    kind = Decomposition
)]
fn norm_scalar_opt_dim_dtype_op(a: NormScalarOptDimDtype<'_>) -> Result<Tensor> {
    let (p, d) = (norm_p(a.p), Some(a.dim.as_slice()));
    vector_norm(
        NormScalarOptDimDtype::NAME,
        a.self_,
        p,
        d,
        a.keepdim,
        Some(a.dtype),
    )
}

#[aten(
    "aten::norm.ScalarOpt_dtype",
    dtypes = DType::FLOATING,
    shard = red(Dims::All, None),
    kind = Decomposition
)]
fn norm_scalar_opt_dtype_op(a: NormScalarOptDtype<'_>) -> Result<Tensor> {
    let p = norm_p(a.p);
    vector_norm(
        NormScalarOptDtype::NAME,
        a.self_,
        p,
        None,
        false,
        Some(a.dtype),
    )
}

#[aten("aten::logsumexp", dtypes = DType::ALL_TPU, shard = red(Dims::List(1), Some(2)))]
fn logsumexp_op(a: Logsumexp<'_>) -> Result<Tensor> {
    logsumexp(a.self_, &a.dim, a.keepdim)
}
