//! The dense layout: the program over runs of 1024 elements per operand.
//!
//! The loop body evaluates the program on `U` consecutive vector registers of every operand,
//! node by node across the copies, so that the in-order core always has independent work to
//! issue while a load or an ALU result is in flight (`U` is as large as the vector registers
//! allow, at most 4); a straight-line tail handles the registers left over.

use std::collections::HashMap;

use super::*;

/// Most copies of the program per loop iteration.
const MAX_UNROLL: u32 = 4;

/// Registers a copy of the program holds at its peak (values live across nodes, plus two
/// temporaries for casts, compares and selects), not counting constants when they are pinned
/// (`pinned_consts`), counting them as values live from their node to their last use when not.
fn peak_live(prog: &Prog, last: &[usize], pinned_consts: bool) -> u32 {
    let is_pinned = |op: &POp| pinned_consts && matches!(op, POp::Const(_));
    let mut live = 0i64;
    let mut peak = 0i64;
    for (i, n) in prog.nodes.iter().enumerate() {
        if is_pinned(&n.op) {
            continue;
        }
        live += 1;
        peak = peak.max(live + 2);
        for a in args(&n.op) {
            if last[a as usize] == i && !is_pinned(&prog.node(a).op) {
                live -= 1;
            }
        }
    }
    (peak.max(3)) as u32
}

/// The dense body: `n_vregs` registers' worth of elements of every operand.
#[allow(clippy::too_many_arguments)]
pub fn dense(
    e: &mut Emitter,
    pool: &mut RegPool,
    prog: &Prog,
    ops: &[VOperand],
    inputs: usize,
    n_vregs: u32,
    vregs: u32,
    index: Option<IndexCtx>,
) -> Result<(), KernelError> {
    if prog.has_reductions() {
        return Err(KernelError::Unsupported(
            "dense tile body with reductions".into(),
        ));
    }
    let last = last_uses(prog);
    let mut cx = Ctx::new(e, prog, ops, inputs, vregs);
    // Constants live in registers for the whole loop when they fit beside one copy of the
    // program (a long series, e.g. a Bessel function's Chebyshev coefficients, does not: its
    // constants are then materialised where they are used, like any other value).
    let consts = prog
        .nodes
        .iter()
        .filter(|n| matches!(n.op, POp::Const(_)))
        .count() as u32;
    let pin = 2 + consts + peak_live(prog, &last, true) <= vregs;
    if pin {
        cx.pin_constants()?;
    }
    let free = vregs.saturating_sub(2 + cx.pinned.len() as u32);
    let unroll = (free / peak_live(prog, &last, pin)).clamp(1, MAX_UNROLL);
    let mut sizes: Vec<u32> = ops.iter().map(|o| o.dtype.size() as u32).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut offs = Offsets { regs: Vec::new() };
    for s in &sizes {
        let r = sreg(pool)?;
        cx.e.smov(r, 0);
        offs.regs.push((*s, r));
    }
    let flat = if index.is_some() {
        Some(sreg(pool)?)
    } else {
        None
    };
    if let (Some(f), Some(ix)) = (flat, &index) {
        cx.e.sadd(f, ix.flat_base, 0);
    }
    let consts = cx.regs.clone();
    let iterations = n_vregs / unroll;
    if iterations > 0 {
        let counter = sreg(pool)?;
        let test = sreg(pool)?;
        let l =
            cx.e.begin_loop(counter, test, iterations, 1)
                .straight_if_once();
        pass(&mut cx, &consts, &last, unroll, &offs, flat, index.as_ref())?;
        advance(&mut cx, &offs, flat, unroll);
        cx.e.end_loop(l);
        pool.give(counter);
        pool.give(test);
    }
    let tail = n_vregs % unroll;
    if tail > 0 {
        pass(&mut cx, &consts, &last, tail, &offs, flat, index.as_ref())?;
    }
    for p in cx.pinned.clone() {
        cx.drop_value(p);
    }
    for (_, r) in offs.regs {
        pool.give(r);
    }
    if let Some(f) = flat {
        pool.give(f);
    }
    let _ = cx.inputs;
    Ok(())
}

/// Moves the operand offsets (and the flat index) past `copies` registers.
fn advance(cx: &mut Ctx, offs: &Offsets, flat: Option<SReg>, copies: u32) {
    for (s, r) in &offs.regs {
        cx.e.sadd(*r, *r, (1024 * copies * *s) as i32);
    }
    if let Some(f) = flat {
        cx.e.sadd(f, f, (1024 * copies) as i32);
    }
}

/// The program on `copies` consecutive registers at the current offsets, node by node across
/// the copies.
fn pass(
    cx: &mut Ctx,
    consts: &HashMap<PRef, VReg>,
    last: &[usize],
    copies: u32,
    offs: &Offsets,
    flat: Option<SReg>,
    index: Option<&IndexCtx>,
) -> Result<(), KernelError> {
    let prog = cx.prog;
    let ops = cx.ops;
    let mut maps: Vec<HashMap<PRef, VReg>> = vec![consts.clone(); copies as usize];
    for (i, n) in prog.nodes.iter().enumerate() {
        let r = i as PRef;
        if matches!(n.op, POp::Const(_)) && cx.pinned.contains(&r) {
            continue;
        }
        for (u, map) in maps.iter_mut().enumerate() {
            std::mem::swap(&mut cx.regs, map);
            let u = u as u32;
            let v = match n.op {
                POp::Input(k) => {
                    let o = ops[k as usize];
                    let v = cx.va.take()?;
                    cx.e.vld(o.dtype.mem(), v, offs.at(o, u), VAccess::DENSE);
                    crate::kernels::tile::vexpr::after_load(cx.e, o.dtype, v);
                    v
                }
                POp::Index(d) => {
                    let ix = index.ok_or_else(|| {
                        KernelError::Unsupported("Index without an index context".into())
                    })?;
                    let v = cx.va.take()?;
                    let flat = flat.expect("set with index");
                    cx.e.viota(IotaKind::Flat, v);
                    cx.e.vbin(VBinOp::Add, VType::I32, v, v, flat);
                    if u > 0 {
                        cx.e.vbin(VBinOp::Add, VType::I32, v, v, u * 1024);
                    }
                    // The coordinate of dim d of the flat index.
                    let d = d as usize;
                    let inner: usize = ix.shape[d + 1..].iter().product();
                    coordinate(cx.e, v, inner, (d > 0).then_some(ix.shape[d]));
                    v
                }
                _ => cx.emit_elementwise(r)?,
            };
            cx.bind(r, v);
            for a in args(&n.op) {
                if last[a as usize] == i {
                    cx.release(a);
                }
            }
            std::mem::swap(&mut cx.regs, map);
        }
    }
    for (u, map) in maps.iter_mut().enumerate() {
        std::mem::swap(&mut cx.regs, map);
        let u = u as u32;
        for (k, o) in prog.outputs.iter().enumerate() {
            let op = ops[cx.inputs + k];
            store(cx, *o, op, offs.at(op, u), VAccess::DENSE)?;
        }
        let outs: Vec<PRef> = prog.outputs.clone();
        for o in outs {
            cx.release(o);
        }
        std::mem::swap(&mut cx.regs, map);
    }
    Ok(())
}
