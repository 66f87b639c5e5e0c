//! Large decoder-only language models at pod scale: their configurations ([`config`]), one
//! training step on one chip's shard of the work ([`step`], [`layer`]) written against a
//! context that times it ([`ctx`]), the collectives between chips ([`comm`]), and the
//! prediction of a whole step on a slice ([`predict`]).

pub mod comm;
pub mod config;
pub mod ctx;
pub mod layer;
pub mod predict;
pub mod published;
pub mod spec;
pub mod step;

pub use config::{BUILTIN, ConfigError, ModelConfig};
pub use spec::{Group, Parallel, Remat, StepSpec};
