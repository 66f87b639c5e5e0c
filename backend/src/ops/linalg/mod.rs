//! Linear algebra on the device: factorizations and solves written as sequences of the
//! backend's own operators (each a kernel on the emulated chip), one step per column or row,
//! every step batched over the whole batch of matrices:
//!
//! - `triangular`: forward and back substitution (`linalg_solve_triangular`,
//!   `triangular_solve`), a row of the solution per step;
//! - `lu`: LU with partial pivoting as LAPACK's `getrf` (the pivot is the first element of
//!   largest magnitude; a zero pivot sets `info` and the elimination goes on), and what PyTorch
//!   builds on it: `linalg_lu_factor_ex`, `linalg_lu`, `lu_unpack`, `linalg_lu_solve`,
//!   `_linalg_solve_ex`, `linalg_inv_ex`, `_linalg_det`, `_linalg_slogdet`;
//! - `cholesky`: `linalg_cholesky_ex` (left-looking, reading one triangle as LAPACK's `potrf`),
//!   `_cholesky_solve_helper`, `cholesky_inverse`;
//! - `qr`: Householder QR with LAPACK's reflector convention (`geqrf`: `beta = -sign(alpha)
//!   * norm`, `tau = (beta - alpha) / beta`, `v[0] = 1` implicit), so that `R`'s signs are
//!   the CPU's; `linalg_householder_product`, `linalg_qr`, `ormqr`.
//!
//! - `eigen`: `_linalg_eigh` and `_linalg_svd` by Jacobi rotations in parallel rounds.
//!
//! Products inside the algorithms are [`contract`]ions on the vector unit in f32 (a multiply
//! and an f32 sum): the matrix units' default single bfloat16 pass would lose the precision
//! LAPACK's float32 routines keep. The dtype is float32, as on PyTorch's CPU (whose LAPACK has
//! no bfloat16 or float16 routines: it refuses them, and so does the registry here); float64
//! and complex are not computed on the tpu at all.
//!
//! Errors that PyTorch raises from LAPACK's `info` (`check_errors=True`, or the operators
//! that always check) read `info` back — a synchronisation, as on PyTorch's CUDA backend —
//! and raise `torch.linalg.LinAlgError` with PyTorch's message.

pub(crate) mod cholesky;
pub(crate) mod eigen;
pub(crate) mod functions;
pub(crate) mod lu;
pub(crate) mod qr;
pub(crate) mod triangular;

use super::compose::{contract, op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::layout::broadcast_shapes;
use crate::ops::Value;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// The dtypes the factorizations take: float32 (see the module's documentation).
pub(crate) const LINALG: &[DType] = &[DType::F32];

/// Why the operators replicate a sharded input.
pub(crate) const REPLICATE: &str =
    "a factorization couples every element of a matrix: no sharding rule yet";

/// `t` ([..., m, n]) as `[b, m, n]` (contiguous), and its batch shape.
pub(crate) fn flat(t: &Tensor) -> Result<(Tensor, Vec<usize>)> {
    let s = t.shape();
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    let batch = s[..s.len() - 2].to_vec();
    let b: usize = batch.iter().product();
    Ok((
        t.reshape(&[b as i64, m as i64, n as i64])?.contiguous()?,
        batch,
    ))
}

/// `t` ([b, rest...]) with its first dimension restored to `batch`.
pub(crate) fn unflat(t: &Tensor, batch: &[usize]) -> Result<Tensor> {
    let shape: Vec<i64> = batch
        .iter()
        .chain(&t.shape()[1..])
        .map(|&d| d as i64)
        .collect();
    t.reshape(&shape)
}

/// The indices `0..n` (int64, `[n]`).
pub(crate) fn iota(rt: &Runtime, n: usize) -> Result<Tensor> {
    op(
        rt,
        "aten::arange",
        vec![Value::Int(n as i64), Value::Dtype(DType::I64)],
    )
}

/// `t.select(dim, i)`.
pub(crate) fn sel(t: &Tensor, dim: i64, i: usize) -> Result<Tensor> {
    crate::ops::layout_ops::select(t, dim, i as i64)
}

/// `t.narrow(dim, start, len)`.
pub(crate) fn narrow(
    rt: &Runtime,
    t: &Tensor,
    dim: i64,
    start: usize,
    len: usize,
) -> Result<Tensor> {
    op(
        rt,
        "aten::narrow",
        vec![
            tv(t),
            Value::Int(dim),
            Value::Int(start as i64),
            Value::Int(len as i64),
        ],
    )
}

/// `torch.stack(ts, dim)`.
pub(crate) fn stack(ts: &[Tensor], dim: i64) -> Result<Tensor> {
    crate::ops::data::concat::stack(ts, dim)
}

/// `torch.where(c, a, b)`.
pub(crate) fn pick(c: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    crate::ops::binary::select::where_(c, a, b)
}

/// `torch.where(c, a, s)`.
pub(crate) fn pick_or(
    rt: &Runtime,
    c: &Tensor,
    a: &Tensor,
    s: impl Into<Scalar>,
) -> Result<Tensor> {
    op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(c), tv(a), sv(s.into())],
    )
}

/// `torch.where(c, s, b)`.
pub(crate) fn pick_scalar(
    rt: &Runtime,
    c: &Tensor,
    s: impl Into<Scalar>,
    b: &Tensor,
) -> Result<Tensor> {
    op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(c), sv(s.into()), tv(b)],
    )
}

/// `t <op> s` for a comparison overload `aten::gt.Scalar`, ... (a bool tensor).
pub(crate) fn cmp(rt: &Runtime, name: &str, t: &Tensor, s: impl Into<Scalar>) -> Result<Tensor> {
    op(rt, name, vec![tv(t), sv(s.into())])
}

/// `a & b` of bool tensors.
pub(crate) fn and(rt: &Runtime, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    op(rt, "aten::logical_and", vec![tv(a), tv(b)])
}

/// `a @ b` for `[.., m, k]` and `[.., k, n]` (batch dimensions broadcast): multiplies and f32
/// sums on the vector unit (see the module's documentation).
pub(crate) fn mm(rt: &Runtime, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (ra, rb) = (a.dim() as i64, b.dim() as i64);
    let a3 = a.unsqueeze(ra)?; // [.., m, k, 1]
    let b3 = b.unsqueeze(rb - 2)?; // [.., 1, k, n]
    contract(rt, &a3, &b3, &[-2])
}

/// The `[m, n]` identity (float32).
pub(crate) fn eye(rt: &Runtime, m: usize, n: usize) -> Result<Tensor> {
    op(
        rt,
        "aten::eye.m",
        vec![
            Value::Int(m as i64),
            Value::Int(n as i64),
            Value::Dtype(DType::F32),
        ],
    )
}

/// Zeros of `shape` in `dtype`.
pub(crate) fn zeros(rt: &Runtime, shape: &[usize], dtype: DType) -> Result<Tensor> {
    op(
        rt,
        "aten::zeros",
        vec![
            Value::Ints(shape.iter().map(|&d| d as i64).collect()),
            Value::Dtype(dtype),
        ],
    )
}

/// An empty float32 tensor: what PyTorch returns for an output it was told not to compute.
pub(crate) fn empty(rt: &Runtime) -> Result<Tensor> {
    zeros(rt, &[0], DType::F32)
}

/// The `[m, n]` identity repeated over a batch of `b` (`[b, m, n]`, contiguous).
pub(crate) fn batch_eye(rt: &Runtime, b: usize, m: usize, n: usize) -> Result<Tensor> {
    eye(rt, m, n)?
        .unsqueeze(0)?
        .expand(&[b as i64, m as i64, n as i64])?
        .contiguous()
}

/// `t` with its last two dimensions swapped.
pub(crate) fn mt(t: &Tensor) -> Result<Tensor> {
    t.transpose(-2, -1)
}

/// `[.., n, n]` diagonal of `t` as `[.., n]`.
pub(crate) fn diag(rt: &Runtime, t: &Tensor) -> Result<Tensor> {
    op(
        rt,
        "aten::diagonal",
        vec![tv(t), Value::Int(0), Value::Int(-2), Value::Int(-1)],
    )
}

/// Refuses a tensor of fewer than two dimensions, as PyTorch's `checkIsMatrix`.
pub(crate) fn need_matrix(f: &str, t: &Tensor, what: &str) -> Result<()> {
    if t.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "{f}: The input tensor {what} must have at least 2 dimensions."
        )));
    }
    Ok(())
}

/// Refuses what is not a batch of square matrices, as PyTorch's `squareCheckInputs`.
pub(crate) fn need_square(f: &str, t: &Tensor, what: &str) -> Result<usize> {
    need_matrix(f, t, what)?;
    let s = t.shape();
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    if m != n {
        return Err(TpuError::BadArgs(format!(
            "{f}: {what} must be batches of square matrices, but they are {m} by {n} matrices"
        )));
    }
    Ok(n)
}

/// Refuses what is not float32 as not implemented (`NotImplementedError`, as PyTorch's CPU
/// raises for integers, bool — `checkFloatingOrComplex`'s message — bfloat16 and float16;
/// with the CPU fallback on, the CPU raises its own).
pub(crate) fn need_float32(f: &str, t: &Tensor) -> Result<()> {
    let d = t.dtype();
    if !d.is_float() {
        return Err(TpuError::Unsupported(format!(
            "{f}: Expected a floating point or complex tensor as input. Got {}",
            d.scalar_type_name()
        )));
    }
    if d != DType::F32 {
        return Err(TpuError::Unsupported(format!(
            "{f}: Low precision dtypes not supported. Got {}",
            d.scalar_type_name()
        )));
    }
    Ok(())
}

/// Refuses tensors of different dtypes, as PyTorch's `linearSolveCheckInputs`.
pub(crate) fn need_same_dtype(f: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{f}: Expected A and B to have the same dtype, but found A of type {} and B of type {} instead",
            a.dtype().scalar_type_name(),
            b.dtype().scalar_type_name()
        )));
    }
    Ok(())
}

/// Refuses a right-hand side `b` that does not fit an `n x n` coefficient matrix in `A X = B`
/// (`left`) or `X A = B`, with PyTorch's message.
pub(crate) fn need_rhs(f: &str, n: usize, b: &Tensor, left: bool) -> Result<()> {
    let s = b.shape();
    let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
    if (left && rows != n) || (!left && cols != n) {
        return Err(TpuError::ShapeMismatch(format!(
            "{f}: Incompatible shapes of A and B for the equation {} ({n}x{n} and {rows}x{cols})",
            if left { "AX = B" } else { "XA = B" }
        )));
    }
    Ok(())
}

/// `a` ([.., n, n]) and `b` ([.., n, k]) expanded to their common batch shape and flattened to
/// `[b, n, n]` and `[b, n, k]`, with that batch shape.
pub(crate) fn broadcast_pair(a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor, Vec<usize>)> {
    let (sa, sb) = (a.shape(), b.shape());
    let batch = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
    let full = |t: &Tensor| -> Result<Tensor> {
        let s = t.shape();
        let shape: Vec<i64> = batch
            .iter()
            .chain(&s[s.len() - 2..])
            .map(|&d| d as i64)
            .collect();
        Ok(flat(&t.expand(&shape)?)?.0)
    };
    Ok((full(a)?, full(b)?, batch))
}

/// PyTorch's `_linalg_check_errors`: reads `info` (a synchronisation) and raises for the first
/// matrix whose status is nonzero, with the message PyTorch picks by the name of the API
/// (`linalg.inv_ex`, `torch.linalg.solve_ex`, `linalg.cholesky_ex`, ...) and, for a batch, the
/// element's index. A singular or indefinite input is `LinAlgError`; a zero pivot of
/// `lu_factor` is a plain `RuntimeError`, as in PyTorch.
pub(crate) fn check_errors(info: &Tensor, api: &str, batched: bool) -> Result<()> {
    let v = info.reshape(&[-1])?.to_vec::<i64>()?;
    let Some(b) = v.iter().position(|&i| i != 0) else {
        return Ok(());
    };
    let i = v[b];
    let at = if batched {
        format!("{api}: (Batch element {b})")
    } else {
        api.to_string()
    };
    Err(if api.contains("inv") {
        TpuError::LinAlg(format!(
            "{at}: The diagonal element {i} is zero, the inversion could not be completed because the input matrix is singular."
        ))
    } else if api.contains("solve") {
        TpuError::LinAlg(format!(
            "{at}: The solver failed because the input matrix is singular."
        ))
    } else if api.contains("cholesky") {
        TpuError::LinAlg(format!(
            "{at}: The factorization could not be completed because the input is not positive-definite (the leading minor of order {i} is not positive-definite)."
        ))
    } else {
        TpuError::Verbatim(format!(
            "{at}: U[{i},{i}] is zero and using it on lu_solve would result in a division by zero. If you still want to perform the factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"
        ))
    })
}
