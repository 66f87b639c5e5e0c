//! Matrix functions built on the device's products and factorizations:
//!
//! - `linalg_matrix_exp`: scaling and squaring. The 1-norm of the batch (read back: a
//!   synchronisation, as the degree choice of PyTorch's own kernel reads it) picks `s` so that
//!   `A / 2^s` has norm at most 3.01 (PyTorch's float threshold for its degree-18
//!   approximant); the Taylor polynomial of degree 18 there (truncation below 1e-8 relative) by
//!   Horner's rule, then `s` squarings. float32, as the rest of the module (PyTorch's CPU
//!   takes bfloat16 and float16 too, and returns NaN where their range runs out).
//! - `linalg_matrix_sqrth`: `V diag(sqrt(max(w, 0))) Vᵀ` from `eigh` of the lower triangle
//!   (negative eigenvalues count as 0, as on the CPU).
//! - `linalg_polar`: `A = U H` from the thin SVD `A = W S Vᵀ`: `U = W Vᵀ`, `H = V S Vᵀ` (the
//!   CPU's SVD-based path).
//!
//! - `linalg_lstsq`: the minimum-norm least-squares solution from the thin SVD, singular
//!   values at most `rcond` times the largest (default: float32's epsilon times `max(m, n)`)
//!   counting as 0, with each LAPACK driver's outputs as PyTorch's CPU returns them: `rank`
//!   for `gelsy`, `gelsd` and `gelss`, the singular values for the last two, and for `m > n`
//!   the squared residuals `|A X - B|^2` of each column (not for `gelsy`; for `gelsd` and
//!   `gelss` only when every matrix has full rank, which reads the ranks back).
//!
//! Products are [`mm`]: f32 multiplies and sums on the vector unit (see the module's docs).

use super::{
    LINALG, REPLICATE, batch_eye, broadcast_pair, flat, mm, mt, narrow, need_float32, need_matrix,
    need_square, sel, unflat, zeros,
};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ops::aten;
use crate::ops::compose::{op, tv};
use crate::ops::sharding::Sharding;
use crate::ops::{Value, call};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// PyTorch's largest norm for its degree-18 approximant in float (`mexp`'s `thetas_float`).
const THETA_18: f64 = 3.010_066_362_817_634;
/// The Taylor polynomial's degree.
const DEGREE: u32 = 18;

fn tensors(rt: &Runtime, name: &str, args: Vec<Value>) -> Result<Vec<Tensor>> {
    call(rt, name, args)?
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) => Ok(t),
            other => Err(TpuError::BadArgs(format!(
                "{name}: expected tensor results, got {}",
                other.kind()
            ))),
        })
        .collect()
}

fn scale(rt: &Runtime, t: &Tensor, k: f64) -> Result<Tensor> {
    op(rt, "aten::mul.Scalar", vec![tv(t), Value::Float(k)])
}

/// `torch.linalg.matrix_exp(A)`.
#[aten(
    "aten::linalg_matrix_exp",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_matrix_exp(rt: &Runtime, a: LinalgMatrixExp<'_>) -> Result<Tensor> {
    let f = "linalg.matrix_exp";
    let n = need_square(f, a.self_, "A")?;
    need_float32(f, a.self_)?;
    if a.self_.numel() == 0 {
        return a.self_.contiguous();
    }
    let (x3, batch) = flat(a.self_)?;
    let b = x3.shape()[0];
    // The largest 1-norm (column sums of magnitudes) of the batch.
    let abs = op(rt, "aten::abs", vec![tv(&x3)])?;
    let cols = op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&abs), Value::Ints(vec![1]), Value::Bool(false)],
    )?;
    let norm = op(
        rt,
        "aten::amax",
        vec![tv(&cols), Value::Ints(vec![]), Value::Bool(false)],
    )?;
    let norm = norm.to_vec::<f32>()?.first().copied().unwrap_or(0.0) as f64;
    let s = if norm.is_finite() && norm > THETA_18 {
        (norm / THETA_18).log2().ceil() as i32
    } else {
        0
    };
    let y = scale(rt, &x3, 2f64.powi(-s))?;
    let eye = batch_eye(rt, b, n, n)?;
    // I + y (I + y/2 (I + ... (I + y/18))).
    let mut p = eye.add(&scale(rt, &y, 1.0 / DEGREE as f64)?)?;
    for k in (1..DEGREE).rev() {
        let yp = mm(rt, &y, &p)?;
        p = eye.add(&scale(rt, &yp, 1.0 / k as f64)?)?;
    }
    for _ in 0..s {
        p = mm(rt, &p, &p)?;
    }
    unflat(&p, &batch)
}

/// `torch.linalg.matrix_sqrth(A)`.
#[aten(
    "aten::linalg_matrix_sqrth",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_matrix_sqrth(rt: &Runtime, a: LinalgMatrixSqrth<'_>) -> Result<Tensor> {
    let f = "linalg.matrix_sqrth";
    need_square(f, a.self_, "A")?;
    need_float32(f, a.self_)?;
    let r = tensors(
        rt,
        "aten::_linalg_eigh",
        vec![tv(a.self_), Value::Str("L".into()), Value::Bool(true)],
    )?;
    let (w, v) = (&r[0], &r[1]);
    let w = op(rt, "aten::clamp_min", vec![tv(w), Value::Float(0.0)])?;
    let root = op(rt, "aten::sqrt", vec![tv(&w)])?;
    let vs = v.mul(&root.unsqueeze(-2)?)?;
    mm(rt, &vs, &mt(v)?)
}

/// `torch.linalg.polar(A)`: `(U, H)`.
#[aten(
    "aten::linalg_polar",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_polar(rt: &Runtime, a: LinalgPolar<'_>) -> Result<(Tensor, Tensor)> {
    let f = "linalg.polar";
    need_matrix(f, a.A, "A")?;
    let s = a.A.shape();
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    if m < n {
        return Err(TpuError::BadArgs(format!(
            "{f}: input must have at least as many rows as columns, but got {m} by {n} matrices"
        )));
    }
    need_float32(f, a.A)?;
    let r = tensors(
        rt,
        "aten::_linalg_svd",
        vec![tv(a.A), Value::Bool(false), Value::Bool(true), Value::None],
    )?;
    let (w, sv, vh) = (&r[0], &r[1], &r[2]);
    let u = mm(rt, w, vh)?;
    let v = mt(vh)?;
    let vs = v.mul(&sv.unsqueeze(-2)?)?;
    let h = mm(rt, &vs, vh)?;
    Ok((u, h))
}

fn lstsq_error(what: String) -> TpuError {
    TpuError::BadArgs(format!("torch.linalg.lstsq: {what}"))
}

/// `torch.linalg.lstsq(A, B, rcond, driver)`: `(solution, residuals, rank, singular_values)`.
#[aten(
    "aten::linalg_lstsq",
    dtypes = LINALG,
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_lstsq(rt: &Runtime, a: LinalgLstsq<'_>) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let (x, y) = (a.self_, a.b);
    if x.dim() < 2 {
        return Err(lstsq_error("input must have at least 2 dimensions.".into()));
    }
    if y.dim() < 1 {
        return Err(lstsq_error("other must have at least 1 dimension.".into()));
    }
    if x.dtype() != y.dtype() {
        return Err(lstsq_error(format!(
            "Expected input and other to have the same dtype, but got input's dtype {} and other's dtype {}",
            x.dtype().scalar_type_name(),
            y.dtype().scalar_type_name()
        )));
    }
    let driver = a.driver.unwrap_or("gelsy");
    if !matches!(driver, "gels" | "gelsy" | "gelsd" | "gelss") {
        return Err(lstsq_error(
            "parameter `driver` should be one of (gels, gelsy, gelsd, gelss)".into(),
        ));
    }
    need_float32("torch.linalg.lstsq", x)?;
    let vector = y.dim() == x.dim() - 1;
    let y = if vector { y.unsqueeze(-1)? } else { y.clone() };
    let (sx, sy) = (x.shape(), y.shape());
    let (m, n, k) = (sx[sx.len() - 2], sx[sx.len() - 1], sy[sy.len() - 1]);
    if sy[sy.len() - 2] != m {
        return Err(lstsq_error(format!(
            "input.size(-2) should match other.size(-2) (got {m} and {})",
            sy[sy.len() - 2]
        )));
    }
    let (a3, b3, batch) = broadcast_pair(x, &y)?;
    let nb = a3.shape()[0];
    let r = m.min(n);
    let (solution, s, rank) = if r == 0 {
        (
            zeros(rt, &[nb, n, k], DType::F32)?,
            zeros(rt, &[nb, 0], DType::F32)?,
            zeros(rt, &[nb], DType::I64)?,
        )
    } else {
        let svd = tensors(
            rt,
            "aten::_linalg_svd",
            vec![tv(&a3), Value::Bool(false), Value::Bool(true), Value::None],
        )?;
        let (u, s, vh) = (&svd[0], &svd[1], &svd[2]);
        let rcond = a.rcond.unwrap_or(f32::EPSILON as f64 * m.max(n) as f64);
        let top = narrow(rt, s, -1, 0, 1)?;
        let tol = scale(rt, &top, rcond)?;
        let keep = op(rt, "aten::gt.Tensor", vec![tv(s), tv(&tol)])?;
        let inv = op(rt, "aten::reciprocal", vec![tv(s)])?;
        let zero = zeros(rt, &[], DType::F32)?;
        let inv = op(rt, "aten::where.self", vec![tv(&keep), tv(&inv), tv(&zero)])?;
        let utb = mm(rt, &mt(u)?, &b3)?;
        let scaled = utb.mul(&inv.unsqueeze(-1)?)?;
        let solution = mm(rt, &mt(vh)?, &scaled)?;
        let rank = op(
            rt,
            "aten::sum.dim_IntList",
            vec![tv(&keep), Value::Ints(vec![-1]), Value::Bool(false)],
        )?;
        (solution, s.clone(), rank.to_dtype(DType::I64)?)
    };
    let empty_f = zeros(rt, &[0], DType::F32)?;
    // Squared residuals of each column, for m > n (not gelsy; gelsd and gelss: full rank).
    let full_rank = match driver {
        "gelsd" | "gelss" if m > n => rank.to_vec::<i64>()?.iter().all(|&q| q == n as i64),
        _ => true,
    };
    let residuals = if m > n && driver != "gelsy" && full_rank {
        let res = if n == 0 {
            if driver == "gels" {
                // LAPACK's gels zeroes B on a quick return: its residuals are 0.
                zeros(rt, &[nb, k], DType::F32)?
            } else {
                let sq = b3.mul(&b3)?;
                op(
                    rt,
                    "aten::sum.dim_IntList",
                    vec![tv(&sq), Value::Ints(vec![1]), Value::Bool(false)],
                )?
            }
        } else {
            let ax = mm(rt, &a3, &solution)?;
            let d = ax.sub(&b3)?;
            let sq = d.mul(&d)?;
            op(
                rt,
                "aten::sum.dim_IntList",
                vec![tv(&sq), Value::Ints(vec![1]), Value::Bool(false)],
            )?
        };
        // (A vector right-hand side keeps its column of residuals, as on the CPU.)
        unflat(&res, &batch)?
    } else {
        empty_f.clone()
    };
    let solution = unflat(&solution, &batch)?;
    let solution = if vector {
        sel(&solution, -1, 0)?
    } else {
        solution
    };
    let rank = if driver == "gels" {
        zeros(rt, &[0], DType::I64)?
    } else {
        unflat(&rank, &batch)?
    };
    let singular = if matches!(driver, "gelsd" | "gelss") {
        unflat(&s, &batch)?
    } else {
        empty_f
    };
    Ok((solution.contiguous()?, residuals, rank, singular))
}
