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
    /// Offsets of explicit generators, by their seed.
    pub streams: BTreeMap<u64, u64>,
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

    /// Reserves `n` counters of a stream (the default one, or the explicit generator seeded
    /// with `generator`) and returns its seed and the first reserved counter.
    pub fn reserve(&mut self, generator: Option<u64>, n: u64) -> (u64, u64) {
        match generator {
            None => {
                let o = self.offset;
                self.offset = self.offset.wrapping_add(n);
                (self.seed, o)
            }
            Some(seed) => {
                let o = self.streams.entry(seed).or_insert(0);
                let first = *o;
                *o = o.wrapping_add(n);
                (seed, first)
            }
        }
    }
}
