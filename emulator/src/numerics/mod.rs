//! Numerics shared by the functional model: bf16/f16 rounding, the vector unit's elementwise
//! math, reductions in a defined order, and the matrix unit's tile products.
//!
//! Everything here is deterministic: the same inputs give the same bits on any machine and any
//! thread count. Transcendentals come from the `libm` crate (a pure-Rust port of musl's libm),
//! not the platform's, and sums follow fixed orders documented per function.

pub mod expf;
pub mod float;
pub mod lanes;
pub mod matmul;
pub mod vmath;
