//! Memory capacities in the unit their vendor states them in.
//!
//! Google states some TPU HBM capacities in binary units (v4: 32 GiB, v7x: 192 GiB) and some in
//! decimal ones (v5e: 16 GB, v6e: 32 GB); a preset holds the bytes the vendor's figure means,
//! and reports show a footprint against it in that same unit, so that "15.7 of 16" never
//! compares GiB with GB.

/// A unit to show byte counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteUnit {
    /// Bytes in one unit.
    pub bytes: u64,
    /// Its symbol (`GiB`, `GB`, `MiB`).
    pub name: &'static str,
}

/// 2^30 bytes.
pub const GIB: ByteUnit = ByteUnit {
    bytes: 1 << 30,
    name: "GiB",
};
/// 10^9 bytes.
pub const GB: ByteUnit = ByteUnit {
    bytes: 1_000_000_000,
    name: "GB",
};
/// 2^20 bytes.
pub const MIB: ByteUnit = ByteUnit {
    bytes: 1 << 20,
    name: "MiB",
};

impl ByteUnit {
    /// The unit a capacity is stated in: GiB where it is a whole number of them, else GB
    /// where it is a whole number of those, else GiB (MiB below one GB).
    pub fn of(capacity: u64) -> ByteUnit {
        if capacity < GB.bytes {
            MIB
        } else if capacity.is_multiple_of(GIB.bytes) || !capacity.is_multiple_of(GB.bytes) {
            GIB
        } else {
            GB
        }
    }

    /// `bytes` in this unit.
    pub fn of_bytes(self, bytes: u64) -> f64 {
        bytes as f64 / self.bytes as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_keep_their_vendors_unit() {
        // Google Cloud's figures: v5e 16 GB, v6e 32 GB; v4 32 GiB, v7x 192 GiB.
        assert_eq!(ByteUnit::of(16_000_000_000), GB);
        assert_eq!(ByteUnit::of(32_000_000_000), GB);
        assert_eq!(ByteUnit::of(32 << 30), GIB);
        assert_eq!(ByteUnit::of(192 << 30), GIB);
        assert_eq!(ByteUnit::of(128 << 20), MIB);
        // 15.7 GiB of footprint is 16.9 GB: more than v5e's 16 GB.
        let used = (15.7 * (1u64 << 30) as f64) as u64;
        assert!(GB.of_bytes(used) > 16.8);
    }
}
