//! Storages: device memory shared by tensors, reserved when made and allocated lazily.
//!
//! A storage is created when an operator produces a tensor, and its bytes are *reserved* in its
//! runtime's [`Pool`] at that moment: a request the chip's HBM cannot hold fails at the call that
//! makes it (`torch.OutOfMemoryError`), never later at a first write far away. Its device buffer
//! is allocated when a kernel first writes it (at once in Strict mode, at the flush in
//! DeferAndFuse mode — a storage that lives only inside a fused kernel never takes a buffer,
//! though it stays reserved while a handle to it lives). Dropping the last handle releases the
//! reservation and queues the buffer to be freed; the runtime frees queued buffers at its next
//! call (never from inside a drop, so no lock is taken there).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tpuemu_isa::BufferId;

/// What the storages of one runtime share: the chip's capacity, the bytes reserved by live
/// storages, and the buffers of dropped storages waiting to be freed.
#[derive(Debug, Default)]
pub struct Pool {
    /// HBM bytes the storages may reserve in all.
    capacity: u64,
    /// Bytes reserved by live storages.
    reserved: AtomicU64,
    /// Buffers waiting to be freed.
    frees: Mutex<Vec<BufferId>>,
}

/// A request the pool cannot hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// Bytes asked for.
    pub asked: u64,
    /// Bytes still free.
    pub free: u64,
    /// The pool's capacity.
    pub capacity: u64,
}

impl Pool {
    /// A pool of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Pool {
            capacity,
            ..Pool::default()
        }
    }

    /// Bytes reserved by live storages.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Reserves `bytes`, or says how much is free.
    fn reserve(&self, bytes: u64) -> Result<(), Exhausted> {
        self.reserved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                r.checked_add(bytes).filter(|t| *t <= self.capacity)
            })
            .map(|_| ())
            .map_err(|r| Exhausted {
                asked: bytes,
                free: self.capacity.saturating_sub(r),
                capacity: self.capacity,
            })
    }

    fn release(&self, bytes: u64) {
        self.reserved.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Takes the buffers waiting to be freed.
    pub fn take_frees(&self) -> Vec<BufferId> {
        std::mem::take(&mut *self.frees.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Device memory for tensors.
#[derive(Debug)]
pub struct Storage {
    id: u64,
    bytes: u64,
    buffer: Mutex<Option<BufferId>>,
    pool: Arc<Pool>,
}

impl Storage {
    /// A storage of `bytes` whose reservation is taken from `pool` (and given back when the
    /// storage is dropped).
    pub fn reserve(id: u64, bytes: u64, pool: Arc<Pool>) -> Result<Self, Exhausted> {
        pool.reserve(bytes)?;
        Ok(Storage {
            id,
            bytes,
            buffer: Mutex::new(None),
            pool,
        })
    }

    /// A storage that reserves nothing and never gets device memory (a plan's stand-in).
    pub fn placeholder(id: u64) -> Self {
        Storage {
            id,
            bytes: 0,
            buffer: Mutex::new(None),
            pool: Arc::new(Pool::default()),
        }
    }

    /// Identifier, unique within a runtime.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The device buffer, if allocated.
    pub fn buffer(&self) -> Option<BufferId> {
        *self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_buffer(&self, b: BufferId) {
        *self.buffer.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.pool.release(self.bytes);
        if let Some(b) = self.buffer.get_mut().ok().and_then(|b| b.take()) {
            let mut frees = self.pool.frees.lock().unwrap_or_else(|e| e.into_inner());
            frees.push(b);
        }
    }
}

/// A shared storage.
pub type StorageRef = Arc<Storage>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_reserves_up_to_its_capacity_and_a_dropped_storage_gives_its_bytes_back() {
        let pool = Arc::new(Pool::new(1000));
        let a = Storage::reserve(1, 600, pool.clone()).unwrap();
        let b = Storage::reserve(2, 400, pool.clone()).unwrap();
        assert_eq!(pool.reserved(), 1000);
        let e = Storage::reserve(3, 1, pool.clone()).unwrap_err();
        assert_eq!(
            e,
            Exhausted {
                asked: 1,
                free: 0,
                capacity: 1000
            }
        );
        drop(a);
        assert_eq!(pool.reserved(), 400);
        let e = Storage::reserve(4, 601, pool.clone()).unwrap_err();
        assert_eq!(e.free, 600);
        let c = Storage::reserve(5, 600, pool.clone()).unwrap();
        drop((b, c));
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn a_request_whose_total_overflows_is_refused_not_wrapped() {
        let pool = Arc::new(Pool::new(u64::MAX));
        let _a = Storage::reserve(1, u64::MAX - 10, pool.clone()).unwrap();
        let e = Storage::reserve(2, 11, pool.clone()).unwrap_err();
        assert_eq!(e.free, 10);
        assert_eq!(pool.reserved(), u64::MAX - 10);
    }
}
