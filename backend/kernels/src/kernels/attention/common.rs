//! What the forward and backward kernels share: the argument prologue, the loops over
//! (batch, key/value head, query head of the group), DMAs between a head's rows and VMEM, and
//! matrix products dealt out over the matrix units.

use std::collections::HashMap;

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::dma::DmaDescriptor;
use tpuemu_isa::ops::{CmpOp, IotaKind, MaskOp, MemFmt, VBinOp, VType};
use tpuemu_isa::{Addr, ChipInfo, DmaShape, Label, MReg, MemRef, Mxu, Program, SReg, Sem, VReg};

use super::{AttnSpec, LANES, imm};
use crate::codegen::loops::CountedLoop;
use crate::codegen::{BufferArgs, Emitter, RegPool, hbm_vmem_desc, part_range};
use crate::ir::AttentionNode;
use crate::kernels::KernelError;

/// Semaphore of the per-head loads (keys and values; the backward's other per-head rows).
const SEM_LOAD: u8 = 0;

/// The causal mask's bias tiles (see [`Kern::bias_tiles`]).
pub(super) const BIAS_TILES: u32 = 17;

/// What masks rows `row0..row0 + 8` (a multiple of 8) against a full key block of 128
/// columns from `c0` (a multiple of 128) under the causal mask: `None` when every column is
/// visible, else the index of the bias tile to add.
pub(super) fn bias_tile(row0: u32, c0: u32) -> Option<u32> {
    let d = row0 as i64 - c0 as i64;
    if d >= LANES as i64 - 1 {
        None
    } else if d < 0 {
        Some(BIAS_TILES - 1)
    } else {
        Some((d / 8) as u32)
    }
}

/// Emits `steps` steps for each of `groups` groups of 8 rows in a wavefront: at time `t`
/// group `i` does step `t - i`, so that neighbouring instructions belong to different groups
/// and usually to different units (a reduction on the cross-lane unit beside an exponential on
/// the transcendental unit beside ALU work), which the in-order core issues together, each
/// waiting only on its own group's previous step. One group finishes per row of the wavefront,
/// so a row should never wait: a step whose result takes long (a reduction, an exponential)
/// is followed by an empty step, which puts its consumer two rows later. With at least
/// `steps` register slots (`width`) the wavefront runs over all groups without a break (group
/// `i` uses slot `i % width`); with fewer it runs in batches of `width` groups.
/// `f(kern, group, slot, step)`; `slot` picks the group's registers.
pub(super) fn interleave(
    k: &mut Kern,
    groups: u32,
    width: u32,
    steps: usize,
    mut f: impl FnMut(&mut Kern, u32, u8, usize) -> Result<(), KernelError>,
) -> Result<(), KernelError> {
    // Groups in flight at once: the slots (a slot is reused once its group has finished).
    let batch = if width as usize >= steps {
        groups
    } else {
        width
    };
    for first in (0..groups).step_by(batch.max(1) as usize) {
        let n = (groups.min(first + batch) - first) as usize;
        for t in 0..steps + n - 1 {
            for i in 0..n {
                if let Some(step) = t.checked_sub(i).filter(|s| *s < steps) {
                    let g = first + i as u32;
                    f(k, g, (g % width) as u8, step)?;
                }
            }
        }
    }
    Ok(())
}

/// A query block: first row, rows, and the parity of its double buffers.
#[derive(Clone, Copy)]
pub(super) struct QBlock {
    pub r0: u32,
    pub rows: u32,
    pub parity: usize,
}

/// Vector register `i`.
pub(super) fn vr(i: u8) -> VReg {
    VReg::n(i)
}

/// `a` moved on by `off` bytes.
pub(super) fn plus(a: Addr, off: u32) -> Addr {
    Addr::new(a.base, a.offset + off as i32)
}

/// The scalar registers every attention kernel uses.
pub(super) struct Regs {
    /// Loop counters: batch, key/value head, query head within the group.
    pub cb: SReg,
    pub ch: SReg,
    pub cg: SReg,
    /// The loops' test, and a scratch for addresses.
    pub test: SReg,
    pub t: SReg,
    /// VMEM pointers of the key-block loop (free outside it).
    pub kp: SReg,
    pub vp: SReg,
}

/// A kernel being generated.
pub(super) struct Kern<'a> {
    pub e: Emitter,
    pub spec: &'a AttnSpec,
    pub chip: &'a ChipInfo,
    pub r: Regs,
    args: BufferArgs,
    pool: RegPool,
    /// SMEM byte address of each operand's base byte offset.
    base: u32,
    /// Each operand's element size.
    sizes: Vec<u32>,
    /// The current head's byte offset of the operands that have one (query side).
    head: HashMap<usize, SReg>,
    /// Bytes each semaphore still waits for.
    pending: HashMap<u8, u64>,
}

/// Rows of a product dealt to one matrix unit: `(unit, first row, rows)`.
pub(super) struct Units(pub Vec<(u8, u32, u32)>);

impl Units {
    /// `rows` output rows over the core's matrix units, in runs of whole 8-row groups.
    pub(super) fn split(chip: &ChipInfo, rows: u32) -> Self {
        let groups = rows.div_ceil(8);
        let nu = chip.core.mxus.min(groups).max(1);
        let per = groups.div_ceil(nu) * 8;
        let mut v = Vec::new();
        for u in 0..nu {
            let row0 = u * per;
            if row0 >= rows {
                break;
            }
            v.push((u as u8, row0, per.min(rows - row0)));
        }
        Units(v)
    }
}

/// One matrix product `out (+)= lhs @ w` over `units`: `w` is `k x n` (stored transposed when
/// `w_t`: `n` rows of `k` elements), the LHS rows are `k` wide (stored transposed when
/// `lhs_t`); `lhs(row0, k0)` and `out(row0, n0)` address the block of each unit.
pub(super) struct Mm<'f> {
    pub w: Addr,
    pub w_t: bool,
    pub k: u32,
    pub n: u32,
    pub w_stride: u32,
    pub lhs: &'f dyn Fn(u32, u32) -> Addr,
    pub lhs_stride: u32,
    pub lhs_t: bool,
    pub out: &'f dyn Fn(u32, u32) -> Addr,
    pub out_stride: u32,
    pub acc: bool,
}

/// A loop of a VMEM pointer over equal steps.
pub(super) struct PtrLoop {
    reg: SReg,
    step: u32,
    end: u32,
    top: Label,
    back: bool,
}

/// The key blocks of width `bk` that query rows `r0..r0 + rows` see: `(unmasked, all)`: the
/// first `unmasked` need no mask (every column a real key, none above the diagonal), the rest
/// up to `all` do; blocks past the diagonal are skipped.
pub(super) fn key_blocks(n: &AttentionNode, bk: u32, r0: u32, rows: u32) -> (u32, u32) {
    let s = n.s as u32;
    let end = if n.causal { s.min(r0 + rows) } else { s };
    let nblk = end.div_ceil(bk);
    let full = |j: u32| {
        let c1 = (j + 1) * bk;
        c1 <= s && bk == LANES && (!n.causal || c1 - 1 <= r0)
    };
    ((0..nblk).take_while(|j| full(*j)).count() as u32, nblk)
}

/// The loops over heads.
pub(super) struct Heads {
    lb: CountedLoop,
    lh: CountedLoop,
}

impl<'a> Kern<'a> {
    /// The prologue: buffers `names` (those in `f32_ops` hold f32, the rest the spec's
    /// dtype), their offsets, and the registers.
    pub(super) fn new(
        spec: &'a AttnSpec,
        chip: &'a ChipInfo,
        name: &str,
        names: &[&str],
        f32_ops: &[usize],
    ) -> Result<Self, KernelError> {
        let mut e = Emitter::new(name);
        let args = e.buffers_with_offsets(names.iter().map(|s| s.to_string()));
        let mut pool = RegPool::default();
        let mut take = || {
            pool.take()
                .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
        };
        let r = Regs {
            cb: take()?,
            ch: take()?,
            cg: take()?,
            test: take()?,
            t: take()?,
            kp: take()?,
            vp: take()?,
        };
        let sizes: Vec<u32> = (0..names.len())
            .map(|i| if f32_ops.contains(&i) { 4 } else { spec.esz() })
            .collect();
        let base = e.b.smem_alloc(names.len());
        for (i, sz) in sizes.iter().enumerate() {
            e.byte_offset(r.t, &args, i, *sz);
            e.sst(r.t, Addr::abs((base + 4 * i as u32) as i32));
        }
        Ok(Kern {
            e,
            spec,
            chip,
            r,
            args,
            pool,
            base,
            sizes,
            head: HashMap::new(),
            pending: HashMap::new(),
        })
    }

    /// A scalar register of the kernel's own.
    pub(super) fn reg(&mut self) -> Result<SReg, KernelError> {
        self.pool
            .take()
            .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
    }

    /// The finished program.
    pub(super) fn finish(self) -> Result<Program, KernelError> {
        Ok(self.e.finish()?)
    }

    /// Operand `op`'s element stride `d` (0 batch, 1 head, 2 row) in bytes, as an immediate.
    fn stride(&self, op: usize, d: usize) -> Result<i32, KernelError> {
        imm(
            self.spec.strides[op][d] * self.sizes[op] as i64,
            "attention operand",
        )
    }

    /// `r.t` = operand `op`'s byte offset of the current (batch, key/value head).
    pub(super) fn kv_offset(&mut self, op: usize) -> Result<SReg, KernelError> {
        let (t, s) = (self.r.t, self.r.kp);
        let (sb, sh) = (self.stride(op, 0)?, self.stride(op, 1)?);
        self.e.sld(t, Addr::abs((self.base + 4 * op as u32) as i32));
        self.e.smul(s, self.r.cb, sb);
        self.e.sadd(t, t, s);
        self.e.smul(s, self.r.ch, sh);
        self.e.sadd(t, t, s);
        Ok(t)
    }

    /// The current query head's byte offset of each of `ops`, in their head registers.
    pub(super) fn q_offsets(&mut self, ops: &[usize]) -> Result<(), KernelError> {
        let g = self.spec.group() as i32;
        for &op in ops {
            let reg = match self.head.get(&op) {
                Some(r) => *r,
                None => {
                    let r = self.pool.take().ok_or_else(|| {
                        KernelError::Unsupported("out of scalar registers".into())
                    })?;
                    self.head.insert(op, r);
                    r
                }
            };
            let (sb, sh) = (self.stride(op, 0)?, self.stride(op, 1)?);
            let t = self.r.t;
            self.e
                .sld(reg, Addr::abs((self.base + 4 * op as u32) as i32));
            self.e.smul(t, self.r.ch, g);
            self.e.sadd(t, t, self.r.cg);
            self.e.smul(t, t, sh);
            self.e.sadd(reg, reg, t);
            self.e.smul(t, self.r.cb, sb);
            self.e.sadd(reg, reg, t);
        }
        Ok(())
    }

    /// `rows` rows of `width` elements of operand `op`, from the HBM byte offset in `from`
    /// plus `off`, into dense VMEM at `vmem`, counted on `sem`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn load(
        &mut self,
        op: usize,
        from: SReg,
        off: i32,
        vmem: u32,
        rows: u32,
        width: u32,
        sem: u8,
    ) -> Result<(), KernelError> {
        let sz = self.sizes[op];
        let desc = hbm_vmem_desc(
            width * sz,
            &[(
                rows,
                self.spec.strides[op][2] * sz as i64,
                (width * sz) as i64,
            )],
            true,
        );
        let t = self.r.t;
        if off != 0 || t != from {
            self.e.sadd(t, from, off);
        }
        let d = self.e.descriptor(&desc) as i32;
        let dreg = self.e.konst(d);
        let v = self.e.konst(vmem as i32);
        self.e.dma(
            MemRef::vmem(v),
            MemRef::hbm(self.args.slots[op], t),
            DmaShape::Desc(dreg),
            Sem::n(sem),
        );
        *self.pending.entry(sem).or_default() += desc.bytes();
        Ok(())
    }

    /// All of this (batch, key/value head)'s rows of `op` into VMEM at `vmem`.
    pub(super) fn load_kv(
        &mut self,
        op: usize,
        vmem: u32,
        rows: u32,
        width: u32,
    ) -> Result<(), KernelError> {
        let from = self.kv_offset(op)?;
        self.load(op, from, 0, vmem, rows, width, SEM_LOAD)
    }

    /// Rows `r0..r0 + rows` of the current query head's `op` into VMEM at `vmem`, on `sem`.
    pub(super) fn load_query(
        &mut self,
        op: usize,
        vmem: u32,
        (r0, rows): (u32, u32),
        width: u32,
        sem: u8,
    ) -> Result<(), KernelError> {
        let from = self.head[&op];
        let off = imm(
            r0 as i64 * self.spec.strides[op][2] * self.sizes[op] as i64,
            "attention operand",
        )?;
        self.load(op, from, off, vmem, rows, width, sem)
    }

    /// Waits for everything counted on `sem`.
    pub(super) fn wait(&mut self, sem: u8) {
        let bytes = self.pending.remove(&sem).unwrap_or(0);
        self.e.wait_bytes(Sem::n(sem), bytes);
    }

    /// Waits for the per-head loads.
    pub(super) fn wait_loads(&mut self) {
        self.wait(SEM_LOAD);
    }

    /// Stores dense VMEM rows at `vmem` to operand `op` at the byte offset in `at` plus
    /// `off`: `rows` rows of `width` elements (`width` of 1 and a row stride of 1: one run).
    /// Returns the bytes it moves.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store(
        &mut self,
        op: usize,
        at: SReg,
        off: i64,
        vmem: u32,
        rows: u32,
        width: u32,
        sem: u8,
    ) -> Result<u64, KernelError> {
        let sz = self.sizes[op];
        let row = self.spec.strides[op][2] * sz as i64;
        let off = imm(off * row, "attention result")?;
        let t = self.r.t;
        self.e.sadd(t, at, off);
        let v = self.e.konst(vmem as i32);
        let bytes = (rows * width * sz) as u64;
        let shape = if row == (width * sz) as i64 || rows == 1 {
            DmaShape::Len(self.e.konst(bytes as i32))
        } else {
            let desc: DmaDescriptor =
                hbm_vmem_desc(width * sz, &[(rows, row, (width * sz) as i64)], false);
            let d = self.e.descriptor(&desc) as i32;
            DmaShape::Desc(self.e.konst(d))
        };
        self.e.dma(
            MemRef::hbm(self.args.slots[op], t),
            MemRef::vmem(v),
            shape,
            Sem::n(sem),
        );
        Ok(bytes)
    }

    /// The current query head's byte offset register of `op`.
    pub(super) fn head_reg(&self, op: usize) -> SReg {
        self.head[&op]
    }

    /// Opens a loop of `reg` from `start` in steps of `step`, `trips` times.
    pub(super) fn begin_ptr_loop(
        &mut self,
        reg: SReg,
        start: u32,
        step: u32,
        trips: u32,
    ) -> PtrLoop {
        self.e.smov(reg, start as i32);
        let top = self.e.here();
        self.e.forget_constants();
        PtrLoop {
            reg,
            step,
            end: start + step * trips,
            top,
            back: trips > 1,
        }
    }

    /// Closes a pointer loop.
    pub(super) fn end_ptr_loop(&mut self, l: PtrLoop) {
        if l.back {
            self.e.sadd(l.reg, l.reg, l.step as i32);
            self.e.scmp(CmpOp::Lt, self.r.test, l.reg, l.end as i32);
            self.e.brnz(self.r.test, l.top);
        }
    }

    /// Writes the causal mask's bias tiles at VMEM `at` ([`BIAS_TILES`] f32 `(8, 128)` tiles):
    /// tile `i < 16` is 0 where `lane <= 8 i + sublane` and -inf elsewhere, the last is -inf
    /// everywhere. Rows `row0..row0 + 8` against a key block from column `c0` add tile
    /// [`bias_tile`]`(row0, c0)`: one load and one add instead of building the mask.
    pub(super) fn bias_tiles(&mut self, at: u32) {
        let (lane, sub, t, zero, out) = (vr(0), vr(1), vr(2), vr(3), vr(4));
        let m = MReg::n(1);
        self.e.viota(IotaKind::Lane, lane);
        self.e.viota(IotaKind::Sub, sub);
        self.e.vmov(VType::F32, zero, 0u32);
        let ninf = f32::NEG_INFINITY.to_bits();
        for i in 0..BIAS_TILES {
            if i + 1 == BIAS_TILES {
                self.e.vmov(VType::F32, out, ninf);
            } else {
                self.e.vbin(VBinOp::Add, VType::I32, t, sub, 8 * i);
                self.e.vcmp(CmpOp::Le, VType::I32, m, lane, t);
                self.e.vsel(VType::F32, out, m, zero, ninf);
            }
            let a = Addr::abs((at + i * 4096) as i32);
            self.e.vst(MemFmt::W32, out, a, VAccess::DENSE);
        }
    }

    /// `keep` = the columns of rows `row0..row0 + 8` that are real keys and, when causal, not
    /// above the diagonal; the block starts at column `c0` and has `cols` real columns.
    pub(super) fn keep_mask(
        &mut self,
        keep: MReg,
        below: MReg,
        (lane, sub): (VReg, VReg),
        row0: u32,
        c0: u32,
        cols: u32,
    ) -> Result<(), KernelError> {
        self.e.viota(IotaKind::Lane, lane);
        self.e.vcmp(CmpOp::Lt, VType::I32, keep, lane, cols);
        if self.spec.node.causal {
            let d = imm(c0 as i64 - row0 as i64, "attention mask offset")?;
            self.e.viota(IotaKind::Sub, sub);
            self.e.vbin(VBinOp::Add, VType::I32, lane, lane, d as u32);
            self.e.vcmp(CmpOp::Le, VType::I32, below, lane, sub);
            self.e.mlogic(MaskOp::And, keep, keep, below);
        }
        Ok(())
    }

    /// `out (+)= lhs @ w` on the matrix units, the K dim in chunks of the array's rows and N in
    /// chunks of its columns.
    pub(super) fn matmul(&mut self, units: &Units, m: &Mm) {
        let (ar, ac) = (self.chip.core.mxu_rows, self.chip.core.mxu_cols);
        for n0 in (0..m.n).step_by(ac as usize) {
            for k0 in (0..m.k).step_by(ar as usize) {
                for &(u, row0, rows) in &units.0 {
                    self.feed(Mxu::n(u), m, (k0, n0), (m.lhs)(row0, k0), rows);
                }
                for &(u, row0, rows) in &units.0 {
                    let (rr, os) = (self.e.konst(rows as i32), self.e.konst(m.out_stride as i32));
                    self.e
                        .mxu_pop(Mxu::n(u), m.acc || k0 > 0, (m.out)(row0, n0), rr, os);
                }
            }
        }
    }
}

impl Kern<'_> {
    /// Loads the weight tile of `m` at `(k0, n0)` into unit `u` and streams `rows` LHS rows
    /// from `lhs` through it.
    fn feed(&mut self, u: Mxu, m: &Mm, (k0, n0): (u32, u32), lhs: Addr, rows: u32) {
        let (fmt, prec) = self.spec.mxu();
        let esz = self.spec.esz();
        let (ar, ac) = (self.chip.core.mxu_rows, self.chip.core.mxu_cols);
        let (kc, nc) = (ar.min(m.k - k0), ac.min(m.n - n0));
        let woff = if m.w_t {
            n0 * m.w_stride + k0 * esz
        } else {
            k0 * m.w_stride + n0 * esz
        };
        let (kr, nr, ws) = (
            self.e.konst(kc as i32),
            self.e.konst(nc as i32),
            self.e.konst(m.w_stride as i32),
        );
        self.e.mxu_lw(u, fmt, m.w_t, plus(m.w, woff), kr, nr, ws);
        let (rr, ls) = (self.e.konst(rows as i32), self.e.konst(m.lhs_stride as i32));
        self.e.mxu_mm(u, fmt, m.lhs_t, prec, lhs, rr, ls);
    }

    /// `out (+)= lhs @ w` with the K dim dealt out over the matrix units (chunk `c` of the
    /// array's rows to unit `c % units`), each unit streaming all `rows` rows of its chunk;
    /// the units' partial products accumulate into `out` in chunk order. For products with
    /// few rows and a long K (`dV += P^T dO`), where dealing out rows would leave each unit
    /// loading a weight tile per handful of rows.
    pub(super) fn matmul_ksplit(&mut self, rows: u32, m: &Mm) {
        let (ar, ac) = (self.chip.core.mxu_rows, self.chip.core.mxu_cols);
        let nu = self.chip.core.mxus.max(1);
        for n0 in (0..m.n).step_by(ac as usize) {
            let chunks: Vec<u32> = (0..m.k).step_by(ar as usize).collect();
            for (c, &k0) in chunks.iter().enumerate() {
                let u = Mxu::n((c as u32 % nu) as u8);
                self.feed(u, m, (k0, n0), (m.lhs)(0, k0), rows);
            }
            for c in 0..chunks.len() {
                let u = Mxu::n((c as u32 % nu) as u8);
                let (rr, os) = (self.e.konst(rows as i32), self.e.konst(m.out_stride as i32));
                self.e.mxu_pop(u, m.acc || c > 0, (m.out)(0, n0), rr, os);
            }
        }
    }
}

impl Heads {
    /// Opens the loops over batches and key/value heads: part `p` of `parts` (the kernel split
    /// over cores by key/value heads when they divide, else by batches; see [`Heads::parts`]).
    pub(super) fn open(k: &mut Kern, batch: u32, kv_heads: u32, p: usize, parts: usize) -> Self {
        let (cb, ch, test) = (k.r.cb, k.r.ch, k.r.test);
        let part = |n: u32, split: bool| {
            if split {
                let r = part_range(n as usize, parts, p);
                r.start as u32..r.end as u32
            } else {
                0..n
            }
        };
        let by_heads = (kv_heads as usize).is_multiple_of(parts);
        let lb = k.e.begin_loop_over(cb, test, part(batch, !by_heads), 1);
        let lb = lb.straight_if_once();
        k.e.forget_constants();
        let lh = k.e.begin_loop_over(ch, test, part(kv_heads, by_heads), 1);
        let lh = lh.straight_if_once();
        k.e.forget_constants();
        Heads { lb, lh }
    }

    /// How many cores a kernel over `batch x kv_heads` (batch, key/value head) pairs splits
    /// over, of `cores`: all of them when they divide the key/value heads or the batches (each
    /// core then takes whole heads: no two cores add into the same `dK`, `dV`), else one.
    pub(super) fn parts(batch: u32, kv_heads: u32, cores: usize) -> usize {
        let divides = |n: u32| (n as usize).is_multiple_of(cores);
        if cores > 1 && (divides(kv_heads) || divides(batch)) {
            cores
        } else {
            1
        }
    }

    /// Opens the loop over the query heads of the current key/value head.
    pub(super) fn open_group(k: &mut Kern, group: u32) -> CountedLoop {
        let l =
            k.e.begin_loop(k.r.cg, k.r.test, group, 1)
                .straight_if_once();
        k.e.forget_constants();
        l
    }

    /// Closes the loops.
    pub(super) fn close(self, k: &mut Kern) {
        k.e.end_loop(self.lh);
        k.e.end_loop(self.lb);
    }
}
