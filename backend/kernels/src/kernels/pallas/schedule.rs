//! The order a block's equations are lowered in: Mosaic's scheduler overlaps a kernel body's
//! independent work, and this lowering emits code in equation order for an in-order front end,
//! so the order is chosen first.
//!
//! - **Matrix products early.** A `dot_general` moves up to just after the equations that
//!   compute its operands (never above an earlier product): flash attention's backward computes
//!   `dp = do @ v.T` after the softmax of `q @ k.T`, yet it needs neither, so it runs on the
//!   matrix units left idle by the first product while the vector unit waits for that one.
//! - **Stores late.** A `swap` (a store into a reference) moves down past the pure array work
//!   after it and past reads of other references, up to the next access of its reference,
//!   store, DMA, control flow or use of its result: the front end stalls at a store until its value is
//!   computed, so `dv_scratch[...] += p.T @ do` stored late lets the next products be issued
//!   while that one drains.
//!
//! Both moves keep every value's definition before its uses and every access to a reference
//! in order relative to every other, so the results are the same bits.

use super::spec::{Atom, Eqn, Jaxpr};

/// Primitives without effects, free to move relative to each other (anything else is a
/// barrier: references, DMA, semaphores, control flow, calls, primitives not listed).
fn pure(prim: &str) -> bool {
    matches!(
        prim,
        "dot_general"
            | "broadcast_in_dim"
            | "reshape"
            | "squeeze"
            | "expand_dims"
            | "transpose"
            | "slice"
            | "tile"
            | "iota"
            | "reduce_sum"
            | "reduce_max"
            | "reduce_min"
            | "program_id"
            | "num_programs"
            | "abs"
            | "add"
            | "ceil"
            | "convert_element_type"
            | "copy"
            | "cos"
            | "div"
            | "eq"
            | "erf"
            | "exp"
            | "floor"
            | "ge"
            | "gt"
            | "integer_pow"
            | "le"
            | "log"
            | "logistic"
            | "lt"
            | "max"
            | "min"
            | "mul"
            | "ne"
            | "neg"
            | "rem"
            | "rsqrt"
            | "sign"
            | "sin"
            | "sqrt"
            | "square"
            | "sub"
            | "tanh"
            | "select_n"
            | "and"
            | "or"
            | "not"
            | "xor"
            | "pow"
            | "exp2"
            | "log1p"
            | "expm1"
    )
}

fn reads(e: &Eqn, v: u32) -> bool {
    e.ins
        .iter()
        .any(|a| matches!(a, Atom::Var { v: x } if *x == v))
}

/// Whether two reference accesses name the same reference (distinct reference variables of a
/// kernel body are distinct buffers: block buffers, scratch, outputs).
fn same_ref(a: &Eqn, b: &Eqn) -> bool {
    match (a.ins.first(), b.ins.first()) {
        (Some(Atom::Var { v: x }), Some(Atom::Var { v: y })) => x == y,
        _ => true,
    }
}

fn defines(e: &Eqn, v: u32) -> bool {
    e.outs.iter().any(|o| o.id == v)
}

/// `j` with its equations in lowering order, or `None` when the order does not change.
pub(super) fn schedule(j: &Jaxpr) -> Option<Jaxpr> {
    let n = j.eqns.len();
    if !j
        .eqns
        .iter()
        .any(|e| e.prim == "dot_general" || e.prim == "swap")
    {
        return None;
    }
    let mut order: Vec<usize> = Vec::with_capacity(n);
    // Products early: each placed just after its operands' definitions (after the products
    // placed there before it, so products ready together keep their order).
    for (k, e) in j.eqns.iter().enumerate() {
        if e.prim != "dot_general" {
            order.push(k);
            continue;
        }
        let mut at = 0;
        for (p, &i) in order.iter().enumerate() {
            let d = &j.eqns[i];
            if e.ins.iter().any(|a| match a {
                Atom::Var { v } => defines(d, *v),
                Atom::Lit { .. } => false,
            }) {
                at = at.max(p + 1);
            }
        }
        while at < order.len() && j.eqns[order[at]].prim == "dot_general" {
            at += 1;
        }
        order.insert(at, k);
    }
    // Stores late: from the last, each moved down past the pure equations after it that do
    // not use its result, stopping before another store.
    let mut p = order.len();
    while p > 0 {
        p -= 1;
        let e = &j.eqns[order[p]];
        if e.prim != "swap" {
            continue;
        }
        let mut to = p;
        while to + 1 < order.len() {
            let next = &j.eqns[order[to + 1]];
            let other_ref = next.prim == "get" && !same_ref(e, next);
            if !(pure(&next.prim) || other_ref) || e.outs.iter().any(|o| reads(next, o.id)) {
                break;
            }
            to += 1;
        }
        if to > p {
            let k = order.remove(p);
            order.insert(to, k);
        }
    }
    if order.iter().enumerate().all(|(p, &k)| p == k) {
        return None;
    }
    Some(Jaxpr {
        invars: j.invars.clone(),
        eqns: order.iter().map(|&k| j.eqns[k].clone()).collect(),
        outvars: j.outvars.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::schedule;
    use crate::kernels::pallas::spec::Jaxpr;

    /// A body: `(prim, ins, out)` per equation (variables by number; refs are 0..5).
    fn body(eqns: &[(&str, &[u32], Option<u32>)]) -> Jaxpr {
        let var = |id: u32, r: bool| {
            format!(r#"{{"id":{id},"shape":[8,128],"dtype":"float32","ref":{r}}}"#)
        };
        let eqns: Vec<String> = eqns
            .iter()
            .map(|(p, ins, out)| {
                let ins: Vec<String> = ins.iter().map(|v| format!(r#"{{"v":{v}}}"#)).collect();
                let outs: Vec<String> = out.iter().map(|o| var(*o, false)).collect();
                format!(
                    r#"{{"prim":"{p}","ins":[{}],"outs":[{}]}}"#,
                    ins.join(","),
                    outs.join(",")
                )
            })
            .collect();
        let invars: Vec<String> = (0..5).map(|r| var(r, true)).collect();
        serde_json::from_str(&format!(
            r#"{{"invars":[{}],"eqns":[{}],"outvars":[]}}"#,
            invars.join(","),
            eqns.join(",")
        ))
        .unwrap()
    }

    #[test]
    fn an_independent_product_moves_up_and_a_store_down_to_the_next_read_of_its_ref() {
        let j = body(&[
            ("get", &[0], Some(10)),              // 0  a = r0[...]
            ("get", &[1], Some(11)),              // 1  b = r1[...]
            ("get", &[3], Some(12)),              // 2  c = r3[...]
            ("dot_general", &[10, 11], Some(13)), // 3  s = a @ b
            ("exp", &[13], Some(14)),             // 4  e = exp(s)
            ("swap", &[2, 14], Some(15)),         // 5  r2[...] = e
            ("mul", &[14, 14], Some(16)),         // 6  f = e * e
            ("get", &[2], Some(17)),              // 7  g = r2[...]
            ("dot_general", &[12, 11], Some(18)), // 8  d = c @ b: needs neither s nor e
            ("add", &[17, 18], Some(19)),         // 9
            ("add", &[19, 16], Some(20)),         // 10
            ("swap", &[4, 20], Some(21)),         // 11 r4[...] = ...
        ]);
        let s = schedule(&j).unwrap();
        let order: Vec<u32> = s
            .eqns
            .iter()
            .map(|e| e.outs[0].id)
            .map(|o| j.eqns.iter().position(|e| e.outs[0].id == o).unwrap() as u32)
            .collect();
        // `s` right after its operands (before the read of r3 it does not need), `d` right
        // after `c`; the store into r2 after `f` but before r2 is read again.
        assert_eq!(order, [0, 1, 3, 2, 8, 4, 6, 5, 7, 9, 10, 11]);
    }

    #[test]
    fn a_store_does_not_pass_a_use_of_its_old_value_or_another_store() {
        let j = body(&[
            ("get", &[0], Some(10)),
            ("swap", &[1, 10], Some(11)), // old value of r1 ...
            ("exp", &[10], Some(12)),
            ("neg", &[11], Some(13)), // ... used here
            ("swap", &[2, 12], Some(14)),
            ("swap", &[3, 13], Some(15)),
        ]);
        let s = schedule(&j).unwrap();
        let prims: Vec<&str> = s.eqns.iter().map(|e| e.prim.as_str()).collect();
        assert_eq!(prims, ["get", "exp", "swap", "neg", "swap", "swap"]);
        assert_eq!(s.eqns[2].outs[0].id, 11);
        assert!(schedule(&body(&[("get", &[0], Some(10)), ("exp", &[10], Some(11))])).is_none());
    }
}
