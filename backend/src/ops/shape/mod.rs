//! Shape and data-rearranging operators: views (`squeeze` in every form, `unsqueeze_`,
//! `split_with_sizes`, `unsafe_split`, `unbind`, `narrow`, `diagonal`, `unfold`, `alias`, the
//! in-place view forms), the `*_copy` forms of views, rearrangements (`roll`, `rot90`,
//! `repeat`, `repeat_interleave`, `block_diag`, `diag_embed`, pixel and channel shuffles,
//! `im2col`/`col2im`), and factories (`eye`, `linspace`, `logspace`, `tril_indices`,
//! `triu_indices`, `arange.start_out`, `empty_strided`, `empty_permuted`, `resize_`).
//!
//! Views change only the layout. Copies and rearrangements are tile kernels over the output
//! that read the input through a strided view (a rearrangement that no single view expresses,
//! such as `roll`, writes each contiguous piece with its own node).

pub(crate) mod copies;
pub(crate) mod factories;
pub(crate) mod rearrange;
pub(crate) mod views;
mod windows;

pub use views::diagonal_layout;
