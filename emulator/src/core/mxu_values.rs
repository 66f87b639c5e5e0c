//! The matrix units' values: weight tiles, LHS blocks read from VMEM, products, queued results
//! and the buffers they pass through (kept from instruction to instruction and launch to
//! launch, so a matmul allocates nothing once the first few have run).
//!
//! Weights and LHS values are read from VMEM as f32 (bf16 widened exactly, or f32 split into
//! bf16 parts for the precision's passes); each pass is a tile product summed in the defined
//! order of [`crate::numerics::matmul`]; pass results are added in a fixed order, smallest
//! terms first (see [`passes`]).

use tpuemu_isa::ops::{MxuFmt, Precision};

use super::fifo::Fifo;
use crate::numerics::float::round_bf16;
use crate::numerics::matmul::{PackedWeights, tile_product};

/// The passes of a precision, in the order they are summed: (LHS part, weight part), parts
/// indexed 0 = hi, 1 = mid, 2 = lo.
pub fn passes(prec: Precision) -> &'static [(usize, usize)] {
    match prec {
        Precision::P1 => &[(0, 0)],
        Precision::P3 => &[(1, 0), (0, 1), (0, 0)],
        Precision::P6 => &[(1, 1), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0)],
    }
}

/// Splits f32 values into three bf16 parts: `x = hi + mid + lo` (as far as bf16 allows).
fn split(values: &[f32], parts: &mut [Vec<f32>; 3]) {
    let [hi, mid, lo] = parts;
    hi.clear();
    hi.extend(values.iter().map(|x| round_bf16(*x)));
    mid.clear();
    mid.extend(values.iter().zip(hi.iter()).map(|(x, h)| round_bf16(x - h)));
    lo.clear();
    lo.extend(
        values
            .iter()
            .zip(hi.iter())
            .zip(mid.iter())
            .map(|((x, h), m)| round_bf16(x - h - m)),
    );
}

/// Reads a `rows x cols` block of `fmt` values at `base` (rows `stride` bytes apart) into
/// `out` as f32, row-major, or transposed (`cols x rows`) with `transpose`.
pub(crate) fn read_block(
    bytes: &[u8],
    base: usize,
    (rows, cols, stride): (usize, usize, usize),
    fmt: MxuFmt,
    transpose: bool,
    out: &mut Vec<f32>,
) {
    let esz = fmt.bytes() as usize;
    if out.len() < rows * cols {
        out.resize(rows * cols, 0.0);
    }
    out.truncate(rows * cols);
    let widen = |b: &[u8]| match fmt {
        MxuFmt::Bf16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        MxuFmt::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
    };
    for r in 0..rows {
        let row = &bytes[base + r * stride..base + r * stride + cols * esz];
        if transpose {
            for (c, b) in row.chunks_exact(esz).enumerate() {
                out[c * rows + r] = widen(b);
            }
        } else {
            let o = &mut out[r * cols..(r + 1) * cols];
            match fmt {
                MxuFmt::Bf16 => {
                    for (o, b) in o.iter_mut().zip(row.chunks_exact(2)) {
                        *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
                    }
                }
                MxuFmt::F32 => {
                    for (o, b) in o.iter_mut().zip(row.chunks_exact(4)) {
                        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                }
            }
        }
    }
}

/// Weights held by a matrix unit.
#[derive(Debug, Default)]
pub(crate) struct Weights {
    pub fmt: Option<MxuFmt>,
    pub k: usize,
    pub n: usize,
    /// Row-major values (bf16 values are exact in f32).
    pub raw: Vec<f32>,
    /// Packed bf16 parts: hi, mid, lo (packed on first use after a load).
    parts: [PackedWeights; 3],
    packed: bool,
}

impl Weights {
    /// New values were read into `raw`: the parts are packed again when next used.
    pub fn loaded(&mut self, fmt: MxuFmt, k: usize, n: usize) {
        (self.fmt, self.k, self.n) = (Some(fmt), k, n);
        self.packed = false;
    }

    /// The packed parts (packing them on first use).
    fn parts(&mut self, scratch: &mut [Vec<f32>; 3]) -> &[PackedWeights; 3] {
        if !self.packed {
            let (k, n) = (self.k, self.n);
            match self.fmt {
                Some(MxuFmt::F32) => {
                    split(&self.raw, scratch);
                    for (p, s) in self.parts.iter_mut().zip(scratch.iter()) {
                        p.repack(s, k, n);
                    }
                }
                _ => self.parts[0].repack(&self.raw, k, n),
            }
            self.packed = true;
        }
        &self.parts
    }
}

/// A block of result rows queued in a matrix unit.
#[derive(Debug)]
pub(crate) struct ResultBlock {
    pub rows: u64,
    pub n: usize,
    /// `rows x n` f32 values (empty when timing only).
    pub data: Vec<f32>,
    /// Rows already popped.
    pub taken: u64,
    /// Cycle at which the rows are out of the array.
    pub ready: u64,
}

/// Functional state of a matrix unit.
#[derive(Debug, Default)]
pub(crate) struct MxuState {
    /// Whether weights were loaded in this launch.
    pub loaded: bool,
    pub weights: Weights,
    pub queue: Fifo<ResultBlock>,
}

impl MxuState {
    pub fn queued_rows(&self) -> u64 {
        self.queue.iter().map(|b| b.rows - b.taken).sum()
    }

    /// Empties the unit for a new launch, keeping its buffers.
    pub fn reset(&mut self, bufs: &mut MxuBuffers) {
        self.loaded = false;
        while let Some(b) = self.queue.front_mut() {
            bufs.recycle(std::mem::take(&mut b.data));
            self.queue.pop_front();
        }
    }
}

/// Buffers for the matrix units' values.
#[derive(Debug, Default)]
pub(crate) struct MxuBuffers {
    /// The LHS block of a matmul, as f32.
    lhs: Vec<f32>,
    /// Its bf16 parts, for f32 inputs.
    lhs_parts: [Vec<f32>; 3],
    /// A pass's product, before it is added to the others.
    tmp: Vec<f32>,
    /// Result buffers no longer queued.
    free: Vec<Vec<f32>>,
}

impl MxuBuffers {
    /// A buffer of `len` values (contents unspecified).
    fn result(&mut self, len: usize) -> Vec<f32> {
        let mut v = self.free.pop().unwrap_or_default();
        if v.len() < len {
            v.resize(len, 0.0);
        }
        v.truncate(len);
        v
    }

    /// Takes back a result buffer.
    pub fn recycle(&mut self, v: Vec<f32>) {
        if v.capacity() > 0 && self.free.len() < 64 {
            self.free.push(v);
        }
    }
}

/// The `m x n` product of the LHS block at `base` (`m` rows `stride` bytes apart, or stored
/// transposed as `k` rows of `m`) and the weights, passes summed in order.
pub(crate) fn product(
    bufs: &mut MxuBuffers,
    w: &mut Weights,
    bytes: &[u8],
    (base, m, stride): (usize, usize, usize),
    prec: Precision,
    transpose: bool,
) -> Vec<f32> {
    let (k, n) = (w.k, w.n);
    let fmt = w.fmt.unwrap_or(MxuFmt::Bf16);
    let shape = if transpose {
        (k, m, stride)
    } else {
        (m, k, stride)
    };
    read_block(bytes, base, shape, fmt, transpose, &mut bufs.lhs);
    let mut scratch: [Vec<f32>; 3] = Default::default();
    let parts = w.parts(&mut scratch);
    let mut result = bufs.result(m * n);
    for (i, &(a_part, w_part)) in passes(prec).iter().enumerate() {
        let lhs: &[f32] = match fmt {
            MxuFmt::Bf16 => &bufs.lhs,
            MxuFmt::F32 => {
                if i == 0 {
                    split(&bufs.lhs, &mut bufs.lhs_parts);
                }
                &bufs.lhs_parts[a_part]
            }
        };
        let packed = &parts[w_part];
        if i == 0 {
            tile_product(lhs, k, m, packed, &mut result);
        } else {
            if bufs.tmp.len() < m * n {
                bufs.tmp.resize(m * n, 0.0);
            }
            tile_product(lhs, k, m, packed, &mut bufs.tmp);
            for (r, t) in result.iter_mut().zip(&bufs.tmp) {
                *r += *t;
            }
        }
    }
    result
}

/// Writes `rows` result rows of `n` values to `bytes` at `base` (`stride` apart), adding them
/// to what is there when `acc`.
pub(crate) fn write_rows(
    bytes: &mut [u8],
    base: usize,
    stride: usize,
    src: &[f32],
    (rows, n): (usize, usize),
    acc: bool,
) {
    for r in 0..rows {
        let vals = &src[r * n..(r + 1) * n];
        let dst = &mut bytes[base + r * stride..base + r * stride + n * 4];
        if acc {
            for (d, v) in dst.chunks_exact_mut(4).zip(vals) {
                let sum = f32::from_le_bytes([d[0], d[1], d[2], d[3]]) + v;
                d.copy_from_slice(&sum.to_le_bytes());
            }
        } else {
            for (d, v) in dst.chunks_exact_mut(4).zip(vals) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}
