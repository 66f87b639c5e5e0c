//! Integer matrix products on the vector unit: the matrix units have no integer path, and
//! PyTorch's CPU kernels accumulate integers exactly in their dtype (wrapping on overflow), so
//! `mm`, `bmm`, `addmm`, `baddbmm`, `dot` and `mv` of int32/int64 operands multiply
//! elementwise and sum in the dtype ([`contract`]). The shape checks are the float paths'.

use crate::dtype::Scalar;
use crate::error::{Result, TpuError};
use crate::ops::Value;
use crate::ops::compose::{axpby, contract, op, tv};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

fn unsqueeze(rt: &Runtime, t: &Tensor, d: i64) -> Result<Tensor> {
    op(rt, "aten::unsqueeze", vec![tv(t), Value::Int(d)])
}

fn same(name: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: expected both operands to have the same dtype, but got {} and {}",
            a.dtype().name(),
            b.dtype().name()
        )));
    }
    Ok(())
}

fn dims(name: &str, t: &Tensor, n: usize) -> Result<()> {
    if t.dim() != n {
        return Err(TpuError::BadArgs(format!(
            "{name}: expected a {n}-D tensor, got {}-D",
            t.dim()
        )));
    }
    Ok(())
}

fn inner(name: &str, k1: usize, k2: usize) -> Result<()> {
    if k1 != k2 {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: inner dimensions differ ({k1} and {k2})"
        )));
    }
    Ok(())
}

/// `[m, k] @ [k, n]`.
pub(super) fn mm(rt: &Runtime, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    dims("aten::mm", a, 2)?;
    dims("aten::mm", b, 2)?;
    same("aten::mm", a, b)?;
    inner("aten::mm", a.shape()[1], b.shape()[0])?;
    contract(rt, &unsqueeze(rt, a, 2)?, &unsqueeze(rt, b, 0)?, &[1])
}

/// `[b, m, k] @ [b, k, n]`.
pub(super) fn bmm(rt: &Runtime, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    dims("aten::bmm", a, 3)?;
    dims("aten::bmm", b, 3)?;
    same("aten::bmm", a, b)?;
    inner("aten::bmm", a.shape()[2], b.shape()[1])?;
    if a.shape()[0] != b.shape()[0] {
        return Err(TpuError::ShapeMismatch(format!(
            "aten::bmm: batch sizes differ ({} and {})",
            a.shape()[0],
            b.shape()[0]
        )));
    }
    contract(rt, &unsqueeze(rt, a, 3)?, &unsqueeze(rt, b, 1)?, &[2])
}

/// `beta * self + alpha * (a @ b)`.
pub(super) fn addmm(
    rt: &Runtime,
    s: &Tensor,
    a: &Tensor,
    b: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    same("aten::addmm", s, a)?;
    let p = mm(rt, a, b)?;
    axpby(rt, s, &p, beta, alpha, a.dtype())
}

/// `beta * self + alpha * bmm(a, b)`.
pub(super) fn baddbmm(
    rt: &Runtime,
    s: &Tensor,
    a: &Tensor,
    b: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    same("aten::baddbmm", s, a)?;
    let p = bmm(rt, a, b)?;
    axpby(rt, s, &p, beta, alpha, a.dtype())
}

/// `a . b` of two vectors.
pub(super) fn dot(rt: &Runtime, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    dims("aten::dot", a, 1)?;
    dims("aten::dot", b, 1)?;
    same("aten::dot", a, b)?;
    inner("aten::dot", a.shape()[0], b.shape()[0])?;
    contract(rt, a, b, &[0])
}

/// `[m, k] @ [k]`.
pub(super) fn mv(rt: &Runtime, a: &Tensor, v: &Tensor) -> Result<Tensor> {
    dims("aten::mv", a, 2)?;
    dims("aten::mv", v, 1)?;
    same("aten::mv", a, v)?;
    inner("aten::mv", a.shape()[1], v.shape()[0])?;
    contract(rt, a, &unsqueeze(rt, v, 0)?, &[1])
}
