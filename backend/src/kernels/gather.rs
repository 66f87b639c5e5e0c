//! Data-dependent row movement: gathering table rows by index (`embedding`, `index_select`) and
//! adding rows into a table by index (their backward).
//!
//! Gathers: indices stream from HBM into SMEM in chunks; the scalar unit reads each one and
//! issues an HBM-to-HBM DMA for its row, many in flight. An index outside the table makes the
//! row DMA fault with the table's bounds. Index-add is [`super::index_add`].

use tpuemu_isa::ops::{CmpOp, SAluOp};
use tpuemu_isa::{Addr, ChipInfo, DmaShape, Instr, MemRef, Program, SReg, SSrc, Sem};

use super::KernelError;
use crate::codegen::Emitter;
use crate::dtype::DType;
use crate::ir::{GatherNode, Node};

/// Indices per SMEM chunk.
const CHUNK: u32 = 4096;
/// Row DMAs in flight before the gather waits.
const IN_FLIGHT: u32 = 32;

/// What a gather or index-add kernel needs to know (the cache key).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct GatherSpec {
    /// Add rows instead of copying them.
    pub add: bool,
    /// Element type of the table and rows.
    pub dtype: DType,
    /// Element type of the indices (i32 or i64).
    pub index: DType,
    /// Elements per row.
    pub row_len: u32,
    /// Element stride between table rows.
    pub table_row_stride: u32,
    /// Element stride between source/output rows.
    pub rows_stride: u32,
    /// Number of indices.
    pub count: u32,
    /// Rows of the table.
    pub table_rows: u32,
    /// With bounds checking: the table's row count; an index outside `[0, rows)` makes the row
    /// DMA read from an address outside the table, which faults.
    pub check_rows: Option<u32>,
}

impl GatherSpec {
    /// Cache key.
    pub fn key(&self) -> String {
        format!("{self:?}")
    }
}

fn contiguous_rows(v: &crate::ir::View, what: &str) -> Result<u32, KernelError> {
    let l = &v.layout;
    if l.ndim() != 2 || (l.shape[1] > 1 && l.strides[1] != 1) {
        return Err(KernelError::Unsupported(format!(
            "{what} rows must be contiguous (layout {:?} / {:?})",
            l.shape, l.strides
        )));
    }
    u32::try_from(l.strides[0].max(0)).map_err(|_| KernelError::TooLarge("row stride".into()))
}

/// The spec of a gather node: inputs `[table, index]`, output `[out]`; offsets of table, index,
/// out.
pub fn gather_spec(node: &Node, g: &GatherNode) -> Result<(GatherSpec, Vec<usize>), KernelError> {
    let (table, index, out) = (&node.inputs[0], &node.inputs[1], &node.outputs[0]);
    index_ok(index)?;
    let spec = GatherSpec {
        add: false,
        dtype: table.dtype,
        index: index.dtype,
        row_len: g.row_len as u32,
        table_row_stride: contiguous_rows(table, "table")?,
        rows_stride: contiguous_rows(out, "output")?,
        count: g.count as u32,
        table_rows: g.rows as u32,
        check_rows: g.check_bounds.then_some(g.rows as u32),
    };
    Ok((
        spec,
        vec![table.layout.offset, index.layout.offset, out.layout.offset],
    ))
}

/// The spec of an index-add node: inputs `[index, src]`, output `[dst]` (updated in place);
/// offsets of dst, index, src.
pub fn index_add_spec(
    node: &Node,
    g: &GatherNode,
) -> Result<(GatherSpec, Vec<usize>), KernelError> {
    let (index, src, dst) = (&node.inputs[0], &node.inputs[1], &node.outputs[0]);
    index_ok(index)?;
    let spec = GatherSpec {
        add: true,
        dtype: dst.dtype,
        index: index.dtype,
        row_len: g.row_len as u32,
        table_row_stride: contiguous_rows(dst, "destination")?,
        rows_stride: contiguous_rows(src, "source")?,
        count: g.count as u32,
        table_rows: g.rows as u32,
        check_rows: g.check_bounds.then_some(g.rows as u32),
    };
    Ok((
        spec,
        vec![dst.layout.offset, index.layout.offset, src.layout.offset],
    ))
}

fn index_ok(index: &crate::ir::View) -> Result<(), KernelError> {
    if !matches!(index.dtype, DType::I32 | DType::I64) {
        return Err(KernelError::Unsupported(format!(
            "indices must be int32 or int64, not {}",
            index.dtype
        )));
    }
    if index.layout.ndim() != 1 || (index.layout.shape[0] > 1 && index.layout.strides[0] != 1) {
        return Err(KernelError::Unsupported(
            "indices must be a contiguous vector".into(),
        ));
    }
    Ok(())
}

/// Builds the kernel. Arguments: table (or destination), index, rows (output, or source), then
/// their element offsets.
pub fn build(spec: &GatherSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    if spec.add {
        return super::index_add::build(spec, chip, name);
    }
    let mut e = Emitter::new(name);
    let (table, index, rows) = (e.b.buffer("table"), e.b.buffer("index"), e.b.buffer("rows"));
    for i in 0..3 {
        e.b.scalar(format!("off{i}"));
    }
    let esz = spec.dtype.size() as u32;
    let isz = spec.index.size() as u32;
    let row_bytes = spec.row_len * esz;
    let idx_smem = e.b.smem_alloc((CHUNK * isz / 4) as usize);
    if idx_smem as u64 + (CHUNK * isz) as u64 > chip.core.smem_bytes {
        return Err(KernelError::TooLarge(
            "index chunk does not fit SMEM".into(),
        ));
    }
    // Registers.
    let s = |i: u8| SReg::n(i);
    let (t_base, i_base, r_base) = (s(1), s(2), s(3));
    let (i, j, idx, t, src, dst, len, chunk_len, cnt) =
        (s(4), s(5), s(6), s(7), s(8), s(9), s(10), s(11), s(12));
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
    e.b.smov(len, row_bytes as i32);
    e.b.smov(i, 0);
    e.b.smov(cnt, 0);
    let done = e.b.label();
    let top = e.b.here();
    e.push(Instr::SCmp {
        op: CmpOp::Lt,
        dst: t,
        a: i,
        b: SSrc::Imm(spec.count as i32),
    });
    e.b.brz(t, done);
    // A new chunk of indices every CHUNK.
    e.push(Instr::SAlu {
        op: SAluOp::RemU,
        dst: t,
        a: i,
        b: SSrc::Imm(CHUNK as i32),
    });
    let no_chunk = e.b.label();
    e.b.brnz(t, no_chunk);
    e.push(Instr::SAlu {
        op: SAluOp::Sub,
        dst: chunk_len,
        a: SReg::ZERO,
        b: SSrc::Reg(i),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: chunk_len,
        a: chunk_len,
        b: SSrc::Imm(spec.count as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Min,
        dst: chunk_len,
        a: chunk_len,
        b: SSrc::Imm(CHUNK as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Mul,
        dst: chunk_len,
        a: chunk_len,
        b: SSrc::Imm(isz as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Mul,
        dst: src,
        a: i,
        b: SSrc::Imm(isz as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: src,
        a: src,
        b: SSrc::Reg(i_base),
    });
    e.b.smov(dst, idx_smem as i32);
    e.push(Instr::Dma {
        dst: MemRef::smem(dst),
        src: MemRef::hbm(index, src),
        shape: DmaShape::Len(chunk_len),
        sem: Sem::n(0),
        remote: None,
    });
    e.push(Instr::SemWait {
        sem: Sem::n(0),
        amount: SSrc::Reg(chunk_len),
    });
    e.b.bind(no_chunk);
    // idx = indices[i % CHUNK] (the low word of an int64).
    e.push(Instr::SAlu {
        op: SAluOp::RemU,
        dst: j,
        a: i,
        b: SSrc::Imm(CHUNK as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Mul,
        dst: j,
        a: j,
        b: SSrc::Imm(isz as i32),
    });
    e.push(Instr::SLoad {
        dst: idx,
        addr: Addr::new(j, idx_smem as i32),
    });
    // Table row idx, rows row i.
    e.push(Instr::SAlu {
        op: SAluOp::Mul,
        dst: src,
        a: idx,
        b: SSrc::Imm((spec.table_row_stride * esz) as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: src,
        a: src,
        b: SSrc::Reg(t_base),
    });
    if let Some(rows) = spec.check_rows {
        // An index outside [0, rows) (unsigned compare: negatives are huge) reads from the
        // last byte address instead, so the row DMA faults rather than reading other data.
        let ok = e.b.label();
        e.push(Instr::SCmp {
            op: CmpOp::LtU,
            dst: t,
            a: idx,
            b: SSrc::Imm(rows as i32),
        });
        e.b.brnz(t, ok);
        e.b.smov(src, -1);
        e.b.bind(ok);
    }
    e.push(Instr::SAlu {
        op: SAluOp::Mul,
        dst,
        a: i,
        b: SSrc::Imm((spec.rows_stride * esz) as i32),
    });
    e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst,
        a: dst,
        b: SSrc::Reg(r_base),
    });
    e.push(Instr::Dma {
        dst: MemRef::hbm(rows, dst),
        src: MemRef::hbm(table, src),
        shape: DmaShape::Len(len),
        sem: Sem::n(1),
        remote: None,
    });
    e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: cnt,
        a: cnt,
        b: SSrc::Imm(1),
    });
    let no_wait = e.b.label();
    e.push(Instr::SCmp {
        op: CmpOp::Lt,
        dst: t,
        a: cnt,
        b: SSrc::Imm(IN_FLIGHT as i32),
    });
    e.b.brnz(t, no_wait);
    e.push(Instr::SemWait {
        sem: Sem::n(1),
        amount: SSrc::Imm((IN_FLIGHT * row_bytes) as i32),
    });
    e.b.smov(cnt, 0);
    e.b.bind(no_wait);
    e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: i,
        a: i,
        b: SSrc::Imm(1),
    });
    e.b.br(top);
    e.b.bind(done);
    e.push(Instr::SAlu {
        op: SAluOp::Mul,
        dst: cnt,
        a: cnt,
        b: SSrc::Imm(row_bytes as i32),
    });
    e.push(Instr::SemWait {
        sem: Sem::n(1),
        amount: SSrc::Reg(cnt),
    });
    Ok(e.finish()?)
}
