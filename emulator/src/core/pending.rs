//! A core's lists of asynchronous work still in flight (matrix-unit writes and reads, DMAs),
//! each with the bounds of the ranges it holds, so that a hazard or race check outside them
//! skips the whole list.

use super::fifo::Fifo;
use super::range::{Hull, Range};

/// An entry of a list: when it stops mattering, and the ranges it holds.
pub(crate) trait Entry {
    /// The cycle from which the entry no longer matters.
    fn ends(&self) -> u64;
    /// The range every check looks at.
    fn main(&self) -> &Range;
    /// A second range some checks look at (a DMA's source).
    fn second(&self) -> Option<&Range> {
        None
    }
}

/// A range busy until a cycle (a matrix unit's pending write or read).
impl Entry for (Range, u64) {
    fn ends(&self) -> u64 {
        self.1
    }

    fn main(&self) -> &Range {
        &self.0
    }
}

/// Entries in arrival order (roughly their order of ending) and the bounds of their ranges.
/// The bounds cover every entry pushed since the list was last empty or swept (wider than what
/// is still live, never narrower).
#[derive(Clone, Debug)]
pub(crate) struct Pending<T> {
    items: Fifo<T>,
    /// Bounds of the entries' main ranges.
    pub main: Hull,
    /// Bounds of the entries' second ranges.
    pub second: Hull,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            items: Fifo::default(),
            main: Hull::default(),
            second: Hull::default(),
        }
    }
}

impl<T: Entry> Pending<T> {
    pub fn push(&mut self, x: T) {
        self.main.add(x.main());
        if let Some(r) = x.second() {
            self.second.add(r);
        }
        self.items.push_back(x);
    }

    /// Drops the entries at the front that ended by `now`; returns whether any went.
    pub fn expire(&mut self, now: u64) -> bool {
        let before = self.items.len();
        while self.items.front().is_some_and(|x| x.ends() <= now) {
            self.items.pop_front();
        }
        if self.items.is_empty() {
            self.main = Hull::default();
            self.second = Hull::default();
        }
        self.items.len() != before
    }

    /// Empties the list (its capacity is kept).
    pub fn clear(&mut self) {
        self.items.clear();
        self.main = Hull::default();
        self.second = Hull::default();
    }

    /// Drops every entry that ended by `now` and bounds what is left.
    pub fn sweep(&mut self, now: u64) {
        self.items.retain(|x| x.ends() > now);
        self.rebound();
    }

    /// Recomputes the bounds from the entries held.
    pub fn rebound(&mut self) {
        self.main = Hull::of(self.items.iter().map(Entry::main));
        self.second = Hull::of(self.items.iter().filter_map(Entry::second));
    }

    /// When the entry at the front ends.
    pub fn front_end(&self) -> Option<u64> {
        self.items.front().map(Entry::ends)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }
}
