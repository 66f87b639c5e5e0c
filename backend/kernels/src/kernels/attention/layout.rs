//! Where each flash-attention kernel keeps its buffers in VMEM (also what
//! [`super::check_fits`] measures before a kernel is generated).

use tpuemu_isa::ChipInfo;

use super::common::BIAS_TILES;
use super::{AttnSpec, Bump, LANES, blocks};

/// Scores buffers: the current key block's, the next one's and the one after.
pub const S_RING: usize = 3;

/// Where everything of the forward kernel lives in VMEM.
pub struct FwdLayout {
    /// One head's keys and values, `[S, E]` and `[S, Ev]`, dense.
    pub k: u32,
    pub v: u32,
    /// Query blocks `[bq, E]`, double-buffered.
    pub q: [u32; 2],
    /// Scores of a key block, f32 `[bq, 128]`, in a ring of [`S_RING`] (the scores of the
    /// block after next are computed while the vector unit works on the current one's).
    pub s: [u32; S_RING],
    /// Bytes of one scores buffer.
    pub s_bytes: u32,
    /// Weights of a key block, `[bq, 128]` in the operands' dtype, double-buffered.
    pub p: [u32; 2],
    /// Each row's rescaling factor `exp(m_old - m_new)` of a block, one `(8, 128)` tile per
    /// 8 rows; by the block's parity.
    pub al: [u32; 2],
    /// The output accumulators, f32 `[bq, evt * 128]`: key block `j` adds into `o[j % 2]`,
    /// so that the rescaling before an addition waits for the product of two blocks ago.
    pub o: [u32; 2],
    /// Running maximum of each row, one `(8, 128)` tile per 8 rows (the row's value on every
    /// lane), and the running sum of its weights as per-lane partial sums.
    pub m: u32,
    pub l: u32,
    /// Finished output rows `[bq, Ev]` and logsumexp `[bq]`, double-buffered.
    pub ostage: [u32; 2],
    pub lstage: [u32; 2],
    /// The causal mask's bias tiles.
    pub bias: u32,
    /// Bytes used.
    pub end: u32,
    /// Query and key block sizes.
    pub bq: u32,
    pub bk: u32,
    /// Output tiles per row.
    pub evt: u32,
}

impl FwdLayout {
    pub fn new(spec: &AttnSpec, chip: &ChipInfo) -> Self {
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
        // Everything double-buffered by a key block's parity, in two slabs of one layout, so
        // that one register addresses a block's buffers and another the other block's.
        let tiles = bq.div_ceil(8) as u64 * 4096;
        let obytes = bq as u64 * evt as u64 * LANES as u64 * 4;
        let s_bytes = (bq as u64 * LANES as u64 * 4).div_ceil(4096) * 4096;
        let mut sb = [0; S_RING];
        for x in sb.iter_mut() {
            *x = b.take(s_bytes);
        }
        let (mut p, mut o, mut al) = ([0; 2], [0; 2], [0; 2]);
        for i in 0..2 {
            p[i] = b.take(bq as u64 * LANES as u64 * esz);
            o[i] = b.take(obytes);
            al[i] = b.take(tiles);
        }
        let m = b.take(tiles);
        let l = b.take(tiles);
        let bias = b.take(BIAS_TILES as u64 * 4096);
        let ostage = [b.take(bq as u64 * ev * esz), b.take(bq as u64 * ev * esz)];
        let lstage = [b.take(bq as u64 * 4), b.take(bq as u64 * 4)];
        FwdLayout {
            k,
            v,
            q,
            s: sb,
            s_bytes: s_bytes as u32,
            p,
            al,
            o,
            m,
            l,
            ostage,
            lstage,
            bias,
            end: b.end,
            bq,
            bk,
            evt,
        }
    }
}

/// Where everything of the backward kernel lives in VMEM.
pub struct BwdLayout {
    pub k: u32,
    pub v: u32,
    /// f32 accumulators `[S, et * 128]` and `[S, evt * 128]`.
    pub dk: u32,
    pub dv: u32,
    /// One query block's rows, dense.
    pub q: u32,
    pub dout: u32,
    pub out: u32,
    /// The query head's logsumexp `[L]`, f32; the block's logsumexp and `D` as one `(8, 128)`
    /// tile per 8 rows (each row's value on every lane), so that the key blocks read them with
    /// dense loads.
    pub lse: u32,
    pub lse_t: u32,
    pub d: u32,
    /// Scores (f32) `[bq, 128]`, followed by `dP` (f32) at `dp_off`; a ring of [`S_RING`]
    /// (those of the key block after next are computed while the vector unit works on the
    /// current one's).
    pub s: [u32; S_RING],
    pub dp_off: u32,
    /// Weights in the operands' dtype `[bq, 128]`, followed by `dS` at `ds_off`;
    /// double-buffered.
    pub p: [u32; 2],
    pub ds_off: u32,
    /// The block's `dQ` accumulator, f32 `[bq, et * 128]`.
    pub dq: u32,
    /// Staging of `dq` rows (by parity) and of `dk`/`dv` rows.
    pub dq_stage: [u32; 2],
    pub kv_stage: [u32; 2],
    /// The causal mask's bias tiles.
    pub bias: u32,
    /// Bytes used.
    pub end: u32,
    pub bq: u32,
    pub bk: u32,
    /// f32 tiles per row of `dQ`/`dK` and of `dV`.
    pub et: u32,
    pub evt: u32,
    /// Keys, padded to whole blocks.
    pub s_pad: u32,
}

impl BwdLayout {
    pub fn new(spec: &AttnSpec, chip: &ChipInfo) -> Self {
        let n = &spec.node;
        let (bq, bk) = blocks(n, chip);
        let esz = spec.esz() as u64;
        let (s, e, ev, l) = (n.s as u64, n.e as u64, n.ev as u64, n.l as u64);
        let s_pad = s.div_ceil(bk as u64) * bk as u64;
        let et = (n.e as u32).div_ceil(LANES).max(1);
        let evt = (n.ev as u32).div_ceil(LANES).max(1);
        let (bq64, lanes) = (bq as u64, LANES as u64);
        let mut b = Bump { end: 0 };
        let k = b.take(s_pad * e * esz);
        let v = b.take(s_pad * ev * esz);
        let dk = b.take(s_pad * et as u64 * lanes * 4);
        let dv = b.take(s_pad * evt as u64 * lanes * 4);
        let q = b.take(bq64 * e * esz);
        let dout = b.take(bq64 * ev * esz);
        let out = b.take(bq64 * ev * esz);
        let lse = b.take(l.div_ceil(8) * 8 * 4);
        let tiles = bq64.div_ceil(8) * 4096;
        let lse_t = b.take(tiles);
        let d = b.take(tiles);
        let (sbytes, pbytes) = (bq64 * lanes * 4, bq64 * lanes * esz);
        let slot = (2 * sbytes).div_ceil(4096) * 4096;
        let mut sb = [0; S_RING];
        for x in sb.iter_mut() {
            *x = b.take(slot);
        }
        let p = [b.take(2 * pbytes), b.take(2 * pbytes)];
        let dp_off = sbytes as u32;
        let ds_off = pbytes as u32;
        let dq = b.take(bq64 * et as u64 * lanes * 4);
        let dq_stage = [b.take(bq64 * e * esz), b.take(bq64 * e * esz)];
        let kv_stage = [b.take(s_pad * e * esz), b.take(s_pad * ev * esz)];
        let bias = b.take(BIAS_TILES as u64 * 4096);
        BwdLayout {
            k,
            v,
            dk,
            dv,
            q,
            dout,
            out,
            lse,
            lse_t,
            d,
            s: sb,
            dp_off,
            p,
            ds_off,
            dq,
            dq_stage,
            kv_stage,
            bias,
            end: b.end,
            bq,
            bk,
            et,
            evt,
            s_pad: s_pad as u32,
        }
    }
}
