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
        self.pages.values().map(|p| p.len() as u64).sum()
    }

    /// A new zero page `page`: [`PAGE_BYTES`] long, or what is left of the buffer on its last
    /// page (a 4 KiB tensor holds 4 KiB, not a whole page that is zeroed and freed).
    fn zero_page(&self, page: u64) -> Box<[u8]> {
        let len = (self.size - page * PAGE_BYTES).min(PAGE_BYTES);
        vec![0u8; len as usize].into_boxed_slice()
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
                    let mut p = self.zero_page(page);
                    p[within..within + take].copy_from_slice(chunk);
                    self.pages.insert(page, p);
                }
            }
            done += take;
        }
    }
}

/// Reads many small pieces of one buffer, looking a page up only when the piece is on
/// another page than the last one.
pub struct PageReader<'a> {
    buf: &'a HbmBuffer,
    page: u64,
    data: Option<&'a [u8]>,
}

impl<'a> PageReader<'a> {
    /// A reader of `buf`.
    pub fn new(buf: &'a HbmBuffer) -> Self {
        PageReader {
            buf,
            page: u64::MAX,
            data: None,
        }
    }

    /// Copies `out.len()` bytes from `offset` (checked by the caller), as [`HbmBuffer::read`].
    #[inline]
    pub fn read(&mut self, offset: u64, out: &mut [u8]) {
        let (page, within) = (offset / PAGE_BYTES, (offset % PAGE_BYTES) as usize);
        if within + out.len() > PAGE_BYTES as usize {
            return self.buf.read(offset, out);
        }
        if page != self.page {
            self.page = page;
            self.data = self.buf.pages.get(&page).map(|p| &p[..]);
        }
        match self.data {
            Some(p) => out.copy_from_slice(&p[within..within + out.len()]),
            None => out.fill(0),
        }
    }
}

/// Writes many small pieces into one buffer, keeping the page it last wrote out of the map
/// until it moves to another one (put back when dropped).
pub struct PageWriter<'a> {
    buf: &'a mut HbmBuffer,
    page: u64,
    data: Option<Box<[u8]>>,
}

impl<'a> PageWriter<'a> {
    /// A writer into `buf`.
    pub fn new(buf: &'a mut HbmBuffer) -> Self {
        PageWriter {
            buf,
            page: u64::MAX,
            data: None,
        }
    }

    fn put_back(&mut self) {
        if let Some(p) = self.data.take() {
            self.buf.pages.insert(self.page, p);
        }
        self.page = u64::MAX;
    }

    /// Copies `data` to `offset` (checked by the caller), as [`HbmBuffer::write`].
    #[inline]
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let (page, within) = (offset / PAGE_BYTES, (offset % PAGE_BYTES) as usize);
        if within + data.len() > PAGE_BYTES as usize {
            self.put_back();
            return self.buf.write(offset, data);
        }
        if page != self.page {
            self.put_back();
            self.page = page;
            self.data = self.buf.pages.remove(&page);
        }
        match &mut self.data {
            Some(p) => p[within..within + data.len()].copy_from_slice(data),
            // Zeros on a page never written cost nothing.
            None if data.iter().all(|b| *b == 0) => {}
            None => {
                let mut p = self.buf.zero_page(page);
                p[within..within + data.len()].copy_from_slice(data);
                self.data = Some(p);
            }
        }
    }
}

impl Drop for PageWriter<'_> {
    fn drop(&mut self) {
        self.put_back();
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

    /// Two different buffers, the first to read and the second to write (`None` when they are
    /// the same one or either is missing).
    pub fn pair(&mut self, src: u64, dst: u64) -> Option<(&HbmBuffer, &mut HbmBuffer)> {
        match self.buffers.get_disjoint_mut([&src, &dst]) {
            [Some(a), Some(b)] => Some((a, b)),
            _ => None,
        }
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
    fn a_last_page_holds_only_the_rest_of_the_buffer() {
        let mut hbm = Hbm::new(1 << 30);
        // 4 KiB: one page of 4 KiB, not of 64.
        hbm.alloc(1, 4096).unwrap();
        let b = hbm.buffer_mut(1).unwrap();
        b.write(4090, &[7; 6]);
        assert_eq!(b.resident_bytes(), 4096);
        // A page and 100 bytes: the second page holds 100 bytes, written through a writer.
        hbm.alloc(2, PAGE_BYTES + 100).unwrap();
        let b = hbm.buffer_mut(2).unwrap();
        let mut w = PageWriter::new(b);
        w.write(PAGE_BYTES + 96, &[1, 2, 3, 4]);
        drop(w);
        assert_eq!(b.resident_bytes(), 100);
        let mut out = [9u8; 6];
        b.read(PAGE_BYTES + 94, &mut out);
        assert_eq!(out, [0, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn page_readers_and_writers_agree_with_read_and_write() {
        let mut a = HbmBuffer::new(4 * PAGE_BYTES);
        let mut b = HbmBuffer::new(4 * PAGE_BYTES);
        let pieces: Vec<(u64, Vec<u8>)> = (0..300u64)
            .map(|i| {
                let at = (i * 7919 * 13) % (4 * PAGE_BYTES - 600);
                let len = (i % 37 + 1) as usize * if i % 5 == 0 { 16 } else { 1 };
                let v = if i % 3 == 0 { 0 } else { i as u8 };
                (at, vec![v; len])
            })
            .collect();
        {
            let mut w = PageWriter::new(&mut b);
            for (at, d) in &pieces {
                a.write(*at, d);
                w.write(*at, d);
            }
        }
        assert_eq!(a.resident_bytes(), b.resident_bytes());
        let mut r = PageReader::new(&b);
        for (at, d) in &pieces {
            let (mut x, mut y) = (vec![1u8; d.len() + 40], vec![2u8; d.len() + 40]);
            a.read(*at, &mut x);
            r.read(*at, &mut y);
            assert_eq!(x, y);
        }
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
