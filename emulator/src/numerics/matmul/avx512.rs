//! The AVX-512 kernel: `R` rows x `P` panels of 16 columns, one register per (row, panel),
//! written with intrinsics so that the accumulators stay in registers; results are stored
//! straight into the output (masked at a partial last panel).

use super::{NR, PackedWeights};
use std::arch::x86_64::*;

/// Rows per block.
const R: usize = 6;
/// Panels per block: `R x P` accumulators, `P` weight rows and a broadcast LHS value take
/// 29 of the 32 vector registers.
const P: usize = 4;

/// Rows `i0 .. i0 + RR` x panels `p0 .. p0 + PP` of the product into `out`.
// Indexed loops over the const-sized accumulators keep them in registers.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn block<const RR: usize, const PP: usize, const FMA: bool>(
    a: &[f32],
    lda: usize,
    w: &PackedWeights,
    (i0, p0): (usize, usize),
    out: &mut [f32],
) {
    let (k, n) = (w.k, w.n);
    assert!(a.len() >= (i0 + RR - 1) * lda + k && out.len() >= (i0 + RR) * n);
    assert!(p0 + PP <= n.div_ceil(NR) && w.panels.len() >= (p0 + PP) * k * NR);
    let masks: [__mmask16; PP] = std::array::from_fn(|q| {
        let cols = (n - (p0 + q) * NR).min(NR);
        ((1u32 << cols) - 1) as __mmask16
    });
    // SAFETY: the asserts above bound every access: LHS rows `i0 .. i0 + RR` up to `k`,
    // panels `p0 .. p0 + PP` of `k` rows, output rows `i0 .. i0 + RR` of `n` values with
    // the columns past `n` masked off. The CPU has AVX-512F (and FMA when `FMA`): the
    // caller is compiled for and only runs on such CPUs.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); PP]; RR];
        // One pointer per row, so that the row values load at a fixed offset from `kk`.
        let ap: [*const f32; RR] = std::array::from_fn(|r| a.as_ptr().add((i0 + r) * lda));
        let wp: [*const f32; PP] =
            std::array::from_fn(|q| w.panels.as_ptr().add((p0 + q) * k * NR));
        for kk in 0..k {
            let wv: [__m512; PP] = std::array::from_fn(|q| _mm512_loadu_ps(wp[q].add(kk * NR)));
            for r in 0..RR {
                let av = _mm512_set1_ps(*ap[r].add(kk));
                for q in 0..PP {
                    acc[r][q] = if FMA {
                        _mm512_fmadd_ps(av, wv[q], acc[r][q])
                    } else {
                        _mm512_add_ps(acc[r][q], _mm512_mul_ps(av, wv[q]))
                    };
                }
            }
        }
        let op = out.as_mut_ptr();
        for r in 0..RR {
            for q in 0..PP {
                let at = op.add((i0 + r) * n + (p0 + q) * NR);
                _mm512_mask_storeu_ps(at, masks[q], acc[r][q]);
            }
        }
    }
}

/// Rows `[0, m)` x panels `p0 .. p0 + PP`: blocks of `R` rows, then the rest in one block.
#[inline(always)]
fn panels<const PP: usize, const FMA: bool>(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    p0: usize,
    out: &mut [f32],
) {
    let mut i = 0;
    while i + R <= m {
        block::<R, PP, FMA>(a, lda, w, (i, p0), out);
        i += R;
    }
    match m - i {
        0 => {}
        1 => block::<1, PP, FMA>(a, lda, w, (i, p0), out),
        2 => block::<2, PP, FMA>(a, lda, w, (i, p0), out),
        3 => block::<3, PP, FMA>(a, lda, w, (i, p0), out),
        4 => block::<4, PP, FMA>(a, lda, w, (i, p0), out),
        _ => {
            for i in i..m {
                block::<1, PP, FMA>(a, lda, w, (i, p0), out);
            }
        }
    }
}

#[inline(always)]
fn rows<const FMA: bool>(a: &[f32], lda: usize, m: usize, w: &PackedWeights, out: &mut [f32]) {
    let np = w.n.div_ceil(NR);
    let mut p0 = 0;
    while p0 + P <= np {
        panels::<P, FMA>(a, lda, m, w, p0, out);
        p0 += P;
    }
    for p in p0..np {
        panels::<1, FMA>(a, lda, m, w, p, out);
    }
}

/// Rows `[0, m)` of the product into `out`; `fma` when every product is exact.
#[target_feature(enable = "avx512f,fma")]
pub(super) fn rows_product(
    a: &[f32],
    lda: usize,
    m: usize,
    w: &PackedWeights,
    out: &mut [f32],
    fma: bool,
) {
    if fma {
        rows::<true>(a, lda, m, w, out)
    } else {
        rows::<false>(a, lda, m, w, out)
    }
}
