//! Deterministic test inputs shared by the test modules (one definition instead of a copy per
//! module).

/// `n` values spread over `[-w, w]` in steps of 1/1000 (`w` = 1 or 2), by a multiplicative hash
/// of the index mixed with `seed`: the same on every machine, no generator state.
pub fn hashed(n: usize, seed: u32, w: u32) -> Vec<f32> {
    let span = 2000 * w + 1;
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % span) as f32 / 1000.0 - w as f32)
        .collect()
}

/// `n` values in `[-2, 2)` from a linear congruential generator started at `state`: 24-bit
/// fractions, so exact in f32 and f64 alike.
pub fn lcg(n: usize, mut state: u32) -> Vec<f64> {
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((state >> 8) as f64 / (1u32 << 24) as f64) * 4.0 - 2.0
        })
        .collect()
}
