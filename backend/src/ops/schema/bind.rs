//! Binding a call's values to a schema: positional and keyword values become one value per
//! argument, in schema order, with defaults filled in and each value checked against (and,
//! where PyTorch converts, converted to) its argument's type.
//!
//! Conversions, as PyTorch's argument parser makes them: a number where a tensor is expected
//! (kept as a number: a "wrapped number"), an int where a float is expected, a
//! single int for an `int[N]` (repeated `N` times), a name for a `ScalarType`,
//! `MemoryFormat`, `Layout` or `Device` (what a foreign bridge passes), a bool for an int.

use super::{DefaultValue, Schema, Type};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ops::value::{MemoryFormat, Value};

/// Binding a call's values to a [`Schema`].
pub trait Bind {
    /// Binds `positional` values (schema order; keyword-only arguments may be given
    /// positionally too, as a boxed dispatcher stack holds them) and `kwargs` (by name).
    fn bind(&self, positional: Vec<Value>, kwargs: Vec<(String, Value)>) -> Result<Vec<Value>>;
}

impl Bind for Schema {
    fn bind(&self, positional: Vec<Value>, kwargs: Vec<(String, Value)>) -> Result<Vec<Value>> {
        // The name is written out only for an error.
        let bad = |m: String| TpuError::BadArgs(format!("{}(): {m}", self.full_name()));
        if positional.len() > self.args.len() {
            return Err(bad(format!(
                "takes {} arguments but {} were given",
                self.args.len(),
                positional.len()
            )));
        }
        let mut slots: Vec<Option<Value>> = positional.into_iter().map(Some).collect();
        slots.resize(self.args.len(), None);
        for (k, v) in kwargs {
            let i = self
                .arg_index(&k)
                .ok_or_else(|| bad(format!("got an unexpected keyword argument '{k}'")))?;
            if slots[i].is_some() {
                return Err(bad(format!("got multiple values for argument '{k}'")));
            }
            slots[i] = Some(v);
        }
        let mut out = Vec::with_capacity(self.args.len());
        for (i, (arg, slot)) in self.args.iter().zip(slots).enumerate() {
            // `None` for an argument that is not optional stands for its default (the Rust
            // API's way of skipping an argument).
            let slot = match slot {
                Some(Value::None)
                    if arg.default.is_some() && !matches!(arg.ty, Type::Optional(_)) =>
                {
                    None
                }
                s => s,
            };
            let v = match slot {
                Some(v) => v,
                None => match &arg.default {
                    Some(d) => from_default(&arg.ty, d).ok_or_else(|| {
                        bad(format!(
                            "the default {d} of argument '{}' is not a {}",
                            arg.name, arg.ty
                        ))
                    })?,
                    None if matches!(arg.ty, Type::Optional(_)) => Value::None,
                    None => {
                        return Err(bad(format!(
                            "missing required argument '{}' (position {})",
                            arg.name,
                            i + 1
                        )));
                    }
                },
            };
            let kind = v.kind();
            // PyTorch's autograd passes an undefined tensor for an attention backward's `Tensor`
            // argument whose forward value was absent (the bias of an unmasked call): it stays
            // `None`, and the operator reads it as an optional tensor.
            if matches!(v, Value::None)
                && arg.ty.is_tensor()
                && self.name.contains("attention")
                && self.name.ends_with("_backward")
            {
                out.push(v);
                continue;
            }
            // A Python number in a tensor argument other than the first is a number PyTorch
            // wrapped into a zero-dimensional tensor (`x + 2` reaches `add.Tensor`): it stays a
            // number, which operators taking one read as a weak scalar in type promotion.
            if i > 0
                && arg.ty.is_tensor()
                && matches!(v, Value::Int(_) | Value::Float(_) | Value::Bool(_))
            {
                out.push(v);
                continue;
            }
            out.push(coerce(&arg.ty, v).ok_or_else(|| {
                bad(format!(
                    "argument '{}' (position {}) must be {}, not {kind}",
                    arg.name,
                    i + 1,
                    arg.ty
                ))
            })?);
        }
        Ok(out)
    }
}

/// `v` as a value of type `ty`, or `None` when it is not one.
pub(crate) fn coerce(ty: &Type, v: Value) -> Option<Value> {
    Some(match (ty, v) {
        (Type::Optional(_), Value::None) => Value::None,
        (Type::Optional(t), v) => return coerce(t, v),
        (Type::Other(..), v) => v,
        (Type::Tensor(_), v @ Value::Tensor(_)) => v,
        // A Python number where a tensor is expected: PyTorch wraps it into a 0-dim "wrapped
        // number" tensor, which promotes like a number; operators take it as one.
        (Type::Tensor(_), v @ (Value::Int(_) | Value::Float(_) | Value::Bool(_))) => v,
        (Type::Int | Type::SymInt, v @ Value::Int(_)) => v,
        (Type::Int | Type::SymInt, Value::Bool(b)) => Value::Int(b as i64),
        (Type::Float, v @ Value::Float(_)) => v,
        (Type::Float, Value::Int(i)) => Value::Float(i as f64),
        (Type::Bool, v @ Value::Bool(_)) => v,
        (Type::Bool, Value::Int(i @ (0 | 1))) => Value::Bool(i == 1),
        (Type::Str, v @ Value::Str(_)) => v,
        (Type::Scalar, v @ (Value::Int(_) | Value::Float(_) | Value::Bool(_))) => v,
        // A one-element tensor stands for its value (`Tensor.item()`), as Python's binding allows.
        (Type::Scalar, Value::Tensor(t)) if t.numel() == 1 => Value::Tensor(t),
        (Type::ScalarType, v @ Value::Dtype(_)) => v,
        (Type::ScalarType, Value::Str(s)) => Value::Dtype(DType::from_name(&s)?),
        (Type::MemoryFormat, v @ Value::MemoryFormat(_)) => v,
        (Type::MemoryFormat, Value::Str(s)) => Value::MemoryFormat(MemoryFormat::from_name(&s)?),
        (Type::Layout, v @ Value::Layout(_)) => v,
        (Type::Layout, Value::Str(s)) => Value::Layout(s),
        (Type::Device, v @ Value::Device(_)) => v,
        (Type::Device, Value::Str(s)) => Value::Device(s),
        (Type::Generator, v @ Value::Generator(_)) => v,
        (Type::List(e, n), v) => return coerce_list(e, *n, v),
        _ => return None,
    })
}

fn coerce_list(elem: &Type, n: Option<usize>, v: Value) -> Option<Value> {
    let base = match elem {
        Type::Optional(t) if t.is_tensor() => return opt_tensors(v),
        Type::Optional(t) => t.as_ref(),
        t => t,
    };
    Some(match (base, v) {
        (Type::Int | Type::SymInt, v @ Value::Ints(_)) => v,
        (Type::Int | Type::SymInt, Value::Int(i)) => Value::Ints(vec![i; n.unwrap_or(1)]),
        (Type::Float, v @ Value::Floats(_)) => v,
        (Type::Float, Value::Ints(l)) => Value::Floats(l.iter().map(|&i| i as f64).collect()),
        (Type::Float, Value::Float(x)) => Value::Floats(vec![x; n.unwrap_or(1)]),
        (Type::Bool, v @ Value::Bools(_)) => v,
        (Type::Bool, Value::Bool(b)) => Value::Bools(vec![b; n.unwrap_or(1)]),
        (Type::Tensor(_), v @ Value::Tensors(_)) => v,
        (Type::Tensor(_), Value::OptTensors(l)) => {
            Value::Tensors(l.into_iter().collect::<Option<Vec<_>>>()?)
        }
        (Type::Scalar, v @ (Value::Ints(_) | Value::Floats(_))) => v,
        (Type::Other(..), v) => v,
        _ => return None,
    })
}

fn opt_tensors(v: Value) -> Option<Value> {
    Some(match v {
        v @ Value::OptTensors(_) => v,
        Value::Tensors(l) => Value::OptTensors(l.into_iter().map(Some).collect()),
        _ => return None,
    })
}

/// The value a default stands for, as a value of `ty`.
fn from_default(ty: &Type, d: &DefaultValue) -> Option<Value> {
    let base = match ty {
        Type::Optional(t) => t.as_ref(),
        t => t,
    };
    let v = match d {
        DefaultValue::None => return Some(Value::None),
        DefaultValue::Bool(b) => Value::Bool(*b),
        // PyTorch prints enumeration defaults as their C++ values.
        DefaultValue::Int(i) if *base == Type::ScalarType => Value::Dtype(c10_scalar_type(*i)?),
        DefaultValue::Int(i) if *base == Type::MemoryFormat => Value::MemoryFormat(match i {
            0 => MemoryFormat::Contiguous,
            1 => MemoryFormat::Preserve,
            2 => MemoryFormat::ChannelsLast,
            3 => MemoryFormat::ChannelsLast3d,
            _ => return None,
        }),
        DefaultValue::Int(0) if *base == Type::Layout => Value::Layout("strided".into()),
        DefaultValue::Int(i) => Value::Int(*i),
        DefaultValue::Float(x) => Value::Float(*x),
        DefaultValue::Str(s) => Value::Str(s.clone()),
        DefaultValue::List(items) => list_default(ty, items)?,
        DefaultValue::Ident(id) => match id.as_str() {
            // Enumerations PyTorch's schemas spell by name in older forms.
            "Mean" => Value::Int(1),
            "Sum" => Value::Int(2),
            "strided" => Value::Layout(id.clone()),
            s => match MemoryFormat::from_name(s) {
                Some(f) => Value::MemoryFormat(f),
                None => Value::Dtype(DType::from_name(s)?),
            },
        },
    };
    coerce(ty, v)
}

/// The dtype of a `c10::ScalarType` value, for the ones a TPU has.
fn c10_scalar_type(i: i64) -> Option<DType> {
    Some(match i {
        3 => DType::I32,
        4 => DType::I64,
        5 => DType::F16,
        6 => DType::F32,
        11 => DType::Bool,
        15 => DType::BF16,
        _ => return None,
    })
}

fn list_default(ty: &Type, items: &[DefaultValue]) -> Option<Value> {
    let elem = match ty {
        Type::List(e, _) => e.as_ref(),
        Type::Optional(t) => return list_default(t, items),
        _ => return None,
    };
    Some(match elem {
        Type::Int | Type::SymInt => Value::Ints(
            items
                .iter()
                .map(|d| match d {
                    DefaultValue::Int(i) => Some(*i),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        ),
        Type::Float => Value::Floats(
            items
                .iter()
                .map(|d| match d {
                    DefaultValue::Int(i) => Some(*i as f64),
                    DefaultValue::Float(x) => Some(*x),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        ),
        Type::Bool => Value::Bools(
            items
                .iter()
                .map(|d| match d {
                    DefaultValue::Bool(b) => Some(*b),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        ),
        Type::Tensor(_) if items.is_empty() => Value::Tensors(Vec::new()),
        _ => return None,
    })
}
