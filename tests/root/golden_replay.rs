//! The committed golden cases replayed through the backend in all four modes: nothing may fail,
//! a skipped case may only name the overload or dtype the backend lacks (`golden/README.md`
//! lists why), no more than [`MAX_SKIPPED_PERCENT`] of the cases may be skipped for a missing
//! overload or dtype (meta mode's value-dependent skips aside), and every
//! execution mode passes exactly the cases Strict passes. Model-level cases run as one
//! sequence, so DeferAndFuse and Compile see whole graphs.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use tpuemu::golden_bridge::BackendExecutor;
use tpuemu_emulator::builtin;
use tpuemu_golden::{Mode, RunOptions, Status, run_dir};

fn replay(mode: Mode) -> tpuemu_golden::Report {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cases");
    let mut exec = BackendExecutor::new(builtin("v5e").unwrap(), mode).unwrap();
    let opts = RunOptions {
        mode,
        ..RunOptions::default()
    };
    run_dir(&dir, &mut exec, &opts).unwrap()
}

/// The most cases that may be skipped for a missing overload or dtype, in percent of all cases:
/// a ratchet that only goes down as operators are added (issue 13's goal, 5, is reached: 206 of
/// 4212).
const MAX_SKIPPED_PERCENT: usize = 5;

/// Whether a skip reason names only what the backend lacks: an unregistered overload
/// (`aten::fft_fft not registered`), a dtype TPUs do not have (`float64 is not a TPU dtype`),
/// or a dtype an overload does not take (`int64 not supported by aten::erfinv`).
fn lacks_something(reason: &str) -> bool {
    let words: Vec<&str> = reason.split(' ').collect();
    match words.as_slice() {
        [op, "not", "registered"] => op.contains("::"),
        [_dtype, "is", "not", "a", "TPU", "dtype"] => true,
        [_dtype, "not", "supported", "by", op] => op.contains("::"),
        _ => false,
    }
}

/// A skip [`lacks_something`], or in meta mode a call whose result needs values a
/// shapes-only runtime does not have (`nonzero`, `.item()`).
fn acceptable_skip(mode: Mode, reason: &str) -> bool {
    lacks_something(reason) || (mode == Mode::Meta && reason.starts_with("needs values: "))
}

/// The ids of the cases Strict passes (computed once).
fn strict_passed() -> &'static BTreeSet<String> {
    static PASSED: OnceLock<BTreeSet<String>> = OnceLock::new();
    PASSED.get_or_init(|| passed_ids(&replay(Mode::Strict)))
}

fn passed_ids(r: &tpuemu_golden::Report) -> BTreeSet<String> {
    r.cases
        .iter()
        .filter(|c| c.status == Status::Passed)
        .map(|c| c.id.clone())
        .collect()
}

fn check(mode: Mode) {
    let r = replay(mode);
    let failed: Vec<String> = r
        .cases
        .iter()
        .filter(|c| c.status == Status::Failed)
        .take(10)
        .map(|c| format!("{}: {}", c.id, c.reason.clone().unwrap_or_default()))
        .collect();
    assert!(
        failed.is_empty(),
        "{mode}: {}\n{failed:#?}",
        r.summary_line()
    );
    assert!(r.count(Status::Passed) > 0, "{mode}: nothing ran");
    let odd: Vec<String> = r
        .cases
        .iter()
        .filter(|c| c.status == Status::Skipped)
        .filter_map(|c| c.reason.clone().filter(|why| !acceptable_skip(mode, why)))
        .take(10)
        .collect();
    assert!(
        odd.is_empty(),
        "{mode}: skipped for reasons other than a missing overload or dtype: {odd:#?}"
    );
    // The ratchet counts what the backend lacks; meta mode's "needs values" skips are what a
    // shapes-only runtime cannot compute, whatever the backend registers.
    let skipped = r
        .cases
        .iter()
        .filter(|c| c.status == Status::Skipped)
        .filter(|c| c.reason.as_deref().is_none_or(lacks_something))
        .count();
    assert!(
        skipped * 100 <= r.cases.len() * MAX_SKIPPED_PERCENT,
        "{mode}: {skipped} of {} cases skipped for a missing overload or dtype (at most {MAX_SKIPPED_PERCENT}%)",
        r.cases.len()
    );
    if mode != Mode::Meta && mode != Mode::Strict {
        let here = passed_ids(&r);
        let strict = strict_passed();
        let differ: Vec<&String> = strict.symmetric_difference(&here).take(10).collect();
        assert!(
            differ.is_empty(),
            "{mode} passes other cases than strict ({} vs {}): {differ:?}",
            here.len(),
            strict.len()
        );
    }
    eprintln!("golden {mode}: {}", r.summary_line());
}

#[test]
fn the_skip_reasons_check_can_refuse() {
    assert!(lacks_something("aten::fft_fft not registered"));
    assert!(lacks_something("float64 is not a TPU dtype"));
    assert!(lacks_something("int64 not supported by aten::erfinv"));
    assert!(!lacks_something("shape mismatch in aten::add.Tensor"));
    assert!(!lacks_something("kernel fault: not registered"));
    assert!(acceptable_skip(
        Mode::Meta,
        "needs values: NotImplementedError: a meta tensor"
    ));
    assert!(!acceptable_skip(
        Mode::Strict,
        "needs values: NotImplementedError: a meta tensor"
    ));
}

#[test]
fn golden_cases_pass_in_strict() {
    check(Mode::Strict);
}

#[test]
fn golden_cases_pass_in_debug() {
    check(Mode::Debug);
}

#[test]
fn golden_cases_pass_in_defer() {
    check(Mode::Defer);
}

#[test]
fn golden_cases_pass_in_compile() {
    check(Mode::Compile);
}

/// Shapes only: every operator's output dtypes and shapes come from its inputs' metadata alone
/// (a shapes-only runtime runs nothing) and must equal PyTorch's.
#[test]
fn golden_cases_pass_in_meta() {
    check(Mode::Meta);
}
