//! Reading an operator's positional arguments, with errors that name the operator and the
//! argument.

use super::{MemoryFormat, Value};
use crate::dtype::{DType, Operand, Scalar};
use crate::error::{Result, TpuError};
use crate::tensor::Tensor;

/// A `Tensor` argument that may hold a Python number: the schema binder keeps a number passed
/// where the schema says `Tensor` (a "wrapped number": `x + 2` reaches `add.Tensor` with
/// `other = 2`), and an operator declared with `#[aten(..., numbers = "other")]` computes with it
/// as a scalar operand.
#[derive(Clone, Copy, Debug)]
pub enum TensorOrNumber<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A number.
    Number(Scalar),
}

impl TensorOrNumber<'_> {
    /// The operand as PyTorch's type promotion sees it.
    pub(crate) fn promotion(&self) -> crate::dtype::Operand {
        match self {
            TensorOrNumber::Tensor(t) => operand(t),
            TensorOrNumber::Number(s) => Operand::Number(*s),
        }
    }
}

/// An operator's arguments in schema order.
pub struct Args {
    /// The overload's name: the registry's `&'static str` (no allocation per call), or a name
    /// owned by the caller (DTensor's propagation).
    op: std::borrow::Cow<'static, str>,
    vals: Vec<Value>,
}

impl Args {
    /// Arguments of `op`.
    pub fn new(op: impl Into<std::borrow::Cow<'static, str>>, vals: Vec<Value>) -> Self {
        Args {
            op: op.into(),
            vals,
        }
    }

    /// The operator's name.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// Every argument, in schema order.
    pub fn values(&self) -> &[Value] {
        &self.vals
    }

    /// Number of arguments given.
    pub fn len(&self) -> usize {
        self.vals.len()
    }

    /// Whether no arguments were given.
    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }

    /// Argument `i`, if given (and not `None`).
    pub fn get(&self, i: usize) -> Option<&Value> {
        match self.vals.get(i) {
            None | Some(Value::None) => None,
            Some(v) => Some(v),
        }
    }

    fn bad(&self, i: usize, want: &str) -> TpuError {
        let got = self.vals.get(i).map_or("nothing", |v| v.kind());
        TpuError::BadArgs(format!(
            "{}(): argument {i} must be {want}, not {got}",
            self.op
        ))
    }

    /// A required tensor.
    pub fn tensor(&self, i: usize) -> Result<&Tensor> {
        match self.get(i) {
            Some(Value::Tensor(t)) => Ok(t),
            _ => Err(self.bad(i, "Tensor")),
        }
    }

    /// An optional tensor.
    pub fn opt_tensor(&self, i: usize) -> Result<Option<&Tensor>> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Tensor(t)) => Ok(Some(t)),
            _ => Err(self.bad(i, "Tensor or None")),
        }
    }

    /// A list of tensors.
    pub fn tensors(&self, i: usize) -> Result<Vec<Tensor>> {
        match self.get(i) {
            Some(Value::Tensors(t)) => Ok(t.clone()),
            Some(Value::OptTensors(t)) if t.iter().all(Option::is_some) => {
                Ok(t.iter().flatten().cloned().collect())
            }
            _ => Err(self.bad(i, "a list of Tensors")),
        }
    }

    /// A number (int, float or bool), or `default` when absent.
    pub fn scalar_or(&self, i: usize, default: Scalar) -> Result<Scalar> {
        match self.get(i) {
            None => Ok(default),
            Some(Value::Tensor(t)) if t.numel() == 1 => t.item(),
            Some(v) => v.as_scalar().ok_or_else(|| self.bad(i, "a number")),
        }
    }

    /// A required number.
    pub fn scalar(&self, i: usize) -> Result<Scalar> {
        match self.get(i) {
            None => Err(self.bad(i, "a number")),
            _ => self.scalar_or(i, Scalar::Int(0)),
        }
    }

    /// An integer, or `default` when absent.
    pub fn int_or(&self, i: usize, default: i64) -> Result<i64> {
        match self.get(i) {
            None => Ok(default),
            Some(Value::Int(v)) => Ok(*v),
            Some(Value::Bool(b)) => Ok(*b as i64),
            _ => Err(self.bad(i, "int")),
        }
    }

    /// A required integer.
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.get(i) {
            None => Err(self.bad(i, "int")),
            _ => self.int_or(i, 0),
        }
    }

    /// An optional integer.
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.get(i) {
            None => Ok(None),
            _ => self.int(i).map(Some),
        }
    }

    /// A float, or `default` when absent (ints accepted).
    pub fn float_or(&self, i: usize, default: f64) -> Result<f64> {
        match self.get(i) {
            None => Ok(default),
            Some(Value::Float(v)) => Ok(*v),
            Some(Value::Int(v)) => Ok(*v as f64),
            _ => Err(self.bad(i, "float")),
        }
    }

    /// A required float (ints accepted).
    pub fn float(&self, i: usize) -> Result<f64> {
        match self.get(i) {
            None => Err(self.bad(i, "float")),
            _ => self.float_or(i, 0.0),
        }
    }

    /// An optional float (`float?`).
    pub fn opt_float(&self, i: usize) -> Result<Option<f64>> {
        match self.get(i) {
            None => Ok(None),
            _ => self.float(i).map(Some),
        }
    }

    /// A required bool.
    pub fn bool(&self, i: usize) -> Result<bool> {
        match self.get(i) {
            None => Err(self.bad(i, "bool")),
            _ => self.bool_or(i, false),
        }
    }

    /// A bool, or `default` when absent.
    pub fn bool_or(&self, i: usize, default: bool) -> Result<bool> {
        match self.get(i) {
            None => Ok(default),
            Some(Value::Bool(v)) => Ok(*v),
            Some(Value::Int(v)) => Ok(*v != 0),
            _ => Err(self.bad(i, "bool")),
        }
    }

    /// A list of ints (a single int is a one-element list), or `default` when absent.
    pub fn ints_or(&self, i: usize, default: &[i64]) -> Result<Vec<i64>> {
        match self.get(i) {
            None => Ok(default.to_vec()),
            Some(Value::Ints(v)) => Ok(v.clone()),
            Some(Value::Int(v)) => Ok(vec![*v]),
            _ => Err(self.bad(i, "a list of ints")),
        }
    }

    /// A required list of ints.
    pub fn ints(&self, i: usize) -> Result<Vec<i64>> {
        match self.get(i) {
            None => Err(self.bad(i, "a list of ints")),
            _ => self.ints_or(i, &[]),
        }
    }

    /// An optional list of ints (`int[1]?`).
    pub fn opt_ints(&self, i: usize) -> Result<Option<Vec<i64>>> {
        match self.get(i) {
            None => Ok(None),
            _ => self.ints(i).map(Some),
        }
    }

    /// An optional dtype.
    pub fn opt_dtype(&self, i: usize) -> Result<Option<DType>> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Dtype(d)) => Ok(Some(*d)),
            Some(Value::Str(s)) => DType::from_name(s)
                .map(Some)
                .ok_or_else(|| self.bad(i, "a dtype")),
            _ => Err(self.bad(i, "a dtype")),
        }
    }

    /// An optional string.
    pub fn opt_str(&self, i: usize) -> Result<Option<&str>> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            _ => Err(self.bad(i, "str")),
        }
    }

    /// A tensor, or the number the binder kept in its place ([`TensorOrNumber`]).
    pub fn tensor_or_number(&self, i: usize) -> Result<TensorOrNumber<'_>> {
        match self.get(i) {
            Some(Value::Tensor(t)) => Ok(TensorOrNumber::Tensor(t)),
            _ => Ok(TensorOrNumber::Number(self.scalar(i)?)),
        }
    }

    /// A list of optional tensors (`Tensor?[]`).
    pub fn opt_tensors(&self, i: usize) -> Result<Vec<Option<Tensor>>> {
        match self.get(i) {
            Some(Value::OptTensors(t)) => Ok(t.clone()),
            Some(Value::Tensors(t)) => Ok(t.iter().cloned().map(Some).collect()),
            _ => Err(self.bad(i, "a list of optional Tensors")),
        }
    }

    /// A required string.
    pub fn str(&self, i: usize) -> Result<&str> {
        match self.get(i) {
            Some(Value::Str(s)) => Ok(s),
            _ => Err(self.bad(i, "str")),
        }
    }

    /// A required dtype.
    pub fn dtype(&self, i: usize) -> Result<DType> {
        self.opt_dtype(i)?.ok_or_else(|| self.bad(i, "a dtype"))
    }

    /// An optional bool (`bool?`).
    pub fn opt_bool(&self, i: usize) -> Result<Option<bool>> {
        match self.get(i) {
            None => Ok(None),
            _ => self.bool(i).map(Some),
        }
    }

    /// An optional number (`Scalar?`).
    pub fn opt_scalar(&self, i: usize) -> Result<Option<Scalar>> {
        match self.get(i) {
            None => Ok(None),
            _ => self.scalar(i).map(Some),
        }
    }

    /// An optional memory format.
    pub fn opt_memory_format(&self, i: usize) -> Result<Option<MemoryFormat>> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::MemoryFormat(m)) => Ok(Some(*m)),
            _ => Err(self.bad(i, "a memory format")),
        }
    }

    /// A list of floats (ints accepted; a single number is a one-element list).
    pub fn floats(&self, i: usize) -> Result<Vec<f64>> {
        match self.get(i) {
            Some(Value::Floats(v)) => Ok(v.clone()),
            Some(Value::Ints(v)) => Ok(v.iter().map(|&x| x as f64).collect()),
            Some(Value::Float(v)) => Ok(vec![*v]),
            Some(Value::Int(v)) => Ok(vec![*v as f64]),
            _ => Err(self.bad(i, "a list of floats")),
        }
    }

    /// A list of bools.
    pub fn bools(&self, i: usize) -> Result<Vec<bool>> {
        match self.get(i) {
            Some(Value::Bools(v)) => Ok(v.clone()),
            Some(Value::Bool(v)) => Ok(vec![*v]),
            _ => Err(self.bad(i, "a list of bools")),
        }
    }

    /// A list of numbers (`Scalar[]`).
    pub fn scalars(&self, i: usize) -> Result<Vec<Scalar>> {
        match self.get(i) {
            Some(Value::Ints(v)) => Ok(v.iter().map(|&x| Scalar::Int(x)).collect()),
            Some(Value::Floats(v)) => Ok(v.iter().map(|&x| Scalar::Float(x)).collect()),
            Some(Value::Bools(v)) => Ok(v.iter().map(|&x| Scalar::Bool(x)).collect()),
            Some(v) => v
                .as_scalar()
                .map(|s| vec![s])
                .ok_or_else(|| self.bad(i, "a list of numbers")),
            None => Err(self.bad(i, "a list of numbers")),
        }
    }
}

/// The promotion operand of a tensor (zero-dim tensors rank below dimensioned ones).
pub(crate) fn operand(t: &Tensor) -> Operand {
    if t.dim() == 0 {
        Operand::ZeroDim(t.dtype())
    } else {
        Operand::Tensor(t.dtype())
    }
}
