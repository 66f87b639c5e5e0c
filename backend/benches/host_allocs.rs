//! Host allocations per eager operator through the backend's boxed entry (`ops::call`): the
//! chain of `host_path` (`y = y + x` on a [8, 128] float32 tensor, emulated v5e) counted by a
//! counting wrapper around the allocator the CLI and the Python extension use. Allocation is a
//! large share of a small operator's host time; this shows where a change adds or removes some.
//! Prints, per mode, allocations and bytes per operator and the wall time per operator.
//!
//!     cargo bench -p tpuemu-backend --bench host_allocs

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{Mode, Runtime, Tensor};
use tpuemu_emulator::{Emulator, builtin};

/// mimalloc, counting allocations and the bytes asked for.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn count(bytes: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to mimalloc, a global allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        // SAFETY: the caller's contract is mimalloc's.
        unsafe { mimalloc::MiMalloc.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract is mimalloc's.
        unsafe { mimalloc::MiMalloc.dealloc(p, l) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size());
        // SAFETY: the caller's contract is mimalloc's.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(n);
        // SAFETY: the caller's contract is mimalloc's.
        unsafe { mimalloc::MiMalloc.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Operators per measured round.
const OPS: u64 = 2000;

fn main() {
    println!("chain of {OPS} adds [8,128] f32, per operator (round 1 warms the caches)");
    for (name, mode) in [("strict", Mode::Strict), ("defer", Mode::DeferAndFuse)] {
        let emu = Emulator::new(builtin("v5e").expect("preset")).expect("emulator");
        let rt = Runtime::new(Arc::new(emu)).expect("runtime");
        rt.set_mode(mode).expect("mode");
        let xs: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5).collect();
        let x = Tensor::from_slice(&rt, &xs, &[8, 128]).expect("x");
        let mut y = Tensor::from_slice(&rt, &xs, &[8, 128]).expect("y");
        for round in 1..=3 {
            let (a0, b0) = (
                ALLOCS.load(Ordering::Relaxed),
                BYTES.load(Ordering::Relaxed),
            );
            let t0 = std::time::Instant::now();
            for _ in 0..OPS {
                let args = vec![Value::Tensor(y.clone()), Value::Tensor(x.clone())];
                let out = ops::call(&rt, "aten::add.Tensor", args).expect("add");
                let Some(Value::Tensor(t)) = out.into_iter().next() else {
                    panic!("add returned no tensor")
                };
                y = t;
            }
            rt.sync().expect("sync");
            let ns = t0.elapsed().as_nanos() as f64 / OPS as f64;
            let (a1, b1) = (
                ALLOCS.load(Ordering::Relaxed),
                BYTES.load(Ordering::Relaxed),
            );
            println!(
                "{name:>6} round {round}: {:5.1} allocations, {:6.0} bytes, {ns:6.0} ns",
                (a1 - a0) as f64 / OPS as f64,
                (b1 - b0) as f64 / OPS as f64,
            );
        }
    }
}
