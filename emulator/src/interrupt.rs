//! Stopping a run from outside (Ctrl-C).
//!
//! A front end that knows when its user asked to stop installs a *poll* ([`set_poll`]): the
//! Python bridge's asks Python whether a Ctrl-C is pending (Python's own handler only runs when
//! control returns to the interpreter, which a long launch would not do). Every core polls
//! once per [`POLL_EVERY`] instructions; once the poll says yes, or [`request`] was called
//! (a signal handler may), the interrupt is *pending*: every core of every launch stops at its
//! next instruction with [`crate::FaultKind::Interrupted`], reported as
//! [`tpuemu_isa::DeviceError::Interrupted`], until the front end has told its user and calls
//! [`clear`]. Polling costs one branch per instruction and a clock read per
//! [`CLOCK_EVERY`]; an uninterrupted run gives the same bits and cycles.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Instructions between two looks at the host clock.
pub const CLOCK_EVERY: u64 = 256;

/// Host time between two polls.
pub const POLL_PERIOD: Duration = Duration::from_millis(20);

static POLL: OnceLock<fn() -> bool> = OnceLock::new();
static PENDING: AtomicBool = AtomicBool::new(false);
/// When the poll was last called, in nanoseconds since [`EPOCH`].
static LAST_POLL: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Installs the front end's poll: true when its user asked to stop (once; later calls are
/// ignored).
pub fn set_poll(f: fn() -> bool) {
    let _ = POLL.set(f);
}

/// Asks every run to stop (async-signal-safe: one atomic store).
pub fn request() {
    PENDING.store(true, Ordering::SeqCst);
}

/// Whether an interrupt is pending.
pub fn pending() -> bool {
    PENDING.load(Ordering::Relaxed)
}

/// The interrupt was reported to the user: runs go on again.
pub fn clear() {
    PENDING.store(false, Ordering::SeqCst);
}

/// Whether a core that has executed `instructions` instructions in this launch must stop:
/// an interrupt is pending, or it is time to poll and the poll says so.
#[inline]
pub(crate) fn stop(instructions: u64) -> bool {
    if pending() {
        return true;
    }
    if !instructions.is_multiple_of(CLOCK_EVERY) {
        return false;
    }
    let Some(poll) = POLL.get() else {
        return false;
    };
    let now = EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64;
    let last = LAST_POLL.load(Ordering::Relaxed);
    if now.saturating_sub(last) < POLL_PERIOD.as_nanos() as u64 {
        return false;
    }
    LAST_POLL.store(now, Ordering::Relaxed);
    if poll() {
        request();
        return true;
    }
    false
}
