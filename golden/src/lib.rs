//! Golden cases from PyTorch itself, and the runner that checks a backend against them.
//!
//! `golden/generate.py` runs PyTorch's OpInfo samples (plus explicit calls and small models)
//! under a dispatch mode and writes every ATen call it saw, with inputs and expected outputs, as
//! JSON manifests and safetensors files (`golden/cases/`, format in `golden/README.md`). This crate
//! loads them ([`format`], [`store`]), replays each call through an [`Executor`] (the seam a
//! backend implements), compares with `torch.testing`'s tolerances ([`compare`]) and reports per
//! case and per operator ([`report`]).
//!
//! ```no_run
//! use std::path::Path;
//! use tpuemu_golden::{run_dir, Executor, RunOptions};
//!
//! fn check(exec: &mut dyn Executor) -> bool {
//!     let report = run_dir(Path::new("golden/cases"), exec, &RunOptions::default()).expect("readable");
//!     report.print_table(&mut std::io::stdout()).unwrap();
//!     report.success()
//! }
//! ```
#![deny(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod compare;
pub mod error;
pub mod executor;
pub mod format;
pub mod quiet;
pub mod report;
pub mod runner;
pub mod signs;
pub mod spec;
pub mod store;
pub mod tensor;
pub mod ties;
pub mod validate;
pub mod value;

pub use compare::{Comparison, Tolerance};
pub use error::{FormatError, GoldenError, TensorError};
pub use executor::{Executor, Link, OpCall};
pub use format::{CompareMode, FORMAT, OpSchema};
pub use report::Report;
pub use runner::{CallResult, CaseResult, Mode, NEEDS_VALUES, RunOptions, Status, run_dir};
pub use tensor::{DType, HostTensor};
pub use value::Value;
