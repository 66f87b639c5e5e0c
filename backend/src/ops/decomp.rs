//! Operators PyTorch decomposes into others, composed here the same way from registered
//! operators: `trace` (`diagonal().sum()`, ATen's CPU `trace` sums the diagonal with `sum`'s
//! dtype rule: integers to int64), `vdot` (for real dtypes, `dot`)
//! and `nansum` (`sum` of `where(isnan(x), 0, x)`; integers have no NaN: `sum`).

use super::sharding::Sharding;
use super::{Value, aten, call};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::runtime::Runtime;

#[aten(
    "aten::trace",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate("a reduction of the diagonal: no sharding rule yet"),
    kind = Decomposition
)]
fn trace_op(rt: &Runtime, a: Trace<'_>) -> Result<Vec<Value>> {
    let x = a.self_;
    if x.shape().len() != 2 {
        return Err(TpuError::BadArgs(format!(
            "trace: expected a matrix, but got tensor with dim {}",
            x.shape().len()
        )));
    }
    let d = call(
        rt,
        "aten::diagonal",
        vec![
            Value::Tensor(x.clone()),
            Value::Int(0),
            Value::Int(0),
            Value::Int(1),
        ],
    )?;
    call(rt, "aten::sum", d)
}

#[aten(
    "aten::vdot",
    dtypes = DType::NUMERIC,
    shard = Sharding::Replicate("a dot product: no sharding rule yet"),
    kind = Decomposition
)]
fn vdot_op(rt: &Runtime, a: Vdot<'_>) -> Result<Vec<Value>> {
    call(
        rt,
        "aten::dot",
        vec![
            Value::Tensor(a.self_.clone()),
            Value::Tensor(a.other.clone()),
        ],
    )
}

#[aten(
    "aten::nansum",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate("a masked sum: no sharding rule yet"),
    kind = Decomposition
)]
fn nansum_op(rt: &Runtime, a: Nansum<'_>) -> Result<Vec<Value>> {
    let x = a.self_;
    let x = if x.dtype().is_float() {
        let nan = call(rt, "aten::isnan", vec![Value::Tensor(x.clone())])?;
        let mut args = nan;
        args.extend([Value::Float(0.0), Value::Tensor(x.clone())]);
        call(rt, "aten::where.ScalarSelf", args)?.remove(0)
    } else {
        Value::Tensor(x.clone())
    };
    let dim = a.dim.map_or(Value::None, Value::Ints);
    let dtype = a.dtype.map_or(Value::None, Value::Dtype);
    call(
        rt,
        "aten::sum.dim_IntList",
        vec![x, dim, Value::Bool(a.keepdim), dtype],
    )
}
