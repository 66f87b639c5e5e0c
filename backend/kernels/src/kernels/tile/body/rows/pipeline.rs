//! Software pipelining of a phase's chunk loop: each loop trip runs the early stage of its own
//! chunks (loads, and what feeds the transcendental unit, up to its `exp`s) interleaved with the
//! late stage of the previous trip's chunks (what reads the `exp`s, the accumulations, the
//! stores). Emitted plainly, a trip of the in-order core starts with loads whose results it
//! waits for and ends waiting for its last `exp` before the additions and stores that read it:
//! a cross-entropy's sum of exponentials took 30 cycles a trip for 16 of the transcendental
//! unit's. Pipelined, the previous trip's readers fill those waits.
//!
//! The values the late stage reads from the early one (the crossing values) live in registers
//! fixed for the loop, a set per copy: the early stage writes them after the late stage of the
//! same copy has read the previous trip's. The loop is a prologue (the first trip's early
//! stage), `trips - 1` pipelined trips, and an epilogue (the last trip's late stage), whose
//! loads and stores address the chunks one trip back. Each copy's operations are the same, in
//! the same order per copy, as unpipelined: the results are the same bits.

use std::collections::HashMap;

use tpuemu_isa::VReg;

use super::super::{Ctx, args};
use super::chunk::{
    self, CopyAt, CoreModel, TAIL, chains, columns, emit_node, give_columns, issue_cost, needs,
    ready_by, step_reads, tail, tail_reads,
};
use super::{Phase, Rows, reduce};
use crate::ir::{POp, PRef, Prog};
use crate::kernels::KernelError;

/// The transcendental unit's index in [`issue_cost`].
const EUP: usize = 3;

/// How a phase's chunk splits into stages.
#[derive(Clone, Debug)]
pub(super) struct Pipe {
    /// Per node: in the late stage.
    late: Vec<bool>,
    /// Early values the late stage or the tail reads, in node order (each in a register of its
    /// own).
    pub crossing: Vec<usize>,
    /// Crossing casts that share their operand's register: (cast, the crossing value whose
    /// register it is).
    aliases: Vec<(usize, usize)>,
    /// Per node: its operand when it is a cast that moves nothing (shares the register).
    move_of: Vec<Option<usize>>,
}

impl Pipe {
    /// The crossing value whose register `i` is in, if any: `i` itself, or what a chain of
    /// casts that move nothing (early or late) leads back to.
    fn root(&self, mut i: usize) -> Option<usize> {
        loop {
            if self.crossing.contains(&i) {
                return Some(i);
            }
            i = self.move_of.get(i).copied().flatten()?;
        }
    }
}

/// The stages of the phase's chunk, when pipelining applies: some chunk value goes through the
/// transcendental unit (the early stage is what feeds it), every reduction keeps an
/// accumulator per copy (accumulations in column order per copy), and every crossing value is
/// computed into a register of its own (a load or an arithmetic node, not a comparison or
/// another boolean, or a coordinate; a cast that moves nothing crosses in its operand's).
pub(super) fn plan(prog: &Prog, reds: &[PRef], full_outs: &[(usize, PRef)]) -> Option<Pipe> {
    if !reds.iter().all(|r| reduce::splits(prog, *r)) {
        return None;
    }
    let need = needs(prog, reds, full_outs);
    let n = prog.nodes.len();
    let mut early = vec![false; n];
    for i in (0..n).rev() {
        let eup = need[i] && matches!(issue_cost(prog, i), Some((EUP, ..)));
        if eup || early[i] {
            early[i] = true;
            for a in args(&prog.nodes[i].op) {
                if need[a as usize] {
                    early[a as usize] = true;
                }
            }
        }
    }
    if !early.iter().any(|e| *e) {
        return None;
    }
    let late: Vec<bool> = (0..n).map(|i| need[i] && !early[i]).collect();
    let tail: Vec<usize> = reds
        .iter()
        .flat_map(|r| args(&prog.node(*r).op))
        .chain(full_outs.iter().map(|(_, o)| *o))
        .map(|r| r as usize)
        .collect();
    let reads_late: Vec<usize> = (0..n)
        .filter(|&i| early[i])
        .filter(|&i| {
            tail.contains(&i)
                || (0..n).any(|j| late[j] && args(&prog.nodes[j].op).contains(&(i as PRef)))
        })
        .collect();
    // A cast that moves nothing shares its operand's register: it crosses in its operand's.
    let is_move = |i: usize| match prog.nodes[i].op {
        POp::Cast(a) => {
            crate::kernels::tile::vexpr::cast_is_move(prog.node(a).dtype, prog.nodes[i].dtype)
        }
        _ => false,
    };
    let root = |mut i: usize| {
        while is_move(i) {
            let POp::Cast(a) = prog.nodes[i].op else {
                unreachable!("a move is a cast")
            };
            i = a as usize;
        }
        i
    };
    let mut crossing: Vec<usize> = reads_late.iter().map(|&i| root(i)).collect();
    crossing.sort_unstable();
    crossing.dedup();
    let aliases: Vec<(usize, usize)> = (0..n)
        .filter(|&i| early[i] && is_move(i) && crossing.contains(&root(i)))
        .map(|i| (i, root(i)))
        .collect();
    // Not a comparison or another boolean: the vector allocator remembers a bool register's
    // comparison mask, which would go stale in a register kept across trips.
    let fits = crossing.iter().all(|&i| {
        let node = &prog.nodes[i];
        match node.op {
            POp::Input(_) => true,
            POp::Index(_) | POp::Const(_) | POp::Cmp(..) => false,
            _ => !node.per_row && early[i] && node.dtype != crate::dtype::DType::Bool,
        }
    });
    let move_of = (0..n)
        .map(|i| {
            let POp::Cast(a) = prog.nodes[i].op else {
                return None;
            };
            is_move(i).then_some(a as usize)
        })
        .collect();
    fits.then_some(Pipe {
        late,
        crossing,
        aliases,
        move_of,
    })
}

/// The emission order of one pipelined trip: for each copy, the late stage of the previous
/// trip (when `prev`; its nodes in `order`, then its tail) and the early stage of this one (when
/// `cur`), as `(node or TAIL, copy, late)`. A list schedule over the in-order core's model as
/// [`chunk`]'s interleave, with two more rules: a copy writes a crossing value only after its
/// late stage has read the previous trip's (the register is the same), and tails go in copy
/// order. The previous trip's crossing values count as ready after their latency.
#[allow(clippy::too_many_arguments)]
fn schedule(
    prog: &Prog,
    order: &[usize],
    pipe: &Pipe,
    tail_reads: &[usize],
    copies: usize,
    prev: bool,
    cur: bool,
) -> Vec<(usize, usize, bool)> {
    let pseq: Vec<usize> = if prev {
        order
            .iter()
            .copied()
            .filter(|i| pipe.late[*i])
            .chain([TAIL])
            .collect()
    } else {
        Vec::new()
    };
    let cseq: Vec<usize> = if cur {
        order.iter().copied().filter(|i| !pipe.late[*i]).collect()
    } else {
        Vec::new()
    };
    let reads = |i: usize| step_reads(prog, i, tail_reads);
    // A crossing value may be written once the late steps at positions below this have gone.
    let free_after: HashMap<usize, usize> = pipe
        .crossing
        .iter()
        .map(|&c| {
            let at = pseq
                .iter()
                .rposition(|s| reads(*s).iter().any(|r| pipe.root(*r) == Some(c)));
            (c, at.map_or(0, |p| p + 1))
        })
        .collect();
    let mut need = vec![false; prog.nodes.len()];
    for &i in order {
        need[i] = true;
    }
    let prio = chains(prog, &need);
    let lat = |i: usize| issue_cost(prog, i).map_or(0, |c| c.2);
    let mut ready_p: Vec<HashMap<usize, u64>> = (0..copies)
        .map(|_| {
            pipe.crossing
                .iter()
                .map(|&c| (c, lat(c)))
                .chain(pipe.aliases.iter().map(|&(a, c)| (a, lat(c))))
                .collect()
        })
        .collect();
    let mut ready_c: Vec<HashMap<usize, u64>> = vec![HashMap::new(); copies];
    let (mut np, mut nc) = (vec![0usize; copies], vec![0usize; copies]);
    let mut core = CoreModel::new();
    let total = (pseq.len() + cseq.len()) * copies;
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let mut best: Option<(u64, std::cmp::Reverse<u32>, usize, bool)> = None;
        for u in 0..copies {
            let mut consider = |i: usize, late: bool, ready: &HashMap<usize, u64>| {
                let t = core.start(prog, i, ready_by(&reads(i), ready));
                let p = if i == TAIL { 0 } else { prio[i] };
                let key = (t, std::cmp::Reverse(p), u, !late);
                if best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
            };
            if np[u] < pseq.len() {
                let i = pseq[np[u]];
                if i != TAIL || u == 0 || np[u - 1] == pseq.len() {
                    consider(i, true, &ready_p[u]);
                }
            }
            if nc[u] < cseq.len() {
                let i = cseq[nc[u]];
                if free_after.get(&i).is_none_or(|f| np[u] >= *f) {
                    consider(i, false, &ready_c[u]);
                }
            }
        }
        let (t, _, u, cur_step) = best.expect("a step that can go");
        let late = !cur_step;
        let i = if late { pseq[np[u]] } else { cseq[nc[u]] };
        let done = core.issue(prog, i, t);
        if late {
            ready_p[u].insert(i, done);
            np[u] += 1;
        } else {
            ready_c[u].insert(i, done);
            nc[u] += 1;
        }
        out.push((i, u, late));
    }
    out
}

/// The last reader of each value among `steps` (node indices), `usize::MAX` for `keep`.
fn last_readers(prog: &Prog, steps: &[usize], keep: &[usize]) -> Vec<usize> {
    let mut last = vec![0usize; prog.nodes.len()];
    for &i in steps {
        for a in args(&prog.nodes[i].op) {
            last[a as usize] = i;
        }
    }
    for &k in keep {
        last[k] = usize::MAX;
    }
    last
}

/// One trip of the pipelined loop over `copies` chunks: the previous trip's late stage (when
/// `prev`, its chunks `copies` back) and this trip's early stage (when `cur`), its crossing
/// values into `regs` (per copy, in [`Pipe::crossing`] order).
pub(super) fn trip(
    cx: &mut Ctx,
    rows: &Rows,
    ph: &Phase,
    pipe: &Pipe,
    regs: &[Vec<VReg>],
    (prev, cur): (bool, bool),
) -> Result<(), KernelError> {
    let prog = cx.prog;
    let copies = regs.len();
    let need = needs(prog, &ph.reds, &ph.full_outs);
    let order = chunk::order(prog, &need);
    let reads = tail_reads(prog, ph);
    let late_steps: Vec<usize> = order.iter().copied().filter(|i| pipe.late[*i]).collect();
    let early_steps: Vec<usize> = order.iter().copied().filter(|i| !pipe.late[*i]).collect();
    // Late: values the tail reads stay to it; early: crossing values stay (read next trip).
    let last_late = last_readers(prog, &late_steps, &reads);
    let crossing_all: Vec<usize> = pipe
        .crossing
        .iter()
        .copied()
        .chain(pipe.aliases.iter().map(|(a, _)| *a))
        .collect();
    let last_early = last_readers(prog, &early_steps, &crossing_all);
    let has_index = |steps: &[usize]| {
        steps
            .iter()
            .any(|i| matches!(prog.nodes[*i].op, POp::Index(_)))
    };
    let k = copies as i32;
    let cols_p = if prev && has_index(&late_steps) {
        columns(cx, ph.colidx, (0..k).map(|u| u - k))?
    } else {
        vec![None; copies]
    };
    let cols_c = if cur && has_index(&early_steps) {
        columns(cx, ph.colidx, 0..k)?
    } else {
        vec![None; copies]
    };
    let mut maps_p: Vec<HashMap<PRef, VReg>> = vec![cx.regs.clone(); copies];
    let mut maps_c: Vec<HashMap<PRef, VReg>> = vec![cx.regs.clone(); copies];
    if prev {
        for (u, map) in maps_p.iter_mut().enumerate() {
            std::mem::swap(&mut cx.regs, map);
            for (c, r) in pipe.crossing.iter().zip(&regs[u]) {
                cx.borrow(*c as PRef, *r);
            }
            for (a, c) in &pipe.aliases {
                let at = pipe
                    .crossing
                    .iter()
                    .position(|x| x == c)
                    .expect("a crossing root");
                cx.borrow(*a as PRef, regs[u][at]);
            }
            std::mem::swap(&mut cx.regs, map);
        }
    }
    let temps: Vec<PRef> = late_steps
        .iter()
        .chain(&crossing_all)
        .map(|i| *i as PRef)
        .collect();
    for (i, u, late) in schedule(prog, &order, pipe, &reads, copies, prev, cur) {
        let (map, at) = if late {
            let at = CopyAt {
                u: u as u32,
                chunk: u as i32 - k,
                col: cols_p[u],
            };
            (&mut maps_p[u], at)
        } else {
            let at = CopyAt {
                u: u as u32,
                chunk: u as i32,
                col: cols_c[u],
            };
            (&mut maps_c[u], at)
        };
        std::mem::swap(&mut cx.regs, map);
        if i == TAIL {
            tail(cx, rows, ph, at, None)?;
            for r in &temps {
                cx.release(*r);
            }
        } else if late {
            emit_node(cx, rows, i, at, &last_late, None)?;
        } else {
            let into = pipe
                .crossing
                .iter()
                .position(|c| *c == i)
                .map(|p| regs[u][p]);
            emit_node(cx, rows, i, at, &last_early, into)?;
        }
        std::mem::swap(&mut cx.regs, map);
    }
    // This trip's crossing values stay in their registers for the next; the bindings go.
    if cur {
        for map in maps_c.iter_mut() {
            std::mem::swap(&mut cx.regs, map);
            for c in &crossing_all {
                cx.release(*c as PRef);
            }
            std::mem::swap(&mut cx.regs, map);
        }
    }
    give_columns(cx, ph.colidx, cols_p);
    give_columns(cx, ph.colidx, cols_c);
    Ok(())
}
