//! The tile kernel program: tiling, DMA descriptors, the double-buffered tile loop.
//!
//! A tile covers the trailing dims of the iteration space from some dim `f` on, plus a block of
//! `B` indices of dim `f - 1` (the last block may be shorter: the tail). The dims before
//! `f - 1` and the blocks of dim `f - 1` are the loop levels. Every operand moves one tile per
//! step with one multi-dimensional DMA (a descriptor for full tiles, one for the tail). Inputs
//! for tile `t + 1` are fetched while tile `t` computes; outputs of tile `t` drain while tile
//! `t + 1` computes: two VMEM buffers per operand, the loop body unrolled for each.
//!
//! SMEM holds the loop state: each operand's base byte offset (from the offset arguments), the
//! load and store cursors (one counter per level), and the bytes each buffer waits for.

use tpuemu_isa::dma::{DmaDescriptor, DmaDim, MAX_DMA_DIMS};
use tpuemu_isa::ops::{CmpOp, SAluOp};
use tpuemu_isa::{
    Addr, ArgSlot, ChipInfo, DmaShape, Instr, Label, MemRef, Program, SReg, SSrc, Sem,
};

use super::body::{self, IndexCtx, RowsGeom, VOperand};
use super::spec::TileSpec;
use crate::codegen::{Emitter, RegPool};
use crate::ir::POp;
use crate::kernels::KernelError;

/// A loop level: a dim, how many steps, and how many indices per step.
#[derive(Clone, Copy, Debug)]
struct Level {
    dim: usize,
    count: u32,
    step: u32,
}

/// The tiling of a spec.
#[derive(Clone, Debug)]
struct Plan {
    /// First fully covered dim.
    f: usize,
    /// Block of dim `f - 1` per tile (1 when `f == 0`).
    block: u32,
    /// Size of the last block (== block when it divides).
    tail: u32,
    /// Loop levels, outermost first.
    levels: Vec<Level>,
    /// Rows layout (with reductions) or dense.
    rows: bool,
    /// Row length and padded row length (rows layout).
    len: u32,
    pitch: u32,
}

impl Plan {
    fn tiles(&self) -> u64 {
        self.levels.iter().map(|l| l.count as u64).product()
    }
}

/// Elements of a full (per_row: per-row) operand tile with `block` indices of the blocked dim,
/// as laid out in VMEM.
fn vmem_elems(spec: &TileSpec, p: &Plan, block: u32, per_row: bool) -> u64 {
    let n = spec.shape.len();
    let outer_end = if p.rows { n - spec.row_dims } else { n };
    let inner: u64 = spec.shape[p.f.min(outer_end)..outer_end]
        .iter()
        .map(|d| *d as u64)
        .product();
    let rows = if p.f > 0 { block as u64 * inner } else { inner };
    if !p.rows {
        return rows;
    }
    let rows8 = rows.div_ceil(8) * 8;
    if per_row {
        rows8
    } else {
        rows8 * p.pitch as u64
    }
}

fn choose_plan(spec: &TileSpec, budget: u64) -> Result<Plan, KernelError> {
    let n = spec.shape.len();
    let rows = spec.row_dims > 0;
    let len: u64 = if rows { spec.row_len() as u64 } else { 1 };
    let pitch = if rows { len.div_ceil(128) * 128 } else { 1 };
    // Bytes of VMEM per unit of the tile, both buffers, summed over operands.
    let bytes_per = |elems: &dyn Fn(bool) -> u64| -> u64 {
        spec.operands
            .iter()
            .map(|o| 2 * elems(o.per_row) * o.dtype.size() as u64)
            .sum()
    };
    let outer_end = if rows { n - spec.row_dims } else { n };
    // Greedy: include trailing outer dims while the tile stays under the target.
    let target_elems: u64 = if rows { 8 } else { 1 };
    let per_row_unit = bytes_per(&|pr| if rows { if pr { 1 } else { pitch } } else { 1 });
    let max_units = (budget / per_row_unit.max(1)).max(1);
    // Aim for ~256 KiB per operand buffer, capped by the budget.
    let max_elem = spec
        .operands
        .iter()
        .map(|o| o.dtype.size() as u64)
        .max()
        .unwrap_or(4);
    let aim_units = ((256 * 1024 / max_elem) / if rows { pitch } else { 1 }).max(target_elems);
    let units_cap = max_units.min(aim_units.max(target_elems));
    if rows && max_units < 8 {
        return Err(KernelError::TooLarge(format!(
            "rows of {len} elements do not fit VMEM ({} bytes per 8 rows, budget {budget})",
            per_row_unit * 8
        )));
    }
    let row_desc_dims = if rows { spec.row_dims } else { 0 };
    let mut f = outer_end;
    let mut units: u64 = 1;
    let mut block: u64 = 1;
    loop {
        if f == 0 {
            break;
        }
        let d = spec.shape[f - 1] as u64;
        let dims_used = row_desc_dims + (outer_end - f) + 1;
        if units * d <= units_cap && dims_used < MAX_DMA_DIMS {
            units *= d;
            f -= 1;
            continue;
        }
        block = (units_cap / units).clamp(1, d);
        break;
    }
    let (f, block) = if f == 0 { (0, 1) } else { (f, block) };
    if f > 0 && row_desc_dims + (outer_end - f) + 1 > MAX_DMA_DIMS {
        return Err(KernelError::Unsupported(
            "tile needs more than 4 DMA dimensions".into(),
        ));
    }
    let mut levels: Vec<Level> = (0..f.saturating_sub(1))
        .map(|d| Level {
            dim: d,
            count: spec.shape[d] as u32,
            step: 1,
        })
        .collect();
    let mut tail = block as u32;
    if f > 0 {
        let d = spec.shape[f - 1] as u64;
        let count = d.div_ceil(block);
        tail = (d - (count - 1) * block) as u32;
        levels.push(Level {
            dim: f - 1,
            count: count as u32,
            step: block as u32,
        });
    }
    if levels.is_empty() {
        levels.push(Level {
            dim: 0,
            count: 1,
            step: 0,
        });
    }
    Ok(Plan {
        f,
        block: block as u32,
        tail,
        levels,
        rows,
        len: len as u32,
        pitch: pitch as u32,
    })
}

/// DMA descriptor moving one tile of operand `k` (`block` indices of the blocked dim), HBM to
/// VMEM (`to_vmem`) or back.
fn descriptor(spec: &TileSpec, p: &Plan, k: usize, block: u32, to_vmem: bool) -> DmaDescriptor {
    let o = &spec.operands[k];
    let esz = o.dtype.size() as i64;
    let n = spec.shape.len();
    let outer_end = if p.rows { n - spec.row_dims } else { n };
    // Tile dims, outermost first, with their VMEM strides (elements).
    let mut dims: Vec<(u32, i64, i64)> = Vec::new(); // (count, hbm stride, vmem stride)
    let first = p.f.saturating_sub(1);
    let tile_dims: Vec<usize> = (first..n)
        .filter(|d| !(o.per_row && *d >= outer_end))
        .collect();
    let mut vstride = vec![0i64; n];
    let mut acc: i64 = 1;
    for &d in tile_dims.iter().rev() {
        // The innermost outer dim steps over padded rows.
        if p.rows && d < outer_end && !o.per_row && (d + 1 == outer_end) {
            acc = p.pitch as i64;
        }
        vstride[d] = acc;
        let count = if d == first && p.f > 0 {
            block
        } else {
            spec.shape[d] as u32
        };
        acc *= count as i64;
    }
    for &d in &tile_dims {
        let count = if d == first && p.f > 0 {
            block
        } else {
            spec.shape[d] as u32
        };
        if count == 1 {
            continue;
        }
        dims.push((count, o.strides[d] as i64 * esz, vstride[d] * esz));
    }
    if dims.is_empty() {
        dims.push((1, 0, 0));
    }
    DmaDescriptor {
        elem_bytes: esz as u32,
        dims: dims
            .into_iter()
            .map(|(count, h, v)| {
                let (src, dst) = if to_vmem { (h, v) } else { (v, h) };
                DmaDim {
                    count,
                    src_stride: src as i32,
                    dst_stride: dst as i32,
                }
            })
            .collect(),
    }
}

/// SMEM layout of the loop state.
struct Smem {
    base_off: u32,
    load_cnt: u32,
    store_cnt: u32,
    pend_in: u32,
    pend_out: u32,
}

struct Gen<'a> {
    e: Emitter,
    pool: RegPool,
    spec: &'a TileSpec,
    plan: Plan,
    sm: Smem,
    /// VMEM buffers: [operand][parity].
    bufs: Vec<[i32; 2]>,
    desc_full: Vec<(u32, u32)>,
    desc_tail: Vec<(u32, u32)>,
    vregs: u32,
}

fn reg(pool: &mut RegPool) -> Result<SReg, KernelError> {
    pool.take()
        .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
}

impl Gen<'_> {
    fn bind(&mut self, l: Label) {
        self.e.b.bind(l);
        self.e.forget_constants();
    }

    /// Loads the level counters of a cursor into registers.
    fn counters(&mut self, cursor: u32) -> Result<Vec<SReg>, KernelError> {
        let mut regs = Vec::new();
        for l in 0..self.plan.levels.len() {
            let r = reg(&mut self.pool)?;
            self.e.push(Instr::SLoad {
                dst: r,
                addr: Addr::abs((cursor + 4 * l as u32) as i32),
            });
            regs.push(r);
        }
        Ok(regs)
    }

    /// `dst` = 1 when the cursor is on the tail block, else 0.
    fn is_tail(&mut self, cnt: &[SReg]) -> Result<Option<SReg>, KernelError> {
        if self.plan.tail == self.plan.block || self.plan.f == 0 {
            return Ok(None);
        }
        let last = self.plan.levels.len() - 1;
        let r = reg(&mut self.pool)?;
        self.e.push(Instr::SCmp {
            op: CmpOp::Eq,
            dst: r,
            a: cnt[last],
            b: SSrc::Imm(self.plan.levels[last].count as i32 - 1),
        });
        Ok(Some(r))
    }

    /// `dst` = `full` or `tail` as `is_tail` says.
    fn pick(&mut self, dst: SReg, full: i32, tail: i32, is_tail: Option<SReg>) {
        self.e.b.smov(dst, full);
        if let Some(t) = is_tail
            && full != tail
        {
            self.e.push(Instr::SAlu {
                op: SAluOp::Mul,
                dst: SReg::n(15),
                a: t,
                b: SSrc::Imm(tail - full),
            });
            self.e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst,
                a: dst,
                b: SSrc::Reg(SReg::n(15)),
            });
        }
    }

    /// Byte offset of operand `k`'s tile at the cursor.
    fn offset(&mut self, dst: SReg, k: usize, cnt: &[SReg]) {
        let o = &self.spec.operands[k];
        let esz = o.dtype.size() as i64;
        self.e.push(Instr::SLoad {
            dst,
            addr: Addr::abs((self.sm.base_off + 4 * k as u32) as i32),
        });
        for (l, lv) in self.plan.levels.iter().enumerate() {
            let step = o.strides[lv.dim] as i64 * lv.step as i64 * esz;
            if step == 0 {
                continue;
            }
            self.e.push(Instr::SAlu {
                op: SAluOp::Mul,
                dst: SReg::n(15),
                a: cnt[l],
                b: SSrc::Imm(step as i32),
            });
            self.e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst,
                a: dst,
                b: SSrc::Reg(SReg::n(15)),
            });
        }
    }

    /// DMAs of every input (or output) operand for the tile at a cursor.
    fn transfers(&mut self, cursor: u32, parity: usize, outputs: bool) -> Result<(), KernelError> {
        let cnt = self.counters(cursor)?;
        let tail = self.is_tail(&cnt)?;
        let (off, desc) = (reg(&mut self.pool)?, reg(&mut self.pool)?);
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
            self.e.push(Instr::Dma {
                dst,
                src,
                shape: DmaShape::Desc(desc),
                sem,
                remote: None,
            });
        }
        // Record what the buffer waits for.
        let pend = if outputs {
            self.sm.pend_out
        } else {
            self.sm.pend_in
        } + 4 * parity as u32;
        self.pick(off, full_bytes as i32, tail_bytes as i32, tail);
        self.e.push(Instr::SStore {
            src: off,
            addr: Addr::abs(pend as i32),
        });
        for r in cnt.into_iter().chain([off, desc]).chain(tail) {
            self.pool.give(r);
        }
        Ok(())
    }

    /// Advances a cursor by one tile (innermost level first).
    fn advance(&mut self, cursor: u32) -> Result<(), KernelError> {
        let (c, t) = (reg(&mut self.pool)?, reg(&mut self.pool)?);
        let done = self.e.b.label();
        for (l, lv) in self.plan.levels.clone().iter().enumerate().rev() {
            let at = (cursor + 4 * l as u32) as i32;
            self.e.push(Instr::SLoad {
                dst: c,
                addr: Addr::abs(at),
            });
            self.e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst: c,
                a: c,
                b: SSrc::Imm(1),
            });
            self.e.push(Instr::SCmp {
                op: CmpOp::Lt,
                dst: t,
                a: c,
                b: SSrc::Imm(lv.count as i32),
            });
            let wrap = self.e.b.label();
            self.e.b.brz(t, wrap);
            self.e.push(Instr::SStore {
                src: c,
                addr: Addr::abs(at),
            });
            self.e.b.br(done);
            self.bind(wrap);
            self.e.push(Instr::SStore {
                src: SReg::ZERO,
                addr: Addr::abs(at),
            });
        }
        self.bind(done);
        self.pool.give(c);
        self.pool.give(t);
        Ok(())
    }

    fn wait_pending(&mut self, addr: u32, sem: u8) -> Result<(), KernelError> {
        let r = reg(&mut self.pool)?;
        self.e.push(Instr::SLoad {
            dst: r,
            addr: Addr::abs(addr as i32),
        });
        self.e.push(Instr::SemWait {
            sem: Sem::n(sem),
            amount: SSrc::Reg(r),
        });
        self.e.push(Instr::SStore {
            src: SReg::ZERO,
            addr: Addr::abs(addr as i32),
        });
        self.pool.give(r);
        Ok(())
    }

    /// A new register with the flat index of the tile's first element (`end` = all dims) or, in
    /// the rows layout, of its first row (`end` = the outer dims), from the store cursor.
    fn tile_flat_index(&mut self, end: usize) -> Result<SReg, KernelError> {
        let cnt = self.counters(self.sm.store_cnt)?;
        let flat = reg(&mut self.pool)?;
        self.e.b.smov(flat, 0);
        for (l, lv) in self.plan.levels.clone().iter().enumerate() {
            let inner: i64 = self.spec.shape[(lv.dim + 1).min(end)..end]
                .iter()
                .map(|d| *d as i64)
                .product();
            let step = inner * lv.step as i64;
            if step != 0 {
                self.e.push(Instr::SAlu {
                    op: SAluOp::Mul,
                    dst: SReg::n(15),
                    a: cnt[l],
                    b: SSrc::Imm(step as i32),
                });
                self.e.push(Instr::SAlu {
                    op: SAluOp::Add,
                    dst: flat,
                    a: flat,
                    b: SSrc::Reg(SReg::n(15)),
                });
            }
        }
        for r in cnt {
            self.pool.give(r);
        }
        Ok(flat)
    }

    /// The compute of one tile in buffers `parity`.
    fn compute(&mut self, parity: usize) -> Result<(), KernelError> {
        let ops: Vec<VOperand> = self
            .spec
            .operands
            .iter()
            .enumerate()
            .map(|(k, o)| VOperand {
                base: self.bufs[k][parity],
                dtype: o.dtype,
            })
            .collect();
        let spec = self.spec;
        if self.plan.rows {
            let rows = vmem_elems(spec, &self.plan, self.plan.block, true);
            let g = RowsGeom {
                groups: (rows / 8) as u32,
                len: self.plan.len,
                pitch: self.plan.pitch,
            };
            // Row coordinates of outer dims (`Index` nodes) count from the tile's first row.
            let tile_row = if uses_outer_index(spec) {
                Some(self.tile_flat_index(spec.shape.len() - spec.row_dims)?)
            } else {
                None
            };
            let r = body::rows(
                &mut self.e,
                &mut self.pool,
                &spec.prog,
                &ops,
                spec.inputs,
                g,
                self.vregs,
                &spec.orig_shape,
                tile_row,
            );
            if let Some(t) = tile_row {
                self.pool.give(t);
            }
            r
        } else {
            let elems = vmem_elems(spec, &self.plan, self.plan.block, false);
            let n_vregs = elems.div_ceil(1024) as u32;
            if uses_index(spec) {
                let flat = self.tile_flat_index(spec.shape.len())?;
                let r = body::dense(
                    &mut self.e,
                    &mut self.pool,
                    &spec.prog,
                    &ops,
                    spec.inputs,
                    n_vregs,
                    self.vregs,
                    Some(IndexCtx {
                        flat_base: flat,
                        shape: &spec.orig_shape,
                    }),
                );
                self.pool.give(flat);
                r
            } else {
                body::dense(
                    &mut self.e,
                    &mut self.pool,
                    &spec.prog,
                    &ops,
                    spec.inputs,
                    n_vregs,
                    self.vregs,
                    None,
                )
            }
        }
    }
}

/// Whether the program reads coordinates (`Index` nodes).
fn uses_index(spec: &TileSpec) -> bool {
    spec.prog
        .nodes
        .iter()
        .any(|n| matches!(n.op, POp::Index(_)))
}

/// Whether a rows-layout program reads coordinates of outer dims (other than size-1 ones).
fn uses_outer_index(spec: &TileSpec) -> bool {
    let start = body::row_start(&spec.orig_shape, spec.row_len());
    spec.prog.nodes.iter().any(|n| match n.op {
        POp::Index(d) => {
            let d = d as usize;
            d < start && spec.orig_shape.get(d) != Some(&1)
        }
        _ => false,
    })
}

/// Generates the tile kernel for `spec` on a core of `chip`. Arguments: one buffer per operand
/// (inputs then outputs), then one scalar per operand: its storage offset in elements.
pub fn build(spec: &TileSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    let core = &chip.core;
    if spec.prog.has_reductions() && spec.row_dims == 0 {
        return Err(KernelError::Unsupported(
            "reduction without row dims".into(),
        ));
    }
    // The flat index of Index nodes must refer to the original shape, which coalescing keeps in
    // row-major order; the coalesced shape's element count must equal it.
    let budget = core.vmem_bytes / 2;
    let plan = choose_plan(spec, budget)?;
    // SMEM layout (bytes), after the argument words.
    let nops = spec.operands.len() as u32;
    let nlev = plan.levels.len() as u32;
    let mut e = Emitter::new(name);
    for k in 0..nops {
        e.b.buffer(format!("t{k}"));
    }
    for k in 0..nops {
        e.b.scalar(format!("off{k}"));
    }
    let base_off = e.b.smem_alloc(nops as usize);
    let load_cnt = e.b.smem_alloc(nlev as usize);
    let store_cnt = e.b.smem_alloc(nlev as usize);
    let pend_in = e.b.smem_alloc(2);
    let pend_out = e.b.smem_alloc(2);
    let sm = Smem {
        base_off,
        load_cnt,
        store_cnt,
        pend_in,
        pend_out,
    };

    // VMEM: two buffers per operand, each rounded up to whole vector registers (4 KiB).
    let mut bufs = Vec::new();
    let mut at: u64 = 0;
    for o in &spec.operands {
        // Whole vector registers' worth, so that no load or store reaches a neighbour buffer.
        let elems = vmem_elems(spec, &plan, plan.block, o.per_row)
            .div_ceil(1024)
            .max(1)
            * 1024;
        let bytes = elems * o.dtype.size() as u64;
        bufs.push([at as i32, (at + bytes) as i32]);
        at += 2 * bytes;
    }
    if at > core.vmem_bytes {
        return Err(KernelError::TooLarge(format!(
            "tile buffers need {at} bytes of VMEM, the core has {}",
            core.vmem_bytes
        )));
    }
    let mut desc_full = Vec::new();
    let mut desc_tail = Vec::new();
    for (k, o) in spec.operands.iter().enumerate() {
        let df = descriptor(spec, &plan, k, plan.block, !o.output);
        let dt = descriptor(spec, &plan, k, plan.tail, !o.output);
        desc_full.push((e.descriptor(&df), df.bytes() as u32));
        desc_tail.push((e.descriptor(&dt), dt.bytes() as u32));
    }
    let total = plan.tiles();
    if total > i32::MAX as u64 {
        return Err(KernelError::TooLarge("too many tiles".into()));
    }
    let mut g = Gen {
        e,
        pool: RegPool::default(),
        spec,
        plan,
        sm,
        bufs,
        desc_full,
        desc_tail,
        vregs: core.vregs,
    };
    // s15 is the generator's scratch register.
    let _ = g.pool.take_specific(SReg::n(15));

    // Prologue: the loop state starts at zero (explicitly: linked into a whole-graph program, the
    // kernel may find SMEM used by an earlier kernel).
    for w in (g.sm.load_cnt..g.sm.pend_out + 8).step_by(4) {
        g.e.push(Instr::SStore {
            src: SReg::ZERO,
            addr: Addr::abs(w as i32),
        });
    }
    // Base byte offsets = offset argument * element size.
    let r = reg(&mut g.pool)?;
    for (k, o) in spec.operands.iter().enumerate() {
        g.e.push(Instr::SLoad {
            dst: r,
            addr: Addr::abs(4 * (nops as i32 + k as i32)),
        });
        g.e.push(Instr::SAlu {
            op: SAluOp::Mul,
            dst: r,
            a: r,
            b: SSrc::Imm(o.dtype.size() as i32),
        });
        g.e.push(Instr::SStore {
            src: r,
            addr: Addr::abs((g.sm.base_off + 4 * k as u32) as i32),
        });
    }
    g.pool.give(r);
    g.e.b.mark_begin(name);
    g.transfers(g.sm.load_cnt, 0, false)?;
    g.advance(g.sm.load_cnt)?;
    let tile = reg(&mut g.pool)?; // tiles computed so far
    g.e.b.smov(tile, 0);
    let top = g.e.b.label();
    let exit = g.e.b.label();
    g.bind(top);
    for parity in 0..2 {
        // Prefetch the next tile.
        let t = reg(&mut g.pool)?;
        let skip = g.e.b.label();
        g.e.push(Instr::SCmp {
            op: CmpOp::Lt,
            dst: t,
            a: tile,
            b: SSrc::Imm(total as i32 - 1),
        });
        g.e.b.brz(t, skip);
        g.pool.give(t);
        g.transfers(g.sm.load_cnt, 1 - parity, false)?;
        g.advance(g.sm.load_cnt)?;
        g.bind(skip);
        g.wait_pending(g.sm.pend_in + 4 * parity as u32, parity as u8)?;
        g.wait_pending(g.sm.pend_out + 4 * parity as u32, 2 + parity as u8)?;
        g.compute(parity)?;
        g.e.forget_constants();
        g.transfers(g.sm.store_cnt, parity, true)?;
        g.advance(g.sm.store_cnt)?;
        g.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: tile,
            a: tile,
            b: SSrc::Imm(1),
        });
        let t = reg(&mut g.pool)?;
        g.e.push(Instr::SCmp {
            op: CmpOp::Lt,
            dst: t,
            a: tile,
            b: SSrc::Imm(total as i32),
        });
        g.e.b.brz(t, exit);
        g.pool.give(t);
    }
    g.e.b.br(top);
    g.bind(exit);
    g.wait_pending(g.sm.pend_out, 2)?;
    g.wait_pending(g.sm.pend_out + 4, 3)?;
    g.e.b.mark_end();
    Ok(g.e.finish()?)
}
