//! The tile kernel program: buffers, the prologue and the double-buffered tile loop.
//!
//! Every operand moves one tile per step with one multi-dimensional DMA (a descriptor for full
//! tiles, one for the tail; see [`super::plan`]). Inputs for tile `t + 1` are fetched while
//! tile `t` computes; outputs of tile `t` drain while tile `t + 1` computes: two VMEM buffers
//! per operand, the loop body unrolled for each.
//!
//! SMEM holds the loop state ([`super::cursor`]): each operand's base byte offset (from the
//! offset arguments), the load and store cursors (one counter per level), and the bytes each
//! buffer waits for.

use tpuemu_isa::ops::CmpOp;
use tpuemu_isa::{Addr, ChipInfo, Label, Program, SReg};

use super::body::{self, IndexCtx, RowsGeom, VOperand};
use super::plan::{Plan, choose_plan, descriptor, vmem_elems};
use super::spec::TileSpec;
use crate::codegen::{BufferArgs, Emitter, RegPool};
use crate::ir::POp;
use crate::kernels::{KernelError, sreg};

/// SMEM byte addresses of the loop state.
pub(super) struct Smem {
    /// Each operand's base byte offset.
    pub base_off: u32,
    /// The cursors: a counter per level.
    pub load_cnt: u32,
    pub store_cnt: u32,
    /// Bytes each input (output) buffer waits for.
    pub pend_in: u32,
    pub pend_out: u32,
}

/// The generator's scratch register (the cursors' address arithmetic uses it).
pub(super) const SCRATCH: SReg = SReg::n(15);

/// A tile kernel being generated.
pub(super) struct Gen<'a> {
    pub e: Emitter,
    pub pool: RegPool,
    pub spec: &'a TileSpec,
    pub plan: Plan,
    pub sm: Smem,
    /// VMEM buffers: [operand][parity].
    pub bufs: Vec<[i32; 2]>,
    /// Each operand's descriptors (SMEM address, bytes moved): full tiles and the tail.
    pub desc_full: Vec<(u32, u32)>,
    pub desc_tail: Vec<(u32, u32)>,
    vregs: u32,
}

impl Gen<'_> {
    /// The compute of one tile in buffers `parity`.
    pub(super) fn compute(&mut self, parity: usize) -> Result<(), KernelError> {
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
            self.pool.give_opt(tile_row);
            r
        } else {
            let elems = vmem_elems(spec, &self.plan, self.plan.block, false);
            let n_vregs = elems.div_ceil(1024) as u32;
            let flat = if uses_index(spec) {
                Some(self.tile_flat_index(spec.shape.len())?)
            } else {
                None
            };
            let r = body::dense(
                &mut self.e,
                &mut self.pool,
                &spec.prog,
                &ops,
                spec.inputs,
                n_vregs,
                self.vregs,
                flat.map(|flat_base| IndexCtx {
                    flat_base,
                    shape: &spec.orig_shape,
                }),
            );
            self.pool.give_opt(flat);
            r
        }
    }

    /// The loop state starts at zero (explicitly: linked into a whole-graph program, the kernel
    /// may find SMEM used by an earlier kernel); base byte offsets = offset argument * element
    /// size.
    fn prologue(&mut self, args: &BufferArgs) -> Result<(), KernelError> {
        for w in (self.sm.load_cnt..self.sm.pend_out + 8).step_by(4) {
            self.e.sst(SReg::ZERO, Addr::abs(w as i32));
        }
        let r = sreg(&mut self.pool)?;
        for (k, o) in self.spec.operands.iter().enumerate() {
            self.e.byte_offset(r, args, k, o.dtype.size() as u32);
            self.e
                .sst(r, Addr::abs((self.sm.base_off + 4 * k as u32) as i32));
        }
        self.pool.give(r);
        Ok(())
    }

    /// One turn of the tile loop in buffers `parity`: prefetch the next tile into the other
    /// buffers (unless this is the last), wait for this one's, compute, store, advance; leave
    /// for `exit` after the last tile.
    fn turn(
        &mut self,
        parity: usize,
        tile: SReg,
        total: u64,
        exit: Label,
    ) -> Result<(), KernelError> {
        let t = sreg(&mut self.pool)?;
        let skip = self.e.label();
        self.e
            .scmp(CmpOp::Lt, t, tile, total as i32 - 1)
            .brz(t, skip);
        self.pool.give(t);
        self.transfers(self.sm.load_cnt, 1 - parity, false)?;
        self.advance(self.sm.load_cnt)?;
        self.e.bind_join(skip);
        self.wait_pending(self.sm.pend_in + 4 * parity as u32, parity as u8)?;
        self.wait_pending(self.sm.pend_out + 4 * parity as u32, 2 + parity as u8)?;
        self.compute(parity)?;
        self.e.forget_constants();
        self.transfers(self.sm.store_cnt, parity, true)?;
        self.advance(self.sm.store_cnt)?;
        self.e.sadd(tile, tile, 1);
        let t = sreg(&mut self.pool)?;
        self.e.scmp(CmpOp::Lt, t, tile, total as i32).brz(t, exit);
        self.pool.give(t);
        Ok(())
    }
}

/// Whether the program reads coordinates (`Index` nodes).
pub(super) fn uses_index(spec: &TileSpec) -> bool {
    spec.prog
        .nodes
        .iter()
        .any(|n| matches!(n.op, POp::Index(_)))
}

/// Whether a rows-layout program reads coordinates of outer dims (other than size-1 ones).
pub fn uses_outer_index(spec: &TileSpec) -> bool {
    let start = body::row_start(&spec.orig_shape, spec.row_len());
    spec.prog.nodes.iter().any(|n| match n.op {
        POp::Index(d) => {
            let d = d as usize;
            d < start && spec.orig_shape.get(d) != Some(&1)
        }
        _ => false,
    })
}

/// VMEM: two buffers per operand, each rounded up to whole vector registers (4 KiB, so that
/// no load or store reaches a neighbour buffer).
fn buffers(spec: &TileSpec, plan: &Plan, chip: &ChipInfo) -> Result<Vec<[i32; 2]>, KernelError> {
    let mut bufs = Vec::new();
    let mut at: u64 = 0;
    for o in &spec.operands {
        let elems = vmem_elems(spec, plan, plan.block, o.per_row)
            .div_ceil(1024)
            .max(1)
            * 1024;
        let bytes = elems * o.dtype.size() as u64;
        bufs.push([at as i32, (at + bytes) as i32]);
        at += 2 * bytes;
    }
    if at > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(format!(
            "tile buffers need {at} bytes of VMEM, the core has {}",
            chip.core.vmem_bytes
        )));
    }
    Ok(bufs)
}

/// Generates the tile kernel for `spec` on a core of `chip`. Arguments: one buffer per operand
/// (inputs then outputs), then one scalar per operand: its storage offset in elements.
pub fn build(spec: &TileSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    if spec.prog.has_reductions() && spec.row_dims == 0 {
        return Err(KernelError::Unsupported(
            "reduction without row dims".into(),
        ));
    }
    // The flat index of Index nodes must refer to the original shape, which coalescing keeps in
    // row-major order; the coalesced shape's element count must equal it.
    let plan = choose_plan(spec, chip.core.vmem_bytes / 2)?;
    let nops = spec.operands.len();
    let nlev = plan.levels.len();
    let mut e = Emitter::new(name);
    let args = e.buffers_with_offsets((0..nops).map(|k| format!("t{k}")));
    // SMEM layout (bytes), after the argument words.
    let sm = Smem {
        base_off: e.smem_alloc(nops),
        load_cnt: e.smem_alloc(nlev),
        store_cnt: e.smem_alloc(nlev),
        pend_in: e.smem_alloc(2),
        pend_out: e.smem_alloc(2),
    };
    let bufs = buffers(spec, &plan, chip)?;
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
        vregs: chip.core.vregs,
    };
    let _ = g.pool.take_specific(SCRATCH);
    if total == 1 {
        g.single(&args, name)?;
        return Ok(g.e.finish()?);
    }
    g.prologue(&args)?;
    g.e.mark_begin(name);
    g.transfers(g.sm.load_cnt, 0, false)?;
    g.advance(g.sm.load_cnt)?;
    let tile = sreg(&mut g.pool)?; // tiles computed so far
    g.e.smov(tile, 0);
    let top = g.e.label();
    let exit = g.e.label();
    g.e.bind_join(top);
    for parity in 0..2 {
        g.turn(parity, tile, total, exit)?;
    }
    g.e.br(top);
    g.e.bind_join(exit);
    g.wait_pending(g.sm.pend_out, 2)?;
    g.wait_pending(g.sm.pend_out + 4, 3)?;
    g.e.mark_end();
    Ok(g.e.finish()?)
}
