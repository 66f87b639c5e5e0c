//! Householder QR with LAPACK's conventions, a reflector per step: `geqrf` (the reflectors
//! packed below `R`, their scales `tau`), `linalg_householder_product` (`orgqr`: `Q` from
//! them), `linalg_qr` and `ormqr` (`Q` applied without forming it).
//!
//! The reflector of a column `[alpha, x]` is LAPACK's `larfg`: `beta = -sign(alpha) *
//! ||[alpha, x]||`, `tau = (beta - alpha) / beta`, `v = [1, x / (alpha - beta)]`, and
//! `H = I - tau v vᵀ` maps the column to `[beta, 0]`; a column with `x = 0` gets `tau = 0`
//! (`H = I`). `R`'s diagonal therefore has the CPU's signs.

use super::{
    LINALG, REPLICATE, batch_eye, cmp, empty, flat, iota, narrow, need_float32, need_matrix, pick,
    pick_or, pick_scalar, sel, stack, unflat, zeros,
};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ops::aten;
use crate::ops::compose::contract;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `a` (`[b, m, n]`) factored in place as LAPACK's `geqrf`: `R` on and above the diagonal,
/// reflector `j`'s `v[j+1..]` below it in column `j`; and `tau` (`[b, min(m, n)]`).
pub(crate) fn geqrf(rt: &Runtime, a: &Tensor) -> Result<(Tensor, Tensor)> {
    let (b, m, n) = (a.shape()[0], a.shape()[1], a.shape()[2]);
    let k = m.min(n);
    let mut a = a.contiguous()?;
    if k == 0 || b == 0 {
        return Ok((a, zeros(rt, &[b, k], DType::F32)?));
    }
    let rows = iota(rt, m)?.unsqueeze(0)?; // [1, m]
    let colv = iota(rt, n)?.unsqueeze(0)?; // [1, n]
    let cols = colv.unsqueeze(1)?; // [1, 1, n]
    let mut taus = Vec::with_capacity(k);
    for j in 0..k {
        let c = sel(&a, 2, j)?; // [b, m]
        let alpha = sel(&c, 1, j)?; // [b]
        let below = cmp(rt, "aten::gt.Scalar", &rows, j as i64)?;
        let at = cmp(rt, "aten::eq.Scalar", &rows, j as i64)?;
        let x = pick_or(rt, &below, &c, 0.0)?;
        let xx = x.mul(&x)?.sum(&[1], false)?; // [b]
        let norm = alpha.mul(&alpha)?.add(&xx)?.sqrt()?;
        let nonneg = cmp(rt, "aten::ge.Scalar", &alpha, 0.0)?;
        let beta = pick(&nonneg, &norm.neg()?, &norm)?;
        let flat_x = cmp(rt, "aten::eq.Scalar", &xx, 0.0)?; // H = I
        let tau = pick_scalar(rt, &flat_x, 0.0, &beta.sub(&alpha)?.div(&beta)?)?;
        let beta = pick(&flat_x, &alpha, &beta)?;
        let scale = pick_scalar(rt, &flat_x, 0.0, &alpha.sub(&beta)?.reciprocal()?)?;
        let v = pick_scalar(rt, &at, 1.0, &x.mul(&scale.unsqueeze(1)?)?)?; // [b, m]
        // The trailing columns: A -= tau v (vᵀ A).
        let w = contract(rt, &v.unsqueeze(2)?, &a, &[1])?; // [b, n]
        let w = pick_or(rt, &cmp(rt, "aten::gt.Scalar", &colv, j as i64)?, &w, 0.0)?;
        let tv_ = v.mul(&tau.unsqueeze(1)?)?;
        a = a.sub(&tv_.unsqueeze(2)?.mul(&w.unsqueeze(1)?)?)?;
        // Column j: beta on the diagonal, v below it (unchanged when H = I), rows above kept.
        let newc = pick(&at, &beta.unsqueeze(1)?, &pick(&below, &v, &c)?)?;
        let col = cmp(rt, "aten::eq.Scalar", &cols, j as i64)?;
        a = pick(&col, &newc.unsqueeze(2)?, &a)?;
        taus.push(tau);
    }
    Ok((a, stack(&taus, 1)?))
}

/// Reflector `i` of packed `v` (`[b, m, _]`) as a full column (`[b, m]`): zeros above `i`, 1
/// at `i`, the stored part below.
fn reflector(rt: &Runtime, v: &Tensor, rows: &Tensor, i: usize) -> Result<Tensor> {
    let below = cmp(rt, "aten::gt.Scalar", rows, i as i64)?;
    let at = cmp(rt, "aten::eq.Scalar", rows, i as i64)?;
    pick_scalar(rt, &at, 1.0, &pick_or(rt, &below, &sel(v, 2, i)?, 0.0)?)
}

/// Applies `H_i = I - tau_i v_i v_iᵀ` for `i` in `order` to `c` (`[b, m, p]`) from the left
/// (`left`) or to `c` (`[b, p, m]`) from the right.
fn apply_reflectors(
    rt: &Runtime,
    v: &Tensor,
    tau: &Tensor,
    c: &Tensor,
    left: bool,
    order: impl Iterator<Item = usize>,
) -> Result<Tensor> {
    let m = v.shape()[1];
    let rows = iota(rt, m)?.unsqueeze(0)?;
    let mut c = c.clone();
    for i in order {
        let vi = reflector(rt, v, &rows, i)?; // [b, m]
        let ti = narrow(rt, tau, 1, i, 1)?; // [b, 1]
        if left {
            let w = contract(rt, &vi.unsqueeze(2)?, &c, &[1])?; // [b, p]: vᵀ C
            c = c.sub(&vi.mul(&ti)?.unsqueeze(2)?.mul(&w.unsqueeze(1)?)?)?;
        } else {
            let w = contract(rt, &c, &vi.unsqueeze(1)?, &[2])?; // [b, p]: C v
            c = c.sub(&w.unsqueeze(2)?.mul(&vi.mul(&ti)?.unsqueeze(1)?)?)?;
        }
    }
    Ok(c)
}

/// `Q`'s first `ncols` columns (`[b, m, ncols]`) from reflectors `v` and `tau` (`[b, k]`).
pub(crate) fn orgqr(rt: &Runtime, v: &Tensor, tau: &Tensor, ncols: usize) -> Result<Tensor> {
    let (b, m) = (v.shape()[0], v.shape()[1]);
    let k = tau.shape()[1];
    let q = batch_eye(rt, b, m, ncols)?;
    apply_reflectors(rt, v, tau, &q, true, (0..k).rev())
}

/// `torch.geqrf(A)`: `(a, tau)` as LAPACK returns them.
#[aten(
    "aten::geqrf",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn geqrf_op(rt: &Runtime, a: Geqrf<'_>) -> Result<(Tensor, Tensor)> {
    need_matrix("torch.geqrf", a.self_, "input")?;
    need_float32("torch.geqrf", a.self_)?;
    let (a3, batch) = flat(a.self_)?;
    let (qr, tau) = geqrf(rt, &a3)?;
    Ok((unflat(&qr, &batch)?, unflat(&tau, &batch)?))
}

/// Checks `tau`'s batch shape against `input`'s (`[.., m, n]`) and its length against `n`.
fn check_tau(f: &str, input: &Tensor, tau: &Tensor) -> Result<()> {
    let s = input.shape();
    let batch = &s[..s.len() - 2];
    let ts = tau.shape();
    if tau.dim() == 0 || &ts[..ts.len() - 1] != batch {
        return Err(TpuError::ShapeMismatch(format!(
            "{f}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got {:?}",
            &ts[..ts.len().saturating_sub(1)]
        )));
    }
    if ts[ts.len() - 1] > s[s.len() - 1] {
        return Err(TpuError::ShapeMismatch(format!(
            "{f}: input.shape[-1] must be greater than or equal to tau.shape[-1]"
        )));
    }
    if input.dtype() != tau.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{f}: tau dtype {} does not match input dtype {}",
            tau.dtype().scalar_type_name(),
            input.dtype().scalar_type_name()
        )));
    }
    Ok(())
}

/// `tau` (`[.., k]`) as `[b, k]`.
fn flat_tau(tau: &Tensor, b: usize) -> Result<Tensor> {
    let k = *tau.shape().last().unwrap_or(&0);
    tau.reshape(&[b as i64, k as i64])?.contiguous()
}

/// `torch.linalg.householder_product(A, tau)`: the first `n` columns of `H_1 ... H_k`.
#[aten(
    "aten::linalg_householder_product",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn householder_product(rt: &Runtime, a: LinalgHouseholderProduct<'_>) -> Result<Tensor> {
    let f = "torch.linalg.householder_product";
    need_matrix(f, a.input, "input")?;
    need_float32(f, a.input)?;
    let s = a.input.shape();
    if s[s.len() - 2] < s[s.len() - 1] {
        return Err(TpuError::BadArgs(format!(
            "{f}: input.shape[-2] must be greater than or equal to input.shape[-1]"
        )));
    }
    check_tau(f, a.input, a.tau)?;
    let (v, batch) = flat(a.input)?;
    let tau = flat_tau(a.tau, v.shape()[0])?;
    unflat(&orgqr(rt, &v, &tau, s[s.len() - 1])?, &batch)
}

/// `torch.linalg.qr(A, mode="reduced")`: `(Q, R)`; `mode="r"` leaves `Q` empty,
/// `"complete"` makes `Q` square.
#[aten(
    "aten::linalg_qr",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_qr(rt: &Runtime, a: LinalgQr<'_>) -> Result<(Tensor, Tensor)> {
    let f = "linalg.qr";
    need_matrix(f, a.A, "A")?;
    need_float32(f, a.A)?;
    let (qcols, rrows, want_q) = {
        let s = a.A.shape();
        let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
        match a.mode {
            "reduced" => (m.min(n), m.min(n), true),
            "complete" => (m, m, true),
            "r" => (0, m.min(n), false),
            other => {
                return Err(TpuError::BadArgs(format!(
                    "qr received unrecognized mode '{other}' but expected one of 'reduced' (default), 'r', or 'complete'"
                )));
            }
        }
    };
    let (a3, batch) = flat(a.A)?;
    let (packed, tau) = geqrf(rt, &a3)?;
    let r = narrow(rt, &packed.triu(0)?, 1, 0, rrows)?.contiguous()?;
    let q = if want_q {
        unflat(&orgqr(rt, &packed, &tau, qcols)?, &batch)?
    } else {
        empty(rt)?
    };
    Ok((q, unflat(&r, &batch)?))
}

/// `torch.ormqr(A, tau, C, left=True, transpose=False)`: `Q C`, `Qᵀ C`, `C Q` or `C Qᵀ` for the
/// `Q` of `geqrf`'s reflectors, without forming it.
#[aten(
    "aten::ormqr",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn ormqr(rt: &Runtime, a: Ormqr<'_>) -> Result<Tensor> {
    let f = "torch.ormqr";
    let (v, tau, c) = (a.self_, a.input2, a.input3);
    need_matrix(f, v, "input")?;
    need_matrix(f, c, "other")?;
    need_float32(f, v)?;
    if c.dtype() != v.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{f}: Expected input and other to have the same dtype, but got other.dtype = {} and input.dtype = {}",
            c.dtype().scalar_type_name(),
            v.dtype().scalar_type_name()
        )));
    }
    check_tau(f, v, tau)?;
    let (sv_, sc) = (v.shape(), c.shape());
    let m = sv_[sv_.len() - 2];
    let side = if a.left {
        sc[sc.len() - 2]
    } else {
        sc[sc.len() - 1]
    };
    if side != m {
        return Err(TpuError::ShapeMismatch(format!(
            "{f}: other.shape[{}] must be equal to input.shape[-2]",
            if a.left { -2 } else { -1 }
        )));
    }
    if sc[..sc.len() - 2] != sv_[..sv_.len() - 2] {
        return Err(TpuError::ShapeMismatch(format!(
            "{f}: Expected batch dimensions of other to be equal to input.shape[:-2], but got {:?}",
            &sc[..sc.len() - 2]
        )));
    }
    let (v3, batch) = flat(v)?;
    let (c3, _) = flat(c)?;
    let tau = flat_tau(tau, v3.shape()[0])?;
    let k = tau.shape()[1];
    // Q = H_1 ... H_k: Q C applies H_k first; Qᵀ C applies H_1 first; C Q applies H_1 first.
    let forward = a.left == a.transpose;
    let out = if forward {
        apply_reflectors(rt, &v3, &tau, &c3, a.left, 0..k)?
    } else {
        apply_reflectors(rt, &v3, &tau, &c3, a.left, (0..k).rev())?
    };
    unflat(&out, &batch)
}
