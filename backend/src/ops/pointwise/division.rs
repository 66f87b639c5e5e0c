//! Division and its relatives: `div` (true, `trunc`, `floor`), `floor_divide`, `fmod`, with
//! PyTorch's dtype-specific numerics.
//!
//! ATen's CPU kernels treat a divisor that is one value broadcast over the whole iteration (a
//! Python number, a zero-dimensional or one-element tensor, an expanded view: TensorIterator's
//! `is_scalar`) specially when the common dtype is bfloat16 or float16: the divisor keeps its
//! original value in f32 ("opmath") and the whole quotient is computed in f32, rounded once.
//! Otherwise a reduced-precision division runs on `Vectorized<BFloat16>` values, which round
//! every intermediate to the dtype:
//! - `trunc`: the quotient is rounded to bf16/f16 before it is truncated;
//! - `floor`: every step of `div_floor_floating` (`fmod`, `a - mod`, `/ b`, the corrections)
//!   rounds to bf16/f16.
//!
//! float32 computes in f32 either way. Integer division truncates (`trunc`) or floors
//! (`floor`); integer division by zero, which PyTorch raises as ZeroDivisionError, gives 0 here
//! (a kernel cannot raise).

use super::{Arg, Number, common_dtype, promoted_as, promoted_in, tensors_of};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, UnOp};
use crate::ops::aten;
use crate::ops::checks::{Pending, check_values};
use crate::ops::helpers::OpScope;
use crate::ops::helpers::compute;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// Whether `b` is one value broadcast over the iteration (TensorIterator's `is_scalar`): a
/// number, or a tensor every dim of which has size 1 or stride 0.
pub(crate) fn is_scalar(b: &Arg) -> bool {
    match b {
        Arg::Number(_) => true,
        Arg::Tensor(t) => t
            .layout()
            .shape
            .iter()
            .zip(&t.layout().strides)
            .all(|(n, s)| *n == 1 || *s == 0),
    }
}

/// How a division computes for its common dtype and divisor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Integers.
    Int,
    /// f32 throughout, rounded once (float32, or a reduced float with a scalar divisor).
    Opmath,
    /// Reduced float, every intermediate rounded to `DType`.
    Rounded(DType),
}

fn path(common: DType, b: &Arg) -> Path {
    if !common.is_float() {
        Path::Int
    } else if common == DType::F32 || is_scalar(b) {
        Path::Opmath
    } else {
        Path::Rounded(common)
    }
}

/// The operands in f32: `a` converted through the common dtype, `b` too unless it is a scalar
/// divisor on the opmath path (then its original value).
fn operands(p: &mut ProgBuilder, v: &[PRef], raw_b: Option<PRef>, path: Path) -> (PRef, PRef) {
    let f = DType::F32;
    let a = p.cast(v[0], f);
    let b = match (path, raw_b) {
        (Path::Opmath, Some(raw)) => p.cast(raw, f),
        _ => p.cast(v[1], f),
    };
    (a, b)
}

/// Runs a division-like operator: `f(p, a, b)` on f32 lanes (floats) with `round(p, x)`
/// applying the path's intermediate rounding, or `int(p, a, b)` on integer lanes.
fn divide(
    name: &str,
    a: &Tensor,
    b: Arg,
    out: impl FnOnce(DType) -> DType,
    float: impl FnOnce(&mut ProgBuilder, PRef, PRef, &dyn Fn(&mut ProgBuilder, PRef) -> PRef) -> PRef,
    int: impl FnOnce(&mut ProgBuilder, PRef, PRef, DType) -> PRef,
) -> Result<Tensor> {
    let args = [Arg::Tensor(a), b];
    let common = common_dtype(&args);
    let path = path(common, &b);
    let raw_b = matches!(b, Arg::Tensor(_)) && path == Path::Opmath;
    let op = OpScope::new(name, &tensors_of(&args))?;
    let out = out(common);
    // Integer division (an integer result; true division of integers gives floats).
    let check = if path == Path::Int && !out.is_float() {
        int_divisor_check(&op, b)?
    } else {
        Pending::none()
    };
    let r = promoted_in(&op, &args, common, Number::Opmath, out, move |p, v, c| {
        if path == Path::Int {
            return int(p, v[0], v[1], c);
        }
        // `promoted_as` converted every tensor to the common dtype; a scalar tensor divisor on
        // the opmath path is read as it is, from its input node.
        let raw = if raw_b { Some(raw_input(p, 1)) } else { None };
        let (x, y) = operands(p, v, raw, path);
        let round = move |p: &mut ProgBuilder, r: PRef| -> PRef {
            match path {
                Path::Rounded(d) => {
                    let q = p.cast(r, d);
                    p.cast(q, DType::F32)
                }
                _ => r,
            }
        };
        float(p, x, y, &round)
    })?;
    check.guards(op.rt(), &[&r]);
    if path == Path::Int && out == DType::I64 {
        // -2^31 // -1 is 2^31, which int32 cannot hold (`ops::wide`); the quotient again in
        // f32 tells (a zero divisor, refused by the check above, is read as one here).
        super::super::wide::exact_int64(&op, &args, &r, |p, v| {
            let f = DType::F32;
            let (zero, one) = (
                p.constant(Scalar::Float(0.0), f),
                p.constant(Scalar::Float(1.0), f),
            );
            let z = p.cmp(CmpKind::Eq, v[1], zero, f);
            let y = p.select(z, one, v[1], f);
            let q = p.bin(BinOp::Div, v[0], y, f);
            p.un(UnOp::Trunc, q, f)
        })?
        .guards(op.rt(), &[&r]);
    }
    Ok(r)
}

/// Integer division by zero is PyTorch's `ZeroDivisionError` (a `RuntimeError`): at once for
/// a number, checked on the device for a tensor (see [`check_values`]).
pub(crate) fn int_divisor_check(op: &OpScope, b: Arg) -> Result<Pending> {
    let zero = || TpuError::BadArgs("ZeroDivisionError".into());
    match b {
        Arg::Number(s) if s.to_f64() == 0.0 => Err(zero()),
        Arg::Number(_) => Ok(Pending::none()),
        Arg::Tensor(t) => check_values(
            op,
            t,
            |p, v| {
                let z = p.constant(Scalar::Int(0), DType::I32);
                p.cmp(CmpKind::Ne, v, z, DType::I32)
            },
            move |_| zero(),
        ),
    }
}

/// The program's input node for tensor operand `i` (as `map` created it, in its own dtype).
fn raw_input(p: &mut ProgBuilder, i: u32) -> PRef {
    let at = p
        .prog
        .nodes
        .iter()
        .position(|n| n.op == crate::ir::POp::Input(i))
        .expect("an input node per tensor operand");
    at as PRef
}

/// True division: float results (integers divide as float32).
fn true_div(name: &str, a: &Tensor, b: Arg) -> Result<Tensor> {
    divide(
        name,
        a,
        b,
        |c| if c.is_float() { c } else { DType::F32 },
        |p, x, y, _| p.bin(BinOp::Div, x, y, DType::F32),
        |p, x, y, _| {
            let f = DType::F32;
            let (x, y) = (p.cast(x, f), p.cast(y, f));
            p.bin(BinOp::Div, x, y, f)
        },
    )
}

/// Integer division rounding toward negative infinity: the truncated quotient, minus one when
/// the remainder is non-zero and its sign differs from the divisor's.
fn int_floor_div(p: &mut ProgBuilder, x: PRef, y: PRef, c: DType) -> PRef {
    let ct = compute(c);
    let q = p.bin(BinOp::Div, x, y, ct);
    let r = p.bin(BinOp::Rem, x, y, ct);
    let zero = p.constant(Scalar::Int(0), ct);
    let one = p.constant(Scalar::Int(1), ct);
    let nz = p.cmp(CmpKind::Ne, r, zero, ct);
    let rneg = p.cmp(CmpKind::Lt, r, zero, ct);
    let yneg = p.cmp(CmpKind::Lt, y, zero, ct);
    let differ = p.cmp(CmpKind::Ne, rneg, yneg, DType::I32);
    let fix = p.bin(BinOp::And, nz, differ, DType::I32);
    let fixv = p.select(fix, one, zero, ct);
    p.bin(BinOp::Sub, q, fixv, ct)
}

/// ATen's `div_floor_floating` in f32 with `round` after every step (what Python's `//`
/// gives: `1 // 0.1 == 9`, where `floor(1 / 0.1)` would give 10): `(a - fmod(a, b)) / b`,
/// minus one when the remainder and `b` differ in sign, then rounded to the nearest integer;
/// `a / b` when `b` is 0.
fn floor_div_float(
    p: &mut ProgBuilder,
    a: PRef,
    b: PRef,
    round: &dyn Fn(&mut ProgBuilder, PRef) -> PRef,
) -> PRef {
    let f = DType::F32;
    let zero = p.constant(Scalar::Float(0.0), f);
    let one = p.constant(Scalar::Float(1.0), f);
    let half = p.constant(Scalar::Float(0.5), f);
    let q = p.bin(BinOp::Div, a, b, f);
    let q = round(p, q);
    let m = p.bin(BinOp::Rem, a, b, f);
    let m = round(p, m);
    let am = p.bin(BinOp::Sub, a, m, f);
    let am = round(p, am);
    let div = p.bin(BinOp::Div, am, b, f);
    let div = round(p, div);
    let mnz = p.cmp(CmpKind::Ne, m, zero, f);
    let bneg = p.cmp(CmpKind::Lt, b, zero, f);
    let mneg = p.cmp(CmpKind::Lt, m, zero, f);
    let differ = p.cmp(CmpKind::Ne, bneg, mneg, DType::I32);
    let fix = p.bin(BinOp::And, mnz, differ, DType::I32);
    let dm1 = p.bin(BinOp::Sub, div, one, f);
    let dm1 = round(p, dm1);
    let div = p.select(fix, dm1, div, f);
    let fl = p.un(UnOp::Floor, div, f);
    let frac = p.bin(BinOp::Sub, div, fl, f);
    let frac = round(p, frac);
    let up = p.cmp(CmpKind::Gt, frac, half, f);
    let fl1 = p.bin(BinOp::Add, fl, one, f);
    let fl1 = round(p, fl1);
    let r = p.select(up, fl1, fl, f);
    // A zero quotient takes the sign of a / b.
    let neg_zero = p.constant(Scalar::Float(-0.0), f);
    let qneg = p.cmp(CmpKind::Lt, q, zero, f);
    let z = p.select(qneg, neg_zero, zero, f);
    let dz = p.cmp(CmpKind::Eq, div, zero, f);
    let r = p.select(dz, z, r, f);
    let bz = p.cmp(CmpKind::Eq, b, zero, f);
    p.select(bz, q, r, f)
}

/// `a / b` with an optional rounding mode (`trunc`, `floor`).
pub fn div(a: &Tensor, b: Arg, rounding: Option<&str>) -> Result<Tensor> {
    let name = match (rounding.is_some(), matches!(b, Arg::Tensor(_))) {
        (true, true) => DivTensorMode::NAME,
        (true, false) => DivScalarMode::NAME,
        (false, true) => DivTensor::NAME,
        (false, false) => DivScalar::NAME,
    };
    match rounding {
        None => true_div(name, a, b),
        Some("trunc") => divide(
            name,
            a,
            b,
            |c| c,
            |p, x, y, round| {
                let q = p.bin(BinOp::Div, x, y, DType::F32);
                let q = round(p, q);
                p.un(UnOp::Trunc, q, DType::F32)
            },
            |p, x, y, c| p.bin(BinOp::Div, x, y, compute(c)),
        ),
        Some("floor") => floor_named(name, a, b),
        Some(other) => Err(TpuError::BadArgs(format!(
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{other}'"
        ))),
    }
}

fn floor_named(name: &str, a: &Tensor, b: Arg) -> Result<Tensor> {
    divide(name, a, b, |c| c, floor_div_float, int_floor_div)
}

/// `torch.floor_divide(a, b)`: `div(a, b, rounding_mode='floor')`.
#[aten(
    "aten::floor_divide",
    dtypes = DType::NUMERIC,
    numbers = "other",
    shard = Sharding::pointwise(Lin::No),
    call = FloorDivide(self_, other)
)]
pub fn floor_divide(a: &Tensor, b: Arg) -> Result<Tensor> {
    let name = if matches!(b, Arg::Tensor(_)) {
        FloorDivide::NAME
    } else {
        FloorDivideScalar::NAME
    };
    floor_named(name, a, b)
}

/// `torch.fmod(a, b)`: the remainder of truncating division, with the sign of `a` (C `fmod`,
/// exact in floating point; integer `%`).
#[aten(
    "aten::fmod.Tensor",
    dtypes = DType::NUMERIC,
    numbers = "other",
    shard = Sharding::pointwise(Lin::No),
    call = FmodTensor(self_, other)
)]
pub fn fmod(a: &Tensor, b: Arg) -> Result<Tensor> {
    let name = if matches!(b, Arg::Tensor(_)) {
        FmodTensor::NAME
    } else {
        FmodScalar::NAME
    };
    let args = [Arg::Tensor(a), b];
    let common = common_dtype(&args);
    if common == DType::Bool {
        return Err(super::not_implemented("fmod_cpu", common));
    }
    if common.is_float() {
        return promoted_as(name, &args, common, Number::Common, common, |p, v, c| {
            p.bin(BinOp::Rem, v[0], v[1], compute(c))
        });
    }
    let op = OpScope::new(name, &tensors_of(&args))?;
    let check = int_divisor_check(&op, b)?;
    let r = promoted_in(&op, &args, common, Number::Common, common, |p, v, c| {
        p.bin(BinOp::Rem, v[0], v[1], compute(c))
    })?;
    check.guards(op.rt(), &[&r]);
    Ok(r)
}

impl Tensor {
    /// `self / other`.
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        div(self, Arg::Tensor(other), None)
    }
}

// The registered overloads: one `#[aten]` function each (and, in `defs`, those taking a
// Python number where the schema says `Tensor`, which `#[aten]` cannot type yet).

#[aten("aten::div.Scalar", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::All))]
fn div_scalar_op(a: DivScalar<'_>) -> Result<Tensor> {
    div(a.self_, Arg::Number(a.other), None)
}

#[aten("aten::div.Scalar_mode", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn div_scalar_mode_op(a: DivScalarMode<'_>) -> Result<Tensor> {
    div(a.self_, Arg::Number(a.other), a.rounding_mode)
}

#[aten("aten::floor_divide.Scalar", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn floor_divide_scalar_op(a: FloorDivideScalar<'_>) -> Result<Tensor> {
    floor_divide(a.self_, Arg::Number(a.other))
}

#[aten("aten::fmod.Scalar", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn fmod_scalar_op(a: FmodScalar<'_>) -> Result<Tensor> {
    fmod(a.self_, Arg::Number(a.other))
}

// The overloads whose divisor may be a Python number where the schema says `Tensor` (the
// binder keeps a number there: `x / 2` reaches `div.Tensor`): `numbers = "other"`.

#[aten("aten::div.Tensor", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::First))]
fn div_tensor_op(a: DivTensor<'_>) -> Result<Tensor> {
    div(a.self_, a.other, None)
}

#[aten("aten::div.Tensor_mode", dtypes = DType::ALL_TPU, numbers = "other", shard = Sharding::pointwise(Lin::No))]
fn div_tensor_mode_op(a: DivTensorMode<'_>) -> Result<Tensor> {
    div(a.self_, a.other, a.rounding_mode)
}

#[aten(
    "aten::true_divide.Tensor",
    dtypes = DType::ALL_TPU,
    kind = Decomposition,
    numbers = "other",
    shard = Sharding::pointwise(Lin::First)
)]
fn true_divide_tensor_op(a: TrueDivideTensor<'_>) -> Result<Tensor> {
    div(a.self_, a.other, None)
}
