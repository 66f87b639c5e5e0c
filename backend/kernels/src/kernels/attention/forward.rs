//! The forward kernel: `out = softmax(scale Q K^T + mask) V` and the rows' logsumexp, one
//! query block at a time with the online softmax (see the [module docs](super)).
//!
//! Arguments: `q`, `k`, `v`, `out`, `lse` (buffers), then each one's storage offset in
//! elements.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{Axis, CmpOp, IotaKind, MemFmt, RedOp, SAluOp, VBinOp, VType, VUnOp};
use tpuemu_isa::{Addr, ChipInfo, MReg, Program, SReg};

use super::common::{Heads, Kern, Mm, QBlock, Units, bias_tile, interleave, key_blocks, plus, vr};
use super::layout::{FwdLayout as Layout, S_RING};
use super::{AttnSpec, LANES};
use crate::codegen::{PingPong, emit_parts};
use crate::kernels::KernelError;

/// Semaphores: queries (by parity), results (by parity).
const SEM_Q: u8 = 1;
const SEM_OUT: u8 = 3;

/// Register slots of the softmax (four vector registers each, the last two registers are the
/// mask's scratch): one per step where there are enough, so that its wavefront runs over all
/// of a block's groups without a break.
const SOFTMAX_SLOTS: u32 = 15;

/// Operand indices.
const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const OUT: usize = 3;
const LSE: usize = 4;

/// A key block of a query block: where its values are, how many columns are real,
/// and whether it needs the mask (its first column when it does).
#[derive(Clone, Copy)]
struct KvBlock {
    v: Addr,
    cols: u32,
    masked_from: Option<u32>,
}

/// One key block of one query block of the current head: the unit the pipeline runs on.
/// Items are numbered in order over the head's query blocks; item `t`'s scores go to scores
/// buffer `t % S_RING`, computed while item `t - 2` is in the vector unit.
#[derive(Clone, Copy)]
struct Item {
    /// The query block's index and the key block's.
    qi: u32,
    j: u32,
}

/// The scores of the block after next, issued in the key-block loop: keys at `k`, into the
/// ring buffer after next (computed from the current one's address).
#[derive(Clone, Copy)]
struct LoopNext {
    k: Addr,
}

/// Scalar registers holding the VMEM addresses of the two slabs of double buffers: the
/// current key block's (weights, output accumulator, rescaling factors) and the other one's
/// (the previous block's factors), which swap after every block; and, in the key-block loop,
/// the current scores buffer, the one after next and a scratch.
#[derive(Clone, Copy)]
struct BufRegs {
    cur: SReg,
    other: SReg,
    cs: SReg,
    ts: SReg,
    tf: SReg,
}

/// Where a key block is in its query block's run: the first writes `o[0]`, the second `o[1]`
/// (neither reads it); from the third on, each rescales `o[j % 2]` by its own and the previous
/// block's factors and adds into it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    First,
    Second,
    Steady,
}

/// Builds the forward kernel.
pub fn build(
    spec: &AttnSpec,
    chip: &ChipInfo,
    name: &str,
    cores: usize,
) -> Result<Program, KernelError> {
    let lay = Layout::new(spec, chip);
    if lay.end as u64 > chip.core.vmem_bytes {
        return Err(KernelError::TooLarge(
            "flash attention: one head does not fit VMEM".into(),
        ));
    }
    let mut k = Kern::new(spec, chip, name, &["q", "k", "v", "out", "lse"], &[4])?;
    let bufs = BufRegs {
        cur: k.reg()?,
        other: k.reg()?,
        cs: k.reg()?,
        ts: k.reg()?,
        tf: k.reg()?,
    };
    let f = Fwd {
        lay,
        bufs,
        store: PingPong::new(SEM_OUT),
        start: 0,
        qbs: Vec::new(),
        first_item: Vec::new(),
        issued: 0,
        waited: 0,
    };
    let n = &spec.node;
    if n.causal {
        k.bias_tiles(f.lay.bias);
    }
    let (batch, kv) = (n.batch as u32, n.kv_heads as u32);
    let parts = Heads::parts(batch, kv, cores);
    let reg = k.r.test;
    let mut cx = (k, f);
    emit_parts(
        &mut cx,
        |c| &mut c.0.e,
        parts,
        reg,
        |(k, f), p| {
            // Each query head's stores are waited for when their buffers are next written
            // (the first head's as if a head before it had stored), the last head's at the end.
            let last = f.last_stores(k);
            f.store.prime(&mut k.e, last);
            let heads = Heads::open(k, batch, kv, p, parts);
            // This (batch, key/value head)'s keys and values.
            k.load_kv(K, f.lay.k, n.s as u32, n.e as u32)?;
            k.load_kv(V, f.lay.v, n.s as u32, n.ev as u32)?;
            // With one query head per key/value head (no loop over the group), the keys and
            // values and the first query rows load at once and are waited for together (one
            // HBM latency, not two in a row); a loop over the group's query heads waits for
            // the keys and values before it.
            if spec.group() > 1 {
                k.wait_loads();
            }
            let g = Heads::open_group(k, spec.group());
            k.q_offsets(&[Q, OUT, LSE])?;
            f.query_blocks(k)?;
            if f.store.pending() != last {
                return Err(KernelError::Unsupported(
                    "flash attention: a head's stores differ from the last ones".into(),
                ));
            }
            k.e.end_loop(g);
            heads.close(k);
            f.store.wait_both(&mut k.e);
            Ok::<(), KernelError>(())
        },
    )?;
    cx.0.finish()
}

struct Fwd {
    lay: Layout,
    bufs: BufRegs,
    store: PingPong,
    /// The parity of the slab the current query block's first key block uses.
    start: usize,
    /// The head's query blocks, and each one's key blocks `(unmasked, all)`.
    qbs: Vec<(QBlock, u32, u32)>,
    /// The first item of each query block.
    first_item: Vec<u32>,
    /// Items whose scores have been issued (a prefix), and the query blocks whose rows have
    /// been waited for.
    issued: u32,
    waited: u32,
}

impl Fwd {
    /// The bytes of the last stores (output rows and logsumexp) of each parity in a query
    /// head (0 for a parity no block has).
    fn last_stores(&self, k: &Kern) -> [u64; 2] {
        let n = &k.spec.node;
        let (l, bq) = (n.l as u32, self.lay.bq);
        let mut last = [0u64; 2];
        for i in 0..l.div_ceil(bq) {
            let rows = bq.min(l - i * bq) as u64;
            last[i as usize % 2] = rows * (n.ev as u64 * k.spec.esz() as u64 + 4);
        }
        last
    }

    /// `off` bytes into the buffer `buf` of the slab whose address (that of its scores) is in
    /// `reg`.
    fn slab(&self, reg: SReg, buf: [u32; 2], off: u32) -> Addr {
        Addr::new(reg, (buf[0] - self.lay.p[0] + off) as i32)
    }

    /// Item `t`.
    fn item(&self, t: u32) -> Option<Item> {
        let qi = self
            .first_item
            .partition_point(|f| *f <= t)
            .checked_sub(1)? as u32;
        let j = t - self.first_item[qi as usize];
        (j < self.qbs[qi as usize].2).then_some(Item { qi, j })
    }

    /// Issues the scores of every item up to `upto` (inclusive) not yet issued whose query
    /// rows are loaded or loading (query blocks up to `qi + 1` while `qi` runs).
    fn issue_upto(&mut self, k: &mut Kern, upto: u32, qi: u32) {
        let n = k.spec.node.clone();
        let (s, bk) = (n.s as u32, self.lay.bk);
        let kst = bk * n.e as u32 * k.spec.esz();
        while self.issued <= upto {
            let Some(it) = self.item(self.issued) else {
                break;
            };
            if it.qi > qi + 1 {
                break;
            }
            let qb = self.qbs[it.qi as usize].0;
            if it.qi >= self.waited {
                // The head's keys and values too, the first time (nothing later).
                k.wait_loads();
                k.wait(SEM_Q + qb.parity as u8);
                self.waited = it.qi + 1;
            }
            let dest = Addr::abs(self.lay.s[self.issued as usize % S_RING] as i32);
            let cols = bk.min(s - it.j * bk);
            self.scores(k, qb, at(self.lay.k + it.j * kst), cols, dest);
            self.issued += 1;
        }
    }

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
        self.qbs = (0..nq)
            .map(|i| {
                let qb = block(i);
                let (nfull, nblk) = key_blocks(&n, self.lay.bk, qb.r0, qb.rows);
                (qb, nfull, nblk)
            })
            .collect();
        self.first_item = self
            .qbs
            .iter()
            .scan(0, |t, q| {
                let f = *t;
                *t += q.2;
                Some(f)
            })
            .collect();
        (self.issued, self.waited) = (0, 0);
        let b0 = block(0);
        k.load_query(Q, self.lay.q[0], (b0.r0, b0.rows), n.e as u32, SEM_Q)?;
        let b = self.bufs;
        k.e.smov(b.cur, self.lay.p[0] as i32);
        k.e.smov(b.other, self.lay.p[1] as i32);
        self.start = 0;
        for i in 0..nq {
            let qb = block(i);
            if i + 1 < nq {
                let nb = block(i + 1);
                let sem = SEM_Q + nb.parity as u8;
                k.load_query(Q, self.lay.q[nb.parity], (nb.r0, nb.rows), n.e as u32, sem)?;
            }
            let nblk = self.key_blocks(k, i)?;
            self.finish_block(k, qb, nblk)?;
            self.start = (self.start + nblk as usize) % 2;
        }
        Ok(())
    }

    /// The key blocks query block `qi` sees, software-pipelined: the scores of block `j + 2`
    /// go to the matrix units before the vector unit starts on block `j`'s softmax (those of
    /// the next query block's first blocks during this one's last). The first two blocks
    /// (which write their accumulators instead of adding) and the blocks that need the mask
    /// or end the run are unrolled; the unmasked ones between run in a loop. Returns the
    /// number of key blocks.
    fn key_blocks(&mut self, k: &mut Kern, qi: u32) -> Result<u32, KernelError> {
        let n = k.spec.node.clone();
        let (qb, nfull, nblk) = self.qbs[qi as usize];
        let t0 = self.first_item[qi as usize];
        let (s, bk) = (n.s as u32, self.lay.bk);
        let (kst, vst) = (
            bk * n.e as u32 * k.spec.esz(),
            bk * n.ev as u32 * k.spec.esz(),
        );
        let (lk, lv) = (self.lay.k, self.lay.v);
        let blk = |j: u32| KvBlock {
            v: at(lv + j * vst),
            cols: bk.min(s - j * bk),
            masked_from: (j >= nfull).then_some(j * bk),
        };
        let phase = |j: u32| match j {
            0 => Phase::First,
            1 => Phase::Second,
            _ => Phase::Steady,
        };
        let ring_s = self.lay.s;
        let ring = |t: u32| at(ring_s[t as usize % S_RING]);
        let head = nblk.min(2);
        for j in 0..head {
            self.issue_upto(k, t0 + j + 2, qi);
            self.block(k, qb, blk(j), phase(j), ring(t0 + j), None)?;
        }
        // Blocks 2.. whose block after next is unmasked too (and so in this query block) run
        // in a loop.
        let looped = nfull.saturating_sub(2).max(head);
        if looped > head {
            self.issue_upto(k, t0 + head + 1, qi);
            let b = self.bufs;
            let (kp, vp) = (k.r.kp, k.r.vp);
            k.e.smov(vp, (lv + head * vst) as i32);
            k.e.smov(b.cs, self.lay.s[(t0 + head) as usize % S_RING] as i32);
            let lp = k.begin_ptr_loop(kp, lk + head * kst, kst, looped - head);
            let kv = KvBlock {
                v: Addr::new(vp, 0),
                cols: bk,
                masked_from: None,
            };
            let nx = LoopNext {
                k: Addr::new(kp, 2 * kst as i32),
            };
            self.block(k, qb, kv, Phase::Steady, Addr::new(b.cs, 0), Some(nx))?;
            k.e.sadd(vp, vp, vst as i32);
            self.ring_step(k, b.cs, 1);
            k.end_ptr_loop(lp);
            self.issued = t0 + looped + 1;
        }
        for j in looped..nblk {
            self.issue_upto(k, t0 + j + 2, qi);
            self.block(k, qb, blk(j), phase(j), ring(t0 + j), None)?;
        }
        Ok(nblk)
    }

    /// `reg` = the scores buffer `steps` after the one at `from`, in the ring.
    fn ring_step_from(&self, k: &mut Kern, reg: SReg, from: SReg, steps: u32) {
        let (sz, end) = (
            self.lay.s_bytes as i32,
            (self.lay.s[0] + S_RING as u32 * self.lay.s_bytes) as i32,
        );
        let tf = self.bufs.tf;
        k.e.sadd(reg, from, steps as i32 * sz);
        k.e.scmp(CmpOp::Ge, tf, reg, end);
        k.e.smul(tf, tf, S_RING as i32 * sz);
        k.e.salu(SAluOp::Sub, reg, reg, tf);
    }

    /// Advances `reg` by `steps` buffers in the scores ring.
    fn ring_step(&self, k: &mut Kern, reg: SReg, steps: u32) {
        self.ring_step_from(k, reg, reg, steps);
    }

    /// `S = Q K^T` of the key block at `kb` (`cols` keys) into the scores buffer at `out`.
    fn scores(&self, k: &mut Kern, qb: QBlock, kb: Addr, cols: u32, out: Addr) {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let units = Units::split(k.chip, qb.rows);
        let q = self.lay.q[qb.parity];
        let stride = n.e as u32 * esz;
        k.matmul(
            &units,
            &Mm {
                w: kb,
                w_t: true,
                k: n.e as u32,
                n: cols,
                w_stride: stride,
                lhs: &|row0, k0| at(q + row0 * stride + k0 * esz),
                lhs_stride: stride,
                lhs_t: false,
                out: &|row0, n0| plus(out, row0 * LANES * 4 + n0 * 4),
                out_stride: LANES * 4,
                acc: false,
            },
        );
    }

    /// One key block whose scores are in the buffer at `scores`: in the loop, the scores of
    /// the block after next (`next`); the online softmax with the rescaling of its
    /// accumulator, `O (+)= P V`; then the slabs swap.
    fn block(
        &self,
        k: &mut Kern,
        qb: QBlock,
        kv: KvBlock,
        phase: Phase,
        scores: Addr,
        next: Option<LoopNext>,
    ) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let b = self.bufs;
        if let Some(nx) = next {
            self.ring_step_from(k, b.ts, b.cs, 2);
            self.scores(k, qb, nx.k, self.lay.bk, Addr::new(b.ts, 0));
        }
        self.softmax(k, qb, kv, phase, scores)?;
        // O (+)= P V, the width Ev in chunks of the array's columns.
        let units = Units::split(k.chip, qb.rows);
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
                lhs: &|row0, k0| self.slab(b.cur, self.lay.p, row0 * prow + k0 * esz),
                lhs_stride: prow,
                lhs_t: false,
                out: &|row0, n0| self.slab(b.cur, self.lay.o, row0 * orow + n0 * 4),
                out_stride: orow,
                acc: phase == Phase::Steady,
            },
        );
        let x = (self.lay.p[0] ^ self.lay.p[1]) as i32;
        k.e.salu(SAluOp::Xor, b.cur, b.cur, x);
        k.e.salu(SAluOp::Xor, b.other, b.other, x);
        Ok(())
    }

    /// The online softmax of one key block's scores, 8 rows at a time in a wavefront (see
    /// [`super::common::interleave`]) with one register slot per step. `l` holds per-lane partial sums of the
    /// weights (rescaled with the row), reduced across the lanes once, at the end. From the
    /// third block on, each group also rescales its rows of `o[j % 2]` by
    /// `exp(m_{j-2} - m_j)`, the product of the previous block's factor (from VMEM) and its
    /// own; the second block stores its factor for the third.
    fn softmax(
        &self,
        k: &mut Kern,
        qb: QBlock,
        kv: KvBlock,
        phase: Phase,
        scores: Addr,
    ) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let scale = (n.scale as f32).to_bits();
        let (fmt, esz) = (k.spec.mem_fmt(), k.spec.esz());
        let lay = &self.lay;
        let b = self.bufs;
        let orow_b = lay.evt * LANES * 4;
        let steady = phase == Phase::Steady;
        let first = phase == Phase::First;
        // Causal masking of full blocks adds a bias tile; other masks are built.
        let tiles = n.causal && kv.cols == LANES;
        let bias = |g: u32| {
            kv.masked_from
                .filter(|_| tiles)
                .and_then(|c0| bias_tile(qb.r0 + 8 * g, c0))
        };
        let steps = if steady {
            11 + 3 * lay.evt as usize
        } else {
            12
        };
        let width = (steps as u32).min(SOFTMAX_SLOTS);
        interleave(k, qb.rows.div_ceil(8), width, steps, |k, g, u, step| {
            let r = |i: u8| vr(u * 4 + i);
            // s: the scores, then the weights, then O's tiles; mx: the block's row maximum,
            // then the new running maximum, then the factor for O; mo: the old maximum, then
            // this block's factor; l: the sums.
            let (s, mx, mo, l) = (r(0), r(1), r(2), r(3));
            let (m_at, l_at) = (at(lay.m + g * 4096), at(lay.l + g * 4096));
            let tile = self.slab(b.cur, lay.al, g * 4096);
            match step {
                0 => {
                    let s_at = plus(scores, g * 4096);
                    k.e.vld(MemFmt::W32, s, s_at, VAccess::DENSE);
                }
                1 => {
                    k.e.vbin(VBinOp::Mul, VType::F32, s, s, scale);
                    if let Some(t) = bias(g) {
                        let b_at = at(lay.bias + t * 4096);
                        k.e.vld(MemFmt::W32, mx, b_at, VAccess::DENSE);
                    }
                }
                2 => {
                    if bias(g).is_some() {
                        k.e.vbin(VBinOp::Add, VType::F32, s, s, mx);
                    } else if let Some(c0) = kv.masked_from.filter(|_| !tiles) {
                        let (keep, below) = (MReg::n(1), MReg::n(2));
                        let scratch = (vr(62), vr(63));
                        k.keep_mask(keep, below, scratch, qb.r0 + 8 * g, c0, kv.cols)?;
                        k.e.vsel(VType::F32, s, keep, s, f32::NEG_INFINITY.to_bits());
                    }
                }
                // The first block has no running maximum and sum to read.
                3 => {
                    k.e.vred(RedOp::Max, VType::F32, Axis::Lane, mx, s);
                    if !first {
                        k.e.vld(MemFmt::W32, mo, m_at, VAccess::DENSE);
                    }
                }
                // 4: the reduction's result is on its way.
                4 => {}
                5 => {
                    if !first {
                        k.e.vbin(VBinOp::Max, VType::F32, mx, mo, mx);
                    }
                }
                6 => {
                    k.e.vbin(VBinOp::Sub, VType::F32, s, s, mx);
                    k.e.vst(MemFmt::W32, mx, m_at, VAccess::DENSE);
                    if !first {
                        k.e.vbin(VBinOp::Sub, VType::F32, mo, mo, mx);
                        k.e.vld(MemFmt::W32, l, l_at, VAccess::DENSE);
                    }
                }
                7 => {
                    k.e.vun(VUnOp::Exp, VType::F32, s, s);
                    if !first {
                        k.e.vun(VUnOp::Exp, VType::F32, mo, mo);
                    }
                }
                8 => {
                    if steady {
                        let prev = self.slab(b.other, lay.al, g * 4096);
                        k.e.vld(MemFmt::W32, mx, prev, VAccess::DENSE);
                    }
                }
                9 => {
                    if !first {
                        k.e.vbin(VBinOp::Mul, VType::F32, l, l, mo);
                    }
                    let p_at = self.slab(b.cur, lay.p, g * 8 * LANES * esz);
                    k.e.vst(fmt, s, p_at, VAccess::DENSE);
                    if phase != Phase::First {
                        k.e.vst(MemFmt::W32, mo, tile, VAccess::DENSE);
                    }
                    if steady {
                        k.e.vbin(VBinOp::Mul, VType::F32, mx, mx, mo);
                    }
                }
                10 => {
                    if !first {
                        k.e.vbin(VBinOp::Add, VType::F32, l, l, s);
                    }
                }
                11 if !steady => {
                    // The first block's sums are its weights.
                    let sums = if first { s } else { l };
                    k.e.vst(MemFmt::W32, sums, l_at, VAccess::DENSE);
                }
                _ => {
                    // O's tile t: load, scale, store (steps 11 + 3t ..= 13 + 3t).
                    let (t, part) = (((step - 11) / 3) as u32, (step - 11) % 3);
                    let orow = k.e.konst(orow_b as i32);
                    let o_at = self.slab(b.cur, lay.o, g * 8 * orow_b + t * LANES * 4);
                    match part {
                        0 => {
                            if t == 0 {
                                k.e.vst(MemFmt::W32, l, l_at, VAccess::DENSE);
                            }
                            k.e.vld(MemFmt::W32, s, o_at, VAccess::rows(orow));
                        }
                        1 => {
                            k.e.vbin(VBinOp::Mul, VType::F32, s, s, mx);
                        }
                        _ => {
                            k.e.vst(MemFmt::W32, s, o_at, VAccess::rows(orow));
                        }
                    }
                }
            }
            Ok(())
        })
    }

    /// `O / l` and `m + log l` to the staging buffers, then their stores to HBM. With two or
    /// more key blocks, `O` is the last block's accumulator plus the other one rescaled by the
    /// last block's factor.
    fn finish_block(&mut self, k: &mut Kern, qb: QBlock, nblk: u32) -> Result<(), KernelError> {
        let n = k.spec.node.clone();
        let esz = k.spec.esz();
        let fmt = k.spec.mem_fmt();
        let p = qb.parity;
        let last = (self.start + nblk as usize + 1) % 2;
        let other = (nblk > 1).then_some((self.lay.o[1 - last], self.lay.al[last]));
        self.store.wait(&mut k.e, p);
        let (lanes_mask, one_lane) = (MReg::n(3), MReg::n(4));
        let orow = self.lay.evt * LANES * 4;
        let ev = n.ev as u32;
        if !ev.is_multiple_of(LANES) {
            k.e.mask_below(lanes_mask, vr(63), IotaKind::Lane, ev % LANES);
        }
        k.e.mask_below(one_lane, vr(63), IotaKind::Lane, 1);
        let (sub_o, sub_s, four) = (
            k.e.konst(orow as i32),
            k.e.konst((ev * esz) as i32),
            k.e.konst(4),
        );
        let evt = self.lay.evt as usize;
        let (lay_l, lay_m, o_last) = (self.lay.l, self.lay.m, self.lay.o[last]);
        let (ostage, lstage) = (self.lay.ostage[p], self.lay.lstage[p]);
        // A wavefront over the groups of 8 rows ([`interleave`], 8 register slots): the sum
        // and its lane reduction, then per tile of `O` its load (and the other accumulator's,
        // rescaled) and division, then the logsumexp.
        let steps = 2 + 2 * evt + 2;
        interleave(k, qb.rows.div_ceil(8), 8, steps, |k, g, u, step| {
            let r = |i: u8| vr(u * 7 + i);
            let (l, m, lg, al) = (r(0), r(1), r(2), r(3));
            let (o, o2) = (r(4), r(5));
            match step {
                0 => {
                    k.e.vld(MemFmt::W32, l, at(lay_l + g * 4096), VAccess::DENSE);
                    if let Some((_, al_at)) = other {
                        k.e.vld(MemFmt::W32, al, at(al_at + g * 4096), VAccess::DENSE);
                    }
                }
                1 => {
                    k.e.vred(RedOp::Add, VType::F32, Axis::Lane, l, l);
                }
                s if s < 2 + 2 * evt => {
                    let t = ((s - 2) / 2) as u32;
                    let tile = g * 8 * orow + t * LANES * 4;
                    if (s - 2) % 2 == 0 {
                        k.e.vld(MemFmt::W32, o, at(o_last + tile), VAccess::rows(sub_o));
                        if let Some((o_other, _)) = other {
                            k.e.vld(MemFmt::W32, o2, at(o_other + tile), VAccess::rows(sub_o));
                            k.e.vbin(VBinOp::Mul, VType::F32, o2, o2, al);
                            k.e.vbin(VBinOp::Add, VType::F32, o, o, o2);
                        }
                        k.e.vbin(VBinOp::Div, VType::F32, o, o, l);
                    } else {
                        let lanes = LANES.min(ev - t * LANES);
                        k.e.vst(
                            fmt,
                            o,
                            at(ostage + (g * 8 * ev + t * LANES) * esz),
                            VAccess {
                                sub_stride: Some(sub_s),
                                lane_stride: None,
                                mask: (lanes < LANES).then_some(lanes_mask),
                            },
                        );
                    }
                }
                s if s == 2 + 2 * evt => {
                    k.e.vld(MemFmt::W32, m, at(lay_m + g * 4096), VAccess::DENSE);
                    k.e.vun(VUnOp::Log, VType::F32, lg, l);
                }
                _ => {
                    k.e.vbin(VBinOp::Add, VType::F32, m, m, lg);
                    k.e.vst(
                        MemFmt::W32,
                        m,
                        at(lstage + g * 32),
                        VAccess {
                            sub_stride: Some(four),
                            lane_stride: None,
                            mask: Some(one_lane),
                        },
                    );
                }
            }
            Ok(())
        })?;
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
