//! The run report: a table per operator, the failures, the skip reasons, the coverage line and
//! the closing `N passed, M failed, K skipped` line; and the same as JSON, case by case.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::PathBuf;

use serde_json::{Value as Json, json};

use crate::format::IndexEntry;
use crate::runner::{CaseResult, Mode, Status};

/// How many failures [`Report::print_table`] lists (the JSON report has all).
pub const MAX_LISTED_FAILURES: usize = 200;

/// Call counts of one overload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpStats {
    /// Calls that passed.
    pub passed: usize,
    /// Calls that failed.
    pub failed: usize,
    /// Calls that were skipped.
    pub skipped: usize,
    /// Greatest absolute error over its calls.
    pub max_abs: f64,
    /// Greatest relative error over its calls.
    pub max_rel: f64,
}

/// Coverage figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// OpInfo entries the generator visited (from the index; without one, entries seen in cases).
    pub visited: usize,
    /// Visited entries that have at least one case.
    pub with_cases: usize,
    /// Entries with at least one passing case.
    pub passing: usize,
    /// Distinct overloads called by the cases run.
    pub overloads: usize,
    /// Overloads with at least one passing call and no failing call.
    pub overloads_passing: usize,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The directory run.
    pub dir: PathBuf,
    /// The mode the executor ran in.
    pub mode: Mode,
    /// The chip it ran on.
    pub chip: Option<String>,
    /// Every case, in run order.
    pub cases: Vec<CaseResult>,
    /// The OpInfo entries the generator visited.
    pub index: Vec<IndexEntry>,
    /// Overloads the executor registers that no case of the run calls.
    pub uncovered: Vec<String>,
}

impl Report {
    /// Assembles a report.
    pub fn new(
        dir: PathBuf,
        mode: Mode,
        chip: Option<String>,
        cases: Vec<CaseResult>,
        index: Vec<IndexEntry>,
    ) -> Report {
        Report {
            dir,
            mode,
            chip,
            cases,
            index,
            uncovered: Vec::new(),
        }
    }

    /// Cases with the given status.
    pub fn count(&self, status: Status) -> usize {
        self.cases.iter().filter(|c| c.status == status).count()
    }

    /// True when nothing failed (the CLI's exit code).
    pub fn success(&self) -> bool {
        self.count(Status::Failed) == 0
    }

    /// `N passed, M failed, K skipped`.
    pub fn summary_line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.count(Status::Passed),
            self.count(Status::Failed),
            self.count(Status::Skipped)
        )
    }

    /// Call counts per overload, by name.
    pub fn per_op(&self) -> BTreeMap<String, OpStats> {
        let mut map: BTreeMap<String, OpStats> = BTreeMap::new();
        for case in &self.cases {
            if case.calls.is_empty() {
                // A case that never ran (malformed, or a registered op without cases).
                for op in &case.ops {
                    let s = map.entry(op.clone()).or_default();
                    match case.status {
                        Status::Passed => s.passed += 1,
                        Status::Failed => s.failed += 1,
                        Status::Skipped => s.skipped += 1,
                    }
                }
            }
            for call in &case.calls {
                let s = map.entry(call.op.clone()).or_default();
                match call.status {
                    Status::Passed => s.passed += 1,
                    Status::Failed => s.failed += 1,
                    Status::Skipped => s.skipped += 1,
                }
                if call.status != Status::Skipped {
                    s.max_abs = s.max_abs.max(call.max_abs);
                    s.max_rel = s.max_rel.max(call.max_rel);
                }
            }
        }
        map
    }

    /// The coverage figures.
    pub fn coverage(&self) -> Coverage {
        let passing: BTreeSet<&str> = self
            .cases
            .iter()
            .filter(|c| c.status == Status::Passed)
            .filter_map(|c| c.entry.as_deref())
            .collect();
        let (visited, with_cases) = if self.index.is_empty() {
            let seen: BTreeSet<&str> = self
                .cases
                .iter()
                .filter_map(|c| c.entry.as_deref())
                .collect();
            (seen.len(), seen.len())
        } else {
            (
                self.index.len(),
                self.index.iter().filter(|e| e.status == "cases").count(),
            )
        };
        let per_op = self.per_op();
        Coverage {
            visited,
            with_cases,
            passing: passing.len(),
            overloads: per_op.len(),
            overloads_passing: per_op
                .values()
                .filter(|s| s.passed > 0 && s.failed == 0)
                .count(),
        }
    }

    /// The coverage line.
    pub fn coverage_line(&self) -> String {
        let c = self.coverage();
        format!(
            "coverage: {}/{} OpInfo entries visited by the generator have a passing sample ({} have cases); \
             {}/{} ATen overloads pass every call",
            c.passing, c.visited, c.with_cases, c.overloads_passing, c.overloads
        )
    }

    /// Prints the per-operator table, the failures, the skip reasons, the coverage line and the
    /// summary line (last).
    pub fn print_table(&self, w: &mut impl Write) -> io::Result<()> {
        let chip = self.chip.as_deref().unwrap_or("default");
        writeln!(
            w,
            "golden run of {} (mode {}, chip {chip})",
            self.dir.display(),
            self.mode
        )?;
        let per_op = self.per_op();
        let width = per_op.keys().map(String::len).max().unwrap_or(8).max(8);
        writeln!(
            w,
            "{:width$}  {:>7} {:>7} {:>7}  {:>11} {:>11}",
            "operator", "passed", "failed", "skipped", "max abs", "max rel"
        )?;
        for (op, s) in &per_op {
            writeln!(
                w,
                "{op:width$}  {:>7} {:>7} {:>7}  {:>11} {:>11}",
                s.passed,
                s.failed,
                s.skipped,
                fmt_err(s.max_abs),
                fmt_err(s.max_rel)
            )?;
        }
        let failures: Vec<&CaseResult> = self
            .cases
            .iter()
            .filter(|c| c.status == Status::Failed)
            .collect();
        if !failures.is_empty() {
            writeln!(w, "\nfailures:")?;
            for c in failures.iter().take(MAX_LISTED_FAILURES) {
                writeln!(
                    w,
                    "  FAIL {} [{}]: {}",
                    c.id,
                    c.file,
                    c.reason.as_deref().unwrap_or("")
                )?;
            }
            if failures.len() > MAX_LISTED_FAILURES {
                writeln!(
                    w,
                    "  ... and {} more (see the JSON report)",
                    failures.len() - MAX_LISTED_FAILURES
                )?;
            }
        }
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for c in self.cases.iter().filter(|c| c.status == Status::Skipped) {
            *reasons
                .entry(c.reason.as_deref().unwrap_or(""))
                .or_default() += 1;
        }
        if !reasons.is_empty() {
            let mut sorted: Vec<(&str, usize)> = reasons.into_iter().collect();
            sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            writeln!(w, "\nskipped cases by reason:")?;
            for (reason, n) in sorted.iter().take(40) {
                writeln!(w, "  {n:>6}  {reason}")?;
            }
            if sorted.len() > 40 {
                writeln!(
                    w,
                    "  ... and {} more reasons (see the JSON report)",
                    sorted.len() - 40
                )?;
            }
        }
        writeln!(w, "\n{}", self.coverage_line())?;
        if !self.uncovered.is_empty() {
            writeln!(
                w,
                "{} registered overloads have no case in this directory",
                self.uncovered.len()
            )?;
        }
        writeln!(w, "{}", self.summary_line())
    }

    /// The JSON report: summary, coverage, per-operator counts and every case with its calls.
    /// Non-finite errors are written as the strings `"inf"` / `"nan"`.
    pub fn to_json(&self) -> Json {
        let cov = self.coverage();
        let ops: serde_json::Map<String, Json> = self
            .per_op()
            .into_iter()
            .map(|(op, s)| {
                let v = json!({"passed": s.passed, "failed": s.failed, "skipped": s.skipped,
                               "max_abs_err": num(s.max_abs), "max_rel_err": num(s.max_rel)});
                (op, v)
            })
            .collect();
        let cases: Vec<Json> = self
            .cases
            .iter()
            .map(|c| {
                let calls: Vec<Json> = c
                    .calls
                    .iter()
                    .map(|k| {
                        json!({"op": k.op, "status": k.status.name(), "reason": k.reason,
                               "dtypes": k.dtypes, "shapes": k.shapes,
                               "max_abs_err": num(k.max_abs), "max_rel_err": num(k.max_rel)})
                    })
                    .collect();
                json!({"id": c.id, "file": c.file, "opinfo": c.entry, "ops": c.ops, "status": c.status.name(),
                       "reason": c.reason, "dtypes": c.dtypes, "shapes": c.shapes,
                       "max_abs_err": num(c.max_abs), "max_rel_err": num(c.max_rel), "calls": calls})
            })
            .collect();
        json!({
            "dir": self.dir.display().to_string(),
            "mode": self.mode.name(),
            "chip": self.chip,
            "summary": {"passed": self.count(Status::Passed), "failed": self.count(Status::Failed),
                        "skipped": self.count(Status::Skipped), "line": self.summary_line()},
            "coverage": {"opinfo_visited": cov.visited, "opinfo_with_cases": cov.with_cases,
                         "opinfo_passing": cov.passing, "overloads": cov.overloads,
                         "overloads_passing": cov.overloads_passing, "line": self.coverage_line()},
            "operators": ops,
            "uncovered": self.uncovered,
            "cases": cases,
        })
    }
}

fn fmt_err(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.is_finite() {
        format!("{x:.3e}")
    } else {
        format!("{x}")
    }
}

fn num(x: f64) -> Json {
    if x.is_finite() {
        json!(x)
    } else if x.is_nan() {
        json!("nan")
    } else if x > 0.0 {
        json!("inf")
    } else {
        json!("-inf")
    }
}
