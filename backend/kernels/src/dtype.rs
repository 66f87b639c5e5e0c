//! Element types, scalars and PyTorch's type-promotion rules.
//!
//! On the device every element is computed in a 32-bit lane: floating types as f32 (bf16 and f16
//! widen exactly on load and round to nearest even on store, as PyTorch's CPU kernels compute
//! them), integer types (uint8, int8, int32, int64) and bool as i32 (int8 sign-extended on
//! load; uint8 with int8 promotes to int32, not PyTorch's int16, which is not a dtype here). `int64` tensors are stored as 8 bytes but computed in 32
//! bits: values must fit in i32 (uploads check this).

use std::fmt;

use tpuemu_isa::ops::{MemFmt, VType};

/// A tensor element type.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum DType {
    /// `torch.bool`.
    Bool,
    /// `torch.uint8`: one byte, computed in a 32-bit lane (stores keep the low 8 bits).
    U8,
    /// `torch.int8`: one byte, sign-extended into a 32-bit lane on load (stores keep the low 8
    /// bits).
    I8,
    /// `torch.int32`.
    I32,
    /// `torch.int64`.
    I64,
    /// `torch.float16`.
    F16,
    /// `torch.bfloat16`.
    BF16,
    /// `torch.float32`.
    F32,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
    ];

    /// The dtypes an operator supports, named once (an `OpDef`'s `dtypes`). `uint8` and `int8`
    /// are storage types here: operators compute them after a cast, so the sets leave them out.
    ///
    /// Floating point: float32, bfloat16, float16.
    pub const FLOATING: &'static [DType] = &[DType::F32, DType::BF16, DType::F16];
    /// Floating point and bool (attention masks).
    pub const FLOATING_AND_BOOL: &'static [DType] =
        &[DType::F32, DType::BF16, DType::F16, DType::Bool];
    /// Floating point and int64 (class-index targets, index outputs).
    pub const FLOATING_AND_I64: &'static [DType] =
        &[DType::F32, DType::BF16, DType::F16, DType::I64];
    /// Numbers: floating point, int32, int64 (no bool).
    pub const NUMERIC: &'static [DType] =
        &[DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64];
    /// Integers and bool (the bitwise operators).
    pub const INTEGRAL_AND_BOOL: &'static [DType] = &[DType::I32, DType::I64, DType::Bool];
    /// Every dtype a kernel computes: numbers and bool.
    pub const ALL_TPU: &'static [DType] = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// PyTorch's C++ `ScalarType` name (`Float`, `BFloat16`, `Long`, ...), as its messages
    /// print it ("not implemented for 'Bool'").
    pub const fn scalar_type_name(self) -> &'static str {
        match self {
            DType::Bool => "Bool",
            DType::U8 => "Byte",
            DType::I8 => "Char",
            DType::I32 => "Int",
            DType::I64 => "Long",
            DType::F16 => "Half",
            DType::BF16 => "BFloat16",
            DType::F32 => "Float",
        }
    }

    /// PyTorch's `canCast`: whether an in-place or `out=` result of `self` may be written to
    /// `to` (no float to integer, no number to bool).
    pub const fn can_cast(self, to: DType) -> bool {
        let float_to_integer = self.is_float() && !to.is_float();
        let number_to_bool = !matches!(self, DType::Bool) && matches!(to, DType::Bool);
        !float_to_integer && !number_to_bool
    }

    /// Bytes per element in memory.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 => 8,
        }
    }

    /// Floating point.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }

    /// Integer (not bool).
    pub const fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I8 | DType::I32 | DType::I64)
    }

    /// How a device lane holds it.
    pub const fn lane(self) -> VType {
        if self.is_float() {
            VType::F32
        } else {
            VType::I32
        }
    }

    /// How vector loads and stores move it.
    pub const fn mem(self) -> MemFmt {
        match self {
            DType::Bool | DType::U8 | DType::I8 => MemFmt::U8,
            DType::I32 | DType::F32 => MemFmt::W32,
            DType::I64 => MemFmt::I64,
            DType::F16 => MemFmt::F16,
            DType::BF16 => MemFmt::Bf16,
        }
    }

    /// PyTorch's name (`float32`, `bfloat16`, `int64`, `bool`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
        }
    }

    /// Parses PyTorch names with or without `torch.` (`float32`, `float`, `bf16`, `long`, ...).
    pub fn from_name(s: &str) -> Option<DType> {
        Some(match s.trim_start_matches("torch.") {
            "bool" => DType::Bool,
            "uint8" | "byte" | "u8" => DType::U8,
            "int8" | "char" | "i8" => DType::I8,
            "int32" | "int" | "i32" => DType::I32,
            "int64" | "long" | "i64" => DType::I64,
            "float16" | "half" | "f16" => DType::F16,
            "bfloat16" | "bf16" => DType::BF16,
            "float32" | "float" | "f32" => DType::F32,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "torch.{}", self.name())
    }
}

/// `torch.promote_types` for our dtypes.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a, b) {
        (Bool, x) | (x, Bool) => x,
        (I32, I64) | (I64, I32) => I64,
        // PyTorch gives int16 for uint8 with int8; int16 is not a dtype here: int32.
        (U8, I8) | (I8, U8) => I32,
        (U8 | I8, x) | (x, U8 | I8) if x.is_int() => x,
        (x, y) if x.is_int() && y.is_float() => y,
        (x, y) if x.is_float() && y.is_int() => x,
        // f16 and bf16 meet at f32; f32 wins over both.
        _ => F32,
    }
}

/// A Python number or a zero-dimensional value.
#[derive(Clone, Copy, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub enum Scalar {
    /// `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
}

impl Scalar {
    /// The dtype PyTorch gives a wrapped number of this kind (`float32` being the default float
    /// dtype).
    pub fn dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::F32,
        }
    }

    /// As f64.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// As i64 (floats truncate toward zero).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }

    /// The value as PyTorch's `Scalar::to<scalar_t>()` gives it for `dtype` (what a kernel that
    /// computes in the dtype multiplies by): integers truncate toward zero (`0.6` is `0` for
    /// int64), bool is "not zero", bf16/f16 round to the dtype, f32 rounds to f32.
    pub fn as_dtype(self, dtype: DType) -> Scalar {
        match dtype {
            DType::Bool => Scalar::Bool(self.to_f64() != 0.0),
            DType::U8 | DType::I8 | DType::I32 | DType::I64 => Scalar::Int(self.to_i64()),
            DType::F32 => Scalar::Float(self.to_f64() as f32 as f64),
            DType::BF16 => Scalar::Float(half::bf16::from_f64(self.to_f64()).to_f64()),
            DType::F16 => Scalar::Float(half::f16::from_f64(self.to_f64()).to_f64()),
        }
    }

    /// The 32 bits of a lane holding this value as `dtype` (f32 bits for floats, i32 for the
    /// rest; bf16/f16 values are rounded to the dtype first, as PyTorch does).
    pub fn lane_bits(self, dtype: DType) -> u32 {
        match dtype {
            DType::F32 => (self.to_f64() as f32).to_bits(),
            DType::BF16 => half::bf16::from_f64(self.to_f64()).to_f32().to_bits(),
            DType::F16 => half::f16::from_f64(self.to_f64()).to_f32().to_bits(),
            DType::Bool => (self.to_f64() != 0.0) as u32,
            DType::U8 => self.to_i64() as u8 as u32,
            DType::I8 => self.to_i64() as i8 as i32 as u32,
            DType::I32 | DType::I64 => self.to_i64() as i32 as u32,
        }
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::Float(v)
    }
}

impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::Int(v)
    }
}

impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}

/// An operand of a type-promoting operation, by priority class (`torch.result_type`).
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    /// A tensor with at least one dimension.
    Tensor(DType),
    /// A zero-dimensional tensor.
    ZeroDim(DType),
    /// A Python number.
    Number(Scalar),
}

/// `torch.result_type`: dimensioned tensors first, then zero-dimensional ones, then numbers; a
/// lower class only matters when it is of a higher category (bool < integer < float).
pub fn result_type(operands: &[Operand]) -> DType {
    let mut dim: Option<DType> = None;
    let mut zero: Option<DType> = None;
    let mut wrapped: Option<DType> = None;
    let fold =
        |acc: &mut Option<DType>, d: DType| *acc = Some(acc.map_or(d, |a| promote_types(a, d)));
    for o in operands {
        match *o {
            Operand::Tensor(d) => fold(&mut dim, d),
            Operand::ZeroDim(d) => fold(&mut zero, d),
            Operand::Number(s) => fold(&mut wrapped, s.dtype()),
        }
    }
    let combine = |higher: Option<DType>, lower: Option<DType>| -> Option<DType> {
        match (higher, lower) {
            (None, l) => l,
            (h, None) => h,
            (Some(h), Some(l)) => {
                if h.is_float() {
                    Some(h)
                } else if h == DType::Bool || l.is_float() {
                    // An integer tensor with a float number takes the number's float dtype
                    // (the default float), a bool tensor takes the number's kind.
                    Some(promote_types(h, l))
                } else {
                    Some(h)
                }
            }
        }
    };
    combine(dim, combine(zero, wrapped)).unwrap_or(DType::F32)
}

#[cfg(test)]
mod tests {
    use super::DType::*;
    use super::*;

    #[test]
    fn promote_types_matches_pytorch() {
        assert_eq!(promote_types(BF16, F16), F32);
        assert_eq!(promote_types(I64, BF16), BF16);
        assert_eq!(promote_types(Bool, I32), I32);
        assert_eq!(promote_types(I32, I64), I64);
        assert_eq!(promote_types(F32, BF16), F32);
    }

    #[test]
    fn result_type_matches_pytorch() {
        use Operand::*;
        // bf16 tensor + float number stays bf16.
        assert_eq!(
            result_type(&[Tensor(BF16), Number(Scalar::Float(2.5))]),
            BF16
        );
        // int tensor + float number becomes the default float.
        assert_eq!(result_type(&[Tensor(I64), Number(Scalar::Float(2.5))]), F32);
        // int32 tensor + int number stays int32.
        assert_eq!(result_type(&[Tensor(I32), Number(Scalar::Int(7))]), I32);
        // bool tensor + int number becomes int64.
        assert_eq!(result_type(&[Tensor(Bool), Number(Scalar::Int(7))]), I64);
        // bf16 tensor + f32 zero-dim tensor stays bf16 (same category).
        assert_eq!(result_type(&[Tensor(BF16), ZeroDim(F32)]), BF16);
        // int tensor + f16 zero-dim tensor becomes f16.
        assert_eq!(result_type(&[Tensor(I32), ZeroDim(F16)]), F16);
        // Two zero-dim tensors promote normally.
        assert_eq!(result_type(&[ZeroDim(BF16), ZeroDim(F16)]), F32);
        assert_eq!(result_type(&[Tensor(F16), Tensor(BF16)]), F32);
    }
}
