//! The device random generator's state: a seed (the Threefry key) and a counter offset per
//! stream.
//!
//! Random operators draw from a counter-based generator, Threefry-2x32 with 20 rounds (Salmon
//! et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator JAX uses on
//! TPUs). Element `i` of a call that starts at offset `o` encrypts the 64-bit counter `o + i`
//! under the 64-bit key `seed`; the call then advances the offset by its element count. So a
//! value depends only on the seed, the number of elements drawn before it and its position:
//! the same in every execution mode, fused or not, on any host. `manual_seed` resets the
//! default stream; an explicit `torch.Generator` (known by its seed) has its own stream.
//!
//! This module is the state only; the kernels are in `ops::random`.

use std::collections::BTreeMap;

/// PyTorch's default seed (`c10::default_rng_seed_val`), used until `manual_seed`.
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// A runtime's random streams.
#[derive(Clone, Debug)]
pub struct RngState {
    /// The default generator's seed.
    pub seed: u64,
    /// Counters the default generator has used.
    pub offset: u64,
    /// Explicit generators' seeds and offsets, by their key. A key not seen before is a
    /// generator created with that seed (`torch.Generator().manual_seed(key)` in the Rust
    /// API); the PyTorch bridge sets each of its generators' streams itself.
    pub streams: BTreeMap<u64, (u64, u64)>,
}

impl Default for RngState {
    fn default() -> Self {
        RngState {
            seed: DEFAULT_SEED,
            offset: 0,
            streams: BTreeMap::new(),
        }
    }
}

impl RngState {
    /// `torch.manual_seed(seed)`: the default stream restarts at offset 0 under `seed`.
    pub fn manual_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.offset = 0;
    }

    /// The seed and next counter of a stream (`None`: the default one).
    pub fn stream(&self, generator: Option<u64>) -> (u64, u64) {
        match generator {
            None => (self.seed, self.offset),
            Some(key) => self.streams.get(&key).copied().unwrap_or((key, 0)),
        }
    }

    /// Sets a stream's seed and next counter (`set_rng_state`, a generator's `manual_seed`).
    pub fn set_stream(&mut self, generator: Option<u64>, seed: u64, offset: u64) {
        match generator {
            None => {
                self.seed = seed;
                self.offset = offset;
            }
            Some(key) => {
                self.streams.insert(key, (seed, offset));
            }
        }
    }

    /// Forgets an explicit generator's stream (the generator is gone).
    pub fn drop_stream(&mut self, key: u64) {
        self.streams.remove(&key);
    }

    /// Reserves `n` counters of a stream (the default one, or the explicit generator keyed
    /// `generator`) and returns its seed and the first reserved counter.
    pub fn reserve(&mut self, generator: Option<u64>, n: u64) -> (u64, u64) {
        let (seed, first) = self.stream(generator);
        self.set_stream(generator, seed, first.wrapping_add(n));
        (seed, first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_advance_independently_and_restart() {
        let mut s = RngState::default();
        assert_eq!(s.reserve(None, 10), (DEFAULT_SEED, 0));
        assert_eq!(s.reserve(None, 5), (DEFAULT_SEED, 10));
        // An unseen key is a generator seeded with it, at counter 0, apart from the default.
        assert_eq!(s.reserve(Some(9), 3), (9, 0));
        assert_eq!(s.reserve(Some(9), 1), (9, 3));
        assert_eq!(s.stream(None), (DEFAULT_SEED, 15));
        s.set_stream(Some(9), 123, 7);
        assert_eq!(s.reserve(Some(9), 1), (123, 7));
        s.drop_stream(9);
        assert_eq!(s.stream(Some(9)), (9, 0));
        s.manual_seed(4);
        assert_eq!(s.stream(None), (4, 0));
    }
}
