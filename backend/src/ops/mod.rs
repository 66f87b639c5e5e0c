//! ATen operators: the registry, the dynamic calling convention, and the implementations by
//! family.
//!
//! Every operator is registered under its ATen overload name (`aten::add.Tensor`) with its
//! schema, the dtypes it supports and whether it is a kernel (its own ISA program) or a
//! decomposition into other registered operators. [`call`] runs any registered operator with a
//! list of [`Value`]s in schema order; the typed Rust API (`a.add(&b)`) calls the same
//! functions.

pub mod args;
pub mod backward;
pub mod binary;
pub mod creation;
pub mod custom;
pub mod data;
pub mod helpers;
pub mod layout_ops;
pub mod matrix;
pub mod nn;
pub mod reduce;
mod registry;
pub mod unary;

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

pub use args::Args;
pub use registry::{OpDef, OpImpl, registry};

/// An argument or result of a dynamically called operator.
#[derive(Clone, Debug)]
pub enum Value {
    /// A tensor.
    Tensor(Tensor),
    /// An optional tensor that is absent, or any `None`.
    None,
    /// A list of tensors (`Tensor[]`).
    Tensors(Vec<Tensor>),
    /// A list of optional tensors (`Tensor?[]`).
    OptTensors(Vec<Option<Tensor>>),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
    /// A list of bools.
    Bools(Vec<bool>),
    /// A dtype (`ScalarType`).
    Dtype(DType),
    /// A string (`approximate="tanh"`, `rounding_mode="floor"`).
    Str(String),
}

impl Value {
    /// The value as a [`Scalar`], if it is a number.
    pub fn as_scalar(&self) -> Option<Scalar> {
        match self {
            Value::Int(i) => Some(Scalar::Int(*i)),
            Value::Float(f) => Some(Scalar::Float(*f)),
            Value::Bool(b) => Some(Scalar::Bool(*b)),
            _ => None,
        }
    }

    /// A short description for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "Tensor",
            Value::None => "None",
            Value::Tensors(_) => "Tensor[]",
            Value::OptTensors(_) => "Tensor?[]",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
            Value::Ints(_) => "int[]",
            Value::Floats(_) => "float[]",
            Value::Bools(_) => "bool[]",
            Value::Dtype(_) => "ScalarType",
            Value::Str(_) => "str",
        }
    }
}

/// Runs the operator registered as `name` (`aten::add.Tensor`) with `args` in schema order.
/// Missing trailing arguments take their schema defaults where the operator has them.
pub fn call(rt: &Runtime, name: &str, args: Vec<Value>) -> Result<Vec<Value>> {
    let Some(def) = registry().get(name) else {
        if custom::lookup(name).is_some() {
            return custom::call_value(name, &args);
        }
        return Err(TpuError::UnknownOp(name.to_string()));
    };
    let args = Args::new(name, args);
    (def.run)(rt, &args).map_err(|e| name_the_op(name, e))
}

/// Puts the overload's name in front of an argument, shape, dtype, dim or index error that does
/// not already say it (the error keeps its kind).
fn name_the_op(name: &str, e: TpuError) -> TpuError {
    let tag = |m: String| {
        if m.contains(name) {
            m
        } else {
            format!("{name}: {m}")
        }
    };
    match e {
        TpuError::BadArgs(m) => TpuError::BadArgs(tag(m)),
        TpuError::ShapeMismatch(m) => TpuError::ShapeMismatch(tag(m)),
        TpuError::DtypeMismatch(m) => TpuError::DtypeMismatch(tag(m)),
        TpuError::DeviceMismatch(m) => TpuError::DeviceMismatch(tag(m)),
        TpuError::BadDim(m) => TpuError::BadDim(tag(m)),
        TpuError::IndexOutOfRange(m) => TpuError::IndexOutOfRange(tag(m)),
        TpuError::Unsupported(m) => TpuError::Unsupported(tag(m)),
        other => other,
    }
}
