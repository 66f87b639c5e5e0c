//! Memories of the functional model: paged HBM buffers and the cores' local memories.
//!
//! Everything is allocated lazily: an HBM buffer is a sparse set of pages created on first
//! write (reads of unwritten bytes give zeros), and VMEM/SMEM are allocated on first use, so a
//! 192 GiB chip costs only what is written.

mod hbm;
mod local;

pub use hbm::{Hbm, HbmBuffer, PAGE_BYTES, PageReader, PageWriter};
pub use local::LocalMem;
