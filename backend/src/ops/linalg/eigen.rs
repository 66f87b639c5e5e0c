//! Symmetric eigendecomposition and the singular value decomposition by Jacobi rotations, the
//! way XLA computes them on TPUs: each sweep is `n - 1` rounds of `n / 2` disjoint rotations
//! (the round-robin "tournament" order of Brent and Luk), and a round is one rotation matrix
//! `J` applied by matrix products, so the work per round is a few whole-matrix operators
//! however many pairs it rotates.
//!
//! - `_linalg_eigh`: two-sided Jacobi on the symmetric matrix made from the triangle `UPLO`
//!   names (`Jᵀ A J`), the eigenvectors accumulated (`V J`); eigenvalues ascending.
//! - `_linalg_svd`: one-sided Jacobi (Hestenes) on the columns of `A` (of `Aᵀ` when it is
//!   wide): the rotation of each pair is the one that diagonalises their Gram matrix, so the
//!   columns end mutually orthogonal; their norms are the singular values (descending), the
//!   normalised columns `U`, the accumulated rotations `V`. Columns of `U` that a zero (or
//!   negligible) singular value leaves undefined, and `full_matrices`' extra columns, are
//!   completed to an orthonormal basis by Householder QR of `[U | I]`.
//!
//! A rotation of the pair `(p, q)` of a symmetric `M`: `theta = (M_qq - M_pp) / (2 M_pq)`,
//! `t = sign(theta) / (|theta| + sqrt(theta² + 1))`, `c = 1 / sqrt(t² + 1)`, `s = t c`
//! (Golub and Van Loan, Algorithm 8.5.2), the identity when `M_pq = 0`; [`SWEEPS`] sweeps,
//! nothing read back. Signs of eigenvectors
//! and singular vectors are not LAPACK's (they are not unique); PyTorch's own tests compare
//! them up to sign, and its gradients are defined only for sign-invariant functions of them.

use super::qr::{geqrf, orgqr};
use super::{
    LINALG, REPLICATE, batch_eye, cmp, empty, eye, flat, mm, mt, narrow, need_float32, need_matrix,
    need_square, pick, pick_or, unflat, zeros,
};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ops::aten;
use crate::ops::compose::{contract, op, tv};
use crate::ops::sharding::Sharding;
use crate::ops::{Value, call};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Sweeps made, always: Jacobi converges quadratically once the off-diagonal is small, and
/// f32 reaches its precision in 5-9 sweeps for matrices of tens of rows (checked up to
/// 24 x 24 in the op suite); a rotation of an already negligible element is the identity to
/// rounding, so the extra sweeps change nothing. A fixed count reads nothing back — no
/// synchronisation, the same bits in every mode, and the operator works inside a compiled
/// graph.
const SWEEPS: usize = 12;

/// One round of the tournament: its pairs' element indices into a flattened `[n, n]` matrix
/// and the pattern matrices that build `J` from the pairs' `c` and `s`.
struct Round {
    /// `p * n + p`, `q * n + q`, `p * n + q` of each pair (int64, `[P]`).
    pp: Tensor,
    qq: Tensor,
    pq: Tensor,
    /// `E_pp + E_qq` of each pair (`[P, n, n]`): where `c - 1` goes.
    diag: Tensor,
    /// `E_pq - E_qp` of each pair (`[P, n, n]`): where `s` goes.
    skew: Tensor,
}

/// The rounds of one sweep over `n` indices (none when `n < 2`).
fn rounds(rt: &Runtime, n: usize) -> Result<Vec<Round>> {
    if n < 2 {
        return Ok(Vec::new());
    }
    let players = n + n % 2; // an odd count gets a bye: index n pairs with nobody
    let mut order: Vec<usize> = (0..players).collect();
    let mut out = Vec::with_capacity(players - 1);
    for _ in 0..players - 1 {
        let pairs: Vec<(usize, usize)> = (0..players / 2)
            .map(|i| (order[i], order[players - 1 - i]))
            .filter(|&(a, b)| a < n && b < n)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        let idx = |f: &dyn Fn(usize, usize) -> usize| -> Result<Tensor> {
            let v: Vec<i64> = pairs.iter().map(|&(p, q)| f(p, q) as i64).collect();
            Tensor::from_slice(rt, &v, &[v.len()])
        };
        let mut diag = vec![0f32; pairs.len() * n * n];
        let mut skew = vec![0f32; pairs.len() * n * n];
        for (k, &(p, q)) in pairs.iter().enumerate() {
            let at = |i: usize, j: usize| k * n * n + i * n + j;
            diag[at(p, p)] = 1.0;
            diag[at(q, q)] = 1.0;
            skew[at(p, q)] = 1.0;
            skew[at(q, p)] = -1.0;
        }
        let shape = [pairs.len(), n, n];
        out.push(Round {
            pp: idx(&|p, _| p * n + p)?,
            qq: idx(&|_, q| q * n + q)?,
            pq: idx(&|p, q| p * n + q)?,
            diag: Tensor::from_slice(rt, &diag, &shape)?,
            skew: Tensor::from_slice(rt, &skew, &shape)?,
        });
        // Keep player 0, rotate the rest by one.
        let last = order.pop().unwrap_or(0);
        order.insert(1, last);
    }
    Ok(out)
}

/// The rotation `J` (`[b, n, n]`) of `round`'s pairs that zeroes their elements of the
/// symmetric `m` (`[b, n, n]`) in `Jᵀ m J`.
fn rotation(rt: &Runtime, m: &Tensor, round: &Round) -> Result<Tensor> {
    let (b, n) = (m.shape()[0], m.shape()[1]);
    let flat_m = m.reshape(&[b as i64, (n * n) as i64])?;
    let at = |idx: &Tensor| {
        op(
            rt,
            "aten::index_select",
            vec![tv(&flat_m), Value::Int(1), tv(idx)],
        )
    };
    let (app, aqq, apq) = (at(&round.pp)?, at(&round.qq)?, at(&round.pq)?); // [b, P]
    let zero = cmp(rt, "aten::eq.Scalar", &apq, 0.0)?;
    let theta = aqq.sub(&app)?.div(&apq.mul_scalar(2.0)?)?; // inf or NaN where apq = 0
    let sign = cmp(rt, "aten::ge.Scalar", &theta, 0.0)?
        .to_dtype(DType::F32)?
        .mul_scalar(2.0)?
        .add_scalar(-1.0)?;
    let root = theta.mul(&theta)?.add_scalar(1.0)?.sqrt()?;
    let t = sign.div(&theta.abs()?.add(&root)?)?;
    let t = super::pick_scalar(rt, &zero, 0.0, &t)?;
    let c = t.mul(&t)?.add_scalar(1.0)?.sqrt()?.reciprocal()?;
    let s = t.mul(&c)?;
    let cm1 = c.add_scalar(-1.0)?.unsqueeze(2)?.unsqueeze(3)?; // [b, P, 1, 1]
    let s4 = s.unsqueeze(2)?.unsqueeze(3)?;
    let j = contract(rt, &cm1, &round.diag.unsqueeze(0)?, &[1])?.add(&contract(
        rt,
        &s4,
        &round.skew.unsqueeze(0)?,
        &[1],
    )?)?;
    j.add(&eye(rt, n, n)?)
}

/// Eigenvalues (`[b, n]`, ascending) and, with `vectors`, eigenvectors (`[b, n, n]`, columns)
/// of the symmetric `a` (`[b, n, n]`).
pub(crate) fn jacobi_eigh(
    rt: &Runtime,
    a: &Tensor,
    vectors: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let (b, n) = (a.shape()[0], a.shape()[1]);
    if n == 0 {
        let v = vectors.then(|| a.contiguous()).transpose()?;
        return Ok((super::diag(rt, a)?.contiguous()?, v));
    }
    let mut a = a.contiguous()?;
    let mut v = if vectors {
        Some(batch_eye(rt, b, n, n)?)
    } else {
        None
    };
    let rounds = if b == 0 { Vec::new() } else { rounds(rt, n)? };
    for _ in 0..SWEEPS {
        for round in &rounds {
            let j = rotation(rt, &a, round)?;
            a = mm(rt, &mt(&j)?, &mm(rt, &a, &j)?)?;
            if let Some(vv) = &v {
                v = Some(mm(rt, vv, &j)?);
            }
        }
    }
    let w = super::diag(rt, &a)?.contiguous()?;
    let (w, order) = sorted(rt, &w, false)?;
    let v = match v {
        Some(v) => Some(gather_columns(&v, &order)?),
        None => None,
    };
    Ok((w, v))
}

/// `x` (`[b, n]`) sorted along its last dimension (stably), and the order.
fn sorted(rt: &Runtime, x: &Tensor, descending: bool) -> Result<(Tensor, Tensor)> {
    let r = call(
        rt,
        "aten::sort.stable",
        vec![
            tv(x),
            Value::Bool(true),
            Value::Int(-1),
            Value::Bool(descending),
        ],
    )?;
    let mut it = r.into_iter();
    match (it.next(), it.next()) {
        (Some(Value::Tensor(v)), Some(Value::Tensor(i))) => Ok((v, i)),
        _ => Err(TpuError::Device(
            "sort returned no (values, indices)".into(),
        )),
    }
}

/// The columns of `m` (`[b, r, n]`) in `order` (`[b, n]`).
fn gather_columns(m: &Tensor, order: &Tensor) -> Result<Tensor> {
    let s = m.shape();
    let idx = order
        .unsqueeze(1)?
        .expand(&[s[0] as i64, s[1] as i64, s[2] as i64])?;
    m.gather(2, &idx)
}

/// `torch.linalg.eigh(A, UPLO)` (its structured kernel): eigenvalues ascending and, with
/// `compute_v`, the eigenvectors as columns (an empty tensor without).
#[aten(
    "aten::_linalg_eigh",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_eigh(rt: &Runtime, a: LinalgEigh<'_>) -> Result<(Tensor, Tensor)> {
    let f = "linalg.eigh";
    need_float32(f, a.A)?;
    need_square(f, a.A, "A")?;
    let lower = match a.UPLO {
        "L" | "l" => true,
        "U" | "u" => false,
        other => {
            return Err(TpuError::BadArgs(format!(
                "Expected UPLO argument to be 'L' or 'U', but got {other}"
            )));
        }
    };
    // The symmetric matrix of the named triangle.
    let tri = if lower { a.A.tril(0)? } else { a.A.triu(0)? };
    let strict = if lower { a.A.tril(-1)? } else { a.A.triu(1)? };
    let sym = tri.add(&mt(&strict)?)?;
    let (s3, batch) = flat(&sym)?;
    let (w, v) = jacobi_eigh(rt, &s3, a.compute_v)?;
    let v = match v {
        Some(v) => unflat(&v, &batch)?,
        None => empty(rt)?,
    };
    Ok((unflat(&w, &batch)?, v))
}

/// The SVD of a tall `a` (`[b, m, n]`, `m >= n`): `U` (`[b, m, ucols]`), `S` (`[b, n]`,
/// descending), `V` (`[b, n, n]`).
fn one_sided(
    rt: &Runtime,
    a: &Tensor,
    ucols: usize,
    vectors: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (b, m, n) = (a.shape()[0], a.shape()[1], a.shape()[2]);
    if n == 0 {
        // No columns: no singular values; U is the identity's first columns (as LAPACK's).
        let s = zeros(rt, &[b, 0], DType::F32)?;
        let u = if vectors {
            batch_eye(rt, b, m, ucols)?
        } else {
            empty(rt)?
        };
        let v = if vectors {
            zeros(rt, &[b, 0, 0], DType::F32)?
        } else {
            empty(rt)?
        };
        return Ok((u, s, v));
    }
    let mut w = a.contiguous()?;
    let mut v = batch_eye(rt, b, n, n)?;
    let rounds = if b == 0 || m == 0 {
        Vec::new()
    } else {
        rounds(rt, n)?
    };
    for _ in 0..SWEEPS {
        for round in &rounds {
            let g = mm(rt, &mt(&w)?, &w)?;
            let j = rotation(rt, &g, round)?;
            w = mm(rt, &w, &j)?;
            v = mm(rt, &v, &j)?;
        }
    }
    let s = w.mul(&w)?.sum(&[1], false)?.sqrt()?; // [b, n]
    let (s, order) = sorted(rt, &s, true)?;
    if !vectors {
        return Ok((empty(rt)?, s, empty(rt)?));
    }
    let w = gather_columns(&w, &order)?;
    let v = gather_columns(&v, &order)?;
    // Columns with a negligible singular value have no direction of their own: complete them
    // (and full_matrices' extra columns) to an orthonormal basis.
    let smax = narrow(rt, &s, 1, 0, 1)?; // [b, 1]
    let floor = smax.mul_scalar((m.max(n) as f64) * f32::EPSILON as f64)?;
    let live = s.gt(&floor)?; // [b, n]
    let u = pick_or(rt, &live.unsqueeze(1)?, &w.div(&s.unsqueeze(1)?)?, 0.0)?; // [b, m, n]
    let livef = live.to_dtype(DType::F32)?;
    let ident = batch_eye(rt, b, m, m)?;
    let with_id = op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![u.clone(), ident]), Value::Int(2)],
    )?;
    let (packed, tau) = geqrf(rt, &with_id)?;
    let q = orgqr(rt, &packed, &tau, ucols)?; // [b, m, ucols]
    // ucols >= n: full_matrices' extra columns are all completion.
    let pad = |t: &Tensor| -> Result<Tensor> {
        op(
            rt,
            "aten::constant_pad_nd",
            vec![
                tv(t),
                Value::Ints(vec![0, (ucols - n) as i64]),
                Value::Float(0.0),
            ],
        )
    };
    let live_cols = cmp(rt, "aten::gt.Scalar", &pad(&livef)?, 0.0)?.unsqueeze(1)?;
    let u = pick(&live_cols, &pad(&u)?, &q)?;
    Ok((u.contiguous()?, s, v))
}

/// `torch.linalg.svd(A, full_matrices=True)` (its structured kernel): `(U, S, Vh)`, `S`
/// descending; `compute_uv=False` leaves `U` and `Vh` empty.
#[aten(
    "aten::_linalg_svd",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_svd(rt: &Runtime, a: LinalgSvd<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let f = "linalg.svd";
    need_matrix(f, a.A, "A")?;
    need_float32(f, a.A)?;
    if a.driver.is_some() {
        return Err(TpuError::BadArgs(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend."
                .into(),
        ));
    }
    let s = a.A.shape();
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    let wide = m < n;
    let src = if wide { mt(a.A)? } else { a.A.clone() };
    let (a3, batch) = flat(&src)?;
    // Of the tall matrix (tm >= tn): U is tm x ucols, V tn x tn.
    let (tm, tn) = if wide { (n, m) } else { (m, n) };
    let ucols = if a.full_matrices { tm } else { tn };
    let (u, sv, v) = one_sided(rt, &a3, ucols, a.compute_uv)?;
    let sv = unflat(&sv, &batch)?;
    if !a.compute_uv {
        return Ok((u, sv, v));
    }
    let (u, v) = (unflat(&u, &batch)?, unflat(&v, &batch)?);
    // A = U S Vᵀ; a wide A is (Aᵀ)ᵀ = V S Uᵀ.
    if wide {
        Ok((v, sv, mt(&u)?.contiguous()?))
    } else {
        Ok((u, sv, mt(&v)?.contiguous()?))
    }
}
