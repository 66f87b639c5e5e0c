//! A core's local memory (VMEM or SMEM): a flat byte array allocated on first use.
//!
//! A memory can watch one byte range for writes ([`LocalMem::watch`]): the matrix units keep
//! the last LHS block they read as long as no write has touched its bytes. Every way of
//! writing says so: [`LocalMem::bytes_for`] names the range it writes, [`LocalMem::bytes`]
//! (any byte) and [`LocalMem::clear`] end the watch; reads go through [`LocalMem::view`].

/// A lazily allocated, zero-initialised byte array.
#[derive(Debug, Clone)]
pub struct LocalMem {
    name: &'static str,
    size: u64,
    data: Option<Vec<u8>>,
    /// Bytes from this offset on are known to be zero.
    dirty: usize,
    /// The watched range, while no write has touched it.
    watch: Option<(usize, usize)>,
}

impl LocalMem {
    /// A memory called `name` (`VMEM`, `SMEM`) of `size` bytes; nothing allocated yet.
    pub fn new(name: &'static str, size: u64) -> Self {
        LocalMem {
            name,
            size,
            data: None,
            dirty: 0,
            watch: None,
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

    /// The bytes, allocating them (zeroed) on first use; any of them may be written.
    pub fn bytes(&mut self) -> &mut [u8] {
        self.dirty = self.size as usize;
        self.watch = None;
        self.alloc()
    }

    /// The bytes, to write only those in `[lo, hi)`.
    pub fn bytes_for(&mut self, lo: usize, hi: usize) -> &mut [u8] {
        self.dirty = self.size as usize;
        if self.watch.is_some_and(|(a, b)| lo < b && a < hi) {
            self.watch = None;
        }
        self.alloc()
    }

    /// The bytes, to read (allocated on first use).
    pub fn view(&mut self) -> &[u8] {
        self.alloc()
    }

    /// Starts watching `[lo, hi)` for writes (ending any earlier watch).
    pub fn watch(&mut self, lo: usize, hi: usize) {
        self.watch = Some((lo, hi));
    }

    /// Whether `[lo, hi)` is watched and no write has touched it since the watch began.
    pub fn unwritten(&self, lo: usize, hi: usize) -> bool {
        self.watch == Some((lo, hi))
    }

    fn alloc(&mut self) -> &mut [u8] {
        let size = self.size as usize;
        self.data.get_or_insert_with(|| vec![0u8; size])
    }

    /// Copies `out.len()` bytes from a checked offset (zeros where nothing was written).
    pub fn read(&self, at: usize, out: &mut [u8]) {
        match &self.data {
            Some(d) => out.copy_from_slice(&d[at..at + out.len()]),
            None => out.fill(0),
        }
    }

    /// Writes `data` at a checked offset.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        self.dirty = self.dirty.max(at + data.len());
        if self
            .watch
            .is_some_and(|(a, b)| at < b && a < at + data.len())
        {
            self.watch = None;
        }
        self.alloc()[at..at + data.len()].copy_from_slice(data);
    }

    /// Reads a little-endian word at a checked, aligned address.
    pub fn read_u32(&self, addr: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(addr, &mut b);
        u32::from_le_bytes(b)
    }

    /// Writes a little-endian word at a checked, aligned address.
    pub fn write_u32(&mut self, addr: usize, v: u32) {
        self.write(addr, &v.to_le_bytes());
    }

    /// Makes the memory read as zero again: zeroes the bytes written when they are few (a
    /// launch's arguments in SMEM), else drops the allocation (no host memory held).
    pub fn clear(&mut self) {
        self.watch = None;
        if let Some(d) = &mut self.data
            && self.dirty <= d.len() / 16
        {
            d[..self.dirty].fill(0);
        } else {
            self.data = None;
        }
        self.dirty = 0;
    }
}
