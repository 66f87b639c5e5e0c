//! Predicates and value classes: `isnan`, `isinf`, `isposinf`, `isneginf`, `isfinite`,
//! `signbit` (bool results), `nan_to_num`, `logical_xor`, `sgn`.
//!
//! Integer and bool inputs are never NaN or infinite (`isfinite` is true for them);
//! `signbit` reads the IEEE sign bit, so `signbit(-0.0)` and `signbit(-nan)` are true;
//! `nan_to_num` replaces NaN with `nan` (default 0) and the infinities with `posinf`/`neginf`
//! (default: the dtype's largest and lowest finite values), converted to the dtype.

use super::{Arg, Ex, Number, promoted_as};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// A bool-valued test of each element: `f` gets the value in f32 for float inputs; integer
/// and bool inputs give `int_value` everywhere.
fn test(
    name: &str,
    x: &Tensor,
    int_value: bool,
    f: impl FnOnce(&mut Ex, PRef) -> PRef,
) -> Result<Tensor> {
    let float = x.dtype().is_float();
    promoted_as(
        name,
        &[Arg::Tensor(x)],
        x.dtype(),
        Number::Common,
        DType::Bool,
        move |p, v, _| {
            if float {
                let v = p.cast(v[0], DType::F32);
                f(&mut Ex::new(p), v)
            } else {
                p.constant(Scalar::Bool(int_value), DType::Bool)
            }
        },
    )
}

/// `torch.isnan`.
pub fn isnan(x: &Tensor) -> Result<Tensor> {
    test(Isnan::NAME, x, false, |e, v| e.isnan(v))
}

/// `torch.isinf`.
pub fn isinf(x: &Tensor) -> Result<Tensor> {
    test(Isinf::NAME, x, false, |e, v| e.isinf(v))
}

/// `torch.isposinf`.
#[aten("aten::isposinf", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), call = Isposinf(self_))]
pub fn isposinf(x: &Tensor) -> Result<Tensor> {
    test(Isposinf::NAME, x, false, |e, v| e.eqk(v, f64::INFINITY))
}

/// `torch.isneginf`.
#[aten("aten::isneginf", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), call = Isneginf(self_))]
pub fn isneginf(x: &Tensor) -> Result<Tensor> {
    test(Isneginf::NAME, x, false, |e, v| e.eqk(v, f64::NEG_INFINITY))
}

/// `torch.isfinite`.
#[aten("aten::isfinite", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), call = Isfinite(self_))]
pub fn isfinite(x: &Tensor) -> Result<Tensor> {
    test(Isfinite::NAME, x, true, |e, v| {
        // |x| < inf is false for NaN and the infinities.
        let m = e.abs(v);
        e.ltk(m, f64::INFINITY)
    })
}

/// The IEEE sign bit of an f32 value (true for -0.0 and negative NaNs).
pub fn sign_bit(p: &mut ProgBuilder, v: PRef) -> PRef {
    let bits = p.bitcast(v, DType::I32);
    let zero = p.constant(Scalar::Int(0), DType::I32);
    p.cmp(CmpKind::Lt, bits, zero, DType::I32)
}

/// `torch.signbit`: integers test `x < 0`, bool is never negative.
#[aten("aten::signbit", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No), call = Signbit(self_))]
pub fn signbit(x: &Tensor) -> Result<Tensor> {
    let d = x.dtype();
    promoted_as(
        Signbit::NAME,
        &[Arg::Tensor(x)],
        d,
        Number::Common,
        DType::Bool,
        move |p, v, _| {
            if d.is_float() {
                let v = p.cast(v[0], DType::F32);
                sign_bit(p, v)
            } else if d == DType::Bool {
                p.constant(Scalar::Bool(false), DType::Bool)
            } else {
                let zero = p.constant(Scalar::Int(0), DType::I32);
                p.cmp(CmpKind::Lt, v[0], zero, DType::I32)
            }
        },
    )
}

/// The largest finite value of a float dtype.
pub fn finite_max(d: DType) -> f64 {
    match d {
        DType::BF16 => half::bf16::MAX.to_f64(),
        DType::F16 => half::f16::MAX.to_f64(),
        _ => f32::MAX as f64,
    }
}

/// `torch.nan_to_num(x, nan, posinf, neginf)`.
#[aten(
    "aten::nan_to_num",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = NanToNum(self_, nan, posinf, neginf)
)]
pub fn nan_to_num(
    x: &Tensor,
    nan: Option<f64>,
    posinf: Option<f64>,
    neginf: Option<f64>,
) -> Result<Tensor> {
    let d = x.dtype();
    let big = finite_max(d);
    let (nan, pos, neg) = (
        nan.unwrap_or(0.0),
        posinf.unwrap_or(big),
        neginf.unwrap_or(-big),
    );
    // Each replacement converted to the dtype, as `static_cast<scalar_t>` does.
    let conv = |v: f64| f32::from_bits(Scalar::Float(v).lane_bits(d)) as f64;
    promoted_as(
        NanToNum::NAME,
        &[Arg::Tensor(x)],
        d,
        Number::Common,
        d,
        move |p, v, _| {
            if !d.is_float() {
                return v[0];
            }
            let mut e = Ex::new(p);
            let v = e.f(v[0]);
            let isnan = e.isnan(v);
            let r = e.selk(isnan, conv(nan), v);
            let ispos = e.eqk(v, f64::INFINITY);
            let r = e.selk(ispos, conv(pos), r);
            let isneg = e.eqk(v, f64::NEG_INFINITY);
            e.selk(isneg, conv(neg), r)
        },
    )
}

/// `torch.logical_xor(a, b)`: bool, non-zero is true.
#[aten(
    "aten::logical_xor",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    call = LogicalXor(self_, other)
)]
pub fn logical_xor(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    promoted_as(
        LogicalXor::NAME,
        &[Arg::Tensor(a), Arg::Tensor(b)],
        DType::Bool,
        Number::Common,
        DType::Bool,
        |p, v, _| p.bin(BinOp::Xor, v[0], v[1], DType::Bool),
    )
}

// The registered overloads: one `#[aten]` function each.

#[aten("aten::isnan", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn isnan_op(a: Isnan<'_>) -> Result<Tensor> {
    isnan(a.self_)
}

#[aten("aten::isinf", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn isinf_op(a: Isinf<'_>) -> Result<Tensor> {
    isinf(a.self_)
}

#[aten(
    "aten::sgn",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No),
    kind = Decomposition
)]
fn sgn_op(a: Sgn<'_>) -> Result<Tensor> {
    crate::ops::unary::sign(a.self_)
}
