//! Storages: device memory shared by tensors, allocated lazily.
//!
//! A storage is created when an operator produces a tensor; its device buffer is allocated when
//! a kernel first writes it (at once in Strict mode, at the flush in DeferAndFuse mode — a
//! storage that lives only inside a fused kernel is never allocated). Dropping the last handle
//! queues the buffer to be freed; the runtime frees queued buffers at its next call (never from
//! inside a drop, so no lock is taken there).

use std::sync::{Arc, Mutex};

use tpuemu_isa::BufferId;

/// Buffers waiting to be freed.
pub(crate) type FreeList = Arc<Mutex<Vec<BufferId>>>;

/// Device memory for tensors.
#[derive(Debug)]
pub struct Storage {
    id: u64,
    bytes: u64,
    buffer: Mutex<Option<BufferId>>,
    frees: FreeList,
}

impl Storage {
    pub(crate) fn new(id: u64, bytes: u64, frees: FreeList) -> Self {
        Storage {
            id,
            bytes,
            buffer: Mutex::new(None),
            frees,
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

    pub(crate) fn set_buffer(&self, b: BufferId) {
        *self.buffer.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.get_mut().ok().and_then(|b| b.take()) {
            self.frees.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        }
    }
}

/// A shared storage.
pub type StorageRef = Arc<Storage>;
