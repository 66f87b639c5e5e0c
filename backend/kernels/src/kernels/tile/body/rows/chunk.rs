//! One phase's chunk body: the full values a column chunk of 8 rows needs (recomputed from the
//! inputs in VMEM), what it adds to the accumulators, and the full outputs it stores.
//!
//! An unrolled loop emits several consecutive chunks (copies), each in one order ([`order`]:
//! the longest chain of latencies first) and interleaved by a list schedule of the in-order
//! core ([`interleave`]), so that it has independent work while loads, ALU and transcendental
//! results are in flight.

use std::collections::HashMap;

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{VBinOp, VType};
use tpuemu_isa::{Addr, MReg, VReg, VSrc};

use super::super::{Ctx, args, store};
use super::index::{column_is_index, emit_row_index};
use super::reduce;
use super::{Phase, Rows};
use crate::ir::{BinOp, POp, PRef, Prog, UnOp};
use crate::kernels::KernelError;

/// The full nodes a chunk of the phase computes: ancestors of the reductions' operands and of
/// the full outputs.
pub(super) fn needs(prog: &Prog, reds: &[PRef], full_outs: &[(usize, PRef)]) -> Vec<bool> {
    let mut need = vec![false; prog.nodes.len()];
    let mut stack: Vec<PRef> = reds
        .iter()
        .flat_map(|r| args(&prog.node(*r).op))
        .chain(full_outs.iter().map(|(_, o)| *o))
        .collect();
    while let Some(r) = stack.pop() {
        let n = prog.node(r);
        if n.per_row || need[r as usize] {
            continue;
        }
        need[r as usize] = true;
        stack.extend(args(&n.op));
    }
    need
}

/// Vector registers one copy of a chunk body holds at its peak, plus two temporaries: the
/// body is walked in emission order, each computed value taking a register until its last use
/// in the chunk (the reductions' operands and the full outputs until the chunk's end). Each
/// copy is emitted in the same order ([`interleave`] only interleaves them), so `n` copies hold
/// at most `n` times a copy's peak.
pub(super) fn peak(prog: &Prog, reds: &[PRef], full_outs: &[(usize, PRef)]) -> u32 {
    let need = needs(prog, reds, full_outs);
    let order = order(prog, &need);
    let last = last_uses(prog, &order, reds, full_outs);
    let holds = |i: usize| need[i] && !matches!(prog.nodes[i].op, POp::Const(_));
    let (mut live, mut most) = (0u32, 0u32);
    for &i in &order {
        let n = &prog.nodes[i];
        if !holds(i) {
            continue;
        }
        live += 1;
        most = most.max(live);
        let mut released: Vec<PRef> = Vec::new();
        for a in args(&n.op) {
            if last[a as usize] == i && holds(a as usize) && !released.contains(&a) {
                released.push(a);
                live -= 1;
            }
        }
    }
    most + 2
}

/// Cycles a node's result takes to come back, roughly, for ordering only (the emulator does
/// the timing): loads and the transcendental unit's work take longer than ALU operations.
fn latency(op: &POp) -> u32 {
    match op {
        POp::Input(_) => 4,
        POp::Un(u, _) if !matches!(u, UnOp::Neg | UnOp::Abs | UnOp::Sign | UnOp::Not) => 10,
        POp::Bin(BinOp::Div, ..) => 10,
        _ => 2,
    }
}

/// For each needed node, the longest chain of [`latency`]s from it to the chunk's end
/// (through the needed nodes that read it), itself included.
pub(super) fn chains(prog: &Prog, need: &[bool]) -> Vec<u32> {
    let mut prio = vec![0u32; prog.nodes.len()];
    for i in (0..prog.nodes.len()).rev() {
        if !need[i] {
            continue;
        }
        prio[i] += latency(&prog.nodes[i].op);
        for a in args(&prog.nodes[i].op) {
            let a = a as usize;
            if need[a] {
                prio[a] = prio[a].max(prio[i]);
            }
        }
    }
    prio
}

/// The order in which a chunk emits its needed nodes: a list schedule for the in-order core.
/// Of the nodes whose operands are computed, the one with the longest chain of latencies to
/// the chunk's end goes first (ties in program order), so that a long-latency result (a
/// load, an `exp`) is started early and independent work fills the wait; program order
/// would issue the compares of a one-hot before the `exp` they do not depend on, and the
/// `exp`'s readers would then wait for it.
pub(super) fn order(prog: &Prog, need: &[bool]) -> Vec<usize> {
    let n = prog.nodes.len();
    let prio = chains(prog, need);
    let mut readers = vec![0u32; n];
    // Operands still to be emitted, per node.
    for (i, node) in prog.nodes.iter().enumerate() {
        if need[i] {
            let mut own: Vec<usize> = args(&node.op)
                .into_iter()
                .map(|a| a as usize)
                .filter(|a| need[*a])
                .collect();
            own.sort_unstable();
            own.dedup();
            readers[i] = own.len() as u32;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|i| need[*i] && readers[*i] == 0).collect();
    let mut out = Vec::with_capacity(ready.len());
    while !ready.is_empty() {
        let (k, _) = ready
            .iter()
            .enumerate()
            .max_by_key(|(_, i)| (prio[**i], std::cmp::Reverse(**i)))
            .expect("not empty");
        let i = ready.swap_remove(k);
        out.push(i);
        for (j, node) in prog.nodes.iter().enumerate().skip(i + 1) {
            if need[j] && args(&node.op).contains(&(i as PRef)) {
                readers[j] -= 1;
                if readers[j] == 0 {
                    ready.push(j);
                }
            }
        }
    }
    out
}

/// The step of [`interleave`]'s schedule that stands for a copy's tail.
pub(super) const TAIL: usize = usize::MAX;

/// Which unit a node's work issues on, with its occupancy and latency in cycles, roughly (for
/// ordering only): `None` for what emits nothing here (constants are pinned, casts that move
/// nothing share their operand's register).
pub(super) fn issue_cost(prog: &Prog, i: usize) -> Option<(usize, u64, u64)> {
    const LOAD: usize = 0;
    const ALU: usize = 1;
    const EUP: usize = 3;
    let n = &prog.nodes[i];
    match n.op {
        POp::Const(_) => None,
        POp::Cast(a) if crate::kernels::tile::vexpr::cast_is_move(prog.node(a).dtype, n.dtype) => {
            None
        }
        POp::Input(_) => Some((LOAD, 1, 2)),
        _ if latency(&n.op) > 2 => Some((EUP, 2, 8)),
        _ => Some((ALU, 1, 2)),
    }
}

/// [`issue_cost`] for a schedule step, a copy's tail ([`TAIL`]: accumulations and stores) as
/// ALU-slot work, roughly.
pub(super) fn step_cost(prog: &Prog, i: usize) -> Option<(usize, u64, u64)> {
    if i == TAIL {
        Some((1, 1, 2))
    } else {
        issue_cost(prog, i)
    }
}

/// The values a schedule step reads: a node's operands, or `tail_reads` for a tail.
pub(super) fn step_reads(prog: &Prog, i: usize, tail_reads: &[usize]) -> Vec<usize> {
    if i == TAIL {
        tail_reads.to_vec()
    } else {
        args(&prog.nodes[i].op)
            .iter()
            .map(|a| *a as usize)
            .collect()
    }
}

/// The in-order core as the list schedules see it: per unit the cycles its slots are next
/// free (load, two ALU slots, none, the transcendental unit), and the cycle of the last issue.
pub(super) struct CoreModel {
    free: [Vec<u64>; 4],
    front: u64,
}

impl CoreModel {
    pub(super) fn new() -> Self {
        CoreModel {
            free: [vec![0], vec![0, 0], vec![], vec![0]],
            front: 0,
        }
    }

    /// The cycle step `i` could issue at, its operands ready by `operands`.
    pub(super) fn start(&self, prog: &Prog, i: usize, operands: u64) -> u64 {
        let unit = step_cost(prog, i)
            .map(|(k, ..)| self.free[k].iter().copied().min().unwrap_or(0))
            .unwrap_or(0);
        operands.max(unit).max(self.front)
    }

    /// Issues step `i` at cycle `t`; returns when its result is ready.
    pub(super) fn issue(&mut self, prog: &Prog, i: usize, t: u64) -> u64 {
        match step_cost(prog, i) {
            Some((k, occ, lat)) => {
                let slot = (0..self.free[k].len())
                    .min_by_key(|s| self.free[k][*s])
                    .expect("a slot");
                self.free[k][slot] = t + occ;
                self.front = t;
                t + lat
            }
            None => t,
        }
    }
}

/// When the values `reads` are ready, by `ready` (0 for those not in it).
pub(super) fn ready_by(reads: &[usize], ready: &HashMap<usize, u64>) -> u64 {
    reads
        .iter()
        .map(|a| ready.get(a).copied().unwrap_or(0))
        .max()
        .unwrap_or(0)
}

/// The emission order of `copies` copies of a chunk body, each copy in `order`: a list schedule
/// over a model of the in-order core (two ALU slots, one load slot, a transcendental unit
/// taking a register every 2 cycles, their latencies), each step emitting the copy's next node
/// that can issue first (ties to the longer chain, then the lower copy). Emitted node by node
/// across copies, a long-latency stage (8 `exp`s, 16 cycles) runs with the ALUs idle and its
/// readers wait for its end; interleaved, the readers of early copies fill the wait.
/// Each copy keeps the order of `order`, so `copies` times one copy's register peak still
/// bounds the registers held. Each copy ends with its tail ([`TAIL`]: its accumulations and
/// stores, reading `tail_reads`), scheduled like a node: a copy's tail goes out as soon as its
/// values are ready (tails in copy order), between other copies' work, instead of all tails
/// after every copy (a maximum's eight loads, then its eight `vmax`es, waited for the last
/// load).
fn interleave(
    prog: &Prog,
    order: &[usize],
    tail_reads: &[usize],
    copies: u32,
) -> Vec<(usize, usize)> {
    let copies = copies as usize;
    // Each copy's steps: its nodes in order, then its tail (TAIL).
    let steps = order.len() + 1;
    let step = |k: usize| order.get(k).copied().unwrap_or(TAIL);
    // Chain lengths (as in `order`) for ties.
    let mut need = vec![false; prog.nodes.len()];
    for &i in order {
        need[i] = true;
    }
    let prio = chains(prog, &need);
    let mut next = vec![0usize; copies];
    let mut ready: Vec<HashMap<usize, u64>> = vec![HashMap::new(); copies];
    let mut core = CoreModel::new();
    let mut out = Vec::with_capacity(steps * copies);
    let start = |i: usize, ready: &HashMap<usize, u64>, core: &CoreModel| {
        core.start(prog, i, ready_by(&step_reads(prog, i, tail_reads), ready))
    };
    let prio_of = |i: usize| if i == TAIL { 0 } else { prio[i] };
    while out.len() < steps * copies {
        let (u, t) = (0..copies)
            .filter(|u| next[*u] < steps)
            // Tails in copy order: a reduction without per-copy accumulators (an arg
            // reduction) accumulates in column order.
            .filter(|u| step(next[*u]) != TAIL || *u == 0 || next[*u - 1] == steps)
            .map(|u| (u, start(step(next[u]), &ready[u], &core)))
            .min_by_key(|(u, t)| (*t, std::cmp::Reverse(prio_of(step(next[*u]))), *u))
            .expect("a copy with work left");
        let i = step(next[u]);
        let done = core.issue(prog, i, t);
        ready[u].insert(i, done);
        next[u] += 1;
        out.push((i, u));
    }
    out
}

/// The last node of the chunk (in emission order) that reads each needed value; `usize::MAX`
/// for the reductions' operands and the full outputs, which stay until the chunk's tail.
fn last_uses(
    prog: &Prog,
    order: &[usize],
    reds: &[PRef],
    full_outs: &[(usize, PRef)],
) -> Vec<usize> {
    let mut last = vec![0usize; prog.nodes.len()];
    for &i in order {
        for a in args(&prog.nodes[i].op) {
            last[a as usize] = i;
        }
    }
    for r in reds
        .iter()
        .flat_map(|r| args(&prog.node(*r).op))
        .chain(full_outs.iter().map(|(_, o)| *o))
    {
        last[r as usize] = usize::MAX;
    }
    last
}

/// `copies` consecutive column chunks of the phase, the first at the chunk address
/// registers: the full values needed, the accumulations (in chunk order), the full outputs.
/// `mask` limits the (single) chunk to the lanes before the row's end.
pub(super) fn body(
    cx: &mut Ctx,
    rows: &Rows,
    ph: &Phase,
    mask: Option<MReg>,
    copies: u32,
) -> Result<(), KernelError> {
    let prog = cx.prog;
    let need = needs(prog, &ph.reds, &ph.full_outs);
    let order = order(prog, &need);
    // Last use of each needed node within the chunk.
    let last = last_uses(prog, &order, &ph.reds, &ph.full_outs);
    // Each copy's column index (lane coordinate within the row).
    let cols = columns(cx, ph.colidx, (0..copies).map(|u| u as i32))?;
    let mut maps: Vec<HashMap<PRef, VReg>> = vec![cx.regs.clone(); copies as usize];
    let temps: Vec<PRef> = order.iter().map(|i| *i as PRef).collect();
    let tail_reads = tail_reads(prog, ph);
    for (i, u) in interleave(prog, &order, &tail_reads, copies) {
        let c = CopyAt {
            u: u as u32,
            chunk: u as i32,
            col: cols[u],
        };
        std::mem::swap(&mut cx.regs, &mut maps[u]);
        if i == TAIL {
            tail(cx, rows, ph, c, mask)?;
            for r in &temps {
                cx.release(*r);
            }
        } else {
            debug_assert!(rows.ph[i] <= ph.p);
            emit_node(cx, rows, i, c, &last, None)?;
        }
        std::mem::swap(&mut cx.regs, &mut maps[u]);
    }
    give_columns(cx, ph.colidx, cols);
    Ok(())
}

/// The values a chunk's tail reads: the reductions' operands and the full outputs.
pub(super) fn tail_reads(prog: &Prog, ph: &Phase) -> Vec<usize> {
    ph.reds
        .iter()
        .flat_map(|r| args(&prog.node(*r).op))
        .chain(ph.full_outs.iter().map(|(_, o)| *o))
        .map(|r| r as usize)
        .collect()
}

/// One copy of a chunk body: its accumulators' copy `u`, its columns `chunk` chunks of 128 from
/// the chunk address registers, its column index.
#[derive(Clone, Copy, Debug)]
pub(super) struct CopyAt {
    pub u: u32,
    pub chunk: i32,
    pub col: Option<VReg>,
}

/// The column index of each copy, the phase's own (`colidx`) where a copy's offset is 0, else
/// a register of its own holding it plus `128 * offset`.
pub(super) fn columns(
    cx: &mut Ctx,
    colidx: Option<VReg>,
    offsets: impl Iterator<Item = i32>,
) -> Result<Vec<Option<VReg>>, KernelError> {
    let mut cols = Vec::new();
    for off in offsets {
        cols.push(match colidx {
            Some(ci) if off != 0 => {
                let v = cx.va.take()?;
                cx.e.vbin(
                    VBinOp::Add,
                    VType::I32,
                    v,
                    ci,
                    VSrc::Imm((128 * off) as u32),
                );
                Some(v)
            }
            other => other,
        });
    }
    Ok(cols)
}

/// Gives back the copies' column registers of [`columns`].
pub(super) fn give_columns(cx: &mut Ctx, colidx: Option<VReg>, cols: Vec<Option<VReg>>) {
    for c in cols.into_iter().flatten() {
        if Some(c) != colidx {
            cx.va.give(c);
        }
    }
}

/// Emits needed node `i` of copy `c` (its values in `cx.regs`), releasing the operands it
/// reads last (`last`: the last reader of each value). `into`: the register the value must go
/// to (a value crossing a pipelined loop's back edge), bound as borrowed, never freed through
/// the value.
pub(super) fn emit_node(
    cx: &mut Ctx,
    rows: &Rows,
    i: usize,
    c: CopyAt,
    last: &[usize],
    into: Option<VReg>,
) -> Result<(), KernelError> {
    let prog = cx.prog;
    let n = &prog.nodes[i];
    let r = i as PRef;
    let v = match n.op {
        POp::Input(k) => {
            let o = cx.ops[k as usize];
            let esz = o.dtype.size() as i32;
            let sr = rows.regs(esz as u32);
            let v = match into {
                Some(v) => v,
                None => cx.va.take()?,
            };
            let at = Addr::new(sr.chunk, o.base + 128 * c.chunk * esz);
            cx.e.vld(o.dtype.mem(), v, at, VAccess::rows(sr.sub_full));
            crate::kernels::tile::vexpr::after_load(cx.e, o.dtype, v);
            v
        }
        POp::Index(d) => {
            let col = c
                .col
                .ok_or_else(|| KernelError::Unsupported("Index without a column index".into()))?;
            if column_is_index(cx, d as usize) {
                // The coordinate is the column index itself: share its register.
                cx.borrow(r, col);
                return Ok(());
            }
            emit_row_index(cx, d as usize, col)?
        }
        _ => {
            cx.forced = into;
            cx.emit_elementwise(r)?
        }
    };
    if into.is_some() {
        cx.borrow(r, v);
    } else {
        cx.bind(r, v);
    }
    for a in args(&n.op) {
        if last[a as usize] == i && !prog.node(a).per_row {
            cx.release(a);
        }
    }
    Ok(())
}

/// The accumulations and full outputs of copy `c` of a chunk body, its values in registers.
pub(super) fn tail(
    cx: &mut Ctx,
    rows: &Rows,
    ph: &Phase,
    c: CopyAt,
    mask: Option<MReg>,
) -> Result<(), KernelError> {
    reduce::accumulate(cx, &ph.accs, c.col, mask, c.u)?;
    for (k, o) in &ph.full_outs {
        let op = cx.ops[cx.inputs + k];
        let esz = op.dtype.size() as i32;
        let sr = rows.regs(esz as u32);
        let at = Addr::new(sr.chunk, op.base + 128 * c.chunk * esz);
        store(cx, *o, op, at, VAccess::rows(sr.sub_full))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::peak;
    use crate::dtype::DType;
    use crate::ir::{BinOp, PRef, ProgBuilder, RedKind, UnOp};

    #[test]
    fn a_chain_holds_two_values_at_a_time() {
        // x -> exp -> neg -> ... (20 maps) -> sum: by hand, each map needs its operand and its
        // result, and the sum's operand stays to the chunk's end: 2 live values, plus the two
        // temporaries. Counting every value as live to the end would say 21 + 2.
        let mut b = ProgBuilder::new();
        let mut v = b.input(0, DType::F32, false);
        for k in 0..20 {
            let op = if k % 2 == 0 { UnOp::Exp } else { UnOp::Neg };
            v = b.un(op, v, DType::F32);
        }
        let s = b.reduce(RedKind::Sum, v, DType::F32);
        b.output(s);
        let prog = b.finish();
        assert_eq!(peak(&prog, &[s], &[]), 4);
    }

    #[test]
    fn copies_keep_their_order_and_fill_the_exp_wait() {
        // sum(exp(x - 1)) over the row, 8 copies: load, subtract, exp, (sum in the tail).
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let one = b.constant(crate::dtype::Scalar::Float(1.0), DType::F32);
        let d = b.bin(BinOp::Sub, x, one, DType::F32);
        let e = b.un(UnOp::Exp, d, DType::F32);
        let n = b.un(UnOp::Neg, e, DType::F32);
        let s = b.reduce(RedKind::Sum, n, DType::F32);
        b.output(s);
        let prog = b.finish();
        let need = super::needs(&prog, &[s], &[]);
        let order = super::order(&prog, &need);
        let seq = super::interleave(&prog, &order, &[n as usize], 8);
        // Every node of every copy once, each copy in the order, then its tail.
        assert_eq!(seq.len(), (order.len() + 1) * 8);
        for u in 0..8 {
            let mine: Vec<usize> = seq
                .iter()
                .filter(|(_, c)| *c == u)
                .map(|(i, _)| *i)
                .collect();
            let mut want = order.clone();
            want.push(super::TAIL);
            assert_eq!(mine, want, "copy {u}");
        }
        // By hand: the transcendental unit takes an exp every 2 cycles and returns it 8 later,
        // so copy 0's negation can issue while copies 4..7 still wait for their exps; node by
        // node it would issue after the eighth exp.
        let at = |i: PRef, u: usize| seq.iter().position(|x| *x == (i as usize, u)).unwrap();
        assert!(at(n, 0) < at(e as PRef, 7), "{seq:?}");
    }

    #[test]
    fn values_read_later_stay_live() {
        // a = x + 1 is read by the last node, so it lives across the chain in between:
        // x, a, and the chain's two values at its widest (x is last read by a).
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let one = b.constant(crate::dtype::Scalar::Float(1.0), DType::F32);
        let a = b.bin(BinOp::Add, x, one, DType::F32);
        let mut v = b.un(UnOp::Exp, a, DType::F32);
        for _ in 0..5 {
            v = b.un(UnOp::Neg, v, DType::F32);
        }
        let out = b.bin(BinOp::Mul, v, a, DType::F32);
        b.output(out);
        let prog = b.finish();
        // a and the chain: 3 at the widest (a, v, the next v), plus two temporaries.
        assert_eq!(peak(&prog, &[], &[(0, out)]), 5);
    }
}
