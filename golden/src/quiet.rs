//! Catching a panic without printing it.
//!
//! `catch_unwind` stops a panic from unwinding further, but Rust's panic hook has already printed
//! the message (and, with `RUST_BACKTRACE`, a backtrace) to standard error by then, in the middle
//! of the runner's report. [`catch`] runs a closure with the hook silenced on this thread and
//! returns the panic as a value: its message and where it happened. Other threads, and this one
//! outside [`catch`], keep the hook that was installed before.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside [`catch`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// Where the last quiet panic happened.
    static WHERE: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

/// A caught panic: its message and `file:line:column`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panic {
    /// The panic's message (`"non-string panic payload"` for other payloads).
    pub message: String,
    /// Where it was raised, when known.
    pub location: Option<String>,
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(at) => write!(f, "{} (at {at})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

fn install() {
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            if QUIET.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
                WHERE.with(|w| *w.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, returning its value or the panic it raised, with nothing printed.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Panic> {
    install();
    let was = QUIET.with(|q| q.replace(true));
    let out = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    out.map_err(|payload| Panic {
        message: payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into()),
        location: WHERE.with(|w| w.borrow_mut().take()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_is_a_value_with_its_place() {
        let p = catch(|| -> u32 { panic!("boom {}", 7) }).unwrap_err();
        assert_eq!(p.message, "boom 7");
        let at = p.location.expect("location");
        assert!(at.starts_with("golden/src/quiet.rs:"), "{at}");
        assert_eq!(catch(|| 5), Ok(5));
        // Nested: the inner catch leaves the outer one quiet.
        let outer = catch(|| {
            let inner = catch(|| -> () { panic!("inner") });
            assert!(inner.is_err());
            panic!("outer")
        });
        assert_eq!(outer.unwrap_err().message, "outer");
    }
}
