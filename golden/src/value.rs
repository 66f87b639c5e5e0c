//! Argument and output values as an executor sees them: every ATen schema type maps to one
//! [`Value`] variant, with tensors resolved to [`HostTensor`]s.
//!
//! | schema type                         | value                                   |
//! |-------------------------------------|-----------------------------------------|
//! | `Tensor`                            | `Tensor` (or `Int`/`Float`/`Bool`: a Python number PyTorch wrapped as a 0-dim tensor) |
//! | `Tensor?`                           | `Tensor` or `None`                      |
//! | `Tensor[]`                          | `TensorList`                            |
//! | `Tensor?[]`                         | `OptionalTensorList`                    |
//! | `int`, `SymInt`                     | `Int`                                   |
//! | `int[]`, `SymInt[]`                 | `IntList`                               |
//! | `float`                             | `Float` (`Int` where PyTorch passed an int) |
//! | `float[]`                           | `FloatList`                             |
//! | `bool`, `bool[]`                    | `Bool`, `BoolList`                      |
//! | `Scalar`                            | `Int`, `Float` or `Bool`                |
//! | `ScalarType`                        | `Dtype`                                 |
//! | `Layout`, `Device`, `MemoryFormat`  | `Layout`, `Device`, `MemoryFormat` (PyTorch's names) |
//! | `str`                               | `Str`                                   |
//! | any `T?`                            | also `None`                             |

use std::fmt;

use crate::tensor::{DType, HostTensor};

/// One argument or output value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None` (an absent optional, or an undefined tensor output).
    None,
    /// A bool.
    Bool(bool),
    /// An int (also `SymInt`).
    Int(i64),
    /// A float (NaN and infinities allowed).
    Float(f64),
    /// A string (`str`), e.g. gelu's `approximate`.
    Str(String),
    /// A `ScalarType`.
    Dtype(DType),
    /// A `Layout` by PyTorch name: `strided`.
    Layout(String),
    /// A `Device` by type: `cpu` in generated cases (the generator ran on the CPU). Executors treat
    /// it as "the device under test".
    Device(String),
    /// A `MemoryFormat` by PyTorch name: `contiguous_format`, `preserve_format`, `channels_last`.
    MemoryFormat(String),
    /// `int[]` / `SymInt[]`.
    IntList(Vec<i64>),
    /// `float[]`.
    FloatList(Vec<f64>),
    /// `bool[]`.
    BoolList(Vec<bool>),
    /// A tensor.
    Tensor(HostTensor),
    /// `Tensor[]`.
    TensorList(Vec<HostTensor>),
    /// `Tensor?[]` (e.g. the indices of `aten::index.Tensor`).
    OptionalTensorList(Vec<Option<HostTensor>>),
}

impl Value {
    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&HostTensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The tensors this value holds (one for a tensor, several for lists, none otherwise).
    pub fn tensors(&self) -> Vec<&HostTensor> {
        match self {
            Value::Tensor(t) => vec![t],
            Value::TensorList(ts) => ts.iter().collect(),
            Value::OptionalTensorList(ts) => ts.iter().flatten().collect(),
            _ => Vec::new(),
        }
    }

    /// Short name of the variant, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Dtype(_) => "dtype",
            Value::Layout(_) => "layout",
            Value::Device(_) => "device",
            Value::MemoryFormat(_) => "memory_format",
            Value::IntList(_) => "int list",
            Value::FloatList(_) => "float list",
            Value::BoolList(_) => "bool list",
            Value::Tensor(_) => "tensor",
            Value::TensorList(_) => "tensor list",
            Value::OptionalTensorList(_) => "optional tensor list",
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Dtype(d) => write!(f, "{d}"),
            Value::Layout(s) | Value::Device(s) | Value::MemoryFormat(s) => f.write_str(s),
            Value::IntList(v) => write!(f, "{v:?}"),
            Value::FloatList(v) => write!(f, "{v:?}"),
            Value::BoolList(v) => write!(f, "{v:?}"),
            Value::Tensor(t) => write!(f, "{}{:?}", t.dtype(), t.shape()),
            Value::TensorList(ts) => {
                let parts: Vec<String> = ts
                    .iter()
                    .map(|t| format!("{}{:?}", t.dtype(), t.shape()))
                    .collect();
                write!(f, "[{}]", parts.join(", "))
            }
            Value::OptionalTensorList(ts) => {
                let parts: Vec<String> = ts
                    .iter()
                    .map(|t| {
                        t.as_ref().map_or("None".to_string(), |t| {
                            format!("{}{:?}", t.dtype(), t.shape())
                        })
                    })
                    .collect();
                write!(f, "[{}]", parts.join(", "))
            }
        }
    }
}
