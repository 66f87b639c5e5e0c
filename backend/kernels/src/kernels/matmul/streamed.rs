//! The streamed schedule: output tiles accumulate in VMEM while K streams through in slices,
//! every buffer doubled (see the [module docs](super)).
//!
//! Steps run in order `(batch, tile row, tile column, K slice)`. Step `i + 1`'s A and W slices
//! load while step `i` folds; an output tile's epilogue and store ([`Drain`]) are interleaved
//! with the next tile's folds. A [`Rider`] (a pair's first product) loads its own block beside
//! each new A block and folds that A block a second time.

use super::drain::Drain;
use super::pair::Rider;
use super::{ATile, WTile, tile_desc};
use super::{Access, Ctx, MatOperand, MatPlan, MatSpec, SEM_EXTRA, SEM_LOAD, SEM_STORE, Side};
use crate::codegen::PingPong;
use crate::kernels::KernelError;

/// One step of the streamed schedule: output tile `(b, i, j)`, K slice starting at `kk`.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Step {
    pub tile: u32,
    pub b: u32,
    pub i: u32,
    pub j: u32,
    pub kk: u32,
    pub first_k: bool,
    pub last_k: bool,
}

/// Byte offset of element `(b, r0, c0)` of an operand.
pub(super) fn elem_off(o: &MatOperand, b: u32, r0: u32, c0: u32) -> i64 {
    (b as i64 * o.strides[0] as i64
        + r0 as i64 * o.strides[1] as i64
        + c0 as i64 * o.strides[2] as i64)
        * o.dtype.size() as i64
}

/// VMEM byte addresses of the double buffers.
struct Buffers {
    a: [u32; 2],
    w: [u32; 2],
    /// f32 accumulators.
    c: [u32; 2],
    /// Epilogue inputs.
    x: Vec<[u32; 2]>,
    /// Epilogue outputs, one pair per output (the accumulators when there is no epilogue).
    o: Vec<[u32; 2]>,
    /// A row epilogue's argument operands, in argument order.
    r: Vec<[u32; 2]>,
    /// The first VMEM byte past them.
    end: u32,
}

impl Buffers {
    fn new(cx: &Ctx, p: &MatPlan) -> Result<Self, KernelError> {
        let s = cx.spec;
        let (tm, tn, tk, esz) = (p.tm, p.tn, p.tk, s.esz());
        let mut at = 0u32;
        let mut alloc = |bytes: u32| {
            let a = at;
            at += bytes.div_ceil(4096) * 4096;
            a
        };
        let mut two = |bytes: u32| [alloc(bytes), alloc(bytes)];
        let a = two(tm * tk * esz);
        let w = two(tk * tn * esz);
        let c = two(tm * tn * 4);
        let x = s
            .extras
            .iter()
            .map(|x| two(tm * tn * x.dtype.size() as u32))
            .collect();
        let o = if s.epilogue.is_some() {
            s.outputs()
                .map(|o| two(tm * tn * o.dtype.size() as u32))
                .collect()
        } else {
            vec![c]
        };
        let r = s
            .rows
            .iter()
            .flat_map(|r| r.args())
            .map(|(_, o)| two(super::rows::buffer_bytes(o, tm, tn)))
            .collect();
        if at as u64 > cx.chip.core.vmem_bytes {
            return Err(KernelError::TooLarge(
                "matmul buffers do not fit VMEM".into(),
            ));
        }
        Ok(Buffers {
            a,
            w,
            c,
            x,
            o,
            r,
            end: at,
        })
    }
}

/// Every step, in order.
fn steps(s: &MatSpec, p: &MatPlan) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut tile = 0;
    for b in 0..s.batch {
        for i in (0..s.m).step_by(p.tm as usize) {
            for j in (0..s.n).step_by(p.tn as usize) {
                for kk in (0..s.k).step_by(p.tk as usize) {
                    steps.push(Step {
                        tile,
                        b,
                        i,
                        j,
                        kk,
                        first_k: kk == 0,
                        last_k: kk + p.tk >= s.k,
                    });
                }
                tile += 1;
            }
        }
    }
    steps
}

/// Buffer of each step's block of an operand, and whether the step loads it: a step whose
/// block (`key`) is the previous step's (one K slice: consecutive tiles of a row share A; one
/// column of tiles: they share W) reuses it instead of loading it again.
fn slots(steps: &[Step], key: impl Fn(&Step) -> (u32, u32, u32)) -> Vec<(usize, bool)> {
    let mut v: Vec<(usize, bool)> = Vec::with_capacity(steps.len());
    for (idx, st) in steps.iter().enumerate() {
        v.push(match idx.checked_sub(1) {
            Some(p) if key(&steps[p]) == key(st) => (v[p].0, false),
            Some(p) => (1 - v[p].0, true),
            None => (0, true),
        });
    }
    v
}

/// The schedule of one kernel.
pub(super) struct Streamed<'a> {
    s: &'a MatSpec,
    p: MatPlan,
    steps: Vec<Step>,
    a_slot: Vec<(usize, bool)>,
    w_slot: Vec<(usize, bool)>,
    bufs: Buffers,
    acc_a: Access,
    acc_w: Access,
    /// Rows of an output tile per drain chunk.
    chunk_rows: u32,
}

impl<'a> Streamed<'a> {
    pub(super) fn new(
        cx: &Ctx<'a>,
        p: &MatPlan,
        tiles: std::ops::Range<u32>,
    ) -> Result<Self, KernelError> {
        let s = cx.spec;
        let core = &cx.chip.core;
        let steps: Vec<Step> = steps(s, p)
            .into_iter()
            .filter(|st| tiles.contains(&st.tile))
            .collect();
        // Rounds of matrix-unit work per step (one weight tile per unit each).
        let rounds =
            p.tk.div_ceil(core.mxu_rows) * p.tn.div_ceil(core.mxu_cols).div_ceil(core.mxus);
        // A finished tile's epilogue and store run in row chunks interleaved with the next
        // tile's rounds, so that the vector unit and the DMA engines work while the matrix
        // units do, and the stores spread over the tile instead of queueing ahead of its loads.
        let per_tile = rounds * s.k.div_ceil(p.tk);
        let chunk_rows =
            p.tm.div_ceil(per_tile.clamp(1, 32))
                .next_multiple_of(8)
                .min(p.tm);
        Ok(Streamed {
            s,
            p: *p,
            a_slot: slots(&steps, |st| (st.b, st.i, st.kk)),
            w_slot: slots(&steps, |st| (st.b, st.kk, st.j)),
            steps,
            bufs: Buffers::new(cx, p)?,
            acc_a: s.a.access(s.m, s.k),
            acc_w: s.w.access(s.k, s.n),
            chunk_rows,
        })
    }

    /// The first VMEM byte the schedule's buffers leave free.
    pub(super) fn vmem_end(&self) -> u32 {
        self.bufs.end
    }

    /// Rows, columns and K extent of a step (short at the edges).
    pub(super) fn ext(&self, st: &Step) -> (u32, u32, u32) {
        let (s, p) = (self.s, &self.p);
        (
            (s.m - st.i).min(p.tm),
            (s.n - st.j).min(p.tn),
            (s.k - st.kk).min(p.tk),
        )
    }

    /// Loads of step `idx` into buffer parity `idx % 2` (and the rider's beside a new A
    /// block); returns the bytes.
    fn load(
        &self,
        cx: &mut Ctx,
        idx: usize,
        rider: Option<&mut Rider>,
    ) -> Result<u64, KernelError> {
        let (s, st) = (self.s, &self.steps[idx]);
        let (tm, tn, tk, esz) = (self.p.tm, self.p.tn, self.p.tk, s.esz());
        let (rm, rn, rk) = self.ext(st);
        let sem = SEM_LOAD + (idx % 2) as u8;
        let (a, w) = (&s.a.strides, &s.w.strides);
        let da = match self.acc_a {
            Access::Transposed => tile_desc(esz, rk, rm, a[2], a[1], tm, true),
            _ => tile_desc(esz, rm, rk, a[1], a[2], tk, true),
        };
        let dw = match self.acc_w {
            Access::Transposed => tile_desc(esz, rn, rk, w[2], w[1], tk, true),
            _ => tile_desc(esz, rk, rn, w[1], w[2], tn, true),
        };
        let mut bytes = 0;
        if let (sa, true) = self.a_slot[idx] {
            let off = elem_off(&s.a, st.b, st.i, st.kk);
            let hbm = Side::Hbm {
                slot: cx.slots.a,
                off,
            };
            cx.dma(Side::Vmem(self.bufs.a[sa] as i32), hbm, &da, sem)?;
            bytes += da.bytes();
            if let Some(r) = rider {
                bytes += r.load(cx, st, rm, sa, sem)?;
            }
        }
        if let (sw, true) = self.w_slot[idx] {
            let off = elem_off(&s.w, st.b, st.kk, st.j);
            let hbm = Side::Hbm {
                slot: cx.slots.w,
                off,
            };
            cx.dma(Side::Vmem(self.bufs.w[sw] as i32), hbm, &dw, sem)?;
            bytes += dw.bytes();
        }
        Ok(bytes)
    }

    /// The epilogue inputs of the output tile that step `st` starts, into buffers `cb`.
    fn load_extras(
        &self,
        cx: &mut Ctx,
        st: &Step,
        cb: usize,
        pending: &mut PingPong,
    ) -> Result<(), KernelError> {
        let (rm, rn, _) = self.ext(st);
        for (xi, x) in self.s.extras.iter().enumerate() {
            let esz = x.dtype.size() as u32;
            let d = tile_desc(esz, rm, rn, x.strides[1], x.strides[2], self.p.tn, true);
            let hbm = Side::Hbm {
                slot: cx.slots.x0 + xi as u8,
                off: elem_off(x, st.b, st.i, st.j),
            };
            cx.dma(
                Side::Vmem(self.bufs.x[xi][cb] as i32),
                hbm,
                &d,
                pending.sem(cb).index(),
            )?;
            pending.add(cb, d.bytes());
        }
        let bufs: Vec<u32> = self.bufs.r.iter().map(|b| b[cb]).collect();
        super::rows::load_inputs(cx, st, rm, &bufs, cb, pending)
    }

    /// The folds of step `idx`, a chunk of `drain` after each round; then the rider's over
    /// the same A block.
    fn folds(
        &self,
        cx: &mut Ctx,
        idx: usize,
        drain: &mut Drain,
        rider: Option<&mut Rider>,
    ) -> Result<(), KernelError> {
        let st = &self.steps[idx];
        let (tm, tn, tk, esz) = (self.p.tm, self.p.tn, self.p.tk, self.s.esz());
        let core = &cx.chip.core;
        let (r, c, nmxu) = (core.mxu_rows, core.mxu_cols, core.mxus);
        let (rm, rn, rk) = self.ext(st);
        let cb = (st.tile % 2) as usize;
        let (wb, ab) = (
            self.bufs.w[self.w_slot[idx].0],
            self.bufs.a[self.a_slot[idx].0],
        );
        for kr0 in (0..rk).step_by(r as usize) {
            for (jt, jj) in (0..rn).step_by(c as usize).enumerate() {
                let mxu = (jt as u32 % nmxu) as u8;
                let (kr, nc) = ((rk - kr0).min(r), (rn - jj).min(c));
                let w: WTile = match self.acc_w {
                    Access::Transposed => (wb + (jj * tk + kr0) * esz, kr, nc, tk * esz, true),
                    _ => (wb + (kr0 * tn + jj) * esz, kr, nc, tn * esz, false),
                };
                let a: ATile = match self.acc_a {
                    Access::Transposed => (ab + kr0 * tm * esz, rm, tm * esz, true),
                    _ => (ab + kr0 * esz, rm, tk * esz, false),
                };
                let acc = !(st.first_k && kr0 == 0);
                cx.fold(mxu, w, a, (self.bufs.c[cb] + jj * 4, tn * 4), acc);
                if (jt as u32 + 1).is_multiple_of(nmxu) || jj + c >= rn {
                    drain.chunk(cx)?;
                }
            }
        }
        if let Some(r) = rider {
            let (sa, _) = self.a_slot[idx];
            r.folds(cx, st, (rm, rk), (self.bufs.a[sa], tm * esz), sa, drain)?;
        }
        Ok(())
    }

    /// The drain of the output tile that step `st` finishes, in buffers `cb`.
    fn drain_of(&self, cx: &Ctx, st: &Step, cb: usize) -> Drain {
        let (rm, rn, _) = self.ext(st);
        Drain::new(
            cx.slots.out0,
            st,
            (rm, rn, self.p.tn),
            self.chunk_rows,
            cb,
            (
                self.bufs.c[cb],
                self.bufs.x.iter().map(|x| x[cb]).collect(),
                self.bufs.o.iter().map(|o| o[cb]).collect(),
            ),
        )
        .with_rows(self.bufs.r.iter().map(|r| r[cb]).collect())
    }
}

/// Emits the schedule of output tiles `tiles` (numbered in step order; all of them for a
/// one-core kernel).
pub(super) fn emit(
    cx: &mut Ctx,
    p: &MatPlan,
    tiles: std::ops::Range<u32>,
) -> Result<(), KernelError> {
    let k = Streamed::new(cx, p, tiles)?;
    run(cx, &k, None)
}

/// Emits schedule `k`, with a rider product folding each new A block beside it (a pair's
/// first product, [`super::pair`]).
pub(super) fn run(
    cx: &mut Ctx,
    k: &Streamed,
    mut rider: Option<&mut Rider>,
) -> Result<(), KernelError> {
    let mut loads = PingPong::new(SEM_LOAD);
    let mut stores = PingPong::new(SEM_STORE);
    let mut extras = PingPong::new(SEM_EXTRA);
    let mut drain = Drain::default();
    loads.add(0, k.load(cx, 0, rider.as_deref_mut())?);
    for (idx, st) in k.steps.iter().enumerate() {
        let par = idx % 2;
        let cb = (st.tile % 2) as usize;
        if idx + 1 < k.steps.len() {
            loads.add(1 - par, k.load(cx, idx + 1, rider.as_deref_mut())?);
        }
        if st.first_k {
            // The accumulator is free once its previous tile's epilogue has read it (the
            // epilogue of the tile before this one is still interleaved below).
            if drain.parity() == Some(cb) {
                drain.finish(cx)?;
            }
            // The output buffer is free once its previous tile has drained to HBM.
            stores.wait(&mut cx.e, cb);
            k.load_extras(cx, st, cb, &mut extras)?;
        }
        loads.wait(&mut cx.e, par);
        k.folds(cx, idx, &mut drain, rider.as_deref_mut())?;
        if st.last_k {
            // Whatever of the previous tile is left, then this tile's turn.
            drain.finish(cx)?;
            extras.wait(&mut cx.e, cb);
            drain = k.drain_of(cx, st, cb);
            stores.add(cb, drain.bytes(cx.spec));
        }
    }
    drain.finish(cx)?;
    stores.wait_both(&mut cx.e);
    Ok(())
}
