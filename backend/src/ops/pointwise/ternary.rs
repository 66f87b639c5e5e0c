//! Arithmetic over several operands: `addcmul`, `addcdiv`, `lerp`, the `clamp` forms with
//! tensor bounds and one-sided bounds, `where` with numbers, `rsub` and `sub.Scalar`.
//!
//! Float operators compute in f32 and round once ("opmath"), with a Python `value`/`weight`
//! unrounded: `addcmul` is `self + (value * t1) * t2`, `addcdiv` `self + (value * t1) / t2`,
//! `lerp` ATen's two-sided formula (`self + w * (end - self)` when `|w| < 0.5`, else
//! `end - (end - self) * (1 - w)`). PyTorch's vectorised CPU kernels fuse some of these
//! multiply-adds (one rounding instead of two): results may differ in the last bit of f32,
//! well inside `torch.testing`'s tolerance.

use super::{Arg, Number, common_dtype, not_implemented, promoted, promoted_exact};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, PRef, ProgBuilder};
use crate::ops::aten;
use crate::ops::helpers::compute;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `self + value * t1 * t2` (`div`: `self + value * t1 / t2`).
pub fn addcmul_div(
    x: &Tensor,
    t1_: &Tensor,
    t2_: &Tensor,
    value: Scalar,
    div: bool,
) -> Result<Tensor> {
    let (name, kernel) = if div {
        (Addcdiv::NAME, "addcdiv_cpu_out")
    } else {
        (Addcmul::NAME, "addcmul_cpu_out")
    };
    if div && !t1_.dtype().is_float() && !t2_.dtype().is_float() {
        return Err(TpuError::BadArgs(
            "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), for all dtypes.".into(),
        ));
    }
    let args = [Arg::Tensor(x), Arg::Tensor(t1_), Arg::Tensor(t2_)];
    let common = common_dtype(&args);
    if common == DType::Bool {
        return Err(not_implemented(kernel, common));
    }
    let product = move |p: &mut ProgBuilder, v: &[PRef], c: DType| {
        let ct = compute(c);
        let value = if c.is_float() {
            value
        } else {
            Scalar::Int(value.to_i64())
        };
        let k = p.constant(value, ct);
        let m = p.bin(BinOp::Mul, k, v[1], ct);
        let m = p.bin(if div { BinOp::Div } else { BinOp::Mul }, m, v[2], ct);
        p.bin(BinOp::Add, v[0], m, ct)
    };
    // An int64 result is checked; a wrapped intermediate does not matter (the lanes'
    // arithmetic is exact modulo 2^32, so the result is exact whenever it fits int32).
    promoted_exact(name, &args, Number::Opmath, product)
}

fn same_dtype(what: &str, x: &Tensor, other: &Tensor) -> Result<()> {
    if x.dtype() != other.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "expected dtype {} for `{what}` but got dtype {}",
            x.dtype().name(),
            other.dtype().name()
        )));
    }
    Ok(())
}

/// ATen's `lerp` in f32: `self + w * (end - self)` for `|w| < 0.5`, else
/// `end - (end - self) * (1 - w)` (exact at both ends).
fn lerp_prog(p: &mut ProgBuilder, s: PRef, e: PRef, w: PRef) -> PRef {
    let mut x = super::Ex::new(p);
    let (s, e, w) = (x.f(s), x.f(e), x.f(w));
    let d = x.sub(e, s);
    let aw = x.abs(w);
    let small = x.ltk(aw, 0.5);
    let wd = x.mul(w, d);
    let lo = x.add(s, wd);
    let omw = x.ksub(1.0, w);
    let dm = x.mul(d, omw);
    let hi = x.sub(e, dm);
    x.sel(small, lo, hi)
}

/// `torch.lerp(self, end, weight)` with a number or a tensor weight.
pub fn lerp(x: &Tensor, end: &Tensor, weight: Arg) -> Result<Tensor> {
    same_dtype("end", x, end)?;
    let name = match weight {
        Arg::Tensor(w) => {
            same_dtype("weight", x, w)?;
            LerpTensor::NAME
        }
        Arg::Number(_) => LerpScalar::NAME,
    };
    if !x.dtype().is_float() {
        return Err(not_implemented("lerp_kernel_scalar", x.dtype()));
    }
    promoted(
        name,
        &[Arg::Tensor(x), Arg::Tensor(end), weight],
        Number::Opmath,
        |c| c,
        |p, v, _| lerp_prog(p, v[0], v[1], v[2]),
    )
}

/// `torch.clamp(self, min, max)` with tensor (or number) bounds: `min(max(self, lo), hi)`,
/// NaN anywhere giving NaN, `hi` winning when `lo > hi`.
pub fn clamp_args(name: &str, x: &Tensor, lo: Option<Arg>, hi: Option<Arg>) -> Result<Tensor> {
    if lo.is_none() && hi.is_none() {
        return Err(TpuError::BadArgs(
            "torch.clamp: At least one of 'min' or 'max' must not be None".into(),
        ));
    }
    let mut args = vec![Arg::Tensor(x)];
    args.extend(lo);
    args.extend(hi);
    let common = common_dtype(&args);
    // `clamp_min.Tensor` / `clamp_max.Tensor` are PyTorch's `maximum` / `minimum` kernels, which
    // take bool (an or / an and); the other forms' kernels do not.
    let one_tensor_bound = matches!(
        (lo, hi),
        (Some(Arg::Tensor(_)), None) | (None, Some(Arg::Tensor(_)))
    );
    if common == DType::Bool && !one_tensor_bound {
        return Err(not_implemented("clamp_cpu", common));
    }
    let has_lo = lo.is_some();
    promoted(
        name,
        &args,
        Number::Common,
        |c| c,
        move |p, v, c| {
            let ct = compute(c);
            let mut r = v[0];
            let mut k = 1;
            if has_lo {
                r = p.bin(BinOp::Max, r, v[k], ct);
                k += 1;
            }
            if k < v.len() {
                r = p.bin(BinOp::Min, r, v[k], ct);
            }
            r
        },
    )
}

/// `torch.where(cond, a, b)` with numbers for either value.
pub fn where_args(name: &str, cond: &Tensor, a: Arg, b: Arg) -> Result<Tensor> {
    if cond.dtype() != DType::Bool {
        return Err(TpuError::DtypeMismatch(format!(
            "where expected condition to be a boolean tensor, but got a tensor with dtype {}",
            cond.dtype().scalar_type_name()
        )));
    }
    let common = common_dtype(&[a, b]);
    super::promoted_as(
        name,
        &[Arg::Tensor(cond), a, b],
        common,
        Number::Common,
        common,
        |p, v, c| {
            // The condition was converted to the common dtype with the others: read it as it is.
            let cnd = p.cast(v[0], DType::Bool);
            p.select(cnd, v[1], v[2], c)
        },
    )
}

/// `b - alpha * a` (`rsub`) or `a - alpha * b` (`sub.Scalar`), computed as `add` computes.
fn sub_like(name: &str, a: Arg, b: Arg, alpha: Scalar, number: Number) -> Result<Tensor> {
    let common = common_dtype(&[a, b]);
    if common == DType::Bool {
        return Err(TpuError::BadArgs(
            "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.".into(),
        ));
    }
    if !common.is_float() && matches!(alpha, Scalar::Float(f) if f.fract() != 0.0) {
        return Err(TpuError::BadArgs(format!(
            "For integral input tensors, argument alpha must not be a floating point number (result type {common})"
        )));
    }
    promoted_exact(name, &[a, b], number, move |p, v, c| {
        let ct = compute(c);
        let y = if alpha.to_f64() == 1.0 {
            v[1]
        } else {
            let k = p.constant(alpha, ct);
            p.bin(BinOp::Mul, v[1], k, ct)
        };
        p.bin(BinOp::Sub, v[0], y, ct)
    })
}

/// `torch.rsub(self, other, alpha)`: `other - alpha * self`.
#[aten(
    "aten::rsub.Tensor",
    dtypes = DType::NUMERIC,
    numbers = "other",
    shard = Sharding::pointwise(Lin::All),
    call = RsubTensor(self_, other, alpha)
)]
pub fn rsub(x: &Tensor, other: Arg, alpha: Scalar) -> Result<Tensor> {
    let name = match other {
        Arg::Tensor(_) => RsubTensor::NAME,
        Arg::Number(_) => RsubScalar::NAME,
    };
    // The number is wrapped into a tensor of the common dtype (it is not the second operand of
    // ATen's `sub`, whose scalar fast path keeps it unrounded).
    sub_like(name, other, Arg::Tensor(x), alpha, Number::Common)
}

/// `torch.sub(self, number, alpha)`.
#[aten(
    "aten::sub.Scalar",
    dtypes = DType::NUMERIC,
    shard = Sharding::pointwise(Lin::No),
    call = SubScalar(self_, other, alpha)
)]
pub fn sub_scalar(x: &Tensor, other: Scalar, alpha: Scalar) -> Result<Tensor> {
    sub_like(
        SubScalar::NAME,
        Arg::Tensor(x),
        Arg::Number(other),
        alpha,
        Number::Common,
    )
}

// The registered overloads: one `#[aten]` function each (and, in `defs`, those taking a
// Python number where the schema says `Tensor`, which `#[aten]` cannot type yet).

#[aten("aten::addcmul", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn addcmul_op(a: Addcmul<'_>) -> Result<Tensor> {
    addcmul_div(a.self_, a.tensor1, a.tensor2, a.value, false)
}

#[aten("aten::addcdiv", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn addcdiv_op(a: Addcdiv<'_>) -> Result<Tensor> {
    addcmul_div(a.self_, a.tensor1, a.tensor2, a.value, true)
}

#[aten("aten::lerp.Scalar", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn lerp_scalar_op(a: LerpScalar<'_>) -> Result<Tensor> {
    lerp(a.self_, a.end, Arg::Number(a.weight))
}

#[aten("aten::lerp.Tensor", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn lerp_tensor_op(a: LerpTensor<'_>) -> Result<Tensor> {
    lerp(a.self_, a.end, Arg::Tensor(a.weight))
}

#[aten("aten::clamp_min", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn clamp_min_op(a: ClampMin<'_>) -> Result<Tensor> {
    clamp_args(ClampMin::NAME, a.self_, Some(Arg::Number(a.min)), None)
}

#[aten("aten::clamp_max", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn clamp_max_op(a: ClampMax<'_>) -> Result<Tensor> {
    clamp_args(ClampMax::NAME, a.self_, None, Some(Arg::Number(a.max)))
}

#[aten("aten::clamp_min.Tensor", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn clamp_min_tensor_op(a: ClampMinTensor<'_>) -> Result<Tensor> {
    clamp_args(
        ClampMinTensor::NAME,
        a.self_,
        Some(Arg::Tensor(a.min)),
        None,
    )
}

#[aten("aten::clamp_max.Tensor", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn clamp_max_tensor_op(a: ClampMaxTensor<'_>) -> Result<Tensor> {
    clamp_args(
        ClampMaxTensor::NAME,
        a.self_,
        None,
        Some(Arg::Tensor(a.max)),
    )
}

#[aten("aten::where.ScalarOther", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn where_scalar_other_op(a: WhereScalarOther<'_>) -> Result<Tensor> {
    let (x, y) = (Arg::Tensor(a.self_), Arg::Number(a.other));
    where_args(WhereScalarOther::NAME, a.condition, x, y)
}

#[aten("aten::where.ScalarSelf", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn where_scalar_self_op(a: WhereScalarSelf<'_>) -> Result<Tensor> {
    let (x, y) = (Arg::Number(a.self_), Arg::Tensor(a.other));
    where_args(WhereScalarSelf::NAME, a.condition, x, y)
}

#[aten("aten::where.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn where_scalar_op(a: WhereScalar<'_>) -> Result<Tensor> {
    let (x, y) = (Arg::Number(a.self_), Arg::Number(a.other));
    where_args(WhereScalar::NAME, a.condition, x, y)
}

#[aten("aten::rsub.Scalar", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn rsub_scalar_op(a: RsubScalar<'_>) -> Result<Tensor> {
    rsub(a.self_, Arg::Number(a.other), a.alpha)
}

// The overloads whose bounds or `other` may be Python numbers where the schema says `Tensor`
// (the binder keeps a number there): `numbers = ...`.

#[aten("aten::clamp.Tensor", dtypes = DType::NUMERIC, numbers = "min, max", shard = Sharding::pointwise(Lin::No))]
fn clamp_tensor_op(a: ClampTensor<'_>) -> Result<Tensor> {
    clamp_args(ClampTensor::NAME, a.self_, a.min, a.max)
}
