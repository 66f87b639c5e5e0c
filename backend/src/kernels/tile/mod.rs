//! The tile kernel: elementwise work, broadcasts, copies and row reductions, fused.
//!
//! [`spec::lower`] turns a tile node into a [`TileSpec`] (the cache key) and the operands'
//! storage offsets; [`gen::build`] generates the program; [`body`] is the vector code that runs
//! on each tile in VMEM.

pub mod body;
pub mod program;
pub mod spec;
mod vexpr;

pub use program::build;
pub use spec::{TileOperand, TileSpec, lower};
