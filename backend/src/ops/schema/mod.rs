//! PyTorch's operator schemas — the grammar, the parser and every ATen overload of PyTorch
//! 2.15.0 live in the `tpuemu-schema` crate, re-exported here — and [`Bind`], which turns a
//! call's positional and keyword values into one value per argument, in schema order, with
//! defaults filled in and every value checked against its type (errors name the overload and
//! the argument).

mod bind;

pub use bind::Bind;
pub use tpuemu_schema::*;
