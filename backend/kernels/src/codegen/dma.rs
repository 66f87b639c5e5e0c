//! Waiting for DMAs, and the ping-pong of double buffering.
//!
//! Every DMA adds the bytes it moved to its semaphore, so a kernel waits for a set of DMAs by
//! waiting for the sum of their bytes. Double-buffered kernels move step `i + 1`'s data into
//! (or step `i - 1`'s results out of) one buffer while step `i` works in the other; each buffer
//! has its own semaphore and a count of the bytes still on their way ([`PingPong`]).

use tpuemu_isa::Sem;
use tpuemu_isa::dma::{DmaDescriptor, DmaDim};

use super::Emitter;

/// Largest amount one `sem.wait` asks for (an immediate is 32 bits, signed).
const MAX_WAIT: u64 = 1 << 30;

impl Emitter {
    /// Waits until `sem` has counted `bytes` more bytes; nothing when `bytes` is 0 (amounts
    /// above 1 GiB are split over several waits).
    pub fn wait_bytes(&mut self, sem: Sem, mut bytes: u64) {
        while bytes > 0 {
            let a = bytes.min(MAX_WAIT);
            self.b.sem_wait(sem, a as i32);
            bytes -= a;
        }
    }

    /// Adds `bytes` to `sem` (as if a DMA of that many bytes had completed on it).
    pub fn signal_bytes(&mut self, sem: Sem, mut bytes: u64) {
        while bytes > 0 {
            let a = bytes.min(MAX_WAIT);
            self.b.sem_signal(sem, a as i32);
            bytes -= a;
        }
    }
}

/// A strided copy between HBM and VMEM: `dims` are (count, HBM byte stride, VMEM byte
/// stride), outermost first, over runs of `elem_bytes`; `to_vmem` picks the direction.
pub fn hbm_vmem_desc(elem_bytes: u32, dims: &[(u32, i64, i64)], to_vmem: bool) -> DmaDescriptor {
    DmaDescriptor {
        elem_bytes,
        dims: dims
            .iter()
            .map(|&(count, h, v)| {
                let (src, dst) = if to_vmem { (h, v) } else { (v, h) };
                DmaDim {
                    count,
                    src_stride: src as i32,
                    dst_stride: dst as i32,
                }
            })
            .collect(),
    }
}

/// Two buffers used in turn, with semaphores `first` (parity 0) and `first + 1` (parity 1),
/// and the bytes each still waits for.
#[derive(Clone, Copy, Debug)]
pub struct PingPong {
    first: u8,
    pending: [u64; 2],
}

impl PingPong {
    /// Nothing in flight; semaphores `first` and `first + 1`.
    pub fn new(first: u8) -> Self {
        PingPong {
            first,
            pending: [0; 2],
        }
    }

    /// The semaphore of buffer `parity`.
    pub fn sem(&self, parity: usize) -> Sem {
        Sem::n(self.first + parity as u8)
    }

    /// Records `bytes` more on their way for buffer `parity`.
    pub fn add(&mut self, parity: usize, bytes: u64) {
        self.pending[parity] += bytes;
    }

    /// Waits for everything on its way for buffer `parity`.
    pub fn wait(&mut self, e: &mut Emitter, parity: usize) {
        let bytes = std::mem::take(&mut self.pending[parity]);
        e.wait_bytes(self.sem(parity), bytes);
    }

    /// Counts `bytes` as on their way for each buffer and signals them on its semaphore
    /// now: a loop whose body ends with stores of those sizes in flight (the last one of each
    /// parity) can begin its first iteration as its later ones begin, waiting for the
    /// previous iteration's stores only when it reuses their buffer. Wait for both after the
    /// loop.
    pub fn prime(&mut self, e: &mut Emitter, bytes: [u64; 2]) {
        for (parity, b) in bytes.into_iter().enumerate() {
            self.pending[parity] += b;
            e.signal_bytes(self.sem(parity), b);
        }
    }

    /// The bytes on their way for each buffer.
    pub fn pending(&self) -> [u64; 2] {
        self.pending
    }

    /// Waits for both buffers, parity 0 first.
    pub fn wait_both(&mut self, e: &mut Emitter) {
        self.wait(e, 0);
        self.wait(e, 1);
    }
}
