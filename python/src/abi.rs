//! The C ABI the C++ shim calls (declared again in `tpuemu/csrc/abi.h`; keep the two in step).
//!
//! The shim registers PyTorch's PrivateUse1 device. Its allocator asks [`alloc`] for storages;
//! a PyTorch storage's `DataPtr` holds a [`Handle`] (an owned reference to a backend storage) as
//! its context and a unique made-up address as its data pointer — the data never lives in host
//! memory, the address only gives every storage a distinct, non-overlapping range as PyTorch
//! expects. Operators arrive in [`crate::call`]. Every entry point catches panics and reports
//! errors through [`last_error`]; nothing unwinds into C++.

use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

use tpuemu_backend::foreign::RawView;
use tpuemu_backend::storage::StorageRef;
use tpuemu_backend::{Runtime, TpuError};

use crate::device::runtime;

/// Success.
pub const OK: i32 = 0;
/// An error: the message is in [`last_error`]; the shim raises it as a Python exception.
pub const ERROR: i32 = 1;
/// The backend cannot run this call (operator, dtype or argument it lacks): the shim runs the
/// operator on the CPU (or raises, with `TORCH_TPU_CPU_FALLBACK=0`). The reason is in
/// [`last_error`].
pub const UNSUPPORTED: i32 = 2;
/// An index error (raised as `IndexError`).
pub const INDEX_ERROR: i32 = 3;
/// An out= tensor has the wrong shape: the shim resizes it (shapes in the results) and calls
/// again.
pub const RESIZE: i32 = 4;
/// Out of device memory (raised as `torch.OutOfMemoryError`).
pub const OUT_OF_MEMORY: i32 = 5;
/// The user stopped a run (Ctrl-C): raised as `KeyboardInterrupt`.
pub const INTERRUPTED: i32 = 6;
/// A linear-algebra routine failed on its input: raised as `torch.linalg.LinAlgError`.
pub const LINALG_ERROR: i32 = 7;
/// A `RuntimeError` whose message is PyTorch's own, raised without the operator's name put in
/// front.
pub const VERBATIM_ERROR: i32 = 8;

/// A backend storage held by a PyTorch storage.
pub struct Handle {
    /// The storage.
    pub storage: StorageRef,
}

/// Made-up addresses start at 16 TiB and never repeat, 256-byte aligned with a gap between
/// storages.
static NEXT_ADDR: AtomicU64 = AtomicU64::new(1 << 44);

/// A new handle for `storage` and its address; an error, never a reused address, once the
/// address space is spent (the storages' reservations keep every request within the chip's
/// HBM, so that takes more than 16 EiB of storages made over one process's life).
pub fn new_handle(storage: StorageRef) -> Result<(*mut c_void, u64), TpuError> {
    let span = storage
        .bytes()
        .div_ceil(256)
        .saturating_mul(256)
        .saturating_add(256);
    let addr = NEXT_ADDR
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
            a.checked_add(span)
        })
        .map_err(|_| TpuError::Device("the tpu's storage addresses are spent".into()))?;
    let h = Box::into_raw(Box::new(Handle { storage }));
    Ok((h as *mut c_void, addr))
}

/// The storage a handle holds.
///
/// # Safety
/// `h` is null or a live handle from [`new_handle`].
pub unsafe fn storage_of(h: *const c_void) -> Option<StorageRef> {
    if h.is_null() {
        return None;
    }
    // SAFETY: the caller passes a live handle.
    Some(unsafe { &*(h as *const Handle) }.storage.clone())
}

thread_local! {
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Records `message` as this thread's last error.
pub fn set_error(message: &str) {
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        e.clear();
        e.extend_from_slice(message.as_bytes());
    });
}

/// The status code and message for a backend error.
pub fn status_of(e: &TpuError) -> i32 {
    set_error(&e.to_string());
    match e {
        TpuError::UnknownOp(_) | TpuError::Unsupported(_) => UNSUPPORTED,
        TpuError::BadDim(_) | TpuError::IndexOutOfRange(_) => INDEX_ERROR,
        TpuError::OutOfMemory(_) => OUT_OF_MEMORY,
        TpuError::LinAlg(_) => LINALG_ERROR,
        TpuError::Verbatim(_) => VERBATIM_ERROR,
        TpuError::Interrupted(_) => {
            // Told to the user now: runs go on again.
            tpuemu_emulator::interrupt::clear();
            INTERRUPTED
        }
        _ => ERROR,
    }
}

/// Runs `f`, turning a panic into [`ERROR`], and a run the user stopped during the call
/// (Ctrl-C) into [`INTERRUPTED`].
pub fn guard(what: &str, f: impl FnOnce() -> i32) -> i32 {
    let _watch = crate::sigint::watch();
    let rc = guard_panics(what, f);
    if rc != INTERRUPTED && tpuemu_emulator::interrupt::pending() {
        return interrupted();
    }
    rc
}

/// A launch was stopped by Ctrl-C during this call: what was launched is waited for and
/// reported now (every launch stops at once while the interrupt is pending), so that no later
/// synchronisation reports it again, and the call raises `KeyboardInterrupt`.
fn interrupted() -> i32 {
    let e = match runtime().and_then(|rt| rt.sync()) {
        Err(e @ TpuError::Interrupted(_)) => e,
        _ => TpuError::Interrupted("interrupted (Ctrl-C)".into()),
    };
    status_of(&e)
}

fn guard_panics(what: &str, f: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            set_error(&format!("tpuemu internal error in {what}: {msg}"));
            ERROR
        }
    }
}

/// The last error's bytes (valid until the thread's next call).
extern "C" fn last_error(len: *mut usize) -> *const u8 {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        // SAFETY: the shim passes a valid pointer.
        unsafe { *len = e.len() };
        e.as_ptr()
    })
}

/// A new storage of `nbytes`: its handle and address.
extern "C" fn alloc(nbytes: u64, handle: *mut *mut c_void, addr: *mut u64) -> i32 {
    guard("alloc", || match runtime() {
        Ok(rt) => {
            let (h, a) = match rt.alloc_storage(nbytes).and_then(new_handle) {
                Ok(x) => x,
                Err(e) => return status_of(&e),
            };
            // SAFETY: the shim passes valid out pointers.
            unsafe {
                *handle = h;
                *addr = a;
            }
            OK
        }
        Err(e) => status_of(&e),
    })
}

/// Drops a handle (the `DataPtr` deleter).
/// (Also gives back handles that never reached a PyTorch storage.)
pub extern "C" fn release(handle: *mut c_void) {
    if !handle.is_null() {
        // SAFETY: PyTorch calls the deleter once with the context it was given.
        let _ = catch_unwind(|| drop(unsafe { Box::from_raw(handle as *mut Handle) }));
    }
}

/// # Safety
/// `shape`/`strides` point to `ndim` values each.
unsafe fn raw_view(
    shape: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    elem_size: usize,
) -> Result<RawView, TpuError> {
    let sl = |p: *const i64| -> &[i64] {
        if ndim == 0 {
            &[]
        } else {
            // SAFETY: per the function's contract.
            unsafe { std::slice::from_raw_parts(p, ndim) }
        }
    };
    let conv = |v: &[i64]| -> Result<Vec<usize>, TpuError> {
        v.iter()
            .map(|x| {
                usize::try_from(*x)
                    .map_err(|_| TpuError::BadArgs(format!("negative size or stride {x}")))
            })
            .collect()
    };
    Ok(RawView {
        shape: conv(sl(shape))?,
        strides: conv(sl(strides))?,
        offset: usize::try_from(offset)
            .map_err(|_| TpuError::BadArgs(format!("negative storage offset {offset}")))?,
        elem_size,
    })
}

/// A strided view of a storage as the shim passes it.
#[derive(Clone, Copy)]
struct ViewPtr {
    handle: *const c_void,
    shape: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    elem_size: usize,
}

/// Writes `len` bytes at `data` (the view's elements, row-major) with `write`.
fn write_from(
    what: &str,
    v: ViewPtr,
    data: *const u8,
    len: usize,
    write: impl FnOnce(&Runtime, &StorageRef, &RawView, &[u8]) -> Result<(), TpuError>,
) -> i32 {
    guard(what, || {
        let run = || -> Result<(), TpuError> {
            // SAFETY: the shim passes a live handle, ndim-long arrays and len bytes.
            let Some(s) = (unsafe { storage_of(v.handle) }) else {
                return if len == 0 {
                    Ok(())
                } else {
                    Err(TpuError::BadArgs(
                        "write to a tensor without storage".into(),
                    ))
                };
            };
            let view = unsafe { raw_view(v.shape, v.strides, v.ndim, v.offset, v.elem_size)? };
            let bytes = if len == 0 {
                &[][..]
            } else {
                unsafe { std::slice::from_raw_parts(data, len) }
            };
            if v.elem_size == 8 {
                crate::wide::note_write(&s, bytes);
            }
            write(&runtime()?, &s, &view, bytes)
        };
        run().map_or_else(|e| status_of(&e), |_| OK)
    })
}

/// Reads the view's elements (row-major) with `read` into `len` bytes at `out`.
fn read_into(
    what: &str,
    v: ViewPtr,
    out: *mut u8,
    len: usize,
    read: impl FnOnce(&Runtime, &StorageRef, &RawView) -> Result<Vec<u8>, TpuError>,
) -> i32 {
    guard(what, || {
        let run = || -> Result<(), TpuError> {
            if len == 0 {
                return Ok(());
            }
            // SAFETY: as in write_from.
            let s = unsafe { storage_of(v.handle) }
                .ok_or_else(|| TpuError::BadArgs("read from a tensor without storage".into()))?;
            let view = unsafe { raw_view(v.shape, v.strides, v.ndim, v.offset, v.elem_size)? };
            let bytes = read(&runtime()?, &s, &view)?;
            if bytes.len() != len {
                return Err(TpuError::BadArgs(format!(
                    "read {} bytes into a buffer of {len}",
                    bytes.len()
                )));
            }
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, len) };
            Ok(())
        };
        run().map_or_else(|e| status_of(&e), |_| OK)
    })
}

/// Writes `len` bytes (a view's elements, row-major) into a strided view of a storage.
#[allow(clippy::too_many_arguments)]
extern "C" fn write_view(
    handle: *const c_void,
    shape: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    elem_size: usize,
    data: *const u8,
    len: usize,
) -> i32 {
    let v = ViewPtr {
        handle,
        shape,
        strides,
        ndim,
        offset,
        elem_size,
    };
    write_from("write_view", v, data, len, |rt, s, view, bytes| {
        rt.write_view(s, view, bytes)
    })
}

/// Reads a strided view's elements (row-major) into `len` bytes at `out`.
#[allow(clippy::too_many_arguments)]
extern "C" fn read_view(
    handle: *const c_void,
    shape: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    elem_size: usize,
    out: *mut u8,
    len: usize,
) -> i32 {
    let v = ViewPtr {
        handle,
        shape,
        strides,
        ndim,
        offset,
        elem_size,
    };
    read_into("read_view", v, out, len, |rt, s, view| {
        rt.read_view(s, view)
    })
}

/// Reads a strided view's elements (row-major) for a collective: untimed, no transfer counted
/// (`Runtime::peek_view`; the collective's time comes from the interconnect model).
#[allow(clippy::too_many_arguments)]
extern "C" fn peek_view(
    handle: *const c_void,
    shape: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    elem_size: usize,
    out: *mut u8,
    len: usize,
) -> i32 {
    let v = ViewPtr {
        handle,
        shape,
        strides,
        ndim,
        offset,
        elem_size,
    };
    read_into("peek_view", v, out, len, |rt, s, view| {
        rt.peek_view(s, view)
    })
}

/// Stores a collective's result in a strided view, ready at `ready_ns` of simulated time
/// (`Runtime::land_view`): untimed, no transfer counted.
#[allow(clippy::too_many_arguments)]
extern "C" fn land_view(
    handle: *const c_void,
    shape: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    elem_size: usize,
    data: *const u8,
    len: usize,
    ready_ns: f64,
) -> i32 {
    let v = ViewPtr {
        handle,
        shape,
        strides,
        ndim,
        offset,
        elem_size,
    };
    write_from("land_view", v, data, len, |rt, s, view, bytes| {
        rt.land_view(s, view, bytes, ready_ns)
    })
}

/// Copies the first `nbytes` of one storage into another (growing a storage).
extern "C" fn copy_storage(src: *const c_void, dst: *const c_void, nbytes: u64) -> i32 {
    guard("copy_storage", || {
        // SAFETY: the shim passes live handles (or null for empty storages).
        let (Some(s), Some(d)) = (unsafe { storage_of(src) }, unsafe { storage_of(dst) }) else {
            return OK;
        };
        runtime()
            .and_then(|rt| rt.copy_storage_bytes(&s, &d, nbytes))
            .map_or_else(|e| status_of(&e), |_| OK)
    })
}

/// Counts an operator run on the CPU and puts it in the trace.
extern "C" fn note_fallback(name: *const u8, len: usize, ns: f64) {
    let _ = catch_unwind(|| {
        // SAFETY: the shim passes a valid string.
        let n = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(name, len) });
        crate::device::note_fallback(&n, ns);
    });
}

/// Runs everything recorded and waits for the device.
extern "C" fn synchronize() -> i32 {
    guard("synchronize", || {
        runtime()
            .and_then(|rt| rt.sync())
            .map_or_else(|e| status_of(&e), |_| OK)
    })
}

/// What [`rng`] does with a stream.
pub mod rng_op {
    /// Reads its seed and next counter.
    pub const GET: i32 = 0;
    /// Sets its seed and next counter.
    pub const SET: i32 = 1;
    /// Forgets it (an explicit generator is gone).
    pub const DROP: i32 = 2;
}

/// The tpu generators' state (PyTorch's `torch.tpu.manual_seed`, `get_rng_state`, a
/// `torch.Generator(device="tpu")`): the backend's Threefry stream of `key` (negative: the
/// default generator) read, set or dropped ([`rng_op`]).
extern "C" fn rng(op: i32, key: i64, seed: *mut u64, offset: *mut u64) -> i32 {
    guard("rng", || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return status_of(&e),
        };
        let stream = u64::try_from(key).ok();
        match op {
            rng_op::GET => {
                let (s, o) = rt.rng_stream(stream);
                // SAFETY: the shim passes two writable u64s for GET.
                unsafe {
                    *seed = s;
                    *offset = o;
                }
            }
            rng_op::SET => {
                // SAFETY: the shim passes two readable u64s for SET.
                let (s, o) = unsafe { (*seed, *offset) };
                rt.set_rng_stream(stream, s, o);
            }
            rng_op::DROP => {
                if let Some(k) = stream {
                    rt.drop_rng_stream(k);
                }
            }
            _ => {
                return status_of(&TpuError::BadArgs(format!("rng: no operation {op}")));
            }
        }
        OK
    })
}

/// The functions the shim calls, in this order (`tpuemu/csrc/abi.h`).
#[repr(C)]
pub struct VTable {
    /// ABI version: the shim refuses a table it does not know.
    pub version: u64,
    last_error: extern "C" fn(*mut usize) -> *const u8,
    alloc: extern "C" fn(u64, *mut *mut c_void, *mut u64) -> i32,
    release: extern "C" fn(*mut c_void),
    write_view: extern "C" fn(
        *const c_void,
        *const i64,
        *const i64,
        usize,
        i64,
        usize,
        *const u8,
        usize,
    ) -> i32,
    read_view: extern "C" fn(
        *const c_void,
        *const i64,
        *const i64,
        usize,
        i64,
        usize,
        *mut u8,
        usize,
    ) -> i32,
    copy_storage: extern "C" fn(*const c_void, *const c_void, u64) -> i32,
    note_fallback: extern "C" fn(*const u8, usize, f64),
    synchronize: extern "C" fn() -> i32,
    resolve: extern "C" fn(*const u8, usize) -> i64,
    call: crate::call::CallFn,
    call_graph: crate::call::CallFn,
    peek_view: extern "C" fn(
        *const c_void,
        *const i64,
        *const i64,
        usize,
        i64,
        usize,
        *mut u8,
        usize,
    ) -> i32,
    land_view: extern "C" fn(
        *const c_void,
        *const i64,
        *const i64,
        usize,
        i64,
        usize,
        *const u8,
        usize,
        f64,
    ) -> i32,
    rng: extern "C" fn(i32, i64, *mut u64, *mut u64) -> i32,
}

/// The ABI version; bump it with any change to [`VTable`] or the argument structs.
pub const ABI_VERSION: u64 = 6;

/// The table.
pub static VTABLE: VTable = VTable {
    version: ABI_VERSION,
    last_error,
    alloc,
    release,
    write_view,
    read_view,
    copy_storage,
    note_fallback,
    synchronize,
    resolve: crate::call::resolve,
    call: crate::call::call,
    call_graph: crate::graph::call_graph,
    peek_view,
    land_view,
    rng,
};
