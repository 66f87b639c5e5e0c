//! # tpuemu-backend — the native backend
//!
//! Tensors, ATen operators lowered to ISA kernels, and the executors. The backend reaches
//! hardware only through [`tpuemu_isa::Device`].

#![deny(rustdoc::broken_intra_doc_links)]

pub mod compile;
pub mod foreign;
mod fusion;
pub mod ops;
pub mod runtime;
pub mod tensor;

// The lower layers are the `tpuemu-kernels` crate (Cargo keeps them from naming anything
// above), under the same names.
use tpuemu_kernels::raw_view;
pub use tpuemu_kernels::{codegen, dtype, error, ir, kernels, layout, rng, storage};

pub use dtype::{DType, Scalar};
pub use error::{Result, TpuError};
pub use runtime::{HostCosts, MatmulPrecision, Metrics, Mode, Runtime};
pub use tensor::{Element, Tensor};
