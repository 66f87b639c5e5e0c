//! The multi-dimensional DMA descriptor that `dma ..., desc=sN` reads from SMEM.
//!
//! Layout, in 32-bit SMEM words starting at the descriptor address:
//!
//! | word | meaning |
//! |---|---|
//! | 0 | `ndims`, 1 to [`MAX_DMA_DIMS`] |
//! | 1 | `elem_bytes`: bytes of one contiguous element (the innermost run), at least 1 |
//! | 2 + 3d | `count[d]`, number of elements along dimension `d` (outermost first) |
//! | 3 + 3d | `src_stride[d]`, signed byte stride of dimension `d` on the source side |
//! | 4 + 3d | `dst_stride[d]`, signed byte stride of dimension `d` on the destination side |
//!
//! Element `(i0, .., i{n-1})` is copied from `src + sum(i_d * src_stride[d])` to
//! `dst + sum(i_d * dst_stride[d])`, `elem_bytes` bytes at a time. A source stride of 0
//! replicates; negative strides walk backwards (`flip`). Bytes moved (what the semaphore counts)
//! are `elem_bytes * prod(count)`.

/// Largest number of dimensions a descriptor may have.
pub const MAX_DMA_DIMS: usize = 4;
/// Words taken by a descriptor with the largest number of dimensions.
pub const DMA_DESC_MAX_WORDS: usize = 2 + 3 * MAX_DMA_DIMS;

/// One dimension of a DMA.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct DmaDim {
    /// Elements along this dimension.
    pub count: u32,
    /// Source byte stride.
    pub src_stride: i32,
    /// Destination byte stride.
    pub dst_stride: i32,
}

/// A decoded DMA descriptor.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct DmaDescriptor {
    /// Bytes of one contiguous element.
    pub elem_bytes: u32,
    /// Dimensions, outermost first.
    pub dims: Vec<DmaDim>,
}

/// Why a descriptor in SMEM is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// `ndims` is 0 or above the limit.
    #[error("DMA descriptor has {0} dimensions; expected 1 to {MAX_DMA_DIMS}")]
    BadDims(u32),
    /// `elem_bytes` is 0.
    #[error("DMA descriptor has an element size of 0 bytes")]
    ZeroElem,
    /// The descriptor runs past the end of the words given.
    #[error("DMA descriptor is cut short: {have} words, {need} needed")]
    Truncated {
        /// Words available.
        have: usize,
        /// Words needed.
        need: usize,
    },
}

impl DmaDescriptor {
    /// A contiguous copy of `bytes` bytes as a one-dimensional descriptor.
    pub fn contiguous(bytes: u32) -> Self {
        DmaDescriptor {
            elem_bytes: bytes.max(1),
            dims: vec![DmaDim {
                count: u32::from(bytes > 0),
                src_stride: 0,
                dst_stride: 0,
            }],
        }
    }

    /// Total bytes moved, saturating at `u64::MAX` (five 32-bit factors can pass 2^64; no
    /// memory holds that much, so the emulator's bounds check refuses such a descriptor).
    pub fn bytes(&self) -> u64 {
        self.dims.iter().fold(self.elem_bytes as u64, |acc, d| {
            acc.saturating_mul(d.count as u64)
        })
    }

    /// The SMEM words of this descriptor.
    pub fn to_words(&self) -> Vec<u32> {
        let mut w = vec![self.dims.len() as u32, self.elem_bytes];
        for d in &self.dims {
            w.extend([d.count, d.src_stride as u32, d.dst_stride as u32]);
        }
        w
    }

    /// Reads a descriptor from SMEM words starting at the descriptor.
    pub fn from_words(words: &[u32]) -> Result<Self, DescriptorError> {
        let need = |n: usize| {
            if words.len() < n {
                Err(DescriptorError::Truncated {
                    have: words.len(),
                    need: n,
                })
            } else {
                Ok(())
            }
        };
        need(2)?;
        let nd = words[0];
        if nd == 0 || nd as usize > MAX_DMA_DIMS {
            return Err(DescriptorError::BadDims(nd));
        }
        if words[1] == 0 {
            return Err(DescriptorError::ZeroElem);
        }
        need(2 + 3 * nd as usize)?;
        let dims = (0..nd as usize)
            .map(|d| DmaDim {
                count: words[2 + 3 * d],
                src_stride: words[3 + 3 * d] as i32,
                dst_stride: words[4 + 3 * d] as i32,
            })
            .collect();
        Ok(DmaDescriptor {
            elem_bytes: words[1],
            dims,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let d = DmaDescriptor {
            elem_bytes: 4,
            dims: vec![
                DmaDim {
                    count: 3,
                    src_stride: -64,
                    dst_stride: 16,
                },
                DmaDim {
                    count: 4,
                    src_stride: 4,
                    dst_stride: 4,
                },
            ],
        };
        assert_eq!(DmaDescriptor::from_words(&d.to_words()).unwrap(), d);
        assert_eq!(d.bytes(), 48);
    }

    #[test]
    fn rejects_bad_descriptors() {
        assert_eq!(
            DmaDescriptor::from_words(&[0, 4]),
            Err(DescriptorError::BadDims(0))
        );
        assert_eq!(
            DmaDescriptor::from_words(&[1, 0]),
            Err(DescriptorError::ZeroElem)
        );
        assert!(matches!(
            DmaDescriptor::from_words(&[2, 4, 1, 1, 1]),
            Err(DescriptorError::Truncated { .. })
        ));
    }
}
