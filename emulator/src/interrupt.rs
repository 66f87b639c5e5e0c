//! Stopping a run from outside (Ctrl-C).
//!
//! A front end that knows when its user asked to stop calls [`request`] (async-signal-safe:
//! the Python bridge calls it from a SIGINT handler chained in front of Python's, because
//! Python's own handler only runs when control returns to the interpreter, which a long launch
//! would not do). The interrupt is then *pending*: every core of every launch stops at its next
//! instruction with [`crate::FaultKind::Interrupted`], reported as
//! [`tpuemu_isa::DeviceError::Interrupted`], until the front end has told its user and calls
//! [`clear`]. Looking costs one relaxed load per instruction; an uninterrupted run gives the
//! same bits and cycles.

use std::sync::atomic::{AtomicBool, Ordering};

static PENDING: AtomicBool = AtomicBool::new(false);

/// Asks every run to stop (async-signal-safe: one atomic store).
pub fn request() {
    PENDING.store(true, Ordering::SeqCst);
}

/// Whether an interrupt is pending.
#[inline]
pub fn pending() -> bool {
    PENDING.load(Ordering::Relaxed)
}

/// The interrupt was reported to the user: runs go on again.
pub fn clear() {
    PENDING.store(false, Ordering::SeqCst);
}
