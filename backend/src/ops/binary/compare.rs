//! Comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`: bool results), `maximum`/`minimum`, and
//! the logical operators (`logical_and`, `logical_or`, `logical_not`: non-zero is true).

use super::{NumberAs, Rhs, binary, binary_with, compute};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{BinOp, CmpKind};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `torch.maximum` / `torch.minimum`.
pub fn max_min(a: &Tensor, b: &Tensor, max: bool) -> Result<Tensor> {
    let name = if max { Maximum::NAME } else { Minimum::NAME };
    binary(
        name,
        a,
        Rhs::Tensor(b),
        |c| c,
        move |p, x, y, c| p.bin(if max { BinOp::Max } else { BinOp::Min }, x, y, compute(c)),
    )
}

/// Comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`), giving bool.
pub fn compare(a: &Tensor, b: Rhs, kind: CmpKind) -> Result<Tensor> {
    let short = match kind {
        CmpKind::Eq => "eq",
        CmpKind::Ne => "ne",
        CmpKind::Lt => "lt",
        CmpKind::Le => "le",
        CmpKind::Gt => "gt",
        CmpKind::Ge => "ge",
    };
    let name = format!(
        "aten::{short}.{}",
        if matches!(b, Rhs::Tensor(_)) {
            "Tensor"
        } else {
            "Scalar"
        }
    );
    binary_with(
        &name,
        a,
        b,
        NumberAs::Common,
        |_| DType::Bool,
        move |p, x, y, c| p.cmp(kind, x, y, compute(c)),
    )
}

/// `logical_and`, `logical_or` (bool result; non-zero is true).
pub fn logical(a: &Tensor, b: &Tensor, or: bool) -> Result<Tensor> {
    let name = if or {
        LogicalOr::NAME
    } else {
        LogicalAnd::NAME
    };
    let op = OpScope::new(name, &[a, b])?;
    Ok(map(&op, &[a, b], &[DType::Bool], |p, r| {
        let (x, y) = (p.cast(r[0], DType::Bool), p.cast(r[1], DType::Bool));
        vec![p.bin(if or { BinOp::Or } else { BinOp::And }, x, y, DType::I32)]
    })?
    .remove(0))
}

/// `logical_not`.
#[aten("aten::logical_not", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), call = LogicalNot(self_))]
pub fn logical_not(a: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(LogicalNot::NAME, &[a])?;
    Ok(map(&op, &[a], &[DType::Bool], |p, r| {
        let x = p.cast(r[0], DType::Bool);
        let one = p.constant(Scalar::Int(1), DType::I32);
        vec![p.bin(BinOp::Xor, x, one, DType::I32)]
    })?
    .remove(0))
}

impl Tensor {
    /// `torch.maximum(self, other)`.
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        max_min(self, other, true)
    }

    /// `torch.minimum(self, other)`.
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        max_min(self, other, false)
    }

    /// `self == other` (bool).
    pub fn eq(&self, other: &Tensor) -> Result<Tensor> {
        compare(self, Rhs::Tensor(other), CmpKind::Eq)
    }

    /// `self < other` (bool).
    pub fn lt(&self, other: &Tensor) -> Result<Tensor> {
        compare(self, Rhs::Tensor(other), CmpKind::Lt)
    }

    /// `self > other` (bool).
    pub fn gt(&self, other: &Tensor) -> Result<Tensor> {
        compare(self, Rhs::Tensor(other), CmpKind::Gt)
    }
}

// The registered overloads: one `#[aten]` function each (the `Tensor` comparisons, whose
// `other` may be a number, are in the parent's `defs`).

#[aten("aten::maximum", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn maximum_op(a: Maximum<'_>) -> Result<Tensor> {
    max_min(a.self_, a.other, true)
}

#[aten("aten::minimum", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn minimum_op(a: Minimum<'_>) -> Result<Tensor> {
    max_min(a.self_, a.other, false)
}

#[aten("aten::eq.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn eq_scalar_op(a: EqScalar<'_>) -> Result<Tensor> {
    compare(a.self_, Rhs::Number(a.other), CmpKind::Eq)
}

#[aten("aten::ne.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn ne_scalar_op(a: NeScalar<'_>) -> Result<Tensor> {
    compare(a.self_, Rhs::Number(a.other), CmpKind::Ne)
}

#[aten("aten::lt.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn lt_scalar_op(a: LtScalar<'_>) -> Result<Tensor> {
    compare(a.self_, Rhs::Number(a.other), CmpKind::Lt)
}

#[aten("aten::le.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn le_scalar_op(a: LeScalar<'_>) -> Result<Tensor> {
    compare(a.self_, Rhs::Number(a.other), CmpKind::Le)
}

#[aten("aten::gt.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn gt_scalar_op(a: GtScalar<'_>) -> Result<Tensor> {
    compare(a.self_, Rhs::Number(a.other), CmpKind::Gt)
}

#[aten("aten::ge.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn ge_scalar_op(a: GeScalar<'_>) -> Result<Tensor> {
    compare(a.self_, Rhs::Number(a.other), CmpKind::Ge)
}

#[aten("aten::logical_and", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn logical_and_op(a: LogicalAnd<'_>) -> Result<Tensor> {
    logical(a.self_, a.other, false)
}

#[aten("aten::logical_or", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn logical_or_op(a: LogicalOr<'_>) -> Result<Tensor> {
    logical(a.self_, a.other, true)
}
