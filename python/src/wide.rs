//! Storages holding int64 values beyond 32 bits.
//!
//! The device computes int64 in 32-bit lanes (see `tpuemu_backend::dtype`), while the bridge
//! copies int64 bytes exactly. A storage that received an 8-byte value outside the i32 range
//! from the host is marked; an operator given an int64 tensor over a marked storage runs on the
//! CPU (exactly) instead of on the device (wrongly). Device-to-device copies carry the mark.
//! Marks are never cleared (a partial overwrite cannot tell), and storage ids never repeat.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tpuemu_backend::storage::Storage;

static ANY: AtomicBool = AtomicBool::new(false);
static WIDE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

fn mark(id: u64) {
    WIDE.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
    ANY.store(true, Ordering::Relaxed);
}

/// Marks `s` if `bytes` (8-byte elements) hold a value outside the i32 range.
pub fn note_write(s: &Storage, bytes: &[u8]) {
    let wide = bytes.chunks_exact(8).any(|c| {
        let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
        i32::try_from(v).is_err()
    });
    if wide {
        mark(s.id());
    }
}

/// Whether `s` is marked.
pub fn is_wide(s: &Storage) -> bool {
    ANY.load(Ordering::Relaxed)
        && WIDE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&s.id())
}

/// A copy from `src` to `dst`: `dst` is marked if `src` is.
pub fn propagate(src: &Storage, dst: &Storage) {
    if is_wide(src) {
        mark(dst.id());
    }
}
