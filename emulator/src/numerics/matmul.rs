//! The matrix unit's tile product, fast and in a defined order.
//!
//! `out[i][j] = sum over k of a[i][k] * w[k][j]`, where the sum for each output element runs
//! sequentially over `k = 0, 1, ..` starting from +0.0, each product rounded to f32 and then
//! added. That is the order in which partial sums flow down the columns of a weight-stationary
//! systolic array. Products of bf16 values are exact in f32, so for bf16 inputs only the
//! additions round.
//!
//! Speed: weights are packed into column panels of [`NR`] values; a register-blocked kernel
//! computes a few rows x [`NR`] columns at a time, vectorised across columns (which does not
//! change any element's summation order), one panel at a time so that the panel stays in the
//! first-level cache. On x86-64 hosts the kernel is compiled again for AVX2 and for AVX-512 and
//! chosen at run time. Large products are split by rows over threads, which cannot change bits
//! either.
//!
//! Fused multiply-add: `fma(a, w, acc)` rounds once, `acc + a * w` twice; they agree whenever
//! the product `a * w` is exact in f32. Every operand the matrix unit multiplies is a bf16 value
//! (bf16 inputs, and the bf16 parts of f32 inputs), whose 8-bit significands multiply exactly in
//! f32's 24 bits unless the product leaves the normal range. So when every operand is a finite
//! bf16 value and the exponents of the largest and smallest non-zero operands keep every product
//! normal ([`Operands`]), the kernel uses FMA instructions where the host has them, with the
//! same bits as the separate multiply and add; otherwise it multiplies and adds.

use rayon::prelude::*;

/// Columns per packed panel.
pub const NR: usize = 16;

/// Rows read ahead of the one being converted, when reading rows a stride apart.
pub(crate) const AHEAD: usize = 8;

/// Hints the cache to fetch `bytes` (a no-op where there is no such hint).
#[inline(always)]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is only a hint; the address is inside `bytes`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// What the values of an operand allow: whether every product with the other operand is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operands {
    /// Every value is finite, normal or zero, with no bits beyond bf16's 8 significant ones.
    bf16_normal: bool,
    /// Smallest and largest biased exponent of the non-zero values (255 and 0 when all are zero).
    min_exp: u32,
    max_exp: u32,
}

impl Operands {
    /// What an empty operand allows (everything).
    pub const NONE: Operands = Operands {
        bf16_normal: true,
        min_exp: 255,
        max_exp: 0,
    };

    /// Scans f32 values.
    pub fn of(values: &[f32]) -> Self {
        // Magnitudes order as their bits: the largest and the smallest non-zero magnitude give
        // the exponent range; the low half-word must be clear in bf16 values.
        let (mut hi, mut lo_m1, mut low) = (0u32, u32::MAX, 0u32);
        for v in values {
            let a = v.to_bits() & 0x7fff_ffff;
            hi = hi.max(a);
            lo_m1 = lo_m1.min(a.wrapping_sub(1));
            low |= a & 0xffff;
        }
        if hi == 0 {
            return Operands::NONE;
        }
        Self::from_magnitudes(hi >> 16, lo_m1.wrapping_add(1) >> 16, low == 0)
    }

    /// Scans little-endian bf16 values (`bytes` holds pairs).
    pub fn of_bf16(bytes: &[u8]) -> Self {
        let mut scan = Bf16Scan::default();
        for b in bytes.as_chunks::<2>().0 {
            scan.add(u16::from_le_bytes(*b));
        }
        scan.operands()
    }

    /// From the largest and the smallest non-zero magnitude as bf16 bits (some value is not
    /// zero).
    fn from_magnitudes(hi: u32, lo: u32, bf16: bool) -> Self {
        Operands {
            // Not Inf/NaN, not subnormal, nothing beyond bf16's significand.
            bf16_normal: bf16 && hi < 0x7f80 && lo >= 0x80,
            min_exp: lo >> 7,
            max_exp: hi >> 7,
        }
    }

    /// What the values of both `self` and `other` allow.
    pub fn and(self, other: Operands) -> Self {
        Operands {
            bf16_normal: self.bf16_normal && other.bf16_normal,
            min_exp: self.min_exp.min(other.min_exp),
            max_exp: self.max_exp.max(other.max_exp),
        }
    }

    /// Whether every product of a value of `self` and one of `other` is exact in f32 (zero, or
    /// normal and finite), so a fused multiply-add gives the same bits as a multiply then an add.
    pub fn exact_products(self, other: Operands) -> bool {
        if !(self.bf16_normal && other.bf16_normal) {
            return false;
        }
        if self.max_exp < self.min_exp || other.max_exp < other.min_exp {
            return true; // one side is all zeros
        }
        // Unbiased exponents ea + ew: the product lies in [2^(ea+ew), 2^(ea+ew+2)).
        let lo = self.min_exp as i32 + other.min_exp as i32 - 254;
        let hi = self.max_exp as i32 + other.max_exp as i32 - 254;
        lo >= -126 && hi <= 125
    }
}

/// [`Operands`] of bf16 values seen one at a time (while they are converted for the product).
#[derive(Clone, Copy, Debug)]
pub struct Bf16Scan {
    /// The largest magnitude, and the smallest minus one (wrapping: zero counts as the largest).
    hi: u16,
    lo_m1: u16,
}

impl Default for Bf16Scan {
    fn default() -> Self {
        Bf16Scan {
            hi: 0,
            lo_m1: u16::MAX,
        }
    }
}

impl Bf16Scan {
    /// One more value, as its bits.
    #[inline(always)]
    pub fn add(&mut self, h: u16) {
        let a = h & 0x7fff;
        self.hi = self.hi.max(a);
        self.lo_m1 = self.lo_m1.min(a.wrapping_sub(1));
    }

    /// Values seen elsewhere: their largest magnitude and smallest minus one (as in `add`).
    #[inline]
    pub fn merge(&mut self, hi: u16, lo_m1: u16) {
        self.hi = self.hi.max(hi);
        self.lo_m1 = self.lo_m1.min(lo_m1);
    }

    /// The values another scan saw.
    #[inline]
    pub fn merge_scan(&mut self, other: Bf16Scan) {
        self.merge(other.hi, other.lo_m1);
    }

    /// What the values seen allow.
    pub fn operands(self) -> Operands {
        if self.hi == 0 {
            return Operands::NONE;
        }
        Operands::from_magnitudes(self.hi as u32, self.lo_m1.wrapping_add(1) as u32, true)
    }
}

/// A weight tile of `k` rows and `n` columns, packed into zero-padded column panels.
#[derive(Clone, Debug)]
pub struct PackedWeights {
    k: usize,
    n: usize,
    /// Panel `p` holds `k` rows of `NR` values: columns `p*NR .. p*NR + NR`.
    panels: Vec<f32>,
    /// What the weights allow.
    ops: Operands,
}

impl Default for PackedWeights {
    fn default() -> Self {
        PackedWeights {
            k: 0,
            n: 0,
            panels: Vec::new(),
            ops: Operands::NONE,
        }
    }
}

impl PackedWeights {
    /// Packs a row-major `k x n` tile.
    pub fn pack(w: &[f32], k: usize, n: usize) -> Self {
        let mut p = PackedWeights::default();
        p.repack(w, k, n);
        p
    }

    /// Packs a row-major `k x n` tile into this one's storage.
    pub fn repack(&mut self, w: &[f32], k: usize, n: usize) {
        assert!(w.len() >= k * n, "weight tile smaller than k x n");
        let np = n.div_ceil(NR);
        // Appended in order, panel by panel and row by row, so nothing is written twice.
        self.panels.clear();
        self.panels.reserve(np * k * NR);
        for p in 0..np {
            let cols = (n - p * NR).min(NR);
            for r in 0..k {
                self.panels
                    .extend_from_slice(&w[r * n + p * NR..r * n + p * NR + cols]);
                self.panels.extend(std::iter::repeat_n(0.0, NR - cols));
            }
        }
        (self.k, self.n) = (k, n);
        self.ops = Operands::of(&w[..k * n]);
    }

    /// Packs a `k x n` tile of little-endian bf16 values (row `r` at `bytes[r * stride..]`) into
    /// this one's storage: the same panels and [`Operands`] as [`PackedWeights::repack`] of the
    /// values widened to f32, in one pass.
    pub fn repack_bf16(&mut self, bytes: &[u8], stride: usize, k: usize, n: usize) {
        assert!(
            k == 0 || bytes.len() >= (k - 1) * stride + n * 2,
            "weight tile smaller than k x n"
        );
        let np = n.div_ceil(NR);
        self.panels.clear();
        self.panels.reserve(np * k * NR);
        // Per lane: the largest magnitude and the smallest minus one (as in `Bf16Scan`), kept
        // across rows so that the loop vectorises; merged at the end.
        let (mut hi, mut lo_m1) = ([0u16; NR], [u16::MAX; NR]);
        for p in 0..np {
            let cols = (n - p * NR).min(NR);
            for r in 0..k {
                let at = r * stride + p * NR * 2;
                if p == 0 && r + AHEAD < k {
                    // Rows a stride apart, each often on its own page, defeat the hardware
                    // prefetcher: ask for a whole row a few ahead (the later panels find it
                    // cached).
                    let ahead = (r + AHEAD) * stride;
                    prefetch(&bytes[ahead..ahead + n * 2]);
                }
                let src: [u8; NR * 2] = match bytes.get(at..at + NR * 2) {
                    Some(full) if cols == NR => full.try_into().expect("NR values"),
                    _ => {
                        let mut s = [0u8; NR * 2];
                        s[..cols * 2].copy_from_slice(&bytes[at..at + cols * 2]);
                        s
                    }
                };
                let mut row = [0.0f32; NR];
                for (j, b) in src.as_chunks::<2>().0.iter().enumerate() {
                    let h = u16::from_le_bytes(*b);
                    let a = h & 0x7fff;
                    // Padding counts as zero, which changes neither bound.
                    hi[j] = hi[j].max(a);
                    lo_m1[j] = lo_m1[j].min(a.wrapping_sub(1));
                    row[j] = f32::from_bits((h as u32) << 16);
                }
                self.panels.extend_from_slice(&row);
            }
        }
        let mut scan = Bf16Scan::default();
        for (h, l) in hi.iter().zip(&lo_m1) {
            scan.merge(*h, *l);
        }
        (self.k, self.n) = (k, n);
        self.ops = scan.operands();
    }

    /// Rows (K).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (N).
    pub fn n(&self) -> usize {
        self.n
    }

    fn panel(&self, p: usize) -> &[f32] {
        &self.panels[p * self.k * NR..(p + 1) * self.k * NR]
    }
}

/// `R` rows x [`NR`] columns over the whole of `k`, summed in order from +0.0.
#[inline(always)]
fn block<const R: usize, const FMA: bool>(
    a: &[f32],
    lda: usize,
    k: usize,
    panel: &[f32],
    out: &mut [[f32; NR]; R],
) {
    let mut acc = [[0.0f32; NR]; R];
    let panel = &panel[..k * NR];
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[r * lda..r * lda + k]);
    for kk in 0..k {
        let w: &[f32; NR] = panel[kk * NR..kk * NR + NR].try_into().expect("panel row");
        for r in 0..R {
            let av = rows[r][kk];
            for j in 0..NR {
                acc[r][j] = if FMA {
                    av.mul_add(w[j], acc[r][j])
                } else {
                    acc[r][j] + av * w[j]
                };
            }
        }
    }
    *out = acc;
}

/// Rows `[0, m)` of the product into `out` (row stride `n`), panel by panel, `MR` rows at a time.
#[inline(always)]
fn rows_product<const MR: usize, const FMA: bool>(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
) {
    let (k, n) = (w.k, w.n);
    for p in 0..n.div_ceil(NR) {
        let panel = w.panel(p);
        let cols = (n - p * NR).min(NR);
        let mut put = |i: usize, vals: &[f32; NR]| {
            out[i * n + p * NR..i * n + p * NR + cols].copy_from_slice(&vals[..cols]);
        };
        let mut i = 0;
        while i + MR <= m {
            let mut res = [[0.0f32; NR]; MR];
            block::<MR, FMA>(&a[i * lda..], lda, k, panel, &mut res);
            for (r, vals) in res.iter().enumerate() {
                put(i + r, vals);
            }
            i += MR;
        }
        while i < m {
            let mut res = [[0.0f32; NR]; 1];
            block::<1, FMA>(&a[i * lda..], lda, k, panel, &mut res);
            put(i, &res[0]);
            i += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_product_avx2(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
    fma: bool,
) {
    if fma {
        rows_product::<6, true>(a, lda, m, w, out)
    } else {
        rows_product::<6, false>(a, lda, m, w, out)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;

/// The kernel for this host; `fma` when every product is exact.
fn rows_product_best(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
    fma: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports both features the function was compiled for.
            return unsafe { avx512::rows_product(a, lda, m, w, out, fma) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: as above.
            return unsafe { rows_product_avx2(a, lda, m, w, out, fma) };
        }
    }
    let _ = fma; // without a fused multiply-add instruction, `mul_add` would be a library call
    rows_product::<4, false>(a, lda, m, w, out)
}

/// Work (multiply-adds) above which a product is split over threads.
const PARALLEL_MACS: usize = 1 << 21;

/// `out (m x n, row stride n) = a (m x k, row stride lda) * w`, summed in the defined order.
pub fn tile_product(a: &[f32], lda: usize, m: usize, w: &PackedWeights, out: &mut [f32]) {
    let a_ops = match m {
        0 => Operands::NONE,
        _ => Operands::of(&a[..((m - 1) * lda + w.k).min(a.len())]),
    };
    tile_product_with(a, lda, m, w, out, a_ops)
}

/// [`tile_product_with`] on the calling thread only (no split over threads).
pub fn tile_rows(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
    a_ops: Operands,
) {
    let (k, n) = (w.k, w.n);
    assert!(
        lda >= k && (m == 0 || a.len() >= (m - 1) * lda + k),
        "LHS too small"
    );
    assert!(out.len() >= m * n, "output too small");
    rows_product_best(a, lda, m, w, &mut out[..m * n], a_ops.exact_products(w.ops));
}

/// [`tile_product`] when the caller knows what the LHS values allow: `a_ops` must describe
/// every value of rows `[0, m)` (an [`Operands`] of more values is fine).
pub fn tile_product_with(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
    a_ops: Operands,
) {
    let (k, n) = (w.k, w.n);
    assert!(
        lda >= k && (m == 0 || a.len() >= (m - 1) * lda + k),
        "LHS too small"
    );
    assert!(out.len() >= m * n, "output too small");
    let fma = a_ops.exact_products(w.ops);
    if m * k * n < PARALLEL_MACS || m < 16 {
        rows_product_best(a, lda, m, w, &mut out[..m * n], fma);
        return;
    }
    let chunk = (m / rayon::current_num_threads().max(1) / 4).clamp(16, 512) / 8 * 8;
    out[..m * n]
        .par_chunks_mut(chunk * n)
        .enumerate()
        .for_each(|(c, o)| {
            let r0 = c * chunk;
            let rows = o.len() / n;
            rows_product_best(&a[r0 * lda..], lda, rows, w, o, fma);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(a: &[f32], lda: usize, m: usize, w: &[f32], k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f32;
                for kk in 0..k {
                    s += a[i * lda + kk] * w[kk * n + j];
                }
                out[i * n + j] = s;
            }
        }
        out
    }

    fn data(len: usize, seed: u32) -> Vec<f32> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                super::super::float::round_bf16(((x >> 8) as f32 / (1u32 << 24) as f32) * 4.0 - 2.0)
            })
            .collect()
    }

    fn same_bits(x: &[f32], y: &[f32]) -> bool {
        x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits())
    }

    #[test]
    fn matches_sequential_reference_bit_for_bit() {
        for (m, k, n) in [
            (1, 1, 1),
            (5, 7, 3),
            (9, 128, 128),
            (33, 100, 17),
            (64, 128, 40),
            (37, 256, 256),
            // Every remainder of the 6-row blocks, and a last panel of its own.
            (8, 64, 80),
            (10, 16, 64),
            (11, 32, 200),
        ] {
            let lda = k + 3;
            let a = data(m * lda, 1);
            let w = data(k * n, 2);
            let mut out = vec![0.0; m * n];
            tile_product(&a, lda, m, &PackedWeights::pack(&w, k, n), &mut out);
            assert!(
                same_bits(&out, &reference(&a, lda, m, &w, k, n)),
                "{m}x{k}x{n}"
            );
        }
    }

    #[test]
    fn bf16_packing_is_packing_the_widened_values() {
        let mut x = 5u32;
        for (k, n, stride) in [(1, 1, 2), (3, 17, 40), (128, 128, 256), (9, 40, 100)] {
            let bytes: Vec<u8> = (0..(k - 1) * stride + n * 2)
                .map(|_| {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (x >> 24) as u8
                })
                .collect();
            let widened: Vec<f32> = (0..k * n)
                .map(|i| {
                    let at = (i / n) * stride + (i % n) * 2;
                    f32::from_bits((u16::from_le_bytes([bytes[at], bytes[at + 1]]) as u32) << 16)
                })
                .collect();
            let want = PackedWeights::pack(&widened, k, n);
            let mut got = PackedWeights::pack(&[7.0; 4], 2, 2);
            got.repack_bf16(&bytes, stride, k, n);
            assert_eq!(
                (got.k, got.n, got.ops),
                (want.k, want.n, want.ops),
                "{k}x{n}"
            );
            assert!(same_bits(&got.panels, &want.panels), "{k}x{n}");
        }
    }

    #[test]
    fn parallel_split_gives_identical_bits() {
        let (m, k, n) = (1024, 128, 128);
        let a = data(m * k, 3);
        let w = data(k * n, 4);
        let mut par = vec![0.0; m * n];
        tile_product(&a, k, m, &PackedWeights::pack(&w, k, n), &mut par);
        assert!(same_bits(&par, &reference(&a, k, m, &w, k, n)));
    }

    /// Operands whose products underflow, overflow, or are not bf16: the kernel must not fuse
    /// (a fused multiply-add would give other bits), and gives the reference's bits.
    #[test]
    fn products_that_are_not_exact_keep_the_separate_rounding() {
        let (m, k, n) = (24, 64, 32);
        let base = data(m * k, 5);
        let w = data(k * n, 6);
        let cases: [(&str, f32); 4] = [
            ("underflow", 1e-30),
            ("overflow", 1e30),
            ("subnormal", 1e-40),
            ("not bf16", 1.0 + f32::EPSILON),
        ];
        for (what, scale) in cases {
            // A mix of ordinary values and scaled ones, so sums of both kinds happen.
            let a: Vec<f32> = base
                .iter()
                .enumerate()
                .map(|(i, x)| if i % 3 == 0 { x * scale } else { *x })
                .collect();
            let w2: Vec<f32> = w
                .iter()
                .enumerate()
                .map(|(i, x)| if i % 5 == 0 { x * scale } else { *x })
                .collect();
            let packed = PackedWeights::pack(&w2, k, n);
            assert!(
                !Operands::of(&a).exact_products(packed.ops),
                "{what}: must not fuse"
            );
            let mut out = vec![0.0; m * n];
            tile_product(&a, k, m, &packed, &mut out);
            assert!(same_bits(&out, &reference(&a, k, m, &w2, k, n)), "{what}");
        }
    }

    #[test]
    fn bf16_scan_agrees_with_the_f32_scan() {
        let mut x = 7u32;
        let bits: Vec<u16> = (0..1000)
            .map(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                match i % 7 {
                    0 => 0,
                    1 => 0x8000,
                    _ => (x >> 16) as u16,
                }
            })
            .collect();
        for len in [0, 1, 15, 16, 17, 999, 1000] {
            let part = &bits[..len];
            let bytes: Vec<u8> = part.iter().flat_map(|h| h.to_le_bytes()).collect();
            let vals: Vec<f32> = part
                .iter()
                .map(|h| f32::from_bits((*h as u32) << 16))
                .collect();
            assert_eq!(Operands::of_bf16(&bytes), Operands::of(&vals), "{len}");
        }
    }

    #[test]
    fn exactness_bounds() {
        let ops = |v: f32| Operands::of(&[v, 0.0]);
        // 2^-63 * 2^-63 = 2^-126, the smallest normal: exact.
        assert!(ops(2f32.powi(-63)).exact_products(ops(2f32.powi(-63))));
        assert!(!ops(2f32.powi(-64)).exact_products(ops(2f32.powi(-63))));
        // Products stay below 2^127 (one binade of margin under f32's largest finite value).
        assert!(ops(2f32.powi(62)).exact_products(ops(2f32.powi(63))));
        assert!(!ops(2f32.powi(63)).exact_products(ops(2f32.powi(63))));
        assert!(Operands::of(&[0.0, -0.0]).exact_products(ops(2f32.powi(120))));
        assert!(!ops(1.0 + f32::EPSILON).exact_products(ops(1.0)));
        assert!(
            !ops(1e-44).exact_products(ops(1.0)),
            "a subnormal below bf16's bits"
        );
        assert!(!ops(f32::INFINITY).exact_products(ops(1.0)));
        assert!(!ops(f32::NAN).exact_products(ops(1.0)));
    }
}
