//! A core's VMEM with the matrix units' result pops deferred until their bytes are next touched.
//!
//! An `mxu.pop` writes (or adds) a product's rows into VMEM. Functionally the write happens in
//! program order; this memory keeps it queued instead, so that the interpreter runs on while
//! the product is still being computed beside it (see [`super::mxu_jobs`]). Every other access
//! names the bytes it touches ([`Vmem::read`], [`Vmem::bytes_for`]): before it, every queued pop
//! up to the last one whose bytes overlap is written, in program order. Pops are only ever
//! written in the order they were issued and before anything else reads or writes their bytes,
//! so every access sees exactly the bytes it would have seen had each pop written at once: the
//! same bits, whatever the host's threads do. The simulated timing is computed at issue as
//! before and never looks at this queue.
//!
//! The queue is bounded (pops and result bytes); past the bound the oldest pop is written.
//!
//! An accumulating pop onto exactly the rows of the latest queued pop that may touch its bytes
//! joins it (the pops queued after that one touch other bytes: outside its span, or in other
//! columns of the same stride): when written, each
//! row is read once, the pops' values are added to it one after another in program order (the
//! same additions, in the same order, as writing each pop in turn) and it is written once. A
//! matmul over `K` in tiles pops `K / 128` times onto the same accumulator; this reads and
//! writes the accumulator once instead of once per tile. When the first of the joined pops
//! writes (does not add) and each takes a whole product still being computed, the products are
//! chained ([`super::mxu_jobs::chain`]): the threads computing them add them up as they go, and
//! only the total is left to write.

use std::collections::VecDeque;

use super::mxu_jobs::{Rows, chain, settle_chain};
use super::mxu_values::write_rows;
use crate::memory::LocalMem;

/// Pops queued at most.
const MAX_POPS: usize = 32;
/// Result bytes queued at most.
const MAX_BYTES: usize = 16 << 20;
/// Result buffers of written pops kept for reuse at most (joined pops free many at once).
const SPARE_BUFFERS: usize = 256;
/// Products chained at most (each holds the one before it until the chain is written).
const MAX_CHAIN: usize = 64;

/// Rows `from .. from + take` of a result block.
#[derive(Debug)]
pub(crate) struct Piece {
    pub rows: Rows,
    pub from: usize,
    pub take: usize,
}

/// One `mxu.pop`: its pieces written to consecutive rows from `base`, `stride` bytes apart, `n`
/// f32 values each, added to what is there when `acc`.
#[derive(Debug)]
pub(crate) struct Pop {
    pub base: usize,
    pub stride: usize,
    pub n: usize,
    pub acc: bool,
    pub pieces: Vec<Piece>,
}

impl Pop {
    fn rows(&self) -> usize {
        self.pieces.iter().map(|p| p.take).sum()
    }

    /// The rows of a pop that takes one whole product still being computed.
    fn whole_product(pieces: &[Piece]) -> Option<&Rows> {
        match pieces {
            [p] if p.from == 0 && p.rows.chainable(p.take) => Some(&p.rows),
            _ => None,
        }
    }

    /// Whether the two pops' rows lie in columns of the same stride that do not meet, so that
    /// no byte is written by both (matrix units popping side by side into one accumulator).
    fn columns_apart(&self, other: &Pop) -> bool {
        let (a, b) = (self.n * 4, other.n * 4);
        if self.stride != other.stride || a > self.stride || b > self.stride {
            return false;
        }
        let off = (other.base as i64 - self.base as i64).rem_euclid(self.stride as i64) as usize;
        off >= a && off + b <= self.stride
    }

    /// The bytes written: `[lo, hi)`.
    fn span(&self) -> (usize, usize) {
        let rows = self.rows();
        let hi = match rows {
            0 => self.base,
            r => self.base + (r - 1) * self.stride + self.n * 4,
        };
        (self.base, hi)
    }
}

/// A queued pop, the accumulating pops onto the same rows that joined it (in program order),
/// and the result bytes they hold.
#[derive(Debug)]
struct Queued {
    lo: usize,
    hi: usize,
    pop: Pop,
    joined: Vec<Vec<Piece>>,
    bytes: usize,
    /// Pops, from the first, whose products are chained (see [`chain`]); 0 when the first pop
    /// adds to VMEM or is not one whole product.
    chained: usize,
}

impl Queued {
    /// Joins an accumulating pop onto the same rows, chaining its product to the last one
    /// when the chain so far covers every pop.
    fn join(&mut self, pieces: Vec<Piece>) {
        let all = 1 + self.joined.len();
        if self.chained == all
            && all < MAX_CHAIN
            && let [prev] = &self.joined.last().unwrap_or(&self.pop.pieces)[..]
            && let Some(next) = Pop::whole_product(&pieces)
            && chain(&prev.rows, next)
        {
            self.chained += 1;
        }
        self.joined.push(pieces);
    }
}

/// VMEM: the bytes and the pops not yet written into them.
#[derive(Debug)]
pub(crate) struct Vmem {
    mem: LocalMem,
    pops: VecDeque<Queued>,
    /// Bounds of every queued pop's bytes (while any is queued).
    lo: usize,
    hi: usize,
    /// Result bytes queued.
    bytes: usize,
    /// Result buffers of written pops, for the matrix units to reuse.
    spare: Vec<Vec<f32>>,
}

impl Vmem {
    /// A VMEM of `size` bytes; nothing allocated yet.
    pub fn new(size: u64) -> Self {
        Vmem {
            mem: LocalMem::new("VMEM", size),
            pops: VecDeque::new(),
            lo: usize::MAX,
            hi: 0,
            bytes: 0,
            spare: Vec::new(),
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.mem.size()
    }

    /// Whether the range `[start, end)` lies inside.
    pub fn contains(&self, start: i64, end: i64) -> bool {
        self.mem.contains(start, end)
    }

    /// The bytes, to read those in `[lo, hi)`.
    pub fn read(&mut self, lo: usize, hi: usize) -> &[u8] {
        self.settle(lo, hi);
        self.mem.view()
    }

    /// The bytes, to write (or read and write) those in `[lo, hi)`.
    pub fn bytes_for(&mut self, lo: usize, hi: usize) -> &mut [u8] {
        self.settle(lo, hi);
        self.mem.bytes_for(lo, hi)
    }

    /// Whether `[lo, hi)` is watched and nothing has written it since the watch began
    /// (writing any queued pop onto it first).
    pub fn unwritten(&mut self, lo: usize, hi: usize) -> bool {
        self.settle(lo, hi);
        self.mem.unwritten(lo, hi)
    }

    /// Starts watching `[lo, hi)` for writes (see [`LocalMem::watch`]).
    pub fn watch(&mut self, lo: usize, hi: usize) {
        self.mem.watch(lo, hi);
    }

    /// Queues a pop (its bytes were checked to lie inside), writing the oldest ones when the
    /// queue is full.
    pub fn push_pop(&mut self, pop: Pop) {
        let (lo, hi) = pop.span();
        if lo == hi {
            self.finish(pop);
            return;
        }
        let bytes = pop.rows() * pop.n * 4;
        self.bytes += bytes;
        // The latest queued pop touching these bytes: the ones after it touch others, so adding
        // this one's values with it changes no byte any of them writes.
        let latest = self
            .pops
            .iter_mut()
            .rev()
            .find(|q| lo < q.hi && q.lo < hi && !q.pop.columns_apart(&pop));
        if let Some(last) = latest
            && pop.acc
            && (last.lo, last.hi, last.pop.stride, last.pop.n) == (lo, hi, pop.stride, pop.n)
            && last.pop.rows() == pop.rows()
        {
            last.join(pop.pieces);
            last.bytes += bytes;
        } else {
            self.lo = self.lo.min(lo);
            self.hi = self.hi.max(hi);
            let chained = usize::from(!pop.acc && Pop::whole_product(&pop.pieces).is_some());
            self.pops.push_back(Queued {
                lo,
                hi,
                pop,
                joined: Vec::new(),
                bytes,
                chained,
            });
        }
        while self.pops.len() > MAX_POPS || (self.bytes > MAX_BYTES && self.pops.len() > 1) {
            self.write_oldest();
        }
    }

    /// Writes every queued pop up to the last one touching `[lo, hi)`.
    #[inline]
    fn settle(&mut self, lo: usize, hi: usize) {
        if self.pops.is_empty() || hi <= self.lo || self.hi <= lo || lo == hi {
            return;
        }
        if let Some(last) = self.pops.iter().rposition(|q| lo < q.hi && q.lo < hi) {
            for _ in 0..=last {
                self.write_oldest();
            }
        }
    }

    fn write_oldest(&mut self) {
        let Some(q) = self.pops.pop_front() else {
            return;
        };
        self.bytes -= q.bytes;
        if self.pops.is_empty() {
            (self.lo, self.hi, self.bytes) = (usize::MAX, 0, 0);
        }
        if q.joined.is_empty() {
            self.finish(q.pop);
        } else {
            self.finish_joined(q.pop, q.joined, q.chained);
        }
    }

    /// Writes a pop and the accumulating pops that joined it: row by row, the first pop's
    /// values (added to the row when it accumulates), then each joined pop's added in turn.
    /// The first `chained` pops' products are chained: the last one's values are their total.
    fn finish_joined(&mut self, pop: Pop, joined: Vec<Vec<Piece>>, chained: usize) {
        let (lo, hi) = pop.span();
        let (base, stride, n, rows) = (pop.base, pop.stride, pop.n, pop.rows());
        let mut all = vec![pop.pieces];
        all.extend(joined);
        if chained > 1 {
            let mut chain: Vec<&mut Rows> = all[..chained]
                .iter_mut()
                .map(|pieces| &mut pieces[0].rows)
                .collect();
            settle_chain(&mut chain);
        }
        for pieces in &mut all {
            for p in pieces.iter_mut() {
                p.rows.settle();
            }
        }
        // Per pop, per row: its values (the chain's total standing for the chained pops, the
        // first of which writes).
        let skip = chained.saturating_sub(1);
        let sources: Vec<Vec<&[f32]>> = all[skip..]
            .iter()
            .map(|pieces| {
                let mut v = Vec::with_capacity(rows);
                for p in pieces.iter().filter(|p| p.take > 0) {
                    p.rows.for_runs(p.from, p.take, n, |_, vals| {
                        v.extend(vals.chunks_exact(n));
                    });
                }
                v
            })
            .collect();
        let bytes = self.mem.bytes_for(lo, hi);
        let mut row = vec![0.0f32; n];
        for r in 0..rows {
            let dst = &mut bytes[base + r * stride..base + r * stride + n * 4];
            let dst = dst.as_chunks_mut::<4>().0;
            if pop.acc {
                for ((x, d), v) in row.iter_mut().zip(dst.iter()).zip(sources[0][r]) {
                    *x = f32::from_le_bytes(*d) + v;
                }
            } else {
                row.copy_from_slice(sources[0][r]);
            }
            for src in &sources[1..] {
                for (x, v) in row.iter_mut().zip(src[r]) {
                    *x += v;
                }
            }
            for (d, x) in dst.iter_mut().zip(&row) {
                *d = x.to_le_bytes();
            }
        }
        drop(sources);
        for pieces in all {
            for p in pieces {
                for v in p.rows.into_buffers() {
                    if v.capacity() > 0 && self.spare.len() < SPARE_BUFFERS {
                        self.spare.push(v);
                    }
                }
            }
        }
    }

    /// Writes one pop's rows (waiting for its products).
    fn finish(&mut self, pop: Pop) {
        let (lo, hi) = pop.span();
        let Pop {
            base,
            stride,
            n,
            acc,
            pieces,
        } = pop;
        let mut done = 0usize;
        for mut p in pieces {
            if p.take > 0 {
                p.rows.settle();
                let bytes = self.mem.bytes_for(lo, hi);
                let (from, take) = (p.from, p.take);
                p.rows.for_runs(from, take, n, |r, vals| {
                    let at = base + (done + r - from) * stride;
                    write_rows(bytes, at, stride, vals, (vals.len() / n, n), acc);
                });
                done += take;
            }
            for v in p.rows.into_buffers() {
                if v.capacity() > 0 && self.spare.len() < SPARE_BUFFERS {
                    self.spare.push(v);
                }
            }
        }
    }

    /// Result buffers freed by written pops.
    pub fn take_spare(&mut self) -> Option<Vec<f32>> {
        self.spare.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pop of `rows` rows of `n` values at `base`, `stride` apart.
    fn pop(base: usize, stride: usize, n: usize, acc: bool, vals: Vec<f32>) -> Pop {
        let take = vals.len() / n;
        Pop {
            base,
            stride,
            n,
            acc,
            pieces: vec![Piece {
                rows: Rows::Ready(vals),
                from: 0,
                take,
            }],
        }
    }

    #[test]
    fn joined_pops_write_the_bits_of_pops_written_one_by_one() {
        let (rows, n, stride, base) = (5, 7, 64, 12);
        let special = [f32::NAN, -0.0, f32::INFINITY, 1e38, -1e38, 1e-45, 3.0];
        let mut x = 11u32;
        let mut next = || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            match x >> 28 {
                0 => special[(x >> 8) as usize % special.len()],
                _ => f32::from_bits(0x3800_0000 + (x >> 8) % 0x0f00_0000) - 1.0,
            }
        };
        let pops: Vec<(bool, Vec<f32>)> = (0..6)
            .map(|i| (i != 0 && i != 3, (0..rows * n).map(|_| next()).collect()))
            .collect();
        let hi = base + (rows - 1) * stride + n * 4;
        // A second accumulator in the columns beside the first's, its pops between the first's.
        let base2 = base + n * 4 + 4;
        let hi2 = base2 + (rows - 1) * stride + n * 4;
        let start: Vec<u8> = (0..hi2 + 8).map(|i| (i * 37 % 251) as u8).collect();
        let mut joined = Vmem::new(512);
        let mut one_by_one = Vmem::new(512);
        for v in [&mut joined, &mut one_by_one] {
            v.bytes_for(0, start.len())[..start.len()].copy_from_slice(&start);
        }
        for (acc, vals) in &pops {
            for (b, h) in [(base, hi), (base2, hi2)] {
                joined.push_pop(pop(b, stride, n, *acc, vals.clone()));
                one_by_one.push_pop(pop(b, stride, n, *acc, vals.clone()));
                let _ = one_by_one.read(b, h);
            }
        }
        assert_eq!(
            joined.pops.len(),
            4,
            "the accumulating pops joined the ones before"
        );
        // (`read` gives the whole memory.)
        let want = one_by_one.read(0, start.len())[..start.len()].to_vec();
        assert_eq!(&joined.read(0, start.len())[..start.len()], &want[..]);
    }
}
