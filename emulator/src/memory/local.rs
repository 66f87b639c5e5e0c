//! A core's local memory (VMEM or SMEM): a flat byte array allocated on first use.

/// A lazily allocated, zero-initialised byte array.
#[derive(Debug, Clone)]
pub struct LocalMem {
    name: &'static str,
    size: u64,
    data: Option<Vec<u8>>,
}

impl LocalMem {
    /// A memory called `name` (`VMEM`, `SMEM`) of `size` bytes; nothing allocated yet.
    pub fn new(name: &'static str, size: u64) -> Self {
        LocalMem {
            name,
            size,
            data: None,
        }
    }

    /// Region name for faults.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether the range `[start, end)` lies inside.
    pub fn contains(&self, start: i64, end: i64) -> bool {
        start >= 0 && end >= start && end as u64 <= self.size
    }

    /// The bytes, allocating them (zeroed) on first use.
    pub fn bytes(&mut self) -> &mut [u8] {
        let size = self.size as usize;
        self.data.get_or_insert_with(|| vec![0u8; size])
    }

    /// Reads a little-endian word at a checked, aligned address.
    pub fn read_u32(&mut self, addr: usize) -> u32 {
        let b = self.bytes();
        u32::from_le_bytes([b[addr], b[addr + 1], b[addr + 2], b[addr + 3]])
    }

    /// Writes a little-endian word at a checked, aligned address.
    pub fn write_u32(&mut self, addr: usize, v: u32) {
        self.bytes()[addr..addr + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Drops the contents (the memory reads as zero again and holds no host memory).
    pub fn clear(&mut self) {
        self.data = None;
    }
}
