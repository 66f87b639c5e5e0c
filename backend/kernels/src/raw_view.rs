//! [`RawView`]: the elements of a strided view of a storage, in raw bytes — what moves between
//! the host and the device for a foreign framework's tensor (`foreign`) and for work outside
//! the device's launches (`runtime::external`). It names only storages and errors, so both can
//! use it.

use crate::error::{Result, TpuError};
use crate::storage::Storage;

/// The elements of a strided view: `shape`, `strides` and `offset` in elements of
/// `elem_size` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawView {
    /// Sizes.
    pub shape: Vec<usize>,
    /// Strides in elements (non-negative, as PyTorch's).
    pub strides: Vec<usize>,
    /// Offset in elements.
    pub offset: usize,
    /// Bytes per element.
    pub elem_size: usize,
}

impl RawView {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The element range `[lo, hi)` the view touches (empty views touch nothing).
    pub fn span(&self) -> (usize, usize) {
        if self.numel() == 0 {
            return (self.offset, self.offset);
        }
        let hi = self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(n, s)| (n - 1) * s)
            .sum::<usize>();
        (self.offset, self.offset + hi + 1)
    }

    /// Whether the view is one dense row-major run.
    pub fn is_dense(&self) -> bool {
        let mut expect = 1;
        for (n, s) in self.shape.iter().zip(&self.strides).rev() {
            if *n != 1 && *s != expect {
                return false;
            }
            expect *= n;
        }
        true
    }

    /// Calls `f(element index relative to the span start, position in row-major order)`.
    fn for_each(&self, base: usize, mut f: impl FnMut(usize, usize)) {
        let n = self.numel();
        if n == 0 {
            return;
        }
        let nd = self.shape.len();
        let mut idx = vec![0usize; nd];
        let mut at = self.offset - base;
        for i in 0..n {
            f(at, i);
            for d in (0..nd).rev() {
                idx[d] += 1;
                at += self.strides[d];
                if idx[d] < self.shape[d] {
                    break;
                }
                at -= self.strides[d] * self.shape[d];
                idx[d] = 0;
            }
        }
    }

    /// The view's elements, row-major, from `span`: the bytes of the elements
    /// `[lo, hi)` that [`RawView::span`] gives.
    pub fn gather(&self, lo: usize, span: Vec<u8>) -> Vec<u8> {
        if self.is_dense() {
            return span;
        }
        let es = self.elem_size;
        let mut out = vec![0u8; self.numel() * es];
        self.for_each(lo, |at, i| {
            out[i * es..(i + 1) * es].copy_from_slice(&span[at * es..(at + 1) * es]);
        });
        out
    }

    /// Puts the view's elements (`data`, row-major) into `span`, the bytes of the elements
    /// `[lo, hi)`.
    pub fn scatter(&self, lo: usize, data: &[u8], span: &mut [u8]) {
        let es = self.elem_size;
        self.for_each(lo, |at, i| {
            span[at * es..(at + 1) * es].copy_from_slice(&data[i * es..(i + 1) * es]);
        });
    }

    /// [`RawView::check`], and that `data` holds exactly the view's elements.
    pub fn check_write(&self, storage: &Storage, data: &[u8]) -> Result<()> {
        self.check(storage)?;
        if data.len() != self.numel() * self.elem_size {
            return Err(TpuError::BadArgs(format!(
                "{} bytes do not hold {:?} elements of {} bytes",
                data.len(),
                self.shape,
                self.elem_size
            )));
        }
        Ok(())
    }

    pub fn check(&self, storage: &Storage) -> Result<()> {
        if self.shape.len() != self.strides.len() || self.elem_size == 0 {
            return Err(TpuError::BadArgs(format!(
                "view {:?} / {:?} of {}-byte elements is malformed",
                self.shape, self.strides, self.elem_size
            )));
        }
        let (_, hi) = self.span();
        if (hi * self.elem_size) as u64 > storage.bytes() {
            return Err(TpuError::BadArgs(format!(
                "view {:?} / {:?} + {} of {}-byte elements reaches past a storage of {} bytes",
                self.shape,
                self.strides,
                self.offset,
                self.elem_size,
                storage.bytes()
            )));
        }
        Ok(())
    }
}
