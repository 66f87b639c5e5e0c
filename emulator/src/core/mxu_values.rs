//! The matrix units' values: weight tiles, LHS blocks read from VMEM, products, queued results
//! and the buffers they pass through (kept from instruction to instruction and launch to
//! launch, so a matmul allocates nothing once the first few have run).
//!
//! Weights and LHS values are read from VMEM as f32 (bf16 widened exactly, or f32 split into
//! bf16 parts for the precision's passes); each pass is a tile product summed in the defined
//! order of [`crate::numerics::matmul`]; pass results are added in a fixed order, smallest
//! terms first (see [`passes`]).

use std::sync::Arc;

use tpuemu_isa::ops::{MxuFmt, Precision};

use super::deferred::Vmem;
use super::fifo::Fifo;
use super::mxu_jobs::Rows;
use crate::numerics::float::round_bf16;
use crate::numerics::matmul::{
    AHEAD, Bf16Scan, Operands, PackedWeights, prefetch, tile_product_with,
};

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
/// `out` as f32, row-major, or transposed (`cols x rows`) with `transpose`. Returns what the
/// values allow the product (for bf16; f32 values are split into parts first).
pub(crate) fn read_block(
    bytes: &[u8],
    base: usize,
    (rows, cols, stride): (usize, usize, usize),
    fmt: MxuFmt,
    transpose: bool,
    out: &mut Vec<f32>,
) -> Operands {
    if transpose {
        if out.len() < rows * cols {
            out.resize(rows * cols, 0.0);
        }
        out.truncate(rows * cols);
    } else {
        // Appended row by row: nothing to clear first.
        out.clear();
        out.reserve(rows * cols);
    }
    let esz = fmt.bytes() as usize;
    let row = |r: usize| &bytes[base + r * stride..base + r * stride + cols * esz];
    let mut scan = Bf16Scan::default();
    let bf16 = |b: &[u8], scan: &mut Bf16Scan| {
        let h = u16::from_le_bytes([b[0], b[1]]);
        scan.add(h);
        f32::from_bits((h as u32) << 16)
    };
    let f32_of = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if !transpose {
        for r in 0..rows {
            // Rows far apart (each on its own page) defeat the hardware prefetcher: ask for
            // a row a few ahead.
            if r + AHEAD < rows {
                prefetch(row(r + AHEAD));
            }
            match fmt {
                MxuFmt::Bf16 => widen_bf16_row(row(r), out, &mut scan),
                MxuFmt::F32 => out.extend(
                    row(r)
                        .as_chunks::<4>()
                        .0
                        .iter()
                        .map(|b| f32::from_le_bytes(*b)),
                ),
            }
        }
    } else {
        // Eight source rows at a time, so that each output row is written eight values at once.
        const G: usize = 8;
        let mut r0 = 0;
        while r0 < rows {
            let g = (rows - r0).min(G);
            let src: [&[u8]; G] = std::array::from_fn(|i| row(r0 + i.min(g - 1)));
            for c in 0..cols {
                let o = &mut out[c * rows + r0..c * rows + r0 + g];
                for (i, o) in o.iter_mut().enumerate() {
                    let b = &src[i][c * esz..(c + 1) * esz];
                    *o = match fmt {
                        MxuFmt::Bf16 => bf16(b, &mut scan),
                        MxuFmt::F32 => f32_of(b),
                    };
                }
            }
            r0 += g;
        }
    }
    match fmt {
        MxuFmt::Bf16 => scan.operands(),
        MxuFmt::F32 => Operands::of(out),
    }
}

/// Appends a row of bf16 values to `out`, widened, scanning them.
#[inline]
fn widen_bf16_row(src: &[u8], out: &mut Vec<f32>, scan: &mut Bf16Scan) {
    let src = src.as_chunks::<2>().0;
    out.extend(
        src.iter()
            .map(|b| f32::from_bits((u16::from_le_bytes(*b) as u32) << 16)),
    );
    // Plain locals and one loop (over the row just read, in cache), so that it vectorises.
    let (mut hi, mut lo_m1) = (0u16, u16::MAX);
    for b in src {
        let a = u16::from_le_bytes(*b) & 0x7fff;
        hi = hi.max(a);
        lo_m1 = lo_m1.min(a.wrapping_sub(1));
    }
    scan.merge(hi, lo_m1);
}

/// Weights held by a matrix unit.
#[derive(Debug, Default)]
pub(crate) struct Weights {
    pub fmt: Option<MxuFmt>,
    pub k: usize,
    pub n: usize,
    /// Row-major values (bf16 values are exact in f32).
    pub raw: Vec<f32>,
    /// Packed bf16 parts: hi, mid, lo (packed on first use after a load; shared with the
    /// products still being computed from them).
    parts: [Arc<PackedWeights>; 3],
    packed: bool,
}

impl Weights {
    /// New values were read into `raw`: the parts are packed again when next used.
    pub fn loaded(&mut self, fmt: MxuFmt, k: usize, n: usize) {
        (self.fmt, self.k, self.n) = (Some(fmt), k, n);
        self.packed = false;
    }

    /// Packs a bf16 tile of the loaded shape straight from VMEM bytes (`bytes` starts at its
    /// first row; rows `stride` apart), after [`Weights::loaded`]: the same panels as reading
    /// it into `raw` and packing that (bf16 values are exact in f32).
    pub fn pack_bf16(&mut self, bytes: &[u8], stride: usize) {
        let (k, n) = (self.k, self.n);
        match Arc::get_mut(&mut self.parts[0]) {
            Some(p) => p.repack_bf16(bytes, stride, k, n),
            None => {
                let mut p = PackedWeights::default();
                p.repack_bf16(bytes, stride, k, n);
                self.parts[0] = Arc::new(p);
            }
        }
        self.packed = true;
    }

    /// The packed parts (packing them on first use).
    fn parts(&mut self, scratch: &mut [Vec<f32>; 3]) -> &[Arc<PackedWeights>; 3] {
        if !self.packed {
            let (k, n) = (self.k, self.n);
            // In place, unless a product still being computed holds the old tile.
            let repack = |p: &mut Arc<PackedWeights>, w: &[f32]| match Arc::get_mut(p) {
                Some(p) => p.repack(w, k, n),
                None => *p = Arc::new(PackedWeights::pack(w, k, n)),
            };
            match self.fmt {
                Some(MxuFmt::F32) => {
                    split(&self.raw, scratch);
                    for (p, s) in self.parts.iter_mut().zip(scratch.iter()) {
                        repack(p, s);
                    }
                }
                _ => repack(&mut self.parts[0], &self.raw),
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
    /// `rows x n` f32 values, perhaps still being computed (none when timing only).
    pub data: Rows,
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
            for v in std::mem::take(&mut b.data).into_buffers() {
                bufs.recycle(v);
            }
            self.queue.pop_front();
        }
    }
}

/// A bf16 LHS block kept for the next matmul that reads the same bytes.
#[derive(Debug)]
struct LhsCache {
    key: (usize, (usize, usize, usize), bool),
    lhs: Arc<Vec<f32>>,
    ops: Operands,
}

/// Buffers for the matrix units' values.
#[derive(Debug, Default)]
pub(crate) struct MxuBuffers {
    /// The LHS block of a matmul, as f32.
    lhs: Vec<f32>,
    /// LHS buffers for products computed beside the interpreter.
    lhs_free: Vec<Vec<f32>>,
    /// The last bf16 LHS block read, while VMEM watches its bytes: (base, shape, transpose),
    /// the values, what they allow.
    cache: Option<LhsCache>,
    /// Its bf16 parts, for f32 inputs.
    lhs_parts: [Vec<f32>; 3],
    /// A pass's product, before it is added to the others.
    tmp: Vec<f32>,
    /// Result buffers no longer queued.
    free: Vec<Vec<f32>>,
}

impl MxuBuffers {
    /// A buffer of `len` values (contents unspecified).
    pub fn result(&mut self, len: usize) -> Vec<f32> {
        let mut v = self.free.pop().unwrap_or_default();
        if v.len() < len {
            v.resize(len, 0.0);
        }
        v.truncate(len);
        v
    }

    /// Takes back a result buffer.
    pub fn recycle(&mut self, v: Vec<f32>) {
        if v.capacity() > 0 && self.free.len() < 256 {
            self.free.push(v);
        }
    }

    /// Takes back an LHS buffer.
    fn recycle_lhs(&mut self, v: Vec<f32>) {
        if v.capacity() > 0 && self.lhs_free.len() < 16 {
            self.lhs_free.push(v);
        }
    }

    /// The bf16 LHS block `shape` at `base`: the one read last if VMEM has not written its
    /// bytes since, else read now (and watched).
    fn bf16_lhs(
        &mut self,
        vmem: &mut Vmem,
        base: usize,
        shape: (usize, usize, usize),
        transpose: bool,
    ) -> (Arc<Vec<f32>>, Operands) {
        let (rows, cols, stride) = shape;
        let key = (base, shape, transpose);
        let range = (base, base + rows.saturating_sub(1) * stride + cols * 2);
        if let Some(c) = &self.cache
            && c.key == key
            && vmem.unwritten(range.0, range.1)
        {
            return (c.lhs.clone(), c.ops);
        }
        let mut v = self.lhs_free.pop().unwrap_or_default();
        let bytes = vmem.read(range.0, range.1);
        let ops = read_block(bytes, base, shape, MxuFmt::Bf16, transpose, &mut v);
        let lhs = Arc::new(v);
        if rows * cols > 0 {
            vmem.watch(range.0, range.1);
            let old = self.cache.replace(LhsCache {
                key,
                lhs: lhs.clone(),
                ops,
            });
            if let Some(v) = old.and_then(|c| Arc::try_unwrap(c.lhs).ok()) {
                self.recycle_lhs(v);
            }
        }
        (lhs, ops)
    }

    /// Forgets the cached LHS block (a new launch).
    pub fn forget_lhs(&mut self) {
        if let Some(v) = self.cache.take().and_then(|c| Arc::try_unwrap(c.lhs).ok()) {
            self.recycle_lhs(v);
        }
    }
}

/// The `m x n` product of the LHS block at `base` (`m` rows `stride` bytes apart, or stored
/// transposed as `k` rows of `m`) and the weights, passes summed in order. A one-pass product
/// may still be being computed when this returns ([`Rows::Pending`]).
pub(crate) fn product(
    bufs: &mut MxuBuffers,
    w: &mut Weights,
    vmem: &mut Vmem,
    (base, m, stride): (usize, usize, usize),
    prec: Precision,
    transpose: bool,
) -> Rows {
    while let Some(v) = vmem.take_spare() {
        bufs.recycle(v);
    }
    let (k, n) = (w.k, w.n);
    let fmt = w.fmt.unwrap_or(MxuFmt::Bf16);
    let shape = if transpose {
        (k, m, stride)
    } else {
        (m, k, stride)
    };
    let mut scratch: [Vec<f32>; 3] = Default::default();
    let parts = w.parts(&mut scratch);
    if fmt == MxuFmt::Bf16 {
        let (lhs, ops) = bufs.bf16_lhs(vmem, base, shape, transpose);
        return Rows::start(lhs, m, parts[0].clone(), ops, &mut |len| bufs.result(len));
    }
    let hi = base + shape.0.saturating_sub(1) * stride + shape.1 * 4;
    read_block(
        vmem.read(base, hi),
        base,
        shape,
        fmt,
        transpose,
        &mut bufs.lhs,
    );
    split(&bufs.lhs, &mut bufs.lhs_parts);
    let mut result = bufs.result(m * n);
    for (i, &(a_part, w_part)) in passes(prec).iter().enumerate() {
        let lhs = &bufs.lhs_parts[a_part];
        let ops = Operands::of(lhs);
        let packed = &parts[w_part];
        if i == 0 {
            tile_product_with(lhs, k, m, packed, &mut result, ops);
        } else {
            if bufs.tmp.len() < m * n {
                bufs.tmp.resize(m * n, 0.0);
            }
            tile_product_with(lhs, k, m, packed, &mut bufs.tmp, ops);
            for (r, t) in result.iter_mut().zip(&bufs.tmp) {
                *r += *t;
            }
        }
    }
    Rows::Ready(result)
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
            for (d, v) in dst.as_chunks_mut::<4>().0.iter_mut().zip(vals) {
                *d = (f32::from_le_bytes(*d) + v).to_le_bytes();
            }
        } else {
            for (d, v) in dst.as_chunks_mut::<4>().0.iter_mut().zip(vals) {
                *d = v.to_le_bytes();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_read_as_the_element_by_element_definition() {
        let mut x = 3u32;
        let bytes: Vec<u8> = (0..256 * 1024)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect();
        for fmt in [MxuFmt::Bf16, MxuFmt::F32] {
            let esz = fmt.bytes() as usize;
            for (rows, cols, stride) in [(1, 1, 4), (5, 7, 64), (9, 128, 512), (128, 13, 1040)] {
                let elem = |r: usize, c: usize| {
                    let b = &bytes[40 + r * stride + c * esz..];
                    match fmt {
                        MxuFmt::Bf16 => {
                            f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
                        }
                        MxuFmt::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                    }
                };
                for transpose in [false, true] {
                    let mut out = vec![7.0; 3];
                    let ops =
                        read_block(&bytes, 40, (rows, cols, stride), fmt, transpose, &mut out);
                    let want: Vec<f32> = if transpose {
                        (0..cols)
                            .flat_map(|c| (0..rows).map(move |r| (r, c)))
                            .map(|(r, c)| elem(r, c))
                            .collect()
                    } else {
                        (0..rows)
                            .flat_map(|r| (0..cols).map(move |c| (r, c)))
                            .map(|(r, c)| elem(r, c))
                            .collect()
                    };
                    let same = out.len() == want.len()
                        && out
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{fmt} {rows}x{cols} transpose {transpose}");
                    assert_eq!(ops, Operands::of(&want), "{fmt} {rows}x{cols}");
                }
            }
        }
    }
}
