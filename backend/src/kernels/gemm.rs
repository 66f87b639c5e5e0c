//! The GEMM kernel: `C (M x N, f32) = A (M x K) * B (K x N)`, row-major, on the matrix units.
//!
//! Two schedules:
//! - **Streamed** (the TPU-like default): the output is cut into `tm x tn` tiles kept in VMEM
//!   while the K dimension streams through in `tk` slices; A and B slices are double-buffered
//!   (the DMA of the next slice overlaps the matmuls of the current one) and output tiles are
//!   double-buffered too (one drains to HBM while the next accumulates). Within a slice, every
//!   `R x C` weight tile of B is loaded into a matrix unit (`mxu.lw`), all `tm` rows of A stream
//!   through it (`mxu.mm`) and the f32 results accumulate into the output tile (`mxu.pop.acc`).
//!   Weight tiles are dealt to the matrix units by output column, so each unit owns its columns
//!   and its accumulation order is the program order: K ascending.
//! - **Resident** (SCALE-Sim parity): all of A and B are copied into VMEM first, then each fold
//!   (a weight tile and all M rows) runs in turn, then C is copied out.
//!
//! The schedule is unrolled: the generator knows every tile, so every address is an immediate
//! and every DMA a preloaded descriptor.

use tpuemu_isa::dma::{DmaDescriptor, DmaDim};
use tpuemu_isa::ops::{MxuFmt, Precision};
use tpuemu_isa::{
    Addr, ArgSlot, ChipInfo, CoreInfo, DmaShape, Instr, MemRef, Mxu, Program, SSrc, Sem,
};

use super::KernelError;
use crate::codegen::Emitter;

/// What to multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmSpec {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Format of A and B.
    pub fmt: MxuFmt,
    /// Passes for f32 inputs.
    pub prec: Precision,
}

/// How to tile it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmPlan {
    /// Output tile rows.
    pub tm: u32,
    /// Output tile columns.
    pub tn: u32,
    /// K slice.
    pub tk: u32,
    /// All operands in VMEM before any matmul (SCALE-Sim parity).
    pub resident: bool,
}

impl GemmPlan {
    /// VMEM bytes the plan needs.
    pub fn vmem_bytes(&self, spec: &GemmSpec) -> u64 {
        let e = spec.fmt.bytes() as u64;
        if self.resident {
            (spec.m as u64 * spec.k as u64 + spec.k as u64 * spec.n as u64) * e
                + spec.m as u64 * spec.n as u64 * 4
        } else {
            2 * (self.tm as u64 * self.tk as u64 * e + self.tk as u64 * self.tn as u64 * e)
                + 2 * self.tm as u64 * self.tn as u64 * 4
        }
    }
}

fn round_up(x: u32, to: u32) -> u32 {
    x.div_ceil(to) * to
}

/// Chooses tiles. Streamed output tiles are square and as large as three quarters of VMEM allows
/// (up to 2048 x 2048, with 512-deep K slices) while leaving at least four output tiles: large
/// tiles keep the
/// arithmetic intensity of a K slice (about `tile / 2` FLOPs per byte for bf16) well above the
/// chip's critical intensity, and make few, long matrix-unit commands. The plan fails when even
/// tiles at the chip's critical intensity do not fit.
pub fn plan(spec: &GemmSpec, chip: &ChipInfo, resident: bool) -> Result<GemmPlan, KernelError> {
    let core = &chip.core;
    if spec.m == 0 || spec.n == 0 || spec.k == 0 {
        return Err(KernelError::Unsupported(
            "GEMM with an empty dimension".into(),
        ));
    }
    let budget = core.vmem_bytes * 3 / 4;
    if resident {
        let p = GemmPlan {
            tm: spec.m,
            tn: spec.n,
            tk: spec.k,
            resident: true,
        };
        if p.vmem_bytes(spec) > budget {
            return Err(KernelError::TooLarge(format!(
                "the resident GEMM needs {} bytes of VMEM; the core has {}",
                p.vmem_bytes(spec),
                core.vmem_bytes
            )));
        }
        return Ok(p);
    }
    let (r, c) = (core.mxu_rows, core.mxu_cols);
    // At least four output tiles when the problem allows, so that loading the first slices and
    // storing the last tile overlap with other tiles' compute.
    let quarter = ((spec.m as f64 * spec.n as f64 / 4.0).sqrt() as u32).max(1);
    let tile = (1u32 << (31 - quarter.leading_zeros())).clamp(256, 2048);
    let mut p = GemmPlan {
        tm: round_up(spec.m, 8).min(tile),
        tn: round_up(spec.n, c).min(tile.max(c)),
        tk: round_up(spec.k, r).min(512.max(r)),
        resident: false,
    };
    let critical = chip.peak_bf16_flops / chip.hbm_bytes_per_s;
    let min_tile = ((critical * spec.fmt.bytes() as f64) as u32)
        .next_power_of_two()
        .max(128);
    while p.vmem_bytes(spec) > budget {
        if p.tm > min_tile.min(p.tn) {
            p.tm /= 2;
        } else if p.tn > min_tile.max(c) {
            p.tn = (p.tn / 2).max(c);
        } else if p.tm > 128 {
            p.tm /= 2;
        } else if p.tn > c {
            p.tn = (p.tn / 2).max(c);
        } else if p.tk > r {
            p.tk = (p.tk / 2).max(r);
        } else {
            return Err(KernelError::TooLarge(
                "even the smallest GEMM tiles do not fit VMEM".into(),
            ));
        }
    }
    Ok(p)
}

/// Argument slots of the generated program.
pub const ARG_A: u8 = 0;
/// B.
pub const ARG_B: u8 = 1;
/// C.
pub const ARG_C: u8 = 2;

struct Ctx<'a> {
    e: Emitter,
    spec: &'a GemmSpec,
    core: &'a CoreInfo,
    esz: u32,
}

impl Ctx<'_> {
    /// `dma dst, src, desc, sem` with a 2-D descriptor of `rows` runs of `bytes`.
    #[allow(clippy::too_many_arguments)]
    fn dma2d(
        &mut self,
        dst: (bool, u8, i32),
        src: (bool, u8, i32),
        rows: u32,
        bytes: u32,
        src_stride: u32,
        dst_stride: u32,
        sem: u8,
    ) {
        let desc = DmaDescriptor {
            elem_bytes: bytes,
            dims: vec![DmaDim {
                count: rows,
                src_stride: src_stride as i32,
                dst_stride: dst_stride as i32,
            }],
        };
        let d = self.e.descriptor(&desc) as i32;
        let dreg = self.e.konst(d);
        let mref = |e: &mut Emitter, (hbm, slot, addr): (bool, u8, i32)| {
            let r = e.konst(addr);
            if hbm {
                MemRef::hbm(ArgSlot::n(slot), r)
            } else {
                MemRef::vmem(r)
            }
        };
        let dst = mref(&mut self.e, dst);
        let src = mref(&mut self.e, src);
        self.e.push(Instr::Dma {
            dst,
            src,
            shape: DmaShape::Desc(dreg),
            sem: Sem::n(sem),
            remote: None,
        });
    }

    /// One weight tile through matrix unit `mxu`: load, stream `rows` LHS rows, pop into C.
    #[allow(clippy::too_many_arguments)]
    fn fold(
        &mut self,
        mxu: u8,
        w_addr: u32,
        kr: u32,
        nc: u32,
        w_stride: u32,
        a_addr: u32,
        rows: u32,
        a_stride: u32,
        c_addr: u32,
        c_stride: u32,
        acc: bool,
    ) {
        let m = Mxu::n(mxu);
        let (r_k, r_n, r_ws) = (
            self.e.konst(kr as i32),
            self.e.konst(nc as i32),
            self.e.konst(w_stride as i32),
        );
        self.e.push(Instr::MxuLoad {
            mxu: m,
            fmt: self.spec.fmt,
            transpose: false,
            addr: Addr::abs(w_addr as i32),
            rows: r_k,
            cols: r_n,
            stride: r_ws,
        });
        let (r_m, r_as) = (self.e.konst(rows as i32), self.e.konst(a_stride as i32));
        self.e.push(Instr::MxuMatmul {
            mxu: m,
            fmt: self.spec.fmt,
            transpose: false,
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

/// Builds the GEMM program. Arguments: `a`, `b`, `c` buffers (row-major; C is f32).
pub fn build(spec: &GemmSpec, plan: &GemmPlan, core: &CoreInfo) -> Result<Program, KernelError> {
    if spec.fmt == MxuFmt::Bf16 && spec.prec != Precision::P1 {
        return Err(KernelError::Unsupported("bf16 GEMMs take one pass".into()));
    }
    let total_a = spec.m as u64 * spec.k as u64 * spec.fmt.bytes() as u64;
    if total_a > i32::MAX as u64
        || spec.k as u64 * spec.n as u64 * 4 > i32::MAX as u64
        || spec.m as u64 * spec.n as u64 * 4 > i32::MAX as u64
    {
        return Err(KernelError::TooLarge("GEMM operands above 2 GiB".into()));
    }
    if plan.vmem_bytes(spec) > core.vmem_bytes {
        return Err(KernelError::TooLarge("GEMM tiles do not fit VMEM".into()));
    }
    let mut e = Emitter::new(format!(
        "gemm_{}x{}x{}_{}",
        spec.m, spec.n, spec.k, spec.fmt
    ));
    e.b.source_op("aten::mm");
    e.b.buffer("a");
    e.b.buffer("b");
    e.b.buffer("c");
    let mut cx = Ctx {
        e,
        spec,
        core,
        esz: spec.fmt.bytes(),
    };
    if plan.resident {
        resident(&mut cx);
    } else {
        streamed(&mut cx, plan);
    }
    Ok(cx.e.finish()?)
}

fn resident(cx: &mut Ctx) {
    let (m, n, k, esz) = (cx.spec.m, cx.spec.n, cx.spec.k, cx.esz);
    let (r, c, nmxu) = (cx.core.mxu_rows, cx.core.mxu_cols, cx.core.mxus);
    let a_v = 0u32;
    let b_v = a_v + m * k * esz;
    let c_v = b_v + k * n * esz;
    cx.e.b.mark_begin("load operands");
    cx.dma2d(
        (false, 0, a_v as i32),
        (true, ARG_A, 0),
        1,
        m * k * esz,
        0,
        0,
        0,
    );
    cx.dma2d(
        (false, 0, b_v as i32),
        (true, ARG_B, 0),
        1,
        k * n * esz,
        0,
        0,
        1,
    );
    cx.wait(0, (m * k * esz) as u64);
    cx.wait(1, (k * n * esz) as u64);
    cx.e.b.mark_end();
    cx.e.b.mark_begin("folds");
    for (jt, j) in (0..n).step_by(c as usize).enumerate() {
        let mxu = (jt as u32 % nmxu) as u8;
        for kk in (0..k).step_by(r as usize) {
            let (kr, nc) = ((k - kk).min(r), (n - j).min(c));
            cx.fold(
                mxu,
                b_v + (kk * n + j) * esz,
                kr,
                nc,
                n * esz,
                a_v + kk * esz,
                m,
                k * esz,
                c_v + j * 4,
                n * 4,
                kk > 0,
            );
        }
    }
    cx.e.b.mark_end();
    cx.e.b.mark_begin("store result");
    cx.dma2d(
        (true, ARG_C, 0),
        (false, 0, c_v as i32),
        1,
        m * n * 4,
        0,
        0,
        2,
    );
    cx.wait(2, m as u64 * n as u64 * 4);
    cx.e.b.mark_end();
}

/// One step of the streamed schedule: output tile `(i, j)`, K slice starting at `kk`.
#[derive(Clone, Copy)]
struct Step {
    tile: u32,
    i: u32,
    j: u32,
    kk: u32,
    first_k: bool,
    last_k: bool,
}

fn streamed(cx: &mut Ctx, p: &GemmPlan) {
    let (m, n, k, esz) = (cx.spec.m, cx.spec.n, cx.spec.k, cx.esz);
    let (r, c, nmxu) = (cx.core.mxu_rows, cx.core.mxu_cols, cx.core.mxus);
    let (tm, tn, tk) = (p.tm, p.tn, p.tk);
    let a_buf = [0, tm * tk * esz];
    let b_base = 2 * tm * tk * esz;
    let b_buf = [b_base, b_base + tk * tn * esz];
    let c_base = b_base + 2 * tk * tn * esz;
    let c_buf = [c_base, c_base + tm * tn * 4];

    let mut steps = Vec::new();
    let mut tile = 0;
    for i in (0..m).step_by(tm as usize) {
        for j in (0..n).step_by(tn as usize) {
            for kk in (0..k).step_by(tk as usize) {
                steps.push(Step {
                    tile,
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
    let ext = |s: &Step| ((m - s.i).min(tm), (n - s.j).min(tn), (k - s.kk).min(tk));
    // Loads of step `s` into buffer `s % 2`, signalling sem `s % 2` with A and B bytes.
    let load = |cx: &mut Ctx, idx: usize, s: &Step| -> u64 {
        let (rm, rn, rk) = ext(s);
        let buf = idx % 2;
        let a_off = (s.i * k + s.kk) * esz;
        let b_off = (s.kk * n + s.j) * esz;
        cx.dma2d(
            (false, 0, a_buf[buf] as i32),
            (true, ARG_A, a_off as i32),
            rm,
            rk * esz,
            k * esz,
            tk * esz,
            buf as u8,
        );
        cx.dma2d(
            (false, 0, b_buf[buf] as i32),
            (true, ARG_B, b_off as i32),
            rk,
            rn * esz,
            n * esz,
            tn * esz,
            buf as u8,
        );
        (rm * rk * esz + rk * rn * esz) as u64
    };
    let mut pending = [0u64; 2];
    let mut c_pending = [0u64; 2];
    // Output tiles drain in row chunks spread over the next tile's steps, so that a large store
    // does not hold up the prefetch behind it in the HBM queue.
    let mut stores: std::collections::VecDeque<(u8, u32, u32, u32, u32)> = Default::default();
    let issue_store = |cx: &mut Ctx, (cb, c_off, v_off, rows, rn): (u8, u32, u32, u32, u32)| {
        cx.dma2d(
            (true, ARG_C, c_off as i32),
            (false, 0, v_off as i32),
            rows,
            rn * 4,
            tn * 4,
            n * 4,
            2 + cb,
        );
    };
    pending[0] = load(cx, 0, &steps[0]);
    for (idx, s) in steps.iter().enumerate() {
        let buf = idx % 2;
        let cb = (s.tile % 2) as usize;
        let (rm, rn, rk) = ext(s);
        if let Some(next) = steps.get(idx + 1) {
            pending[1 - buf] = load(cx, idx + 1, next);
        }
        if s.first_k {
            // The output buffer is free once its previous tile has drained to HBM.
            while stores.iter().any(|st| st.0 as usize == cb) {
                let st = stores.pop_front().expect("non-empty");
                issue_store(cx, st);
            }
            cx.wait(2 + cb as u8, std::mem::take(&mut c_pending[cb]));
        }
        if let Some(st) = stores.pop_front() {
            issue_store(cx, st);
        }
        cx.wait(buf as u8, std::mem::take(&mut pending[buf]));
        for kr0 in (0..rk).step_by(r as usize) {
            for (jt, jj) in (0..rn).step_by(c as usize).enumerate() {
                let mxu = (jt as u32 % nmxu) as u8;
                let (kr, nc) = ((rk - kr0).min(r), (rn - jj).min(c));
                cx.fold(
                    mxu,
                    b_buf[buf] + (kr0 * tn + jj) * esz,
                    kr,
                    nc,
                    tn * esz,
                    a_buf[buf] + kr0 * esz,
                    rm,
                    tk * esz,
                    c_buf[cb] + jj * 4,
                    tn * 4,
                    !(s.first_k && kr0 == 0),
                );
            }
        }
        if s.last_k {
            let chunk = rm.div_ceil(4).next_multiple_of(8).min(rm);
            for r0 in (0..rm).step_by(chunk as usize) {
                let rows = chunk.min(rm - r0);
                stores.push_back((
                    cb as u8,
                    ((s.i + r0) * n + s.j) * 4,
                    c_buf[cb] + r0 * tn * 4,
                    rows,
                    rn,
                ));
            }
            c_pending[cb] = (rm * rn * 4) as u64;
        }
    }
    while let Some(st) = stores.pop_front() {
        issue_store(cx, st);
    }
    cx.wait(2, c_pending[0]);
    cx.wait(3, c_pending[1]);
}
