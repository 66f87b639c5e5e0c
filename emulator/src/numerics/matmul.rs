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
    /// Scans `values`.
    pub fn of(values: &[f32]) -> Self {
        let (mut bad, mut lo, mut hi) = (0u32, 255u32, 0u32);
        for v in values {
            let b = v.to_bits();
            let e = (b >> 23) & 0xff;
            let nonzero = (b & 0x7fff_ffff) != 0;
            // Inf/NaN, subnormal, or more than bf16's significand.
            bad |= u32::from(e == 255) | u32::from(e == 0 && nonzero) | (b & 0xffff);
            lo = lo.min(if nonzero { e } else { 255 });
            hi = hi.max(if nonzero { e } else { 0 });
        }
        Operands {
            bf16_normal: bad == 0,
            min_exp: lo,
            max_exp: hi,
        }
    }

    /// Whether every product of a value of `self` and one of `other` is exact in f32 (zero, or
    /// normal and finite), so a fused multiply-add gives the same bits as a multiply then an add.
    pub fn exact_products(self, other: Operands) -> bool {
        if !(self.bf16_normal && other.bf16_normal) {
            return false;
        }
        if self.max_exp == 0 || other.max_exp == 0 {
            return true; // one side is all zeros
        }
        // Unbiased exponents ea + ew: the product lies in [2^(ea+ew), 2^(ea+ew+2)).
        let lo = self.min_exp as i32 + other.min_exp as i32 - 254;
        let hi = self.max_exp as i32 + other.max_exp as i32 - 254;
        lo >= -126 && hi <= 125
    }
}

/// A weight tile of `k` rows and `n` columns, packed into zero-padded column panels.
#[derive(Clone, Debug, Default)]
pub struct PackedWeights {
    k: usize,
    n: usize,
    /// Panel `p` holds `k` rows of `NR` values: columns `p*NR .. p*NR + NR`.
    panels: Vec<f32>,
    ops: Option<Operands>,
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
        self.panels.clear();
        self.panels.resize(np * k * NR, 0.0);
        for p in 0..np {
            let cols = (n - p * NR).min(NR);
            for r in 0..k {
                let src = &w[r * n + p * NR..r * n + p * NR + cols];
                self.panels[(p * k + r) * NR..(p * k + r) * NR + cols].copy_from_slice(src);
            }
        }
        (self.k, self.n) = (k, n);
        self.ops = Some(Operands::of(&w[..k * n]));
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

/// `R` rows x two panels (2 x [`NR`] columns): each LHS value is used twice per load.
#[inline(always)]
fn block2<const R: usize, const FMA: bool>(
    a: &[f32],
    lda: usize,
    k: usize,
    panels: [&[f32]; 2],
    out: &mut [[[f32; NR]; 2]; R],
) {
    let mut acc0 = [[0.0f32; NR]; R];
    let mut acc1 = [[0.0f32; NR]; R];
    let (p0, p1) = (&panels[0][..k * NR], &panels[1][..k * NR]);
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[r * lda..r * lda + k]);
    for kk in 0..k {
        let w0: &[f32; NR] = p0[kk * NR..kk * NR + NR].try_into().expect("panel row");
        let w1: &[f32; NR] = p1[kk * NR..kk * NR + NR].try_into().expect("panel row");
        for r in 0..R {
            let av = rows[r][kk];
            for j in 0..NR {
                acc0[r][j] = if FMA {
                    av.mul_add(w0[j], acc0[r][j])
                } else {
                    acc0[r][j] + av * w0[j]
                };
            }
            for j in 0..NR {
                acc1[r][j] = if FMA {
                    av.mul_add(w1[j], acc1[r][j])
                } else {
                    acc1[r][j] + av * w1[j]
                };
            }
        }
    }
    for r in 0..R {
        out[r] = [acc0[r], acc1[r]];
    }
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
    let np = n.div_ceil(NR);
    let mut put = |i: usize, p: usize, vals: &[f32; NR]| {
        let cols = (n - p * NR).min(NR);
        out[i * n + p * NR..i * n + p * NR + cols].copy_from_slice(&vals[..cols]);
    };
    let mut p = 0;
    // Two panels at a time.
    while p + 2 <= np {
        let panels = [w.panel(p), w.panel(p + 1)];
        let mut i = 0;
        while i + MR <= m {
            let mut res = [[[0.0f32; NR]; 2]; MR];
            block2::<MR, FMA>(&a[i * lda..], lda, k, panels, &mut res);
            for (r, vals) in res.iter().enumerate() {
                put(i + r, p, &vals[0]);
                put(i + r, p + 1, &vals[1]);
            }
            i += MR;
        }
        while i < m {
            let mut res = [[[0.0f32; NR]; 2]; 1];
            block2::<1, FMA>(&a[i * lda..], lda, k, panels, &mut res);
            put(i, p, &res[0][0]);
            put(i, p + 1, &res[0][1]);
            i += 1;
        }
        p += 2;
    }
    // The last panel alone.
    if p < np {
        let panel = w.panel(p);
        let mut i = 0;
        while i + MR <= m {
            let mut res = [[0.0f32; NR]; MR];
            block::<MR, FMA>(&a[i * lda..], lda, k, panel, &mut res);
            for (r, vals) in res.iter().enumerate() {
                put(i + r, p, vals);
            }
            i += MR;
        }
        while i < m {
            let mut res = [[0.0f32; NR]; 1];
            block::<1, FMA>(&a[i * lda..], lda, k, panel, &mut res);
            put(i, p, &res[0]);
            i += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn rows_product_avx512(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
    fma: bool,
) {
    if fma {
        rows_product::<4, true>(a, lda, m, w, out)
    } else {
        rows_product::<4, false>(a, lda, m, w, out)
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
            return unsafe { rows_product_avx512(a, lda, m, w, out, fma) };
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
    let (k, n) = (w.k, w.n);
    assert!(
        lda >= k && (m == 0 || a.len() >= (m - 1) * lda + k),
        "LHS too small"
    );
    assert!(out.len() >= m * n, "output too small");
    let a_ops = if m == 0 {
        Operands::of(&[])
    } else {
        Operands::of(&a[..(m - 1) * lda + k])
    };
    let w_ops = w.ops.unwrap_or_else(|| Operands::of(&w.panels));
    let fma = a_ops.exact_products(w_ops);
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
                !Operands::of(&a).exact_products(packed.ops.unwrap()),
                "{what}: must not fuse"
            );
            let mut out = vec![0.0; m * n];
            tile_product(&a, k, m, &packed, &mut out);
            assert!(same_bits(&out, &reference(&a, k, m, &w2, k, n)), "{what}");
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
        assert!(!ops(f32::INFINITY).exact_products(ops(1.0)));
        assert!(!ops(f32::NAN).exact_products(ops(1.0)));
    }
}
