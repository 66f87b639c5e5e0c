//! DTensor: tensors sharded over the chips of a slice, named as PyTorch's
//! `torch.distributed.tensor`.
//!
//! A [`DeviceMesh`] names the dimensions of a slice (`[("dp", 2), ("tp", 4)]`) and holds one
//! [`Runtime`](crate::Runtime) per chip — one *rank* each, as one process per device in
//! PyTorch. A [`DTensor`] holds one local tensor per rank and a [`Placement`] per mesh
//! dimension: [`Placement::Shard`], [`Placement::Replicate`] or [`Placement::Partial`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use tpuemu_dtensor::{DeviceMesh, Placement, distribute_slice};
//! # fn device() -> Arc<dyn tpuemu_isa::Device> { unimplemented!() }
//! let mesh = DeviceMesh::new(device(), &[("dp", 2), ("tp", 4)]).unwrap();
//! let x = distribute_slice(&mesh, &[1.0f32; 64], &[8, 8], &[Placement::Shard(0), Placement::Replicate]).unwrap();
//! let w = distribute_slice(&mesh, &[0.5f32; 64], &[8, 8], &[Placement::Replicate, Placement::Shard(1)]).unwrap();
//! let y = x.mm(&w).unwrap(); // [Shard(0), Shard(1)], no communication
//! let full = y.full_tensor().unwrap(); // all-gathers on the device
//! ```
//!
//! - [`distribute_tensor`] / [`distribute_slice`] / [`DTensor::from_local`] make DTensors;
//!   [`DTensor::redistribute`] changes placements with collectives ([`redistribute`] module
//!   docs list every transition); [`DTensor::full_tensor`] returns the whole tensor on rank 0
//!   and [`DTensor::to_vec`] reads it to the host.
//! - [`call`] runs any registered ATen operator on DTensors, choosing a sharding strategy per
//!   mesh dimension and inserting the collectives it needs ([`propagate`]); operators without
//!   a rule run replicated and say so in `metrics().sharding_fallbacks`.
//! - Collectives ([`comm`]) are ISA programs, one launch over every chip of the mesh, submitted
//!   when the last rank gets to it (each rank keeps its own host clock); before one runs, every
//!   rank's deferred graph runs (flush reason `collective`), so DeferAndFuse works unchanged.
//! - [`compile()`] compiles a function over DTensors: each rank's local work between
//!   collectives becomes one compiled graph per rank, collectives are the graph breaks.

// The backend's layers this crate builds on, under the names its modules use.
use tpuemu_backend::{dtype, error, kernels, layout, runtime, tensor};

pub mod api;
pub(crate) mod comm;
pub mod compile;
pub(crate) mod events;
pub mod mesh;
pub mod ops;
pub mod placement;
pub mod propagate;
pub mod redistribute;
pub(crate) mod trace;
pub mod value;

pub use api::{DTensor, distribute_f64s, distribute_slice, distribute_tensor};
pub use compile::{DCompiledFn, compile};
pub use mesh::DeviceMesh;
pub use ops::{DValue, call, zeros};
pub use placement::{Placement, Reduce};
pub use propagate::sharding_rule;
