//! Memory planning: intermediates of a compiled graph share one arena, an offset reused once the
//! value it held is dead.

/// Where each intermediate lives, and the arena's size.
pub struct ArenaPlan {
    /// Each value's offset in bytes (a multiple of 512), in the order [`arena`] was given them.
    pub offsets: Vec<u64>,
    /// The arena's size: the end of its highest block.
    pub bytes: u64,
}

/// Alignment of every intermediate in the arena (a multiple of every element size and of the
/// DMA burst).
const ALIGN: u64 = 512;

/// Plans `values` (bytes, first group, last group that uses it), in order of first use: each
/// takes the lowest offset free for its whole lifetime (first fit).
pub fn arena(values: &[(u64, usize, usize)]) -> ArenaPlan {
    let mut placed: Vec<(u64, u64, usize, usize)> = Vec::new(); // offset, size, first, last
    let mut offsets = Vec::with_capacity(values.len());
    let mut bytes = 0;
    for &(size, first, last) in values {
        let size = size.max(1).div_ceil(ALIGN) * ALIGN;
        // Blocks alive at the same time as this value, by offset.
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|p| p.2 <= last && first <= p.3)
            .map(|p| (p.0, p.0 + p.1))
            .collect();
        busy.sort_unstable();
        let mut at = 0;
        for (lo, hi) in busy {
            if at + size <= lo {
                break;
            }
            at = at.max(hi);
        }
        placed.push((at, size, first, last));
        offsets.push(at);
        bytes = bytes.max(at + size);
    }
    ArenaPlan { offsets, bytes }
}
