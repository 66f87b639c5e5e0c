//! The rows layout: reductions along rows of 8 sublanes, in phases.

use std::collections::HashMap;

use super::*;

/// Geometry of the rows layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowsGeom {
    /// Groups of 8 rows in the tile.
    pub groups: u32,
    /// Row length.
    pub len: u32,
    /// Padded row length (a multiple of 128).
    pub pitch: u32,
}

/// Phase in which each node's value is first available (see the module docs).
fn phases(prog: &Prog) -> Vec<u32> {
    let mut ph = vec![0u32; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        let a = args(&n.op)
            .iter()
            .map(|a| ph[*a as usize])
            .max()
            .unwrap_or(0);
        ph[i] = match n.op {
            POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_) => a + 1,
            _ => a,
        };
    }
    ph
}

fn identity(kind: RedKind, ty: DType) -> Scalar {
    match (kind, ty.is_float()) {
        (RedKind::Sum, _) => Scalar::Int(0),
        (RedKind::Prod, _) => Scalar::Int(1),
        (RedKind::Max, true) => Scalar::Float(f64::NEG_INFINITY),
        (RedKind::Min, true) => Scalar::Float(f64::INFINITY),
        (RedKind::Max, false) => Scalar::Int(i32::MIN as i64),
        (RedKind::Min, false) => Scalar::Int(i32::MAX as i64),
    }
}

/// The accumulating vector operation and the cross-lane reduction (none for products: the
/// cross-lane unit has no product, see [`lane_product`]).
fn red_op(kind: RedKind) -> (VBinOp, Option<RedOp>) {
    match kind {
        RedKind::Sum => (VBinOp::Add, Some(RedOp::Add)),
        RedKind::Max => (VBinOp::Max, Some(RedOp::Max)),
        RedKind::Min => (VBinOp::Min, Some(RedOp::Min)),
        RedKind::Prod => (VBinOp::Mul, None),
    }
}

/// Multiplies the 128 lanes of each sublane of `acc` together, the result in every lane: a
/// log2 tree of rotations by 64, 32, ..., 1. After the rotation by `s` the vector is periodic
/// with period `s` and each lane multiplied the same pair of values, so every lane ends with
/// bitwise the same product.
fn lane_product(cx: &mut Ctx, ty: VType, acc: VReg) -> Result<(), KernelError> {
    let t = cx.va.take()?;
    let mut s = 64;
    while s >= 1 {
        cx.e.push(Instr::VRot {
            axis: Axis::Lane,
            dst: t,
            a: acc,
            amount: SSrc::Imm(s),
        });
        cx.e.push(Instr::VBin {
            op: VBinOp::Mul,
            ty,
            dst: acc,
            a: acc,
            b: VSrc::V(t),
        });
        s /= 2;
    }
    cx.va.give(t);
    Ok(())
}

/// The value of `Index(d)` in the rows layout: for a row dim, from the column index `col`
/// (position in the row, row-major over the row dims), `(col / inner) % size`; for an outer dim,
/// the same from the flat row index of each sublane's row.
/// Whether the coordinate of dim `d` is the flat column index itself (the only row dim, or
/// the first of them with nothing after it: no division or remainder).
fn column_is_index(cx: &Ctx, d: usize) -> bool {
    let shape = cx.orig_shape;
    d < shape.len()
        && d >= cx.row_start
        && d == cx.row_start
        && shape[d + 1..].iter().product::<usize>() == 1
}

fn emit_row_index(cx: &mut Ctx, d: usize, col: VReg) -> Result<VReg, KernelError> {
    let shape = cx.orig_shape;
    if d >= shape.len() {
        return Err(KernelError::Unsupported(format!(
            "coordinate of dim {d} of a {}-dim iteration space",
            shape.len()
        )));
    }
    let v = cx.va.take()?;
    if d < cx.row_start && shape[d] == 1 {
        cx.e.push(Instr::VMov {
            ty: VType::I32,
            dst: v,
            src: VSrc::Imm(0),
        });
        return Ok(v);
    }
    let (first, end) = if d < cx.row_start {
        // Row r of the group is sublane r: flat row index = group base + sublane.
        let Some(base) = cx.row_base else {
            cx.va.give(v);
            return Err(KernelError::Unsupported(
                "coordinates of an outer dim without a row index".into(),
            ));
        };
        cx.e.push(Instr::VIota {
            kind: IotaKind::Sub,
            dst: v,
        });
        cx.e.push(Instr::VBin {
            op: VBinOp::Add,
            ty: VType::I32,
            dst: v,
            a: v,
            b: VSrc::S(base),
        });
        (0, cx.row_start)
    } else {
        cx.e.push(Instr::VMov {
            ty: VType::I32,
            dst: v,
            src: VSrc::V(col),
        });
        (cx.row_start, shape.len())
    };
    let inner: usize = shape[d + 1..end].iter().product();
    if inner > 1 {
        cx.e.push(Instr::VBin {
            op: VBinOp::Div,
            ty: VType::I32,
            dst: v,
            a: v,
            b: VSrc::Imm(inner as u32),
        });
    }
    if d > first {
        cx.e.push(Instr::VBin {
            op: VBinOp::Rem,
            ty: VType::I32,
            dst: v,
            a: v,
            b: VSrc::Imm(shape[d] as u32),
        });
    }
    Ok(v)
}

/// The first dim of the row in `shape`: the shortest suffix of dims holding `len` elements
/// (size-1 dims left out of it have coordinate 0 either way).
pub(crate) fn row_start(shape: &[usize], len: usize) -> usize {
    let mut k = shape.len();
    let mut n = 1usize;
    while k > 0 && n < len {
        k -= 1;
        n *= shape[k];
    }
    k
}

/// The rows body: all groups of the tile, every phase. `orig_shape` is the node's iteration
/// shape before coalescing (`Index` nodes refer to its dims); `tile_row` holds the flat index
/// (over the outer dims) of the tile's first row, for coordinates of outer dims (the body
/// advances it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows(
    e: &mut Emitter,
    pool: &mut RegPool,
    prog: &Prog,
    ops: &[VOperand],
    inputs: usize,
    g: RowsGeom,
    vregs: u32,
    orig_shape: &[usize],
    tile_row: Option<SReg>,
) -> Result<(), KernelError> {
    let ph = phases(prog);
    let max_phase = ph.iter().copied().max().unwrap_or(0);
    let take = |pool: &mut RegPool| {
        pool.take()
            .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
    };
    // Registers: group counter, test, and per element size: the group's full-row offset and
    // per-row offset, the chunk address, and the strides (constants).
    let gcount = take(pool)?;
    let test = take(pool)?;
    let mut sizes: Vec<u32> = ops.iter().map(|o| o.dtype.size() as u32).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut size_regs: Vec<(u32, SReg, SReg, SReg)> = Vec::new(); // (esz, group full offset, group per-row offset, chunk address)
    for s in &sizes {
        let (a, b, c) = (take(pool)?, take(pool)?, take(pool)?);
        size_regs.push((*s, a, b, c));
    }
    let stride_regs: Vec<(u32, SReg, SReg)> = sizes
        .iter()
        .map(|s| (*s, e.konst((g.pitch * s) as i32), e.konst(*s as i32)))
        .collect();
    let find = |esz: u32| {
        *size_regs
            .iter()
            .find(|x| x.0 == esz)
            .expect("register per size")
    };
    let sub_full = |esz: u32| {
        stride_regs
            .iter()
            .find(|x| x.0 == esz)
            .expect("stride per size")
            .1
    };
    let sub_row = |esz: u32| {
        stride_regs
            .iter()
            .find(|x| x.0 == esz)
            .expect("stride per size")
            .2
    };

    let mut cx = Ctx {
        e,
        va: VAlloc::new(2, vregs),
        prog,
        ops,
        inputs,
        regs: HashMap::new(),
        refs: HashMap::new(),
        pinned: Vec::new(),
        orig_shape,
        row_start: row_start(orig_shape, g.len as usize),
        row_base: tile_row,
    };
    let nchunks = g.pitch / 128;
    let tail = g.len - (nchunks - 1) * 128;
    // m1 masks the valid lanes of the last chunk.
    let tail_mask = MReg::n(1);
    if tail < 128 {
        let iota = cx.va.take()?;
        cx.e.push(Instr::VIota {
            kind: IotaKind::Lane,
            dst: iota,
        });
        cx.e.push(Instr::VCmp {
            op: CmpOp::Lt,
            ty: VType::I32,
            dst: tail_mask,
            a: iota,
            b: VSrc::Imm(tail),
        });
        cx.va.give(iota);
    }
    for (_, a, b, _) in &size_regs {
        cx.e.b.smov(*a, 0);
        cx.e.b.smov(*b, 0);
    }
    cx.e.b.smov(gcount, 0);
    let top = cx.e.b.here();

    // Constants: pinned for the group.
    for (i, n) in prog.nodes.iter().enumerate() {
        if let POp::Const(_) = n.op {
            let v = cx.emit_elementwise(i as PRef)?;
            cx.bind(i as PRef, v);
            cx.pinned.push(i as PRef);
        }
    }
    // Per-row inputs: loaded once per group.
    for (i, n) in prog.nodes.iter().enumerate() {
        if let POp::Input(k) = n.op
            && n.per_row
        {
            let o = ops[k as usize];
            let esz = o.dtype.size() as u32;
            let v = cx.va.take()?;
            cx.e.push(Instr::VLoad {
                fmt: o.dtype.mem(),
                dst: v,
                addr: Addr::new(find(esz).2, o.base),
                sub_stride: Some(sub_row(esz)),
                lane_stride: Some(SReg::ZERO),
                mask: None,
            });
            cx.bind(i as PRef, v);
            cx.pinned.push(i as PRef);
        }
    }
    // Per-row values computed from per-row values, phase by phase; reductions at phase ends.
    let per_row_step = |cx: &mut Ctx, phase: u32| -> Result<(), KernelError> {
        for (i, n) in prog.nodes.iter().enumerate() {
            let r = i as PRef;
            if n.per_row
                && ph[i] == phase
                && !cx.regs.contains_key(&r)
                && !matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_))
            {
                let v = cx.emit_elementwise(r)?;
                cx.bind(r, v);
                cx.pinned.push(r);
            }
        }
        // Per-row outputs now available.
        for (k, o) in prog.outputs.iter().enumerate() {
            let n = prog.node(*o);
            if n.per_row && ph[*o as usize] == phase {
                let op = ops[inputs + k];
                let esz = op.dtype.size() as u32;
                store(
                    cx,
                    *o,
                    op,
                    Addr::new(find(esz).2, op.base),
                    Some(sub_row(esz)),
                    Some(SReg::ZERO),
                )?;
            }
        }
        Ok(())
    };
    per_row_step(&mut cx, 0)?;

    for p in 0..=max_phase {
        // What this phase's chunk loop computes: reductions of phase-p values and full outputs
        // of phase p.
        let reds: Vec<PRef> = prog
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_)))
            .filter(|(i, _)| ph[*i] == p + 1)
            .map(|(i, _)| i as PRef)
            .collect();
        let full_outs: Vec<(usize, PRef)> = prog
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| !prog.node(**o).per_row && ph[**o as usize] == p)
            .map(|(k, o)| (k, *o))
            .collect();
        if reds.is_empty() && full_outs.is_empty() {
            if p > 0 {
                per_row_step(&mut cx, p)?;
            }
            continue;
        }
        // Accumulators.
        let mut accs: Vec<(PRef, VReg, Option<VReg>)> = Vec::new();
        for &r in &reds {
            let n = prog.node(r);
            let acc = cx.va.take()?;
            let (init, idx) = match n.op {
                POp::Reduce(kind, a) => (identity(kind, prog.node(a).dtype), None),
                POp::ArgMax(_) => (Scalar::Float(f64::NEG_INFINITY), Some(cx.va.take()?)),
                POp::ArgMin(_) => (Scalar::Float(f64::INFINITY), Some(cx.va.take()?)),
                _ => unreachable!(),
            };
            let arg_ty = match n.op {
                POp::Reduce(_, a) | POp::ArgMax(a) | POp::ArgMin(a) => prog.node(a).dtype,
                _ => unreachable!(),
            };
            let init = if arg_ty.is_float() {
                init
            } else if matches!(n.op, POp::ArgMax(_)) {
                Scalar::Int(i32::MIN as i64)
            } else if matches!(n.op, POp::ArgMin(_)) {
                Scalar::Int(i32::MAX as i64)
            } else {
                init
            };
            vexpr::emit_const(cx.e, init, arg_ty, acc);
            if let Some(ix) = idx {
                cx.e.push(Instr::VMov {
                    ty: VType::I32,
                    dst: ix,
                    src: VSrc::Imm(0),
                });
            }
            accs.push((r, acc, idx));
        }
        let uses_index = prog.nodes.iter().any(|n| matches!(n.op, POp::Index(_)));
        let colidx = if uses_index || accs.iter().any(|a| a.2.is_some()) {
            let v = cx.va.take()?;
            cx.e.push(Instr::VIota {
                kind: IotaKind::Lane,
                dst: v,
            });
            Some(v)
        } else {
            None
        };
        // Chunk address registers start at the group's offset.
        for (_, a, _, c) in &size_regs {
            cx.e.push(Instr::SAlu {
                op: SAluOp::Add,
                dst: *c,
                a: *a,
                b: SSrc::Imm(0),
            });
        }
        let full_chunks = if tail < 128 { nchunks - 1 } else { nchunks };
        // Chunks per loop iteration: as many copies of the chunk body as the free vector
        // registers hold (each copy needs its values and a column index), at most 4.
        // Sums, maxima and minima keep one accumulator per copy (independent chains the
        // in-order core can overlap), combined in copy order after the loop.
        let multi: Vec<bool> = accs
            .iter()
            .map(|(r, _, _)| {
                matches!(
                    prog.node(*r).op,
                    POp::Reduce(RedKind::Sum | RedKind::Max | RedKind::Min, _)
                )
            })
            .collect();
        let n_multi = multi.iter().filter(|m| **m).count() as u32;
        let held = cx.va.free_count();
        let unroll = (held / (chunk_peak(prog, &ph, p, &reds, &full_outs) + 1 + n_multi))
            .clamp(1, MAX_UNROLL);
        let mut extra: Vec<Vec<VReg>> = Vec::new();
        for (k, (r, _, _)) in accs.iter().enumerate() {
            let mut v = Vec::new();
            if multi[k] {
                let (kind, a) = match prog.node(*r).op {
                    POp::Reduce(kind, a) => (kind, a),
                    _ => unreachable!("multi accumulators are for reductions"),
                };
                let ty = prog.node(a).dtype;
                for _ in 1..unroll {
                    let x = cx.va.take()?;
                    vexpr::emit_const(cx.e, identity(kind, ty), ty, x);
                    v.push(x);
                }
            }
            extra.push(v);
        }
        let emit_chunks = |cx: &mut Ctx, copies: u32, masked: bool| -> Result<(), KernelError> {
            chunk_body(
                cx,
                &ph,
                p,
                &reds,
                &full_outs,
                &accs,
                &extra,
                colidx,
                masked.then_some(tail_mask),
                copies,
                &|esz| (find(esz).3, sub_full(esz)),
            )?;
            for (s, _, _, c) in &size_regs {
                cx.e.push(Instr::SAlu {
                    op: SAluOp::Add,
                    dst: *c,
                    a: *c,
                    b: SSrc::Imm((128 * copies * *s) as i32),
                });
            }
            if let Some(ci) = colidx {
                cx.e.push(Instr::VBin {
                    op: VBinOp::Add,
                    ty: VType::I32,
                    dst: ci,
                    a: ci,
                    b: VSrc::Imm(128 * copies),
                });
            }
            Ok(())
        };
        let iterations = full_chunks / unroll;
        if iterations > 0 {
            let ccount = pool
                .take()
                .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))?;
            cx.e.b.smov(ccount, 0);
            let ctop = cx.e.b.here();
            emit_chunks(&mut cx, unroll, false)?;
            if iterations > 1 {
                cx.e.push(Instr::SAlu {
                    op: SAluOp::Add,
                    dst: ccount,
                    a: ccount,
                    b: SSrc::Imm(1),
                });
                cx.e.push(Instr::SCmp {
                    op: CmpOp::Lt,
                    dst: test,
                    a: ccount,
                    b: SSrc::Imm(iterations as i32),
                });
                cx.e.b.brnz(test, ctop);
            }
            pool.give(ccount);
        }
        if full_chunks % unroll > 0 {
            emit_chunks(&mut cx, full_chunks % unroll, false)?;
        }
        if tail < 128 {
            emit_chunks(&mut cx, 1, true)?;
        }
        // Finalize the reductions into per-row values.
        for ((r, acc, idx), more) in accs.into_iter().zip(extra) {
            let n = prog.node(r);
            match n.op {
                POp::Reduce(kind, a) => {
                    let ty = prog.node(a).dtype.lane();
                    for x in more {
                        cx.e.push(Instr::VBin {
                            op: red_op(kind).0,
                            ty,
                            dst: acc,
                            a: acc,
                            b: VSrc::V(x),
                        });
                        cx.va.give(x);
                    }
                    match red_op(kind).1 {
                        Some(op) => cx.e.push(Instr::VRed {
                            op,
                            ty,
                            axis: Axis::Lane,
                            dst: acc,
                            a: acc,
                        }),
                        None => lane_product(&mut cx, ty, acc)?,
                    }
                    cx.bind(r, acc);
                    cx.pinned.push(r);
                }
                POp::ArgMax(a) | POp::ArgMin(a) => {
                    let ty = prog.node(a).dtype.lane();
                    let idx = idx.expect("arg reductions track an index");
                    let m = cx.va.take()?;
                    let op = if matches!(n.op, POp::ArgMax(_)) {
                        RedOp::Max
                    } else {
                        RedOp::Min
                    };
                    cx.e.push(Instr::VRed {
                        op,
                        ty,
                        axis: Axis::Lane,
                        dst: m,
                        a: acc,
                    });
                    let (c1, c2, c3) = (cx.va.take_mask()?, cx.va.take_mask()?, cx.va.take_mask()?);
                    cx.e.push(Instr::VCmp {
                        op: CmpOp::Eq,
                        ty,
                        dst: c1,
                        a: acc,
                        b: VSrc::V(m),
                    });
                    if ty == VType::F32 {
                        cx.e.push(Instr::VCmp {
                            op: CmpOp::Ne,
                            ty,
                            dst: c2,
                            a: acc,
                            b: VSrc::V(acc),
                        });
                        cx.e.push(Instr::VCmp {
                            op: CmpOp::Ne,
                            ty,
                            dst: c3,
                            a: m,
                            b: VSrc::V(m),
                        });
                        cx.e.push(Instr::MLogic {
                            op: MaskOp::And,
                            dst: c2,
                            a: c2,
                            b: c3,
                        });
                        cx.e.push(Instr::MLogic {
                            op: MaskOp::Or,
                            dst: c1,
                            a: c1,
                            b: c2,
                        });
                    }
                    cx.e.push(Instr::VSel {
                        ty: VType::I32,
                        dst: idx,
                        mask: c1,
                        a: idx,
                        b: VSrc::Imm(i32::MAX as u32),
                    });
                    cx.e.push(Instr::VRed {
                        op: RedOp::Min,
                        ty: VType::I32,
                        axis: Axis::Lane,
                        dst: idx,
                        a: idx,
                    });
                    for mm in [c1, c2, c3] {
                        cx.va.give_mask(mm);
                    }
                    cx.va.give(m);
                    cx.va.give(acc);
                    cx.bind(r, idx);
                    cx.pinned.push(r);
                }
                _ => unreachable!(),
            }
        }
        if let Some(ci) = colidx {
            cx.va.give(ci);
        }
        per_row_step(&mut cx, p + 1)?;
    }
    // Next group.
    for p in cx.pinned.clone() {
        cx.drop_value(p);
    }
    cx.pinned.clear();
    for (s, a, b, _) in &size_regs {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: *a,
            a: *a,
            b: SSrc::Imm((8 * g.pitch * s) as i32),
        });
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: *b,
            a: *b,
            b: SSrc::Imm((8 * s) as i32),
        });
    }
    if let Some(base) = cx.row_base {
        cx.e.push(Instr::SAlu {
            op: SAluOp::Add,
            dst: base,
            a: base,
            b: SSrc::Imm(8),
        });
    }
    cx.e.push(Instr::SAlu {
        op: SAluOp::Add,
        dst: gcount,
        a: gcount,
        b: SSrc::Imm(1),
    });
    cx.e.push(Instr::SCmp {
        op: CmpOp::Lt,
        dst: test,
        a: gcount,
        b: SSrc::Imm(g.groups as i32),
    });
    cx.e.b.brnz(test, top);
    for (_, a, b, c) in size_regs {
        pool.give(a);
        pool.give(b);
        pool.give(c);
    }
    pool.give(gcount);
    pool.give(test);
    Ok(())
}

/// Stores value `r` to operand `op` at `addr`, converting to the operand's dtype.
fn store(
    cx: &mut Ctx,
    r: PRef,
    op: VOperand,
    addr: Addr,
    sub: Option<SReg>,
    lane: Option<SReg>,
) -> Result<(), KernelError> {
    let mut v = cx.reg(r);
    let from = cx.prog.node(r).dtype;
    let tmp = if from != op.dtype {
        let t = cx.va.take()?;
        vexpr::emit_cast(cx.e, &mut cx.va, from, op.dtype, t, v)?;
        v = t;
        Some(t)
    } else {
        None
    };
    cx.e.push(Instr::VStore {
        fmt: op.dtype.mem(),
        src: v,
        addr,
        sub_stride: sub,
        lane_stride: lane,
        mask: None,
    });
    if let Some(t) = tmp {
        cx.va.give(t);
    }
    Ok(())
}

/// Most chunks per loop iteration.
const MAX_UNROLL: u32 = 4;

/// The full nodes a chunk of phase `p` computes: ancestors of the reductions' operands and of
/// the full outputs.
fn chunk_needs(prog: &Prog, reds: &[PRef], full_outs: &[(usize, PRef)]) -> Vec<bool> {
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

/// Vector registers one copy of a chunk body holds at its peak (an upper bound: every value
/// computed stays until the end of the chunk, plus two temporaries).
fn chunk_peak(
    prog: &Prog,
    _ph: &[u32],
    _p: u32,
    reds: &[PRef],
    full_outs: &[(usize, PRef)],
) -> u32 {
    let need = chunk_needs(prog, reds, full_outs);
    let computed = need
        .iter()
        .enumerate()
        .filter(|(i, n)| **n && !matches!(prog.nodes[*i].op, POp::Const(_)))
        .count() as u32;
    computed + 2
}

/// `copies` consecutive column chunks of phase `p` (the first at the chunk address registers):
/// the full values needed, the accumulations (in chunk order), the full outputs. The copies are
/// emitted node by node so that the in-order core has independent work while loads and ALU
/// results are in flight.
#[allow(clippy::too_many_arguments)]
fn chunk_body(
    cx: &mut Ctx,
    ph: &[u32],
    p: u32,
    reds: &[PRef],
    full_outs: &[(usize, PRef)],
    accs: &[(PRef, VReg, Option<VReg>)],
    extra: &[Vec<VReg>],
    colidx: Option<VReg>,
    mask: Option<MReg>,
    copies: u32,
    addr_of: &dyn Fn(u32) -> (SReg, SReg),
) -> Result<(), KernelError> {
    let prog = cx.prog;
    let need = chunk_needs(prog, reds, full_outs);
    // Last use of each needed node within the chunk.
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
    // Each copy's column index (lane coordinate within the row).
    let mut cols: Vec<Option<VReg>> = vec![colidx];
    for u in 1..copies {
        cols.push(match colidx {
            Some(ci) => {
                let v = cx.va.take()?;
                cx.e.push(Instr::VBin {
                    op: VBinOp::Add,
                    ty: VType::I32,
                    dst: v,
                    a: ci,
                    b: VSrc::Imm(128 * u),
                });
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
        debug_assert!(ph[i] <= p);
        let r = i as PRef;
        temps.push(r);
        for (u, map) in maps.iter_mut().enumerate() {
            std::mem::swap(&mut cx.regs, map);
            let v = match n.op {
                POp::Input(k) => {
                    let o = cx.ops[k as usize];
                    let esz = o.dtype.size() as u32;
                    let (base, sub) = addr_of(esz);
                    let v = cx.va.take()?;
                    cx.e.push(Instr::VLoad {
                        fmt: o.dtype.mem(),
                        dst: v,
                        addr: Addr::new(base, o.base + (128 * u as u32 * esz) as i32),
                        sub_stride: Some(sub),
                        lane_stride: None,
                        mask: None,
                    });
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
        let colidx = cols[u];
        chunk_tail(cx, accs, extra, colidx, mask, full_outs, u as u32, addr_of)?;
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
#[allow(clippy::too_many_arguments)]
fn chunk_tail(
    cx: &mut Ctx,
    accs: &[(PRef, VReg, Option<VReg>)],
    extra: &[Vec<VReg>],
    colidx: Option<VReg>,
    mask: Option<MReg>,
    full_outs: &[(usize, PRef)],
    u: u32,
    addr_of: &dyn Fn(u32) -> (SReg, SReg),
) -> Result<(), KernelError> {
    let prog = cx.prog;
    // Accumulate (copy `u` into its own accumulator where there is one).
    for ((r, acc0, idx), more) in accs.iter().zip(extra) {
        let acc = if u > 0 && (u as usize) <= more.len() {
            &more[u as usize - 1]
        } else {
            acc0
        };
        let n = prog.node(*r);
        match n.op {
            POp::Reduce(kind, a) => {
                let ty = prog.node(a).dtype;
                let mut v = cx.reg(a);
                let masked = if let Some(m) = mask {
                    let t = cx.va.take()?;
                    let id = vexpr::const_bits(identity(kind, ty), ty);
                    cx.e.push(Instr::VSel {
                        ty: ty.lane(),
                        dst: t,
                        mask: m,
                        a: v,
                        b: VSrc::Imm(id),
                    });
                    v = t;
                    Some(t)
                } else {
                    None
                };
                cx.e.push(Instr::VBin {
                    op: red_op(kind).0,
                    ty: ty.lane(),
                    dst: *acc,
                    a: *acc,
                    b: VSrc::V(v),
                });
                if let Some(t) = masked {
                    cx.va.give(t);
                }
            }
            POp::ArgMax(a) | POp::ArgMin(a) => {
                let ty = prog.node(a).dtype.lane();
                let v = cx.reg(a);
                let idx = idx.expect("index accumulator");
                let better = cx.va.take_mask()?;
                let t1 = cx.va.take_mask()?;
                let op = if matches!(n.op, POp::ArgMax(_)) {
                    CmpOp::Gt
                } else {
                    CmpOp::Lt
                };
                cx.e.push(Instr::VCmp {
                    op,
                    ty,
                    dst: better,
                    a: v,
                    b: VSrc::V(*acc),
                });
                if ty == VType::F32 {
                    // A NaN beats anything but an earlier NaN.
                    let t2 = cx.va.take_mask()?;
                    cx.e.push(Instr::VCmp {
                        op: CmpOp::Ne,
                        ty,
                        dst: t1,
                        a: v,
                        b: VSrc::V(v),
                    });
                    cx.e.push(Instr::VCmp {
                        op: CmpOp::Eq,
                        ty,
                        dst: t2,
                        a: *acc,
                        b: VSrc::V(*acc),
                    });
                    cx.e.push(Instr::MLogic {
                        op: MaskOp::And,
                        dst: t1,
                        a: t1,
                        b: t2,
                    });
                    cx.e.push(Instr::MLogic {
                        op: MaskOp::Or,
                        dst: better,
                        a: better,
                        b: t1,
                    });
                    cx.va.give_mask(t2);
                }
                if let Some(m) = mask {
                    cx.e.push(Instr::MLogic {
                        op: MaskOp::And,
                        dst: better,
                        a: better,
                        b: m,
                    });
                }
                cx.e.push(Instr::VSel {
                    ty,
                    dst: *acc,
                    mask: better,
                    a: v,
                    b: VSrc::V(*acc),
                });
                cx.e.push(Instr::VSel {
                    ty: VType::I32,
                    dst: idx,
                    mask: better,
                    a: colidx.expect("column index"),
                    b: VSrc::V(idx),
                });
                cx.va.give_mask(better);
                cx.va.give_mask(t1);
            }
            _ => unreachable!(),
        }
    }
    // Full outputs.
    for (k, o) in full_outs {
        let op = cx.ops[cx.inputs + k];
        let esz = op.dtype.size() as u32;
        let (base, sub) = addr_of(esz);
        store(
            cx,
            *o,
            op,
            Addr::new(base, op.base + (128 * u * esz) as i32),
            Some(sub),
            None,
        )?;
    }
    Ok(())
}
