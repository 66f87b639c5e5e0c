//! The inter-chip interconnect: a 1D/2D/3D mesh or torus of one-way links.
//!
//! Every chip has, per mesh axis, a link in the `+` and one in the `-` direction to its
//! neighbours (wrapping around where the axis is a ring). A message is routed dimension by
//! dimension (axis 0 first), each axis the shorter way round. Links are shared-bandwidth
//! servers: a message needs `bytes / bandwidth` cycles of each link on its path, cut-through (the
//! head moves on one hop latency after it got the link, and no link passes the last byte earlier
//! than the link before it did plus a hop). A link carries one message at a time, but it
//! interleaves them as packets do: a message takes the link's idle cycles from when its head
//! arrives, in as many pieces as the gaps between other messages allow, rather than queueing
//! behind every message booked before it. So concurrent messages share a link's bandwidth,
//! contention shows, and a link is never idle while a message waits for it (a first-come queue
//! leaves gaps behind messages booked into the future at later hops: an all-to-all over 16 chips
//! ran 3x slower than its busiest link allows). Zero-byte messages (remote semaphore signals)
//! stay behind everything already booked on a link, so a signal never overtakes data.
//!
//! A device of several slices has one more axis, the data-centre network (DCN,
//! [`Ici::set_dcn_axis`]): a chip reaches the chip at the same place in any other slice in one
//! hop over its own network interface, a link like the others but with the DCN's bandwidth and
//! latency, shared by everything the chip sends to other slices (the network itself is taken as
//! non-blocking, and a chip's incoming traffic is not modelled separately: in the ring
//! collectives every chip receives what it sends).
//!
//! The launcher tells the links how far every core has got ([`Ici::retire_before`]): booked
//! time before then is forgotten, so the books stay short.

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
    /// `x+`, `y-`, ... (see [`Ici::link_name`] for the DCN).
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
    /// Per axis: link bandwidth and hop latency.
    bytes_per_cycle: Vec<f64>,
    hop_cycles: Vec<u64>,
    /// The DCN axis: one hop to any other slice.
    dcn: Option<usize>,
    links: HashMap<LinkId, LinkBook>,
}

/// A link's booked cycles: disjoint busy intervals, sorted, adjacent ones merged.
#[derive(Clone, Debug, Default)]
struct LinkBook {
    busy: Vec<(u64, u64)>,
    /// End of the latest interval forgotten by [`LinkBook::retire_before`]: nothing may be
    /// booked before it.
    floor: u64,
}

impl LinkBook {
    /// The end of the last booked interval.
    fn last_end(&self) -> u64 {
        self.busy.last().map_or(self.floor, |b| b.1)
    }

    /// Books `amount` idle cycles from `from` on, in as many pieces as the gaps need; returns
    /// the first booked cycle and the end of the last piece.
    fn book(&mut self, from: u64, amount: u64) -> (u64, u64) {
        let from = from.max(self.floor);
        let k = self.busy.partition_point(|&(_, e)| e <= from);
        let tail: Vec<(u64, u64)> = self.busy.drain(k..).collect();
        let mut t = from;
        let mut left = amount;
        let mut first = None;
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        for &(bs, be) in &tail {
            if left == 0 {
                break;
            }
            if t < bs {
                let n = left.min(bs - t);
                first.get_or_insert(t);
                pieces.push((t, t + n));
                left -= n;
                t += n;
            }
            if left > 0 {
                t = t.max(be);
            }
        }
        if left > 0 {
            first.get_or_insert(t);
            pieces.push((t, t + left));
            t += left;
        }
        // Merge the pieces into the (sorted, disjoint) tail.
        let mut all = tail;
        all.extend(pieces);
        all.sort_unstable();
        for iv in all {
            match self.busy.last_mut() {
                Some(last) if last.1 >= iv.0 => last.1 = last.1.max(iv.1),
                _ => self.busy.push(iv),
            }
        }
        (first.unwrap_or(from), t)
    }

    /// Forgets booked time that ends by `t`.
    fn retire_before(&mut self, t: u64) {
        let k = self.busy.partition_point(|&(_, e)| e <= t);
        if k > 0 {
            self.floor = self.floor.max(self.busy[k - 1].1);
            self.busy.drain(..k);
        }
    }
}

impl Ici {
    /// A mesh of `dims` chips (row-major chip numbering, axis 0 fastest... see [`Ici::coords`]),
    /// wrapping where `wrap` says.
    pub fn new(dims: Vec<u32>, wrap: Vec<bool>, bytes_per_cycle: f64, hop_cycles: u64) -> Self {
        let n = dims.len();
        Ici {
            dims,
            wrap,
            bytes_per_cycle: vec![bytes_per_cycle; n],
            hop_cycles: vec![hop_cycles.max(1); n],
            dcn: None,
            links: HashMap::new(),
        }
    }

    /// Makes `axis` the data-centre network joining slices: one hop from a chip to the chip at
    /// the same place in any other slice, over the sender's interface of `bytes_per_cycle`,
    /// taking `hop_cycles`.
    pub fn set_dcn_axis(&mut self, axis: usize, bytes_per_cycle: f64, hop_cycles: u64) {
        self.dcn = Some(axis);
        self.bytes_per_cycle[axis] = bytes_per_cycle;
        self.hop_cycles[axis] = hop_cycles.max(1);
    }

    /// The DCN axis, if the device has several slices.
    pub fn dcn_axis(&self) -> Option<usize> {
        self.dcn
    }

    /// Cycles of the shortest hop (what any cross-chip effect takes at least).
    pub fn hop_cycles(&self) -> u64 {
        self.hop_cycles.iter().copied().min().unwrap_or(1)
    }

    /// `x+`, `y-`, ..., or `dcn` for a chip's data-centre network interface.
    pub fn link_name(&self, link: &LinkId) -> String {
        if Some(link.axis as usize) == self.dcn {
            "dcn".into()
        } else {
            link.name()
        }
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
            if Some(axis) == self.dcn {
                path.push(LinkId {
                    chip: self.chip(&at),
                    axis: axis as u8,
                    plus: true,
                });
                at[axis] = b as u32;
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

    /// No message will be sent before cycle `t` any more: forget what the links booked before it.
    pub fn retire_before(&mut self, t: u64) {
        for book in self.links.values_mut() {
            book.retire_before(t);
        }
    }

    /// Gives the links of every other chip the bookings of chip `rep`'s links: after a launch
    /// simulated on `rep` alone for chips that all did the same (translated), the others'
    /// links are as busy as `rep`'s.
    pub fn copy_links_from(&mut self, rep: u32) {
        let mine: Vec<(LinkId, LinkBook)> = self
            .links
            .iter()
            .filter(|(l, _)| l.chip == rep)
            .map(|(l, b)| (*l, b.clone()))
            .collect();
        let chips: u32 = self.dims.iter().product();
        for chip in (0..chips).filter(|c| *c != rep) {
            for (l, b) in &mine {
                self.links.insert(LinkId { chip, ..*l }, b.clone());
            }
        }
    }

    /// Sends `bytes` from `from` to `to`, starting at cycle `start`.
    pub fn send(&mut self, from: u32, to: u32, start: u64, bytes: u64) -> Delivery {
        let path = self.route(from, to);
        if path.is_empty() {
            return Delivery {
                sent: start,
                arrived: start + 1,
                hops: Vec::new(),
            };
        }
        let mut head = start;
        let mut tail_end = 0;
        let mut last_hop = 0;
        let mut hops = Vec::with_capacity(path.len());
        for link in path {
            let axis = link.axis as usize;
            let ser = (bytes as f64 / self.bytes_per_cycle[axis]).ceil() as u64;
            let hop = self.hop_cycles[axis];
            let book = self.links.entry(link).or_default();
            let (s, e) = if ser == 0 {
                let s = head.max(book.last_end());
                (s, s)
            } else {
                book.book(head, ser)
            };
            // The last byte cannot leave before it has come in over the previous link.
            let end = e.max(tail_end);
            hops.push(Hop {
                link,
                start: s,
                end,
            });
            head = s + hop;
            tail_end = end + hop;
            last_hop = hop;
        }
        let last = hops.last().expect("non-empty path");
        Delivery {
            sent: hops[0].end,
            arrived: last.end + last_hop,
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

    #[test]
    fn a_message_takes_the_idle_cycles_before_later_bookings() {
        let mut ici = Ici::new(vec![4], vec![false], 100.0, 10);
        // 0 -> 2 books link 0+ for [0, 10) and link 1+ for [10, 20).
        let a = ici.send(0, 2, 0, 1000);
        assert_eq!((a.hops[1].start, a.hops[1].end), (10, 20));
        // 1 -> 2 at cycle 0 takes link 1+ while it is idle, before 0 -> 2's bytes come.
        let b = ici.send(1, 2, 0, 1000);
        assert_eq!((b.hops[0].start, b.hops[0].end), (0, 10));
        // A longer one fills the gap that is left and goes on after the booking.
        let c = ici.send(1, 2, 0, 1500);
        assert_eq!((c.hops[0].start, c.hops[0].end), (20, 35));
        // A signal stays behind every byte booked on its link.
        let s = ici.send(1, 2, 0, 0);
        assert_eq!(s.hops[0].start, 35);
        // Forgetting the past changes nothing for later messages.
        ici.retire_before(30);
        let d = ici.send(1, 2, 30, 1000);
        assert_eq!((d.hops[0].start, d.hops[0].end), (35, 45));
    }

    #[test]
    fn a_split_message_leaves_no_earlier_than_it_arrives() {
        let mut ici = Ici::new(vec![4], vec![false], 100.0, 10);
        // Link 0+ is busy for [5, 50): a message 0 -> 2 from 0 gets [0, 5) and [50, 55).
        ici.send(0, 1, 5, 4500);
        let m = ici.send(0, 2, 0, 1000);
        assert_eq!((m.hops[0].start, m.hops[0].end), (0, 55));
        // Link 1+ is idle from 10, but the last byte only comes at 55 + 10.
        assert_eq!((m.hops[1].start, m.hops[1].end), (10, 65));
        assert_eq!(m.arrived, 75);
    }

    #[test]
    fn the_dcn_axis_is_one_hop_over_the_senders_interface() {
        // Two 4-chip rings, 4 slices; DCN at 10 bytes per cycle and 50 cycles per hop.
        let mut ici = Ici::new(vec![4, 4], vec![true, true], 100.0, 10);
        ici.set_dcn_axis(1, 10.0, 50);
        // Slice 0 -> slice 2 (two steps round a ring) is one hop.
        let r = ici.route(1, ici.chip(&[1, 2]));
        assert_eq!(r.len(), 1);
        assert_eq!(ici.link_name(&r[0]), "dcn");
        // ICI first (axis 0), then the DCN hop from the chip reached.
        let r = ici.route(0, ici.chip(&[2, 3]));
        assert_eq!(r.len(), 3);
        assert_eq!(r[2].chip, 2);
        // 1000 bytes take 100 cycles on the DCN, plus its latency.
        let d = ici.send(0, ici.chip(&[0, 1]), 0, 1000);
        assert_eq!((d.sent, d.arrived), (100, 150));
        // Both directions share the sender's interface.
        let e = ici.send(0, ici.chip(&[0, 3]), 0, 1000);
        assert_eq!(e.hops[0].start, 100);
        assert_eq!(ici.hop_cycles(), 10);
    }
}
