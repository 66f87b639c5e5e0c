//! Cholesky: `linalg_cholesky_ex` (left-looking, a column of `L` per step, reading only the
//! lower triangle — or, with `upper`, only the upper — as LAPACK's `potrf`),
//! `_cholesky_solve_helper` (what `torch.cholesky_solve` calls after broadcasting) and
//! `cholesky_inverse`.

use super::triangular::substitute;
use super::{
    LINALG, REPLICATE, and, broadcast_pair, check_errors, cmp, eye, flat, iota, mt, need_float32,
    need_square, pick, pick_or, pick_scalar, sel, stack, unflat, zeros,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::compose::{contract, op};
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `L` (`[b, n, n]`, lower) with `L Lᵀ = a` from `a`'s lower triangle, and `info` (`[b]`
/// int32: 0, or the order of the first leading minor that is not positive-definite).
pub(crate) fn potrf(rt: &Runtime, a: &Tensor) -> Result<(Tensor, Tensor)> {
    let (b, n) = (a.shape()[0], a.shape()[1]);
    let mut info = zeros(rt, &[b], DType::I32)?;
    if n == 0 || b == 0 {
        return Ok((a.contiguous()?, info));
    }
    let rows = iota(rt, n)?.unsqueeze(0)?; // [1, n]
    let mut cols: Vec<Tensor> = Vec::with_capacity(n);
    for j in 0..n {
        let mut c = sel(a, 2, j)?; // [b, n]: rows >= j are the lower triangle's
        if j > 0 {
            let done = stack(&cols, 2)?; // [b, n, j]
            let lj = sel(&done, 1, j)?.unsqueeze(1)?; // [b, 1, j]: row j of L so far
            c = c.sub(&contract(rt, &done, &lj, &[2])?)?;
        }
        let d = sel(&c, 1, j)?; // [b]
        // `d > 0` is false for NaN too, as potrf's test.
        let bad = op(
            rt,
            "aten::logical_not",
            vec![Value::Tensor(cmp(rt, "aten::gt.Scalar", &d, 0.0)?)],
        )?;
        let first = and(rt, &bad, &cmp(rt, "aten::eq.Scalar", &info, 0)?)?;
        info = pick_scalar(rt, &first, (j + 1) as i64, &info)?;
        let s = d.sqrt()?.unsqueeze(1)?; // [b, 1]
        let below = pick_or(
            rt,
            &cmp(rt, "aten::gt.Scalar", &rows, j as i64)?,
            &c.div(&s)?,
            0.0,
        )?;
        cols.push(pick(
            &cmp(rt, "aten::eq.Scalar", &rows, j as i64)?,
            &s,
            &below,
        )?);
    }
    Ok((stack(&cols, 2)?, info))
}

/// `torch.linalg.cholesky_ex(A, upper=False, check_errors=False)`: `(L, info)`.
#[aten(
    "aten::linalg_cholesky_ex",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_cholesky_ex(rt: &Runtime, a: LinalgCholeskyEx<'_>) -> Result<(Tensor, Tensor)> {
    let f = "linalg.cholesky";
    need_float32(f, a.self_)?;
    need_square(f, a.self_, "A")?;
    // The upper factor reads the upper triangle: the lower one of Aᵀ.
    let src = if a.upper {
        mt(a.self_)?
    } else {
        a.self_.clone()
    };
    let (a3, batch) = flat(&src)?;
    let (l, info) = potrf(rt, &a3)?;
    if a.check_errors {
        check_errors(&info, "linalg.cholesky_ex", a.self_.dim() > 2)?;
    }
    let l = unflat(&l, &batch)?;
    let l = if a.upper { mt(&l)?.contiguous()? } else { l };
    Ok((l, unflat(&info, &batch)?))
}

/// `X` with `A X = B` for `A = L Lᵀ` (`upper`: `A = Uᵀ U`), the factor `l` (`[.., n, n]`)
/// and `b` (`[.., n, k]`) broadcast.
fn cholesky_solve(rt: &Runtime, b: &Tensor, l: &Tensor, upper: bool) -> Result<Tensor> {
    let (l3, b3, batch) = broadcast_pair(l, b)?;
    let l3 = if upper { mt(&l3)? } else { l3 };
    let y = substitute(rt, &l3, &b3, false, false)?;
    unflat(&substitute(rt, &mt(&l3)?, &y, true, false)?, &batch)
}

/// `torch.cholesky_solve`'s kernel, after PyTorch broadcast the batch dimensions.
#[aten(
    "aten::_cholesky_solve_helper",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn cholesky_solve_helper(rt: &Runtime, a: CholeskySolveHelper<'_>) -> Result<Tensor> {
    need_float32("cholesky_solve", a.self_)?;
    need_float32("cholesky_solve", a.A)?;
    need_square("cholesky_solve", a.A, "A")?;
    cholesky_solve(rt, a.self_, a.A, a.upper)
}

/// `torch.cholesky_inverse(L, upper=False)`: `(L Lᵀ)⁻¹` (`(Uᵀ U)⁻¹`).
#[aten(
    "aten::cholesky_inverse",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn cholesky_inverse(rt: &Runtime, a: CholeskyInverse<'_>) -> Result<Tensor> {
    let f = "cholesky_inverse";
    need_float32(f, a.self_)?;
    let n = need_square(f, a.self_, "input")?;
    cholesky_solve(rt, &eye(rt, n, n)?, a.self_, a.upper)
}
