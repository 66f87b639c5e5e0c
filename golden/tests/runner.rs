//! The runner against real PyTorch cases: a correct host executor passes, a wrong one fails with
//! its error sizes, an executor without an op skips with the reason.

use std::path::{Path, PathBuf};

use tpuemu_golden::{Mode, RunOptions, Status, run_dir};

use crate::host::{HostExec, WrongExec};

pub fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases")
}

/// A fresh temporary directory holding copies of some committed OpInfo case files.
pub fn temp_with(name: &str, stems: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tpuemu-golden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for stem in stems {
        for ext in ["json", "safetensors"] {
            let src = cases_dir().join("opinfo").join(format!("{stem}.{ext}"));
            std::fs::copy(&src, dir.join(format!("{stem}.{ext}")))
                .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
    dir
}

#[test]
fn host_executor_passes_pytorch_cases() {
    let dir = temp_with("pass", &["neg", "add", "mm", "nn.functional.relu"]);
    let report = run_dir(&dir, &mut HostExec, &RunOptions::default()).unwrap();
    let failures: Vec<String> = report
        .cases
        .iter()
        .filter(|c| c.status == Status::Failed)
        .map(|c| format!("{}: {}", c.id, c.reason.clone().unwrap_or_default()))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        report.count(Status::Passed) >= 20,
        "{}",
        report.summary_line()
    );
    let per_op = report.per_op();
    assert!(per_op["aten::neg"].passed > 0 && per_op["aten::mm"].passed > 0);
    // Registered ops with no case among these files are listed once, not failed: a
    // directory may cover only some operators.
    assert!(report.uncovered.iter().any(|op| op == "aten::exp"));
    assert!(!report.cases.iter().any(|c| c.id.starts_with("registered/")));
    assert!(report.success());
}

#[test]
fn wrong_executor_fails_with_error_sizes() {
    let dir = temp_with("wrong", &["neg"]);
    let report = run_dir(&dir, &mut WrongExec, &RunOptions::default()).unwrap();
    let failed: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.status == Status::Failed)
        .collect();
    assert!(!failed.is_empty());
    let float_case = failed
        .iter()
        .find(|c| c.dtypes == ["float32"])
        .expect("a float32 neg case");
    assert!(
        (float_case.max_abs - 1.0).abs() < 1e-6,
        "{}",
        float_case.max_abs
    );
    assert!(float_case.max_rel > 0.0);
    assert!(
        float_case
            .reason
            .as_deref()
            .unwrap()
            .contains("elements differ")
    );
    assert!(!report.success());
}

#[test]
fn unsupported_ops_skip_with_reason() {
    let dir = temp_with("skip", &["sin"]);
    let report = run_dir(
        &dir,
        &mut HostExec,
        &RunOptions {
            filter: Some("sin".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(report.count(Status::Passed), 0);
    assert!(report.count(Status::Skipped) > 0);
    let skipped = report
        .cases
        .iter()
        .find(|c| c.status == Status::Skipped)
        .unwrap();
    assert_eq!(skipped.reason.as_deref(), Some("aten::sin not registered"));
    assert!(report.success(), "skips are not failures");
}

#[test]
fn report_table_and_json() {
    let dir = temp_with("report", &["neg", "sin"]);
    let opts = RunOptions {
        mode: Mode::Defer,
        chip: Some("v5e".into()),
        filter: None,
    };
    let report = run_dir(&dir, &mut HostExec, &opts).unwrap();
    let mut text = Vec::new();
    report.print_table(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    let last = text.lines().last().unwrap();
    assert_eq!(last, report.summary_line());
    assert!(last.ends_with(" skipped") && last.contains(" passed, ") && last.contains(" failed, "));
    assert!(text.contains("mode defer, chip v5e"));
    assert!(text.contains("aten::neg") && text.contains("coverage: "));
    let json = report.to_json();
    assert_eq!(json["cases"].as_array().unwrap().len(), report.cases.len());
    let case = &json["cases"][0];
    for key in [
        "id",
        "ops",
        "dtypes",
        "shapes",
        "status",
        "max_abs_err",
        "max_rel_err",
        "calls",
    ] {
        assert!(!case[key].is_null(), "missing {key} in {case}");
    }
    assert_eq!(json["coverage"]["opinfo_visited"], 2);
    assert_eq!(json["coverage"]["opinfo_passing"], 1);
}

#[test]
fn one_bf16_pass_matmul_passes_within_the_mxu_bound() {
    let dir = temp_with("mxu", &["mm"]);
    let report = run_dir(
        &dir,
        &mut crate::host::MxuExec,
        &RunOptions {
            filter: Some("float32".into()),
            ..Default::default()
        },
    )
    .unwrap();
    let f32_cases: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.dtypes == ["float32"])
        .collect();
    assert!(!f32_cases.is_empty());
    assert!(
        f32_cases.iter().all(|c| c.status == Status::Passed),
        "{f32_cases:#?}"
    );
    // ... while the same results are far outside float32's default tolerance.
    let worst = f32_cases.iter().map(|c| c.max_rel).fold(0.0, f64::max);
    assert!(
        worst > 1e-4,
        "bf16 rounding should show: max rel error {worst}"
    );
}

#[test]
fn every_committed_case_runs_and_nothing_is_malformed() {
    let report = run_dir(&cases_dir(), &mut HostExec, &RunOptions::default()).unwrap();
    let mut table = Vec::new();
    report.print_table(&mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    let failures: Vec<&str> = table.lines().filter(|l| l.starts_with("  FAIL")).collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        report.count(Status::Passed) > 50,
        "{}",
        report.summary_line()
    );
    assert!(
        report.count(Status::Skipped) > 3000,
        "{}",
        report.summary_line()
    );
    let cov = report.coverage();
    assert_eq!(cov.visited, 703);
    assert_eq!(cov.with_cases, 571);
    assert!(
        table.contains(&format!("coverage: {}/703 OpInfo entries", cov.passing)),
        "{table}"
    );
}
