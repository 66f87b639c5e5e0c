//! The tile kernel of a single tile: straight-line code, no loop.
//!
//! When the whole operation fits one tile (every small eager operator: a [8, 128] add is one
//! tile), the double-buffered loop of [`super::program`] would run its prologue, cursors, loop
//! tests and pending-byte bookkeeping around the DMAs and the body (a [8, 128] add: 67
//! instructions run; straight-line, 22 — `tpuemu run` of both programs). A compiler emits
//! straight-line code for a loop of one trip; so does this:
//! each operand's byte offset straight into a register, the input DMAs on one semaphore, one
//! wait for their bytes (a constant), the body, the output DMAs, one wait. Same DMAs (the same
//! descriptor the loop would pick for its only tile), same body, same results.

use tpuemu_isa::{Addr, ArgSlot, DmaShape, MemRef, Sem};

use super::program::Gen;
use crate::codegen::BufferArgs;
use crate::kernels::{KernelError, sreg};

impl Gen<'_> {
    /// The program of a single tile (`plan.tiles() == 1`), after the argument words.
    pub(super) fn single(&mut self, args: &BufferArgs, name: &str) -> Result<(), KernelError> {
        // Coordinates (`Index` nodes) read the store cursor: all zero for the only tile.
        if super::program::uses_index(self.spec) || super::program::uses_outer_index(self.spec) {
            for l in 0..self.plan.levels.len() as u32 {
                self.e.sst(
                    tpuemu_isa::SReg::ZERO,
                    Addr::abs((self.sm.store_cnt + 4 * l) as i32),
                );
            }
        }
        self.e.mark_begin(name);
        let inputs = self.single_transfers(args, false)?;
        self.e.sem_wait(Sem::n(0), inputs);
        self.compute(0)?;
        self.e.forget_constants();
        let outputs = self.single_transfers(args, true)?;
        self.e.sem_wait(Sem::n(2), outputs);
        self.e.mark_end();
        Ok(())
    }

    /// The DMAs of every input (or output) operand for the only tile, on semaphore 0 (outputs:
    /// 2); returns the bytes they move. The only tile is the last: its descriptor is the
    /// tail's when the plan has one (as the loop's `is_tail` picks it).
    fn single_transfers(&mut self, args: &BufferArgs, outputs: bool) -> Result<i32, KernelError> {
        let tail = !(self.plan.tail == self.plan.block || self.plan.f == 0);
        let (off, desc) = (sreg(&mut self.pool)?, sreg(&mut self.pool)?);
        let mut bytes = 0i64;
        let mut last_desc = None;
        for k in 0..self.spec.operands.len() {
            let o = &self.spec.operands[k];
            if o.output != outputs {
                continue;
            }
            let esz = o.dtype.size() as u32;
            let (d, b) = if tail {
                self.desc_tail[k]
            } else {
                self.desc_full[k]
            };
            bytes += b as i64;
            self.e.byte_offset(off, args, k, esz);
            if last_desc != Some(d) {
                self.e.smov(desc, d as i32);
                last_desc = Some(d);
            }
            let vm = self.e.konst(self.bufs[k][0]);
            let hbm = MemRef::hbm(ArgSlot::n(k as u8), off);
            let (dst, src) = if outputs {
                (hbm, MemRef::vmem(vm))
            } else {
                (MemRef::vmem(vm), hbm)
            };
            self.e.dma(
                dst,
                src,
                DmaShape::Desc(desc),
                Sem::n(if outputs { 2 } else { 0 }),
            );
        }
        self.pool.give(off);
        self.pool.give(desc);
        i32::try_from(bytes).map_err(|_| KernelError::TooLarge("a tile of over 2 GiB".into()))
    }
}
