//! Constants read as constants: a tile node that only fills a whole storage with one float
//! (`torch.full`, `scalar_tensor`: a loss's seed gradient) is copied into the tile nodes that
//! read it, as a constant of their programs, instead of being read from HBM. A reader then
//! depends on nothing the fill's group wrote, so the planner may move it back past that group
//! (the seed gradient no longer ties a backward to the kernels recorded before it). A fill
//! that no node reads any more and no live tensor holds is not run at all.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::views::append_prog;
use crate::dtype::{DType, Scalar};
use crate::ir::{Node, NodeKind, POp, PRef, Prog};

/// Replaces, in every tile node, the operands a constant fill wrote (and nothing wrote since)
/// by that constant, then drops the fills nothing reads and no tensor outside holds.
pub(super) fn inline_fills(nodes: Vec<Node>) -> Vec<Node> {
    // Storage -> the constant it holds, while its last writer in the graph is a whole fill.
    let mut holds: HashMap<u64, (Scalar, DType)> = HashMap::new();
    let mut nodes = nodes;
    for n in &mut nodes {
        inline_into(n, &holds);
        for v in &n.outputs {
            holds.remove(&v.storage.id());
        }
        if let Some((id, c)) = whole_fill(n) {
            holds.insert(id, c);
        }
    }
    // References the graph holds to each storage (what a live tensor holds beyond these).
    let mut refs: HashMap<u64, usize> = HashMap::new();
    for n in &nodes {
        for v in n.inputs.iter().chain(&n.outputs) {
            *refs.entry(v.storage.id()).or_default() += 1;
        }
    }
    let read: HashSet<u64> = nodes
        .iter()
        .flat_map(|n| n.inputs.iter().map(|v| v.storage.id()))
        .collect();
    nodes.retain(|n| {
        let Some((id, _)) = whole_fill(n) else {
            return true;
        };
        let v = &n.outputs[0];
        read.contains(&id) || Arc::strong_count(&v.storage) > refs[&id]
    });
    nodes
}

/// The storage `n` fills whole with one float constant, and the constant, if it does.
fn whole_fill(n: &Node) -> Option<(u64, (Scalar, DType))> {
    let NodeKind::Tile { prog, .. } = &n.kind else {
        return None;
    };
    let [out] = n.outputs.as_slice() else {
        return None;
    };
    let [r] = prog.outputs.as_slice() else {
        return None;
    };
    let x = prog.node(*r);
    let POp::Const(c @ Scalar::Float(_)) = x.op else {
        return None;
    };
    let whole = out.layout.is_contiguous()
        && out.layout.offset == 0
        && (out.layout.numel() * out.dtype.size()) as u64 == out.storage.bytes();
    (n.inputs.is_empty() && whole && out.dtype.is_float() && x.dtype == out.dtype)
        .then_some((out.storage.id(), (c, out.dtype)))
}

/// Rewrites tile node `n` so that it reads no operand whose storage `holds` a constant (and in
/// that constant's dtype): each becomes the constant, rounded to the dtype as a store would.
fn inline_into(n: &mut Node, holds: &HashMap<u64, (Scalar, DType)>) {
    let NodeKind::Tile { prog, .. } = &mut n.kind else {
        return;
    };
    let constant = |i: usize| {
        let v = &n.inputs[i];
        holds
            .get(&v.storage.id())
            .filter(|(_, dt)| *dt == v.dtype)
            .map(|(c, _)| *c)
    };
    if (0..n.inputs.len()).all(|i| constant(i).is_none()) {
        return;
    }
    // How the program reads each input (an input read two ways is left as it is).
    let Some(reads) = super::group::input_reads(prog) else {
        return;
    };
    let mut out = Prog::default();
    let mut map: HashMap<u32, PRef> = HashMap::new();
    let mut inputs = Vec::new();
    for (i, v) in n.inputs.iter().enumerate() {
        let read = reads.get(&(i as u32)).copied();
        match (constant(i), read) {
            (Some(c), Some((per_row, dt))) => {
                // The f32 lane of the constant, rounded to the stored dtype.
                let k = out.push(POp::Const(c), DType::F32, per_row);
                let k = if dt == DType::F32 {
                    k
                } else {
                    out.push(POp::Cast(k), dt, per_row)
                };
                map.insert(i as u32, k);
            }
            // A constant operand the program never reads is dropped too.
            (Some(_), None) => {}
            (None, read) => {
                let k = inputs.len() as u32;
                inputs.push(v.clone());
                if let Some((per_row, dt)) = read {
                    map.insert(i as u32, out.push(POp::Input(k), dt, per_row));
                }
            }
        }
    }
    out.outputs = append_prog(&mut out, prog, &map, false);
    *prog = out;
    n.inputs = inputs;
}
