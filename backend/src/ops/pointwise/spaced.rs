//! `linspace`: `steps` values from `start` to `end`, as ATen's CPU kernel computes them.
//!
//! ATen: `step = (end - start) / (steps - 1)` in the dtype (in double for integer dtypes);
//! element `i` is `start + step * i` for the first half and `end - step * (steps - i - 1)`
//! for the rest, so both ends are exact. bf16/f16 round each operation to the dtype (their
//! `operator*`/`operator+` do); integer results truncate. Here each element is one lane of a
//! program over the element index; integer dtypes compute in f32 (exact for ranges below
//! 2^24).

use super::t1;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};
use crate::ops::creation::full;
use crate::ops::helpers::{OpScope, map_shape};
use crate::ops::registry::{OpDef, OpImpl};
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `v` rounded to `d` (bf16/f16) and back to f32; f32 and integers unchanged.
fn rnd(p: &mut ProgBuilder, v: PRef, d: DType) -> PRef {
    if matches!(d, DType::BF16 | DType::F16) {
        let r = p.cast(v, d);
        p.cast(r, DType::F32)
    } else {
        v
    }
}

/// `torch.linspace(start, end, steps, dtype)`.
pub fn linspace(rt: &Runtime, start: f64, end: f64, steps: i64, dtype: DType) -> Result<Tensor> {
    if steps < 0 {
        return Err(TpuError::BadArgs(
            "number of steps must be non-negative".into(),
        ));
    }
    if steps <= 1 {
        return full(rt, &[steps as usize], Scalar::Float(start), dtype)
            .or_else(|_| full(rt, &[steps as usize], Scalar::Int(start as i64), dtype));
    }
    let n = steps as usize;
    let float = dtype.is_float();
    // The ends in the dtype (`scalar_start.to<scalar_t>()`), the step in the dtype (double for
    // integers), rounded on the host.
    let conv = |v: f64| {
        if float {
            f32::from_bits(Scalar::Float(v).lane_bits(dtype)) as f64
        } else {
            v.trunc()
        }
    };
    let (s, e) = (conv(start), conv(end));
    let step = if float {
        conv(((e as f32 - s as f32) / (steps - 1) as f32) as f64)
    } else {
        (e - s) / (steps - 1) as f64
    };
    let half = (steps / 2) as f64;
    let op = OpScope::on(rt, "aten::linspace", format!("[{n}]"));
    Ok(map_shape(&op, &[n], &[], &[dtype], |p, _| {
        let i = p.index(0);
        let i = p.cast(i, DType::F32);
        let i = rnd(p, i, dtype);
        let k = |p: &mut ProgBuilder, v: f64| p.constant(Scalar::Float(v), DType::F32);
        let stepc = k(p, step);
        // First half: start + step * i.
        let a = p.bin(BinOp::Mul, stepc, i, DType::F32);
        let a = rnd(p, a, dtype);
        let sc = k(p, s);
        let lo = p.bin(BinOp::Add, sc, a, DType::F32);
        // Second half: end - step * (steps - i - 1).
        let last = k(p, (steps - 1) as f64);
        let j = p.bin(BinOp::Sub, last, i, DType::F32);
        let j = rnd(p, j, dtype);
        let b = p.bin(BinOp::Mul, stepc, j, DType::F32);
        let b = rnd(p, b, dtype);
        let ec = k(p, e);
        let hi = p.bin(BinOp::Sub, ec, b, DType::F32);
        let h = k(p, half);
        let first = p.cmp(CmpKind::Lt, i, h, DType::F32);
        let v = p.select(first, lo, hi, DType::F32);
        let v = if float {
            v
        } else {
            p.un(crate::ir::UnOp::Trunc, v, DType::F32)
        };
        vec![p.cast(v, dtype)]
    })?
    .remove(0))
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    vec![
        OpDef::new("aten::linspace", OpImpl::Kernel, super::NUM, |rt, a| {
            let d = a.opt_dtype(3)?.unwrap_or(DType::F32);
            t1(linspace(rt, a.float(0)?, a.float(1)?, a.int(2)?, d))
        })
        .shard(Sharding::Replicate("a factory")),
    ]
}
