//! A row epilogue ([`RowSpec`]): a reduction along the product's rows (cross-entropy on the
//! language-model head's logits) run on each finished output tile, which spans whole rows.
//! The product, as the elementwise epilogue computes it, stays in VMEM: the row program reads
//! it there with the tile kernel's rows body ([`body::rows`]), its other inputs are loaded
//! with the tile's epilogue inputs, and its outputs are stored chunk by chunk as a product's
//! would be.

use super::streamed::Step;
use super::{Ctx, RowSpec, Side, tile_desc};
use crate::codegen::PingPong;
use crate::kernels::tile::TileOperand;
use crate::kernels::tile::body::{self, RowsGeom, VOperand};
use crate::kernels::tile::program::uses_outer_index;
use crate::kernels::{KernelError, sreg};

/// VMEM bytes of an argument operand's buffer for tiles of `tm` rows of pitch `tn`.
pub(super) fn buffer_bytes(o: &TileOperand, tm: u32, tn: u32) -> u32 {
    let esz = o.dtype.size() as u32;
    if o.per_row { tm * esz } else { tm * tn * esz }
}

/// The DMA of rows `rows` of an operand (a tile of them, or one value per row) between HBM and
/// a VMEM buffer of row pitch `tn`.
fn desc(
    o: &TileOperand,
    rows: u32,
    n: u32,
    tn: u32,
    to_vmem: bool,
) -> tpuemu_isa::dma::DmaDescriptor {
    let esz = o.dtype.size() as u32;
    let (sm, sn) = (o.strides[0], o.strides[1]);
    if !o.per_row {
        tile_desc(esz, rows, n, sm, sn, tn, to_vmem)
    } else if sm == 1 {
        tile_desc(esz, 1, rows, 0, 1, rows, to_vmem)
    } else {
        tile_desc(esz, rows, 1, sm, 0, 1, to_vmem)
    }
}

/// The operands' places for rows `r0..` of a tile: the product in `product` (row pitch `tn`),
/// the others in `bufs` (in argument order).
fn places(r: &RowSpec, product: u32, bufs: &[u32], r0: u32, tn: u32) -> Vec<VOperand> {
    let mut args = bufs.iter();
    r.tile
        .operands
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let esz = o.dtype.size() as u32;
            let buf = if k == r.product {
                product
            } else {
                *args.next().expect("a buffer per argument operand")
            };
            let pitch = if o.per_row { 1 } else { tn };
            VOperand {
                base: (buf + r0 * pitch * esz) as i32,
                dtype: o.dtype,
            }
        })
        .collect()
}

/// The row program's inputs (but the product) for the `rm` rows of tile `st`, into `bufs`
/// (argument order), on `pending`'s buffer `cb`.
pub(super) fn load_inputs(
    cx: &mut Ctx,
    st: &Step,
    rm: u32,
    bufs: &[u32],
    cb: usize,
    pending: &mut PingPong,
) -> Result<(), KernelError> {
    let spec = cx.spec;
    let Some(r) = spec.rows.as_deref() else {
        return Ok(());
    };
    let (n, tn) = (spec.n, n_pitch(cx));
    let first = cx.slots.out0;
    let inputs: Vec<(usize, TileOperand)> = r
        .args()
        .enumerate()
        .filter(|(_, (k, _))| *k < r.tile.inputs)
        .map(|(j, (_, o))| (j, o.clone()))
        .collect();
    for (j, o) in inputs {
        let d = desc(&o, rm, n, tn, true);
        let off = st.i as i64 * o.strides[0] as i64 * o.dtype.size() as i64;
        let hbm = Side::Hbm {
            slot: first + j as u8,
            off,
        };
        cx.dma(Side::Vmem(bufs[j] as i32), hbm, &d, pending.sem(cb).index())?;
        pending.add(cb, d.bytes());
    }
    Ok(())
}

/// The row pitch of the tiles (the product's width rounded up to whole vector lanes).
fn n_pitch(cx: &Ctx) -> u32 {
    cx.spec.n.next_multiple_of(128)
}

/// Bytes the row program's outputs move for the `rm` rows of a tile.
pub(super) fn store_bytes(r: &RowSpec, rm: u32, n: u32, tn: u32) -> u64 {
    r.args()
        .filter(|(k, _)| *k >= r.tile.inputs)
        .map(|(_, o)| desc(o, rm, n, tn, false).bytes())
        .sum()
}

/// The row program over rows `r0..r0 + rows` of tile `st` (the product in `product`, the other
/// operands in `bufs`), then the stores of its outputs for those rows on semaphore `sem`.
pub(super) fn chunk(
    cx: &mut Ctx,
    st: &Step,
    (r0, rows): (u32, u32),
    product: u32,
    bufs: &[u32],
    sem: u8,
) -> Result<(), KernelError> {
    let spec = cx.spec;
    let Some(r) = spec.rows.as_deref() else {
        return Ok(());
    };
    let (n, tn) = (spec.n, n_pitch(cx));
    let ops = places(r, product, bufs, r0, tn);
    let g = RowsGeom {
        groups: rows.div_ceil(8),
        len: n,
        pitch: tn,
    };
    let tile_row = if uses_outer_index(&r.tile) {
        let reg = sreg(&mut cx.pool)?;
        cx.e.smov(reg, (st.i + r0) as i32);
        Some(reg)
    } else {
        None
    };
    body::rows(
        &mut cx.e,
        &mut cx.pool,
        &r.tile.prog,
        &ops,
        r.tile.inputs,
        g,
        cx.chip.core.vregs,
        &r.tile.orig_shape,
        tile_row,
    )?;
    cx.pool.give_opt(tile_row);
    cx.e.forget_constants();
    let first = cx.slots.out0;
    let outputs: Vec<(usize, TileOperand)> = r
        .args()
        .enumerate()
        .filter(|(_, (k, _))| *k >= r.tile.inputs)
        .map(|(j, (_, o))| (j, o.clone()))
        .collect();
    for (j, o) in outputs {
        let esz = o.dtype.size() as u32;
        let d = desc(&o, rows, n, tn, false);
        let off = (st.i + r0) as i64 * o.strides[0] as i64 * esz as i64;
        let hbm = Side::Hbm {
            slot: first + j as u8,
            off,
        };
        let vmem = Side::Vmem(ops_base(&ops, r, j));
        cx.dma(hbm, vmem, &d, sem)?;
    }
    Ok(())
}

/// The VMEM address of argument operand `j` in `ops` (every operand, the product among them).
fn ops_base(ops: &[VOperand], r: &RowSpec, j: usize) -> i32 {
    let k = if j < r.product { j } else { j + 1 };
    ops[k].base
}
