//! # tpuemu-backend — the native backend
//!
//! Tensors, ATen operators lowered to ISA kernels, and the executors. The backend reaches
//! hardware only through [`tpuemu_isa::Device`].

#![deny(rustdoc::broken_intra_doc_links)]

pub mod codegen;
pub mod compile;
pub mod dtensor;
pub mod dtype;
pub mod error;
pub mod foreign;
mod fusion;
pub mod ir;
pub mod kernels;
pub mod layout;
pub mod ops;
mod raw_view;
pub mod rng;
pub mod runtime;
pub mod storage;
pub mod tensor;

pub use dtype::{DType, Scalar};
pub use error::{Result, TpuError};
pub use runtime::{HostCosts, MatmulPrecision, Metrics, Mode, Runtime};
pub use tensor::{Element, Tensor};
