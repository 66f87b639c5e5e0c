//! The matrix-unit kernel: `out[b] = epilogue(A[b] @ W[b], extras...)`, batched, with any
//! operand strides.
//!
//! Schedules:
//! - **Streamed** (TPU-like): output tiles of `tm x tn` accumulate in VMEM while K streams
//!   through in `tk` slices; A and W slices are double-buffered (the next slice's DMA overlaps
//!   the current matmuls) and so are output tiles (one drains while the next accumulates).
//!   Within a slice every `R x C` weight tile is loaded into a matrix unit, all rows of the A
//!   slice stream through it, and the f32 results pop into the output tile, accumulating
//!   (`mxu.pop.acc`). Weight tiles are dealt to the units by output column, so each unit owns
//!   its columns and accumulates in K order.
//! - **Resident** (SCALE-Sim parity): all of A and W in VMEM first, then every fold in turn.
//!
//! Operand access: an operand whose inner stride is 1 moves in rows; one whose outer stride is
//! 1 is loaded as its transpose and fed with the transposing `mxu.lw.t` / `mxu.mm.t`; anything
//! else is gathered element by element (correct, slow on HBM).
//!
//! The epilogue (bias, scaling, activations fused by DeferAndFuse, and the conversion to the
//! output dtype) runs on each finished output tile in VMEM with the tile kernel's vector code.

use tpuemu_isa::dma::{DmaDescriptor, DmaDim};
use tpuemu_isa::ops::{MxuFmt, Precision, SAluOp};
use tpuemu_isa::{Addr, ArgSlot, ChipInfo, DmaShape, Instr, MemRef, Mxu, Program, SReg, SSrc, Sem};

use super::KernelError;
use super::tile::body::{self, VOperand};
use crate::codegen::{Emitter, RegPool};
use crate::dtype::DType;
use crate::ir::{POp, Prog};

/// How an operand moves from HBM into a matrix unit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Access {
    /// Rows are contiguous: loaded as is.
    Normal,
    /// Columns are contiguous: loaded as the transpose, fed transposed.
    Transposed,
    /// Neither: gathered element by element into the normal layout.
    Gather,
}

/// An operand's dtype and element strides over `[batch, rows, cols]`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MatOperand {
    /// Element type.
    pub dtype: DType,
    /// Element strides over `[batch, rows, cols]` (0 broadcasts).
    pub strides: [isize; 3],
}

impl MatOperand {
    /// Contiguous `[batch, rows, cols]`.
    pub fn contiguous(dtype: DType, rows: u32, cols: u32) -> Self {
        MatOperand {
            dtype,
            strides: [(rows * cols) as isize, cols as isize, 1],
        }
    }

    fn access(&self, rows: u32, cols: u32) -> Access {
        if self.strides[2] == 1 || cols == 1 {
            Access::Normal
        } else if self.strides[1] == 1 || rows == 1 {
            Access::Transposed
        } else {
            Access::Gather
        }
    }
}

/// A matrix-unit kernel.
#[derive(Clone, PartialEq, Debug)]
pub struct MatSpec {
    /// Batch count.
    pub batch: u32,
    /// Rows of A and the output.
    pub m: u32,
    /// Columns of W and the output.
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// Format the matrix units take (bf16, or f32 with passes).
    pub fmt: MxuFmt,
    /// Passes for f32.
    pub prec: Precision,
    /// `A [batch, m, k]`.
    pub a: MatOperand,
    /// `W [batch, k, n]`.
    pub w: MatOperand,
    /// Extra epilogue inputs over `[batch, m, n]`.
    pub extras: Vec<MatOperand>,
    /// The output over `[batch, m, n]`.
    pub out: MatOperand,
    /// `Input(0)` is the f32 product, `Input(1 + i)` extra `i`; one output. `None` stores the
    /// product as it is (the output must then be f32).
    pub epilogue: Option<Prog>,
}

impl MatSpec {
    /// A canonical string for kernel caching.
    pub fn key(&self) -> String {
        format!("{:?}", self)
    }

    fn esz(&self) -> u32 {
        self.fmt.bytes()
    }
}

mod plan;

pub use plan::{MatPlan, estimate_seconds, plan};

/// Semaphores.
const SEM_LOAD: u8 = 0; // + parity: A and W slices
const SEM_STORE: u8 = 2; // + parity: output tiles
const SEM_EXTRA: u8 = 4; // + parity: epilogue inputs

struct Ctx<'a> {
    e: Emitter,
    pool: RegPool,
    spec: &'a MatSpec,
    chip: &'a ChipInfo,
    /// Registers holding each operand's base byte offset: A, W, extras..., out.
    base: Vec<SReg>,
    scratch: SReg,
}

/// A DMA side: HBM through an argument slot at a tile offset, or VMEM at an address.
#[derive(Clone, Copy)]
enum Side {
    Hbm { slot: u8, off: i64 },
    Vmem(i32),
}

impl Ctx<'_> {
    fn dma(
        &mut self,
        dst: Side,
        src: Side,
        desc: &DmaDescriptor,
        sem: u8,
    ) -> Result<(), KernelError> {
        let d = self.e.descriptor(desc) as i32;
        let dreg = self.e.konst(d);
        let side = |cx: &mut Ctx, s: Side, scratch: SReg| -> Result<MemRef, KernelError> {
            Ok(match s {
                Side::Vmem(a) => MemRef::vmem(cx.e.konst(a)),
                Side::Hbm { slot, off } => {
                    let off = i32::try_from(off)
                        .map_err(|_| KernelError::TooLarge("matmul operand above 2 GiB".into()))?;
                    cx.e.push(Instr::SAlu {
                        op: SAluOp::Add,
                        dst: scratch,
                        a: cx.base[slot as usize],
                        b: SSrc::Imm(off),
                    });
                    MemRef::hbm(ArgSlot::n(slot), scratch)
                }
            })
        };
        let dst = side(self, dst, self.scratch)?;
        let src = side(self, src, self.scratch)?;
        self.e.push(Instr::Dma {
            dst,
            src,
            shape: DmaShape::Desc(dreg),
            sem: Sem::n(sem),
            remote: None,
        });
        Ok(())
    }

    /// One weight tile through matrix unit `mxu`: load, stream `rows` LHS rows, pop.
    #[allow(clippy::too_many_arguments)]
    fn fold(
        &mut self,
        mxu: u8,
        w: (u32, u32, u32, u32, bool),
        a: (u32, u32, u32, bool),
        c: (u32, u32),
        acc: bool,
    ) {
        let (w_addr, kr, nc, w_stride, wt) = w;
        let (a_addr, rows, a_stride, at) = a;
        let (c_addr, c_stride) = c;
        let m = Mxu::n(mxu);
        let (r_k, r_n, r_ws) = (
            self.e.konst(kr as i32),
            self.e.konst(nc as i32),
            self.e.konst(w_stride as i32),
        );
        self.e.push(Instr::MxuLoad {
            mxu: m,
            fmt: self.spec.fmt,
            transpose: wt,
            addr: Addr::abs(w_addr as i32),
            rows: r_k,
            cols: r_n,
            stride: r_ws,
        });
        let (r_m, r_as) = (self.e.konst(rows as i32), self.e.konst(a_stride as i32));
        self.e.push(Instr::MxuMatmul {
            mxu: m,
            fmt: self.spec.fmt,
            transpose: at,
            prec: self.spec.prec,
            addr: Addr::abs(a_addr as i32),
            rows: r_m,
            stride: r_as,
        });
        let r_cs = self.e.konst(c_stride as i32);
        let r_m = self.e.konst(rows as i32);
        self.e.push(Instr::MxuPop {
            mxu: m,
            acc,
            addr: Addr::abs(c_addr as i32),
            rows: r_m,
            stride: r_cs,
        });
    }

    fn wait(&mut self, sem: u8, bytes: u64) {
        if bytes > 0 {
            self.e.push(Instr::SemWait {
                sem: Sem::n(sem),
                amount: SSrc::Imm(bytes as i32),
            });
        }
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
    DmaDescriptor {
        elem_bytes: elem,
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

/// Builds the kernel. Arguments: `a`, `w`, each extra, `out` (buffers), then one scalar per
/// buffer: its storage offset in elements.
pub fn build(
    spec: &MatSpec,
    plan: &MatPlan,
    chip: &ChipInfo,
    name: &str,
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
    if plan.vmem_bytes(spec) > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge("matmul tiles do not fit VMEM".into()));
    }
    let mut e = Emitter::new(name);
    e.b.buffer("a");
    e.b.buffer("w");
    for i in 0..spec.extras.len() {
        e.b.buffer(format!("x{i}"));
    }
    e.b.buffer("out");
    let nbuf = 3 + spec.extras.len();
    for i in 0..nbuf {
        e.b.scalar(format!("off{i}"));
    }
    let mut pool = RegPool::default();
    let scratch = pool.take().expect("a fresh pool has registers");
    let mut base = Vec::new();
    let sizes: Vec<u32> = [spec.a.dtype.size() as u32, spec.w.dtype.size() as u32]
        .into_iter()
        .chain(spec.extras.iter().map(|x| x.dtype.size() as u32))
        .chain([spec.out.dtype.size() as u32])
        .collect();
    for (i, sz) in sizes.iter().enumerate() {
        let r = pool
            .take()
            .ok_or_else(|| KernelError::Unsupported("too many matmul operands".into()))?;
        e.push(Instr::SLoad {
            dst: r,
            addr: Addr::abs(4 * (nbuf + i) as i32),
        });
        e.push(Instr::SAlu {
            op: SAluOp::Mul,
            dst: r,
            a: r,
            b: SSrc::Imm(*sz as i32),
        });
        base.push(r);
    }
    let mut cx = Ctx {
        e,
        pool,
        spec,
        chip,
        base,
        scratch,
    };
    if plan.resident {
        resident(&mut cx)?;
    } else {
        streamed(&mut cx, plan)?;
    }
    Ok(cx.e.finish()?)
}

fn resident(cx: &mut Ctx) -> Result<(), KernelError> {
    let s = cx.spec;
    if s.batch != 1
        || s.epilogue.is_some()
        || s.a.access(s.m, s.k) != Access::Normal
        || s.w.access(s.k, s.n) != Access::Normal
    {
        return Err(KernelError::Unsupported(
            "the resident schedule takes one contiguous GEMM".into(),
        ));
    }
    let (m, n, k, esz) = (s.m, s.n, s.k, s.esz());
    let (r, c, nmxu) = (
        cx.chip.core.mxu_rows,
        cx.chip.core.mxu_cols,
        cx.chip.core.mxus,
    );
    let a_v = 0u32;
    let b_v = a_v + m * k * esz;
    let c_v = b_v + k * n * esz;
    cx.e.b.mark_begin("load operands");
    let da = tile_desc(esz, m, k, s.a.strides[1], s.a.strides[2], k, true);
    let db = tile_desc(esz, k, n, s.w.strides[1], s.w.strides[2], n, true);
    cx.dma(
        Side::Vmem(a_v as i32),
        Side::Hbm { slot: 0, off: 0 },
        &da,
        0,
    )?;
    cx.dma(
        Side::Vmem(b_v as i32),
        Side::Hbm { slot: 1, off: 0 },
        &db,
        1,
    )?;
    cx.wait(0, da.bytes());
    cx.wait(1, db.bytes());
    cx.e.b.mark_end();
    cx.e.b.mark_begin("folds");
    for (jt, j) in (0..n).step_by(c as usize).enumerate() {
        let mxu = (jt as u32 % nmxu) as u8;
        for kk in (0..k).step_by(r as usize) {
            let (kr, nc) = ((k - kk).min(r), (n - j).min(c));
            cx.fold(
                mxu,
                (b_v + (kk * n + j) * esz, kr, nc, n * esz, false),
                (a_v + kk * esz, m, k * esz, false),
                (c_v + j * 4, n * 4),
                kk > 0,
            );
        }
    }
    cx.e.b.mark_end();
    cx.e.b.mark_begin("store result");
    let dc = tile_desc(4, m, n, s.out.strides[1], s.out.strides[2], n, false);
    let out_slot = 2 + s.extras.len() as u8;
    cx.dma(
        Side::Hbm {
            slot: out_slot,
            off: 0,
        },
        Side::Vmem(c_v as i32),
        &dc,
        2,
    )?;
    cx.wait(2, dc.bytes());
    cx.e.b.mark_end();
    Ok(())
}

/// One step of the streamed schedule: output tile `(b, i, j)`, K slice starting at `kk`.
#[derive(Clone, Copy, Default)]
struct Step {
    tile: u32,
    b: u32,
    i: u32,
    j: u32,
    kk: u32,
    first_k: bool,
    last_k: bool,
}

fn streamed(cx: &mut Ctx, p: &MatPlan) -> Result<(), KernelError> {
    let s = cx.spec;
    let (m, n, k, esz) = (s.m, s.n, s.k, s.esz());
    let (r, c, nmxu) = (
        cx.chip.core.mxu_rows,
        cx.chip.core.mxu_cols,
        cx.chip.core.mxus,
    );
    let (tm, tn, tk) = (p.tm, p.tn, p.tk);
    let (acc_a, acc_w) = (s.a.access(m, k), s.w.access(k, n));
    // VMEM layout.
    let mut at = 0u32;
    let mut alloc = |bytes: u32| {
        let a = at;
        at += bytes.div_ceil(4096) * 4096;
        a
    };
    let a_buf = [alloc(tm * tk * esz), alloc(tm * tk * esz)];
    let w_buf = [alloc(tk * tn * esz), alloc(tk * tn * esz)];
    let c_buf = [alloc(tm * tn * 4), alloc(tm * tn * 4)];
    let x_buf: Vec<[u32; 2]> = s
        .extras
        .iter()
        .map(|x| {
            [
                alloc(tm * tn * x.dtype.size() as u32),
                alloc(tm * tn * x.dtype.size() as u32),
            ]
        })
        .collect();
    let o_buf = if s.epilogue.is_some() {
        [
            alloc(tm * tn * s.out.dtype.size() as u32),
            alloc(tm * tn * s.out.dtype.size() as u32),
        ]
    } else {
        c_buf
    };
    if at as u64 > cx.chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(
            "matmul buffers do not fit VMEM".into(),
        ));
    }

    let mut steps = Vec::new();
    let mut tile = 0;
    for b in 0..s.batch {
        for i in (0..m).step_by(tm as usize) {
            for j in (0..n).step_by(tn as usize) {
                for kk in (0..k).step_by(tk as usize) {
                    steps.push(Step {
                        tile,
                        b,
                        i,
                        j,
                        kk,
                        first_k: kk == 0,
                        last_k: kk + tk >= k,
                    });
                }
                tile += 1;
            }
        }
    }
    // Buffer of each step's A and W blocks: a step whose block is the previous step's (one K
    // slice: consecutive tiles of a row share A; one column of tiles: they share W) reuses it
    // instead of loading it again.
    let slots = |key: &dyn Fn(&Step) -> (u32, u32, u32)| -> Vec<(usize, bool)> {
        let mut v: Vec<(usize, bool)> = Vec::with_capacity(steps.len());
        for (idx, st) in steps.iter().enumerate() {
            v.push(match idx.checked_sub(1) {
                Some(p) if key(&steps[p]) == key(st) => (v[p].0, false),
                Some(p) => (1 - v[p].0, true),
                None => (0, true),
            });
        }
        v
    };
    let a_slot = slots(&|st: &Step| (st.b, st.i, st.kk));
    let w_slot = slots(&|st: &Step| (st.b, st.kk, st.j));
    let ext = |st: &Step| ((m - st.i).min(tm), (n - st.j).min(tn), (k - st.kk).min(tk));
    let elem_off = |o: &MatOperand, b: u32, r0: u32, c0: u32| -> i64 {
        (b as i64 * o.strides[0] as i64
            + r0 as i64 * o.strides[1] as i64
            + c0 as i64 * o.strides[2] as i64)
            * o.dtype.size() as i64
    };
    // Loads of step `idx` into buffer parity `idx % 2`; returns the bytes.
    let load = |cx: &mut Ctx, idx: usize, st: &Step| -> Result<u64, KernelError> {
        let (rm, rn, rk) = ext(st);
        let par = idx % 2;
        let da = match acc_a {
            Access::Transposed => tile_desc(esz, rk, rm, s.a.strides[2], s.a.strides[1], tm, true),
            _ => tile_desc(esz, rm, rk, s.a.strides[1], s.a.strides[2], tk, true),
        };
        let dw = match acc_w {
            Access::Transposed => tile_desc(esz, rn, rk, s.w.strides[2], s.w.strides[1], tk, true),
            _ => tile_desc(esz, rk, rn, s.w.strides[1], s.w.strides[2], tn, true),
        };
        let mut bytes = 0;
        if let (sa, true) = a_slot[idx] {
            cx.dma(
                Side::Vmem(a_buf[sa] as i32),
                Side::Hbm {
                    slot: 0,
                    off: elem_off(&s.a, st.b, st.i, st.kk),
                },
                &da,
                SEM_LOAD + par as u8,
            )?;
            bytes += da.bytes();
        }
        if let (sw, true) = w_slot[idx] {
            cx.dma(
                Side::Vmem(w_buf[sw] as i32),
                Side::Hbm {
                    slot: 1,
                    off: elem_off(&s.w, st.b, st.kk, st.j),
                },
                &dw,
                SEM_LOAD + par as u8,
            )?;
            bytes += dw.bytes();
        }
        Ok(bytes)
    };
    let out_slot = 2 + s.extras.len() as u8;
    let out_esz = if s.epilogue.is_some() {
        s.out.dtype.size() as u32
    } else {
        4
    };
    // Rounds of matrix-unit work per step (one weight tile per unit each).
    let rounds = tk.div_ceil(r) * tn.div_ceil(c).div_ceil(nmxu);
    // A finished tile's epilogue and store run in row chunks interleaved with the next tile's
    // rounds, so that the vector unit and the DMA engines work while the matrix units do, and
    // the stores spread over the tile instead of queueing ahead of its loads.
    let per_tile = rounds * k.div_ceil(tk);
    let chunk_rows = tm
        .div_ceil(per_tile.clamp(1, 32))
        .next_multiple_of(8)
        .min(tm);
    let mut pending = [0u64; 2];
    let mut c_pending = [0u64; 2];
    let mut x_pending = [0u64; 2];
    let mut drain: Drain = Drain::default();
    pending[0] = load(cx, 0, &steps[0])?;
    for (idx, st) in steps.iter().enumerate() {
        let par = idx % 2;
        let cb = (st.tile % 2) as usize;
        let (rm, rn, rk) = ext(st);
        if let Some(next) = steps.get(idx + 1) {
            pending[1 - par] = load(cx, idx + 1, next)?;
        }
        if st.first_k {
            // The accumulator is free once its previous tile's epilogue has read it (the
            // epilogue of the tile before this one is still interleaved below).
            if drain.cb == Some(cb) {
                drain.finish(cx, out_slot, out_esz)?;
            }
            // The output buffer is free once its previous tile has drained to HBM.
            cx.wait(SEM_STORE + cb as u8, std::mem::take(&mut c_pending[cb]));
            // Epilogue inputs of this output tile.
            for (xi, x) in s.extras.iter().enumerate() {
                let d = tile_desc(
                    x.dtype.size() as u32,
                    rm,
                    rn,
                    x.strides[1],
                    x.strides[2],
                    tn,
                    true,
                );
                cx.dma(
                    Side::Vmem(x_buf[xi][cb] as i32),
                    Side::Hbm {
                        slot: 2 + xi as u8,
                        off: elem_off(x, st.b, st.i, st.j),
                    },
                    &d,
                    SEM_EXTRA + cb as u8,
                )?;
                x_pending[cb] += d.bytes();
            }
        }
        cx.wait(SEM_LOAD + par as u8, std::mem::take(&mut pending[par]));
        let mut round = 0u32;
        for kr0 in (0..rk).step_by(r as usize) {
            for (jt, jj) in (0..rn).step_by(c as usize).enumerate() {
                let mxu = (jt as u32 % nmxu) as u8;
                let (kr, nc) = ((rk - kr0).min(r), (rn - jj).min(c));
                let (wb, ab) = (w_buf[w_slot[idx].0], a_buf[a_slot[idx].0]);
                let w = match acc_w {
                    Access::Transposed => (wb + (jj * tk + kr0) * esz, kr, nc, tk * esz, true),
                    _ => (wb + (kr0 * tn + jj) * esz, kr, nc, tn * esz, false),
                };
                let a = match acc_a {
                    Access::Transposed => (ab + kr0 * tm * esz, rm, tm * esz, true),
                    _ => (ab + kr0 * esz, rm, tk * esz, false),
                };
                cx.fold(
                    mxu,
                    w,
                    a,
                    (c_buf[cb] + jj * 4, tn * 4),
                    !(st.first_k && kr0 == 0),
                );
                if (jt as u32 + 1).is_multiple_of(nmxu) || jj + c >= rn {
                    round += 1;
                    drain.chunk(cx, out_slot, out_esz)?;
                }
            }
        }
        let _ = round;
        if st.last_k {
            // Whatever of the previous tile is left, then this tile's turn.
            drain.finish(cx, out_slot, out_esz)?;
            if !s.extras.is_empty() {
                cx.wait(SEM_EXTRA + cb as u8, std::mem::take(&mut x_pending[cb]));
            }
            c_pending[cb] = tile_desc(
                out_esz,
                rm,
                rn,
                s.out.strides[1],
                s.out.strides[2],
                tn,
                false,
            )
            .bytes();
            drain = Drain {
                cb: Some(cb),
                st: *st,
                rm,
                rn,
                tn,
                next_row: 0,
                chunk_rows,
                c_buf: c_buf[cb],
                x_bufs: x_buf.iter().map(|x| x[cb]).collect(),
                o_buf: o_buf[cb],
            };
        }
    }
    drain.finish(cx, out_slot, out_esz)?;
    cx.wait(SEM_STORE, c_pending[0]);
    cx.wait(SEM_STORE + 1, c_pending[1]);
    Ok(())
}

/// A finished output tile whose epilogue and store are still to be emitted, in row chunks.
#[derive(Default)]
struct Drain {
    /// Its accumulator parity (`None`: nothing to drain).
    cb: Option<usize>,
    st: Step,
    rm: u32,
    rn: u32,
    /// Row pitch of the tile buffers, in elements.
    tn: u32,
    next_row: u32,
    chunk_rows: u32,
    c_buf: u32,
    x_bufs: Vec<u32>,
    o_buf: u32,
}

impl Drain {
    /// Emits the next chunk: the epilogue over its rows, then their store.
    fn chunk(&mut self, cx: &mut Ctx, out_slot: u8, out_esz: u32) -> Result<(), KernelError> {
        let Some(cb) = self.cb else { return Ok(()) };
        if self.next_row >= self.rm {
            self.cb = None;
            return Ok(());
        }
        let s = cx.spec;
        let tn_pitch = self.tn;
        let r0 = self.next_row;
        let rows = self.chunk_rows.min(self.rm - r0);
        if let Some(prog) = &s.epilogue {
            let mut ops = vec![VOperand {
                base: (self.c_buf + r0 * tn_pitch * 4) as i32,
                dtype: DType::F32,
            }];
            for (xi, x) in s.extras.iter().enumerate() {
                ops.push(VOperand {
                    base: (self.x_bufs[xi] + r0 * tn_pitch * x.dtype.size() as u32) as i32,
                    dtype: x.dtype,
                });
            }
            ops.push(VOperand {
                base: (self.o_buf + r0 * tn_pitch * s.out.dtype.size() as u32) as i32,
                dtype: s.out.dtype,
            });
            let n_vregs = (rows * tn_pitch).div_ceil(1024);
            body::dense(
                &mut cx.e,
                &mut cx.pool,
                prog,
                &ops,
                ops.len() - 1,
                n_vregs,
                cx.chip.core.vregs,
                None,
            )?;
            cx.e.forget_constants();
        }
        let d = tile_desc(
            out_esz,
            rows,
            self.rn,
            s.out.strides[1],
            s.out.strides[2],
            tn_pitch,
            false,
        );
        let st = self.st;
        let off = (st.b as i64 * s.out.strides[0] as i64
            + (st.i + r0) as i64 * s.out.strides[1] as i64
            + st.j as i64 * s.out.strides[2] as i64)
            * s.out.dtype.size() as i64;
        cx.dma(
            Side::Hbm {
                slot: out_slot,
                off,
            },
            Side::Vmem((self.o_buf + r0 * tn_pitch * out_esz) as i32),
            &d,
            SEM_STORE + cb as u8,
        )?;
        self.next_row += rows;
        if self.next_row >= self.rm {
            self.cb = None;
        }
        Ok(())
    }

    /// Emits every chunk left.
    fn finish(&mut self, cx: &mut Ctx, out_slot: u8, out_esz: u32) -> Result<(), KernelError> {
        while self.cb.is_some() {
            self.chunk(cx, out_slot, out_esz)?;
        }
        Ok(())
    }
}

/// Whether `prog` only converts `Input(0)` to its output dtype (the default epilogue).
pub fn is_plain_epilogue(prog: &Prog) -> bool {
    prog.outputs.len() == 1
        && prog
            .nodes
            .iter()
            .all(|n| matches!(n.op, POp::Input(0) | POp::Cast(_)))
}

/// Element strides of `layout` over `[batch, m, n]` (trailing alignment; size-1 and missing
/// dims broadcast).
fn strides3(layout: &crate::layout::Layout, dims: [usize; 3]) -> Result<[isize; 3], KernelError> {
    if layout.ndim() > 3 {
        return Err(KernelError::Unsupported(format!(
            "matmul operand of shape {:?}",
            layout.shape
        )));
    }
    let lead = 3 - layout.ndim();
    let mut st = [0isize; 3];
    for (i, (&s, &x)) in layout.shape.iter().zip(&layout.strides).enumerate() {
        let d = lead + i;
        if s == dims[d] {
            st[d] = if s == 1 { 0 } else { x };
        } else if s != 1 {
            return Err(KernelError::Unsupported(format!(
                "operand of shape {:?} does not broadcast to {:?}",
                layout.shape, dims
            )));
        }
    }
    Ok(st)
}

/// The kernel spec of a matmul node, and each operand's storage offset (elements): `a`, `w`,
/// the extras, the output.
pub fn spec_of(
    node: &crate::ir::Node,
    mm: &crate::ir::MatmulNode,
    prec: Precision,
) -> Result<(MatSpec, Vec<usize>), KernelError> {
    let (b, m, n, k) = (mm.batch, mm.m, mm.n, mm.k);
    let to32 = |x: usize| {
        u32::try_from(x).map_err(|_| KernelError::TooLarge("matmul dimension above 4G".into()))
    };
    let (a, w) = (&node.inputs[0], &node.inputs[1]);
    let out = node
        .outputs
        .first()
        .ok_or_else(|| KernelError::Unsupported("matmul without an output".into()))?;
    let fmt = match (a.dtype, w.dtype) {
        (DType::BF16, DType::BF16) => MxuFmt::Bf16,
        (DType::F32, DType::F32) => MxuFmt::F32,
        (x, y) => {
            return Err(KernelError::Unsupported(format!(
                "matrix units take bf16 or f32 operands of one dtype, not {x} and {y}"
            )));
        }
    };
    let prec = if fmt == MxuFmt::Bf16 {
        Precision::P1
    } else {
        prec
    };
    let op = |v: &crate::ir::View, dims: [usize; 3]| -> Result<MatOperand, KernelError> {
        Ok(MatOperand {
            dtype: v.dtype,
            strides: strides3(&v.layout, dims)?,
        })
    };
    let extras = node.inputs[2..]
        .iter()
        .map(|v| op(v, [b, m, n]))
        .collect::<Result<Vec<_>, _>>()?;
    let out_op = op(out, [b, m, n])?;
    let epilogue =
        if is_plain_epilogue(&mm.epilogue) && out.dtype == DType::F32 && extras.is_empty() {
            None
        } else {
            Some(mm.epilogue.clone())
        };
    let spec = MatSpec {
        batch: to32(b)?,
        m: to32(m)?,
        n: to32(n)?,
        k: to32(k)?,
        fmt,
        prec,
        a: op(a, [b, m, k])?,
        w: op(w, [b, k, n])?,
        extras,
        out: out_op,
        epilogue,
    };
    let offsets = node
        .inputs
        .iter()
        .chain(node.outputs.iter())
        .map(|v| v.layout.offset)
        .collect();
    Ok((spec, offsets))
}
