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

use std::collections::VecDeque;

use super::mxu_jobs::Rows;
use super::mxu_values::write_rows;
use crate::memory::LocalMem;

/// Pops queued at most.
const MAX_POPS: usize = 32;
/// Result bytes queued at most.
const MAX_BYTES: usize = 16 << 20;

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

/// VMEM: the bytes and the pops not yet written into them.
#[derive(Debug)]
pub(crate) struct Vmem {
    mem: LocalMem,
    pops: VecDeque<(usize, usize, Pop)>,
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
        self.lo = self.lo.min(lo);
        self.hi = self.hi.max(hi);
        self.bytes += pop.rows() * pop.n * 4;
        self.pops.push_back((lo, hi, pop));
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
        if let Some(last) = self.pops.iter().rposition(|(a, b, _)| lo < *b && *a < hi) {
            for _ in 0..=last {
                self.write_oldest();
            }
        }
    }

    fn write_oldest(&mut self) {
        let Some((_, _, pop)) = self.pops.pop_front() else {
            return;
        };
        self.bytes -= pop.rows() * pop.n * 4;
        if self.pops.is_empty() {
            (self.lo, self.hi, self.bytes) = (usize::MAX, 0, 0);
        }
        self.finish(pop);
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
                if v.capacity() > 0 && self.spare.len() < 64 {
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
