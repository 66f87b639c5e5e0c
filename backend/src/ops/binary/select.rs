//! Selection: `where(cond, a, b)` and `clamp(x, min, max)` with number bounds (the forms with
//! numbers for `where`'s values or tensors for the bounds are in `pointwise::ternary`).

use super::{fits_lanes, operand};
use crate::dtype::{DType, Operand, Scalar, result_type};
use crate::error::{Result, TpuError};
use crate::ir::BinOp;
use crate::ops::aten;
use crate::ops::helpers::compute;
use crate::ops::helpers::{OpScope, map};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `torch.where(cond, a, b)`.
#[aten(
    "aten::where.self",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = WhereSelf(condition, self_, other)
)]
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(WhereSelf::NAME, &[cond, a, b])?;
    if cond.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(format!(
            "where expected condition to be a boolean tensor, but got a tensor with dtype {}",
            cond.dtype().name()
        )));
    }
    let common = result_type(&[operand(a), operand(b)]);
    Ok(map(&op, &[cond, a, b], &[common], |p, r| {
        vec![p.select(r[0], r[1], r[2], common)]
    })?
    .remove(0))
}

/// `torch.clamp(x, min, max)` (NaN stays NaN; `min > max` gives `max`).
pub fn clamp(x: &Tensor, lo: Option<Scalar>, hi: Option<Scalar>) -> Result<Tensor> {
    if lo.is_none() && hi.is_none() {
        return Err(TpuError::BadArgs(
            "torch.clamp: At least one of 'min' or 'max' must not be None".into(),
        ));
    }
    let mut ops = vec![operand(x)];
    ops.extend(lo.iter().chain(hi.iter()).map(|s| Operand::Number(*s)));
    let common = result_type(&ops);
    for s in lo.iter().chain(hi.iter()) {
        fits_lanes(Clamp::NAME, *s, common)?;
    }
    let op = OpScope::new(Clamp::NAME, &[x])?;
    Ok(map(&op, &[x], &[common], |p, r| {
        let ct = compute(common);
        let mut v = p.cast(r[0], common);
        if let Some(l) = lo {
            let c = p.constant(l, ct);
            v = p.bin(BinOp::Max, v, c, ct);
        }
        if let Some(h) = hi {
            let c = p.constant(h, ct);
            v = p.bin(BinOp::Min, v, c, ct);
        }
        vec![v]
    })?
    .remove(0))
}

impl Tensor {
    /// `torch.clamp(self, min, max)`.
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        clamp(self, min.map(Scalar::Float), max.map(Scalar::Float))
    }
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::clamp", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn clamp_op(a: Clamp<'_>) -> Result<Tensor> {
    clamp(a.self_, a.min, a.max)
}
