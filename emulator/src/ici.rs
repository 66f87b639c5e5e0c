//! The inter-chip interconnect: a 1D/2D/3D mesh or torus of one-way links.
//!
//! Every chip has, per mesh axis, a link in the `+` and one in the `-` direction to its
//! neighbours (wrapping around where the axis is a ring). A message is routed dimension by
//! dimension (axis 0 first), each axis the shorter way round. Links are shared-bandwidth FIFO
//! servers: a message holds each link on its path for `bytes / bandwidth` cycles, cut-through:
//! the head moves on one hop latency after it got the link. So concurrent messages over a link
//! queue behind each other and contention shows.

use std::collections::HashMap;

/// A one-way link: from `chip`, along `axis`, in the `+` (true) or `-` direction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct LinkId {
    /// Sending chip.
    pub chip: u32,
    /// Mesh axis.
    pub axis: u8,
    /// Towards higher coordinates.
    pub plus: bool,
}

impl LinkId {
    /// `x+`, `y-`, ...
    pub fn name(&self) -> String {
        format!(
            "{}{}",
            ["x", "y", "z"].get(self.axis as usize).unwrap_or(&"?"),
            if self.plus { "+" } else { "-" }
        )
    }
}

/// One hop of a message: the link and when the message held it.
#[derive(Clone, Copy, Debug)]
pub struct Hop {
    /// Link.
    pub link: LinkId,
    /// First cycle the link carries the message.
    pub start: u64,
    /// Cycle the message has fully left over the link.
    pub end: u64,
}

/// When a message finished leaving its sender and when it fully arrived.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The sender's engine may reuse the source from this cycle.
    pub sent: u64,
    /// The last byte has arrived at the receiver.
    pub arrived: u64,
    /// The links used.
    pub hops: Vec<Hop>,
}

/// The mesh and its links' occupancy.
#[derive(Clone, Debug)]
pub struct Ici {
    dims: Vec<u32>,
    wrap: Vec<bool>,
    bytes_per_cycle: f64,
    hop_cycles: u64,
    link_free: HashMap<LinkId, u64>,
}

impl Ici {
    /// A mesh of `dims` chips (row-major chip numbering, axis 0 fastest... see [`Ici::coords`]),
    /// wrapping where `wrap` says.
    pub fn new(dims: Vec<u32>, wrap: Vec<bool>, bytes_per_cycle: f64, hop_cycles: u64) -> Self {
        Ici {
            dims,
            wrap,
            bytes_per_cycle,
            hop_cycles: hop_cycles.max(1),
            link_free: HashMap::new(),
        }
    }

    /// Cycles per hop.
    pub fn hop_cycles(&self) -> u64 {
        self.hop_cycles
    }

    /// Coordinates of a chip: chip `c` has `c = x + dimx * (y + dimy * z)`.
    pub fn coords(&self, chip: u32) -> Vec<u32> {
        let mut rest = chip;
        self.dims
            .iter()
            .map(|d| {
                let c = rest % d;
                rest /= d;
                c
            })
            .collect()
    }

    /// The chip at `coords`.
    pub fn chip(&self, coords: &[u32]) -> u32 {
        coords
            .iter()
            .zip(&self.dims)
            .rev()
            .fold(0, |acc, (c, d)| acc * d + c)
    }

    /// The links from `from` to `to`, dimension by dimension, each the shorter way round
    /// (ties go `+`).
    pub fn route(&self, from: u32, to: u32) -> Vec<LinkId> {
        let mut at = self.coords(from);
        let target = self.coords(to);
        let mut path = Vec::new();
        for axis in 0..self.dims.len() {
            let n = self.dims[axis] as i64;
            let (a, b) = (at[axis] as i64, target[axis] as i64);
            if a == b {
                continue;
            }
            let fwd = (b - a).rem_euclid(n);
            let plus = if self.wrap[axis] {
                fwd <= n - fwd
            } else {
                b > a
            };
            let steps = if self.wrap[axis] {
                if plus { fwd } else { n - fwd }
            } else {
                (b - a).abs()
            };
            for _ in 0..steps {
                path.push(LinkId {
                    chip: self.chip(&at),
                    axis: axis as u8,
                    plus,
                });
                let next = if plus {
                    (at[axis] as i64 + 1).rem_euclid(n)
                } else {
                    (at[axis] as i64 - 1).rem_euclid(n)
                };
                at[axis] = next as u32;
            }
        }
        path
    }

    /// Sends `bytes` from `from` to `to`, starting at cycle `start`.
    pub fn send(&mut self, from: u32, to: u32, start: u64, bytes: u64) -> Delivery {
        let path = self.route(from, to);
        let ser = (bytes as f64 / self.bytes_per_cycle).ceil() as u64;
        if path.is_empty() {
            return Delivery {
                sent: start,
                arrived: start + 1,
                hops: Vec::new(),
            };
        }
        let mut head = start;
        let mut hops = Vec::with_capacity(path.len());
        for link in path {
            let free = self.link_free.entry(link).or_insert(0);
            let s = head.max(*free);
            *free = s + ser;
            hops.push(Hop {
                link,
                start: s,
                end: s + ser,
            });
            head = s + self.hop_cycles;
        }
        let last = hops.last().expect("non-empty path");
        Delivery {
            sent: hops[0].end,
            arrived: last.end + self.hop_cycles,
            hops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_dimension_order_shortest_way() {
        let ici = Ici::new(vec![4, 4], vec![true, true], 30.0, 1000);
        assert_eq!(ici.coords(6), vec![2, 1]);
        assert_eq!(ici.chip(&[2, 1]), 6);
        // (0,0) -> (3,2): x goes - once (wrap), then y + twice.
        let r = ici.route(0, ici.chip(&[3, 2]));
        assert_eq!(r.len(), 3);
        assert!(!r[0].plus && r[0].axis == 0);
        assert!(r[1].plus && r[1].axis == 1 && r[2].axis == 1);
        // Without wraparound the long way is the only way.
        let mesh = Ici::new(vec![4], vec![false], 30.0, 1000);
        assert_eq!(mesh.route(0, 3).len(), 3);
    }

    #[test]
    fn links_are_shared() {
        let mut ici = Ici::new(vec![4], vec![false], 100.0, 10);
        let a = ici.send(0, 1, 0, 1000);
        assert_eq!((a.sent, a.arrived), (10, 20));
        // A second message over the same link queues behind the first.
        let b = ici.send(0, 2, 0, 1000);
        assert_eq!(b.hops[0].start, 10);
        assert_eq!(b.arrived, 10 + 10 + 10 + 10);
    }
}
