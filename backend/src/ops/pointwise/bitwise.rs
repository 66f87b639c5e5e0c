//! Bitwise operators on integers and bools: `bitwise_and`/`or`/`xor` (tensor, number, or a
//! number first), `bitwise_not`, `bitwise_left_shift`/`bitwise_right_shift`.
//!
//! Shifts follow ATen's definitions: a left shift by a negative amount or by the dtype's width
//! or more gives 0; a right shift by a negative amount or by the width less one or more gives
//! the sign fill (`a >> (width - 1)`). Floating inputs are refused with PyTorch's errors.

use super::{Arg, Number, common_dtype, not_implemented, promoted};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, UnOp};
use crate::ops::aten;
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// `and`, `or` or `xor`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Logic {
    /// `&`.
    And,
    /// `|`.
    Or,
    /// `^`.
    Xor,
}

impl Logic {
    fn short(self) -> &'static str {
        match self {
            Logic::And => "and",
            Logic::Or => "or",
            Logic::Xor => "xor",
        }
    }

    fn op(self) -> BinOp {
        match self {
            Logic::And => BinOp::And,
            Logic::Or => BinOp::Or,
            Logic::Xor => BinOp::Xor,
        }
    }
}

fn overload(a: &Arg, b: &Arg) -> &'static str {
    match (a, b) {
        (Arg::Tensor(_), Arg::Tensor(_)) => "Tensor",
        (Arg::Tensor(_), Arg::Number(_)) => "Scalar",
        _ => "Scalar_Tensor",
    }
}

/// `torch.bitwise_and(a, b)` (and `or`, `xor`): either operand may be a number.
pub fn bitwise(kind: Logic, a: Arg, b: Arg) -> Result<Tensor> {
    let name = format!("aten::bitwise_{}.{}", kind.short(), overload(&a, &b));
    let common = common_dtype(&[a, b]);
    if common.is_float() {
        return Err(not_implemented(
            &format!("bitwise_{}_cpu", kind.short()),
            common,
        ));
    }
    promoted(
        &name,
        &[a, b],
        Number::Common,
        |c| c,
        move |p, v, _| p.bin(kind.op(), v[0], v[1], DType::I32),
    )
}

/// `torch.bitwise_not(x)` (`logical_not` for bool).
#[aten(
    "aten::bitwise_not",
    dtypes = DType::INTEGRAL_AND_BOOL,
    shard = Sharding::pointwise(Lin::No),
    call = BitwiseNot(self_)
)]
pub fn bitwise_not(x: &Tensor) -> Result<Tensor> {
    let d = x.dtype();
    if d.is_float() {
        return Err(not_implemented("bitwise_not_cpu", d));
    }
    promoted(
        BitwiseNot::NAME,
        &[Arg::Tensor(x)],
        Number::Common,
        |c| c,
        move |p, v, _| {
            if d == DType::Bool {
                let one = p.constant(Scalar::Int(1), DType::I32);
                p.bin(BinOp::Xor, v[0], one, DType::I32)
            } else {
                p.un(UnOp::Not, v[0], DType::I32)
            }
        },
    )
}

/// Bits of an integer dtype.
fn width(d: DType) -> i64 {
    (d.size() * 8) as i64
}

/// `a << b` or `a >> b` on 32-bit lanes with ATen's out-of-range rules for a `bits`-wide
/// dtype.
fn shift(p: &mut ProgBuilder, a: PRef, b: PRef, bits: i64, left: bool) -> PRef {
    let i = DType::I32;
    let zero = p.constant(Scalar::Int(0), i);
    let neg = p.cmp(CmpKind::Lt, b, zero, i);
    // The lanes hold 32 bits: a shift by 32 or more fills them.
    let lane_max = bits.min(32);
    if left {
        let limit = p.constant(Scalar::Int(lane_max), i);
        let big = p.cmp(CmpKind::Ge, b, limit, i);
        let out = p.bin(BinOp::Or, neg, big, DType::Bool);
        let s = p.bin(BinOp::Shl, a, b, i);
        p.select(out, zero, s, i)
    } else {
        let limit = p.constant(Scalar::Int(lane_max - 1), i);
        let big = p.cmp(CmpKind::Gt, b, limit, i);
        let out = p.bin(BinOp::Or, neg, big, DType::Bool);
        let amount = p.select(out, limit, b, i);
        p.bin(BinOp::Sra, a, amount, i)
    }
}

/// `torch.bitwise_left_shift(a, b)` / `bitwise_right_shift`.
pub fn bitwise_shift(a: Arg, b: Arg, left: bool) -> Result<Tensor> {
    let dir = if left { "left" } else { "right" };
    let name = format!(
        "aten::bitwise_{dir}_shift.{}",
        match (&a, &b) {
            (Arg::Tensor(_), Arg::Tensor(_)) => "Tensor",
            (Arg::Tensor(_), Arg::Number(_)) => "Tensor_Scalar",
            _ => "Scalar_Tensor",
        }
    );
    let common = common_dtype(&[a, b]);
    if common.is_float() || common == DType::Bool {
        return Err(not_implemented(
            if left { "lshift_cpu" } else { "rshift_cpu" },
            common,
        ));
    }
    let bits = width(common);
    promoted(
        &name,
        &[a, b],
        Number::Common,
        |c| c,
        move |p, v, _| shift(p, v[0], v[1], bits, left),
    )
}

/// The dtypes the shifts take.
const SHIFTABLE: &[DType] = &[DType::I32, DType::I64];

// The registered overloads: one `#[aten]` function each.

#[aten("aten::bitwise_and.Tensor", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_and_tensor_op(a: BitwiseAndTensor<'_>) -> Result<Tensor> {
    bitwise(Logic::And, Arg::Tensor(a.self_), Arg::Tensor(a.other))
}

#[aten("aten::bitwise_and.Scalar", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_and_scalar_op(a: BitwiseAndScalar<'_>) -> Result<Tensor> {
    bitwise(Logic::And, Arg::Tensor(a.self_), Arg::Number(a.other))
}

#[aten("aten::bitwise_and.Scalar_Tensor", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_and_scalar_tensor_op(a: BitwiseAndScalarTensor<'_>) -> Result<Tensor> {
    bitwise(Logic::And, Arg::Number(a.self_), Arg::Tensor(a.other))
}

#[aten("aten::bitwise_or.Tensor", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_or_tensor_op(a: BitwiseOrTensor<'_>) -> Result<Tensor> {
    bitwise(Logic::Or, Arg::Tensor(a.self_), Arg::Tensor(a.other))
}

#[aten("aten::bitwise_or.Scalar", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_or_scalar_op(a: BitwiseOrScalar<'_>) -> Result<Tensor> {
    bitwise(Logic::Or, Arg::Tensor(a.self_), Arg::Number(a.other))
}

#[aten("aten::bitwise_or.Scalar_Tensor", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_or_scalar_tensor_op(a: BitwiseOrScalarTensor<'_>) -> Result<Tensor> {
    bitwise(Logic::Or, Arg::Number(a.self_), Arg::Tensor(a.other))
}

#[aten("aten::bitwise_xor.Tensor", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_xor_tensor_op(a: BitwiseXorTensor<'_>) -> Result<Tensor> {
    bitwise(Logic::Xor, Arg::Tensor(a.self_), Arg::Tensor(a.other))
}

#[aten("aten::bitwise_xor.Scalar", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_xor_scalar_op(a: BitwiseXorScalar<'_>) -> Result<Tensor> {
    bitwise(Logic::Xor, Arg::Tensor(a.self_), Arg::Number(a.other))
}

#[aten("aten::bitwise_xor.Scalar_Tensor", dtypes = DType::INTEGRAL_AND_BOOL, shard = Sharding::pointwise(Lin::No))]
fn bitwise_xor_scalar_tensor_op(a: BitwiseXorScalarTensor<'_>) -> Result<Tensor> {
    bitwise(Logic::Xor, Arg::Number(a.self_), Arg::Tensor(a.other))
}

#[aten("aten::bitwise_left_shift.Tensor", dtypes = SHIFTABLE, shard = Sharding::pointwise(Lin::No))]
fn bitwise_left_shift_tensor_op(a: BitwiseLeftShiftTensor<'_>) -> Result<Tensor> {
    bitwise_shift(Arg::Tensor(a.self_), Arg::Tensor(a.other), true)
}

#[aten("aten::bitwise_left_shift.Tensor_Scalar", dtypes = SHIFTABLE, shard = Sharding::pointwise(Lin::No))]
fn bitwise_left_shift_tensor_scalar_op(a: BitwiseLeftShiftTensorScalar<'_>) -> Result<Tensor> {
    bitwise_shift(Arg::Tensor(a.self_), Arg::Number(a.other), true)
}

#[aten("aten::bitwise_left_shift.Scalar_Tensor", dtypes = SHIFTABLE, shard = Sharding::pointwise(Lin::No))]
fn bitwise_left_shift_scalar_tensor_op(a: BitwiseLeftShiftScalarTensor<'_>) -> Result<Tensor> {
    bitwise_shift(Arg::Number(a.self_), Arg::Tensor(a.other), true)
}

#[aten("aten::bitwise_right_shift.Tensor", dtypes = SHIFTABLE, shard = Sharding::pointwise(Lin::No))]
fn bitwise_right_shift_tensor_op(a: BitwiseRightShiftTensor<'_>) -> Result<Tensor> {
    bitwise_shift(Arg::Tensor(a.self_), Arg::Tensor(a.other), false)
}

#[aten("aten::bitwise_right_shift.Tensor_Scalar", dtypes = SHIFTABLE, shard = Sharding::pointwise(Lin::No))]
fn bitwise_right_shift_tensor_scalar_op(a: BitwiseRightShiftTensorScalar<'_>) -> Result<Tensor> {
    bitwise_shift(Arg::Tensor(a.self_), Arg::Number(a.other), false)
}

#[aten("aten::bitwise_right_shift.Scalar_Tensor", dtypes = SHIFTABLE, shard = Sharding::pointwise(Lin::No))]
fn bitwise_right_shift_scalar_tensor_op(a: BitwiseRightShiftScalarTensor<'_>) -> Result<Tensor> {
    bitwise_shift(Arg::Number(a.self_), Arg::Tensor(a.other), false)
}
