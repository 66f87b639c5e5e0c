//! The matrix unit's tile product, fast and in a defined order.
//!
//! `out[i][j] = sum over k of a[i][k] * w[k][j]`, where the sum for each output element runs
//! sequentially over `k = 0, 1, ..` starting from +0.0, each product rounded to f32 and then
//! added (no fused multiply-add). That is the order in which partial sums flow down the columns
//! of a weight-stationary systolic array. Products of bf16 values are exact in f32, so for bf16
//! inputs only the additions round.
//!
//! Speed: weights are packed into column panels of [`NR`] values; a register-blocked kernel
//! computes [`MR`] rows x [`NR`] columns at a time, vectorised across columns (which does not
//! change any element's summation order). On x86-64 hosts with AVX2 the same kernel is compiled
//! a second time for AVX2 and chosen at run time; both give identical bits. Large products are
//! split by rows over threads, which cannot change bits either.

use rayon::prelude::*;

/// Columns per packed panel.
pub const NR: usize = 16;
/// Rows per register block.
pub const MR: usize = 4;

/// A weight tile of `k` rows and `n` columns, packed into zero-padded column panels.
#[derive(Clone, Debug, Default)]
pub struct PackedWeights {
    k: usize,
    n: usize,
    /// Panel `p` holds `k` rows of `NR` values: columns `p*NR .. p*NR + NR`.
    panels: Vec<f32>,
}

impl PackedWeights {
    /// Packs a row-major `k x n` tile.
    pub fn pack(w: &[f32], k: usize, n: usize) -> Self {
        assert!(w.len() >= k * n, "weight tile smaller than k x n");
        let np = n.div_ceil(NR);
        let mut panels = vec![0.0f32; np * k * NR];
        for p in 0..np {
            let cols = (n - p * NR).min(NR);
            for r in 0..k {
                let src = &w[r * n + p * NR..r * n + p * NR + cols];
                panels[(p * k + r) * NR..(p * k + r) * NR + cols].copy_from_slice(src);
            }
        }
        PackedWeights { k, n, panels }
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

#[inline(always)]
fn block<const R: usize>(rows: [&[f32]; R], k: usize, panel: &[f32], out: &mut [[f32; NR]; R]) {
    let mut acc = [[0.0f32; NR]; R];
    let panel = &panel[..k * NR];
    for kk in 0..k {
        let w: &[f32; NR] = panel[kk * NR..kk * NR + NR].try_into().expect("panel row");
        for r in 0..R {
            let av = rows[r][kk];
            for j in 0..NR {
                acc[r][j] += av * w[j];
            }
        }
    }
    *out = acc;
}

/// Computes rows `[r0, r0 + m)` of the product into `out` (row stride `n`).
#[inline(always)]
fn rows_product(a: &[f32], lda: usize, m: usize, w: &PackedWeights, out: &mut [f32]) {
    let (k, n) = (w.k, w.n);
    let np = n.div_ceil(NR);
    let row = |i: usize| &a[i * lda..i * lda + k];
    let mut i = 0;
    while i < m {
        let take = (m - i).min(MR);
        for p in 0..np {
            let panel = w.panel(p);
            let cols = (n - p * NR).min(NR);
            if take == MR {
                let mut res = [[0.0f32; NR]; MR];
                block::<MR>(
                    [row(i), row(i + 1), row(i + 2), row(i + 3)],
                    k,
                    panel,
                    &mut res,
                );
                for (r, vals) in res.iter().enumerate() {
                    out[(i + r) * n + p * NR..(i + r) * n + p * NR + cols]
                        .copy_from_slice(&vals[..cols]);
                }
            } else {
                for r in 0..take {
                    let mut res = [[0.0f32; NR]; 1];
                    block::<1>([row(i + r)], k, panel, &mut res);
                    out[(i + r) * n + p * NR..(i + r) * n + p * NR + cols]
                        .copy_from_slice(&res[0][..cols]);
                }
            }
        }
        i += take;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn rows_product_avx2(a: &[f32], lda: usize, m: usize, w: &PackedWeights, out: &mut [f32]) {
    rows_product(a, lda, m, w, out)
}

fn rows_product_best(a: &[f32], lda: usize, m: usize, w: &PackedWeights, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, the only feature the function was compiled for.
            return unsafe { rows_product_avx2(a, lda, m, w, out) };
        }
    }
    rows_product(a, lda, m, w, out)
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
    if m * k * n < PARALLEL_MACS || m < 2 * MR {
        rows_product_best(a, lda, m, w, &mut out[..m * n]);
        return;
    }
    let chunk = (m / rayon::current_num_threads().max(1) / 4).clamp(MR * 4, 512) / MR * MR;
    out[..m * n]
        .par_chunks_mut(chunk * n)
        .enumerate()
        .for_each(|(c, o)| {
            let r0 = c * chunk;
            let rows = o.len() / n;
            rows_product_best(&a[r0 * lda..], lda, rows, w, o);
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

    #[test]
    fn matches_sequential_reference_bit_for_bit() {
        for (m, k, n) in [
            (1, 1, 1),
            (5, 7, 3),
            (9, 128, 128),
            (33, 100, 17),
            (64, 128, 40),
        ] {
            let lda = k + 3;
            let a = data(m * lda, 1);
            let w = data(k * n, 2);
            let mut out = vec![0.0; m * n];
            tile_product(&a, lda, m, &PackedWeights::pack(&w, k, n), &mut out);
            let want = reference(&a, lda, m, &w, k, n);
            assert!(
                out.iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
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
        assert_eq!(par, reference(&a, k, m, &w, k, n));
    }
}
