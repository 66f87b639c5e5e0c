//! The forward kernel: `out = softmax(scale Q K^T + mask) V` and the rows' logsumexp, one
//! query block at a time with the online softmax (see the [module docs](super)).
//!
//! Arguments: `q`, `k`, `v`, `out`, `lse` (buffers), then each one's storage offset in
//! elements.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{Axis, IotaKind, MemFmt, RedOp, VBinOp, VType, VUnOp};
use tpuemu_isa::{Addr, ChipInfo, MReg, Program};

use super::common::{Heads, Kern, Mm, Units, interleave, key_blocks, vr};
use super::{AttnSpec, Bump, LANES, blocks};
use crate::codegen::PingPong;
use crate::kernels::KernelError;

/// Semaphores: queries (by parity), results (by parity).
const SEM_Q: u8 = 1;
const SEM_OUT: u8 = 3;

/// Operand indices.
const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const OUT: usize = 3;
const LSE: usize = 4;

/// Where everything lives in VMEM.
pub(crate) struct Layout {
    /// One head's keys and values, `[S, E]` and `[S, Ev]`, dense.
    pub k: u32,
    pub v: u32,
    /// Query blocks `[bq, E]`, double-buffered.
    pub q: [u32; 2],
    /// Scores of one key block, f32 `[bq, 128]`.
    pub s: u32,
    /// Weights of one key block, `[bq, 128]` in the operands' dtype.
    pub p: u32,
    /// The output accumulator, f32 `[bq, evt * 128]`.
    pub o: u32,
    /// Running maximum of each row, one `(8, 128)` tile per 8 rows (the row's value on every
    /// lane), and the running sum of its weights as per-lane partial sums.
    pub m: u32,
    pub l: u32,
    /// Finished output rows `[bq, Ev]` and logsumexp `[bq]`, double-buffered.
    pub ostage: [u32; 2],
    pub lstage: [u32; 2],
    /// Bytes used.
    pub end: u32,
    /// Query and key block sizes.
    pub bq: u32,
    pub bk: u32,
    /// Output tiles per row.
    pub evt: u32,
}

impl Layout {
    pub(crate) fn new(spec: &AttnSpec, chip: &ChipInfo) -> Self {
        let n = &spec.node;
        let (bq, bk) = blocks(n, chip);
        let esz = spec.esz() as u64;
        let (s, e, ev) = (n.s as u64, n.e as u64, n.ev as u64);
        let s_pad = s.div_ceil(bk as u64) * bk as u64;
        let evt = (n.ev as u32).div_ceil(LANES).max(1);
        let mut b = Bump { end: 0 };
        let k = b.take(s_pad * e * esz);
        let v = b.take(s_pad * ev * esz);
        let q = [b.take(bq as u64 * e * esz), b.take(bq as u64 * e * esz)];
        let sb = b.take(bq as u64 * LANES as u64 * 4);
        let p = b.take(bq as u64 * LANES as u64 * esz);
        let o = b.take(bq as u64 * evt as u64 * LANES as u64 * 4);
        let tiles = bq.div_ceil(8) as u64 * 4096;
        let m = b.take(tiles);
        let l = b.take(tiles);
        let ostage = [b.take(bq as u64 * ev * esz), b.take(bq as u64 * ev * esz)];
        let lstage = [b.take(bq as u64 * 4), b.take(bq as u64 * 4)];
        Layout {
            k,
            v,
            q,
            s: sb,
            p,
            o,
            m,
            l,
            ostage,
            lstage,
            end: b.end,
            bq,
            bk,
            evt,
        }
    }
}

/// A key block of a query block: where its keys and values are, how many columns are real,
/// and whether it needs the mask (its first column when it does).
#[derive(Clone, Copy)]
struct KvBlock {
    k: Addr,
    v: Addr,
    cols: u32,
    masked_from: Option<u32>,
}

/// A query block: first row, rows, and its buffer parity.
#[derive(Clone, Copy)]
struct QBlock {
    r0: u32,
    rows: u32,
    parity: usize,
}

/// Builds the forward kernel.
pub fn build(spec: &AttnSpec, chip: &ChipInfo, name: &str) -> Result<Program, KernelError> {
    let lay = Layout::new(spec, chip);
    if lay.end as u64 > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(
            "flash attention: one head does not fit VMEM".into(),
        ));
    }
    let mut k = Kern::new(spec, chip, name, &["q", "k", "v", "out", "lse"], &[4])?;
    let mut f = Fwd {
        lay,
        store: PingPong::new(SEM_OUT),
    };
    let n = &spec.node;
    let heads = Heads::open(&mut k, n.batch as u32, n.kv_heads as u32);
    // This (batch, key/value head)'s keys and values.
    k.load_kv(K, f.lay.k, n.s as u32, n.e as u32)?;
    k.load_kv(V, f.lay.v, n.s as u32, n.ev as u32)?;
    k.wait_loads();
    let g = Heads::open_group(&mut k, spec.group());
    k.q_offsets(&[Q, OUT, LSE])?;
    f.query_blocks(&mut k)?;
    f.store.wait_both(&mut k.e);
    k.e.end_loop(g);
    heads.close(&mut k);
    k.finish()
}

struct Fwd {
    lay: Layout,
    store: PingPong,
}

impl Fwd {
    /// Every query block of the current head, the next one's queries loading meanwhile.
    fn query_blocks(&mut self, k: &mut Kern) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let bq = self.lay.bq;
        let nq = (n.l as u32).div_ceil(bq);
        let block = |i: u32| QBlock {
            r0: i * bq,
            rows: bq.min(n.l as u32 - i * bq),
            parity: i as usize % 2,
        };
        let b0 = block(0);
        k.load_query(Q, self.lay.q[0], (b0.r0, b0.rows), n.e as u32, SEM_Q)?;
        for i in 0..nq {
            let qb = block(i);
            k.wait(SEM_Q + qb.parity as u8);
            if i + 1 < nq {
                let nb = block(i + 1);
                let sem = SEM_Q + nb.parity as u8;
                k.load_query(Q, self.lay.q[nb.parity], (nb.r0, nb.rows), n.e as u32, sem)?;
            }
            self.init(k, qb);
            self.key_blocks(k, qb)?;
            self.finish_block(k, qb)?;
        }
        Ok(())
    }

    /// `m = -inf`, `l = 0`, `O = 0`.
    fn init(&self, k: &mut Kern, qb: QBlock) {
        let groups = qb.rows.div_ceil(8);
        let (ninf, zero) = (vr(0), vr(1));
        k.e.vmov(VType::F32, ninf, f32::NEG_INFINITY.to_bits());
        k.e.vmov(VType::F32, zero, 0u32);
        for g in 0..groups {
            k.e.vst(MemFmt::W32, ninf, at(self.lay.m + g * 4096), VAccess::DENSE);
            k.e.vst(MemFmt::W32, zero, at(self.lay.l + g * 4096), VAccess::DENSE);
        }
        for t in 0..groups * self.lay.evt {
            k.e.vst(MemFmt::W32, zero, at(self.lay.o + t * 4096), VAccess::DENSE);
        }
    }

    /// The key blocks a query block sees: unmasked ones in a loop, then the masked ones.
    fn key_blocks(&self, k: &mut Kern, qb: QBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let (s, bk) = (n.s as u32, self.lay.bk);
        let (nfull, nblk) = key_blocks(&n, bk, qb.r0, qb.rows);
        let (kst, vst) = (
            bk * n.e as u32 * k.spec.esz(),
            bk * n.ev as u32 * k.spec.esz(),
        );
        if nfull > 0 {
            let (kp, vp) = (k.r.kp, k.r.vp);
            k.e.smov(vp, self.lay.v as i32);
            let lp = k.begin_ptr_loop(kp, self.lay.k, kst, nfull);
            self.block(
                k,
                qb,
                KvBlock {
                    k: Addr::new(kp, 0),
                    v: Addr::new(vp, 0),
                    cols: bk,
                    masked_from: None,
                },
            )?;
            k.e.sadd(vp, vp, vst as i32);
            k.end_ptr_loop(lp);
        }
        for j in nfull..nblk {
            let c0 = j * bk;
            self.block(
                k,
                qb,
                KvBlock {
                    k: at(self.lay.k + j * kst),
                    v: at(self.lay.v + j * vst),
                    cols: bk.min(s - c0),
                    masked_from: Some(c0),
                },
            )?;
        }
        Ok(())
    }

    /// One key block: scores, online softmax, `O += P V`.
    fn block(&self, k: &mut Kern, qb: QBlock, kv: KvBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let units = Units::split(k.chip, qb.rows);
        // S = Q K^T, the width E in chunks of the array's rows.
        let q = self.lay.q[qb.parity];
        let stride = n.e as u32 * esz;
        let s_at = |row0: u32, n0: u32| at(self.lay.s + row0 * LANES * 4 + n0 * 4);
        k.matmul(
            &units,
            &Mm {
                w: kv.k,
                w_t: true,
                k: n.e as u32,
                n: kv.cols,
                w_stride: stride,
                lhs: &|row0, k0| at(q + row0 * stride + k0 * esz),
                lhs_stride: stride,
                lhs_t: false,
                out: &s_at,
                out_stride: LANES * 4,
                acc: false,
            },
        );
        self.softmax(k, qb, kv)?;
        // O += P V, the width Ev in chunks of the array's columns.
        let prow = LANES * esz;
        let orow = self.lay.evt * LANES * 4;
        k.matmul(
            &units,
            &Mm {
                w: kv.v,
                w_t: false,
                k: kv.cols,
                n: n.ev as u32,
                w_stride: n.ev as u32 * esz,
                lhs: &|row0, k0| at(self.lay.p + row0 * prow + k0 * esz),
                lhs_stride: prow,
                lhs_t: false,
                out: &|row0, n0| at(self.lay.o + row0 * orow + n0 * 4),
                out_stride: orow,
                acc: true,
            },
        );
        Ok(())
    }

    /// The online softmax of one key block's scores, 8 rows at a time, [`INTERLEAVE`] groups
    /// of rows in flight (each step emitted for every group before the next step, so that the
    /// in-order core overlaps their latencies). `l` holds per-lane partial sums of the weights
    /// (rescaled with the row), reduced across the lanes once, at the end.
    fn softmax(&self, k: &mut Kern, qb: QBlock, kv: KvBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let scale = (n.scale as f32).to_bits();
        let (fmt, esz) = (k.spec.mem_fmt(), k.spec.esz());
        let orow_b = self.lay.evt * LANES * 4;
        let lay = &self.lay;
        interleave(k, qb.rows.div_ceil(8), 10, |k, g, u, step| {
            let r = |i: u8| vr(u * 10 + i);
            let (s, mx, mo, mn, p, al, l, o) = (r(0), r(1), r(2), r(3), r(4), r(5), r(6), r(7));
            let (keep, below) = (MReg::n(1 + 2 * u), MReg::n(2 + 2 * u));
            let (m_at, l_at) = (at(lay.m + g * 4096), at(lay.l + g * 4096));
            match step {
                0 => {
                    k.e.vld(MemFmt::W32, s, at(lay.s + g * 4096), VAccess::DENSE);
                    k.e.vld(MemFmt::W32, mo, m_at, VAccess::DENSE);
                    k.e.vld(MemFmt::W32, l, l_at, VAccess::DENSE);
                }
                1 => {
                    k.e.vbin(VBinOp::Mul, VType::F32, s, s, scale);
                }
                2 => {
                    if let Some(c0) = kv.masked_from {
                        let scratch = (r(8), r(9));
                        k.keep_mask(keep, below, scratch, qb.r0 + 8 * g, c0, kv.cols)?;
                        k.e.vsel(VType::F32, s, keep, s, f32::NEG_INFINITY.to_bits());
                    }
                }
                3 => {
                    k.e.vred(RedOp::Max, VType::F32, Axis::Lane, mx, s);
                }
                4 => {
                    k.e.vbin(VBinOp::Max, VType::F32, mn, mo, mx);
                }
                5 => {
                    k.e.vbin(VBinOp::Sub, VType::F32, p, s, mn);
                    k.e.vbin(VBinOp::Sub, VType::F32, al, mo, mn);
                }
                6 => {
                    k.e.vun(VUnOp::Exp, VType::F32, p, p);
                    k.e.vun(VUnOp::Exp, VType::F32, al, al);
                }
                7 => {
                    k.e.vbin(VBinOp::Mul, VType::F32, l, l, al);
                    k.e.vst(MemFmt::W32, mn, m_at, VAccess::DENSE);
                }
                8 => {
                    k.e.vbin(VBinOp::Add, VType::F32, l, l, p);
                    k.e.vst(fmt, p, at(lay.p + g * 8 * LANES * esz), VAccess::DENSE);
                }
                _ => {
                    k.e.vst(MemFmt::W32, l, l_at, VAccess::DENSE);
                    let orow = k.e.konst(orow_b as i32);
                    for t in 0..lay.evt {
                        let a = at(lay.o + g * 8 * orow_b + t * LANES * 4);
                        k.e.vld(MemFmt::W32, o, a, VAccess::rows(orow));
                        k.e.vbin(VBinOp::Mul, VType::F32, o, o, al);
                        k.e.vst(MemFmt::W32, o, a, VAccess::rows(orow));
                    }
                }
            }
            Ok(())
        })
    }

    /// `O / l` and `m + log l` to the staging buffers, then their stores to HBM.
    fn finish_block(&mut self, k: &mut Kern, qb: QBlock) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let fmt = k.spec.mem_fmt();
        let p = qb.parity;
        self.store.wait(&mut k.e, p);
        let (l, o, m, lg) = (vr(0), vr(1), vr(2), vr(3));
        let (lanes_mask, one_lane) = (MReg::n(3), MReg::n(4));
        let orow = self.lay.evt * LANES * 4;
        let ev = n.ev as u32;
        for g in 0..qb.rows.div_ceil(8) {
            k.e.vld(MemFmt::W32, l, at(self.lay.l + g * 4096), VAccess::DENSE);
            k.e.vred(RedOp::Add, VType::F32, Axis::Lane, l, l);
            for t in 0..self.lay.evt {
                let lanes = LANES.min(ev - t * LANES);
                let sub = k.e.konst(orow as i32);
                k.e.vld(
                    MemFmt::W32,
                    o,
                    at(self.lay.o + g * 8 * orow + t * LANES * 4),
                    VAccess::rows(sub),
                );
                k.e.vbin(VBinOp::Div, VType::F32, o, o, l);
                let mask = (lanes < LANES).then(|| {
                    k.e.mask_below(lanes_mask, vr(4), IotaKind::Lane, lanes);
                    lanes_mask
                });
                let sub = k.e.konst((ev * esz) as i32);
                k.e.vst(
                    fmt,
                    o,
                    at(self.lay.ostage[p] + (g * 8 * ev + t * LANES) * esz),
                    VAccess {
                        sub_stride: Some(sub),
                        lane_stride: None,
                        mask,
                    },
                );
            }
            k.e.vld(MemFmt::W32, m, at(self.lay.m + g * 4096), VAccess::DENSE);
            k.e.vun(VUnOp::Log, VType::F32, lg, l);
            k.e.vbin(VBinOp::Add, VType::F32, m, m, lg);
            k.e.mask_below(one_lane, vr(4), IotaKind::Lane, 1);
            let four = k.e.konst(4);
            k.e.vst(
                MemFmt::W32,
                m,
                at(self.lay.lstage[p] + g * 32),
                VAccess {
                    sub_stride: Some(four),
                    lane_stride: None,
                    mask: Some(one_lane),
                },
            );
        }
        // Stores: the rows of out, then the logsumexp.
        let sem = SEM_OUT + p as u8;
        let (o_at, l_at) = (k.head_reg(OUT), k.head_reg(LSE));
        let r0 = qb.r0 as i64;
        let bytes = k.store(OUT, o_at, r0, self.lay.ostage[p], qb.rows, ev, sem)?;
        self.store.add(p, bytes);
        let bytes = k.store(LSE, l_at, r0, self.lay.lstage[p], qb.rows, 1, sem)?;
        self.store.add(p, bytes);
        Ok(())
    }
}

/// `[s0 + addr]`.
fn at(addr: u32) -> Addr {
    Addr::abs(addr as i32)
}
