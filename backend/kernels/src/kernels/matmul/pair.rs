//! A product pair in one kernel: `P1 = A @ B` beside `P2 = A^T @ C` (a linear layer's
//! backward: `dX = dY @ W` and `dW = dY^T @ X`), reading the shared `A` from HBM once instead
//! of once per product.
//!
//! The schedule is the streamed one of the twin `P2` ([`super::streamed`]) with its whole inner
//! dimension (`A`'s rows) in one slice and its whole width in one tile, so `C` loads once. Each
//! step loads a block of `A`'s columns, `A[:, v..v + tv]` (the twin's rows `v..v + tv`), and
//! folds it twice: through `C`'s tiles into the twin's output tile (drained to HBM under the
//! next step, as in any streamed kernel), and, as the K slice `v..v + tv` of `P1`, through the
//! rows `v..v + tv` of `B` (loaded beside the block) into `P1`'s accumulator, which stays in
//! VMEM for the whole kernel. `P1`'s epilogue inputs load at the start; its epilogue and
//! stores run once the last block is folded.
//!
//! Each product accumulates its inner dimension in slices of the array's rows, in order, as
//! its own kernel would: the same bits.

use tpuemu_isa::ChipInfo;
use tpuemu_isa::Program;

use super::drain::Drain;
use super::streamed::{self, Step, Streamed, elem_off};
use super::{
    ATile, Access, Ctx, MatPlan, MatSpec, SEM_EXTRA, SEM_STORE, Side, Slots, WTile, base_regs,
    tile_desc,
};
use crate::codegen::{Emitter, PingPong, RegPool};
use crate::kernels::KernelError;

/// Rows of `P1` per chunk of its final epilogue and store.
const DRAIN_ROWS: u32 = 64;

/// The first product of a pair, folded beside the twin's streamed schedule.
pub(super) struct Rider<'a> {
    /// `P1`'s spec (its `twin` is the streamed one).
    spec: &'a MatSpec,
    /// `P1`'s argument slots.
    slots: Slots,
    /// Blocks of `B`'s rows, by the parity of the `A` block they go with: `[tv, n1p]`, or
    /// `[n1p, tv]` when `B` is loaded transposed.
    b: [u32; 2],
    /// `P1`'s f32 accumulator, `[m8, n1p]`.
    acc: u32,
    /// Its epilogue inputs and outputs, whole, each `[m8, n1p]`.
    x: Vec<u32>,
    o: Vec<u32>,
    acc_w: Access,
    /// Columns of `A` per block.
    tv: u32,
    /// Row pitch of `P1`'s buffers, in elements (its width rounded to the array's columns).
    n1p: u32,
}

/// VMEM bytes of the rider's buffers, in allocation order: `B` blocks (two), accumulator,
/// epilogue inputs, outputs.
fn rider_sizes(spec: &MatSpec, tv: u32, chip: &ChipInfo) -> Vec<u64> {
    let (m8, n1p) = (spec.m.next_multiple_of(8) as u64, n1p(spec, chip) as u64);
    let e = spec.esz() as u64;
    let mut v = vec![tv as u64 * n1p * e, tv as u64 * n1p * e, m8 * n1p * 4];
    v.extend(spec.extras.iter().map(|x| m8 * n1p * x.dtype.size() as u64));
    if spec.epilogue.is_some() {
        v.extend(spec.outputs().map(|o| m8 * n1p * o.dtype.size() as u64));
    }
    v
}

fn n1p(spec: &MatSpec, chip: &ChipInfo) -> u32 {
    spec.n.next_multiple_of(chip.core.mxu_cols.max(1))
}

/// Page-aligned sizes, as the buffers are allocated.
fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(4096) * 4096
}

impl<'a> Rider<'a> {
    fn new(
        cx: &Ctx,
        spec: &'a MatSpec,
        slots: Slots,
        tv: u32,
        at: u32,
    ) -> Result<Self, KernelError> {
        let mut at = at as u64;
        let mut addrs = Vec::new();
        for b in rider_sizes(spec, tv, cx.chip) {
            addrs.push(at as u32);
            at += pages(b);
        }
        if at > cx.chip.core.vmem_bytes {
            return Err(KernelError::TooLarge(
                "a product pair's buffers do not fit VMEM".into(),
            ));
        }
        let nx = spec.extras.len();
        let acc = addrs[2];
        let o = if spec.epilogue.is_some() {
            addrs[3 + nx..].to_vec()
        } else {
            vec![acc]
        };
        Ok(Rider {
            spec,
            slots,
            b: [addrs[0], addrs[1]],
            acc,
            x: addrs[3..3 + nx].to_vec(),
            o,
            acc_w: spec.w.access(spec.k, spec.n),
            tv,
            n1p: n1p(spec, cx.chip),
        })
    }

    /// `P1`'s epilogue inputs, whole, on `sem`; returns the bytes.
    fn load_extras(&self, cx: &mut Ctx, sem: u8) -> Result<u64, KernelError> {
        let s = self.spec;
        let mut bytes = 0;
        for (xi, x) in s.extras.iter().enumerate() {
            let esz = x.dtype.size() as u32;
            let d = tile_desc(esz, s.m, s.n, x.strides[1], x.strides[2], self.n1p, true);
            let hbm = Side::Hbm {
                slot: self.slots.x0 + xi as u8,
                off: elem_off(x, 0, 0, 0),
            };
            cx.dma(Side::Vmem(self.x[xi] as i32), hbm, &d, sem)?;
            bytes += d.bytes();
        }
        Ok(bytes)
    }

    /// The rows of `B` that go with the `A` block of step `st` (`rows` columns of `A` from
    /// `st.i`), into buffer `parity`, on `sem`; returns the bytes.
    pub(super) fn load(
        &self,
        cx: &mut Ctx,
        st: &Step,
        rows: u32,
        parity: usize,
        sem: u8,
    ) -> Result<u64, KernelError> {
        let s = self.spec;
        let (esz, w) = (s.esz(), &s.w.strides);
        let d = match self.acc_w {
            Access::Transposed => tile_desc(esz, s.n, rows, w[2], w[1], self.tv, true),
            _ => tile_desc(esz, rows, s.n, w[1], w[2], self.n1p, true),
        };
        let hbm = Side::Hbm {
            slot: self.slots.w,
            off: elem_off(&s.w, 0, st.i, 0),
        };
        cx.dma(Side::Vmem(self.b[parity] as i32), hbm, &d, sem)?;
        Ok(d.bytes())
    }

    /// `P1 += A[:, block] @ B[block, :]` for the `A` block of step `st` (`ext`: its columns and
    /// rows; `a`: its VMEM address and row pitch in bytes), a chunk of the twin's drain after
    /// each round.
    pub(super) fn folds(
        &self,
        cx: &mut Ctx,
        st: &Step,
        ext: (u32, u32),
        a: (u32, u32),
        parity: usize,
        drain: &mut Drain,
    ) -> Result<(), KernelError> {
        let s = self.spec;
        let (cols, rows) = ext;
        let (ab, a_pitch) = a;
        let esz = s.esz();
        let core = &cx.chip.core;
        let (r, c, nmxu) = (core.mxu_rows, core.mxu_cols, core.mxus);
        let bb = self.b[parity];
        for kr0 in (0..cols).step_by(r as usize) {
            for (jt, jj) in (0..s.n).step_by(c as usize).enumerate() {
                let mxu = (jt as u32 % nmxu) as u8;
                let (kr, nc) = ((cols - kr0).min(r), (s.n - jj).min(c));
                let w: WTile = match self.acc_w {
                    Access::Transposed => {
                        (bb + (jj * self.tv + kr0) * esz, kr, nc, self.tv * esz, true)
                    }
                    _ => (
                        bb + (kr0 * self.n1p + jj) * esz,
                        kr,
                        nc,
                        self.n1p * esz,
                        false,
                    ),
                };
                let at: ATile = (ab + kr0 * esz, rows, a_pitch, false);
                let acc = !(st.i == 0 && kr0 == 0);
                let c_at = self.acc + (st.kk * self.n1p + jj) * 4;
                cx.fold(mxu, w, at, (c_at, self.n1p * 4), acc);
                if (jt as u32 + 1).is_multiple_of(nmxu) || jj + c >= s.n {
                    drain.chunk(cx)?;
                }
            }
        }
        Ok(())
    }

    /// `P1`'s epilogue and stores, in chunks of rows, once every block is folded.
    fn finish(&self, cx: &mut Ctx<'a>) -> Result<(), KernelError> {
        let s = self.spec;
        let (spec, slots) = (cx.spec, cx.slots);
        cx.spec = s;
        cx.slots = self.slots;
        let whole = Step {
            first_k: true,
            last_k: true,
            ..Step::default()
        };
        let mut d = Drain::new(
            self.slots.out0,
            &whole,
            (s.m, s.n, self.n1p),
            DRAIN_ROWS,
            0,
            (self.acc, self.x.clone(), self.o.clone()),
        );
        let mut stores = PingPong::new(SEM_STORE);
        stores.add(0, d.bytes(s));
        d.finish(cx)?;
        stores.wait_both(&mut cx.e);
        cx.spec = spec;
        cx.slots = slots;
        Ok(())
    }
}

/// The twin's spec of a pair.
fn twin_of(spec: &MatSpec) -> Result<&MatSpec, KernelError> {
    spec.twin
        .as_deref()
        .ok_or_else(|| KernelError::Unsupported("not a product pair".into()))
}

/// Whether `spec` is a pair this module builds: batch 1, `P1 [m, n1] = A [m, k] @ B`,
/// `P2 [k, n2] = A^T @ C`, `A` read by rows.
fn check(spec: &MatSpec) -> Result<&MatSpec, KernelError> {
    let t = twin_of(spec)?;
    let shapes = spec.batch == 1 && t.batch == 1 && t.m == spec.k && t.k == spec.m;
    let a_t = [spec.a.strides[0], spec.a.strides[2], spec.a.strides[1]];
    if !shapes || t.a.strides != a_t || t.fmt != spec.fmt || t.prec != spec.prec {
        return Err(KernelError::Unsupported(
            "the twin is not the product of the first one's A transposed".into(),
        ));
    }
    // The rider reads the twin's A block as `[m][tv]`: the twin must read A transposed.
    if spec.a.access(spec.m, spec.k) != Access::Normal
        || t.a.access(t.m, t.k) != Access::Transposed
        || t.n == 0
        || !t.extras.is_empty()
    {
        return Err(KernelError::Unsupported(
            "a product pair reads A by rows, its twin reads it transposed into a product of \
             some columns, with no epilogue inputs"
                .into(),
        ));
    }
    Ok(t)
}

/// The twin's streamed plan for `A` blocks of `tv` columns: one slice of all of `A`'s rows,
/// one tile of all of `C`'s columns.
fn twin_plan(t: &MatSpec, tv: u32, chip: &ChipInfo) -> MatPlan {
    let core = &chip.core;
    MatPlan {
        tm: tv,
        tn: t.n.next_multiple_of(core.mxu_cols.max(1)),
        tk: t.k.next_multiple_of(core.mxu_rows.max(1)),
        resident: false,
    }
}

/// VMEM bytes of a pair with `A` blocks of `tv` columns.
fn vmem_bytes(spec: &MatSpec, t: &MatSpec, tv: u32, chip: &ChipInfo) -> u64 {
    let p = twin_plan(t, tv, chip);
    // The twin's buffers, page-aligned as allocated, then the rider's.
    let (tm, tn, tk, e) = (p.tm as u64, p.tn as u64, p.tk as u64, t.esz() as u64);
    let out: u64 = if t.epilogue.is_some() {
        t.outputs()
            .map(|o| pages(tm * tn * o.dtype.size() as u64))
            .sum()
    } else {
        0
    };
    let twin = 2 * (pages(tm * tk * e) + pages(tk * tn * e) + pages(tm * tn * 4) + out);
    twin + rider_sizes(spec, tv, chip)
        .into_iter()
        .map(pages)
        .sum::<u64>()
}

/// The estimated seconds of a pair with `A` blocks of `tv` columns (the streamed estimate of
/// [`super::plan`], both products' folds in each step).
fn estimate(spec: &MatSpec, t: &MatSpec, tv: u32, chip: &ChipInfo) -> f64 {
    let core = &chip.core;
    let (r, c, units) = (
        core.mxu_rows.max(1) as u64,
        core.mxu_cols.max(1) as u64,
        core.mxus.max(1) as u64,
    );
    let (m, v, n1, n2) = (spec.m as u64, spec.k as u64, spec.n as u64, t.n as u64);
    let tv = (tv as u64).min(v);
    let e = spec.esz() as u64;
    let (out1, out2) = (spec.out_bytes() as u64, t.out_bytes() as u64);
    let extras: u64 = spec.extras.iter().map(|x| x.dtype.size() as u64).sum();
    let passes = spec.prec.passes() as u64;
    let clock = core.clock_hz.max(1.0);
    let bw = chip.hbm_bytes_per_s.max(1.0);
    let latency = chip.hbm_latency_ns * 1e-9;
    let steps = v.div_ceil(tv);
    let twin_folds = m.div_ceil(r) * n2.div_ceil(c).div_ceil(units) * tv.max(r);
    let main_folds = tv.div_ceil(r) * n1.div_ceil(c).div_ceil(units) * m.max(r);
    let mxu_step = ((twin_folds + main_folds) * passes) as f64 / clock;
    let hbm_step = ((m * tv + tv * n1) * e + tv * n2 * out2) as f64 / bw;
    let step = mxu_step.max(latency + hbm_step) + 200.0 / clock;
    let first = latency + ((m * tv + m * n2 + tv * n1) * e) as f64 / bw;
    let epi = ((m * n1).div_ceil(1024) * 4) as f64 / clock;
    let last = 2.0 * latency + ((tv * n2 * out2 + m * n1 * (out1 + extras)) as f64) / bw + epi;
    steps as f64 * step + first + last
}

/// Chooses the `A` block width of a pair: the smallest estimated time among the widths
/// (multiples of the array's rows, powers of two up to 2048, or all of `A`'s columns) whose
/// buffers fit three quarters of VMEM.
pub fn plan(spec: &MatSpec, chip: &ChipInfo) -> Result<MatPlan, KernelError> {
    let t = check(spec)?;
    let r = chip.core.mxu_rows.max(1);
    let budget = chip.core.vmem_bytes * 3 / 4;
    let whole = spec.k.next_multiple_of(r);
    let mut best: Option<(f64, u32)> = None;
    let mut tv = r;
    loop {
        let w = tv.min(whole);
        if vmem_bytes(spec, t, w, chip) <= budget {
            let est = estimate(spec, t, w, chip);
            if best.is_none_or(|(b, _)| est < b * 0.999) {
                best = Some((est, w));
            }
        }
        if w >= whole || tv >= 2048 {
            break;
        }
        tv *= 2;
    }
    let (_, tv) = best.ok_or_else(|| {
        KernelError::TooLarge("a product pair's accumulator and C do not fit VMEM".into())
    })?;
    Ok(twin_plan(t, tv, chip))
}

/// Whether the pair as one kernel is estimated faster than its two products apart (each
/// with its own best tiling, [`super::estimate_seconds`]). Reading `A` once saves HBM time,
/// but the pair loads `C` whole before its first fold and drains `P1` only after its last:
/// on products the matrix units bind (a width-2048 block's projections: 218 us paired
/// against 2 x 99 apart), apart is faster.
pub fn pays(spec: &MatSpec, chip: &ChipInfo) -> bool {
    let (Ok(t), Ok(p)) = (check(spec), plan(spec, chip)) else {
        return false;
    };
    let mut first = spec.clone();
    first.twin = None;
    let apart: f64 = [&first, t]
        .into_iter()
        .map(|s| {
            super::plan(s, chip, false)
                .map(|p| super::estimate_seconds(s, &p, chip))
                .unwrap_or(f64::INFINITY)
        })
        .sum();
    estimate(spec, t, p.tm, chip) < apart
}

/// Builds a pair's kernel (one core). Arguments: `A`, `B`, `P1`'s extras, `C`, `P1`'s outputs,
/// `P2` (buffers), then one scalar per buffer: its storage offset in elements.
pub fn build(
    spec: &MatSpec,
    plan: &MatPlan,
    chip: &ChipInfo,
    name: &str,
) -> Result<Program, KernelError> {
    let t = check(spec)?;
    if *plan != twin_plan(t, plan.tm, chip) {
        return Err(KernelError::Unsupported(
            "a product pair's plan takes all of A's rows and C's columns".into(),
        ));
    }
    if vmem_bytes(spec, t, plan.tm, chip) > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(
            "a product pair's buffers do not fit VMEM".into(),
        ));
    }
    let nx = spec.extras.len();
    let no = spec.extra_outs.len() + 1;
    let mut e = Emitter::new(name);
    let names = ["a".to_string(), "w".to_string()]
        .into_iter()
        .chain((0..nx).map(|i| format!("x{i}")))
        .chain(["c".to_string(), "out".to_string()])
        .chain((1..no).map(|i| format!("out{i}")))
        .chain(["out_t".to_string()]);
    let args = e.buffers_with_offsets(names);
    let mut pool = RegPool::default();
    let scratch = pool.take().expect("a fresh pool has registers");
    let sizes: Vec<u32> = [spec.a.dtype.size() as u32, spec.w.dtype.size() as u32]
        .into_iter()
        .chain(spec.extras.iter().map(|x| x.dtype.size() as u32))
        .chain([t.w.dtype.size() as u32])
        .chain(spec.outputs().map(|o| o.dtype.size() as u32))
        .chain([t.out.dtype.size() as u32])
        .collect();
    let base = base_regs(&mut e, &mut pool, &args, &sizes)?;
    let main_slots = Slots {
        a: 0,
        w: 1,
        x0: 2,
        out0: 3 + nx as u8,
    };
    let twin_slots = Slots {
        a: 0,
        w: 2 + nx as u8,
        x0: 3 + nx as u8,
        out0: (3 + nx + no) as u8,
    };
    let mut cx = Ctx {
        e,
        pool,
        spec: t,
        slots: twin_slots,
        chip,
        base,
        args,
        scratch,
    };
    let k = Streamed::new(&cx, plan, 0..u32::MAX)?;
    let mut rider = Rider::new(&cx, spec, main_slots, plan.tm, k.vmem_end())?;
    let mut extras = PingPong::new(SEM_EXTRA);
    extras.add(0, rider.load_extras(&mut cx, SEM_EXTRA)?);
    streamed::run(&mut cx, &k, Some(&mut rider))?;
    extras.wait_both(&mut cx.e);
    rider.finish(&mut cx)?;
    Ok(cx.e.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ir::ProgBuilder;
    use crate::kernels::matmul::MatOperand;
    use tpuemu_isa::ops::{MxuFmt, Precision};

    fn cast() -> crate::ir::Prog {
        let mut b = ProgBuilder::new();
        let r = b.input(0, DType::F32, false);
        let r = b.cast(r, DType::BF16);
        b.output(r);
        b.finish()
    }

    /// `dX [m, n1] = dY [m, v] @ W [v, n1]` beside `dW [v, n2] = dY^T @ X [m, n2]`, bf16.
    fn pair(m: u32, v: u32, n1: u32, n2: u32) -> MatSpec {
        let bf = |r, c| MatOperand::contiguous(DType::BF16, r, c);
        let dy = bf(m, v);
        let mut dyt = dy.clone();
        dyt.strides.swap(1, 2);
        let spec = |m, n, k, a, w, out| MatSpec {
            batch: 1,
            m,
            n,
            k,
            fmt: MxuFmt::Bf16,
            prec: Precision::P1,
            a,
            w,
            extras: Vec::new(),
            out,
            extra_outs: Vec::new(),
            epilogue: Some(cast()),
            twin: None,
            rows: None,
        };
        let mut first = spec(m, n1, v, dy, bf(v, n1), bf(m, n1));
        first.twin = Some(Box::new(spec(v, n2, m, dyt, bf(m, n2), bf(v, n2))));
        first
    }

    #[test]
    fn pairs_run_whole_where_reading_dy_once_pays() {
        let emu = tpuemu_emulator::Emulator::new(tpuemu_emulator::builtin("v5e").unwrap());
        let v5e = tpuemu_isa::Device::topology(&emu.unwrap()).chips[0].clone();
        // The demo block's LM head (dY 8 MiB; measured 47.8 us paired against 58.5 apart) and
        // its attention projections (6.4 against 8.8): whole.
        assert!(pays(&pair(512, 8192, 512, 512), &v5e));
        assert!(pays(&pair(512, 512, 512, 512), &v5e));
        // A width-2048 block's projections, bound by the matrix units (218 us paired against
        // 2 x 99 apart): apart.
        assert!(!pays(&pair(2048, 2048, 2048, 2048), &v5e));
    }
}
