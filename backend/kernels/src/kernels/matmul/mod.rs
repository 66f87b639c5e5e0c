//! The matrix-unit kernel: `out[b] = epilogue(A[b] @ W[b], extras...)`, batched, with any
//! operand strides.
//!
//! Schedules:
//! - **Streamed** (TPU-like, [`streamed`]): output tiles of `tm x tn` accumulate in VMEM while
//!   K streams through in `tk` slices; A and W slices are double-buffered (the next slice's DMA
//!   overlaps the current matmuls) and so are output tiles (one drains while the next
//!   accumulates). Within a slice every `R x C` weight tile is loaded into a matrix unit, all
//!   rows of the A slice stream through it, and the f32 results pop into the output tile,
//!   accumulating (`mxu.pop.acc`). Weight tiles are dealt to the units by output column, so
//!   each unit owns its columns and accumulates in K order.
//! - **Resident** (SCALE-Sim parity, [`resident`]): all of A and W in VMEM first, then every
//!   fold in turn.
//!
//! Operand access: an operand whose inner stride is 1 moves in rows; one whose outer stride is
//! 1 is loaded as its transpose and fed with the transposing `mxu.lw.t` / `mxu.mm.t`; anything
//! else is gathered element by element (correct, slow on HBM).
//!
//! The epilogue (bias, scaling, activations fused by DeferAndFuse, and the conversion to the
//! output dtype) runs on each finished output tile in VMEM with the tile kernel's vector code
//! ([`drain`]); a row epilogue (a reduction along the product's rows) runs there too, on tiles
//! of whole rows, the product never stored ([`rows`]). A product pair (`A @ B` beside
//! `A^T @ C`, a linear layer's backward) is one streamed schedule with a second product folded
//! beside it ([`pair`]).

use tpuemu_isa::dma::DmaDescriptor;
use tpuemu_isa::ops::{MxuFmt, Precision};
use tpuemu_isa::{Addr, ChipInfo, DmaShape, MemRef, Mxu, Program, SReg, Sem};

use super::KernelError;
use crate::codegen::{BufferArgs, Emitter, RegPool, hbm_vmem_desc};
use crate::dtype::DType;

mod drain;
mod pair;
mod plan;
mod resident;
mod rows;
mod spec;
mod streamed;

pub use pair::pays as pair_pays;
pub use plan::{MatPlan, estimate_seconds, plan};
pub use spec::{Access, MatOperand, MatSpec, RowSpec, is_plain_epilogue, spec_of};

/// Semaphores.
const SEM_LOAD: u8 = 0; // + parity: A and W slices
const SEM_STORE: u8 = 2; // + parity: output tiles
const SEM_EXTRA: u8 = 4; // + parity: epilogue inputs

/// The argument slots of the product being emitted: A, W, its first epilogue input and its
/// first output (the other inputs and outputs follow each).
#[derive(Clone, Copy, Debug)]
struct Slots {
    a: u8,
    w: u8,
    x0: u8,
    out0: u8,
}

impl Slots {
    /// A one-product kernel's: A, W, the extras, the outputs.
    fn of(spec: &MatSpec) -> Self {
        Slots {
            a: 0,
            w: 1,
            x0: 2,
            out0: 2 + spec.extras.len() as u8,
        }
    }
}

/// A kernel being generated.
struct Ctx<'a> {
    e: Emitter,
    pool: RegPool,
    /// The product being emitted (a pair's kernel switches between its two).
    spec: &'a MatSpec,
    /// Its argument slots.
    slots: Slots,
    chip: &'a ChipInfo,
    /// Where each argument's base byte offset is, by slot.
    base: Vec<Base>,
    /// The buffer arguments (their offset arguments, for [`Base::Arg`]).
    args: BufferArgs,
    scratch: SReg,
}

/// Where an argument's base byte offset is: in a register for the whole kernel, or computed
/// from its offset argument at each use (a row epilogue's operands: its rows body needs the
/// registers).
#[derive(Clone, Copy, Debug)]
enum Base {
    Reg(SReg),
    Arg { esz: u32 },
}

/// A DMA side: HBM through an argument slot at a tile offset, or VMEM at an address.
#[derive(Clone, Copy)]
enum Side {
    Hbm { slot: u8, off: i64 },
    Vmem(i32),
}

/// A weight tile in VMEM: address, K rows, N columns, row stride in bytes, stored transposed.
type WTile = (u32, u32, u32, u32, bool);
/// An LHS block in VMEM: address, rows, row stride in bytes, stored transposed.
type ATile = (u32, u32, u32, bool);

impl Ctx<'_> {
    /// A strided copy described by `desc` from `src` to `dst`, on semaphore `sem`.
    fn dma(
        &mut self,
        dst: Side,
        src: Side,
        desc: &DmaDescriptor,
        sem: u8,
    ) -> Result<(), KernelError> {
        let d = self.e.descriptor(desc) as i32;
        let dreg = self.e.konst(d);
        let dst = self.side(dst)?;
        let src = self.side(src)?;
        self.e.dma(dst, src, DmaShape::Desc(dreg), Sem::n(sem));
        Ok(())
    }

    fn side(&mut self, s: Side) -> Result<MemRef, KernelError> {
        Ok(match s {
            Side::Vmem(a) => MemRef::vmem(self.e.konst(a)),
            Side::Hbm { slot, off } => {
                let off = super::hbm_offset(off, "matmul operand")?;
                match self.base[slot as usize] {
                    Base::Reg(r) => {
                        self.e.sadd(self.scratch, r, off);
                    }
                    Base::Arg { esz } => {
                        self.e
                            .byte_offset(self.scratch, &self.args, slot as usize, esz);
                        self.e.sadd(self.scratch, self.scratch, off);
                    }
                }
                MemRef::hbm(tpuemu_isa::ArgSlot::n(slot), self.scratch)
            }
        })
    }

    /// One weight tile through matrix unit `mxu`: load `w`, stream the rows of `a`, pop into
    /// `c` (address, row stride), adding to what is there when `acc`.
    fn fold(&mut self, mxu: u8, w: WTile, a: ATile, c: (u32, u32), acc: bool) {
        let (w_addr, kr, nc, w_stride, wt) = w;
        let (a_addr, rows, a_stride, at) = a;
        let (c_addr, c_stride) = c;
        let m = Mxu::n(mxu);
        let fmt = self.spec.fmt;
        let (r_k, r_n, r_ws) = (
            self.e.konst(kr as i32),
            self.e.konst(nc as i32),
            self.e.konst(w_stride as i32),
        );
        self.e
            .mxu_lw(m, fmt, wt, Addr::abs(w_addr as i32), r_k, r_n, r_ws);
        let (r_m, r_as) = (self.e.konst(rows as i32), self.e.konst(a_stride as i32));
        let prec = self.spec.prec;
        self.e
            .mxu_mm(m, fmt, at, prec, Addr::abs(a_addr as i32), r_m, r_as);
        let r_cs = self.e.konst(c_stride as i32);
        let r_m = self.e.konst(rows as i32);
        self.e.mxu_pop(m, acc, Addr::abs(c_addr as i32), r_m, r_cs);
    }

    fn wait(&mut self, sem: u8, bytes: u64) {
        self.e.wait_bytes(Sem::n(sem), bytes);
    }
}

/// A 2-D tile descriptor: `rows x cols` elements of `esz` bytes, HBM strides `(hr, hc)` and a
/// dense VMEM layout of row pitch `pitch` elements. `to_vmem` picks the direction.
fn tile_desc(
    esz: u32,
    rows: u32,
    cols: u32,
    hr: isize,
    hc: isize,
    pitch: u32,
    to_vmem: bool,
) -> DmaDescriptor {
    let e = esz as i64;
    let (h_r, h_c, v_r) = (hr as i64 * e, hc as i64 * e, pitch as i64 * e);
    let dims: Vec<(u32, i64, i64)> = if hc == 1 || cols == 1 {
        vec![(rows, h_r, v_r)]
    } else {
        vec![(rows, h_r, v_r), (cols, h_c, e)]
    };
    let elem = if hc == 1 || cols == 1 {
        cols * esz
    } else {
        esz
    };
    hbm_vmem_desc(elem, &dims, to_vmem)
}

/// Registers holding the base byte offsets of the first arguments, whose elements are
/// `sizes` bytes.
fn base_regs(
    e: &mut Emitter,
    pool: &mut RegPool,
    args: &BufferArgs,
    sizes: &[u32],
) -> Result<Vec<Base>, KernelError> {
    let mut base = Vec::new();
    for (i, sz) in sizes.iter().enumerate() {
        let r = pool
            .take()
            .ok_or_else(|| KernelError::Unsupported("too many matmul operands".into()))?;
        e.byte_offset(r, args, i, *sz);
        base.push(Base::Reg(r));
    }
    Ok(base)
}

/// Builds the kernel for one core. Arguments: `a`, `w`, each extra, `out` (buffers), then one
/// scalar per buffer: its storage offset in elements.
pub fn build(
    spec: &MatSpec,
    plan: &MatPlan,
    chip: &ChipInfo,
    name: &str,
) -> Result<Program, KernelError> {
    build_parts(spec, plan, chip, name, 1)
}

/// Output tiles of the streamed schedule.
fn tiles(spec: &MatSpec, plan: &MatPlan) -> usize {
    spec.batch as usize * spec.m.div_ceil(plan.tm) as usize * spec.n.div_ceil(plan.tn) as usize
}

/// Builds the kernel split over `parts` cores ([`crate::codegen::parts`]): each core computes
/// a contiguous range of the output tiles (all of K for each), when there are at least as
/// many tiles as parts and the schedule is the streamed one; otherwise a one-core kernel.
pub fn build_parts(
    spec: &MatSpec,
    plan: &MatPlan,
    chip: &ChipInfo,
    name: &str,
    parts: usize,
) -> Result<Program, KernelError> {
    if spec.fmt == MxuFmt::Bf16 && spec.prec != Precision::P1 {
        return Err(KernelError::Unsupported(
            "bf16 matmuls take one pass".into(),
        ));
    }
    if spec.epilogue.is_none() && spec.out.dtype != DType::F32 {
        return Err(KernelError::Unsupported(
            "a matmul without an epilogue stores f32".into(),
        ));
    }
    if spec.twin.is_some() {
        return pair::build(spec, plan, chip, name);
    }
    if spec.rows.is_some() && (parts > 1 || plan.resident) {
        return Err(KernelError::Unsupported(
            "a row epilogue runs on one core, streamed".into(),
        ));
    }
    if plan.vmem_bytes(spec) > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge("matmul tiles do not fit VMEM".into()));
    }
    let mut e = Emitter::new(name);
    let row_args: Vec<u32> = spec
        .rows
        .iter()
        .flat_map(|r| r.args().map(|(_, o)| o.dtype.size() as u32))
        .collect();
    // With a row epilogue the product is not an argument: the row operands follow the extras.
    let outs: Vec<u32> = if spec.rows.is_some() {
        Vec::new()
    } else {
        spec.outputs().map(|o| o.dtype.size() as u32).collect()
    };
    let names = ["a".to_string(), "w".to_string()]
        .into_iter()
        .chain((0..spec.extras.len()).map(|i| format!("x{i}")))
        .chain((0..outs.len()).map(|i| {
            if i == 0 {
                "out".to_string()
            } else {
                format!("out{i}")
            }
        }))
        .chain((0..row_args.len()).map(|i| format!("r{i}")));
    let args = e.buffers_with_offsets(names);
    let mut pool = RegPool::default();
    let scratch = pool.take().expect("a fresh pool has registers");
    let sizes: Vec<u32> = [spec.a.dtype.size() as u32, spec.w.dtype.size() as u32]
        .into_iter()
        .chain(spec.extras.iter().map(|x| x.dtype.size() as u32))
        .chain(outs)
        .collect();
    let mut base = base_regs(&mut e, &mut pool, &args, &sizes)?;
    base.extend(row_args.iter().map(|&esz| Base::Arg { esz }));
    let mut cx = Ctx {
        e,
        pool,
        spec,
        slots: Slots::of(spec),
        chip,
        base,
        args,
        scratch,
    };
    if plan.resident {
        resident::emit(&mut cx)?;
    } else {
        let n = tiles(spec, plan);
        let parts = if n >= parts { parts } else { 1 };
        let reg = cx.scratch;
        crate::codegen::emit_parts(
            &mut cx,
            |c| &mut c.e,
            parts,
            reg,
            |cx, p| {
                let mine = crate::codegen::part_range(n, parts, p);
                streamed::emit(cx, plan, mine.start as u32..mine.end as u32)
            },
        )?;
    }
    Ok(cx.e.finish()?)
}
