//! Errors the visualizer reports to its user: unreadable files, files that are not traces,
//! run directories that hold no traces or traces that do not merge, no GPU adapter or no
//! display for the window, and failures writing a screenshot.
//!
//! Every variant says what was expected and what came, and, where the fix is an install step,
//! which packages to install.

use std::path::PathBuf;

/// Debian packages that give wgpu a software (CPU) adapter.
pub const SOFTWARE_ADAPTER_PACKAGES: &str = "libvulkan1 mesa-vulkan-drivers";

/// What can go wrong opening, showing or rendering a trace.
#[derive(Debug, thiserror::Error)]
pub enum VizError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was read but is not a Chrome trace.
    #[error("{path} is not a trace file: {reason}")]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What the reader found instead.
        reason: String,
    },
    /// A directory given as a run holds no trace files.
    #[error("{dir} holds no trace files (*.json); give a trace file or a run's directory")]
    EmptyRun {
        /// The directory.
        dir: PathBuf,
    },
    /// A directory holds several traces that are not the rank traces of one run.
    #[error(
        "{dir} holds {count} traces without a rank ({files}); a directory opens as one run when \
         its traces are the rank traces of a distributed run: give one or two of them as files"
    )]
    NotARun {
        /// The directory.
        dir: PathBuf,
        /// How many traces.
        count: usize,
        /// Their file names.
        files: String,
    },
    /// A directory's rank traces do not merge into one run.
    #[error("cannot open {dir} as one run: {source}{files}")]
    Merge {
        /// The directory.
        dir: PathBuf,
        /// The files concerned, each with its rank (` (a.json: rank 0, b.json: no rank)`).
        files: String,
        /// Why.
        source: Box<tpuemu_isa::trace::MergeError>,
    },
    /// No trace was given, or more than the viewer can stack.
    #[error("expected 1 or 2 traces (files or run directories), got {0}")]
    TraceCount(usize),
    /// The requested screenshot size is unusable.
    #[error("screenshot size {width}x{height} is out of range (each side 64..=8192 pixels)")]
    BadSize {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// wgpu found no adapter (no GPU and no software renderer installed).
    #[error(
        "no GPU adapter found ({detail}); install a software renderer, e.g. \
         `apt-get install -y --no-install-recommends {SOFTWARE_ADAPTER_PACKAGES}`, \
         or use --screenshot, which needs no GPU"
    )]
    NoAdapter {
        /// What wgpu said.
        detail: String,
    },
    /// No window could be opened (no display server).
    #[error("cannot open a window: {detail}; use --screenshot OUT.png to render without a display")]
    NoDisplay {
        /// What the windowing layer said.
        detail: String,
    },
    /// The window failed for another reason.
    #[error("viewer failed: {0}")]
    Window(String),
    /// Writing the screenshot failed.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The output file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
