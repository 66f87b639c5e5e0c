//! The front end issues VLIW bundles: two scalar and two vector-ALU instructions a cycle when
//! they are independent, one when the preset says so, and dependent ones wait for results.

use tpuemu_emulator::{Emulator, builtin};

/// Cycles of `body` (after the kernel-launch overhead) on v5e with `valu_slots` and
/// `scalar_slots` per bundle.
fn cycles(body: &str, slots: u32) -> u64 {
    let mut p = builtin("v5e").unwrap();
    p.set("costs.valu_slots", &slots.to_string()).unwrap();
    p.set("costs.scalar_slots", &slots.to_string()).unwrap();
    p.set("costs.kernel_launch", "0").unwrap();
    let src = format!(".program issue\n{body}\n    halt\n");
    let prog = tpuemu_isa::assemble(&src).unwrap();
    let r = Emulator::new(p)
        .unwrap()
        .run_program(&prog, &[], &[0], false)
        .unwrap();
    r.stats.cycles()
}

fn independent_vector_ops(n: usize) -> String {
    (0..n)
        .map(|i| format!("    vmov.f32 v{}, 1.0\n", i + 1))
        .collect()
}

#[test]
fn two_vector_alu_ops_issue_per_cycle() {
    let dual = cycles(&independent_vector_ops(16), 2);
    let single = cycles(&independent_vector_ops(16), 1);
    // 16 independent ops: 8 bundles against 16 cycles (plus the same drain either way).
    assert_eq!(single - dual, 8, "single {single}, dual {dual}");
}

#[test]
fn two_scalar_ops_issue_per_cycle() {
    let body: String = (0..16)
        .map(|i| format!("    smov s{}, {i}\n", i + 1))
        .collect();
    assert_eq!(cycles(&body, 1) - cycles(&body, 2), 8);
}

#[test]
fn dependent_ops_wait_for_their_operands() {
    // A chain of 8 adds, each reading the previous result: the vector ALU latency (2 cycles)
    // bounds it, however wide the bundle.
    let mut body = String::from("    vmov.f32 v1, 1.0\n");
    for _ in 0..8 {
        body += "    vadd.f32 v1, v1, v1\n";
    }
    let (dual, single) = (cycles(&body, 2), cycles(&body, 1));
    assert_eq!(
        dual, single,
        "a dependence chain gains nothing from a wider bundle"
    );
    assert!(dual >= 2 * 8, "{dual} cycles for 8 dependent adds");
}

#[test]
fn scalar_and_vector_ops_share_a_bundle() {
    let mixed: String = (0..8)
        .map(|i| format!("    smov s{}, {i}\n    vmov.f32 v{}, 1.0\n", i + 1, i + 1))
        .collect();
    let vec_only = independent_vector_ops(8);
    // The scalar moves ride along in the vector ops' bundles.
    assert_eq!(cycles(&mixed, 2), cycles(&vec_only, 2));
}

/// Cycles of `body` on v5e (no launch overhead) with `copies` vector units.
fn cycles_with_units(body: &str, copies: u32) -> u64 {
    let mut p = builtin("v5e").unwrap();
    p.set("costs.vector_units", &copies.to_string()).unwrap();
    p.set("costs.kernel_launch", "0").unwrap();
    let prog = tpuemu_isa::assemble(&format!(".program units\n{body}\n    halt\n")).unwrap();
    let r = Emulator::new(p)
        .unwrap()
        .run_program(&prog, &[], &[0], false)
        .unwrap();
    r.stats.cycles()
}

#[test]
fn more_vector_units_issue_more_independent_ops_a_cycle() {
    // 32 independent moves: 2 ALU slots a unit, so 16 bundles with one unit, 8 with two and
    // 4 with four (the drain after the last bundle is the same every time).
    let body = independent_vector_ops(32);
    let (one, two, four) = (
        cycles_with_units(&body, 1),
        cycles_with_units(&body, 2),
        cycles_with_units(&body, 4),
    );
    assert_eq!(one - two, 8, "one unit {one}, two {two}");
    assert_eq!(two - four, 4, "two units {two}, four {four}");
    // The transcendental unit (occupancy 2 on v5e): 8 independent exps hold one unit 16 cycles,
    // two units 8.
    let exps: String = (0..8)
        .map(|i| format!("    vexp.f32 v{}, v0\n", i + 1))
        .collect();
    assert_eq!(cycles_with_units(&exps, 1) - cycles_with_units(&exps, 2), 8);
    // A dependence chain gains nothing.
    let mut chain = String::from("    vmov.f32 v1, 1.0\n");
    for _ in 0..8 {
        chain += "    vadd.f32 v1, v1, v1\n";
    }
    assert_eq!(cycles_with_units(&chain, 1), cycles_with_units(&chain, 4));
    // Out of range: a clear error naming the field.
    let mut p = builtin("v5e").unwrap();
    let e = p.set("costs.vector_units", "5").unwrap_err().to_string();
    assert!(e.contains("vector_units"), "{e}");
}
