//! `tpuemu-visualizer`: a timeline viewer for tpuemu traces (Chrome trace JSON written by
//! [`tpuemu_isa::trace::chrome::to_chrome_json`], or any Chrome trace).
//!
//! Lanes per chip (Python calls, host operators, queue and dispatch above; per chip kernels,
//! the HBM-in-use counter with its peak, nested regions, units, DMA engines, ICI links drawn
//! as traffic), grouped and collapsible, each of bounded depth; zoom, pan and Perfetto's keys;
//! search; selection with details; fusion groups as brackets linked to the operators they
//! fused; flows from host operators to kernels; an op profile (operators, kernels, fusion
//! groups, regions) and, for two traces stacked on one time axis, a diff table; utilisation,
//! FLOP/s, MFU and HBM bandwidth over a selected range. See `visualizer/README.md`.
//!
//! Entry points for the CLI: [`run_viewer`] opens a window (eframe, wgpu renderer);
//! [`screenshot()`] renders the same view to a PNG with no window and no GPU. Each path is a
//! trace file or a run directory: a distributed run's rank traces, merged into one timeline
//! with a chip per rank ([`open`]).
//!
//! Module map: [`axis`] (time <-> pixel), [`lanes`] (lane kinds, order, depth bounds),
//! [`open`] (files and run directories), [`model`] (a trace indexed per lane and row), [`groups`] (fusion groups), [`counters`]
//! (counter series), [`index`] (culling and merging), [`layout`] (y positions), [`stats`]
//! (range statistics), [`profile`] and [`diff`] (op profile, comparison), [`marks`] (search and
//! marked spans), [`options`] (view options), [`view`] (state), [`input`] and [`keys`] (mouse
//! and keys), [`paint`], [`paint_counter`], [`panel`], [`table`] and [`details`] (drawing),
//! [`app`] (the window), [`screenshot`](mod@screenshot) and [`raster`] (headless rendering), [`synthetic`]
//! and [`synthetic_ranks`] (test traces).

#![deny(rustdoc::broken_intra_doc_links)]

pub mod app;
pub mod axis;
pub mod counters;
pub mod details;
pub mod diff;
pub mod error;
pub mod groups;
pub mod index;
pub mod input;
pub mod keys;
pub mod lanes;
pub mod layout;
pub mod marks;
pub mod model;
pub mod open;
pub mod options;
pub mod paint;
pub mod paint_counter;
pub mod panel;
pub mod profile;
pub mod raster;
pub mod screenshot;
pub mod stats;
pub mod synthetic;
pub mod synthetic_ranks;
pub mod table;
pub mod view;

use std::path::{Path, PathBuf};

pub use error::VizError;
pub use model::{TraceModel, load_trace, open_trace};
pub use options::ViewOptions;
pub use screenshot::ScreenshotInfo;
pub use synthetic::{mode_pair, synthetic_trace};
pub use synthetic_ranks::{rank_run, rank_traces};
pub use view::Viewer;

/// Default screenshot width, px.
pub const DEFAULT_WIDTH: u32 = 1600;
/// Default screenshot height, px.
pub const DEFAULT_HEIGHT: u32 = 1000;

/// Reads and indexes one or two runs, each a trace file or a directory of rank traces (the
/// first is drawn on top).
pub fn open_traces(paths: &[PathBuf]) -> Result<Vec<TraceModel>, VizError> {
    if paths.is_empty() || paths.len() > 2 {
        return Err(VizError::TraceCount(paths.len()));
    }
    paths.iter().map(|p| open_trace(p)).collect()
}

/// Opens a window showing one run, or two stacked on a shared time axis (each a trace file
/// or a run directory). Returns when the window is closed.
pub fn run_viewer(paths: &[PathBuf]) -> Result<(), VizError> {
    let traces = open_traces(paths)?;
    let title = format!(
        "tpuemu viz — {}",
        traces
            .iter()
            .map(|t| t.label.as_str())
            .collect::<Vec<_>>()
            .join(" vs ")
    );
    app::run_window(Viewer::new(traces, ViewOptions::default()), &title)
}

/// Renders the view of one or two runs (trace files or run directories), fitted to the whole
/// of them, to a PNG of `width` x `height` pixels, without a window or a GPU.
pub fn screenshot(
    paths: &[PathBuf],
    out: &Path,
    width: u32,
    height: u32,
) -> Result<ScreenshotInfo, VizError> {
    let traces = open_traces(paths)?;
    let mut viewer = Viewer::new(traces, ViewOptions::default());
    screenshot::screenshot_viewer(&mut viewer, out, width, height)
}
