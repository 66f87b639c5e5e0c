//! Index-add (`table[index[i], :] += rows[i, :]`, the backward of `embedding` and
//! `index_select`) with the table in VMEM, and index-put, which combines each row with its
//! table row by another operation ([`Combine`]: copy, multiply, maximum, minimum).
//!
//! The table is processed in blocks of rows that fit half of VMEM (one block when it fits, as
//! an embedding table usually does). For each block: the block is loaded into VMEM; the
//! indices and source rows stream in chunks (one DMA each, double-buffered: the next chunk
//! loads while this one is added); the vector unit adds every source row whose index falls in
//! the block into its table row, in index order (so repeated indices accumulate in order, each
//! addition rounded to the table's dtype, deterministically); the block goes back to HBM. A
//! table that starts as zeros (`zero_table`: a fused zero fill) is zeroed in VMEM by vector
//! stores instead of being read, so it crosses HBM once; when the indices touch few of its rows,
//! zeros go to HBM while the rows are added and only the touched rows follow ([`Sparse`]). With
//! bounds checking, an index outside the table makes a DMA read from outside the table, which
//! faults with the table's bounds.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::dma::DmaDescriptor;
use tpuemu_isa::ops::{CmpOp, IotaKind, VBinOp, VType};
use tpuemu_isa::{Addr, ArgSlot, ChipInfo, DmaShape, MReg, MemRef, Program, SReg, Sem, VReg};

use super::KernelError;
use super::gather::GatherSpec;
use crate::codegen::{BufferArgs, Emitter, PingPong, hbm_vmem_desc};
use crate::dtype::DType;
use crate::ir::Combine;

/// Most source rows per chunk.
const MAX_CHUNK: u32 = 512;

/// A 2-D copy of `rows` rows of `row_bytes`, HBM row stride `hbm_stride` bytes, dense in VMEM.
fn rows_desc(rows: u32, row_bytes: u32, hbm_stride: u32, to_vmem: bool) -> DmaDescriptor {
    hbm_vmem_desc(
        row_bytes,
        &[(rows, hbm_stride as i64, row_bytes as i64)],
        to_vmem,
    )
}

/// Builds the kernel. Arguments: `table`, `index`, `rows` buffers, then their storage offsets
/// in elements.
pub fn build(spec: &GatherSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    let mut e = Emitter::new(name);
    let args = e.buffers_with_offsets(["table", "index", "rows"]);
    if spec.count == 0 || spec.row_len == 0 || spec.table_rows == 0 {
        return Ok(e.finish()?);
    }
    let k = Kernel::new(spec, chip, &mut e, args)?;
    k.prologue(&mut e);
    for blk in 0..k.blocks {
        k.block(&mut e, blk)?;
    }
    Ok(e.finish()?)
}

// Registers (16.. hold cached constants).
const T_BASE: SReg = SReg::n(1);
const I_BASE: SReg = SReg::n(2);
const R_BASE: SReg = SReg::n(3);
/// The source row within the chunk.
const J: SReg = SReg::n(4);
/// Its index, then its row within the block.
const IDX: SReg = SReg::n(5);
const T: SReg = SReg::n(6);
/// VMEM byte offsets of the table row and of the source row.
const TA: SReg = SReg::n(7);
const SA: SReg = SReg::n(8);
/// An HBM byte offset.
const ADDR: SReg = SReg::n(9);
/// Sparse write-back: rows recorded so far, a mark, the list position.
const NU: SReg = SReg::n(10);
const MARK: SReg = SReg::n(11);
const K: SReg = SReg::n(12);
const VA: VReg = VReg::n(1);
const VB: VReg = VReg::n(2);
const IOTA: VReg = VReg::n(3);
/// Valid elements of a row's last vector register.
const TAIL_MASK: MReg = MReg::n(1);
/// Valid elements of the last store that zeroes a table block.
const ZERO_MASK: MReg = MReg::n(2);

/// An HBM operand: its slot, the register holding its byte offset, and an offset from there.
struct Hbm {
    slot: ArgSlot,
    base: SReg,
    off: i64,
}

/// The layout of one index-add kernel.
struct Kernel<'a> {
    spec: &'a GatherSpec,
    args: BufferArgs,
    esz: u32,
    isz: u32,
    row_bytes: u32,
    /// Source rows per chunk.
    chunk: u32,
    nchunks: u32,
    /// VMEM byte address of the table block.
    t_vmem: u32,
    block_rows: u32,
    blocks: u32,
    /// SMEM byte addresses of the two index chunks.
    idx_smem: [u32; 2],
    /// Vector registers per row, and elements in the last one.
    nv: u32,
    tail: u32,
    /// A zero table written back sparsely (see [`Sparse`]).
    sparse: Option<Sparse>,
}

/// A zero table's sparse write-back, when few rows are touched: while the vector unit zeroes
/// the table in VMEM and adds the rows, a DMA writes zeros over the whole table in HBM (from a
/// small zeroed region, replicated); each row touched is recorded once (a mark per table row in
/// SMEM) and, once the zeros have landed, only those rows are copied out. The table's write to
/// HBM overlaps the additions instead of following them, for at most `count` rows written twice.
#[derive(Clone, Copy, Debug)]
struct Sparse {
    /// SMEM byte addresses of the marks (a word per table row) and of the list of touched rows.
    marks: u32,
    list: u32,
    /// VMEM byte address of the zeroed region the DMA replicates, and its rows.
    zeros: u32,
    zero_rows: u32,
}

impl<'a> Kernel<'a> {
    fn new(
        spec: &'a GatherSpec,
        chip: &ChipInfo,
        e: &mut Emitter,
        args: BufferArgs,
    ) -> Result<Self, KernelError> {
        let esz = spec.dtype.size() as u32;
        let isz = spec.index.size() as u32;
        let row_bytes = (spec.row_len * esz).max(esz);
        let count = spec.count;
        // VMEM: two source chunks, then the table block.
        let budget = chip.core.vmem_bytes / 2;
        let chunk = MAX_CHUNK
            .min(count)
            .min(((budget / 4) / row_bytes as u64).max(1) as u32);
        let t_vmem = 2 * (chunk * row_bytes).next_multiple_of(4096);
        let block_rows =
            (((budget - t_vmem as u64) / row_bytes as u64) as u32).min(spec.table_rows);
        if block_rows == 0 {
            return Err(KernelError::TooLarge(format!(
                "index-add rows of {row_bytes} bytes do not fit VMEM"
            )));
        }
        // SMEM: two index chunks.
        let idx_smem = [
            e.smem_alloc((chunk * isz / 4) as usize),
            e.smem_alloc((chunk * isz / 4) as usize),
        ];
        if idx_smem[1] as u64 + (chunk * isz) as u64 > chip.core.smem_bytes {
            return Err(KernelError::TooLarge(
                "index chunk does not fit SMEM".into(),
            ));
        }
        let nv = spec.row_len.div_ceil(1024);
        let blocks = spec.table_rows.div_ceil(block_rows);
        // Sparse when the table is zeroed, fits one block, its rows are at least 256 bytes (whole
        // bursts) and the indices touch at most a quarter of its rows.
        let sparse_fits = spec.zero_table
            && blocks == 1
            && row_bytes >= 256
            && count as u64 * 4 <= spec.table_rows as u64;
        // SMEM after the index chunks: the marks, the list, and room for DMA descriptors.
        let marks = idx_smem[1] + 4 * (chunk * isz / 4);
        let list = marks + 4 * spec.table_rows;
        let zeros = t_vmem + (block_rows * row_bytes).next_multiple_of(4096);
        let zero_rows = (32768 / row_bytes).clamp(1, block_rows.max(1));
        let sparse = (sparse_fits
            && list as u64 + count as u64 * 4 + 1024 <= chip.core.smem_bytes
            && zeros as u64 + (zero_rows * row_bytes) as u64 <= chip.core.vmem_bytes)
            .then(|| {
                let at = e.smem_alloc(spec.table_rows as usize);
                debug_assert_eq!(at, marks);
                e.smem_alloc(count as usize);
                Sparse {
                    marks,
                    list,
                    zeros,
                    zero_rows,
                }
            });
        Ok(Kernel {
            spec,
            args,
            esz,
            isz,
            row_bytes,
            chunk,
            nchunks: count.div_ceil(chunk),
            t_vmem,
            block_rows,
            blocks,
            idx_smem,
            nv,
            tail: spec.row_len - (nv - 1) * 1024,
            sparse,
        })
    }

    /// VMEM byte address of source chunk buffer `k`.
    fn src_slot(&self, k: u32) -> u32 {
        k * (self.chunk * self.row_bytes).next_multiple_of(4096)
    }

    /// Source rows in chunk `c`.
    fn chunk_len(&self, c: u32) -> u32 {
        self.chunk.min(self.spec.count - c * self.chunk)
    }

    /// The operands' byte offsets, and the mask of a row's last vector register.
    fn prologue(&self, e: &mut Emitter) {
        for (k, (r, sz)) in [(T_BASE, self.esz), (I_BASE, self.isz), (R_BASE, self.esz)]
            .into_iter()
            .enumerate()
        {
            e.byte_offset(r, &self.args, k, sz);
        }
        if self.tail < 1024 {
            e.mask_below(TAIL_MASK, IOTA, IotaKind::Flat, self.tail);
        }
    }

    /// A strided DMA between `hbm` and VMEM at `vmem`, either way.
    fn hbm_dma(
        &self,
        e: &mut Emitter,
        to_vmem: bool,
        hbm: Hbm,
        vmem: u32,
        desc: &DmaDescriptor,
        sem: u8,
    ) -> Result<(), KernelError> {
        let off = super::hbm_offset(hbm.off, "index-add operand")?;
        e.sadd(ADDR, hbm.base, off);
        let d = e.descriptor(desc) as i32;
        let dreg = e.konst(d);
        let v = e.konst(vmem as i32);
        let (dst, src) = if to_vmem {
            (MemRef::vmem(v), MemRef::hbm(hbm.slot, ADDR))
        } else {
            (MemRef::hbm(hbm.slot, ADDR), MemRef::vmem(v))
        };
        e.dma(dst, src, DmaShape::Desc(dreg), Sem::n(sem));
        Ok(())
    }

    /// Chunk `c` of indices into SMEM and of source rows into VMEM, on semaphore `c % 2`;
    /// returns the bytes.
    fn prefetch(&self, e: &mut Emitter, c: u32) -> Result<u64, KernelError> {
        let (esz, isz) = (self.esz, self.isz);
        let n = self.chunk_len(c);
        let k = (c % 2) as usize;
        let ib = n * isz;
        e.sadd(ADDR, I_BASE, (c * self.chunk * isz) as i32);
        let dst = e.konst(self.idx_smem[k] as i32);
        let len = e.konst(ib as i32);
        e.dma(
            MemRef::smem(dst),
            MemRef::hbm(self.args.slots[1], ADDR),
            DmaShape::Len(len),
            Sem::n(k as u8),
        );
        let stride = self.spec.rows_stride * esz;
        let d = rows_desc(n, self.row_bytes, stride, true);
        let rows = Hbm {
            slot: self.args.slots[2],
            base: R_BASE,
            off: (c * self.chunk) as i64 * stride as i64,
        };
        self.hbm_dma(e, true, rows, self.src_slot(k as u32), &d, k as u8)?;
        Ok(ib as u64 + d.bytes())
    }

    /// Table block `blk`: in, every chunk of source rows added, back out.
    fn block(&self, e: &mut Emitter, blk: u32) -> Result<(), KernelError> {
        let r0 = blk * self.block_rows;
        let nrows = self.block_rows.min(self.spec.table_rows - r0);
        let stride = self.spec.table_row_stride * self.esz;
        let table = || Hbm {
            slot: self.args.slots[0],
            base: T_BASE,
            off: r0 as i64 * stride as i64,
        };
        let tdesc = rows_desc(nrows, self.row_bytes, stride, true);
        let mut chunks = PingPong::new(0);
        let mut zeros_out = 0;
        if self.spec.zero_table {
            chunks.add(0, self.prefetch(e, 0)?);
            if let Some(sp) = self.sparse {
                zeros_out = self.zeros_to_hbm(e, sp, nrows, stride)?;
            }
            self.zero_vmem(e, self.t_vmem, nrows * self.row_bytes);
            if let Some(sp) = self.sparse {
                // The marks start as zeros: copied from the zeroed table, before any addition.
                let len = e.konst((self.spec.table_rows * 4) as i32);
                let (to, from) = (e.konst(sp.marks as i32), e.konst(self.t_vmem as i32));
                e.dma(
                    MemRef::smem(to),
                    MemRef::vmem(from),
                    DmaShape::Len(len),
                    Sem::n(4),
                );
                e.sem_wait(Sem::n(4), len);
                e.smov(NU, 0);
            }
        } else {
            self.hbm_dma(e, true, table(), self.t_vmem, &tdesc, 2)?;
            chunks.add(0, self.prefetch(e, 0)?);
            e.wait_bytes(Sem::n(2), tdesc.bytes());
        }
        for c in 0..self.nchunks {
            let k = (c % 2) as usize;
            if c + 1 < self.nchunks {
                chunks.add(1 - k, self.prefetch(e, c + 1)?);
            }
            chunks.wait(e, k);
            self.add_rows(e, blk, c, r0, nrows);
        }
        if let Some(sp) = self.sparse {
            e.wait_bytes(Sem::n(2), zeros_out);
            self.write_touched(e, sp, stride);
            return Ok(());
        }
        let back = rows_desc(nrows, self.row_bytes, stride, false);
        self.hbm_dma(e, false, table(), self.t_vmem, &back, 2)?;
        e.wait_bytes(Sem::n(2), back.bytes());
        Ok(())
    }

    /// Zeros over the table's `nrows` rows in HBM (HBM row stride `stride`), replicated from a
    /// zeroed region of `zero_rows` rows, on semaphore 2; returns the bytes.
    fn zeros_to_hbm(
        &self,
        e: &mut Emitter,
        sp: Sparse,
        nrows: u32,
        stride: u32,
    ) -> Result<u64, KernelError> {
        let (z, rb) = (sp.zero_rows, self.row_bytes);
        self.zero_vmem(e, sp.zeros, z * rb);
        let (reps, rest) = (nrows / z, nrows % z);
        let mut bytes = 0;
        let mut at = 0i64;
        if reps > 0 {
            let whole = (z as i64) * stride as i64;
            let d = hbm_vmem_desc(
                rb,
                &[(reps, whole, 0), (z, stride as i64, rb as i64)],
                false,
            );
            let to = Hbm {
                slot: self.args.slots[0],
                base: T_BASE,
                off: 0,
            };
            self.hbm_dma(e, false, to, sp.zeros, &d, 2)?;
            bytes += d.bytes();
            at = reps as i64 * whole;
        }
        if rest > 0 {
            let d = rows_desc(rest, rb, stride, false);
            let to = Hbm {
                slot: self.args.slots[0],
                base: T_BASE,
                off: at,
            };
            self.hbm_dma(e, false, to, sp.zeros, &d, 2)?;
            bytes += d.bytes();
        }
        Ok(bytes)
    }

    /// Copies every recorded row from the table in VMEM to HBM (once the zeros have landed),
    /// then waits for them.
    fn write_touched(&self, e: &mut Emitter, sp: Sparse, stride: u32) {
        e.forget_constants();
        let len = e.konst(self.row_bytes as i32);
        // A loop tested at the bottom over the list's bytes (K), the next test computed beside
        // the addresses: about six cycles a row where the loop tested at the top took twelve.
        e.smul(MARK, NU, 4);
        e.smov(K, 0);
        let done = e.label();
        e.brz(NU, done);
        let top = e.here();
        e.sld(IDX, Addr::new(K, sp.list as i32));
        e.sadd(K, K, 4);
        e.smul(ADDR, IDX, stride as i32);
        e.smul(TA, IDX, self.row_bytes as i32);
        e.sadd(ADDR, ADDR, T_BASE);
        e.sadd(TA, TA, self.t_vmem as i32);
        e.scmp(CmpOp::Lt, T, K, MARK);
        e.dma(
            MemRef::hbm(self.args.slots[0], ADDR),
            MemRef::vmem(TA),
            DmaShape::Len(len),
            Sem::n(4),
        );
        e.brnz(T, top);
        e.bind(done);
        e.smul(T, NU, self.row_bytes as i32);
        e.sem_wait(Sem::n(4), T);
    }

    /// Zeroes `bytes` of VMEM from `base`, 1024 lanes a store, eight stores a loop trip.
    fn zero_vmem(&self, e: &mut Emitter, base: u32, bytes: u32) {
        const UNROLL: u32 = 8;
        let fmt = self.spec.dtype.mem();
        let elems = (bytes as u64 / self.esz as u64) as u32;
        let stores = elems / 1024;
        let vbytes = 1024 * self.esz;
        e.vmov(VType::I32, VA, 0u32);
        let trips = stores / UNROLL;
        if trips > 0 {
            let l = e.begin_loop(J, T, trips, 1);
            e.smul(TA, J, (UNROLL * vbytes) as i32);
            for u in 0..UNROLL {
                let at = Addr::new(TA, (base + u * vbytes) as i32);
                e.vst(fmt, VA, at, VAccess::masked(None));
            }
            e.end_loop(l);
        }
        // The stores the loop left, from where it stopped.
        let done = trips * UNROLL;
        e.smov(TA, (done * vbytes) as i32);
        for s in done..stores {
            let at = Addr::new(TA, (base + (s - done) * vbytes) as i32);
            e.vst(fmt, VA, at, VAccess::masked(None));
        }
        let rest = elems % 1024;
        if rest > 0 {
            e.mask_below(ZERO_MASK, VB, IotaKind::Flat, rest);
            let at = Addr::new(TA, (base + (stores - done) * vbytes) as i32);
            e.vst(fmt, VA, at, VAccess::masked(Some(ZERO_MASK)));
        }
    }

    /// Adds each source row of chunk `c` whose index falls in the block (rows `r0..r0 +
    /// nrows`) into its table row.
    fn add_rows(&self, e: &mut Emitter, blk: u32, c: u32, r0: u32, nrows: u32) {
        let k = (c % 2) as usize;
        e.forget_constants();
        let l = e.begin_loop(J, T, self.chunk_len(c), 1);
        let skip = e.label();
        e.smul(T, J, self.isz as i32);
        e.sld(IDX, Addr::new(T, self.idx_smem[k] as i32));
        if blk == 0
            && let Some(limit) = self.spec.check_rows
        {
            // Outside [0, rows) (unsigned: negatives are huge): read the table from the last
            // byte address, which faults with the table's bounds.
            let ok = e.label();
            e.scmp(CmpOp::LtU, T, IDX, limit as i32);
            e.brnz(T, ok);
            e.smov(ADDR, -1);
            let one = e.konst(self.row_bytes as i32);
            let v = e.konst(self.src_slot(k as u32) as i32);
            e.dma(
                MemRef::vmem(v),
                MemRef::hbm(self.args.slots[0], ADDR),
                DmaShape::Len(one),
                Sem::n(3),
            );
            e.bind_join(ok);
        }
        // rel = idx - r0; rows of other blocks are skipped.
        e.ssub(IDX, IDX, r0 as i32);
        e.scmp(CmpOp::LtU, T, IDX, nrows as i32);
        e.brz(T, skip);
        if let Some(sp) = self.sparse {
            // The row's first touch: marked, and listed for the write-back.
            let seen = e.label();
            e.smul(TA, IDX, 4);
            e.sld(MARK, Addr::new(TA, sp.marks as i32));
            e.brnz(MARK, seen);
            e.sadd(MARK, J, 1);
            e.sst(MARK, Addr::new(TA, sp.marks as i32));
            e.smul(MARK, NU, 4);
            e.sst(IDX, Addr::new(MARK, sp.list as i32));
            e.sadd(NU, NU, 1);
            e.bind_join(seen);
        }
        e.smul(TA, IDX, self.row_bytes as i32);
        e.smul(SA, J, self.row_bytes as i32);
        self.add_row(e, self.src_slot(k as u32));
        e.bind_join(skip);
        e.end_loop(l);
    }

    /// `table[TA] = combine(table[TA], src[SA])`, one vector register at a time.
    fn add_row(&self, e: &mut Emitter, src: u32) {
        let fmt = self.spec.dtype.mem();
        let ty = self.spec.dtype.lane();
        let bool_ = self.spec.dtype == DType::Bool;
        let op = match self.spec.combine {
            Combine::Add if bool_ => Some(VBinOp::Or),
            Combine::Add => Some(VBinOp::Add),
            Combine::Mul if bool_ => Some(VBinOp::And),
            Combine::Mul => Some(VBinOp::Mul),
            Combine::Max => Some(VBinOp::Max),
            Combine::Min => Some(VBinOp::Min),
            Combine::Copy => None,
        };
        for q in 0..self.nv {
            let mask = (q + 1 == self.nv && self.tail < 1024).then_some(TAIL_MASK);
            let access = VAccess::masked(mask);
            let off = (q * 1024 * self.esz) as i32;
            let at = Addr::new(TA, self.t_vmem as i32 + off);
            if let Some(op) = op {
                e.vld(fmt, VA, at, access);
                e.vld(fmt, VB, Addr::new(SA, src as i32 + off), access);
                e.vbin(op, ty, VA, VA, VB);
            } else {
                e.vld(fmt, VA, Addr::new(SA, src as i32 + off), access);
            }
            e.vst(fmt, VA, at, access);
        }
    }
}
