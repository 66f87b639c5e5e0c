//! The seam between the golden runner and a backend.
//!
//! The runner knows nothing about devices: it hands an [`Executor`] one ATen call at a time, with
//! host values, and compares what comes back. A backend adapter implements [`Executor`] by looking
//! the overload up in its op registry (`call.op` is the registry key, e.g. `aten::add.Tensor`),
//! uploading the tensor arguments, running the op in its mode (Strict, Debug, DeferAndFuse,
//! Compile), and reading the outputs back to the host.
//!
//! ```
//! use tpuemu_golden::{Executor, OpCall, Value};
//!
//! /// Implements `aten::neg` on the host, nothing else.
//! struct Neg;
//! impl Executor for Neg {
//!     fn supports(&self, call: &OpCall<'_>) -> Result<(), String> {
//!         if call.op == "aten::neg" { Ok(()) } else { Err(format!("{} not registered", call.op)) }
//!     }
//!     fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<Value>, String> {
//!         let x = call.tensor("self")?;
//!         let values: Vec<f64> = x.to_f64_vec().iter().map(|v| -v).collect();
//!         let out = tpuemu_golden::HostTensor::from_f64s(x.dtype(), x.shape().to_vec(), &values)
//!             .map_err(|e| e.to_string())?;
//!         Ok(vec![Value::Tensor(out)])
//!     }
//! }
//! ```

use crate::format::OpSchema;
use crate::tensor::HostTensor;
use crate::value::Value;

/// One ATen call with concrete argument values.
#[derive(Clone, Copy, Debug)]
pub struct OpCall<'a> {
    /// Overload name, `aten::add.Tensor`; the default overload has no suffix (`aten::mm`).
    pub op: &'a str,
    /// The overload's schema: argument names and type tags, returns.
    pub schema: &'a OpSchema,
    /// One value per schema argument, in schema order (defaults already filled in).
    pub args: &'a [Value],
}

impl<'a> OpCall<'a> {
    /// The argument named `name`.
    pub fn arg(&self, name: &str) -> Option<&'a Value> {
        self.schema
            .arguments
            .iter()
            .position(|a| a.name == name)
            .and_then(|i| self.args.get(i))
    }

    /// The tensor argument named `name`, or an error saying what is there instead.
    pub fn tensor(&self, name: &str) -> Result<&'a HostTensor, String> {
        match self.arg(name) {
            Some(Value::Tensor(t)) => Ok(t),
            Some(other) => Err(format!(
                "{}: argument {name} is a {}, not a tensor",
                self.op,
                other.kind()
            )),
            None => Err(format!("{}: no argument {name}", self.op)),
        }
    }

    /// Every tensor among the arguments (lists included), in argument order.
    pub fn input_tensors(&self) -> Vec<&'a HostTensor> {
        self.args.iter().flat_map(Value::tensors).collect()
    }
}

/// A tensor argument that is an earlier call's output (`"from"` in the manifest): argument
/// `arg` (element `item` of a list argument) of a call is output `output` (element
/// `output_item` of a list output) of call `call` of the same case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The argument.
    pub arg: usize,
    /// Its element, for a list argument.
    pub item: Option<usize>,
    /// The earlier call.
    pub call: usize,
    /// Its output.
    pub output: usize,
    /// The output's element, for a list output.
    pub output_item: Option<usize>,
}

/// Something that can run ATen calls: the backend, under one mode on one chip.
pub trait Executor {
    /// `Ok(())` when the overload is registered and its argument dtypes are supported; otherwise
    /// `Err(reason)`, and the runner skips the call (e.g. `"aten::fft_fft not registered"`,
    /// `"float16 not supported by aten::mm"`).
    fn supports(&self, call: &OpCall<'_>) -> Result<(), String>;

    /// Runs one call and returns its outputs in schema order, as host values: a `Tensor` return
    /// is `Value::Tensor` (or `Value::None` when undefined), `Tensor[]` is `Value::TensorList`,
    /// scalars are `Int`/`Float`/`Bool`. For in-place and `out=` overloads, return the mutated
    /// tensor as the schema's return. `Err(reason)` fails the call.
    fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<Value>, String>;

    /// Runs the calls of one case in order, where `links[i]` says which tensor arguments of call
    /// `i` are earlier calls' outputs: an executor that keeps tensors on its device can pass its
    /// own outputs on and read nothing back until the end, so that a deferred or compiled mode
    /// sees the whole sequence as one graph. Returns each call's outputs. The default runs the
    /// calls one at a time on their recorded inputs.
    fn call_chain(
        &mut self,
        calls: &[OpCall<'_>],
        links: &[Vec<Link>],
    ) -> Vec<Result<Vec<Value>, String>> {
        let _ = links;
        calls.iter().map(|c| self.call(c)).collect()
    }

    /// Every overload the backend registers. The report says how many no case of the run
    /// calls (a directory may cover only some operators). Empty by default.
    fn registered_overloads(&self) -> Vec<String> {
        Vec::new()
    }
}
