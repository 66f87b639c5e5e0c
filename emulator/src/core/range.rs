//! Memory ranges as hazards and races see them: plain spans and sets of equally spaced rows,
//! their exact overlap, and the bounds ([`Hull`]) that let a scan skip a whole list.

/// Which memory a range is in, for hazards and races.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemKey {
    Vmem,
    Smem,
    Hbm(u64),
}

impl MemKey {
    /// Region name for faults.
    pub fn name(&self) -> String {
        match self {
            MemKey::Vmem => "VMEM".into(),
            MemKey::Smem => "SMEM".into(),
            MemKey::Hbm(id) => format!("HBM buffer {id}"),
        }
    }
}

/// Whether `b_rows` rows of `b_w` bytes from `b_lo`, `a.stride` apart, meet the rows of `a`.
/// Row j of b starts at `a.lo + d + j*S`; rows i and j meet iff `t = j - i` has
/// `d + t*S < a.w` and `d + t*S + b.w > 0`.
#[inline(always)]
fn rows_meet(a: &Range, b_lo: u64, b_w: u64, b_rows: u64) -> bool {
    let s = a.stride as i64;
    let d = b_lo as i64 - a.lo as i64;
    let (wa, wb) = (a.row_bytes as i64, b_w as i64);
    // Floor division; a shift when the stride is a power of two (tiles' rows).
    let (t_lo, t_hi) = if s.count_ones() == 1 {
        let sh = s.trailing_zeros();
        (((-wb - d) >> sh) + 1, (wa - d - 1) >> sh)
    } else {
        ((-wb - d).div_euclid(s) + 1, (wa - d - 1).div_euclid(s))
    };
    t_lo.max(-(a.rows as i64 - 1)) <= t_hi.min(b_rows as i64 - 1)
}

/// Bytes of a memory: `rows` runs of `row_bytes`, `stride` apart, starting at `lo`; `hi` is one
/// past the last byte. A plain range is one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub mem: MemKey,
    pub lo: u64,
    pub hi: u64,
    rows: u64,
    row_bytes: u64,
    stride: u64,
}

impl Range {
    /// The contiguous bytes `[lo, hi)`.
    pub fn span(mem: MemKey, lo: u64, hi: u64) -> Self {
        Range {
            mem,
            lo,
            hi,
            rows: 1,
            row_bytes: hi - lo,
            stride: hi - lo,
        }
    }

    /// `rows` runs of `row_bytes` starting at `lo`, `stride` apart.
    pub fn rows(mem: MemKey, lo: u64, rows: u64, row_bytes: u64, stride: u64) -> Self {
        let hi = lo
            + if rows == 0 {
                0
            } else {
                (rows - 1) * stride + row_bytes
            };
        if rows <= 1 || stride <= row_bytes {
            return Self::span(mem, lo, hi);
        }
        Range {
            mem,
            lo,
            hi,
            rows,
            row_bytes,
            stride,
        }
    }

    /// Whether the two ranges' bounds meet (the cheap test every hazard scan makes first).
    #[inline(always)]
    pub fn near(&self, other: &Range) -> bool {
        self.lo < other.hi && other.lo < self.hi && self.mem == other.mem
    }

    /// Whether the two ranges share a byte; returns the bounds of the overlap. Exact for plain
    /// ranges and for row sets with the same stride; otherwise conservative (bounds only).
    pub fn overlap(&self, other: &Range) -> Option<(u64, u64)> {
        self.touches(other)
            .then(|| (self.lo.max(other.lo), self.hi.min(other.hi)))
    }

    /// Whether the two ranges share a byte (exact where [`Range::overlap`] is).
    #[inline(always)]
    pub fn touches(&self, other: &Range) -> bool {
        if !self.near(other) || self.lo >= self.hi || other.lo >= other.hi {
            return false;
        }
        match (self.rows > 1, other.rows > 1) {
            (false, false) => true,
            (true, false) => rows_meet(self, other.lo, other.row_bytes, 1),
            (false, true) => rows_meet(other, self.lo, self.row_bytes, 1),
            (true, true) if self.stride == other.stride => {
                rows_meet(self, other.lo, other.row_bytes, other.rows)
            }
            _ => true,
        }
    }
}

/// Where a list's ranges lie: the bounds of its VMEM ranges, and whether it holds any range of
/// another memory. Kept since the list was last empty or swept (so it may be wider than what is
/// still live, never narrower): an access outside it skips the whole list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hull {
    lo: u64,
    hi: u64,
    others: bool,
}

impl Default for Hull {
    fn default() -> Self {
        Hull {
            lo: u64::MAX,
            hi: 0,
            others: false,
        }
    }
}

impl Hull {
    #[inline]
    pub fn add(&mut self, r: &Range) {
        if r.lo >= r.hi {
            return;
        }
        if r.mem == MemKey::Vmem {
            self.lo = self.lo.min(r.lo);
            self.hi = self.hi.max(r.hi);
        } else {
            self.others = true;
        }
    }

    /// Whether a range of the list may share a byte with `r`.
    #[inline(always)]
    pub fn may_touch(&self, r: &Range) -> bool {
        if r.mem == MemKey::Vmem {
            r.lo < self.hi && self.lo < r.hi
        } else {
            self.others
        }
    }

    pub fn of<'a>(ranges: impl Iterator<Item = &'a Range>) -> Self {
        let mut h = Hull::default();
        for r in ranges {
            h.add(r);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a range, one by one.
    fn bytes(r: &Range) -> std::collections::HashSet<u64> {
        (0..r.rows.max(1))
            .flat_map(|i| {
                let start = r.lo + i * r.stride;
                start..(start + r.row_bytes).min(r.hi)
            })
            .collect()
    }

    #[test]
    fn touches_agrees_with_the_bytes_for_equal_strides_and_spans() {
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let v = MemKey::Vmem;
        for _ in 0..4000 {
            // Power-of-two and other strides, rows wider or narrower than half the stride.
            let stride = if next(2) == 0 {
                1 << (3 + next(6))
            } else {
                24 + next(200)
            };
            let make = |lo: u64, rows: u64, w: u64| {
                if rows <= 1 {
                    Range::span(v, lo, lo + w)
                } else {
                    Range::rows(v, lo, rows, w.min(stride), stride)
                }
            };
            let a = make(next(2000), next(6), 1 + next(stride));
            let b = make(next(2000), next(6), 1 + next(stride));
            let exact = a.rows <= 1 || b.rows <= 1 || a.stride == b.stride;
            let truth = !bytes(&a).is_disjoint(&bytes(&b));
            if exact {
                assert_eq!(a.touches(&b), truth, "{a:?} {b:?}");
                assert_eq!(b.touches(&a), truth, "{a:?} {b:?}");
            } else {
                assert!(a.touches(&b) || !truth, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn strided_ranges_overlap_exactly() {
        let v = MemKey::Vmem;
        // Two column blocks of a 1024-byte-pitch tile: disjoint.
        let a = Range::rows(v, 0, 100, 512, 1024);
        let b = Range::rows(v, 512, 100, 512, 1024);
        assert_eq!(a.overlap(&b), None);
        assert!(Range::rows(v, 256, 100, 512, 1024).overlap(&a).is_some());
        // A plain range in the gap between rows, and one hitting a row.
        assert_eq!(a.overlap(&Range::span(v, 600, 1000)), None);
        assert!(a.overlap(&Range::span(v, 1000, 1030)).is_some());
        // Past the last row.
        assert_eq!(a.overlap(&Range::span(v, 99 * 1024 + 512, 200_000)), None);
        // Different strides fall back to bounds.
        assert!(a.overlap(&Range::rows(v, 512, 10, 8, 2048)).is_some());
        assert_eq!(a.overlap(&Range::span(MemKey::Smem, 0, 10)), None);
    }
}
