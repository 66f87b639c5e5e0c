//! The rows layout: reductions along rows of 8 sublanes, in phases (see the [body
//! docs](super)).
//!
//! - this module: the geometry, the scalar registers, the loop over groups of 8 rows and the
//!   per-row values of each phase;
//! - [`phase`]: one phase's chunk loop over the row;
//! - [`chunk`]: the body of that loop;
//! - [`pipeline`]: that loop software-pipelined, where the chunk feeds the transcendental unit;
//! - [`reduce`]: accumulators and the cross-lane finish of reductions;
//! - [`index`]: coordinates of the row and outer dims.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::IotaKind;
use tpuemu_isa::{Addr, MReg, SReg, VReg};

use super::{Ctx, VOperand, store};
use crate::codegen::{Emitter, RegPool};
use crate::ir::{POp, PRef, Prog};
use crate::kernels::{KernelError, sreg};

mod chunk;
mod index;
mod phase;
mod pipeline;
mod reduce;

/// Geometry of the rows layout.
#[derive(Clone, Copy, Debug)]
pub struct RowsGeom {
    /// Groups of 8 rows in the tile.
    pub groups: u32,
    /// Row length.
    pub len: u32,
    /// Padded row length (a multiple of 128).
    pub pitch: u32,
}

/// m1 masks the valid lanes of a row's last chunk.
const TAIL_MASK: MReg = MReg::n(1);

/// Phase in which each node's value is first available (see the module docs).
fn phases(prog: &Prog) -> Vec<u32> {
    let mut ph = vec![0u32; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        let a = super::args(&n.op)
            .iter()
            .map(|a| ph[*a as usize])
            .max()
            .unwrap_or(0);
        ph[i] = match n.op {
            POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_) => a + 1,
            _ => a,
        };
    }
    ph
}

/// See [`Rows::done_after`].
fn done_after(prog: &Prog, ph: &[u32]) -> Vec<Option<u32>> {
    let mut done: Vec<Option<u32>> = ph.iter().map(|p| Some(*p)).collect();
    for (i, n) in prog.nodes.iter().enumerate() {
        for a in super::args(&n.op) {
            let a = a as usize;
            done[a] = if n.per_row {
                done[a].map(|q| q.max(ph[i]))
            } else {
                None
            };
        }
    }
    for (i, n) in prog.nodes.iter().enumerate() {
        if !n.per_row {
            done[i] = None;
        }
    }
    done
}

/// The first dim of the row in `shape`: the shortest suffix of dims holding `len` elements
/// (size-1 dims left out of it have coordinate 0 either way).
pub fn row_start(shape: &[usize], len: usize) -> usize {
    let mut k = shape.len();
    let mut n = 1usize;
    while k > 0 && n < len {
        k -= 1;
        n *= shape[k];
    }
    k
}

/// The scalar registers of the operands of one element size.
#[derive(Clone, Copy, Debug)]
struct SizeRegs {
    esz: u32,
    /// Byte offset of the group's first full row.
    full: SReg,
    /// Byte offset of the group's first per-row value.
    row: SReg,
    /// Address of the current column chunk.
    chunk: SReg,
    /// Sublane strides (constants): a padded full row, one per-row value.
    sub_full: SReg,
    sub_row: SReg,
}

/// What the whole body shares.
struct Rows {
    ph: Vec<u32>,
    /// For a per-row value read only by per-row nodes (and maybe stored as an output): the
    /// last phase whose per-row step reads or stores it; `None` when a full node reads it (the
    /// chunk loops need it to the group's end).
    done_after: Vec<Option<u32>>,
    /// The last node reading each value.
    last_reader: Vec<Option<usize>>,
    g: RowsGeom,
    sizes: Vec<SizeRegs>,
    /// Column chunks of 128 per row, and the length of the last.
    nchunks: u32,
    tail: u32,
}

/// What one phase's chunk loop computes.
struct Phase {
    p: u32,
    /// Element sizes whose chunk address registers the phase's chunks use.
    sizes: Vec<u32>,
    /// Reductions of phase-`p` values (available in phase `p + 1`).
    reds: Vec<PRef>,
    /// Full outputs of phase `p`: (output index, node).
    full_outs: Vec<(usize, PRef)>,
    accs: Vec<reduce::Acc>,
    /// The lane coordinate of the chunk (for coordinates and arg reductions).
    colidx: Option<VReg>,
    /// The chunk loop's stages when it is software-pipelined.
    pipe: Option<pipeline::Pipe>,
}

impl Rows {
    fn regs(&self, esz: u32) -> SizeRegs {
        *self
            .sizes
            .iter()
            .find(|x| x.esz == esz)
            .expect("register per size")
    }

    /// Address of per-row operand `o` of the group, and its access (one value per sublane,
    /// broadcast along the lanes).
    fn per_row(&self, o: VOperand) -> (Addr, VAccess) {
        let sr = self.regs(o.dtype.size() as u32);
        (
            Addr::new(sr.row, o.base),
            VAccess::rows(sr.sub_row).with_lane_stride(SReg::ZERO),
        )
    }

    /// Per-row inputs: loaded once per group, pinned.
    fn load_per_row_inputs(&self, cx: &mut Ctx) -> Result<(), KernelError> {
        for (i, n) in cx.prog.nodes.iter().enumerate() {
            if let POp::Input(k) = n.op
                && n.per_row
            {
                let o = cx.ops[k as usize];
                let v = cx.va.take()?;
                let (at, access) = self.per_row(o);
                cx.e.vld(o.dtype.mem(), v, at, access);
                crate::kernels::tile::vexpr::after_load(cx.e, o.dtype, v);
                cx.bind(i as PRef, v);
                cx.pinned.push(i as PRef);
            }
        }
        Ok(())
    }

    /// The per-row values of phase `phase` computed from per-row values (reductions come from
    /// the chunk loops), and the per-row outputs then available.
    fn per_row_step(&self, cx: &mut Ctx, phase: u32) -> Result<(), KernelError> {
        let prog = cx.prog;
        for (i, n) in prog.nodes.iter().enumerate() {
            let r = i as PRef;
            if n.per_row
                && self.ph[i] == phase
                && !cx.regs.contains_key(&r)
                && !matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_))
            {
                let v = cx.emit_elementwise(r)?;
                cx.bind(r, v);
                cx.pinned.push(r);
                // Operands this was the last reader of go back at once (a long per-row chain
                // holds two registers, not one per link).
                for a in super::args(&n.op) {
                    let a_ = a as usize;
                    if self.last_reader[a_] == Some(i)
                        && self.done_after[a_].is_some_and(|q| q <= phase)
                        && !prog.outputs.contains(&a)
                        && cx.pinned.contains(&a)
                    {
                        cx.drop_value(a);
                        cx.pinned.retain(|p| *p != a);
                    }
                }
            }
        }
        for (k, o) in prog.outputs.iter().enumerate() {
            if prog.node(*o).per_row && self.ph[*o as usize] == phase {
                let op = cx.ops[cx.inputs + k];
                let (at, access) = self.per_row(op);
                store(cx, *o, op, at, access)?;
            }
        }
        // Values no full node and no later per-row step reads give their registers back to
        // the chunk loops (the unroll counts free registers).
        let (dead, keep): (Vec<PRef>, Vec<PRef>) = cx
            .pinned
            .iter()
            .partition(|r| self.done_after[**r as usize].is_some_and(|q| q <= phase));
        for r in dead {
            cx.drop_value(r);
        }
        cx.pinned = keep;
        Ok(())
    }

    /// Frees the group's values and moves every offset to the next group.
    fn next_group(&self, cx: &mut Ctx) {
        for p in cx.pinned.clone() {
            cx.drop_value(p);
        }
        cx.pinned.clear();
        for sr in &self.sizes {
            cx.e.sadd(sr.full, sr.full, (8 * self.g.pitch * sr.esz) as i32);
            cx.e.sadd(sr.row, sr.row, (8 * sr.esz) as i32);
        }
        if let Some(base) = cx.row_base {
            cx.e.sadd(base, base, 8);
        }
    }
}

/// The rows body: all groups of the tile, every phase. `orig_shape` is the node's iteration
/// shape before coalescing (`Index` nodes refer to its dims); `tile_row` holds the flat index
/// (over the outer dims) of the tile's first row, for coordinates of outer dims (the body
/// advances it).
#[allow(clippy::too_many_arguments)]
pub fn rows(
    e: &mut Emitter,
    pool: &mut RegPool,
    prog: &Prog,
    ops: &[VOperand],
    inputs: usize,
    g: RowsGeom,
    vregs: u32,
    orig_shape: &[usize],
    tile_row: Option<SReg>,
) -> Result<(), KernelError> {
    let ph = phases(prog);
    let max_phase = ph.iter().copied().max().unwrap_or(0);
    // Registers: group counter, test, and per element size: the group's full-row offset and
    // per-row offset, the chunk address, and the strides (constants).
    let gcount = sreg(pool)?;
    let test = sreg(pool)?;
    let mut esizes: Vec<u32> = ops.iter().map(|o| o.dtype.size() as u32).collect();
    esizes.sort_unstable();
    esizes.dedup();
    let mut taken = Vec::new();
    for _ in &esizes {
        taken.push((sreg(pool)?, sreg(pool)?, sreg(pool)?));
    }
    let sizes: Vec<SizeRegs> = esizes
        .iter()
        .zip(taken)
        .map(|(&esz, (full, row, chunk))| SizeRegs {
            esz,
            full,
            row,
            chunk,
            sub_full: e.konst((g.pitch * esz) as i32),
            sub_row: e.konst(esz as i32),
        })
        .collect();
    let nchunks = g.pitch / 128;
    let r = Rows {
        done_after: done_after(prog, &ph),
        last_reader: {
            let mut last = vec![None; prog.nodes.len()];
            for (i, n) in prog.nodes.iter().enumerate() {
                for a in super::args(&n.op) {
                    last[a as usize] = Some(i);
                }
            }
            last
        },
        ph,
        g,
        sizes,
        nchunks,
        tail: g.len - (nchunks - 1) * 128,
    };
    let mut cx = Ctx::new(e, prog, ops, inputs, vregs);
    cx.orig_shape = orig_shape;
    cx.row_start = row_start(orig_shape, g.len as usize);
    cx.row_base = tile_row;
    if r.tail < 128 {
        let iota = cx.va.take()?;
        cx.e.mask_below(TAIL_MASK, iota, IotaKind::Lane, r.tail);
        cx.va.give(iota);
    }
    for sr in &r.sizes {
        cx.e.smov(sr.full, 0);
        cx.e.smov(sr.row, 0);
    }
    let groups = cx.e.begin_loop(gcount, test, g.groups, 1);
    // Constants: pinned for the group.
    cx.pin_constants()?;
    r.load_per_row_inputs(&mut cx)?;
    r.per_row_step(&mut cx, 0)?;
    for p in 0..=max_phase {
        r.phase(&mut cx, pool, test, p)?;
    }
    r.next_group(&mut cx);
    cx.e.end_loop(groups);
    for sr in r.sizes {
        pool.give(sr.full);
        pool.give(sr.row);
        pool.give(sr.chunk);
    }
    pool.give(gcount);
    pool.give(test);
    Ok(())
}
