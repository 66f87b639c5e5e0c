//! Operators PyTorch decomposes into others, composed here the same way from registered
//! operators: `trace` (`diagonal().sum()`, ATen's CPU `trace` sums the diagonal with `sum`'s
//! dtype rule: integers to int64), `vdot` (for real dtypes, `dot`)
//! and `nansum` (`sum` of `where(isnan(x), 0, x)`; integers have no NaN: `sum`).

use super::pointwise::{ALL, NUM};
use super::registry::{OpDef, OpImpl};
use super::sharding::Sharding;
use super::{Value, call};
use crate::error::TpuError;

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let dec = OpImpl::Decomposition;
    vec![
        OpDef::new("aten::trace", dec, ALL, |rt, a| {
            let x = a.tensor(0)?;
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
        })
        .shard(Sharding::Replicate(
            "a reduction of the diagonal: no sharding rule yet",
        )),
        OpDef::new("aten::vdot", dec, NUM, |rt, a| {
            let (x, y) = (a.tensor(0)?, a.tensor(1)?);
            call(
                rt,
                "aten::dot",
                vec![Value::Tensor(x.clone()), Value::Tensor(y.clone())],
            )
        })
        .shard(Sharding::Replicate("a dot product: no sharding rule yet")),
        OpDef::new("aten::nansum", dec, ALL, |rt, a| {
            let x = a.tensor(0)?;
            let x = if x.dtype().is_float() {
                let nan = call(rt, "aten::isnan", vec![Value::Tensor(x.clone())])?;
                let mut args = nan;
                args.extend([Value::Float(0.0), Value::Tensor(x.clone())]);
                call(rt, "aten::where.ScalarSelf", args)?.remove(0)
            } else {
                Value::Tensor(x.clone())
            };
            let rest = (1..4).map(|i| a.get(i).cloned().unwrap_or(Value::None));
            let mut args = vec![x];
            args.extend(rest);
            call(rt, "aten::sum.dim_IntList", args)
        })
        .shard(Sharding::Replicate("a masked sum: no sharding rule yet")),
    ]
}
