//! How the parts split the shard, and in which orders they walk the axes (see [`super::rounds`]
//! for the parts and rounds): the shares that keep every axis's links busy.
//!
//! - **Two or three parts on axes of different sizes or bandwidths** ([`turns`]): the parts take
//!   turns on each axis (a round waits until the axis's round before it has sent everything; the
//!   program generator places the messages so, [`super::ring`]), and the orders and shares are
//!   those of the shortest such schedule. The bounds alone do not do here: parts of unequal
//!   shares meeting on the same axis wait for each other.
//! - **Otherwise, two parts** ([`balanced_shares`]): shares that minimise the larger of two
//!   bounds, the busiest axis's bytes and the longest part's rounds one after another.

use super::CollectiveOp;
use super::plan::{MIN_PART_ELEMS, Plan};

/// Steps of the share grid [`balanced_shares`] searches (shares are multiples of `1/SHARE_GRID`).
const SHARE_GRID: u32 = 960;

/// Shares of the shard (elements per part, summing to `shard`) that keep the links busy: the
/// collective takes at least the busiest axis's bytes over its bandwidth (`sum` over parts of
/// `s (1 - 1/n_a) / prod(n_b)` for a part reaching axis `a` after the axes `b`), and at least
/// the longest part's rounds one after another; the shares (multiples of `1/SHARE_GRID`) that
/// minimise the larger of the two are taken, equal shares where they do as well. On axes of one
/// size and bandwidth (`16x16`, `4x4x4`) the rotations balance with equal shares; on `v5e:8x16`
/// (a line of 8 at 45 GB/s, a ring of 16 at 90 GB/s) the split by bandwidth took 10-15% over the
/// scaling book's `V / sum(W)`, these shares 3-8%. Two parts only (`None` otherwise): three
/// parts of unequal shares meet on the same axis and wait for each other (on `v4:4x4x8` these
/// shares took 14-30% over the model, equal shares 15-16%), which the bounds do not see.
pub(super) fn balanced_shares(
    p: &Plan,
    ici: &[usize],
    orders: &[Vec<usize>],
    shard: u64,
) -> Option<Vec<u64>> {
    let k = orders.len();
    if k != 2 {
        return None;
    }
    let bw = |pos: usize| if p.axes[pos].bidir { 2.0 } else { 1.0 };
    // m[axis index in ici][part]: the part's bytes over the axis per element, over bandwidth.
    let mut m = vec![vec![0.0f64; k]; ici.len()];
    for (col, order) in orders.iter().enumerate() {
        let mut before = 1.0f64;
        for &pos in order {
            if let Some(row) = ici.iter().position(|&a| a == pos) {
                let n = p.axes[pos].n as f64;
                m[row][col] = (1.0 - 1.0 / n) / before / bw(pos);
                before *= n;
            }
        }
    }
    let cost = |f: &[f64]| {
        let axis = m
            .iter()
            .map(|row| row.iter().zip(f).map(|(c, x)| c * x).sum::<f64>())
            .fold(0.0f64, f64::max);
        let path = (0..k)
            .map(|col| f[col] * m.iter().map(|row| row[col]).sum::<f64>())
            .fold(0.0f64, f64::max);
        axis.max(path)
    };
    let g = SHARE_GRID;
    let mut best = (cost(&vec![1.0 / k as f64; k]) * (1.0 - 1e-9), Vec::new());
    let mut consider = |idx: Vec<u32>| {
        let f: Vec<f64> = idx.iter().map(|&i| i as f64 / g as f64).collect();
        let c = cost(&f);
        if c < best.0 {
            best = (c, idx);
        }
    };
    for i in 1..g {
        consider(vec![i, g - i]);
    }
    let mut sizes = if best.1.is_empty() {
        vec![shard / k as u64; k]
    } else {
        best.1
            .iter()
            .map(|&i| shard * i as u64 / g as u64)
            .collect()
    };
    sizes[k - 1] = shard - sizes[..k - 1].iter().sum::<u64>();
    if sizes.iter().any(|&s| s < MIN_PART_ELEMS) {
        return None;
    }
    Some(sizes)
}

/// A part's rounds in order: the axis (position in the spec's axes) and its link time per
/// element of the part (in units of the shard's elements over a one-way link). An all-reduce's
/// are its reduce-scatter's: its all-gather rounds take turns in reverse after them (see
/// [`super::ring`]), which takes about as long again.
fn rounds_of(p: &Plan, op: CollectiveOp, order: &[usize]) -> Vec<(usize, f64)> {
    // A round over axis `a` sends `(n_a - 1)` blocks of a row per axis still to do, both for
    // the reduce-scatter (the axes after `a` in the order) and for the all-gather in reverse
    // (the axes gathered before it); a bidirectional ring halves each link's share.
    let scatter: Vec<(usize, f64)> = order
        .iter()
        .enumerate()
        .map(|(t, &a)| {
            let rows: f64 = order[t + 1..].iter().map(|&b| p.axes[b].n as f64).product();
            let bw = if p.axes[a].bidir { 2.0 } else { 1.0 };
            (a, (p.axes[a].n as f64 - 1.0) * rows / bw)
        })
        .collect();
    match op {
        CollectiveOp::AllGather => scatter.iter().rev().copied().collect(),
        _ => scatter,
    }
}

/// How long parts of `shares` of the rounds `rounds` take when they take turns on each axis:
/// the next round to start is the one that can start first (ties: the lower part), and it waits
/// for its part's previous round and for the axis's last round.
fn turns_makespan(rounds: &[&[(usize, f64)]], shares: &[f64], axes: usize) -> f64 {
    let k = rounds.len();
    let mut next = vec![0usize; k];
    let mut part_end = vec![0.0f64; k];
    let mut axis_end = vec![0.0f64; axes];
    loop {
        let mut best: Option<(f64, usize)> = None;
        for j in 0..k {
            if let Some(&(a, _)) = rounds[j].get(next[j]) {
                let s = part_end[j].max(axis_end[a]);
                if best.is_none_or(|(b, _)| s < b) {
                    best = Some((s, j));
                }
            }
        }
        let Some((s, j)) = best else {
            return part_end.iter().copied().fold(0.0, f64::max);
        };
        let (a, c) = rounds[j][next[j]];
        part_end[j] = s + c * shares[j];
        axis_end[a] = part_end[j];
        next[j] += 1;
    }
}

/// Coarse share grid of [`turns`] (then refined on [`SHARE_GRID`] near the best).
const COARSE_GRID: u32 = 48;

/// Two or three parts over as many ICI axes, differing in size or bandwidth: the orders (each a
/// permutation of `ici`) and shares (elements, summing to `shard`) of the shortest schedule in
/// which the parts take turns on each axis, when it is at least 1% shorter than the rotations
/// `orders` with equal shares taking turns (`None` otherwise, and where the axes are alike: the
/// rotations with equal shares never meet there).
///
/// On `v4:4x4x8` the rotations with equal shares load the ring of 8 with 49/127 of the bytes
/// (1.16x the scaling book's `V / sum(W)`); the turns found take 1.06x on paper.
pub(super) fn turns(
    p: &Plan,
    op: CollectiveOp,
    ici: &[usize],
    orders: &[Vec<usize>],
    shard: u64,
) -> Option<(Vec<Vec<usize>>, Vec<u64>)> {
    let k = orders.len();
    let alike = ici
        .iter()
        .all(|&a| (p.axes[a].n, p.axes[a].bidir) == (p.axes[ici[0]].n, p.axes[ici[0]].bidir));
    if !(2..=3).contains(&k) || ici.len() != k || alike || orders.iter().any(|o| o.len() != k) {
        return None;
    }
    let axes = p.axes.len();
    let perms = permutations(ici);
    let per_perm: Vec<Vec<(usize, f64)>> = perms.iter().map(|o| rounds_of(p, op, o)).collect();
    let rotations: Vec<Vec<(usize, f64)>> = orders.iter().map(|o| rounds_of(p, op, o)).collect();
    let rotations: Vec<&[(usize, f64)]> = rotations.iter().map(|r| &r[..]).collect();
    let equal = turns_makespan(&rotations, &vec![1.0 / k as f64; k], axes);
    // Shares as grid steps of the first k - 1 parts (the last takes the rest).
    let cost = |c: &[usize], steps: &[u32], g: u32| {
        let rounds: Vec<&[(usize, f64)]> = c.iter().map(|&q| &per_perm[q][..]).collect();
        let mut f: Vec<f64> = steps.iter().map(|&x| x as f64 / g as f64).collect();
        f.push(1.0 - f.iter().sum::<f64>());
        turns_makespan(&rounds, &f, axes)
    };
    let valid =
        |steps: &[u32], g: u32| steps.iter().all(|&x| x > 0) && steps.iter().sum::<u32>() < g;
    // Every multiset of k orders, every share on the coarse grid.
    let mut combos: Vec<Vec<usize>> = vec![Vec::new()];
    for _ in 0..k {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                let from = c.last().copied().unwrap_or(0);
                (from..perms.len()).map(move |q| [c.clone(), vec![q]].concat())
            })
            .collect();
    }
    let grid = |g: u32, around: Option<&[u32]>| -> Vec<Vec<u32>> {
        let range = |d: usize| match around {
            None => 1..=g,
            Some(a) => a[d].saturating_sub(g / COARSE_GRID)..=a[d] + g / COARSE_GRID,
        };
        let mut out: Vec<Vec<u32>> = vec![Vec::new()];
        for d in 0..k - 1 {
            out = out
                .into_iter()
                .flat_map(|v| range(d).map(move |x| [v.clone(), vec![x]].concat()))
                .collect();
        }
        out.retain(|v| valid(v, g));
        out
    };
    // (makespan, orders, share steps, grid)
    let mut best: Option<(f64, Vec<usize>, Vec<u32>, u32)> = None;
    let keep = |best: &mut Option<(f64, Vec<usize>, Vec<u32>, u32)>, c: &[usize], v: &[u32], g| {
        let t = cost(c, v, g);
        if best.as_ref().is_none_or(|b| t < b.0) {
            *best = Some((t, c.to_vec(), v.to_vec(), g));
        }
    };
    let coarse = grid(COARSE_GRID, None);
    for c in &combos {
        for v in &coarse {
            keep(&mut best, c, v, COARSE_GRID);
        }
    }
    let (_, c, v, _) = best.clone()?;
    let scale = SHARE_GRID / COARSE_GRID;
    let around: Vec<u32> = v.iter().map(|&x| x * scale).collect();
    for v in grid(SHARE_GRID, Some(&around)) {
        keep(&mut best, &c, &v, SHARE_GRID);
    }
    let (t, c, v, g) = best?;
    if t >= equal * 0.99 {
        return None;
    }
    let mut sizes: Vec<u64> = v.iter().map(|&x| shard * x as u64 / g as u64).collect();
    sizes.push(shard - sizes.iter().sum::<u64>());
    if sizes.iter().any(|&s| s < MIN_PART_ELEMS) {
        return None;
    }
    Some((c.iter().map(|&q| perms[q].clone()).collect(), sizes))
}

/// Every order of `items`.
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    (0..items.len())
        .flat_map(|i| {
            let mut rest = items.to_vec();
            let first = rest.remove(i);
            permutations(&rest).into_iter().map(move |mut o| {
                o.insert(0, first);
                o
            })
        })
        .collect()
}
