//! Selects whose work belongs to the row: in a row kernel, a select over per-row choices is
//! rewritten so that only the part that varies along the row runs per element.
//!
//! - `(p & q) ? a : b`, with `p` and `q` bools combined as the operators build them (each
//!   cast to an i32 0/1, `and`ed, cast back to bool), is `p ? (q ? a : b) : b`; when `q`, `a`
//!   and `b` are per-row the inner select runs once per row (cross-entropy's backward:
//!   `hit & kept ? -1/total : 0`).
//! - `cast(c ? a : b)` with `a` and `b` per-row is `c ? cast(a) : cast(b)`: the rounding of a
//!   per-row choice runs once per row.
//!
//! Both are exact: the same value is selected and converted the same way.

use crate::dtype::DType;
use crate::ir::{BinOp, POp, PRef, Prog};

/// Rewrites the selects of `prog` (per-row flags as hoisted; new nodes are per-row when all
/// their arguments are per-row or constants). Returns whether anything changed.
pub(super) fn push_selects_into_rows(prog: &mut Prog) -> bool {
    let mut out = Prog::default();
    let mut map: Vec<PRef> = Vec::with_capacity(prog.nodes.len());
    let mut changed = false;
    for n in &prog.nodes {
        let m = |r: PRef| map[r as usize];
        let r = match n.op {
            POp::Select(c, a, b) => {
                let (a, b) = (m(a), m(b));
                // Both parts per-row: the condition is already computed once per row, and one
                // select per element is all that is left.
                match and_parts(&out, m(c))
                    .filter(|(p, q)| !(row_like(&out, *p) && row_like(&out, *q)))
                {
                    Some((p, q)) => {
                        // The per-row condition goes inside, where the choice is per-row.
                        let (outer, inner) = if row_like(&out, p) && !row_like(&out, q) {
                            (q, p)
                        } else {
                            (p, q)
                        };
                        changed = true;
                        let s = push(&mut out, POp::Select(inner, a, b), n.dtype);
                        push(&mut out, POp::Select(outer, s, b), n.dtype)
                    }
                    None => out.push(POp::Select(m(c), a, b), n.dtype, n.per_row),
                }
            }
            POp::Cast(x) => {
                let x = m(x);
                match out.node(x).op {
                    POp::Select(c, a, b)
                        if !out.node(x).per_row && row_like(&out, a) && row_like(&out, b) =>
                    {
                        changed = true;
                        let ca = push(&mut out, POp::Cast(a), n.dtype);
                        let cb = push(&mut out, POp::Cast(b), n.dtype);
                        push(&mut out, POp::Select(c, ca, cb), n.dtype)
                    }
                    _ => out.push(POp::Cast(x), n.dtype, n.per_row),
                }
            }
            op => out.push(op.map_args(m), n.dtype, n.per_row),
        };
        map.push(r);
    }
    if changed {
        out.outputs = prog.outputs.iter().map(|o| map[*o as usize]).collect();
        *prog = without_dead_nodes(&out);
    }
    changed
}

/// `prog` without the nodes no output depends on (the rewrites leave the nodes they replaced;
/// a row kernel would still compute and hold its per-row ones).
fn without_dead_nodes(prog: &Prog) -> Prog {
    let mut live = vec![false; prog.nodes.len()];
    for o in &prog.outputs {
        live[*o as usize] = true;
    }
    for i in (0..prog.nodes.len()).rev() {
        if live[i] {
            for a in crate::kernels::tile::body::args(&prog.nodes[i].op) {
                live[a as usize] = true;
            }
        }
    }
    let mut out = Prog::default();
    let mut map: Vec<PRef> = vec![0; prog.nodes.len()];
    for (i, n) in prog.nodes.iter().enumerate() {
        if live[i] {
            map[i] = out.push(n.op.map_args(|r| map[r as usize]), n.dtype, n.per_row);
        }
    }
    out.outputs = prog.outputs.iter().map(|o| map[*o as usize]).collect();
    out
}

/// Pushes an elementwise node, per-row when its arguments all are (or are constants) and one
/// is.
fn push(out: &mut Prog, op: POp, dtype: DType) -> PRef {
    let args = crate::kernels::tile::body::args(&op);
    let per_row =
        args.iter().all(|a| row_like(out, *a)) && args.iter().any(|a| out.node(*a).per_row);
    out.push(op, dtype, per_row)
}

/// Per-row or a constant.
fn row_like(p: &Prog, r: PRef) -> bool {
    let n = p.node(r);
    n.per_row || matches!(n.op, POp::Const(_))
}

/// `r` as the bool it is cast from, through `bool -> i32 -> bool` round trips.
fn as_bool(p: &Prog, mut r: PRef) -> PRef {
    loop {
        let n = p.node(r);
        let POp::Cast(x) = n.op else { return r };
        let xn = p.node(x);
        let POp::Cast(y) = xn.op else { return r };
        if n.dtype == DType::Bool && xn.dtype == DType::I32 && p.node(y).dtype == DType::Bool {
            r = y;
        } else {
            return r;
        }
    }
}

/// `c` as `p & q` of two bools: `bool(i32(p) & i32(q))`.
fn and_parts(p: &Prog, c: PRef) -> Option<(PRef, PRef)> {
    let c = as_bool(p, c);
    let n = p.node(c);
    let POp::Cast(x) = n.op else { return None };
    let xn = p.node(x);
    let POp::Bin(BinOp::And, u, v) = xn.op else {
        return None;
    };
    if n.dtype != DType::Bool || xn.dtype != DType::I32 {
        return None;
    }
    let bool_of = |r: PRef| {
        let rn = p.node(r);
        match rn.op {
            POp::Cast(b) if rn.dtype == DType::I32 && p.node(b).dtype == DType::Bool => {
                Some(as_bool(p, b))
            }
            _ => None,
        }
    };
    Some((bool_of(u)?, bool_of(v)?))
}

#[cfg(test)]
mod tests {
    use super::push_selects_into_rows;
    use crate::dtype::{DType, Scalar};
    use crate::ir::{BinOp, CmpKind, POp, PRef, Prog};

    /// `bf16((col == t) & (t != -100) ? v : 0)` over a row, `t` and `v` per-row, built as the
    /// operators build it.
    fn one_hot_gradient(and_of_ints: bool) -> (Prog, PRef) {
        let mut p = Prog::default();
        let col = p.push(POp::Index(1), DType::I32, false);
        let t = p.push(POp::Input(0), DType::I32, true);
        let v = p.push(POp::Input(1), DType::F32, true);
        let hit = p.push(POp::Cmp(CmpKind::Eq, col, t), DType::Bool, false);
        let ig = p.push(POp::Const(Scalar::Int(-100)), DType::I32, true);
        let kept = p.push(POp::Cmp(CmpKind::Ne, t, ig), DType::Bool, true);
        // The and of two bools as i32 0/1 values, or (the case left alone) of the column and
        // the target themselves, a bitwise and.
        let (a, b) = if and_of_ints {
            (col, t)
        } else {
            (
                p.push(POp::Cast(hit), DType::I32, false),
                p.push(POp::Cast(kept), DType::I32, true),
            )
        };
        let both = p.push(POp::Bin(BinOp::And, a, b), DType::I32, false);
        let c = p.push(POp::Cast(both), DType::Bool, false);
        let zero = p.push(POp::Const(Scalar::Float(0.0)), DType::F32, true);
        let s = p.push(POp::Select(c, v, zero), DType::F32, false);
        let out = p.push(POp::Cast(s), DType::BF16, false);
        p.outputs = vec![out];
        (p, hit)
    }

    #[test]
    fn a_per_row_choice_and_its_rounding_run_once_per_row() {
        let (mut p, hit) = one_hot_gradient(false);
        assert!(push_selects_into_rows(&mut p));
        // The output: hit ? bf16(kept ? v : 0) : bf16(0), the only per-element work the
        // comparison with the column and one select.
        let out = p.node(p.outputs[0]);
        let POp::Select(c, a, b) = out.op else {
            panic!("{:?}", out.op)
        };
        assert_eq!((c, out.dtype, out.per_row), (hit, DType::BF16, false));
        assert!(p.node(a).per_row && p.node(b).per_row);
        assert!(matches!(p.node(a).op, POp::Cast(x) if matches!(p.node(x).op, POp::Select(..))));
        let full: Vec<&POp> = p
            .nodes
            .iter()
            .filter(|n| !n.per_row && !matches!(n.op, POp::Index(_)))
            .map(|n| &n.op)
            .collect();
        // What remains per element: the comparison and the select (the nodes they replace,
        // the i32 casts, the and and the first select, are gone).
        assert_eq!(full.len(), 2, "{full:?}");
    }

    #[test]
    fn a_bitwise_and_of_integers_is_not_split() {
        let (mut p, _) = one_hot_gradient(true);
        // Only the rounding moves into the row: the condition stays `bool(col & t)`.
        assert!(push_selects_into_rows(&mut p));
        let out = p.node(p.outputs[0]);
        let POp::Select(c, _, _) = out.op else {
            panic!("{:?}", out.op)
        };
        let POp::Cast(x) = p.node(c).op else {
            panic!("{:?}", p.node(c).op)
        };
        assert!(matches!(p.node(x).op, POp::Bin(BinOp::And, ..)));
        assert_eq!(
            p.nodes
                .iter()
                .filter(|n| matches!(n.op, POp::Select(..)))
                .count(),
            1
        );
    }
}
