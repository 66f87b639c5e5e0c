//! Large decoder-only language models at pod scale: their configurations ([`config`]), one
//! training step of a layer on one chip's shard of the work ([`layer`]), the collectives
//! between chips timed on the slice ([`comm`]), and the prediction of a whole step
//! ([`predict`]).

pub mod config;

pub use config::{BUILTIN, ConfigError, ModelConfig};
