//! Matrix-unit products computed beside the interpreter, on the host's other cores.
//!
//! A `mxu.mm` copies its LHS block out of VMEM when it issues (as the functional model always
//! did) and hands the product to a [`Product`]: its rows are cut into parts that the rayon pool
//! starts on at once, while the interpreter runs on. The first `mxu.pop` that needs the rows
//! computes whatever parts no thread has started yet, then waits for the others. Every part is
//! the same sequential-over-K sum whichever thread computes it, and results are consumed in
//! program order, so the bits never depend on the host's threads or their timing; the
//! simulated timing never looks at the host at all.
//!
//! Chains: when the products of consecutive `mxu.pop`s are added onto the same rows, the first
//! of them writing (not adding), VMEM writes only their running total ([`super::deferred`]):
//! `((p0 + p1) + p2) + ..`, row by row. Each product of such a chain may be given the one
//! before it ([`chain`]); a thread that has computed a part of it then adds the previous
//! product's total for the same rows (`total = previous total + this part`, the addition the
//! pops make) when that total is ready, while the part is still in its cache. Parts whose
//! previous total was not ready yet, or that were computed before the chain was made, are
//! added when the chain is settled ([`settle_chain`]), in chain order. Either way every element
//! is the same additions in the same order; only which thread makes them depends on timing.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

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
    /// Per part: [`SUM`] once `outs` holds its product, [`TOTAL`] once it holds the chain's
    /// total (this product added to the previous one's total).
    state: Vec<AtomicU8>,
    /// The previous product of a chain, whose totals this one's are added to.
    prev: OnceLock<Arc<Product>>,
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

/// A part's values: its product alone.
const SUM: u8 = 1;
/// A part's values: the chain's total up to this product.
const TOTAL: u8 = 2;

/// `out = prev + out`, element by element (the order the pops add in).
// Written in that order on purpose, rather than as `out += prev`.
#[allow(clippy::assign_op_pattern)]
fn add_to(prev: &[f32], out: &mut [f32]) {
    for (o, p) in out.iter_mut().zip(prev) {
        *o = *p + *o;
    }
}

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
                let state = match self.prev.get() {
                    Some(prev) if prev.total_ready(i) => {
                        let p = prev.outs[i].lock().unwrap_or_else(PoisonError::into_inner);
                        add_to(&p, &mut out);
                        TOTAL
                    }
                    _ => SUM,
                };
                self.state[i].store(state, Ordering::Release);
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

    /// Whether part `i` holds its chain's total: added to the previous total, or first in its
    /// chain. Asked by the next product of the chain, whose `prev` was set after this one's
    /// (both by the interpreter, in program order), so a `prev` still unset here stays unset.
    fn total_ready(&self, i: usize) -> bool {
        match self.state[i].load(Ordering::Acquire) {
            TOTAL => true,
            SUM => self.prev.get().is_none(),
            _ => false,
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
            state: (0..parts).map(|_| AtomicU8::new(0)).collect(),
            prev: OnceLock::new(),
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

    /// Whether these are all `rows` rows of a product still being computed (which can join a
    /// chain).
    pub fn chainable(&self, rows: usize) -> bool {
        matches!(self, Rows::Pending(p) if p.m == rows && p.prev.get().is_none())
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

/// Makes `next` the product after `prev` in a chain (see the [module docs](self)): its values
/// become the total `prev`'s total + its product. Both must be [`Rows::chainable`], of the same
/// rows; returns false (and changes nothing) when they are not, or are split differently.
pub fn chain(prev: &Rows, next: &Rows) -> bool {
    let (Rows::Pending(p), Rows::Pending(q)) = (prev, next) else {
        return false;
    };
    if (p.m, p.rows_per_part, p.parts(), p.w.n()) != (q.m, q.rows_per_part, q.parts(), q.w.n()) {
        return false;
    }
    q.prev.set(p.clone()).is_ok()
}

/// Settles a chain made by [`chain`] (`rows[0]` first): waits for every product, first first
/// (helping with the earliest parts, whose totals the later ones add), makes the additions no
/// thread made, in chain order, and only then settles each (no thread reads a part any more).
/// The last one's values are then the chain's total.
pub fn settle_chain(rows: &mut [&mut Rows]) {
    let products: Vec<Arc<Product>> = rows
        .iter()
        .filter_map(|r| match &**r {
            Rows::Pending(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    debug_assert_eq!(products.len(), rows.len(), "a chain is of pending products");
    for p in &products {
        p.finish();
    }
    for pair in products.windows(2) {
        let (prev, p) = (&pair[0], &pair[1]);
        for i in 0..p.parts() {
            if p.state[i].load(Ordering::Acquire) != TOTAL {
                let mut out = p.outs[i].lock().unwrap_or_else(PoisonError::into_inner);
                let q = prev.outs[i].lock().unwrap_or_else(PoisonError::into_inner);
                add_to(&q, &mut out);
                p.state[i].store(TOTAL, Ordering::Release);
            }
        }
    }
    for r in rows {
        r.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::float::round_bf16;

    fn data(len: usize, seed: u32) -> Vec<f32> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let v = ((x >> 8) as f32 / (1u32 << 24) as f32) * 4.0 - 2.0;
                // Some large values, so that the order of the additions shows in the bits.
                round_bf16(if x >> 29 == 0 { v * 65536.0 } else { v })
            })
            .collect()
    }

    /// Chained products give the bits of adding their products one after another, whenever
    /// the chain is made (while the parts are computed, or after).
    #[test]
    fn chains_add_in_order() {
        let (m, k, n) = (72, 128, 128);
        for late in [false, true] {
            let mut want = vec![0.0f32; m * n];
            let mut rows: Vec<Rows> = (0..5u32)
                .map(|i| {
                    let lhs = data(m * k, 10 + i);
                    let w = PackedWeights::pack(&data(k * n, 20 + i), k, n);
                    let mut s = vec![0.0; m * n];
                    tile_rows(&lhs, k, m, &w, &mut s, Operands::of(&lhs));
                    for (t, v) in want.iter_mut().zip(&s) {
                        *t = if i == 0 { *v } else { *t + *v };
                    }
                    let ops = Operands::of(&lhs);
                    let r = Rows::start(Arc::new(lhs), m, Arc::new(w), ops, &mut |l| vec![0.0; l]);
                    assert!(r.chainable(m), "a pending product");
                    if let (true, Rows::Pending(p)) = (late, &r) {
                        p.finish();
                    }
                    r
                })
                .collect();
            for i in 1..rows.len() {
                assert!(chain(&rows[i - 1], &rows[i]));
            }
            assert!(!chain(&rows[0], &rows[1]), "a product joins one chain");
            let mut refs: Vec<&mut Rows> = rows.iter_mut().collect();
            settle_chain(&mut refs);
            let mut got = Vec::new();
            rows[4].for_runs(0, m, n, |_, v| got.extend_from_slice(v));
            let same = got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "late {late}");
        }
    }
}
