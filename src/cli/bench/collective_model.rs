//! The scaling book's cost model of a collective ("How to Scale Your Model", part 3, and the
//! ICI/DCN figures of part 2), as `tpuemu bench collective` prints it next to the simulated
//! time.
//!
//! - **ICI, over `k` axes at once.** An all-gather or reduce-scatter of `V` bytes over the ICI
//!   axes of a slice takes `V / (W_1 + ... + W_k)`, `W_i` the bandwidth of axis `i` (both
//!   directions of a link where the axis wraps, `2 x` the one-way link; one direction where it
//!   does not); all-reduce is both, `2V / (W_1 + ... + W_k)`. The book's plain formula: the
//!   exact ring factor `(N-1)/N` is left out, so the model is at most 1/N above the least a
//!   ring can take.
//! - **DCN, between slices.** A hierarchical collective moves the `V / N_ici` bytes of a chip
//!   (the shard after the ICI reduce-scatter, or before the ICI all-gather) round a one-way
//!   ring of the `S` slices over each chip's data-centre network interface:
//!   `(S-1)/S x V / N_ici / W_dcn` (all-reduce twice), added to the ICI time. Here the ring
//!   factor is kept: with a few slices it is far from 1.
//! - **Latency floor.** Each term is at least its hops times the hop latency: `n/2` hops round a
//!   wrapping axis (two chains, one each way), `n - 1` along a line or round the DCN's one-way
//!   ring; the axes' hops add (every part walks every axis).
//! - **All-to-all** is bound by its busiest link: the bytes every chip of a group sends every
//!   other, routed as the emulator routes them, over that link's bandwidth.

use std::collections::HashMap;

use tpuemu_backend::kernels::collective::{Collective, CollectiveOp};
use tpuemu_emulator::ChipPreset;
use tpuemu_emulator::ici::{Ici, LinkId};
use tpuemu_isa::Topology;

/// The model's time and how it was computed.
pub struct Model {
    /// Seconds.
    pub seconds: f64,
    /// The formula with its figures, for people.
    pub formula: String,
}

/// The busiest link's seconds when every chip of chip 0's group pushes `block` bytes to every
/// other, routed as the emulator routes (dimension by dimension, the short way round, ties `+`,
/// one hop to another slice).
fn a2a_busiest_link(topo: &Topology, preset: &ChipPreset, axes: &[usize], block: u64) -> f64 {
    let mut ici = Ici::new(topo.mesh.clone(), topo.wraparound.clone(), 1.0, 1);
    if let Some(d) = topo.dcn_axis {
        ici.set_dcn_axis(d, 1.0, 1);
    }
    let members: Vec<u32> = (0..topo.num_chips() as u32)
        .filter(|&c| {
            ici.coords(c)
                .iter()
                .enumerate()
                .all(|(k, x)| axes.contains(&k) || *x == 0)
        })
        .collect();
    let mut load: HashMap<LinkId, u64> = HashMap::new();
    for &s in &members {
        for &d in &members {
            for link in ici.route(s, d) {
                *load.entry(link).or_default() += block;
            }
        }
    }
    load.iter()
        .map(|(l, b)| {
            let bw = if Some(l.axis as usize) == topo.dcn_axis {
                preset.dcn_bytes_per_s
            } else {
                preset.ici_link_bytes_per_s
            };
            *b as f64 / bw
        })
        .fold(0.0, f64::max)
}

fn gbs(x: f64) -> String {
    format!("{} GB/s", x / 1e9)
}

/// The model of collective `c` of `bytes` bytes (the whole array) on `topo`.
pub fn model(c: &Collective, topo: &Topology, preset: &ChipPreset, bytes: u64) -> Model {
    let spec = c.spec();
    let link = preset.ici_link_bytes_per_s;
    let hop = preset.ici_hop_latency_ns * 1e-9;
    if spec.op == CollectiveOp::AllToAll {
        let block = bytes / c.group_size() as u64;
        let s = a2a_busiest_link(topo, preset, &spec.axes, block);
        return Model {
            seconds: s,
            formula: "the busiest link's bytes / its bandwidth".into(),
        };
    }
    let twice = if spec.op == CollectiveOp::AllReduce {
        2.0
    } else {
        1.0
    };
    let f = if twice == 2.0 { "2V" } else { "V" };
    // ICI: the axes' bandwidths add; their hops add.
    let (mut w, mut hops, mut n_ici) = (0.0, 0.0, 1u64);
    let mut terms = Vec::new();
    let mut dcn = None;
    for (&a, &bi) in spec.axes.iter().zip(&c.bidirectional()) {
        let n = topo.mesh[a];
        if n < 2 {
            continue;
        }
        if topo.dcn_axis == Some(a) {
            dcn = Some((n, bi));
            continue;
        }
        n_ici *= n as u64;
        let (wa, h) = if bi {
            (2.0 * link, (n / 2) as f64)
        } else {
            (link, (n - 1) as f64)
        };
        w += wa;
        hops += h;
        terms.push(gbs(wa));
    }
    let mut seconds = 0.0;
    let mut formula = Vec::new();
    if w > 0.0 {
        let bw = twice * bytes as f64 / w;
        let lat = twice * hops * hop;
        seconds += bw.max(lat);
        formula.push(format!(
            "{f} / ({}) = {}{}",
            terms.join(" + "),
            super::super::report::seconds(bw),
            if lat > bw {
                format!(
                    ", below the latency floor {} x {hops} hops x {} ns",
                    twice, preset.ici_hop_latency_ns
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some((n, bi)) = dcn {
        let v = bytes as f64 / n_ici as f64 * (n - 1) as f64 / n as f64;
        let bw = twice * v / preset.dcn_bytes_per_s;
        let h = if bi { (n / 2) as f64 } else { (n - 1) as f64 };
        let lat = twice * h * preset.dcn_latency_ns * 1e-9;
        seconds += bw.max(lat);
        formula.push(format!(
            "{}/{n} x {f} / {n_ici} / {} (DCN) = {}",
            n - 1,
            gbs(preset.dcn_bytes_per_s),
            super::super::report::seconds(bw.max(lat))
        ));
    }
    Model {
        seconds,
        formula: if formula.is_empty() {
            "nothing crosses a link".into()
        } else {
            formula.join(" + ")
        },
    }
}
