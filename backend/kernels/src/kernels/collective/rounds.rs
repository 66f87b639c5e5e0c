//! Planning the ring rounds (see [`super::plan`] for the data they work on): splitting the
//! shards into parts, one per ICI axis, each walking the axes in its own order, and laying out
//! each round's blocks, rows, chains and messages.
//!
//! A part reduce-scatters over its axes in order, each round on the previous one's result, and
//! all-gathers over them in reverse. The data of a part is a tensor `[n0, n1, .., s]` (the
//! part's `s` elements of every rank's shard); a round over axis `a` works on the sub-tensor
//! where the axes already done are at this chip's coordinates: its blocks are indexed by the
//! coordinate on `a`, and each block is rows (one per index of the axes still to do) of `s`
//! elements, contiguous. A message never crosses a row: every DMA is one contiguous run.

use super::CollectiveOp;
use super::plan::{
    Chain, MAX_PARTS, MIN_PART_ELEMS, Msg, Part, Plan, RECV_SEMS, Region, RingKind, RingStage,
    Slot, Stage,
};
use super::shares::{balanced_shares, turns};

/// Chain reach per piece: how many hops each chain carries each half of a row.
fn reaches(n: u32, bidir: bool) -> Vec<(bool, [u32; 2])> {
    if !bidir {
        return vec![(true, [n - 1, 0])];
    }
    if n % 2 == 1 {
        let r = (n - 1) / 2;
        vec![(true, [r, r]), (false, [r, r])]
    } else {
        let h = n / 2;
        vec![(true, [h, h - 1]), (false, [h - 1, h])]
    }
}

/// Where an array of the collective lives: a buffer, a base offset, the byte stride of each
/// spec axis it is laid out along (`None`: not an axis of this array), and the byte offset of
/// the part's first element in a row.
#[derive(Clone, Debug)]
struct Layout {
    slot: Slot,
    off: u64,
    strides: Vec<Option<u64>>,
    col0: u64,
}

impl Layout {
    /// The whole array, `[n0, n1, .., shard]` with the first axis outermost.
    fn full(slot: Slot, p: &Plan, shard_bytes: u64, col0: u64) -> Self {
        let strides = (0..p.axes.len())
            .map(|pos| {
                let inner: u64 = p.axes[pos + 1..].iter().map(|a| a.n as u64).product();
                Some(shard_bytes * inner)
            })
            .collect();
        Layout {
            slot,
            off: 0,
            strides,
            col0,
        }
    }

    /// One row: the part's elements of a shard.
    fn row(slot: Slot, p: &Plan, col0: u64) -> Self {
        Layout {
            slot,
            off: 0,
            strides: vec![None; p.axes.len()],
            col0,
        }
    }

    /// An array over the `free` axes only (row-major, positions ascending) of `row` bytes rows.
    fn compact(slot: Slot, off: u64, p: &Plan, free: &[usize], row: u64) -> Self {
        let mut strides = vec![None; p.axes.len()];
        let mut st = row;
        let mut sorted = free.to_vec();
        sorted.sort_unstable();
        for &f in sorted.iter().rev() {
            strides[f] = Some(st);
            st *= p.axes[f].n as u64;
        }
        Layout {
            slot,
            off,
            strides,
            col0: 0,
        }
    }

    fn stride(&self, pos: usize) -> u64 {
        self.strides[pos].unwrap_or_else(|| bug("a ring over an axis the array lacks"))
    }

    /// The region where every axis of the array but the `free` ones and `block` is at this
    /// chip's coordinate, and the byte offsets of its rows over the `free` axes (row-major,
    /// positions ascending).
    fn view(&self, p: &Plan, free: &[usize], block: Option<usize>) -> (Region, Vec<u64>) {
        let mut r = Region::at(self.slot, self.off + self.col0);
        for (pos, st) in self.strides.iter().enumerate() {
            if let Some(st) = st
                && !free.contains(&pos)
                && Some(pos) != block
            {
                r.terms.push((pos, *st));
            }
        }
        let mut sorted = free.to_vec();
        sorted.sort_unstable();
        let mut rows = vec![0u64];
        for &f in &sorted {
            let st = self.stride(f);
            let n = p.axes[f].n as u64;
            rows = rows
                .iter()
                .flat_map(|&base| (0..n).map(move |i| base + i * st))
                .collect();
        }
        (r, rows)
    }
}

#[cold]
fn bug(what: &str) -> ! {
    panic!("collective plan is inconsistent: {what}")
}

/// What a ring round is built from.
struct RoundSpec {
    kind: RingKind,
    part: usize,
    /// The round's index among its part's rounds.
    index: usize,
    pos: usize,
    bstride: u64,
    src: Region,
    own: Region,
    /// Per row: offset from the block's start, from the own region's base.
    rows: Vec<(u64, u64)>,
    row_elems: u64,
    own_from_input: bool,
}

/// The messages that carry piece `h` (`(offset, elements)` of a row) of every row, in chunks
/// of at most `chunk` elements, row by row: step 0, no shift, no reduction, `cum` 0 (the caller
/// sets what its messages need).
fn piece_msgs(
    h: usize,
    (poff, elems): (u64, u64),
    rows: &[(u64, u64)],
    chunk: u64,
    esz: u64,
) -> impl Iterator<Item = Msg> + '_ {
    rows.iter()
        .enumerate()
        .flat_map(move |(ri, &(roff, rown))| {
            (0..elems.div_ceil(chunk)).map(move |j| {
                let e = chunk.min(elems - j * chunk);
                let col = (poff + j * chunk) * esz;
                Msg {
                    step: 0,
                    piece: h,
                    row: ri as u32,
                    chunk: j as u32,
                    off: roff + col,
                    own: rown + col,
                    elems: e,
                    bytes: e * esz,
                    shift: 0,
                    reduce: false,
                    cum: 0,
                }
            })
        })
}

/// Builds the chains and final tasks of a round, taking receive semaphores from `sem` and
/// reduce-scatter arrival space from `recv`.
fn ring(p: &Plan, r: RoundSpec, recv: &mut u64, sem: &mut u8) -> RingStage {
    let ax = p.axes[r.pos];
    let n = ax.n;
    let esz = p.esz;
    let s = r.row_elems;
    let pieces = if ax.bidir {
        [(0, s / 2), (s / 2, s - s / 2)]
    } else {
        [(0, s), (s, 0)]
    };
    let chunk = p.chunk_elems(r.rows.len() as u64 * s * esz);
    let scatter = r.kind == RingKind::ReduceScatter;
    let mut chains = Vec::new();
    for (ci, (plus, reach)) in reaches(n, ax.bidir).into_iter().enumerate() {
        let steps = reach[0].max(reach[1]);
        let mut msgs = Vec::new();
        let mut cum = 0;
        for k in 0..steps {
            // All-gather: step k delivers blocks k+1 hops from their owner. Reduce-scatter: the
            // sender is d = steps - k hops from the block's owner.
            let (d, rel) = if scatter {
                (steps - k, (steps - k) as i64)
            } else {
                (k + 1, -(k as i64))
            };
            let shift = if plus { rel } else { -rel };
            for (h, &piece) in pieces.iter().enumerate() {
                if piece.1 == 0 || reach[h] < d {
                    continue;
                }
                for m in piece_msgs(h, piece, &r.rows, chunk, esz) {
                    msgs.push(Msg {
                        step: k,
                        shift: shift.rem_euclid(n as i64),
                        reduce: scatter && reach[h] > d,
                        cum,
                        ..m
                    });
                    cum += m.bytes;
                }
            }
        }
        let index = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| ((m.step, m.piece, m.row, m.chunk), i))
            .collect();
        chains.push(Chain {
            plus,
            msgs,
            bytes: cum,
            recv_base: *recv,
            recv_sem: *sem,
            sent_sem: super::emit::sem_sent(r.part, r.index % 2, ci),
            index,
        });
        *sem += 1;
        if scatter {
            *recv += cum;
        }
    }
    let mut finals = Vec::new();
    if scatter {
        for (h, &piece) in pieces.iter().enumerate() {
            finals.extend(
                piece_msgs(h, piece, &r.rows, chunk, esz).map(|m| Msg { reduce: true, ..m }),
            );
        }
    }
    RingStage {
        kind: r.kind,
        part: r.part,
        pos: r.pos,
        n,
        bstride: r.bstride,
        rows: r.rows,
        row_elems: s,
        chunk_elems: chunk,
        chains,
        finals,
        src: r.src,
        own: r.own,
        own_from_input: r.own_from_input,
        copy_sem: super::emit::sem_copy(r.part),
    }
}

/// Splits the shards into parts, one per ICI axis of the spec (at most [`MAX_PARTS`], fewer
/// when the shards are small or the semaphores would not do), and orders each part's axes: the
/// ICI axes rotated so that every part starts on a different one, then the DCN axes. The parts'
/// shares keep the links busy ([`balanced_shares`]); where a part would be too small, each
/// part's share is proportional to the bandwidth of the axis it starts on. Two or three parts over
/// unlike axes take turns on each axis instead, in the orders and shares of [`turns`] (the
/// `bool`: the rounds take turns).
fn split(p: &Plan, op: CollectiveOp, shard: u64) -> (Vec<Part>, bool) {
    let live: Vec<usize> = (0..p.axes.len()).filter(|&i| p.axes[i].n > 1).collect();
    let ici: Vec<usize> = live.iter().copied().filter(|&i| !p.axes[i].dcn).collect();
    let dcn: Vec<usize> = live.iter().copied().filter(|&i| p.axes[i].dcn).collect();
    let per_pass: usize = live
        .iter()
        .map(|&i| if p.axes[i].bidir { 2 } else { 1 })
        .sum();
    let sems = per_pass * if op == CollectiveOp::AllReduce { 2 } else { 1 };
    let mut k = ici.len().clamp(1, MAX_PARTS);
    while k > 1 && (shard / (k as u64) < MIN_PART_ELEMS || k * sems > RECV_SEMS) {
        k -= 1;
    }
    let orders: Vec<Vec<usize>> = (0..k)
        .map(|i| {
            let mut order: Vec<usize> = ici[i.min(ici.len())..].to_vec();
            order.extend(&ici[..i.min(ici.len())]);
            order.extend(&dcn);
            order
        })
        .collect();
    if let Some((o, sizes)) = turns(p, op, &ici, &orders, shard) {
        return (parts(o, sizes), true);
    }
    let sizes = balanced_shares(p, &ici, &orders, shard).unwrap_or_else(|| {
        let weight = |i: usize| match ici.get(i) {
            Some(&a) if p.axes[a].bidir => 2,
            _ => 1,
        };
        let total: u64 = (0..k).map(weight).sum();
        let mut sizes: Vec<u64> = (0..k).map(|i| shard * weight(i) / total).collect();
        sizes[k - 1] = shard - sizes[..k - 1].iter().sum::<u64>();
        sizes
    });
    (parts(orders, sizes), false)
}

/// Parts of `sizes` elements, one after another, walking the axes in `orders`.
fn parts(orders: Vec<Vec<usize>>, sizes: Vec<u64>) -> Vec<Part> {
    let mut c0 = 0;
    orders
        .into_iter()
        .zip(sizes)
        .map(|(order, s)| {
            let part = Part { c0, s, order };
            c0 += s;
            part
        })
        .collect()
}

/// Plans the ring rounds of every part: reduce-scatter over the part's axes in its order (each
/// round on the previous one's result), then (all-reduce, all-gather) all-gather in reverse,
/// in place in the output.
pub fn plan_rings(p: &mut Plan, op: CollectiveOp, shard: u64) {
    let esz = p.esz;
    let sb = shard * esz;
    (p.parts, p.take_turns) = split(p, op, shard);
    let mut rounds = Vec::new();
    let mut sem = 0u8;
    // Plain reduce-scatter: intermediate results first in scratch, then every chain's arrivals.
    let mut scratch = 0u64;
    let mut inter: Vec<Vec<u64>> = Vec::new();
    for part in &p.parts {
        let m = part.order.len();
        let mut at = Vec::new();
        for t in 0..m.saturating_sub(1) {
            at.push(scratch);
            if op == CollectiveOp::ReduceScatter {
                let rows: u64 = part.order[t + 1..]
                    .iter()
                    .map(|&a| p.axes[a].n as u64)
                    .product();
                scratch += rows * part.s * esz;
            }
        }
        inter.push(at);
    }
    let mut recv = scratch;
    for (pi, part) in p.parts.clone().iter().enumerate() {
        let o = &part.order;
        let m = o.len();
        let col0 = part.c0 * esz;
        let full_out = Layout::full(Slot::Out, p, sb, col0);
        if op.reduces() {
            let mut src = Layout::full(Slot::In, p, sb, col0);
            for t in 0..m {
                let a = o[t];
                let free = &o[t + 1..];
                let dst = if op == CollectiveOp::AllReduce {
                    full_out.clone()
                } else if t + 1 == m {
                    Layout::row(Slot::Out, p, col0)
                } else {
                    Layout::compact(Slot::Scratch, inter[pi][t], p, free, part.s * esz)
                };
                let (src_r, src_rows) = src.view(p, free, Some(a));
                let (own_r, own_rows) = dst.view(p, free, None);
                let spec = RoundSpec {
                    kind: RingKind::ReduceScatter,
                    part: pi,
                    index: t,
                    pos: a,
                    bstride: src.stride(a),
                    src: src_r,
                    own: own_r,
                    rows: src_rows.into_iter().zip(own_rows).collect(),
                    row_elems: part.s,
                    own_from_input: false,
                };
                rounds.push(ring(p, spec, &mut recv, &mut sem));
                src = dst;
            }
        }
        if op != CollectiveOp::ReduceScatter {
            let rev: Vec<usize> = o.iter().rev().copied().collect();
            for t in 0..m {
                let a = rev[t];
                let free = &rev[..t];
                let (src_r, src_rows) = full_out.view(p, free, Some(a));
                let from_input = t == 0 && op == CollectiveOp::AllGather;
                let (own_r, own_rows) = if from_input {
                    Layout::row(Slot::In, p, col0).view(p, &[], None)
                } else {
                    full_out.view(p, free, None)
                };
                let spec = RoundSpec {
                    kind: RingKind::AllGather,
                    part: pi,
                    index: t + if op.reduces() { m } else { 0 },
                    pos: a,
                    bstride: full_out.stride(a),
                    src: src_r,
                    own: own_r,
                    rows: src_rows.into_iter().zip(own_rows).collect(),
                    row_elems: part.s,
                    own_from_input: from_input,
                };
                rounds.push(ring(p, spec, &mut recv, &mut sem));
            }
        }
    }
    p.scratch_bytes = recv;
    p.stages.push(Stage::Rings(rounds));
}
