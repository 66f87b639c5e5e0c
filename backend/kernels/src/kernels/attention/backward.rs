//! The backward kernel: `dq`, `dk`, `dv` from `q`, `k`, `v`, `out`, `grad_out` and the forward's
//! logsumexp, recomputing the weights block by block (see the [module docs](super)).
//!
//! For each (batch, key/value head): keys and values load into VMEM and `dK`, `dV` accumulate
//! there in f32 over every query block of every query head of the group; for each query block
//! its `q`, `grad_out` and `out` rows load, `D = rowsum(dO * O)` is formed, and for each key
//! block the kernel recomputes `P = exp(scale S - lse)`, adds `P^T dO` to `dV`, forms
//! `dS = P (dO V^T - D)`, adds `dS K` to the block's `dQ` and `dS^T Q` to `dK` (the scale is
//! applied once, when `dQ` and `dK` are stored).
//!
//! Arguments: `q`, `k`, `v`, `out`, `grad_out`, `lse`, `dq`, `dk`, `dv` (buffers), then each
//! one's storage offset in elements.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{Axis, CmpOp, IotaKind, MemFmt, RedOp, SAluOp, VBinOp, VType, VUnOp};
use tpuemu_isa::{Addr, ChipInfo, MReg, Program, SReg, Sem};

use super::common::{Heads, Kern, Mm, QBlock, Units, bias_tile, interleave, key_blocks, plus, vr};
use super::layout::{BwdLayout as Layout, S_RING};
use super::{AttnSpec, LANES};
use crate::codegen::{PingPong, emit_parts};
use crate::kernels::KernelError;

/// Semaphores: the query head's logsumexp, a query block's rows, `dq` stores (by parity),
/// `dk`/`dv` stores.
const SEM_HEAD: u8 = 1;
const SEM_ROWS: u8 = 2;
const SEM_DQ: u8 = 3;
const SEM_DKV: u8 = 5;

/// Operand indices.
const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const OUT: usize = 3;
const DOUT: usize = 4;
const LSE: usize = 5;
const DQ: usize = 6;
const DK: usize = 7;
const DV: usize = 8;

/// A key block: its keys and values, its first key, real columns, whether it is masked.
#[derive(Clone, Copy)]
struct KvBlock {
    k: Addr,
    v: Addr,
    /// The block's first key (unrolled blocks), or `None` in the loop, where it follows from
    /// the key pointer.
    c0: u32,
    in_loop: bool,
    cols: u32,
    masked: bool,
}

/// Builds the backward kernel.
pub fn build(
    spec: &AttnSpec,
    chip: &ChipInfo,
    name: &str,
    cores: usize,
) -> Result<Program, KernelError> {
    let lay = Layout::new(spec, chip);
    if lay.end as u64 > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(
            "flash attention backward: one head does not fit VMEM".into(),
        ));
    }
    let names = ["q", "k", "v", "out", "grad_out", "lse", "dq", "dk", "dv"];
    let mut k = Kern::new(spec, chip, name, &names, &[LSE])?;
    let bufs = BufRegs {
        cs: k.reg()?,
        ts: k.reg()?,
        cp: k.reg()?,
    };
    let b = Bwd {
        lay,
        bufs,
        store: PingPong::new(SEM_DQ),
    };
    let n = spec.node.clone();
    if n.causal {
        k.bias_tiles(b.lay.bias);
    }
    let (batch, kv) = (n.batch as u32, n.kv_heads as u32);
    let parts = Heads::parts(batch, kv, cores);
    let reg = k.r.test;
    let mut cx = (k, b);
    emit_parts(
        &mut cx,
        |c| &mut c.0.e,
        parts,
        reg,
        |(k, b), p| {
            // Each head's stores are waited for when their buffers are next written (the
            // first head's as if a head before it had stored), the last head's at the end.
            let kv_bytes = b.kv_bytes(k);
            k.e.signal_bytes(Sem::n(SEM_DKV), kv_bytes);
            let last = b.last_dq_stores(k);
            b.store.prime(&mut k.e, last);
            let heads = Heads::open(k, batch, kv, p, parts);
            k.load_kv(K, b.lay.k, n.s as u32, n.e as u32)?;
            k.load_kv(V, b.lay.v, n.s as u32, n.ev as u32)?;
            b.zero(k, b.lay.dk, b.lay.s_pad / 8 * b.lay.et);
            b.zero(k, b.lay.dv, b.lay.s_pad / 8 * b.lay.evt);
            // With one query head per key/value head (no loop over the group), the keys and
            // values, the logsumexp and the first query rows load at once and are waited for
            // together (one HBM latency, not three in a row); a loop over the group's query
            // heads waits for the keys and values before it.
            if spec.group() > 1 {
                k.wait_loads();
            }
            let g = Heads::open_group(k, spec.group());
            k.q_offsets(&[Q, OUT, DOUT, LSE, DQ])?;
            let lse_at = k.head_reg(LSE);
            k.load(LSE, lse_at, 0, b.lay.lse, 1, n.l as u32, SEM_HEAD)?;
            b.query_blocks(k)?;
            if b.store.pending() != last {
                return Err(KernelError::Unsupported(
                    "flash attention backward: a head's stores differ from the last ones".into(),
                ));
            }
            k.e.end_loop(g);
            b.store_kv(k, kv_bytes)?;
            heads.close(k);
            b.store.wait_both(&mut k.e);
            k.e.wait_bytes(Sem::n(SEM_DKV), kv_bytes);
            Ok::<(), KernelError>(())
        },
    )?;
    cx.0.finish()
}

struct Bwd {
    lay: Layout,
    bufs: BufRegs,
    store: PingPong,
}

/// Scalar registers: the current key block's scores buffer (and `dP` after them) in the ring,
/// and the one after next (the key-block loop's), and its weights buffer (and `dS` after them),
/// which swaps with the other after every block.
#[derive(Clone, Copy)]
struct BufRegs {
    cs: SReg,
    ts: SReg,
    cp: SReg,
}

/// Where the next key block is: its keys and values, and its real columns.
#[derive(Clone, Copy)]
struct Next {
    k: Addr,
    v: Addr,
    cols: u32,
}

impl Bwd {
    /// Zeroes `tiles` f32 tiles from `at`.
    fn zero(&self, k: &mut Kern, at: u32, tiles: u32) {
        k.e.vmov(VType::F32, vr(0), 0u32);
        for t in 0..tiles {
            k.e.vst(MemFmt::W32, vr(0), abs(at + t * 4096), VAccess::DENSE);
        }
    }

    fn query_blocks(&mut self, k: &mut Kern) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let bq = self.lay.bq;
        for i in 0..(n.l as u32).div_ceil(bq) {
            let qb = QBlock {
                r0: i * bq,
                rows: bq.min(n.l as u32 - i * bq),
                parity: i as usize % 2,
            };
            let rows = (qb.r0, qb.rows);
            k.load_query(Q, self.lay.q, rows, n.e as u32, SEM_ROWS)?;
            k.load_query(DOUT, self.lay.dout, rows, n.ev as u32, SEM_ROWS)?;
            k.load_query(OUT, self.lay.out, rows, n.ev as u32, SEM_ROWS)?;
            self.zero(k, self.lay.dq, qb.rows.div_ceil(8) * self.lay.et);
            // The head's keys, values and logsumexp too, the first time (nothing later).
            k.wait_loads();
            k.wait(SEM_HEAD);
            k.wait(SEM_ROWS);
            self.row_dots(k, qb)?;
            self.key_blocks(k, qb)?;
            self.store_dq(k, qb)?;
        }
        Ok(())
    }

    /// `D = rowsum(dO * O)` of the block's rows, one f32 per row, and the rows' logsumexp
    /// on every lane. A wavefront over the groups of 8 rows ([`interleave`], 8 register slots),
    /// so that a group's lane reduction and loads are in flight while others work; the mask
    /// of the heads' last lanes is made once.
    fn row_dots(&self, k: &mut Kern, qb: QBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let (fmt, esz, ev) = (k.spec.mem_fmt(), k.spec.esz(), n.ev as u32);
        let lanes_m = MReg::n(3);
        if !ev.is_multiple_of(LANES) {
            k.e.mask_below(lanes_m, vr(63), IotaKind::Lane, ev % LANES);
        }
        let four = k.e.konst(4);
        let sub = k.e.konst((ev * esz) as i32);
        let evt = self.lay.evt as usize;
        let (dout, out, d, lse, lse_t) = (
            self.lay.dout,
            self.lay.out,
            self.lay.d,
            self.lay.lse,
            self.lay.lse_t,
        );
        // Per tile: load both, multiply and reduce, add; then the stores.
        let steps = 3 * evt + 2;
        interleave(k, qb.rows.div_ceil(8), 8, steps, |k, g, u, step| {
            let (acc, a, b, r) = (vr(u * 6), vr(u * 6 + 1), vr(u * 6 + 2), vr(u * 6 + 3));
            if step < 3 * evt {
                let t = (step / 3) as u32;
                let masked = LANES.min(ev - t * LANES) < LANES;
                let rows = VAccess {
                    sub_stride: Some(sub),
                    lane_stride: None,
                    mask: masked.then_some(lanes_m),
                };
                let at = |base: u32| abs(base + (g * 8 * ev + t * LANES) * esz);
                match step % 3 {
                    0 => {
                        k.e.vld(fmt, a, at(dout), rows);
                        k.e.vld(fmt, b, at(out), rows);
                    }
                    1 => {
                        k.e.vbin(VBinOp::Mul, VType::F32, a, a, b);
                        k.e.vred(RedOp::Add, VType::F32, Axis::Lane, r, a);
                    }
                    _ if t == 0 => {
                        k.e.vbin(VBinOp::Add, VType::F32, acc, r, 0u32);
                    }
                    _ => {
                        k.e.vbin(VBinOp::Add, VType::F32, acc, acc, r);
                    }
                }
            } else if step == 3 * evt {
                k.e.vst(MemFmt::W32, acc, abs(d + g * 4096), VAccess::DENSE);
                let rows = VAccess::rows(four).with_lane_stride(SReg::ZERO);
                k.e.vld(MemFmt::W32, r, abs(lse + (qb.r0 + 8 * g) * 4), rows);
            } else {
                k.e.vst(MemFmt::W32, r, abs(lse_t + g * 4096), VAccess::DENSE);
            }
            Ok(())
        })
    }

    /// The key blocks the query block sees, software-pipelined: the scores and `dP` of block
    /// `j + 2` (which need only the inputs) go to the matrix units before the vector unit
    /// starts on block `j`, into a ring of three buffers. Unmasked blocks whose block after next
    /// is unmasked too run in a loop; the rest are unrolled.
    fn key_blocks(&self, k: &mut Kern, qb: QBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let (s, bk, esz) = (n.s as u32, self.lay.bk, k.spec.esz());
        let (nfull, nblk) = key_blocks(&n, bk, qb.r0, qb.rows);
        let (kst, vst) = (bk * n.e as u32 * esz, bk * n.ev as u32 * esz);
        let lay = &self.lay;
        let blk = |j: u32| KvBlock {
            k: abs(lay.k + j * kst),
            v: abs(lay.v + j * vst),
            c0: j * bk,
            in_loop: false,
            cols: bk.min(s - j * bk),
            masked: j >= nfull,
        };
        let item = |j: u32| {
            let b = blk(j);
            Next {
                k: b.k,
                v: b.v,
                cols: b.cols,
            }
        };
        let ring = |j: u32| abs(lay.s[j as usize % S_RING]);
        let b = self.bufs;
        k.e.smov(b.cp, lay.p[0] as i32);
        for j in 0..nblk.min(2) {
            self.scores(k, qb, item(j), ring(j));
        }
        let looped = nfull.saturating_sub(2);
        if looped > 0 {
            let (kp, vp) = (k.r.kp, k.r.vp);
            k.e.smov(vp, lay.v as i32);
            k.e.smov(b.cs, lay.s[0] as i32);
            let lp = k.begin_ptr_loop(kp, lay.k, kst, looped);
            let kv = KvBlock {
                k: Addr::new(kp, 0),
                v: Addr::new(vp, 0),
                c0: 0,
                in_loop: true,
                cols: bk,
                masked: false,
            };
            let nx = Next {
                k: Addr::new(kp, 2 * kst as i32),
                v: Addr::new(vp, 2 * vst as i32),
                cols: bk,
            };
            self.ring_step(k, b.ts, b.cs, 2);
            self.scores(k, qb, nx, Addr::new(b.ts, 0));
            self.block(k, qb, kv, Addr::new(b.cs, 0))?;
            k.e.sadd(vp, vp, vst as i32);
            self.ring_step(k, b.cs, b.cs, 1);
            k.end_ptr_loop(lp);
        }
        for j in looped..nblk {
            if j + 2 < nblk {
                self.scores(k, qb, item(j + 2), ring(j + 2));
            }
            self.block(k, qb, blk(j), ring(j))?;
        }
        Ok(())
    }

    /// `reg` = the scores buffer `steps` after the one at `from`, in the ring (the loop's
    /// test register is the scratch: it is free until the loop's end).
    fn ring_step(&self, k: &mut Kern, reg: SReg, from: SReg, steps: u32) {
        let sz = (self.lay.s[1] - self.lay.s[0]) as i32;
        let end = self.lay.s[0] as i32 + S_RING as i32 * sz;
        let tf = k.r.test;
        k.e.sadd(reg, from, steps as i32 * sz);
        k.e.scmp(CmpOp::Ge, tf, reg, end);
        k.e.smul(tf, tf, S_RING as i32 * sz);
        k.e.salu(SAluOp::Sub, reg, reg, tf);
    }

    /// `S = Q K^T` and `dP = dO V^T` of a key block into the buffers at `out`.
    fn scores(&self, k: &mut Kern, qb: QBlock, kv: Next, out: Addr) {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let (e, ev) = (n.e as u32, n.ev as u32);
        let q_units = Units::split(k.chip, qb.rows);
        let (qrow, dorow) = (e * esz, ev * esz);
        let f32row = LANES * 4;
        let lay = &self.lay;
        k.matmul(
            &q_units,
            &Mm {
                w: kv.k,
                w_t: true,
                k: e,
                n: kv.cols,
                w_stride: qrow,
                lhs: &|r, k0| abs(lay.q + r * qrow + k0 * esz),
                lhs_stride: qrow,
                lhs_t: false,
                out: &|r, n0| plus(out, r * f32row + n0 * 4),
                out_stride: f32row,
                acc: false,
            },
        );
        k.matmul(
            &q_units,
            &Mm {
                w: kv.v,
                w_t: true,
                k: ev,
                n: kv.cols,
                w_stride: dorow,
                lhs: &|r, k0| abs(lay.dout + r * dorow + k0 * esz),
                lhs_stride: dorow,
                lhs_t: false,
                out: &|r, n0| plus(out, lay.dp_off + r * f32row + n0 * 4),
                out_stride: f32row,
                acc: false,
            },
        );
    }

    /// One key block of one query block, its scores and `dP` in the current buffers.
    fn block(
        &self,
        k: &mut Kern,
        qb: QBlock,
        kv: KvBlock,
        scores: Addr,
    ) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let (e, ev) = (n.e as u32, n.ev as u32);
        let q_units = Units::split(k.chip, qb.rows);
        let (qrow, dorow, prow) = (e * esz, ev * esz, LANES * esz);
        let lay = &self.lay;
        let b = self.bufs;
        self.weights_and_grads(k, qb, kv, scores)?;
        // dV += P^T dO: rows of the key block, P read transposed.
        let (dk_row, dv_row) = (lay.et * LANES * 4, lay.evt * LANES * 4);
        let dv_at = self.acc_at(k, kv, lay.dv, dv_row);
        k.matmul_ksplit(
            kv.cols,
            &Mm {
                w: abs(lay.dout),
                w_t: false,
                k: qb.rows,
                n: ev,
                w_stride: dorow,
                lhs: &|r, k0| Addr::new(b.cp, (k0 * prow + r * esz) as i32),
                lhs_stride: prow,
                lhs_t: true,
                out: &|r, n0| dv_at(r, n0),
                out_stride: dv_row,
                acc: true,
            },
        );
        // dQ += dS K.
        let dq_row = lay.et * LANES * 4;
        let ds = lay.ds_off;
        k.matmul(
            &q_units,
            &Mm {
                w: kv.k,
                w_t: false,
                k: kv.cols,
                n: e,
                w_stride: qrow,
                lhs: &|r, k0| Addr::new(b.cp, (ds + r * prow + k0 * esz) as i32),
                lhs_stride: prow,
                lhs_t: false,
                out: &|r, n0| abs(lay.dq + r * dq_row + n0 * 4),
                out_stride: dq_row,
                acc: true,
            },
        );
        // dK += dS^T Q.
        let dk_at = self.acc_at(k, kv, lay.dk, dk_row);
        k.matmul_ksplit(
            kv.cols,
            &Mm {
                w: abs(lay.q),
                w_t: false,
                k: qb.rows,
                n: e,
                w_stride: qrow,
                lhs: &|r, k0| Addr::new(b.cp, (ds + k0 * prow + r * esz) as i32),
                lhs_stride: prow,
                lhs_t: true,
                out: &|r, n0| dk_at(r, n0),
                out_stride: dk_row,
                acc: true,
            },
        );
        let p_x = (lay.p[0] ^ lay.p[1]) as i32;
        k.e.salu(SAluOp::Xor, b.cp, b.cp, p_x);
        Ok(())
    }

    /// Address of row `r`, column `n0` of the key block in an f32 accumulator at `base` with
    /// rows of `row` bytes. In the key loop the block's first row comes from the key pointer:
    /// `t = (kp - k) / kst * bk * row` is emitted here.
    fn acc_at(
        &self,
        k: &mut Kern,
        kv: KvBlock,
        base: u32,
        row: u32,
    ) -> impl Fn(u32, u32) -> Addr + use<> {
        let (t, kp) = (k.r.t, k.r.kp);
        let kst = self.lay.bk * k.spec.node.e as u32 * k.spec.esz();
        if kv.in_loop {
            k.e.ssub(t, kp, self.lay.k as i32);
            k.e.salu(SAluOp::Div, t, t, kst as i32);
            k.e.smul(t, t, (self.lay.bk * row) as i32);
        }
        let (c0, in_loop) = (kv.c0, kv.in_loop);
        move |r, n0| {
            if in_loop {
                Addr::new(t, (base + r * row + n0 * 4) as i32)
            } else {
                abs(base + (c0 + r) * row + n0 * 4)
            }
        }
    }

    /// `P = exp(scale S - lse)` (masked) and `dS = P (dP - D)`, both to VMEM in the operands'
    /// dtype (`P` for `dV`, `dS` for `dQ` and `dK`), 8 rows at a time in a wavefront (see
    /// [`super::common::interleave`]) with one register slot per step.
    fn weights_and_grads(
        &self,
        k: &mut Kern,
        qb: QBlock,
        kv: KvBlock,
        scores: Addr,
    ) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let scale = (n.scale as f32).to_bits();
        let (fmt, esz) = (k.spec.mem_fmt(), k.spec.esz());
        let lay = &self.lay;
        let b = self.bufs;
        // Causal masking of full blocks adds a bias tile; other masks are built.
        let tiles = n.causal && kv.cols == LANES;
        let bias = |g: u32| {
            (kv.masked && tiles)
                .then(|| bias_tile(qb.r0 + 8 * g, kv.c0))
                .flatten()
        };
        interleave(k, qb.rows.div_ceil(8), 8, 8, |k, g, u, step| {
            let r = |i: u8| vr(u * 6 + i);
            let (s, dp, lse, d, t) = (r(0), r(1), r(2), r(3), r(4));
            let (keep, below) = (MReg::n(1), MReg::n(2));
            match step {
                0 => {
                    let s_at = plus(scores, g * 4096);
                    k.e.vld(MemFmt::W32, s, s_at, VAccess::DENSE);
                    let dp_at = plus(scores, lay.dp_off + g * 4096);
                    k.e.vld(MemFmt::W32, dp, dp_at, VAccess::DENSE);
                }
                1 => {
                    k.e.vbin(VBinOp::Mul, VType::F32, s, s, scale);
                    k.e.vld(MemFmt::W32, lse, abs(lay.lse_t + g * 4096), VAccess::DENSE);
                    if let Some(i) = bias(g) {
                        k.e.vld(MemFmt::W32, t, abs(lay.bias + i * 4096), VAccess::DENSE);
                    }
                }
                2 => {
                    if bias(g).is_some() {
                        k.e.vbin(VBinOp::Add, VType::F32, s, s, t);
                    } else if kv.masked && !tiles {
                        let scratch = (vr(62), vr(63));
                        k.keep_mask(keep, below, scratch, qb.r0 + 8 * g, kv.c0, kv.cols)?;
                        k.e.vsel(VType::F32, s, keep, s, f32::NEG_INFINITY.to_bits());
                    }
                    k.e.vld(MemFmt::W32, d, abs(lay.d + g * 4096), VAccess::DENSE);
                }
                3 => {
                    k.e.vbin(VBinOp::Sub, VType::F32, s, s, lse);
                    k.e.vbin(VBinOp::Sub, VType::F32, dp, dp, d);
                }
                4 => {
                    k.e.vun(VUnOp::Exp, VType::F32, s, s);
                }
                // 5: the exponential's result is on its way.
                5 => {}
                6 => {
                    let p_at = Addr::new(b.cp, (g * 8 * LANES * esz) as i32);
                    k.e.vst(fmt, s, p_at, VAccess::DENSE);
                    k.e.vbin(VBinOp::Mul, VType::F32, dp, dp, s);
                }
                _ => {
                    let ds_at = Addr::new(b.cp, (lay.ds_off + g * 8 * LANES * esz) as i32);
                    k.e.vst(fmt, dp, ds_at, VAccess::DENSE);
                }
            }
            Ok(())
        })
    }

    /// The block's `scale * dQ` to `dq`.
    fn store_dq(&mut self, k: &mut Kern, qb: QBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let p = qb.parity;
        self.store.wait(&mut k.e, p);
        let e = n.e as u32;
        self.convert(
            k,
            self.lay.dq,
            self.lay.et,
            self.lay.dq_stage[p],
            qb.rows,
            e,
            n.scale,
        );
        let at = k.head_reg(DQ);
        let sem = SEM_DQ + p as u8;
        let bytes = k.store(DQ, at, qb.r0 as i64, self.lay.dq_stage[p], qb.rows, e, sem)?;
        self.store.add(p, bytes);
        Ok(())
    }

    /// The bytes of a key/value head's `dK` and `dV`.
    fn kv_bytes(&self, k: &Kern) -> u64 {
        let n = &k.spec.node;
        (n.s * (n.e + n.ev)) as u64 * k.spec.esz() as u64
    }

    /// The bytes of the last `dQ` store of each parity in a query head (0 for a parity no
    /// block has).
    fn last_dq_stores(&self, k: &Kern) -> [u64; 2] {
        let n = &k.spec.node;
        let (l, bq) = (n.l as u32, self.lay.bq);
        let mut last = [0u64; 2];
        for i in 0..l.div_ceil(bq) {
            let rows = bq.min(l - i * bq);
            last[i as usize % 2] = (rows * n.e as u32 * k.spec.esz()) as u64;
        }
        last
    }

    /// `scale * dK` and `dV` of the key/value head to `dk` and `dv`, from a staging buffer
    /// each, once the previous head's stores from them (`kv_bytes` in all, or the count
    /// signalled before the first head) are done; their own stores stay in flight.
    fn store_kv(&mut self, k: &mut Kern, kv_bytes: u64) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let s = n.s as u32;
        k.e.wait_bytes(Sem::n(SEM_DKV), kv_bytes);
        for (i, (op, acc, tiles, width, scale)) in [
            (DK, self.lay.dk, self.lay.et, n.e as u32, n.scale),
            (DV, self.lay.dv, self.lay.evt, n.ev as u32, 1.0),
        ]
        .into_iter()
        .enumerate()
        {
            let stage = self.lay.kv_stage[i];
            self.convert(k, acc, tiles, stage, s, width, scale);
            let at = k.kv_offset(op)?;
            let kp = k.r.kp;
            k.e.sadd(kp, at, 0);
            k.store(op, kp, 0, stage, s, width, SEM_DKV)?;
        }
        Ok(())
    }

    /// `rows` rows of an f32 accumulator at `acc` (`tiles` tiles per row) times `scale`, to
    /// dense rows of `width` elements in the operands' dtype at `stage`. Eight registers in
    /// turn, so that a tile's load, scaling and store overlap the next ones'; the mask of the
    /// last lanes is made once.
    #[allow(clippy::too_many_arguments)]
    fn convert(
        &self,
        k: &mut Kern,
        acc: u32,
        tiles: u32,
        stage: u32,
        rows: u32,
        width: u32,
        scale: f64,
    ) {
        let (fmt, esz) = (k.spec.mem_fmt(), k.spec.esz());
        let lanes_m = MReg::n(3);
        if !width.is_multiple_of(LANES) {
            k.e.mask_below(lanes_m, vr(63), IotaKind::Lane, width % LANES);
        }
        let arow = tiles * LANES * 4;
        let (src, dst) = (k.e.konst(arow as i32), k.e.konst((width * esz) as i32));
        let mut turn = 0u8;
        for g in 0..rows.div_ceil(8) {
            for t in 0..tiles {
                let x = vr(turn % 8);
                turn = turn.wrapping_add(1);
                let lanes = LANES.min(width - t * LANES);
                k.e.vld(
                    MemFmt::W32,
                    x,
                    abs(acc + g * 8 * arow + t * LANES * 4),
                    VAccess::rows(src),
                );
                if scale != 1.0 {
                    k.e.vbin(VBinOp::Mul, VType::F32, x, x, (scale as f32).to_bits());
                }
                k.e.vst(
                    fmt,
                    x,
                    abs(stage + (g * 8 * width + t * LANES) * esz),
                    VAccess {
                        sub_stride: Some(dst),
                        lane_stride: None,
                        mask: (lanes < LANES).then_some(lanes_m),
                    },
                );
            }
        }
    }
}

/// `[s0 + addr]`.
fn abs(addr: u32) -> Addr {
    Addr::abs(addr as i32)
}
