//! Matrix functions built on the device's products and factorizations:
//!
//! - `linalg_matrix_exp`: scaling and squaring. The 1-norm of the batch (read back: a
//!   synchronisation, as the degree choice of PyTorch's own kernel reads it) picks `s` so that
//!   `A / 2^s` has norm at most 3.01 (PyTorch's float threshold for its degree-18
//!   approximant); the Taylor polynomial of degree 18 there (truncation below 1e-8 relative) by
//!   Horner's rule, then `s` squarings. float32, and bfloat16 computed in float32 and rounded
//!   once (PyTorch's CPU takes bfloat16 too).
//! - `linalg_matrix_sqrth`: `V diag(sqrt(max(w, 0))) Vᵀ` from `eigh` of the lower triangle
//!   (negative eigenvalues count as 0, as on the CPU).
//! - `linalg_polar`: `A = U H` from the thin SVD `A = W S Vᵀ`: `U = W Vᵀ`, `H = V S Vᵀ` (the
//!   CPU's SVD-based path).
//!
//! Products are [`mm`]: f32 multiplies and sums on the vector unit (see the module's docs).

use super::{
    LINALG, REPLICATE, batch_eye, flat, mm, mt, need_float32, need_matrix, need_square, unflat,
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
    dtypes = &[DType::F32, DType::BF16],
    shard = Sharding::Replicate(REPLICATE),
    kind = Decomposition
)]
fn linalg_matrix_exp(rt: &Runtime, a: LinalgMatrixExp<'_>) -> Result<Tensor> {
    let f = "linalg.matrix_exp";
    let n = need_square(f, a.self_, "A")?;
    let dtype = a.self_.dtype();
    if a.self_.numel() == 0 {
        return a.self_.contiguous();
    }
    let x = a.self_.to_dtype(DType::F32)?;
    let (x3, batch) = flat(&x)?;
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
    unflat(&p, &batch)?.to_dtype(dtype)
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
