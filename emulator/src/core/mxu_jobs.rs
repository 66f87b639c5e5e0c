//! Matrix-unit products computed beside the interpreter, on the host's other cores.
//!
//! A `mxu.mm` copies its LHS block out of VMEM when it issues (as the functional model always
//! did) and hands the product to a [`Product`]: its rows are cut into parts that the rayon pool
//! starts on at once, while the interpreter runs on. The first `mxu.pop` that needs the rows
//! computes whatever parts no thread has started yet, then waits for the others. Every part is
//! the same sequential-over-K sum whichever thread computes it, and results are consumed in
//! program order, so the bits never depend on the host's threads or their timing; the
//! simulated timing never looks at the host at all.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::numerics::matmul::{Operands, PackedWeights, tile_rows};

/// Multiply-adds below which a product is computed at once on the interpreter's thread (handing
/// it over would cost more than it saves).
const ASYNC_MACS: usize = 1 << 18;
/// Multiply-adds per part, about: enough parts for every core, few enough to keep them cheap.
const PART_MACS: usize = 1 << 21;

/// One product `lhs (m x k) * w`, in parts of `rows_per_part` rows.
#[derive(Debug)]
pub(crate) struct Product {
    /// Shared with the matrix units' LHS cache.
    lhs: Arc<Vec<f32>>,
    m: usize,
    w: Arc<PackedWeights>,
    ops: Operands,
    rows_per_part: usize,
    outs: Vec<Mutex<Vec<f32>>>,
    /// Parts claimed so far (they are claimed in order).
    claimed: AtomicUsize,
    /// Parts finished.
    done: AtomicUsize,
    /// Whether a thread sleeps on `finished` (then the last part wakes it).
    sleeping: AtomicBool,
    lock: Mutex<()>,
    finished: Condvar,
}

/// Spins of a thread waiting for parts other threads are computing, before it sleeps: a part
/// takes tens of microseconds, less than going to sleep and being woken costs.
const SPINS: u32 = 1 << 16;

impl Product {
    fn parts(&self) -> usize {
        self.outs.len()
    }

    /// Claims and computes parts until none is left; returns at once if none is.
    fn work(&self) {
        loop {
            let i = self.claimed.fetch_add(1, Ordering::SeqCst);
            if i >= self.parts() {
                return;
            }
            let r0 = i * self.rows_per_part;
            let rows = self.rows_per_part.min(self.m - r0);
            let k = self.w.k();
            {
                let mut out = self.outs[i].lock().unwrap_or_else(PoisonError::into_inner);
                tile_rows(&self.lhs[r0 * k..], k, rows, &self.w, &mut out, self.ops);
            }
            // Sequentially consistent with the sleeper's store of `sleeping` and load of `done`:
            // one of the two sees the other's write, so no wake-up is lost.
            if self.done.fetch_add(1, Ordering::SeqCst) + 1 == self.parts()
                && self.sleeping.load(Ordering::SeqCst)
            {
                let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
                self.finished.notify_all();
            }
        }
    }

    fn all_done(&self) -> bool {
        self.done.load(Ordering::SeqCst) == self.parts()
    }

    /// Helps with the parts no thread has started, then waits for the rest: spinning a
    /// while, then asleep.
    fn finish(&self) {
        self.work();
        for i in 0..SPINS {
            if self.all_done() {
                return;
            }
            if i % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleeping.store(true, Ordering::SeqCst);
        while !self.all_done() {
            guard = self
                .finished
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The values of a queued result block: computed, or a product still being computed.
#[derive(Debug)]
pub(crate) enum Rows {
    /// `rows x n` values, row-major (empty when timing only).
    Ready(Vec<f32>),
    /// Parts of `rows_per_part` rows each.
    Parts {
        outs: Vec<Vec<f32>>,
        rows_per_part: usize,
    },
    /// Being computed.
    Pending(Arc<Product>),
}

impl Default for Rows {
    fn default() -> Self {
        Rows::Ready(Vec::new())
    }
}

impl Rows {
    /// Starts `lhs (m x k) * w` (`w` packed with `k` rows), or computes it at once when it is
    /// small; `buffers` gives result storage.
    pub fn start(
        lhs: Arc<Vec<f32>>,
        m: usize,
        w: Arc<PackedWeights>,
        ops: Operands,
        buffers: &mut impl FnMut(usize) -> Vec<f32>,
    ) -> Rows {
        let (k, n) = (w.k(), w.n());
        let macs = m * k * n;
        if macs < ASYNC_MACS {
            let mut out = buffers(m * n);
            tile_rows(&lhs, k, m, &w, &mut out, ops);
            return Rows::Ready(out);
        }
        let parts = macs.div_ceil(PART_MACS).clamp(2, 16);
        let rows_per_part = m.div_ceil(parts).next_multiple_of(8);
        let parts = m.div_ceil(rows_per_part);
        let outs = (0..parts)
            .map(|i| Mutex::new(buffers(rows_per_part.min(m - i * rows_per_part) * n)))
            .collect();
        let p = Arc::new(Product {
            lhs,
            m,
            w,
            ops,
            rows_per_part,
            outs,
            claimed: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
            lock: Mutex::new(()),
            finished: Condvar::new(),
        });
        for _ in 0..rayon::current_num_threads().min(parts) {
            let p = p.clone();
            rayon::spawn(move || p.work());
        }
        Rows::Pending(p)
    }

    /// Makes the values available (waiting for a product if needed).
    pub fn settle(&mut self) {
        let Rows::Pending(p) = self else {
            return;
        };
        let p = p.clone();
        p.finish();
        // Every part is done: no thread touches the buffers any more (workers may still hold
        // the product for a moment, empty).
        let outs = p
            .outs
            .iter()
            .map(|o| std::mem::take(&mut *o.lock().unwrap_or_else(PoisonError::into_inner)))
            .collect();
        *self = Rows::Parts {
            outs,
            rows_per_part: p.rows_per_part,
        };
    }

    /// Calls `f(first row, values)` for the contiguous runs of rows `r0 .. r0 + rows`
    /// (settled).
    pub fn for_runs<'a>(
        &'a self,
        r0: usize,
        rows: usize,
        n: usize,
        mut f: impl FnMut(usize, &'a [f32]),
    ) {
        match self {
            Rows::Ready(v) => f(r0, &v[r0 * n..(r0 + rows) * n]),
            Rows::Parts {
                outs,
                rows_per_part,
            } => {
                let mut r = r0;
                while r < r0 + rows {
                    let (part, within) = (r / rows_per_part, r % rows_per_part);
                    let take = (rows_per_part - within).min(r0 + rows - r);
                    f(r, &outs[part][within * n..(within + take) * n]);
                    r += take;
                }
            }
            Rows::Pending(_) => unreachable!("rows are settled before they are read"),
        }
    }

    /// The buffers, for reuse (after [`Rows::settle`]).
    pub fn into_buffers(self) -> Vec<Vec<f32>> {
        match self {
            Rows::Ready(v) => vec![v],
            Rows::Parts { outs, .. } => outs,
            Rows::Pending(p) => {
                // Never popped (the launch ended or faulted): let the workers finish with it.
                drop(p);
                Vec::new()
            }
        }
    }
}
