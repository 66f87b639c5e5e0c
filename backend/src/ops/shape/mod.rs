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

mod copies;
mod factories;
mod rearrange;
mod views;
mod windows;

pub use views::diagonal_layout;

use super::Value;
use super::registry::OpDef;
use crate::error::Result;
use crate::tensor::Tensor;

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let mut d = views::defs();
    d.extend(copies::defs());
    d.extend(rearrange::defs());
    d.extend(factories::defs());
    d
}

fn t1(r: Result<Tensor>) -> Result<Vec<Value>> {
    r.map(|t| vec![Value::Tensor(t)])
}

fn ts(r: Result<Vec<Tensor>>) -> Result<Vec<Value>> {
    r.map(|t| vec![Value::Tensors(t)])
}
