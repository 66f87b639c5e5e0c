//! [`Value`]: what a dynamically called operator takes and returns — the values PyTorch's
//! dispatcher passes (tensors, numbers, lists, dtypes, memory formats, devices, layouts,
//! generators).

use crate::dtype::{DType, Scalar};
use crate::tensor::Tensor;

/// A `MemoryFormat` argument.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemoryFormat {
    /// `torch.contiguous_format`: row-major.
    Contiguous,
    /// `torch.preserve_format`: the input's layout where it is dense and non-overlapping.
    Preserve,
    /// `torch.channels_last` (4-d, NHWC strides).
    ChannelsLast,
    /// `torch.channels_last_3d` (5-d).
    ChannelsLast3d,
}

impl MemoryFormat {
    /// From PyTorch's name (`contiguous_format`, `preserve_format`, `channels_last`,
    /// `channels_last_3d`; also with a `torch.` prefix).
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s.trim_start_matches("torch.") {
            "contiguous_format" => MemoryFormat::Contiguous,
            "preserve_format" => MemoryFormat::Preserve,
            "channels_last" => MemoryFormat::ChannelsLast,
            "channels_last_3d" => MemoryFormat::ChannelsLast3d,
            _ => return None,
        })
    }

    /// PyTorch's name.
    pub fn name(self) -> &'static str {
        match self {
            MemoryFormat::Contiguous => "contiguous_format",
            MemoryFormat::Preserve => "preserve_format",
            MemoryFormat::ChannelsLast => "channels_last",
            MemoryFormat::ChannelsLast3d => "channels_last_3d",
        }
    }
}

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
    /// A memory format.
    MemoryFormat(MemoryFormat),
    /// A layout by PyTorch name; only `strided` tensors exist here.
    Layout(String),
    /// A device by PyTorch name (`tpu`, `tpu:0`, `cpu`): operators accept it where PyTorch
    /// ignores it or where it names this device.
    Device(String),
    /// A random generator, by the seed it was created with (`torch.Generator().manual_seed`).
    Generator(u64),
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

    /// A short description for error messages (the schema type it is).
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
            Value::MemoryFormat(_) => "MemoryFormat",
            Value::Layout(_) => "Layout",
            Value::Device(_) => "Device",
            Value::Generator(_) => "Generator",
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }
}
