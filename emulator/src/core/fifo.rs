//! A first-in first-out list over one vector, for the hazard lists and command queues that are
//! scanned or touched on every instruction.

/// A first-in first-out list over one vector: pushes at the back, pops at the front by moving
/// a start index (compacted when it has passed half the vector), and iteration over one slice.
/// The hazard lists are scanned for every memory access: one contiguous slice scans fastest.
#[derive(Clone, Debug)]
pub(crate) struct Fifo<T> {
    items: Vec<T>,
    head: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            items: Vec::new(),
            head: 0,
        }
    }
}

impl<T> Fifo<T> {
    #[inline(always)]
    pub fn push_back(&mut self, x: T) {
        self.items.push(x);
    }

    #[inline(always)]
    pub fn front(&self) -> Option<&T> {
        self.items.get(self.head)
    }

    #[inline(always)]
    pub fn front_mut(&mut self) -> Option<&mut T> {
        self.items.get_mut(self.head)
    }

    /// Takes the front out (a copy: the slot is reclaimed with the others).
    #[inline]
    pub fn take_front(&mut self) -> Option<T>
    where
        T: Copy,
    {
        let x = self.front().copied();
        self.pop_front();
        x
    }

    #[inline]
    pub fn pop_front(&mut self) {
        if self.head < self.items.len() {
            self.head += 1;
            if self.head == self.items.len() {
                self.items.clear();
                self.head = 0;
            } else if self.head >= 32 && 2 * self.head >= self.items.len() {
                self.items.drain(..self.head);
                self.head = 0;
            }
        }
    }

    #[inline(always)]
    pub fn as_slice(&self) -> &[T] {
        &self.items[self.head..]
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.items.len() - self.head
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    /// Empties the list (its capacity is kept).
    pub fn clear(&mut self) {
        self.items.clear();
        self.head = 0;
    }

    pub fn retain(&mut self, f: impl FnMut(&T) -> bool) {
        self.items.drain(..self.head);
        self.head = 0;
        self.items.retain(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_pops_compacts_and_retains_like_a_queue() {
        let mut f = Fifo::default();
        let mut model = std::collections::VecDeque::new();
        for i in 0..200u32 {
            f.push_back(i);
            model.push_back(i);
            if i % 3 != 0 {
                f.pop_front();
                model.pop_front();
            }
            if i % 50 == 49 {
                f.retain(|x| x % 2 == 0);
                model.retain(|x| x % 2 == 0);
            }
            assert_eq!(f.len(), model.len());
            assert_eq!(f.front(), model.front());
            assert!(f.iter().eq(model.iter()));
        }
        while !f.is_empty() {
            f.pop_front();
        }
        f.pop_front();
        assert_eq!(f.front(), None);
    }
}
