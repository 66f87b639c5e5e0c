//! [`DValue`], an argument or result of a DTensor operator, as plain data (the operators in
//! [`super::ops`] and the sharding rules in [`super::propagate`] both speak it).

use super::api::DTensor;
use tpuemu_backend::ops::Value;

/// An argument or result of a DTensor operator.
#[derive(Clone, Debug)]
pub enum DValue {
    /// A DTensor.
    Tensor(DTensor),
    /// A list of DTensors (`Tensor[]`).
    Tensors(Vec<DTensor>),
    /// A list of optional DTensors (`Tensor?[]`).
    OptTensors(Vec<Option<DTensor>>),
    /// Anything else (numbers, lists, dtypes, `None`); not a plain tensor.
    Value(Value),
}

impl From<DTensor> for DValue {
    fn from(t: DTensor) -> Self {
        DValue::Tensor(t)
    }
}

impl From<Value> for DValue {
    fn from(v: Value) -> Self {
        DValue::Value(v)
    }
}

impl DValue {
    /// The DTensor, if this is one.
    pub fn tensor(&self) -> Option<&DTensor> {
        match self {
            DValue::Tensor(t) => Some(t),
            _ => None,
        }
    }
}
