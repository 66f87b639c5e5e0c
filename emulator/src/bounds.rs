//! Sizes a running program computes from its registers, checked before the executor uses them.
//!
//! A program can put any 32-bit value in a register, and a DMA descriptor holds five of them per
//! dimension: the products and sums the executor forms from them must neither overflow nor make
//! the host allocate or copy far more than the emulated chip could hold. These checks run before
//! the executor's own arithmetic, in wide integers, and turn a bad size into a fault naming the
//! instruction's operands:
//!
//! - a DMA side whose byte range leaves its memory region is out of bounds (computed in 128 bits,
//!   so strides times counts cannot wrap into range);
//! - a DMA moves at most as many bytes as its destination holds (every byte it moves lands
//!   there, so a larger count writes some bytes more than once: a descriptor of 2^32 one-byte
//!   elements with a destination stride of 0 is refused rather than copied 2^32 times);
//! - a matrix unit queues at most as many result bytes (f32) as the core's VMEM holds, because
//!   every queued row must eventually be popped into VMEM: an `mxu.mm` with a huge row count and a
//!   stride of 0 (it re-reads the same LHS row) is refused rather than queued.

use tpuemu_isa::dma::DmaDescriptor;

use crate::fault::FaultKind;

/// The byte range `[lo, hi)` a descriptor touches on one side from `base`, in 128 bits (`None`
/// when it moves nothing).
pub(crate) fn extent(base: i64, desc: &DmaDescriptor, src: bool) -> Option<(i128, i128)> {
    if desc.dims.iter().any(|d| d.count == 0) {
        return None;
    }
    let (mut lo, mut hi) = (base as i128, base as i128);
    for d in &desc.dims {
        let stride = if src { d.src_stride } else { d.dst_stride } as i128;
        let span = (d.count as i128 - 1) * stride;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    Some((lo, hi + desc.elem_bytes as i128))
}

/// Checks one side of a DMA: its byte range lies inside the `size` bytes of `region` and, for
/// the destination, the DMA moves no more bytes than the region holds.
pub(crate) fn dma_side(
    desc: &DmaDescriptor,
    base: i64,
    size: u64,
    src: bool,
    region: impl FnOnce() -> String,
) -> Result<(), FaultKind> {
    let clamp = |x: i128| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    if let Some((lo, hi)) = extent(base, desc, src)
        && (lo < 0 || hi > size as i128)
    {
        return Err(FaultKind::OutOfBounds {
            access: if src { "read" } else { "write" },
            region: region(),
            start: clamp(lo),
            end: clamp(hi),
            size,
        });
    }
    if !src {
        let bytes = desc.dims.iter().try_fold(desc.elem_bytes as u64, |acc, d| {
            acc.checked_mul(d.count as u64)
        });
        if bytes.is_none_or(|b| b > size) {
            return Err(FaultKind::Invalid(format!(
                "the DMA moves {} bytes ({} x {} elements) but its destination, {}, holds {size}: it would write some bytes more than once",
                bytes.map_or_else(|| "more than 2^64".to_string(), |b| b.to_string()),
                desc.elem_bytes,
                desc.dims
                    .iter()
                    .map(|d| d.count.to_string())
                    .collect::<Vec<_>>()
                    .join(" x "),
                region(),
            )));
        }
    }
    Ok(())
}

/// Checks that queueing `rows` more result rows of `n` f32 values on a matrix unit that holds
/// `queued` rows (of at most `n` values each) keeps its results within `vmem_bytes`.
pub(crate) fn mxu_queue(
    mxu: impl std::fmt::Display,
    queued: u64,
    rows: u64,
    n: u64,
    vmem_bytes: u64,
) -> Result<(), FaultKind> {
    let bytes = (queued as u128 + rows as u128) * n.max(1) as u128 * 4;
    if bytes > vmem_bytes as u128 {
        return Err(FaultKind::Invalid(format!(
            "{mxu}: streaming {rows} rows would queue {bytes} bytes of results ({queued} rows already queued, {n} columns of f32), more than the {vmem_bytes} bytes of VMEM they must be popped into"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuemu_isa::dma::DmaDim;

    fn desc(elem: u32, dims: &[(u32, i32, i32)]) -> DmaDescriptor {
        DmaDescriptor {
            elem_bytes: elem,
            dims: dims
                .iter()
                .map(|&(count, src_stride, dst_stride)| DmaDim {
                    count,
                    src_stride,
                    dst_stride,
                })
                .collect(),
        }
    }

    #[test]
    fn strides_that_would_wrap_in_64_bits_are_out_of_bounds() {
        // Four dimensions of 2^32 - 1 elements 2^31 - 1 bytes apart reach past 2^64 bytes.
        let d = desc(1, &[(u32::MAX, i32::MAX, 1); 4]);
        let e = dma_side(&d, 0, 1 << 20, true, || "VMEM".into()).unwrap_err();
        assert!(
            matches!(e, FaultKind::OutOfBounds { end: i64::MAX, .. }),
            "{e}"
        );
    }

    #[test]
    fn a_dma_moves_at_most_its_destination() {
        // 2^32 - 1 one-byte elements, destination stride 0: one byte of destination.
        let d = desc(1, &[(u32::MAX, 0, 0)]);
        assert!(dma_side(&d, 0, 1024, true, || "VMEM".into()).is_ok());
        let e = dma_side(&d, 0, 1024, false, || "VMEM".into()).unwrap_err();
        assert!(e.to_string().contains("moves 4294967295 bytes"), "{e}");
        // Byte counts past 2^64 are named as such.
        let d = desc(1, &[(u32::MAX, 0, 0); 4]);
        let e = dma_side(&d, 0, 1024, false, || "VMEM".into()).unwrap_err();
        assert!(e.to_string().contains("more than 2^64"), "{e}");
        // Exactly the destination is fine.
        let d = desc(4, &[(256, 4, 4)]);
        assert!(dma_side(&d, 0, 1024, false, || "VMEM".into()).is_ok());
    }

    #[test]
    fn matrix_results_stay_within_vmem() {
        assert!(mxu_queue("mxu0", 0, 256, 128, 128 * 1024).is_ok());
        assert!(mxu_queue("mxu0", 1, 256, 128, 128 * 1024).is_err());
        let e = mxu_queue("mxu0", 0, u32::MAX as u64, 128, 1 << 27).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid instruction: mxu0: streaming 4294967295 rows")
        );
    }
}
