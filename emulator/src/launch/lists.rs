//! The launcher's lookups over its working lists (kept in `Scratch` from launch to launch): the
//! cores by next event, the target on each (chip, core), and refilling a list in place.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Target;

/// The unfinished cores by next event (ties: lowest index); an entry is stale once its core's
/// event has been set again, and stale entries are dropped as they surface.
pub(super) struct Queue<'a> {
    heap: &'a mut BinaryHeap<Reverse<(u64, usize, u64)>>,
    version: &'a mut Vec<u64>,
}

impl<'a> Queue<'a> {
    /// A queue of `n` cores over the scratch lists `heap` and `version` (emptied here).
    pub(super) fn new(
        heap: &'a mut BinaryHeap<Reverse<(u64, usize, u64)>>,
        version: &'a mut Vec<u64>,
        n: usize,
    ) -> Self {
        heap.clear();
        refill(version, n, 0);
        Queue { heap, version }
    }

    /// Core `i`'s next event is `at` (`done`: it has none).
    pub(super) fn set(&mut self, i: usize, at: u64, done: bool) {
        self.version[i] += 1;
        if !done {
            self.heap.push(Reverse((at, i, self.version[i])));
        }
    }

    fn drop_stale(&mut self) {
        while let Some(&Reverse((_, i, v))) = self.heap.peek() {
            if v == self.version[i] {
                return;
            }
            self.heap.pop();
        }
    }

    /// Takes the earliest core out (until it is set again).
    pub(super) fn pop(&mut self) -> Option<usize> {
        self.drop_stale();
        let Reverse((_, i, _)) = self.heap.pop()?;
        self.version[i] += 1;
        Some(i)
    }

    /// The earliest event of the cores still queued.
    pub(super) fn peek(&mut self) -> Option<u64> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }
}

/// The target running on each (chip, core).
pub(super) struct Lookup<'a> {
    cores: usize,
    index: &'a [u32],
}

impl<'a> Lookup<'a> {
    /// The lookup of `targets`, in the scratch list `index` (refilled here).
    pub(super) fn new(
        index: &'a mut Vec<u32>,
        targets: &[Target],
        chips: usize,
        cores: u32,
    ) -> Self {
        let cores = cores as usize;
        refill(index, chips * cores, u32::MAX);
        for (i, t) in targets.iter().enumerate() {
            index[t.chip as usize * cores + t.core as usize] = i as u32;
        }
        Lookup { cores, index }
    }

    pub(super) fn find(&self, chip: u32, core: u32) -> Option<usize> {
        let k = (chip as usize).checked_mul(self.cores)? + core as usize;
        match self.index.get(k) {
            Some(&i) if i != u32::MAX && (core as usize) < self.cores => Some(i as usize),
            _ => None,
        }
    }
}

/// Empties `v` and fills it with `n` copies of `x` (its capacity is kept).
pub(super) fn refill<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
    v.clear();
    v.resize(n, x);
}
