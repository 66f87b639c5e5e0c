//! Data movement operators: joining and splitting (`cat`, `stack`, `split`), indexing
//! (`index_select`, `gather`, `embedding`) and region operators (`masked_fill`, `tril`,
//! `triu`, `constant_pad_nd`, `flip`).
//!
//! Joining and region operators are tile kernels: `cat` writes each input into its slice of a
//! preallocated output (one tile node per input), `constant_pad_nd` fills the output and writes
//! the (cropped) input into its interior, `flip` copies a negative-stride view. Indexing runs on
//! the row-gather kernel ([`NodeKind::Gather`](crate::ir::NodeKind::Gather)) with bounds checks
//! on the device: an index outside its dimension makes the kernel fault (reported at the
//! operator, at once in Debug mode, at the next synchronisation otherwise) instead of reading
//! other memory.

pub(crate) mod concat;
pub(crate) mod index;
pub(crate) mod regions;

pub use concat::{cat, split, stack};
pub use index::{embedding, gather, index_select};
pub(crate) use index::{gather_rows, table_view};
pub use regions::{constant_pad_nd, flip, masked_fill, masked_fill_tensor, tril, triu};
