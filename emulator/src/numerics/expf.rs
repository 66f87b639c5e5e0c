//! `exp` on f32, computing exactly what `libm::expf` computes (the vector unit's definition),
//! without branches, so that a register's 1024 lanes run on the host's SIMD units.
//!
//! `libm` 0.2's `expf` (FreeBSD's `e_expf.c`) chooses between a few paths by the input's
//! magnitude: NaN, overflow, full underflow, a tiny input (`1 + x`), no reduction, or
//! reduction by `k` multiples of ln 2 followed by a polynomial and `scalbnf(y, k)`. Here every
//! lane computes every path with the same operations in the same order and keeps the one its
//! input selects; IEEE operations give the same bits in either form. Tested bit for bit
//! against `libm::expf` (every input pattern was checked once; the test covers a spread of
//! them and every boundary).

// libm's constants, by their bits.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b);
const P1: f32 = f32::from_bits(0x3e2a_aa8f); // 0xaaaa8f.0p-26
const P2: f32 = f32::from_bits(0xbb35_5215); // -0xb55215.0p-32

/// `libm::scalbnf(x, n)` (its generic `scalbn` for f32), without branches.
#[inline(always)]
fn scalbnf(x: f32, n: i32) -> f32 {
    let (p127, m102) = (f32::from_bits(0x7f00_0000), f32::from_bits(0x0c80_0000));
    // First prescale.
    let (big1, small1) = (n > 127, n < -126);
    let x1 = if big1 {
        x * p127
    } else if small1 {
        x * m102
    } else {
        x
    };
    let n1 = if big1 {
        n.wrapping_sub(127)
    } else if small1 {
        n.wrapping_add(102)
    } else {
        n
    };
    // Second prescale.
    let (big2, small2) = (big1 & (n1 > 127), small1 & (n1 < -126));
    let x2 = if big2 {
        x1 * p127
    } else if small2 {
        x1 * m102
    } else {
        x1
    };
    let n2 = if big2 {
        n1.wrapping_sub(127)
    } else if small2 {
        n1.wrapping_add(102)
    } else {
        n1
    };
    let n3 = if big2 & (n2 > 127) {
        127
    } else if small2 & (n2 < -126) {
        -126
    } else {
        n2
    };
    x2 * f32::from_bits((127i32.wrapping_add(n3) as u32) << 23)
}

/// `libm::expf(x)`, bit for bit.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let bits = x.to_bits();
    let negative = (bits >> 31) != 0;
    let hx = bits & 0x7fff_ffff;
    // Argument reduction (|x| > 0.5 ln 2): k = round(x / ln 2), or +-1 up to 1.5 ln 2.
    let reduce = hx > 0x3eb1_7218;
    let half = if negative { -0.5 } else { 0.5 };
    // libm truncates `t` with `as i32`. Where `k_far` is used |t| < 152; elsewhere (Inf, NaN,
    // huge inputs) its value is thrown away, so it is computed from `t` bounded to +-1000 (NaN
    // becomes -1000), which converts without Rust's saturation checks and vectorises.
    // Not `clamp`: that keeps NaN, which would not convert.
    #[allow(clippy::manual_clamp)]
    let t = (INV_LN2 * x + half).max(-1000.0).min(1000.0);
    // SAFETY: `t` is finite and within +-1000, representable in i32.
    let k_far: i32 = unsafe { t.to_int_unchecked() };
    let k_near = if negative { -1 } else { 1 };
    let k = if !reduce {
        0
    } else if hx > 0x3f85_1592 {
        k_far
    } else {
        k_near
    };
    let kf = k as f32;
    let hi_r = x - kf * LN2_HI;
    let lo_r = kf * LN2_LO;
    let (xr, hi, lo) = if reduce {
        (hi_r - lo_r, hi_r, lo_r)
    } else {
        (x, x, 0.0)
    };
    let xx = xr * xr;
    let c = xr - xx * (P1 + xx * P2);
    let y = 1.0 + (xr * c / (2.0 - c) - lo + hi);
    let general = if k == 0 { y } else { scalbnf(y, k) };
    if hx > 0x7f80_0000 {
        x // NaN
    } else if hx >= 0x42b1_7218 && !negative {
        x * f32::from_bits(0x7f00_0000) // overflow
    } else if hx >= 0x42cf_f1b5 && negative {
        0.0 // underflow
    } else if !reduce && hx <= 0x3900_0000 {
        1.0 + x // |x| <= 2^-14
    } else {
        general
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits()
    }

    #[test]
    fn matches_libm_on_a_spread_of_inputs_and_every_boundary() {
        // Every 251st bit pattern (17 million inputs, all exponents and signs).
        let mut bad = Vec::new();
        for i in (0..=u32::MAX).step_by(251) {
            let x = f32::from_bits(i);
            if !same(expf(x), libm::expf(x)) {
                bad.push(i);
            }
        }
        // Each boundary of the paths, and its neighbours.
        for b in [
            0x3eb1_7218u32,
            0x3f85_1592,
            0x3900_0000,
            0x42ae_ac50,
            0x42b1_7218,
            0x42cf_f1b5,
            0x7f80_0000,
            0,
        ] {
            for s in [0, 0x8000_0000] {
                for d in -2i32..=2 {
                    let i = (b as i32).wrapping_add(d) as u32 | s;
                    let x = f32::from_bits(i);
                    if !same(expf(x), libm::expf(x)) {
                        bad.push(i);
                    }
                }
            }
        }
        assert!(
            bad.is_empty(),
            "{} inputs differ, e.g. {:#x?}",
            bad.len(),
            &bad[..bad.len().min(8)]
        );
    }
}
