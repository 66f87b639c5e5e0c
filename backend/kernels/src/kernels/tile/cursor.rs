//! The tile loop's state in SMEM: cursors over the loop levels, the DMAs of one tile at a
//! cursor, and the bytes each buffer waits for.
//!
//! Two cursors walk the tiles — the load cursor one tile ahead of the store cursor — each a
//! counter per level, innermost advancing first. A tile's DMAs pick the full or the tail
//! descriptor at run time (the cursor is on the last block or not) and record their bytes in
//! SMEM, where the buffer's next use waits for them.

use tpuemu_isa::ops::CmpOp;
use tpuemu_isa::{Addr, ArgSlot, DmaShape, MemRef, SReg, Sem};

use super::program::{Gen, SCRATCH};
use crate::kernels::{KernelError, sreg};

impl Gen<'_> {
    /// Loads the level counters of a cursor into registers.
    pub(super) fn counters(&mut self, cursor: u32) -> Result<Vec<SReg>, KernelError> {
        let mut regs = Vec::new();
        for l in 0..self.plan.levels.len() {
            let r = sreg(&mut self.pool)?;
            self.e.sld(r, Addr::abs((cursor + 4 * l as u32) as i32));
            regs.push(r);
        }
        Ok(regs)
    }

    /// A register holding 1 when the cursor is on the tail block, else 0 (`None`: no tail).
    fn is_tail(&mut self, cnt: &[SReg]) -> Result<Option<SReg>, KernelError> {
        if self.plan.tail == self.plan.block || self.plan.f == 0 {
            return Ok(None);
        }
        let last = self.plan.levels.len() - 1;
        let r = sreg(&mut self.pool)?;
        let count = self.plan.levels[last].count as i32;
        self.e.scmp(CmpOp::Eq, r, cnt[last], count - 1);
        Ok(Some(r))
    }

    /// `dst` = `full` or `tail` as `is_tail` says.
    fn pick(&mut self, dst: SReg, full: i32, tail: i32, is_tail: Option<SReg>) {
        self.e.smov(dst, full);
        if let Some(t) = is_tail
            && full != tail
        {
            self.e.add_scaled(dst, t, tail - full, SCRATCH);
        }
    }

    /// Byte offset of operand `k`'s tile at the cursor.
    fn offset(&mut self, dst: SReg, k: usize, cnt: &[SReg]) {
        let o = &self.spec.operands[k];
        let esz = o.dtype.size() as i64;
        self.e
            .sld(dst, Addr::abs((self.sm.base_off + 4 * k as u32) as i32));
        for (l, lv) in self.plan.levels.iter().enumerate() {
            let step = o.strides[lv.dim] as i64 * lv.step as i64 * esz;
            if step != 0 {
                self.e.add_scaled(dst, cnt[l], step as i32, SCRATCH);
            }
        }
    }

    /// DMAs of every input (or output) operand for the tile at a cursor, on the semaphore of
    /// buffers `parity` (inputs: 0, 1; outputs: 2, 3).
    pub(super) fn transfers(
        &mut self,
        cursor: u32,
        parity: usize,
        outputs: bool,
    ) -> Result<(), KernelError> {
        let cnt = self.counters(cursor)?;
        let tail = self.is_tail(&cnt)?;
        let (off, desc) = (sreg(&mut self.pool)?, sreg(&mut self.pool)?);
        let range: Vec<usize> = (0..self.spec.operands.len())
            .filter(|k| self.spec.operands[*k].output == outputs)
            .collect();
        let (mut full_bytes, mut tail_bytes) = (0i64, 0i64);
        for k in range {
            self.offset(off, k, &cnt);
            let (df, bf) = self.desc_full[k];
            let (dt, bt) = self.desc_tail[k];
            full_bytes += bf as i64;
            tail_bytes += bt as i64;
            self.pick(desc, df as i32, dt as i32, tail);
            let vm = self.e.konst(self.bufs[k][parity]);
            let hbm = MemRef::hbm(ArgSlot::n(k as u8), off);
            let (dst, src) = if outputs {
                (hbm, MemRef::vmem(vm))
            } else {
                (MemRef::vmem(vm), hbm)
            };
            let sem = Sem::n(parity as u8 + if outputs { 2 } else { 0 });
            self.e.dma(dst, src, DmaShape::Desc(desc), sem);
        }
        // Record what the buffer waits for.
        let pend = if outputs {
            self.sm.pend_out
        } else {
            self.sm.pend_in
        } + 4 * parity as u32;
        self.pick(off, full_bytes as i32, tail_bytes as i32, tail);
        self.e.sst(off, Addr::abs(pend as i32));
        for r in cnt.into_iter().chain([off, desc]).chain(tail) {
            self.pool.give(r);
        }
        Ok(())
    }

    /// Advances a cursor by one tile (innermost level first).
    pub(super) fn advance(&mut self, cursor: u32) -> Result<(), KernelError> {
        let (c, t) = (sreg(&mut self.pool)?, sreg(&mut self.pool)?);
        let done = self.e.label();
        for (l, lv) in self.plan.levels.clone().iter().enumerate().rev() {
            let at = Addr::abs((cursor + 4 * l as u32) as i32);
            self.e
                .sld(c, at)
                .sadd(c, c, 1)
                .scmp(CmpOp::Lt, t, c, lv.count as i32);
            let wrap = self.e.label();
            self.e.brz(t, wrap).sst(c, at).br(done);
            self.e.bind_join(wrap);
            self.e.sst(SReg::ZERO, at);
        }
        self.e.bind_join(done);
        self.pool.give(c);
        self.pool.give(t);
        Ok(())
    }

    /// Waits for the bytes recorded at SMEM `addr` on semaphore `sem`, and clears them.
    pub(super) fn wait_pending(&mut self, addr: u32, sem: u8) -> Result<(), KernelError> {
        let r = sreg(&mut self.pool)?;
        let at = Addr::abs(addr as i32);
        self.e
            .sld(r, at)
            .sem_wait(Sem::n(sem), r)
            .sst(SReg::ZERO, at);
        self.pool.give(r);
        Ok(())
    }

    /// A new register with the flat index of the tile's first element (`end` = all dims) or, in
    /// the rows layout, of its first row (`end` = the outer dims), from the store cursor.
    pub(super) fn tile_flat_index(&mut self, end: usize) -> Result<SReg, KernelError> {
        let cnt = self.counters(self.sm.store_cnt)?;
        let flat = sreg(&mut self.pool)?;
        self.e.smov(flat, 0);
        for (l, lv) in self.plan.levels.clone().iter().enumerate() {
            let inner: i64 = self.spec.shape[(lv.dim + 1).min(end)..end]
                .iter()
                .map(|d| *d as i64)
                .product();
            let step = inner * lv.step as i64;
            if step != 0 {
                self.e.add_scaled(flat, cnt[l], step as i32, SCRATCH);
            }
        }
        for r in cnt {
            self.pool.give(r);
        }
        Ok(flat)
    }
}
