//! Error types. Problems with one case never stop a run: they become that case's failure reason
//! (their `Display` text); only a directory that cannot be read at all is a [`GoldenError`].

use std::path::PathBuf;

use thiserror::Error;

use crate::tensor::DType;

/// A run could not start: the directory is missing, unreadable, or holds no manifests.
#[derive(Debug, Error)]
pub enum GoldenError {
    /// Reading a directory failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The directory holds no `*.json` manifest.
    #[error("no golden manifests (*.json) under {0}")]
    NoManifests(PathBuf),
}

/// A tensor that cannot be built as described.
#[derive(Debug, Error, PartialEq)]
pub enum TensorError {
    /// The byte count does not match shape and dtype.
    #[error("{dtype}{shape:?} needs {expected} bytes, got {got}")]
    DataLength {
        /// Bytes the shape and dtype need.
        expected: usize,
        /// Bytes given.
        got: usize,
        /// Element type.
        dtype: DType,
        /// Shape.
        shape: Vec<usize>,
    },
    /// Shape and strides differ in length.
    #[error("shape {shape:?} and strides {strides:?} differ in rank")]
    Rank {
        /// Shape.
        shape: Vec<usize>,
        /// Strides.
        strides: Vec<usize>,
    },
    /// The shape holds more elements than a case may (see [`crate::tensor::MAX_ELEMENTS`]).
    #[error("shape {shape:?} holds {} elements; a case tensor holds at most {max}", numel.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()))]
    TooLarge {
        /// Shape.
        shape: Vec<usize>,
        /// Its element count, `None` past 2^64.
        numel: Option<u128>,
        /// The limit.
        max: usize,
    },
    /// A view reaches past the end of its storage.
    #[error("view reaches storage element {last}, but the storage has {storage_len}")]
    ViewOutOfBounds {
        /// Last storage element the view reaches.
        last: usize,
        /// Storage length in elements.
        storage_len: usize,
    },
}

/// A manifest, case or tensor file that does not follow `golden/README.md`.
#[derive(Debug, Error)]
pub enum FormatError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Not JSON, or JSON of the wrong shape.
    #[error("{path}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// What serde_json said.
        message: String,
    },
    /// A `format` other than the one this runner reads.
    #[error("{path}: format {found:?}, expected {expected:?}")]
    Version {
        /// The file.
        path: PathBuf,
        /// The format string found.
        found: String,
        /// The format string expected.
        expected: &'static str,
    },
    /// The safetensors file is broken.
    #[error("{path}: not a valid safetensors file: {message}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What the safetensors reader said.
        message: String,
    },
    /// A tensor in the safetensors file has a dtype the runner does not know.
    #[error("{path}: tensor {name:?} has unsupported dtype {dtype}")]
    TensorDtype {
        /// The file.
        path: PathBuf,
        /// Tensor name.
        name: String,
        /// The safetensors dtype.
        dtype: String,
    },
    /// A tensor's bytes do not match its header.
    #[error("{path}: tensor {name:?}: {source}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// Tensor name.
        name: String,
        /// Why.
        source: TensorError,
    },
}
