//! Index-add (`table[index[i], :] += rows[i, :]`, the backward of `embedding` and
//! `index_select`) with the table in VMEM.
//!
//! The table is processed in blocks of rows that fit half of VMEM (one block when it fits, as
//! an embedding table usually does). For each block: the block is loaded into VMEM; the
//! indices and source rows stream in chunks (one DMA each, double-buffered: the next chunk
//! loads while this one is added); the vector unit adds every source row whose index falls in
//! the block into its table row, in index order (so repeated indices accumulate in order, each
//! addition rounded to the table's dtype, deterministically); the block goes back to HBM. With
//! bounds checking, an index outside the table makes a DMA read from outside the table, which
//! faults with the table's bounds.

use tpuemu_isa::dma::{DmaDescriptor, DmaDim};
use tpuemu_isa::ops::{CmpOp, IotaKind, SAluOp, VBinOp, VType};
use tpuemu_isa::{
    Addr, ChipInfo, DmaShape, Instr, MReg, MemRef, Program, SReg, SSrc, Sem, VReg, VSrc,
};

use super::KernelError;
use super::gather::GatherSpec;
use crate::codegen::Emitter;
use crate::dtype::DType;

/// Most source rows per chunk.
const MAX_CHUNK: u32 = 512;

/// A 2-D copy of `rows` rows of `row_bytes`, HBM row stride `hbm_stride` bytes, dense in VMEM.
fn rows_desc(rows: u32, row_bytes: u32, hbm_stride: u32, to_vmem: bool) -> DmaDescriptor {
    let (src, dst) = if to_vmem {
        (hbm_stride as i32, row_bytes as i32)
    } else {
        (row_bytes as i32, hbm_stride as i32)
    };
    DmaDescriptor {
        elem_bytes: row_bytes,
        dims: vec![DmaDim {
            count: rows,
            src_stride: src,
            dst_stride: dst,
        }],
    }
}

/// Builds the kernel. Arguments: `table`, `index`, `rows` buffers, then their storage offsets
/// in elements.
pub fn build(spec: &GatherSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    let mut e = Emitter::new(name);
    let (table, index, rows) = (e.b.buffer("table"), e.b.buffer("index"), e.b.buffer("rows"));
    for i in 0..3 {
        e.b.scalar(format!("off{i}"));
    }
    let esz = spec.dtype.size() as u32;
    let isz = spec.index.size() as u32;
    let row_bytes = (spec.row_len * esz).max(esz);
    let count = spec.count;
    let table_rows = spec.table_rows;
    if count == 0 || spec.row_len == 0 || table_rows == 0 {
        return Ok(e.finish()?);
    }
    // VMEM: two source chunks, then the table block.
    let budget = chip.core.vmem_bytes / 2;
    let chunk = MAX_CHUNK
        .min(count)
        .min(((budget / 4) / row_bytes as u64).max(1) as u32);
    let src_slot = |k: u32| k * (chunk * row_bytes).next_multiple_of(4096);
    let t_vmem = src_slot(2);
    let block_rows = (((budget - t_vmem as u64) / row_bytes as u64) as u32).min(table_rows);
    if block_rows == 0 {
        return Err(KernelError::TooLarge(format!(
            "index-add rows of {row_bytes} bytes do not fit VMEM"
        )));
    }
    let blocks = table_rows.div_ceil(block_rows);
    let nchunks = count.div_ceil(chunk);
    // SMEM: two index chunks.
    let idx_smem = [
        e.b.smem_alloc((chunk * isz / 4) as usize),
        e.b.smem_alloc((chunk * isz / 4) as usize),
    ];
    if idx_smem[1] as u64 + (chunk * isz) as u64 > chip.core.smem_bytes {
        return Err(KernelError::TooLarge(
            "index chunk does not fit SMEM".into(),
        ));
    }
    // Registers (16.. hold cached constants).
    let s = SReg::n;
    let (t_base, i_base, r_base) = (s(1), s(2), s(3));
    let (j, idx, t, ta, sa, addr) = (s(4), s(5), s(6), s(7), s(8), s(9));
    for (k, (r, sz)) in [(t_base, esz), (i_base, isz), (r_base, esz)]
        .into_iter()
        .enumerate()
    {
        e.push(Instr::SLoad {
            dst: r,
            addr: Addr::abs(12 + 4 * k as i32),
        });
        e.push(Instr::SAlu {
            op: SAluOp::Mul,
            dst: r,
            a: r,
            b: SSrc::Imm(sz as i32),
        });
    }
    let fmt = spec.dtype.mem();
    let ty = spec.dtype.lane();
    let nv = spec.row_len.div_ceil(1024);
    let (va, vb, iota) = (VReg::n(1), VReg::n(2), VReg::n(3));
    let tail = spec.row_len - (nv - 1) * 1024;
    if tail < 1024 {
        e.push(Instr::VIota {
            kind: IotaKind::Flat,
            dst: iota,
        });
        e.push(Instr::VCmp {
            op: CmpOp::Lt,
            ty: VType::I32,
            dst: MReg::n(1),
            a: iota,
            b: VSrc::Imm(tail),
        });
    }
    let add = if spec.dtype == DType::Bool {
        VBinOp::Or
    } else {
        VBinOp::Add
    };
    let hbm_dma = |e: &mut Emitter,
                   to_vmem: bool,
                   slot,
                   base: SReg,
                   off: i64,
                   vmem: u32,
                   desc: &DmaDescriptor,
                   sem: u8|
     -> Result<(), KernelError> {
        let off = i32::try_from(off)
            .map_err(|_| KernelError::TooLarge("index-add operand above 2 GiB".into()))?;
        e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: addr,
            a: base,
            b: SSrc::Imm(off),
        });
        let d = e.descriptor(desc) as i32;
        let dreg = e.konst(d);
        let v = e.konst(vmem as i32);
        let (dst, src) = if to_vmem {
            (MemRef::vmem(v), MemRef::hbm(slot, addr))
        } else {
            (MemRef::hbm(slot, addr), MemRef::vmem(v))
        };
        e.push(Instr::Dma {
            dst,
            src,
            shape: DmaShape::Desc(dreg),
            sem: Sem::n(sem),
            remote: None,
        });
        Ok(())
    };
    // Chunk `c` of indices into SMEM and of source rows into VMEM, on semaphore `c % 2`.
    let chunk_len = |c: u32| chunk.min(count - c * chunk);
    let prefetch = |e: &mut Emitter, c: u32| -> Result<u64, KernelError> {
        let n = chunk_len(c);
        let k = (c % 2) as usize;
        let ib = n * isz;
        e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: addr,
            a: i_base,
            b: SSrc::Imm((c * chunk * isz) as i32),
        });
        let dst = e.konst(idx_smem[k] as i32);
        let len = e.konst(ib as i32);
        e.push(Instr::Dma {
            dst: MemRef::smem(dst),
            src: MemRef::hbm(index, addr),
            shape: DmaShape::Len(len),
            sem: Sem::n(k as u8),
            remote: None,
        });
        let d = rows_desc(n, row_bytes, spec.rows_stride * esz, true);
        hbm_dma(
            e,
            true,
            rows,
            r_base,
            (c * chunk) as i64 * (spec.rows_stride * esz) as i64,
            src_slot(k as u32),
            &d,
            k as u8,
        )?;
        Ok(ib as u64 + d.bytes())
    };
    for blk in 0..blocks {
        let r0 = blk * block_rows;
        let nrows = block_rows.min(table_rows - r0);
        let tdesc = rows_desc(nrows, row_bytes, spec.table_row_stride * esz, true);
        let t_off = r0 as i64 * (spec.table_row_stride * esz) as i64;
        hbm_dma(&mut e, true, table, t_base, t_off, t_vmem, &tdesc, 2)?;
        let mut pending = [prefetch(&mut e, 0)?, 0];
        e.push(Instr::SemWait {
            sem: Sem::n(2),
            amount: SSrc::Imm(tdesc.bytes() as i32),
        });
        for c in 0..nchunks {
            let k = (c % 2) as usize;
            if c + 1 < nchunks {
                pending[1 - k] = prefetch(&mut e, c + 1)?;
            }
            e.push(Instr::SemWait {
                sem: Sem::n(k as u8),
                amount: SSrc::Imm(std::mem::take(&mut pending[k]) as i32),
            });
            // for j in 0..n: the row of index j.
            e.b.smov(j, 0);
            e.forget_constants();
            let top = e.b.here();
            let skip = e.b.label();
            e.push(Instr::SAlu {
                op: SAluOp::Mul,
                dst: t,
                a: j,
                b: SSrc::Imm(isz as i32),
            });
            e.push(Instr::SLoad {
                dst: idx,
                addr: Addr::new(t, idx_smem[k] as i32),
            });
            if blk == 0
                && let Some(limit) = spec.check_rows
            {
                // Outside [0, rows) (unsigned: negatives are huge): read the table from the last
                // byte address, which faults with the table's bounds.
                let ok = e.b.label();
                e.push(Instr::SCmp {
                    op: CmpOp::LtU,
                    dst: t,
                    a: idx,
                    b: SSrc::Imm(limit as i32),
                });
                e.b.brnz(t, ok);
                e.b.smov(addr, -1);
                let one = e.konst(row_bytes as i32);
                let v = e.konst(src_slot(k as u32) as i32);
                e.push(Instr::Dma {
                    dst: MemRef::vmem(v),
                    src: MemRef::hbm(table, addr),
                    shape: DmaShape::Len(one),
                    sem: Sem::n(3),
                    remote: None,
                });
                e.b.bind(ok);
                e.forget_constants();
            }
            // rel = idx - r0; rows of other blocks are skipped.
            e.push(Instr::SAlu {
                op: SAluOp::Sub,
                dst: idx,
                a: idx,
                b: SSrc::Imm(r0 as i32),
            });
            e.push(Instr::SCmp {
                op: CmpOp::LtU,
                dst: t,
                a: idx,
                b: SSrc::Imm(nrows as i32),
            });
            e.b.brz(t, skip);
            e.push(Instr::SAlu {
                op: SAluOp::Mul,
                dst: ta,
                a: idx,
                b: SSrc::Imm(row_bytes as i32),
            });
            e.push(Instr::SAlu {
                op: SAluOp::Mul,
                dst: sa,
                a: j,
                b: SSrc::Imm(row_bytes as i32),
            });
            for q in 0..nv {
                let mask = (q + 1 == nv && tail < 1024).then_some(MReg::n(1));
                let off = (q * 1024 * esz) as i32;
                e.push(Instr::VLoad {
                    fmt,
                    dst: va,
                    addr: Addr::new(ta, t_vmem as i32 + off),
                    sub_stride: None,
                    lane_stride: None,
                    mask,
                });
                e.push(Instr::VLoad {
                    fmt,
                    dst: vb,
                    addr: Addr::new(sa, src_slot(k as u32) as i32 + off),
                    sub_stride: None,
                    lane_stride: None,
                    mask,
                });
                e.push(Instr::VBin {
                    op: add,
                    ty,
                    dst: va,
                    a: va,
                    b: VSrc::V(vb),
                });
                e.push(Instr::VStore {
                    fmt,
                    src: va,
                    addr: Addr::new(ta, t_vmem as i32 + off),
                    sub_stride: None,
                    lane_stride: None,
                    mask,
                });
            }
            e.b.bind(skip);
            e.forget_constants();
            e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst: j,
                a: j,
                b: SSrc::Imm(1),
            });
            e.push(Instr::SCmp {
                op: CmpOp::Lt,
                dst: t,
                a: j,
                b: SSrc::Imm(chunk_len(c) as i32),
            });
            e.b.brnz(t, top);
        }
        let back = rows_desc(nrows, row_bytes, spec.table_row_stride * esz, false);
        hbm_dma(&mut e, false, table, t_base, t_off, t_vmem, &back, 2)?;
        e.push(Instr::SemWait {
            sem: Sem::n(2),
            amount: SSrc::Imm(back.bytes() as i32),
        });
    }
    Ok(e.finish()?)
}
