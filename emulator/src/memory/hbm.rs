//! HBM: a chip's buffers, each a sparse set of pages, with capacity accounting.

use std::collections::{BTreeMap, HashMap};

/// Bytes per HBM page.
pub const PAGE_BYTES: u64 = 64 * 1024;

/// Allocations are rounded up to this many bytes for capacity accounting.
const ALLOC_GRANULE: u64 = 512;

/// One buffer: `size` bytes, stored as the pages written so far.
#[derive(Debug, Default, Clone)]
pub struct HbmBuffer {
    size: u64,
    pages: BTreeMap<u64, Box<[u8]>>,
}

impl HbmBuffer {
    /// A zero-filled buffer of `size` bytes that owns no memory yet.
    pub fn new(size: u64) -> Self {
        HbmBuffer {
            size,
            pages: BTreeMap::new(),
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Host bytes actually held.
    pub fn resident_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_BYTES
    }

    /// Copies `out.len()` bytes from `offset`. The caller has checked bounds.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset + done as u64;
            let (page, within) = (pos / PAGE_BYTES, (pos % PAGE_BYTES) as usize);
            let take = (PAGE_BYTES as usize - within).min(out.len() - done);
            match self.pages.get(&page) {
                Some(p) => out[done..done + take].copy_from_slice(&p[within..within + take]),
                None => out[done..done + take].fill(0),
            }
            done += take;
        }
    }

    /// Copies `data` to `offset`, creating pages as needed. The caller has checked bounds.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (page, within) = (pos / PAGE_BYTES, (pos % PAGE_BYTES) as usize);
            let take = (PAGE_BYTES as usize - within).min(data.len() - done);
            let chunk = &data[done..done + take];
            match self.pages.get_mut(&page) {
                Some(p) => p[within..within + take].copy_from_slice(chunk),
                None if chunk.iter().all(|b| *b == 0) => {}
                None => {
                    let mut p = vec![0u8; PAGE_BYTES as usize].into_boxed_slice();
                    p[within..within + take].copy_from_slice(chunk);
                    self.pages.insert(page, p);
                }
            }
            done += take;
        }
    }
}

/// A chip's HBM: capacity, and the live buffers by id.
#[derive(Debug)]
pub struct Hbm {
    capacity: u64,
    used: u64,
    buffers: HashMap<u64, HbmBuffer>,
}

impl Hbm {
    /// An empty HBM of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Hbm {
            capacity,
            used: 0,
            buffers: HashMap::new(),
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes allocated (rounded to the allocation granule).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Host bytes actually held by all buffers.
    pub fn resident_bytes(&self) -> u64 {
        self.buffers.values().map(HbmBuffer::resident_bytes).sum()
    }

    fn charge(bytes: u64) -> u64 {
        // Saturating: a request near 2^64 bytes must not wrap to a small charge.
        bytes
            .div_ceil(ALLOC_GRANULE)
            .max(1)
            .saturating_mul(ALLOC_GRANULE)
    }

    /// Allocates buffer `id` of `bytes`; `Err(free bytes)` when it does not fit.
    pub fn alloc(&mut self, id: u64, bytes: u64) -> Result<(), u64> {
        let charge = Self::charge(bytes);
        if charge > self.capacity - self.used {
            return Err(self.capacity - self.used);
        }
        self.used += charge;
        self.buffers.insert(id, HbmBuffer::new(bytes));
        Ok(())
    }

    /// Frees buffer `id`; false when it does not exist.
    pub fn free(&mut self, id: u64) -> bool {
        match self.buffers.remove(&id) {
            Some(b) => {
                self.used -= Self::charge(b.size);
                true
            }
            None => false,
        }
    }

    /// Buffer `id`.
    pub fn buffer(&self, id: u64) -> Option<&HbmBuffer> {
        self.buffers.get(&id)
    }

    /// Buffer `id`, mutably.
    pub fn buffer_mut(&mut self, id: u64) -> Option<&mut HbmBuffer> {
        self.buffers.get_mut(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_pages_cost_only_what_is_written() {
        let mut hbm = Hbm::new(192 << 30);
        hbm.alloc(1, 190 << 30).unwrap();
        let b = hbm.buffer_mut(1).unwrap();
        b.write((100 << 30) - 3, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(b.resident_bytes(), 2 * PAGE_BYTES);
        let mut out = [9u8; 8];
        b.read((100 << 30) - 4, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 0]);
        // Writing zeros to untouched pages allocates nothing.
        b.write(0, &[0u8; 1000]);
        assert_eq!(b.resident_bytes(), 2 * PAGE_BYTES);
    }

    #[test]
    fn capacity_is_enforced() {
        let mut hbm = Hbm::new(4096);
        hbm.alloc(1, 3000).unwrap();
        assert_eq!(hbm.alloc(2, 2000), Err(4096 - 3072));
        assert!(hbm.free(1));
        hbm.alloc(2, 2000).unwrap();
        assert!(!hbm.free(7));
    }

    #[test]
    fn sizes_near_2_pow_64_do_not_wrap_to_a_small_charge() {
        let mut hbm = Hbm::new(4096);
        for bytes in [u64::MAX, u64::MAX - 511, 1 << 63] {
            assert_eq!(hbm.alloc(1, bytes), Err(4096), "{bytes}");
        }
    }
}
