//! Coverage: every registered overload has a suite entry or a justified exclusion, so that an
//! operator registered without one fails here.

use std::collections::BTreeSet;

use tpuemu_backend::ops::registry;

/// Overloads the suite does not run, and why.
pub const EXCLUDED: &[(&str, &str)] = &[
    (
        "aten::_batch_norm_with_update",
        "writes its running statistics, which the suite's samples may not: its functional form is in from_torch, and python/tests/test_ops.py checks BatchNorm's training outputs and running statistics against the CPU in every mode",
    ),
    (
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        "checked against f64 host gradients in tests/backend/flash.rs (flash kernel and the masked decomposition) and by PyTorch's golden model case models/attention",
    ),
    (
        "aten::_scaled_dot_product_fused_attention_overrideable",
        "PyTorch has no CPU kernel for it to generate golden cases from; python/tests/test_sdpa.py checks what F.scaled_dot_product_attention returns through it against the CPU",
    ),
    (
        "aten::_scaled_dot_product_fused_attention_overrideable_backward",
        "PyTorch has no CPU kernel for it; python/tests/test_sdpa.py checks the gradients of F.scaled_dot_product_attention through it against the CPU",
    ),
];

/// A family's table: each overload with the test that checks it.
pub type Table = &'static [(&'static str, fn())];

/// Every overload with a suite entry, from each family's table.
fn covered() -> BTreeSet<&'static str> {
    let tables: &[Table] = &[
        super::binary::OPS,
        super::unary::OPS,
        super::creation::OPS,
        super::views::OPS,
        super::data::OPS,
        super::reduce::OPS,
        super::nn::OPS,
        super::spatial::OPS,
        super::matrix::OPS,
        super::backward::OPS,
        super::from_torch::OPS,
        super::division::OPS,
        super::pointwise::OPS,
        super::like::OPS,
        super::random::OPS,
        super::math::OPS,
        super::activations::OPS,
        super::gamma::OPS,
        super::spaced::OPS,
        super::compare::OPS,
        super::linalg::OPS,
    ];
    tables
        .iter()
        .flat_map(|t| t.iter().map(|(name, _)| *name))
        .collect()
}

#[test]
fn every_registered_overload_is_in_the_suite() {
    let covered = covered();
    let excluded: BTreeSet<&str> = EXCLUDED.iter().map(|(n, _)| *n).collect();
    // Derived forms (in-place, `out=`) are checked on every sample of their functional form.
    let registered: BTreeSet<&str> = registry()
        .values()
        .filter(|d| d.derived_from().is_none_or(|f| !covered.contains(f)))
        .map(|d| d.name)
        .collect();
    let missing: Vec<&str> = registered
        .iter()
        .filter(|n| !covered.contains(*n) && !excluded.contains(*n))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} registered overloads have no suite entry and no exclusion: {missing:?}",
        missing.len(),
        registered.len()
    );
    let stale: Vec<&str> = covered
        .union(&excluded)
        .filter(|n| !registered.contains(*n))
        .copied()
        .collect();
    assert!(
        stale.is_empty(),
        "suite entries for unregistered overloads: {stale:?}"
    );
    let both: Vec<&&str> = covered.intersection(&excluded).collect();
    assert!(both.is_empty(), "both covered and excluded: {both:?}");
}
