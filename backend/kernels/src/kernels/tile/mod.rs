//! The tile kernel: elementwise work, broadcasts, copies and row reductions, fused.
//!
//! [`spec::lower`] turns a tile node into a [`TileSpec`] (the cache key) and the operands'
//! storage offsets; [`program::build`] generates the program — the tiling (`plan`), the loop
//! state in SMEM (`cursor`), the double-buffered tile loop, or straight-line code for one tile (`single`) — and [`body`] is the vector code
//! that runs on each tile in VMEM (`vexpr`: one node as vector instructions).

pub mod body;
mod cursor;
mod one_hot;
mod plan;
pub mod program;
mod selects;
mod single;
pub mod spec;
mod vexpr;

pub use program::build;
pub use spec::{TileOperand, TileSpec, lower};
