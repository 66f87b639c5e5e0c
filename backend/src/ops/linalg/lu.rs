//! LU with partial pivoting (LAPACK's `getrf`), and the operators PyTorch builds on it:
//! `linalg_lu_factor_ex`, `linalg_lu`, `lu_unpack`, `linalg_lu_solve`, `_linalg_solve_ex`,
//! `linalg_inv_ex`, `_linalg_det`, `_linalg_slogdet`.
//!
//! One elimination step per column, over the whole batch at once: the pivot row (the first
//! of largest magnitude on or below the diagonal, as `isamax`) swapped in by a gather, the
//! column below scaled by the pivot's reciprocal (as `getrf2` scales), the trailing matrix
//! updated by the outer product. A zero pivot records `info` (1-based, the first) and leaves
//! its column alone, as LAPACK does. Pivots are 1-based int32, as PyTorch returns them.

use super::triangular::substitute;
use super::{
    LINALG, REPLICATE, and, check_errors, cmp, empty, eye, flat, iota, mm, mt, narrow,
    need_float32, need_matrix, need_rhs, need_same_dtype, need_square, pick, pick_or, pick_scalar,
    sel, unflat, zeros,
};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::broadcast_shapes;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::compose::{op, tv};
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// The LU factorization of `a` (`[b, m, n]`, float32): the packed factors (`L` below the
/// diagonal with its unit diagonal implicit, `U` on and above), the pivots (`[b, min(m, n)]`,
/// 1-based int32) and `info` (`[b]` int32: 0, or the 1-based index of the first zero pivot).
pub(crate) fn getrf(rt: &Runtime, a: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let (b, m, n) = (a.shape()[0], a.shape()[1], a.shape()[2]);
    let k = m.min(n);
    let mut lu = a.contiguous()?;
    let mut info = zeros(rt, &[b], DType::I32)?;
    if k == 0 || b == 0 {
        return Ok((lu, zeros(rt, &[b, k], DType::I32)?, info));
    }
    let ar = iota(rt, m)?.unsqueeze(0)?; // [1, m]
    let colv = iota(rt, n)?.unsqueeze(0)?; // [1, n]
    let cols = colv.unsqueeze(1)?; // [1, 1, n]
    let mut pivots = Vec::with_capacity(k);
    for j in 0..k {
        // The pivot: the first row at or below j of largest magnitude in column j.
        let c = sel(&lu, 2, j)?; // [b, m]
        let below = cmp(rt, "aten::ge.Scalar", &ar, j as i64)?;
        let p = pick_or(rt, &below, &c.abs()?, -1.0)?.argmax(Some(1), true)?; // [b, 1]
        let at_j = cmp(rt, "aten::eq.Scalar", &ar, j as i64)?;
        let at_p = ar.eq(&p)?;
        let order = pick(&at_j, &p, &pick_scalar(rt, &at_p, j as i64, &ar)?)?; // [b, m]
        lu = lu.gather(
            1,
            &order
                .unsqueeze(2)?
                .expand(&[b as i64, m as i64, n as i64])?,
        )?;
        pivots.push(p);
        // Eliminate below the pivot (nothing when it is zero: its column is zero below).
        let d = sel(&sel(&lu, 1, j)?, 1, j)?.unsqueeze(1)?; // [b, 1]
        let live = cmp(rt, "aten::ne.Scalar", &d, 0.0)?; // [b, 1]
        let scale = and(rt, &cmp(rt, "aten::gt.Scalar", &ar, j as i64)?, &live)?; // [b, m]
        let l = pick_or(rt, &scale, &sel(&lu, 2, j)?.mul(&d.reciprocal()?)?, 0.0)?;
        let right = cmp(rt, "aten::gt.Scalar", &colv, j as i64)?;
        let u = pick_or(rt, &right, &sel(&lu, 1, j)?, 0.0)?; // [b, n]
        lu = lu.sub(&l.unsqueeze(2)?.mul(&u.unsqueeze(1)?)?)?;
        let col = and(
            rt,
            &cmp(rt, "aten::eq.Scalar", &cols, j as i64)?,
            &scale.unsqueeze(2)?,
        )?; // [b, m, n]
        lu = pick(&col, &l.unsqueeze(2)?, &lu)?;
        let first = and(
            rt,
            &cmp(rt, "aten::eq.Scalar", &info, 0)?,
            &cmp(rt, "aten::eq.Scalar", &d.reshape(&[b as i64])?, 0.0)?,
        )?;
        info = pick_scalar(rt, &first, (j + 1) as i64, &info)?;
    }
    let pivots = op(rt, "aten::cat", vec![Value::Tensors(pivots), Value::Int(1)])?;
    Ok((lu, pivots.add_scalar(1)?.to_dtype(DType::I32)?, info))
}

/// The row order of `P^T A` that 1-based `pivots` (`[b, k]`) make on `m` rows: row `i` of
/// `P^T A` is row `perm[i]` of `A` (`[b, m]` int64), LAPACK's interchanges applied in order.
fn row_order(rt: &Runtime, pivots: &Tensor, m: usize) -> Result<Tensor> {
    let (b, k) = (pivots.shape()[0], pivots.shape()[1]);
    let ar = iota(rt, m)?.unsqueeze(0)?; // [1, m]
    let mut perm = ar.expand(&[b as i64, m as i64])?.contiguous()?;
    if b == 0 || m == 0 {
        return Ok(perm);
    }
    let piv = pivots.to_dtype(DType::I64)?.add_scalar(-1)?;
    for j in 0..k.min(m) {
        let p = narrow(rt, &piv, 1, j, 1)?; // [b, 1]
        let from_j = narrow(rt, &perm, 1, j, 1)?;
        let from_p = perm.gather(1, &p)?;
        let at_j = cmp(rt, "aten::eq.Scalar", &ar, j as i64)?;
        perm = pick(&at_j, &from_p, &pick(&ar.eq(&p)?, &from_j, &perm)?)?;
    }
    Ok(perm)
}

/// The permutation matrix `P` (`[b, m, m]` float32) with `A = P L U`: `P[perm[i], i] = 1`.
fn permutation_matrix(rt: &Runtime, perm: &Tensor, m: usize) -> Result<Tensor> {
    let ar = iota(rt, m)?.reshape(&[1, m as i64, 1])?;
    perm.unsqueeze(1)?.eq(&ar)?.to_dtype(DType::F32)
}

/// The rows of `x` (`[b, m, k]`) in the order `perm` (`[b, m]`): `P^T x`.
fn permute_rows(x: &Tensor, perm: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    let idx = perm
        .unsqueeze(2)?
        .expand(&[s[0] as i64, s[1] as i64, s[2] as i64])?;
    x.gather(1, &idx)
}

/// `torch.linalg.lu_factor_ex(A, pivot=True, check_errors=False)`: `(LU, pivots, info)`.
#[aten(
    "aten::linalg_lu_factor_ex",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_lu_factor_ex(rt: &Runtime, a: LinalgLuFactorEx<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let f = "torch.linalg.lu_factor_ex";
    need_matrix(f, a.A, "A")?;
    need_float32(f, a.A)?;
    need_pivot(f, a.pivot)?;
    let (lu, piv, info) = factor(rt, a.A)?;
    if a.check_errors {
        check_errors(&info, "torch.linalg.lu_factor_ex", a.A.dim() > 2)?;
    }
    Ok((lu, piv, info))
}

/// PyTorch's CPU has no LU without pivoting.
fn need_pivot(f: &str, pivot: bool) -> Result<()> {
    if !pivot {
        return Err(TpuError::BadArgs(format!(
            "{f}: LU without pivoting is not implemented on the CPU"
        )));
    }
    Ok(())
}

/// [`getrf`] of a batch `[.., m, n]`, the results in its batch shape.
fn factor(rt: &Runtime, a: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let (a3, batch) = flat(a)?;
    let (lu, piv, info) = getrf(rt, &a3)?;
    Ok((
        unflat(&lu, &batch)?,
        unflat(&piv, &batch)?,
        unflat(&info, &batch)?,
    ))
}

/// `torch.linalg.lu(A, pivot=True)`: `(P, L, U)` with `A = P L U`.
#[aten(
    "aten::linalg_lu",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_lu(rt: &Runtime, a: LinalgLu<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let f = "linalg.lu";
    need_matrix(f, a.A, "A")?;
    need_float32(f, a.A)?;
    need_pivot(f, a.pivot)?;
    let (lu, piv, _) = factor(rt, a.A)?;
    unpack(rt, &lu, &piv, true, true)
}

/// `torch.lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True)`: `(P, L, U)`;
/// what is not unpacked is an empty tensor.
#[aten(
    "aten::lu_unpack",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn lu_unpack(rt: &Runtime, a: LuUnpack<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let (lu, piv) = (a.LU_data, a.LU_pivots);
    need_matrix("torch.lu_unpack", lu, "LU_data")?;
    need_float32("torch.lu_unpack", lu)?;
    if piv.dtype() != DType::I32 {
        return Err(TpuError::DtypeMismatch(format!(
            "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype. Note: this function is intended to be used with the output produced by torch.linalg.lu_factor, got {}",
            piv.dtype().name()
        )));
    }
    let s = lu.shape();
    let k = s[s.len() - 2].min(s[s.len() - 1]);
    if piv.shape().last() != Some(&k) || piv.dim() + 1 != lu.dim() {
        return Err(TpuError::ShapeMismatch(format!(
            "torch.lu_unpack: LU_pivots of shape {:?} does not match LU_data of shape {s:?} (expected the batch shape and {k} pivots)",
            piv.shape()
        )));
    }
    unpack(rt, lu, piv, a.unpack_data, a.unpack_pivots)
}

/// `P`, `L`, `U` of packed factors `lu` (`[.., m, n]`) and `pivots` (`[.., k]`).
fn unpack(
    rt: &Runtime,
    lu: &Tensor,
    pivots: &Tensor,
    data: bool,
    perm: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let s = lu.shape();
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    let k = m.min(n);
    let (l, u) = if data {
        let l = narrow(rt, &lu.tril(-1)?, -1, 0, k)?.add(&eye(rt, m, k)?)?;
        let u = narrow(rt, &lu.triu(0)?, -2, 0, k)?.contiguous()?;
        (l, u)
    } else {
        (empty(rt)?, empty(rt)?)
    };
    let p = if perm {
        let (p3, batch) = flat(&pivots.unsqueeze(-1)?)?; // [b, k, 1]
        let order = row_order(rt, &p3.reshape(&[p3.shape()[0] as i64, k as i64])?, m)?;
        unflat(&permutation_matrix(rt, &order, m)?, &batch)?
    } else {
        empty(rt)?
    };
    Ok((p, l, u))
}

/// `A X = B` from `A`'s packed factors (`[b, n, n]`, pivots `[b, n]`), `B` `[b, n, k]`;
/// `adjoint`: `Aᵀ X = B`.
fn lu_solve3(rt: &Runtime, lu: &Tensor, piv: &Tensor, b: &Tensor, adjoint: bool) -> Result<Tensor> {
    let n = lu.shape()[1];
    let perm = row_order(rt, piv, n)?;
    if adjoint {
        // Aᵀ = Uᵀ Lᵀ Pᵀ: Uᵀ y = B, Lᵀ z = y, X = P z.
        let y = substitute(rt, &mt(lu)?, b, false, false)?;
        let z = substitute(rt, &mt(lu)?, &y, true, true)?;
        mm(rt, &permutation_matrix(rt, &perm, n)?, &z)
    } else {
        let y = substitute(rt, lu, &permute_rows(b, &perm)?, false, true)?;
        substitute(rt, lu, &y, true, false)
    }
}

/// `X` of `A X = B` (or `X A = B`: `Aᵀ Xᵀ = Bᵀ`) from factors `lu`/`piv` and `B`, batch
/// dimensions broadcast.
fn solve_factored(
    rt: &Runtime,
    lu: &Tensor,
    piv: &Tensor,
    b: &Tensor,
    left: bool,
    adjoint: bool,
) -> Result<Tensor> {
    let (b, adjoint) = if left {
        (b.clone(), adjoint)
    } else {
        (mt(b)?, !adjoint)
    };
    let (sl, sb) = (lu.shape(), b.shape());
    let n = sl[sl.len() - 1];
    let batch = broadcast_shapes(&sl[..sl.len() - 2], &sb[..sb.len() - 2])?;
    let with = |t: &Tensor, tail: &[usize]| -> Result<Tensor> {
        let shape: Vec<i64> = batch.iter().chain(tail).map(|&d| d as i64).collect();
        let full = t.expand(&shape)?;
        let bsz: usize = batch.iter().product();
        let mut flat_shape = vec![bsz as i64];
        flat_shape.extend(tail.iter().map(|&d| d as i64));
        full.reshape(&flat_shape)?.contiguous()
    };
    let k = sb[sb.len() - 1];
    let x = lu_solve3(
        rt,
        &with(lu, &[n, n])?,
        &with(piv, &[n])?,
        &with(&b, &[n, k])?,
        adjoint,
    )?;
    let x = unflat(&x, &batch)?;
    if left { Ok(x) } else { mt(&x)?.contiguous() }
}

/// `torch.linalg.lu_solve(LU, pivots, B, left=True, adjoint=False)`.
#[aten(
    "aten::linalg_lu_solve",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_lu_solve(rt: &Runtime, a: LinalgLuSolve<'_>) -> Result<Tensor> {
    let f = "linalg.lu_solve";
    let (lu, piv, b) = (a.LU, a.pivots, a.B);
    need_matrix(f, lu, "LU")?;
    need_matrix(f, b, "B")?;
    need_same_dtype(f, lu, b)?;
    need_float32(f, lu)?;
    let n = need_square(f, lu, "LU")?;
    if piv.dtype() != DType::I32 {
        return Err(TpuError::DtypeMismatch(format!(
            "{f}: pivots should be a Tensor of scalar type int32. Got {}",
            piv.dtype().name()
        )));
    }
    need_rhs(f, n, b, a.left)?;
    if piv.shape().last() != Some(&n) {
        return Err(TpuError::ShapeMismatch(format!(
            "{f}: Incompatible shapes of LU and pivots: pivots must have {n} elements in its last dimension, got shape {:?}",
            piv.shape()
        )));
    }
    solve_factored(rt, lu, piv, b, a.left, a.adjoint)
}

/// `torch.linalg.solve_ex(A, B, left=True, check_errors=False)` (its structured kernel):
/// `(X, LU, pivots, info)`. `B` is a batch of vectors when it is 1-D or has `A`'s batch shape
/// plus one dimension, as PyTorch's `linalg_solve_is_vector_rhs` decides.
#[aten(
    "aten::_linalg_solve_ex",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_solve_ex(rt: &Runtime, a: LinalgSolveEx<'_>) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let f = "linalg.solve";
    let (am, b) = (a.A, a.B);
    need_matrix(f, am, "A")?;
    need_same_dtype(f, am, b)?;
    need_float32(f, am)?;
    let n = need_square(f, am, "A")?;
    let sa = am.shape();
    let vector = b.dim() == 1 || (b.dim() + 1 == am.dim() && b.shape() == &sa[..sa.len() - 1]);
    // A vector right-hand side is a column (`A x = b`) or a row (`x A = b`).
    let vdim = if a.left { -1 } else { -2 };
    let b2 = if vector {
        b.unsqueeze(vdim)?
    } else {
        b.clone()
    };
    if b2.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "{f}: The input tensor B must have at least 2 dimensions."
        )));
    }
    need_rhs(f, n, &b2, a.left)?;
    let (lu, piv, info) = factor(rt, am)?;
    if a.check_errors {
        check_errors(&info, "torch.linalg.solve_ex", am.dim() > 2)?;
    }
    let x = solve_factored(rt, &lu, &piv, &b2, a.left, false)?;
    let x = if vector {
        op(rt, "aten::squeeze.dim", vec![tv(&x), Value::Int(vdim)])?
    } else {
        x
    };
    Ok((x, lu, piv, info))
}

/// `torch.linalg.inv_ex(A, check_errors=False)`: `(A⁻¹, info)`, solved against the identity.
#[aten(
    "aten::linalg_inv_ex",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_inv_ex(rt: &Runtime, a: LinalgInvEx<'_>) -> Result<(Tensor, Tensor)> {
    let f = "linalg.inv";
    need_float32(f, a.A)?;
    let n = need_square(f, a.A, "A")?;
    let (lu, piv, info) = factor(rt, a.A)?;
    if a.check_errors {
        check_errors(&info, "linalg.inv_ex", a.A.dim() > 2)?;
    }
    let x = solve_factored(rt, &lu, &piv, &eye(rt, n, n)?, true, false)?;
    Ok((x, info))
}

/// The sign of the permutation `pivots` (`[.., n]`) make: `(-1)^(pivots[i] != i + 1)`.
fn pivot_sign(rt: &Runtime, pivots: &Tensor) -> Result<Tensor> {
    let n = *pivots.shape().last().unwrap_or(&0);
    let at = iota(rt, n)?.add_scalar(1)?;
    let swaps = pivots
        .to_dtype(DType::I64)?
        .eq(&at)?
        .to_dtype(DType::I64)?
        .sum(&[-1], false)?; // fixed points
    // (-1)^(n - fixed) = 1 - 2 * ((n - fixed) mod 2)
    let odd = op(
        rt,
        "aten::remainder.Scalar",
        vec![tv(&swaps.neg()?.add_scalar(n as i64)?), Value::Int(2)],
    )?;
    odd.mul_scalar(-2)?.add_scalar(1)?.to_dtype(DType::F32)
}

/// The factors `det` and `slogdet` return: of `Aᵀ` when `A` is contiguous, as PyTorch's
/// kernels factor it (LAPACK, column-major, reads a row-major `A` as `Aᵀ`, and `det(Aᵀ) =
/// det(A)`: no copy); their backward formulas expect that choice.
fn det_factors(rt: &Runtime, a: &Tensor) -> Result<(Tensor, Tensor)> {
    let src = if a.is_contiguous() { mt(a)? } else { a.clone() };
    let (lu, piv, _) = factor(rt, &src)?;
    Ok((lu, piv))
}

/// `torch.linalg.det(A)` (its structured kernel): `(det, LU, pivots)`, the product of `U`'s
/// diagonal with the permutation's sign.
#[aten(
    "aten::_linalg_det",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_det(rt: &Runtime, a: LinalgDet<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let f = "linalg.det";
    need_float32(f, a.A)?;
    need_square(f, a.A, "A")?;
    let (lu, piv) = det_factors(rt, a.A)?;
    let d = op(
        rt,
        "aten::prod.dim_int",
        vec![tv(&super::diag(rt, &lu)?), Value::Int(-1)],
    )?;
    Ok((d.mul(&pivot_sign(rt, &piv)?)?, lu, piv))
}

/// `torch.linalg.slogdet(A)` (its structured kernel): `(sign, log|det|, LU, pivots)`; a
/// singular matrix has sign 0 and `-inf`.
#[aten(
    "aten::_linalg_slogdet",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_slogdet(rt: &Runtime, a: LinalgSlogdet<'_>) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let f = "linalg.slogdet";
    need_float32(f, a.A)?;
    need_square(f, a.A, "A")?;
    let (lu, piv) = det_factors(rt, a.A)?;
    let d = super::diag(rt, &lu)?;
    let sign = op(
        rt,
        "aten::prod.dim_int",
        vec![tv(&d.sign()?), Value::Int(-1)],
    )?
    .mul(&pivot_sign(rt, &piv)?)?;
    let logabs = d.abs()?.log()?.sum(&[-1], false)?;
    Ok((sign, logabs, lu, piv))
}
