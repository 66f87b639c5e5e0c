//! Triangular solves: forward and back substitution, one row of the solution per step (its
//! dot products with the rows solved before are one contraction over the batch), and the two
//! operators PyTorch routes to them, `linalg_solve_triangular` and `triangular_solve`.

use super::{
    LINALG, REPLICATE, broadcast_pair, mt, narrow, need_matrix, need_rhs, need_same_dtype,
    need_square, sel, stack, unflat,
};
use crate::error::{Result, TpuError};
use crate::ops::aten;
use crate::ops::compose::contract;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Solves `a x = b` for `x`: `a` (`[b, n, n]`) upper or lower triangular — only that triangle
/// is read, and with `unit` not its diagonal, taken as ones — and `b` `[b, n, k]`. A zero on
/// the diagonal gives infinities and NaNs, as LAPACK's `trsm`, which does not check.
pub(crate) fn substitute(
    rt: &Runtime,
    a: &Tensor,
    b: &Tensor,
    upper: bool,
    unit: bool,
) -> Result<Tensor> {
    let n = a.shape()[1];
    if n == 0 || b.shape()[2] == 0 {
        return b.contiguous();
    }
    let mut xs: Vec<Option<Tensor>> = vec![None; n];
    for step in 0..n {
        let i = if upper { n - 1 - step } else { step };
        let mut r = sel(b, 1, i)?; // [b, k]
        let row = sel(a, 1, i)?; // [b, n]
        if step > 0 {
            let lo = if upper { i + 1 } else { 0 };
            let done: Vec<Tensor> = xs[lo..lo + step].iter().flatten().cloned().collect();
            let coef = narrow(rt, &row, 1, lo, step)?.unsqueeze(2)?; // [b, step, 1]
            let s = contract(rt, &coef, &stack(&done, 1)?, &[1])?; // [b, k]
            r = r.sub(&s)?;
        }
        if !unit {
            r = r.div(&sel(&row, 1, i)?.unsqueeze(1)?)?;
        }
        xs[i] = Some(r);
    }
    let xs: Vec<Tensor> = xs.into_iter().flatten().collect();
    stack(&xs, 1)
}

/// `torch.linalg.solve_triangular(A, B, upper=, left=, unitriangular=)`: `A X = B` (or `X A =
/// B` with `left=False`), batch dimensions broadcast.
#[aten(
    "aten::linalg_solve_triangular",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_solve_triangular(rt: &Runtime, a: LinalgSolveTriangular<'_>) -> Result<Tensor> {
    let f = "linalg.solve_triangular";
    let (am, bm) = (a.self_, a.B);
    need_matrix(f, am, "A")?;
    need_matrix(f, bm, "B")?;
    need_same_dtype(f, am, bm)?;
    let n = need_square(f, am, "A")?;
    need_rhs(f, n, bm, a.left)?;
    solve_triangular(rt, am, bm, a.upper, a.left, a.unitriangular)
}

/// [`substitute`] for PyTorch's argument conventions: `X A = B` is `Aᵀ Xᵀ = Bᵀ`, whose
/// triangle is the other one.
pub(crate) fn solve_triangular(
    rt: &Runtime,
    a: &Tensor,
    b: &Tensor,
    upper: bool,
    left: bool,
    unit: bool,
) -> Result<Tensor> {
    let (a, b, upper) = if left {
        (a.clone(), b.clone(), upper)
    } else {
        (mt(a)?, mt(b)?, !upper)
    };
    let (a3, b3, batch) = broadcast_pair(&a, &b)?;
    let x = unflat(&substitute(rt, &a3, &b3, upper, unit)?, &batch)?;
    if left { Ok(x) } else { mt(&x)?.contiguous() }
}

/// `torch.triangular_solve(b, A, upper=True, transpose=False, unitriangular=False)`: the
/// solution of `A X = b` (`Aᵀ X = b` with `transpose`) and `A` broadcast to the batch.
#[aten(
    "aten::triangular_solve",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn triangular_solve(rt: &Runtime, a: TriangularSolve<'_>) -> Result<(Tensor, Tensor)> {
    let (b, am) = (a.self_, a.A);
    if b.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "torch.triangular_solve: Expected b to have at least 2 dimensions, but it has {} dimensions instead",
            b.dim()
        )));
    }
    if am.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "torch.triangular_solve: Expected A to have at least 2 dimensions, but it has {} dimensions instead",
            am.dim()
        )));
    }
    if b.dtype() != am.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "Expected b and A to have the same dtype, but found b of type {} and A of type {} instead.",
            b.dtype().scalar_type_name(),
            am.dtype().scalar_type_name()
        )));
    }
    let n = need_square("triangular_solve", am, "A")?;
    let sb = b.shape();
    if sb[sb.len() - 2] != n {
        return Err(TpuError::ShapeMismatch(format!(
            "Incompatible matrix sizes for triangular_solve: each A matrix is {n} by {n} but each b matrix is {} by {}",
            sb[sb.len() - 2],
            sb[sb.len() - 1]
        )));
    }
    let (coef, upper) = if a.transpose {
        (mt(am)?, !a.upper)
    } else {
        (am.clone(), a.upper)
    };
    let (a3, b3, batch) = broadcast_pair(&coef, b)?;
    let x = unflat(&substitute(rt, &a3, &b3, upper, a.unitriangular)?, &batch)?;
    let shape: Vec<i64> = batch.iter().chain(&[n, n]).map(|&d| d as i64).collect();
    let cloned = am.expand(&shape)?.contiguous()?;
    Ok((x, cloned))
}
