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
pub(crate) mod checks;
pub use checks::set_call_site;
pub mod compose;
pub mod creation;
pub mod custom;
pub mod data;
mod decomp;
mod derive;
pub mod helpers;
pub mod indexing;
pub mod layout_ops;
pub mod like;
pub mod linalg;
pub mod matrix;
pub mod nn;
pub mod order;
pub mod pallas;
pub mod pointwise;
pub mod prims;
pub mod random;
mod read;
pub mod reduce;
mod registry;
pub mod scan;
pub mod schema;
pub mod shape;
pub mod sharding;
mod table;
mod typed;
pub mod unary;
mod value;
pub(crate) mod wide;

use crate::error::{Result, TpuError};
use crate::runtime::Runtime;
use schema::Bind;

pub use args::{Args, TensorOrNumber};
pub use registry::{ArgSource, Derivation, OpDef, OpImpl, Run, RunFn};
pub use sharding::Sharding;
pub use table::registry;
pub use tpuemu_macros::aten;
pub use typed::IntoValues;
pub use value::{MemoryFormat, Value};

/// Runs the operator registered as `name` (`aten::add.Tensor`) with `args` in schema order
/// (keyword-only arguments may be given positionally too, as a dispatcher stack holds them).
/// Missing trailing arguments take their schema defaults.
pub fn call(rt: &Runtime, name: &str, args: Vec<Value>) -> Result<Vec<Value>> {
    call_kw(rt, name, args, Vec::new())
}

/// [`call`] with keyword arguments: `call_kw(rt, "aten::sum.dim_IntList", vec![x],
/// vec![("dim".into(), Value::Ints(vec![1]))])`.
pub fn call_kw(
    rt: &Runtime,
    name: &str,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
) -> Result<Vec<Value>> {
    let Some(def) = registry().get(name) else {
        if custom::lookup(name).is_some() && kwargs.is_empty() {
            return custom::call_value(name, &args);
        }
        return Err(TpuError::UnknownOp(name.to_string()));
    };
    let bound = def.schema.bind(args, kwargs)?;
    run(rt, def, &Args::new(def.name, bound)).map_err(|e| name_the_op(name, e))
}

/// [`call`] of an operator found in the [`registry`] already: a caller that resolves a name
/// once (the Python bridge, by operator id) skips the lookup by name at every call.
pub fn call_def(rt: &Runtime, def: &OpDef, args: Vec<Value>) -> Result<Vec<Value>> {
    let bound = def.schema.bind(args, Vec::new())?;
    run(rt, def, &Args::new(def.name, bound)).map_err(|e| name_the_op(def.name, e))
}

/// Runs a registered operator on arguments already bound to its schema.
pub(crate) fn run(rt: &Runtime, def: &OpDef, args: &Args) -> Result<Vec<Value>> {
    match def.run {
        Run::Direct(f) => f(rt, args),
        Run::InPlace(how) => derive::inplace(rt, def, how, functional(how)?, args),
        Run::Out(how) => derive::out(rt, def, how, functional(how)?, args),
    }
}

/// The functional operator a derived form computes.
fn functional(how: &Derivation) -> Result<&'static OpDef> {
    registry()
        .get(how.functional)
        .ok_or_else(|| TpuError::UnknownOp(format!("{} (the functional form)", how.functional)))
}

/// Puts the overload's name in front of an argument, shape, dtype, dim or index error that does
/// not already say it (the error keeps its kind).
pub(crate) fn name_the_op(name: &str, e: TpuError) -> TpuError {
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
