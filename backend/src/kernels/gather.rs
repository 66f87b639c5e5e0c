//! Data-dependent row movement: gathering table rows by index (`embedding`, `index_select`) and
//! adding rows into a table by index (their backward).
//!
//! Gathers: indices stream from HBM into SMEM in chunks; the scalar unit reads each one and
//! issues an HBM-to-HBM DMA for its row, many in flight. An index outside the table makes the
//! row DMA fault with the table's bounds. Index-add is [`super::index_add`].

use tpuemu_isa::ops::{CmpOp, SAluOp};
use tpuemu_isa::{Addr, ArgSlot, ChipInfo, DmaShape, MemRef, Program, SReg, Sem};

use super::KernelError;
use crate::codegen::Emitter;
use crate::dtype::DType;
use crate::ir::{Combine, GatherNode, Node, View};

/// Indices per SMEM chunk.
const CHUNK: u32 = 4096;
/// Row DMAs in flight before the gather waits.
const IN_FLIGHT: u32 = 32;

/// What a gather or index-add kernel needs to know (the cache key).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct GatherSpec {
    /// Put rows into the table (combining them as `combine` says) instead of gathering.
    pub add: bool,
    /// How a put row combines with its table row.
    pub combine: Combine,
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
    /// Put kernels: the table starts as zeros in VMEM instead of being read from HBM.
    pub zero_table: bool,
}

impl GatherSpec {
    /// Cache key.
    pub fn key(&self) -> String {
        format!("{self:?}")
    }
}

fn contiguous_rows(v: &View, what: &str) -> Result<u32, KernelError> {
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
    rows_spec(None, g, (table, "table"), index, (out, "output"))
}

/// The spec of an index-add node: inputs `[index, src]`, output `[dst]` (updated in place);
/// offsets of dst, index, src.
pub fn index_add_spec(
    node: &Node,
    g: &GatherNode,
    combine: Combine,
) -> Result<(GatherSpec, Vec<usize>), KernelError> {
    let (index, src, dst) = (&node.inputs[0], &node.inputs[1], &node.outputs[0]);
    rows_spec(
        Some(combine),
        g,
        (dst, "destination"),
        index,
        (src, "source"),
    )
}

/// The spec over a table, its indices and the rows moved (each view with its name for
/// errors), and the three views' offsets.
fn rows_spec(
    put: Option<Combine>,
    g: &GatherNode,
    (table, table_name): (&View, &str),
    index: &View,
    (rows, rows_name): (&View, &str),
) -> Result<(GatherSpec, Vec<usize>), KernelError> {
    index_ok(index)?;
    let spec = GatherSpec {
        add: put.is_some(),
        combine: put.unwrap_or_default(),
        dtype: table.dtype,
        index: index.dtype,
        row_len: g.row_len as u32,
        table_row_stride: contiguous_rows(table, table_name)?,
        rows_stride: contiguous_rows(rows, rows_name)?,
        count: g.count as u32,
        table_rows: g.rows as u32,
        check_rows: g.check_bounds.then_some(g.rows as u32),
        zero_table: put.is_some() && g.zero_table,
    };
    let offsets = [table, index, rows].map(|v| v.layout.offset).to_vec();
    Ok((spec, offsets))
}

fn index_ok(index: &View) -> Result<(), KernelError> {
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

/// Builds the gather kernel (a spec with `add` is built by [`super::index_add`]; [`super::rows`]
/// picks). Arguments: table, index, rows (output), then their element offsets.
pub fn build(spec: &GatherSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    let mut e = Emitter::new(name);
    let args = e.buffers_with_offsets(["table", "index", "rows"]);
    let isz = spec.index.size() as u32;
    let idx_smem = e.smem_alloc((CHUNK * isz / 4) as usize);
    if idx_smem as u64 + (CHUNK * isz) as u64 > chip.core.smem_bytes {
        return Err(KernelError::TooLarge(
            "index chunk does not fit SMEM".into(),
        ));
    }
    let g = Regs::new(spec, idx_smem);
    let esz = spec.dtype.size() as u32;
    for (k, (r, sz)) in [(g.t_base, esz), (g.i_base, isz), (g.r_base, esz)]
        .into_iter()
        .enumerate()
    {
        e.byte_offset(r, &args, k, sz);
    }
    e.smov(g.len, g.row_bytes as i32);
    e.smov(g.i, 0);
    e.smov(g.cnt, 0);
    let done = e.label();
    let top = e.here();
    e.scmp(CmpOp::Lt, g.t, g.i, spec.count as i32);
    e.brz(g.t, done);
    g.fetch_indices(&mut e, spec, args.slots[1]);
    g.copy_row(&mut e, spec, args.slots[0], args.slots[2]);
    e.sadd(g.i, g.i, 1);
    e.br(top);
    e.bind(done);
    e.smul(g.cnt, g.cnt, g.row_bytes as i32);
    e.sem_wait(Sem::n(1), g.cnt);
    Ok(e.finish()?)
}

/// The gather's registers and sizes.
struct Regs {
    t_base: SReg,
    i_base: SReg,
    r_base: SReg,
    /// Index number.
    i: SReg,
    /// Position of its index in SMEM.
    j: SReg,
    /// The index.
    idx: SReg,
    t: SReg,
    src: SReg,
    dst: SReg,
    /// Row bytes, the length of every row DMA.
    len: SReg,
    chunk_len: SReg,
    /// Row DMAs issued since the last wait.
    cnt: SReg,
    isz: u32,
    row_bytes: u32,
    idx_smem: u32,
}

impl Regs {
    fn new(spec: &GatherSpec, idx_smem: u32) -> Self {
        let s = SReg::n;
        Regs {
            t_base: s(1),
            i_base: s(2),
            r_base: s(3),
            i: s(4),
            j: s(5),
            idx: s(6),
            t: s(7),
            src: s(8),
            dst: s(9),
            len: s(10),
            chunk_len: s(11),
            cnt: s(12),
            isz: spec.index.size() as u32,
            row_bytes: spec.row_len * spec.dtype.size() as u32,
            idx_smem,
        }
    }

    /// Every [`CHUNK`] indices, the next chunk of indices into SMEM (waited for at once).
    fn fetch_indices(&self, e: &mut Emitter, spec: &GatherSpec, index: ArgSlot) {
        let (i, t, cl, isz) = (self.i, self.t, self.chunk_len, self.isz as i32);
        e.salu(SAluOp::RemU, t, i, CHUNK as i32);
        let no_chunk = e.label();
        e.brnz(t, no_chunk);
        // chunk_len = min(count - i, CHUNK) * isz
        e.ssub(cl, SReg::ZERO, i);
        e.sadd(cl, cl, spec.count as i32);
        e.salu(SAluOp::Min, cl, cl, CHUNK as i32);
        e.smul(cl, cl, isz);
        e.smul(self.src, i, isz);
        e.sadd(self.src, self.src, self.i_base);
        e.smov(self.dst, self.idx_smem as i32);
        e.dma(
            MemRef::smem(self.dst),
            MemRef::hbm(index, self.src),
            DmaShape::Len(cl),
            Sem::n(0),
        );
        e.sem_wait(Sem::n(0), cl);
        e.bind(no_chunk);
    }

    /// Row `idx` of the table to row `i` of the rows, waiting after every [`IN_FLIGHT`].
    fn copy_row(&self, e: &mut Emitter, spec: &GatherSpec, table: ArgSlot, rows: ArgSlot) {
        let esz = spec.dtype.size() as u32;
        let (i, j, idx, t, src, dst) = (self.i, self.j, self.idx, self.t, self.src, self.dst);
        // idx = indices[i % CHUNK] (the low word of an int64).
        e.salu(SAluOp::RemU, j, i, CHUNK as i32);
        e.smul(j, j, self.isz as i32);
        e.sld(idx, Addr::new(j, self.idx_smem as i32));
        // Table row idx, rows row i.
        e.smul(src, idx, (spec.table_row_stride * esz) as i32);
        e.sadd(src, src, self.t_base);
        if let Some(rows) = spec.check_rows {
            // An index outside [0, rows) (unsigned compare: negatives are huge) reads from the
            // last byte address instead, so the row DMA faults rather than reading other data.
            let ok = e.label();
            e.scmp(CmpOp::LtU, t, idx, rows as i32);
            e.brnz(t, ok);
            e.smov(src, -1);
            e.bind(ok);
        }
        e.smul(dst, i, (spec.rows_stride * esz) as i32);
        e.sadd(dst, dst, self.r_base);
        e.dma(
            MemRef::hbm(rows, dst),
            MemRef::hbm(table, src),
            DmaShape::Len(self.len),
            Sem::n(1),
        );
        e.sadd(self.cnt, self.cnt, 1);
        let no_wait = e.label();
        e.scmp(CmpOp::Lt, t, self.cnt, IN_FLIGHT as i32);
        e.brnz(t, no_wait);
        e.sem_wait(Sem::n(1), (IN_FLIGHT * self.row_bytes) as i32);
        e.smov(self.cnt, 0);
        e.bind(no_wait);
    }
}
