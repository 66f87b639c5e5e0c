//! One phase's chunk body: the full values a column chunk of 8 rows needs (recomputed from the
//! inputs in VMEM), what it adds to the accumulators, and the full outputs it stores.
//!
//! An unrolled loop emits several consecutive chunks (copies) node by node, so that the
//! in-order core has independent work while loads and ALU results are in flight.

use std::collections::HashMap;

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{VBinOp, VType};
use tpuemu_isa::{Addr, MReg, VReg};

use super::super::{Ctx, args, store};
use super::index::{column_is_index, emit_row_index};
use super::reduce::{self, Acc};
use super::{Phase, Rows};
use crate::ir::{POp, PRef, Prog};
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
/// in the chunk (the reductions' operands and the full outputs until the chunk's end). Copies
/// are emitted node by node, so `n` copies hold at most `n` times a copy's peak.
pub(super) fn peak(prog: &Prog, reds: &[PRef], full_outs: &[(usize, PRef)]) -> u32 {
    let need = needs(prog, reds, full_outs);
    let last = last_uses(prog, &need, reds, full_outs);
    let holds = |i: usize| need[i] && !matches!(prog.nodes[i].op, POp::Const(_));
    let (mut live, mut most) = (0u32, 0u32);
    for (i, n) in prog.nodes.iter().enumerate() {
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

/// The last node of the chunk that reads each needed value; `usize::MAX` for the reductions'
/// operands and the full outputs, which stay until the chunk's tail.
fn last_uses(prog: &Prog, need: &[bool], reds: &[PRef], full_outs: &[(usize, PRef)]) -> Vec<usize> {
    let mut last = vec![0usize; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        if need[i] {
            for a in args(&n.op) {
                last[a as usize] = i;
            }
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
    // Last use of each needed node within the chunk.
    let last = last_uses(prog, &need, &ph.reds, &ph.full_outs);
    // Each copy's column index (lane coordinate within the row).
    let mut cols: Vec<Option<VReg>> = vec![ph.colidx];
    for u in 1..copies {
        cols.push(match ph.colidx {
            Some(ci) => {
                let v = cx.va.take()?;
                cx.e.vbin(VBinOp::Add, VType::I32, v, ci, 128 * u);
                Some(v)
            }
            None => None,
        });
    }
    let mut maps: Vec<HashMap<PRef, VReg>> = vec![cx.regs.clone(); copies as usize];
    let mut temps: Vec<PRef> = Vec::new();
    for (i, n) in prog.nodes.iter().enumerate() {
        if !need[i] {
            continue;
        }
        debug_assert!(rows.ph[i] <= ph.p);
        let r = i as PRef;
        temps.push(r);
        for (u, map) in maps.iter_mut().enumerate() {
            std::mem::swap(&mut cx.regs, map);
            let v = match n.op {
                POp::Input(k) => {
                    let o = cx.ops[k as usize];
                    let esz = o.dtype.size() as u32;
                    let sr = rows.regs(esz);
                    let v = cx.va.take()?;
                    let at = Addr::new(sr.chunk, o.base + (128 * u as u32 * esz) as i32);
                    cx.e.vld(o.dtype.mem(), v, at, VAccess::rows(sr.sub_full));
                    crate::kernels::tile::vexpr::after_load(cx.e, o.dtype, v);
                    v
                }
                POp::Index(d) => {
                    let col = cols[u].ok_or_else(|| {
                        KernelError::Unsupported("Index without a column index".into())
                    })?;
                    if column_is_index(cx, d as usize) {
                        // The coordinate is the column index itself: share its register.
                        cx.borrow(r, col);
                        std::mem::swap(&mut cx.regs, map);
                        continue;
                    }
                    emit_row_index(cx, d as usize, col)?
                }
                _ => cx.emit_elementwise(r)?,
            };
            cx.bind(r, v);
            for a in args(&n.op) {
                if last[a as usize] == i && !prog.node(a).per_row {
                    cx.release(a);
                }
            }
            std::mem::swap(&mut cx.regs, map);
        }
    }
    for (u, map) in maps.iter_mut().enumerate() {
        std::mem::swap(&mut cx.regs, map);
        tail(cx, rows, &ph.accs, &ph.full_outs, cols[u], mask, u as u32)?;
        for r in &temps {
            cx.release(*r);
        }
        std::mem::swap(&mut cx.regs, map);
    }
    for c in cols.into_iter().skip(1).flatten() {
        cx.va.give(c);
    }
    Ok(())
}

/// The accumulations and full outputs of copy `u` of a chunk body, its values in registers.
fn tail(
    cx: &mut Ctx,
    rows: &Rows,
    accs: &[Acc],
    full_outs: &[(usize, PRef)],
    colidx: Option<VReg>,
    mask: Option<MReg>,
    u: u32,
) -> Result<(), KernelError> {
    reduce::accumulate(cx, accs, colidx, mask, u)?;
    for (k, o) in full_outs {
        let op = cx.ops[cx.inputs + k];
        let esz = op.dtype.size() as u32;
        let sr = rows.regs(esz);
        let at = Addr::new(sr.chunk, op.base + (128 * u * esz) as i32);
        store(cx, *o, op, at, VAccess::rows(sr.sub_full))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::peak;
    use crate::dtype::DType;
    use crate::ir::{BinOp, ProgBuilder, RedKind, UnOp};

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
