//! Data-dependent row movement: gathering table rows by index (`embedding`, `index_select`) and
//! adding rows into a table by index (their backward).
//!
//! Gathers: indices stream from HBM into SMEM in chunks; the scalar unit reads each one and
//! issues an HBM-to-HBM DMA for its row, up to [`IN_FLIGHT`] in flight (a sliding window). An index outside the table makes the
//! row DMA fault with the table's bounds. Index-add is [`super::index_add`].

use tpuemu_isa::ops::CmpOp;
use tpuemu_isa::{Addr, ArgSlot, ChipInfo, DmaShape, MemRef, Program, SReg, Sem};

use super::KernelError;
use crate::codegen::Emitter;
use crate::dtype::DType;
use crate::ir::{Combine, GatherNode, Node, View};

/// Indices per SMEM chunk.
const CHUNK: u32 = 4096;
/// Row DMAs in flight at most.
const IN_FLIGHT: u32 = 128;

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
///
/// The indices come in chunks of [`CHUNK`] (a loop over the full chunks, then the rest); within
/// a chunk the rows are issued [`UNROLL`] a loop trip with running addresses (about six scalar
/// instructions a row), and the window of rows in flight is checked once a trip.
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
    e.smov(g.cnt, 0);
    let (full, rest) = (spec.count / CHUNK, spec.count % CHUNK);
    if full > 0 {
        let l = e.begin_loop(g.c, g.t, full, 1);
        g.chunk(&mut e, spec, &args.slots, CHUNK);
        e.end_loop(l);
    }
    if rest > 0 {
        g.chunk(&mut e, spec, &args.slots, rest);
    }
    e.smul(g.cnt, g.cnt, g.row_bytes as i32);
    e.sem_wait(Sem::n(1), g.cnt);
    Ok(e.finish()?)
}

/// Rows issued per loop trip.
const UNROLL: u32 = 4;

/// The gather's registers and sizes.
struct Regs {
    t_base: SReg,
    i_base: SReg,
    /// The next output row's byte address (advanced a row at a time).
    r_base: SReg,
    /// Chunk number.
    c: SReg,
    /// Byte position of the trip's first index in the SMEM chunk.
    j: SReg,
    /// The index.
    idx: SReg,
    t: SReg,
    src: SReg,
    /// Row bytes, the length of every row DMA.
    len: SReg,
    chunk_len: SReg,
    /// Row DMAs in flight (issued and not yet waited for).
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
            c: s(4),
            j: s(5),
            idx: s(6),
            t: s(7),
            src: s(8),
            len: s(10),
            chunk_len: s(11),
            cnt: s(12),
            isz: spec.index.size() as u32,
            row_bytes: spec.row_len * spec.dtype.size() as u32,
            idx_smem,
        }
    }

    /// A chunk of `n` indices: into SMEM (waited for at once; `i_base` advances past them),
    /// then their rows.
    fn chunk(&self, e: &mut Emitter, spec: &GatherSpec, slots: &[ArgSlot], n: u32) {
        let bytes = (n * self.isz) as i32;
        e.smov(self.chunk_len, bytes);
        e.smov(self.j, self.idx_smem as i32);
        e.dma(
            MemRef::smem(self.j),
            MemRef::hbm(slots[1], self.i_base),
            DmaShape::Len(self.chunk_len),
            Sem::n(0),
        );
        e.sem_wait(Sem::n(0), self.chunk_len);
        e.sadd(self.i_base, self.i_base, bytes);
        let trips = n / UNROLL;
        if trips > 0 {
            let l = e.begin_loop(self.j, self.t, trips, (UNROLL * self.isz) as i32);
            for u in 0..UNROLL {
                self.copy_row(e, spec, slots, u);
            }
            self.window(e, UNROLL);
            e.end_loop(l);
        }
        let left = n % UNROLL;
        if left > 0 {
            e.smov(self.j, (trips * UNROLL * self.isz) as i32);
            for u in 0..left {
                self.copy_row(e, spec, slots, u);
            }
            self.window(e, left);
        }
    }

    /// Row `idx` of the table (the index `u` places after `j` in SMEM) to the next output row.
    fn copy_row(&self, e: &mut Emitter, spec: &GatherSpec, slots: &[ArgSlot], u: u32) {
        let esz = spec.dtype.size() as u32;
        let (idx, t, src) = (self.idx, self.t, self.src);
        // The low word of an int64 index.
        let at = (self.idx_smem + u * self.isz) as i32;
        e.sld(idx, Addr::new(self.j, at));
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
        e.dma(
            MemRef::hbm(slots[2], self.r_base),
            MemRef::hbm(slots[0], src),
            DmaShape::Len(self.len),
            Sem::n(1),
        );
        e.sadd(self.r_base, self.r_base, (spec.rows_stride * esz) as i32);
    }

    /// `k` more rows in flight: a sliding window, so once [`IN_FLIGHT`] are in flight the
    /// oldest `k` are waited for (any `k` rows' bytes) and the DMA engines never drain.
    fn window(&self, e: &mut Emitter, k: u32) {
        let (t, cnt) = (self.t, self.cnt);
        e.sadd(cnt, cnt, k as i32);
        let no_wait = e.label();
        e.scmp(CmpOp::Lt, t, cnt, IN_FLIGHT as i32);
        e.brnz(t, no_wait);
        e.sem_wait(Sem::n(1), (k * self.row_bytes) as i32);
        e.ssub(cnt, cnt, k as i32);
        e.bind(no_wait);
    }
}
