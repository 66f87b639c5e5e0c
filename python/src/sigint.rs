//! Ctrl-C during a long launch.
//!
//! Python's SIGINT handler only trips a flag that the interpreter reads between bytecodes, and
//! operators run in Rust with Python's lock released, so a launch that emulates for minutes
//! would ignore Ctrl-C until it ended. At import, when Python's handler is its default (the
//! one that raises `KeyboardInterrupt`), [`install`] puts a C-level handler in front of it that,
//! while a call from Python into the device is under way ([`watch`]), asks the emulator to stop
//! ([`tpuemu_emulator::interrupt::request`], one atomic store), and then calls Python's, so
//! Python sees the signal as before. The stopped launch is reported as `KeyboardInterrupt` by
//! the call that waited for it ([`keyboard_interrupt`]), which runs Python's handler there so
//! that the Ctrl-C is raised once. A Ctrl-C while no call is under way is Python's alone (its
//! `KeyboardInterrupt` at the next bytecode): launches already queued run on, and the next
//! operator is not stopped by it.
//!
//! Nothing here takes Python's lock while the runtime's is held (a poll that did could
//! deadlock against a thread that holds Python's lock and waits for the runtime). A handler
//! the user installs later (`signal.signal`) replaces this one: their handler then runs after
//! the launch, as it would for any other extension.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;

/// Calls from Python into the device under way (on any thread).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// A call from Python into the device, for as long as it lives: a Ctrl-C meanwhile stops its
/// launches. When the last such call ends, an interrupt that no launch reported is dropped
/// (Python's own handler reports that Ctrl-C).
pub(crate) struct Watch(());

/// Starts a [`Watch`].
pub(crate) fn watch() -> Watch {
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    Watch(())
}

impl Drop for Watch {
    fn drop(&mut self) {
        if ACTIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
            tpuemu_emulator::interrupt::clear();
        }
    }
}

#[cfg(unix)]
mod chain {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::ACTIVE;

    /// Python's C-level handler, called after ours.
    static PREVIOUS: AtomicUsize = AtomicUsize::new(0);
    /// Whether it takes three arguments (`SA_SIGINFO`).
    static PREVIOUS_SIGINFO: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_sigint(
        sig: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        if ACTIVE.load(Ordering::SeqCst) > 0 {
            tpuemu_emulator::interrupt::request();
        }
        let previous = PREVIOUS.load(Ordering::SeqCst);
        if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
            return;
        }
        // SAFETY: `previous` is the handler sigaction reported for SIGINT when this one was
        // installed, of the kind its flags say.
        unsafe {
            if PREVIOUS_SIGINFO.load(Ordering::SeqCst) {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(previous);
                f(sig, info, context);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(previous);
                f(sig);
            }
        }
    }

    /// Puts [`on_sigint`] in front of the current SIGINT handler (once).
    pub(super) fn install() {
        // SAFETY: plain sigaction calls on zeroed structs; the handler is async-signal-safe
        // (atomics, then the previous handler).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == on_sigint as *const () as usize
                || old.sa_sigaction == libc::SIG_DFL
                || old.sa_sigaction == libc::SIG_IGN
            {
                return;
            }
            PREVIOUS.store(old.sa_sigaction, Ordering::SeqCst);
            PREVIOUS_SIGINFO.store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::SeqCst);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigint as *const () as usize;
            new.sa_flags = (old.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
            new.sa_mask = old.sa_mask;
            libc::sigaction(libc::SIGINT, &new, std::ptr::null_mut());
        }
    }
}

/// Installs the handler when Python's SIGINT handler is `signal.default_int_handler` (another
/// handler decides for itself what Ctrl-C means, so a launch is not stopped for it).
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
    let signal = py.import("signal")?;
    let current = signal.call_method1("getsignal", (signal.getattr("SIGINT")?,))?;
    if current.is(&signal.getattr("default_int_handler")?) {
        #[cfg(unix)]
        chain::install();
    }
    Ok(())
}

/// The `KeyboardInterrupt` for a stopped launch, with `message` (what was stopped). Python's
/// handler runs first, so the Ctrl-C it was told about is not raised a second time later.
pub(crate) fn keyboard_interrupt(py: Python<'_>, message: String) -> PyErr {
    // Its own KeyboardInterrupt is replaced by ours, which says what was stopped; another
    // handler's exception (a SIGTERM handler's, say) is kept.
    match py.check_signals() {
        Err(e) if !e.is_instance_of::<PyKeyboardInterrupt>(py) => e,
        _ => PyKeyboardInterrupt::new_err(message),
    }
}
