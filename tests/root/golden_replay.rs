//! The committed golden cases replayed through the backend in all four modes: nothing may fail
//! (a skipped case names the overload or dtype the backend lacks; `golden/README.md` lists why).
//! Model-level cases run as one sequence, so DeferAndFuse and Compile see whole graphs.

use std::path::Path;

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
    eprintln!("golden {mode}: {}", r.summary_line());
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
