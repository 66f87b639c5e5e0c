//! # tpuemu-kernels — the backend's foundation and its code generation
//!
//! The lowest layers of the native backend, as their own crate so that Cargo enforces that they
//! never reach up into the runtime, the operators, compilation or DTensor (`tpuemu-backend`
//! re-exports every module under the same name, so `tpuemu_kernels::dtype` and
//! `tpuemu_kernels::kernels` are these). In layer order, each module naming only those before it:
//! - [`error`]: every layer's error type ([`TpuError`], [`error::KernelError`]);
//! - [`dtype`]: element types, scalars, PyTorch's promotion rules and the named dtype sets;
//! - [`rng`]: the counter-based random streams;
//! - [`storage`]: device storages, reserved in HBM when made, allocated when first written;
//! - [`layout`]: shapes, strides and offsets of views, PyTorch's layout rules;
//! - `raw_view`: a strided view's raw bytes, for host transfers;
//! - [`codegen`]: the vocabulary kernels are written in (loops, argument prologue,
//!   double-buffered DMAs, kernels split over a chip's TensorCores);
//! - [`ir`]: the graph IR a recorded operator becomes (tile, matmul, gather, attention,
//!   custom nodes over views);
//! - [`kernels`]: the kernel generators (tile, matmul, attention, gather, index_add,
//!   collectives), each an ISA program built through `tpuemu_isa`'s `ProgramBuilder`.
//!
//! A kernel can be generated and tested here with no runtime: it reaches hardware only in
//! tests, through `tpuemu_isa::Device` (the emulator is a dev-dependency).

#![deny(rustdoc::broken_intra_doc_links)]

pub mod codegen;
pub mod dtype;
pub mod error;
pub mod ir;
pub mod kernels;
pub mod layout;
#[doc(hidden)]
pub mod raw_view;
pub mod rng;
pub mod storage;

pub use dtype::{DType, Scalar};
pub use error::{Result, TpuError};
