//! Memory planning: intermediates of a compiled graph share one arena, an offset reused once the
//! value it held is dead.

/// Where each intermediate lives, and the arena's size.
pub(crate) struct ArenaPlan {
    pub offsets: Vec<u64>,
    pub bytes: u64,
}

/// Alignment of every intermediate in the arena (a multiple of every element size and of the
/// DMA burst).
const ALIGN: u64 = 512;

/// Plans `values` (bytes, first group, last group that uses it), in order of first use: each
/// takes the lowest offset free for its whole lifetime (first fit).
pub(crate) fn arena(values: &[(u64, usize, usize)]) -> ArenaPlan {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_values_give_their_space_back() {
        // a (0..1), b (1..2), c (2..3): a and c never overlap in time and share an offset.
        let p = arena(&[(1000, 0, 1), (1000, 1, 2), (1000, 2, 3)]);
        assert_eq!(p.offsets[0], p.offsets[2]);
        assert_ne!(p.offsets[0], p.offsets[1]);
        assert_eq!(p.bytes, 2048);
        // Everything alive at once stacks up.
        let q = arena(&[(100, 0, 5), (100, 0, 5), (100, 0, 5)]);
        assert_eq!(q.bytes, 3 * 512);
    }
}
