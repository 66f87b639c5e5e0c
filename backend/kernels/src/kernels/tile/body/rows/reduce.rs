//! Reductions along the row: accumulators, what each chunk adds to them, and the cross-lane
//! finish into per-row values (one per sublane, broadcast along the lanes).
//!
//! Sums, maxima and minima accumulate elementwise over the chunks (one accumulator per copy of
//! an unrolled chunk loop, combined in copy order) and then across the 128 lanes with the
//! cross-lane unit's pairwise tree; products across lanes take a tree of rotations
//! ([`lane_product`]). Arg-max and arg-min keep the best value and its column per lane, a NaN
//! beating anything but an earlier NaN, and finish with the smallest column holding the best.

use tpuemu_isa::ops::{Axis, CmpOp, MaskOp, RedOp, VBinOp, VType};
use tpuemu_isa::{MReg, VReg};

use super::super::{Ctx, vexpr};
use crate::dtype::{DType, Scalar};
use crate::ir::{POp, PRef, Prog, RedKind};
use crate::kernels::KernelError;

/// A reduction accumulating in a phase's chunk loop.
#[derive(Clone, Debug)]
pub(super) struct Acc {
    /// The reduction node.
    pub r: PRef,
    /// Its accumulator (copy 0's).
    pub acc: VReg,
    /// Arg reductions: the column of the best value so far.
    pub idx: Option<VReg>,
    /// Sums, maxima and minima: the accumulators of copies 1.. of the unrolled chunk loop.
    pub more: Vec<VReg>,
}

impl Acc {
    /// The accumulator of copy `u`.
    fn of_copy(&self, u: u32) -> VReg {
        if u > 0 && (u as usize) <= self.more.len() {
            self.more[u as usize - 1]
        } else {
            self.acc
        }
    }
}

/// The identity of a reduction in lanes of `ty`.
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
        cx.e.vrot(Axis::Lane, t, acc, s);
        cx.e.vbin(VBinOp::Mul, ty, acc, acc, t);
        s /= 2;
    }
    cx.va.give(t);
    Ok(())
}

/// Whether reduction `r` keeps one accumulator per copy of the chunk loop (sums, maxima and
/// minima: independent chains the in-order core can overlap).
pub(super) fn splits(prog: &Prog, r: PRef) -> bool {
    matches!(
        prog.node(r).op,
        POp::Reduce(RedKind::Sum | RedKind::Max | RedKind::Min, _)
    )
}

/// Accumulators of `reds`, at the identity (arg reductions: the worst value, column 0).
pub(super) fn init(cx: &mut Ctx, reds: &[PRef]) -> Result<Vec<Acc>, KernelError> {
    let prog = cx.prog;
    let mut accs = Vec::new();
    for &r in reds {
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
            cx.e.vmov(VType::I32, ix, 0u32);
        }
        accs.push(Acc {
            r,
            acc,
            idx,
            more: Vec::new(),
        });
    }
    Ok(accs)
}

/// Gives each splitting accumulator one more per copy of a loop unrolled `unroll` times.
pub(super) fn add_copies(cx: &mut Ctx, accs: &mut [Acc], unroll: u32) -> Result<(), KernelError> {
    for a in accs.iter_mut() {
        if !splits(cx.prog, a.r) {
            continue;
        }
        let (kind, x) = match cx.prog.node(a.r).op {
            POp::Reduce(kind, x) => (kind, x),
            _ => unreachable!("multi accumulators are for reductions"),
        };
        let ty = cx.prog.node(x).dtype;
        for _ in 1..unroll {
            let v = cx.va.take()?;
            vexpr::emit_const(cx.e, identity(kind, ty), ty, v);
            a.more.push(v);
        }
    }
    Ok(())
}

/// Adds copy `u` of a chunk (its values in registers) into the accumulators; `mask` leaves out
/// the lanes past the row's end, `colidx` is the copy's column index.
pub(super) fn accumulate(
    cx: &mut Ctx,
    accs: &[Acc],
    colidx: Option<VReg>,
    mask: Option<MReg>,
    u: u32,
) -> Result<(), KernelError> {
    for a in accs {
        let acc = a.of_copy(u);
        match cx.prog.node(a.r).op {
            POp::Reduce(kind, x) => {
                let ty = cx.prog.node(x).dtype;
                let mut v = cx.reg(x);
                let masked = if let Some(m) = mask {
                    let t = cx.va.take()?;
                    let id = vexpr::const_bits(identity(kind, ty), ty);
                    cx.e.vsel(ty.lane(), t, m, v, id);
                    v = t;
                    Some(t)
                } else {
                    None
                };
                cx.e.vbin(red_op(kind).0, ty.lane(), acc, acc, v);
                if let Some(t) = masked {
                    cx.va.give(t);
                }
            }
            op @ (POp::ArgMax(x) | POp::ArgMin(x)) => {
                let idx = a.idx.expect("index accumulator");
                let col = colidx.expect("column index");
                let better = if matches!(op, POp::ArgMax(_)) {
                    CmpOp::Gt
                } else {
                    CmpOp::Lt
                };
                arg_step(cx, x, better, (acc, idx), col, mask)?;
            }
            _ => unreachable!(),
        }
    }
    Ok(())
}

/// One chunk of an arg reduction of `x`: where `x` beats the best (`cmp`; a NaN beats anything
/// but an earlier NaN), the best and its column `col` are replaced.
fn arg_step(
    cx: &mut Ctx,
    x: PRef,
    cmp: CmpOp,
    (acc, idx): (VReg, VReg),
    col: VReg,
    mask: Option<MReg>,
) -> Result<(), KernelError> {
    let ty = cx.prog.node(x).dtype.lane();
    let v = cx.reg(x);
    let better = cx.va.take_mask()?;
    let t1 = cx.va.take_mask()?;
    cx.e.vcmp(cmp, ty, better, v, acc);
    if ty == VType::F32 {
        let t2 = cx.va.take_mask()?;
        cx.e.vcmp(CmpOp::Ne, ty, t1, v, v)
            .vcmp(CmpOp::Eq, ty, t2, acc, acc)
            .mlogic(MaskOp::And, t1, t1, t2)
            .mlogic(MaskOp::Or, better, better, t1);
        cx.va.give_mask(t2);
    }
    if let Some(m) = mask {
        cx.e.mlogic(MaskOp::And, better, better, m);
    }
    cx.e.vsel(ty, acc, better, v, acc)
        .vsel(VType::I32, idx, better, col, idx);
    cx.va.give_mask(better);
    cx.va.give_mask(t1);
    Ok(())
}

/// Reduces the accumulators across lanes into per-row values, bound (and pinned) to their
/// reduction nodes.
pub(super) fn finish(cx: &mut Ctx, accs: Vec<Acc>) -> Result<(), KernelError> {
    for a in accs {
        let (r, acc) = (a.r, a.acc);
        match cx.prog.node(r).op {
            POp::Reduce(kind, x) => {
                let ty = cx.prog.node(x).dtype.lane();
                for m in a.more {
                    cx.e.vbin(red_op(kind).0, ty, acc, acc, m);
                    cx.va.give(m);
                }
                match red_op(kind).1 {
                    Some(op) => {
                        cx.e.vred(op, ty, Axis::Lane, acc, acc);
                    }
                    None => lane_product(cx, ty, acc)?,
                }
                cx.bind(r, acc);
            }
            op @ (POp::ArgMax(x) | POp::ArgMin(x)) => {
                let idx = a.idx.expect("arg reductions track an index");
                let red = if matches!(op, POp::ArgMax(_)) {
                    RedOp::Max
                } else {
                    RedOp::Min
                };
                arg_finish(cx, x, red, acc, idx)?;
                cx.va.give(acc);
                cx.bind(r, idx);
            }
            _ => unreachable!(),
        }
        cx.pinned.push(r);
    }
    Ok(())
}

/// `idx` = the smallest column of each row holding its best value (`red` of `acc`; NaN is the
/// best when there is one).
fn arg_finish(cx: &mut Ctx, x: PRef, red: RedOp, acc: VReg, idx: VReg) -> Result<(), KernelError> {
    let ty = cx.prog.node(x).dtype.lane();
    let m = cx.va.take()?;
    cx.e.vred(red, ty, Axis::Lane, m, acc);
    let (c1, c2, c3) = (cx.va.take_mask()?, cx.va.take_mask()?, cx.va.take_mask()?);
    cx.e.vcmp(CmpOp::Eq, ty, c1, acc, m);
    if ty == VType::F32 {
        cx.e.vcmp(CmpOp::Ne, ty, c2, acc, acc)
            .vcmp(CmpOp::Ne, ty, c3, m, m)
            .mlogic(MaskOp::And, c2, c2, c3)
            .mlogic(MaskOp::Or, c1, c1, c2);
    }
    cx.e.vsel(VType::I32, idx, c1, idx, i32::MAX as u32).vred(
        RedOp::Min,
        VType::I32,
        Axis::Lane,
        idx,
        idx,
    );
    for mm in [c1, c2, c3] {
        cx.va.give_mask(mm);
    }
    cx.va.give(m);
    Ok(())
}
