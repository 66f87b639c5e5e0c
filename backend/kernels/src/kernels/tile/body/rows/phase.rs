//! One phase of a group: the loop over the row's column chunks that accumulates the phase's
//! reductions and stores its full outputs, then the reductions' finish and the next phase's
//! per-row values.
//!
//! Chunks per loop iteration: as many copies of the chunk body as the free vector registers
//! hold (each copy needs its values and a column index), at most [`MAX_UNROLL`]; leftover
//! chunks follow straight, and a row whose length is not a multiple of 128 ends with one masked
//! chunk.

use tpuemu_isa::SReg;
use tpuemu_isa::ops::{IotaKind, VBinOp, VType};

use super::super::Ctx;
use super::{Phase, Rows, TAIL_MASK, chunk, pipeline, reduce};
use crate::codegen::RegPool;
use crate::ir::{POp, PRef};
use crate::kernels::{KernelError, sreg};

/// Most chunks per loop iteration.
const MAX_UNROLL: u32 = 8;

impl Rows {
    /// Emits phase `p` (`test` is the scalar register loop tests may use).
    pub(super) fn phase(
        &self,
        cx: &mut Ctx,
        pool: &mut RegPool,
        test: SReg,
        p: u32,
    ) -> Result<(), KernelError> {
        let prog = cx.prog;
        let reds: Vec<PRef> = prog
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_)))
            .filter(|(i, _)| self.ph[*i] == p + 1)
            .map(|(i, _)| i as PRef)
            .collect();
        let full_outs: Vec<(usize, PRef)> = prog
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| !prog.node(**o).per_row && self.ph[**o as usize] == p)
            .map(|(k, o)| (k, *o))
            .collect();
        // Nothing to loop over: this phase's per-row values came with the previous phase's
        // end, and no reduction makes values of the next one.
        if reds.is_empty() && full_outs.is_empty() {
            return Ok(());
        }
        // The per-row values' comparison masks would sit unused through the chunk loop, whose
        // selects and copies need masks of their own.
        cx.va.forget_masks();
        let accs = reduce::init(cx, &reds)?;
        // The lane coordinate only where this phase's chunks read a coordinate (a one-hot's
        // compare runs in one phase of three).
        let need = chunk::needs(prog, &reds, &full_outs);
        let uses_index = prog
            .nodes
            .iter()
            .zip(&need)
            .any(|(n, needed)| *needed && matches!(n.op, POp::Index(_)));
        let colidx = if uses_index || accs.iter().any(|a| a.idx.is_some()) {
            let v = cx.va.take()?;
            cx.e.viota(IotaKind::Lane, v);
            Some(v)
        } else {
            None
        };
        // The element sizes whose chunk address this phase's loads and stores use: those
        // registers start at the group's offset and advance with the chunks; the others are
        // left alone.
        let mut sizes: Vec<u32> = prog
            .nodes
            .iter()
            .zip(&need)
            .filter_map(|(n, needed)| match n.op {
                POp::Input(k) if *needed => Some(k as usize),
                _ => None,
            })
            .chain(full_outs.iter().map(|(k, _)| cx.inputs + k))
            .map(|k| cx.ops[k].dtype.size() as u32)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for sr in self.sizes.iter().filter(|sr| sizes.contains(&sr.esz)) {
            cx.e.sadd(sr.chunk, sr.full, 0);
        }
        // Sums, maxima and minima keep one accumulator per copy (independent chains the
        // in-order core can overlap), combined in copy order after the loop.
        let n_multi = reds.iter().filter(|r| reduce::splits(prog, **r)).count() as u32;
        // Per copy: its values at their peak, its column index and its accumulators; the two
        // temporaries a node's emission may take are given back before the next node, so
        // the copies share them.
        let held = cx.va.free_count().saturating_sub(2);
        let peak = chunk::peak(prog, &reds, &full_outs) - 2;
        let per_copy = peak + 1 + n_multi;
        let plain = (held / per_copy)
            .min(MAX_UNROLL)
            .min(self.full_chunks())
            .max(1);
        // Pipelined (worth it from two loop trips), a copy also holds its crossing values and
        // two column indices, and may hold the previous trip's late values beside this trip's
        // early ones: from the most copies that count allows down, each try is emitted and
        // undone if the registers run out, and the plain loop is the last resort.
        let mut tries: Vec<(u32, Option<pipeline::Pipe>)> = Vec::new();
        if let Some(pp) = pipeline::plan(prog, &reds, &full_outs) {
            let per_copy = peak + pp.crossing.len() as u32 + 2 + n_multi;
            let most = (held / per_copy).min(MAX_UNROLL).min(self.full_chunks());
            for c in (1..=most)
                .rev()
                .filter(|c| self.full_chunks() / c >= 2)
                .take(4)
            {
                tries.push((c, Some(pp.clone())));
            }
        }
        tries.push((plain, None));
        let n_tries = tries.len();
        let mut done = None;
        for (k, (unroll, pipe)) in tries.into_iter().enumerate() {
            let last = k + 1 == n_tries;
            let saved = (!last).then(|| Saved::take(cx, pool));
            let mut accs = accs.clone();
            let tried = reduce::add_copies(cx, &mut accs, unroll).and_then(|()| {
                let ph = Phase {
                    p,
                    sizes: sizes.clone(),
                    reds: reds.clone(),
                    full_outs: full_outs.clone(),
                    accs,
                    colidx,
                    pipe,
                };
                self.chunk_loop(cx, pool, test, &ph, unroll).map(|()| ph)
            });
            match (tried, saved) {
                (Ok(ph), _) => {
                    done = Some(ph);
                    break;
                }
                (Err(KernelError::Unsupported(_)), Some(s)) => s.restore(cx, pool),
                (Err(e), _) => return Err(e),
            }
        }
        let ph = done.expect("the last try returns");
        reduce::finish(cx, ph.accs)?;
        if let Some(ci) = colidx {
            cx.va.give(ci);
        }
        self.per_row_step(cx, p + 1)
    }

    /// Chunks of 128 the row fills.
    fn full_chunks(&self) -> u32 {
        if self.tail < 128 {
            self.nchunks - 1
        } else {
            self.nchunks
        }
    }

    /// Every chunk of the row: `unroll` per loop iteration, the leftover ones, the masked one.
    fn chunk_loop(
        &self,
        cx: &mut Ctx,
        pool: &mut RegPool,
        test: SReg,
        ph: &Phase,
        unroll: u32,
    ) -> Result<(), KernelError> {
        let full_chunks = self.full_chunks();
        let iterations = full_chunks / unroll;
        if let Some(pipe) = ph.pipe.as_ref().filter(|_| iterations >= 2) {
            let mut regs = Vec::new();
            for _ in 0..unroll {
                let mut mine = Vec::new();
                for _ in &pipe.crossing {
                    mine.push(cx.va.take()?);
                }
                regs.push(mine);
            }
            pipeline::trip(cx, self, ph, pipe, &regs, (false, true))?;
            self.advance(cx, ph, unroll);
            let ccount = sreg(pool)?;
            let l =
                cx.e.begin_loop(ccount, test, iterations - 1, 1)
                    .straight_if_once();
            let l = l.tested_early(cx.e);
            pipeline::trip(cx, self, ph, pipe, &regs, (true, true))?;
            self.advance(cx, ph, unroll);
            cx.e.end_loop(l);
            pool.give(ccount);
            pipeline::trip(cx, self, ph, pipe, &regs, (true, false))?;
            for v in regs.into_iter().flatten() {
                cx.va.give(v);
            }
        } else if iterations > 0 {
            let ccount = sreg(pool)?;
            let l =
                cx.e.begin_loop(ccount, test, iterations, 1)
                    .straight_if_once();
            let l = l.tested_early(cx.e);
            self.chunks(cx, ph, unroll, false)?;
            cx.e.end_loop(l);
            pool.give(ccount);
        }
        if !full_chunks.is_multiple_of(unroll) {
            self.chunks(cx, ph, full_chunks % unroll, false)?;
        }
        if self.tail < 128 {
            self.chunks(cx, ph, 1, true)?;
        }
        Ok(())
    }

    /// `copies` chunks, then the chunk addresses (and the column index) past them.
    fn chunks(
        &self,
        cx: &mut Ctx,
        ph: &Phase,
        copies: u32,
        masked: bool,
    ) -> Result<(), KernelError> {
        chunk::body(cx, self, ph, masked.then_some(TAIL_MASK), copies)?;
        self.advance(cx, ph, copies);
        Ok(())
    }

    /// The chunk addresses (and the column index) past `copies` chunks.
    fn advance(&self, cx: &mut Ctx, ph: &Phase, copies: u32) {
        for sr in self.sizes.iter().filter(|sr| ph.sizes.contains(&sr.esz)) {
            cx.e.sadd(sr.chunk, sr.chunk, (128 * copies * sr.esz) as i32);
        }
        if let Some(ci) = ph.colidx {
            cx.e.vbin(VBinOp::Add, VType::I32, ci, ci, 128 * copies);
        }
    }
}

/// What a phase's chunk loop changes, kept to undo a try whose registers ran out.
struct Saved {
    e: crate::codegen::Emitter,
    va: crate::kernels::tile::vexpr::VAlloc,
    regs: std::collections::HashMap<PRef, tpuemu_isa::VReg>,
    refs: std::collections::HashMap<u8, u32>,
    pinned: Vec<PRef>,
    pool: RegPool,
}

impl Saved {
    fn take(cx: &Ctx, pool: &RegPool) -> Self {
        Saved {
            e: cx.e.clone(),
            va: cx.va.clone(),
            regs: cx.regs.clone(),
            refs: cx.refs.clone(),
            pinned: cx.pinned.clone(),
            pool: pool.clone(),
        }
    }

    fn restore(self, cx: &mut Ctx, pool: &mut RegPool) {
        *cx.e = self.e;
        cx.va = self.va;
        cx.regs = self.regs;
        cx.refs = self.refs;
        cx.pinned = self.pinned;
        cx.forced = None;
        *pool = self.pool;
    }
}
