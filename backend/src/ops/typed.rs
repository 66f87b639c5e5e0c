//! The typed side of the calling convention: what an `#[aten]` function returns, turned into
//! the registry's values, and the list of every `#[aten]` function's registration.
//!
//! An operator written with `#[aten("aten::name.overload", dtypes = ..., shard = ...)]` (the
//! `tpuemu-macros` crate) takes a struct generated from PyTorch's schema and returns any
//! [`IntoValues`]; `build.rs` finds every such function under `src/ops` and writes
//! [`aten_defs`]: the registry is that list plus the derived in-place and `out=` forms.

use super::{OpDef, Value};
use crate::tensor::Tensor;

/// What an operator function may return.
pub trait IntoValues {
    /// The results in the calling convention's form (one value per schema return).
    fn into_values(self) -> Vec<Value>;
}

impl IntoValues for Tensor {
    fn into_values(self) -> Vec<Value> {
        vec![Value::Tensor(self)]
    }
}

impl IntoValues for (Tensor, Tensor) {
    fn into_values(self) -> Vec<Value> {
        vec![Value::Tensor(self.0), Value::Tensor(self.1)]
    }
}

impl IntoValues for (Tensor, Tensor, Tensor) {
    fn into_values(self) -> Vec<Value> {
        vec![
            Value::Tensor(self.0),
            Value::Tensor(self.1),
            Value::Tensor(self.2),
        ]
    }
}

impl IntoValues for (Tensor, Tensor, Tensor, Tensor) {
    fn into_values(self) -> Vec<Value> {
        vec![
            Value::Tensor(self.0),
            Value::Tensor(self.1),
            Value::Tensor(self.2),
            Value::Tensor(self.3),
        ]
    }
}

/// A `Tensor[]` result: one list value.
impl IntoValues for Vec<Tensor> {
    fn into_values(self) -> Vec<Value> {
        vec![Value::Tensors(self)]
    }
}

/// Values already in the calling convention's form.
impl IntoValues for Vec<Value> {
    fn into_values(self) -> Vec<Value> {
        self
    }
}

impl IntoValues for Value {
    fn into_values(self) -> Vec<Value> {
        vec![self]
    }
}

/// No result (`-> ()`).
impl IntoValues for () {
    fn into_values(self) -> Vec<Value> {
        Vec::new()
    }
}

include!(concat!(env!("OUT_DIR"), "/aten_defs.rs"));
