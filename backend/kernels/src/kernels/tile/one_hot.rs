//! One-hot row sums: `sum_j (j == t ? v : 0)` along a row, with `t` and `v` per-row values, is
//! `0 <= t < len ? v : 0` — no pass over the row. Cross-entropy's backward has this shape
//! (`log_softmax_backward(nll_loss_backward(..))` sums the one-hot gradient of each row), so
//! the fused kernel does not walk the row a second time for it.
//!
//! Exact: the row sum adds the one value to zeros (`+0`), so it is that value, except that
//! `-0` becomes `+0`, which the rewrite reproduces by adding `+0`.

use crate::dtype::{DType, Scalar};
use crate::ir::{BinOp, CmpKind, POp, PRef, Prog, RedKind};

/// What a one-hot value is made of: the per-row index `t`, the other per-row conditions
/// `and`ed with the hit, the per-row value, and the casts applied to the select, innermost
/// first.
struct OneHot {
    t: PRef,
    kept: Option<PRef>,
    val: PRef,
    casts: Vec<DType>,
}

/// Rewrites every one-hot row sum of `prog` over a space whose last dim (of `len`) is the
/// one row dim.
pub(super) fn fold_one_hot_sums(prog: &mut Prog, ndim: usize, row_dims: usize, len: usize) {
    if row_dims != 1 || i32::try_from(len).is_err() {
        return;
    }
    let row_dim = (ndim - 1) as u32;
    let found: Vec<(usize, OneHot)> = prog
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match n.op {
            POp::Reduce(RedKind::Sum, a) if n.dtype == DType::F32 && n.per_row => {
                one_hot(prog, a, row_dim).map(|h| (i, h))
            }
            _ => None,
        })
        .collect();
    if found.is_empty() {
        return;
    }
    // The program again, each such sum replaced by per-row work (new nodes go just before
    // it, so every node still refers to earlier ones).
    let mut out = Prog::default();
    let mut map: Vec<PRef> = Vec::with_capacity(prog.nodes.len());
    let mut next = found.into_iter().peekable();
    for (i, n) in prog.nodes.iter().enumerate() {
        if next.peek().is_some_and(|(k, _)| *k == i) {
            let (_, h) = next.next().expect("peeked");
            let m = |r: PRef| map[r as usize];
            let t = m(h.t);
            let zero_i = out.push(POp::Const(Scalar::Int(0)), DType::I32, true);
            let len_i = out.push(POp::Const(Scalar::Int(len as i64)), DType::I32, true);
            let ge = out.push(POp::Cmp(CmpKind::Ge, t, zero_i), DType::Bool, true);
            let lt = out.push(POp::Cmp(CmpKind::Lt, t, len_i), DType::Bool, true);
            // Conditions combine as i32 0/1 values, as the operators build them.
            let ge = out.push(POp::Cast(ge), DType::I32, true);
            let lt = out.push(POp::Cast(lt), DType::I32, true);
            let mut on = out.push(POp::Bin(BinOp::And, ge, lt), DType::I32, true);
            if let Some(k) = h.kept {
                let k = out.push(POp::Cast(m(k)), DType::I32, true);
                on = out.push(POp::Bin(BinOp::And, on, k), DType::I32, true);
            }
            let on = out.push(POp::Cast(on), DType::Bool, true);
            let mut v = m(h.val);
            for dt in &h.casts {
                v = out.push(POp::Cast(v), *dt, true);
            }
            let zero = out.push(POp::Const(Scalar::Float(0.0)), DType::F32, true);
            let v = out.push(POp::Bin(BinOp::Add, v, zero), DType::F32, true);
            map.push(out.push(POp::Select(on, v, zero), DType::F32, true));
            continue;
        }
        let op = n.op.map_args(|r| map[r as usize]);
        map.push(out.push(op, n.dtype, n.per_row));
    }
    out.outputs = prog.outputs.iter().map(|o| map[*o as usize]).collect();
    *prog = out;
}

/// `r` as a one-hot value along the row: casts of `select(hit [&& kept], val, 0)` where `hit`
/// compares the row coordinate with a per-row i32 index and `kept` and `val` are per-row.
fn one_hot(prog: &Prog, mut r: PRef, row_dim: u32) -> Option<OneHot> {
    let mut casts = Vec::new();
    while let POp::Cast(a) = prog.node(r).op {
        casts.push(prog.node(r).dtype);
        r = a;
    }
    casts.reverse();
    let POp::Select(c, val, z) = prog.node(r).op else {
        return None;
    };
    let zero = matches!(prog.node(z).op, POp::Const(Scalar::Float(f)) if f.to_bits() == 0)
        || matches!(prog.node(z).op, POp::Const(Scalar::Int(0)));
    if !zero || !prog.node(val).per_row || prog.node(val).dtype != DType::F32 {
        return None;
    }
    let c = uncast(prog, c);
    let (hit, kept) = match prog.node(c).op {
        POp::Bin(BinOp::And, a, b) if prog.node(b).per_row => (a, Some(b)),
        POp::Bin(BinOp::And, a, b) if prog.node(a).per_row => (b, Some(a)),
        _ => (c, None),
    };
    let POp::Cmp(CmpKind::Eq, x, y) = prog.node(uncast(prog, hit)).op else {
        return None;
    };
    let is_coord = |p: PRef| prog.node(p).op == POp::Index(row_dim);
    let t = if is_coord(x) {
        y
    } else if is_coord(y) {
        x
    } else {
        return None;
    };
    (prog.node(t).per_row && prog.node(t).dtype == DType::I32).then_some(OneHot {
        t,
        kept,
        val,
        casts,
    })
}

/// `r` without the casts around it.
fn uncast(prog: &Prog, mut r: PRef) -> PRef {
    while let POp::Cast(a) = prog.node(r).op {
        r = a;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::fold_one_hot_sums;
    use crate::dtype::{DType, Scalar};
    use crate::ir::{BinOp, CmpKind, POp, Prog, ProgBuilder, RedKind};

    /// `sum_j (j == t && t != -100 ? v : 0)` rounded through bf16 (nll_loss_backward as
    /// log_softmax_backward reads it), and `sum_j (j == t ? x_j : 0)` (a gather: `x` is full).
    fn program(full_val: bool) -> Prog {
        let mut p = ProgBuilder::new();
        let v = p.input(0, DType::F32, !full_val);
        let t = p.input(1, DType::I64, true);
        let j = p.index(1);
        let t = p.cast(t, DType::I32);
        let hit = p.cmp(CmpKind::Eq, j, t, DType::I32);
        let ign = p.constant(Scalar::Int(-100), DType::I32);
        let kept = p.cmp(CmpKind::Ne, t, ign, DType::I32);
        let (hit, kept) = (p.cast(hit, DType::I32), p.cast(kept, DType::I32));
        let on = p.bin(BinOp::And, hit, kept, DType::I32);
        let on = p.cast(on, DType::Bool);
        let zero = p.constant(Scalar::Float(0.0), DType::F32);
        let sel = p.select(on, v, zero, DType::F32);
        let r = p.cast(sel, DType::BF16);
        let r = p.cast(r, DType::F32);
        let s = p.reduce(RedKind::Sum, r, DType::F32);
        p.output(s);
        p.finish()
    }

    #[test]
    fn a_one_hot_row_sum_becomes_per_row_work() {
        let mut prog = program(false);
        assert!(prog.has_reductions());
        fold_one_hot_sums(&mut prog, 2, 1, 1000);
        assert!(!prog.has_reductions());
        let out = prog.node(prog.outputs[0]);
        assert!(out.per_row && matches!(out.op, POp::Select(..)));
        // The bf16 rounding of the value is kept, and the range check uses the row length.
        assert!(
            prog.nodes
                .iter()
                .any(|n| n.op == POp::Cast(0) || n.dtype == DType::BF16)
        );
        assert!(
            prog.nodes
                .iter()
                .any(|n| n.op == POp::Const(Scalar::Int(1000)))
        );
    }

    #[test]
    fn a_gather_along_the_row_is_left_alone() {
        let mut prog = program(true);
        fold_one_hot_sums(&mut prog, 2, 1, 1000);
        assert_eq!(prog, program(true));
    }
}
