//! Running a directory of golden cases through an [`Executor`].
//!
//! Every `*.json` under the directory (recursively, in sorted order) is a manifest. A case of one
//! call, or an OpInfo sample's several calls (a composite operator as PyTorch decomposed it),
//! is replayed call by call with the inputs PyTorch recorded, so one wrong operator does not
//! cascade into the calls after it. A model-level case (a model's forward and backward) goes to
//! the executor as one sequence ([`Executor::call_chain`]) with the links
//! saying which arguments are earlier calls' outputs, so that a deferred or compiled mode runs
//! it as one graph; every call's outputs are still compared with PyTorch's, and a case passes
//! when all of its calls pass. Nothing
//! in a file stops the run: an unreadable manifest, a broken case or a missing tensor becomes a
//! failed case with the reason, and an executor that panics fails the call it panicked in
//! (the report gives the panic's message and where it happened; nothing, not even a backtrace,
//! is printed while the runner catches it: see [`crate::quiet`]).

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::compare::{Comparison, Tolerance, compare_outputs};
use crate::error::GoldenError;
use crate::executor::{Executor, Link, OpCall};
use crate::format::{
    Call, Case, CaseEntry, CaseFile, CompareMode, IndexEntry, Manifest, ToleranceSpec,
    load_manifest,
};
use crate::report::Report;
use crate::spec::ValueSpec;
use crate::store::TensorStore;
use crate::value::Value;

/// The backend execution mode a run is for (the CLI builds the executor for it; the runner only
/// records it in the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Each op launched as it is called.
    #[default]
    Strict,
    /// Each op waits for its kernel.
    Debug,
    /// Ops recorded and fused, run at sync points.
    Defer,
    /// Whole graph compiled to one program.
    Compile,
    /// Shapes only (PyTorch's meta device): every output's dtype and shape is checked against
    /// PyTorch's, values are not computed; a call whose output depends on values is skipped
    /// (the executor's error starts with [`NEEDS_VALUES`]).
    Meta,
}

/// How an executor's error starts when a call cannot run without values (in [`Mode::Meta`]).
pub const NEEDS_VALUES: &str = "needs values: ";

impl Mode {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Debug => "debug",
            Mode::Defer => "defer",
            Mode::Compile => "compile",
            Mode::Meta => "meta",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "strict" => Ok(Mode::Strict),
            "debug" => Ok(Mode::Debug),
            "defer" | "defer-and-fuse" => Ok(Mode::Defer),
            "compile" => Ok(Mode::Compile),
            "meta" => Ok(Mode::Meta),
            other => Err(format!(
                "unknown mode {other:?} (strict, debug, defer, compile, meta)"
            )),
        }
    }
}

/// Options of a run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The mode the executor runs in (recorded in the report).
    pub mode: Mode,
    /// The chip preset the executor runs on (recorded in the report).
    pub chip: Option<String>,
    /// Run only cases whose id, file or one of whose overloads contains this text.
    pub filter: Option<String>,
}

/// Outcome of a call or case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Matched PyTorch.
    Passed,
    /// Did not match, errored, or the case is malformed.
    Failed,
    /// The executor does not support an overload or dtype it needs.
    Skipped,
}

impl Status {
    /// `passed`, `failed` or `skipped`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// The result of one call of a case.
#[derive(Clone, Debug, PartialEq)]
pub struct CallResult {
    /// Overload name.
    pub op: String,
    /// Outcome.
    pub status: Status,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
    /// Greatest absolute error over the outputs.
    pub max_abs: f64,
    /// Greatest relative error over the outputs.
    pub max_rel: f64,
    /// Dtypes of the tensor arguments.
    pub dtypes: Vec<String>,
    /// Shapes of the tensor arguments.
    pub shapes: Vec<Vec<usize>>,
}

/// The result of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// Case id (for a file that could not be read: the file name).
    pub id: String,
    /// Manifest path relative to the run's directory.
    pub file: String,
    /// OpInfo entry (`name` or `name.variant`) when the case came from OpInfo.
    pub entry: Option<String>,
    /// Outcome: failed if any call failed, else skipped if any call was skipped, else passed.
    pub status: Status,
    /// Why it failed or was skipped (the first failing or skipped call's reason).
    pub reason: Option<String>,
    /// The overloads the case calls, in order of first appearance.
    pub ops: Vec<String>,
    /// Dtypes of all tensor arguments, sorted, unique.
    pub dtypes: Vec<String>,
    /// Shapes of the first call's tensor arguments.
    pub shapes: Vec<Vec<usize>>,
    /// Greatest absolute error over all calls.
    pub max_abs: f64,
    /// Greatest relative error over all calls.
    pub max_rel: f64,
    /// Per-call results (empty when the case could not be loaded).
    pub calls: Vec<CallResult>,
}

impl CaseResult {
    fn failed(id: String, file: String, reason: String) -> CaseResult {
        CaseResult {
            id,
            file,
            entry: None,
            status: Status::Failed,
            reason: Some(reason),
            ops: Vec::new(),
            dtypes: Vec::new(),
            shapes: Vec::new(),
            max_abs: 0.0,
            max_rel: 0.0,
            calls: Vec::new(),
        }
    }
}

/// Every `*.json` under `dir`, recursively, sorted; hidden files and folders are ignored.
pub fn manifest_paths(dir: &Path) -> Result<Vec<PathBuf>, GoldenError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|source| GoldenError::Io {
            path: d.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| GoldenError::Io {
                path: d.clone(),
                source,
            })?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(GoldenError::NoManifests(dir.to_path_buf()));
    }
    Ok(out)
}

/// Runs every case under `dir` through `exec` and returns the report.
pub fn run_dir(
    dir: &Path,
    exec: &mut dyn Executor,
    opts: &RunOptions,
) -> Result<Report, GoldenError> {
    let paths = manifest_paths(dir)?;
    let mut cases = Vec::new();
    let mut index: Vec<IndexEntry> = Vec::new();
    let mut covered = BTreeSet::new();
    for path in &paths {
        let rel = path.strip_prefix(dir).unwrap_or(path).display().to_string();
        match load_manifest(path) {
            Err(e) => cases.push(CaseResult::failed(
                rel.clone(),
                rel,
                format!("unreadable manifest: {e}"),
            )),
            Ok(Manifest::Index(ix)) => index.extend(ix.entries),
            Ok(Manifest::Cases(file)) => {
                for entry in &file.cases {
                    if let CaseEntry::Ok(case) = entry {
                        covered.extend(case.calls.iter().map(|c| c.op.clone()));
                    }
                }
                run_file(&file, &rel, exec, opts, &mut cases);
            }
        }
    }
    let uncovered: Vec<String> = if opts.filter.is_none() {
        exec.registered_overloads()
            .into_iter()
            .filter(|op| !covered.contains(op))
            .collect()
    } else {
        Vec::new()
    };
    let mut report = Report::new(
        dir.to_path_buf(),
        opts.mode,
        opts.chip.clone(),
        cases,
        index,
    );
    report.uncovered = uncovered;
    Ok(report)
}

fn matches_filter(filter: &Option<String>, rel: &str, id: &str, case: Option<&Case>) -> bool {
    let Some(f) = filter else { return true };
    rel.contains(f.as_str())
        || id.contains(f.as_str())
        || case.is_some_and(|c| c.calls.iter().any(|call| call.op.contains(f.as_str())))
}

fn run_file(
    file: &CaseFile,
    rel: &str,
    exec: &mut dyn Executor,
    opts: &RunOptions,
    out: &mut Vec<CaseResult>,
) {
    let store = match &file.tensors {
        None => Ok(TensorStore::default()),
        Some(p) => TensorStore::load(p).map_err(|e| e.to_string()),
    };
    for entry in &file.cases {
        match entry {
            CaseEntry::Malformed { id, reason } => {
                if matches_filter(&opts.filter, rel, id, None) {
                    out.push(CaseResult::failed(
                        id.clone(),
                        rel.to_string(),
                        format!("malformed case: {reason}"),
                    ));
                }
            }
            CaseEntry::Ok(case) => {
                if !matches_filter(&opts.filter, rel, &case.id, Some(case)) {
                    continue;
                }
                let result = match &store {
                    Ok(store) => run_case(case, file, store, rel, exec, opts.mode == Mode::Meta),
                    Err(e) => CaseResult::failed(
                        case.id.clone(),
                        rel.to_string(),
                        format!("tensor file: {e}"),
                    ),
                };
                out.push(with_case_info(result, case));
            }
        }
    }
}

fn with_case_info(mut r: CaseResult, case: &Case) -> CaseResult {
    r.entry = case
        .source
        .as_ref()
        .filter(|s| s.kind == "opinfo")
        .map(|s| s.entry());
    let mut ops: Vec<String> = Vec::new();
    for c in &case.calls {
        if !ops.contains(&c.op) {
            ops.push(c.op.clone());
        }
    }
    r.ops = ops;
    r
}

/// A call with its values loaded.
struct Resolved {
    args: Vec<Value>,
    expected: Vec<Value>,
}

fn resolve_call(call: &Call, file: &CaseFile, store: &TensorStore) -> Result<Resolved, String> {
    let schema = file
        .ops
        .get(&call.op)
        .ok_or_else(|| format!("{} is not in the op table", call.op))?;
    let args = call
        .args
        .iter()
        .zip(&schema.arguments)
        .map(|(v, a)| {
            store
                .resolve(v, &a.ty)
                .map_err(|e| format!("argument {}: {e}", a.name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let expected = call
        .outputs
        .iter()
        .zip(&schema.returns)
        .enumerate()
        .map(|(i, (v, r))| {
            store
                .resolve(v, &r.ty)
                .map_err(|e| format!("output {i}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Resolved { args, expected })
}

fn run_case(
    case: &Case,
    file: &CaseFile,
    store: &TensorStore,
    rel: &str,
    exec: &mut dyn Executor,
    meta: bool,
) -> CaseResult {
    let resolved = case
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| resolve_call(c, file, store).map_err(|e| format!("call {i} ({}): {e}", c.op)))
        .collect::<Result<Vec<_>, _>>();
    let resolved = match resolved {
        Ok(r) => r,
        Err(e) => {
            return CaseResult::failed(
                case.id.clone(),
                rel.to_string(),
                format!("malformed case: {e}"),
            );
        }
    };
    let op_calls: Vec<OpCall<'_>> = case
        .calls
        .iter()
        .zip(&resolved)
        .map(|(call, res)| OpCall {
            op: &call.op,
            schema: &file.ops[&call.op],
            args: &res.args,
        })
        .collect();
    let supported: Vec<Result<(), String>> = op_calls.iter().map(|c| exec.supports(c)).collect();
    // Model-level cases run as one sequence; an OpInfo sample's several calls (a composite
    // operator's decomposition) are checked each on PyTorch's inputs.
    let is_model = case.source.as_ref().is_some_and(|s| s.kind == "model");
    let calls: Vec<CallResult> =
        if is_model && case.calls.len() > 1 && supported.iter().all(Result::is_ok) {
            // A sequence: the executor runs it as one program where it can.
            let links: Vec<Vec<Link>> = case.calls.iter().map(links_of).collect();
            let outcome = crate::quiet::catch(|| exec.call_chain(&op_calls, &links));
            let outcomes: Vec<Result<Vec<Value>, String>> = match outcome {
                Ok(o) if o.len() == case.calls.len() => o,
                Ok(o) => vec![
                    Err(format!(
                        "the executor returned {} results for {} calls",
                        o.len(),
                        case.calls.len()
                    ));
                    case.calls.len()
                ],
                Err(p) => vec![Err(format!("executor panicked: {p}")); case.calls.len()],
            };
            let chained = inherit_tolerances(&case.calls, &links);
            chained
                .iter()
                .zip(&op_calls)
                .zip(&resolved)
                .zip(outcomes)
                .map(|(((call, oc), res), out)| check_call(call, oc, &res.expected, Ok(out), meta))
                .collect()
        } else {
            case.calls
                .iter()
                .zip(&op_calls)
                .zip(&resolved)
                .zip(supported)
                .map(|(((call, oc), res), sup)| match sup {
                    Err(why) => check_call(call, oc, &res.expected, Err(why), meta),
                    Ok(()) => {
                        let out = crate::quiet::catch(|| exec.call(oc))
                            .unwrap_or_else(|p| Err(format!("executor panicked: {p}")));
                        check_call(call, oc, &res.expected, Ok(out), meta)
                    }
                })
                .collect()
        };
    let mut dtypes: Vec<String> = calls
        .iter()
        .flat_map(|c| c.dtypes.iter().cloned())
        .collect();
    dtypes.sort();
    dtypes.dedup();
    let failed = calls
        .iter()
        .enumerate()
        .find(|(_, c)| c.status == Status::Failed);
    let skipped = calls.iter().find(|c| c.status == Status::Skipped);
    let (status, reason) = match (failed, skipped) {
        (Some((i, c)), _) => (
            Status::Failed,
            Some(format!(
                "call {i} ({}): {}",
                c.op,
                c.reason.clone().unwrap_or_default()
            )),
        ),
        (None, Some(c)) => (Status::Skipped, c.reason.clone()),
        (None, None) => (Status::Passed, None),
    };
    let mut total = Comparison {
        passed: true,
        max_abs: 0.0,
        max_rel: 0.0,
        reason: None,
    };
    for c in &calls {
        total.merge(
            Comparison {
                passed: true,
                max_abs: c.max_abs,
                max_rel: c.max_rel,
                reason: None,
            },
            "",
        );
    }
    CaseResult {
        id: case.id.clone(),
        file: rel.to_string(),
        entry: None,
        status,
        reason,
        ops: Vec::new(),
        dtypes,
        shapes: calls.first().map(|c| c.shapes.clone()).unwrap_or_default(),
        max_abs: total.max_abs,
        max_rel: total.max_rel,
        calls,
    }
}

/// The calls of a chain, each without a tolerance of its own given the largest of the calls
/// whose outputs it reads: in a chain a call's inputs are the backend's own earlier outputs,
/// so a call that adds no error of its own (a view, a split, a copy, for which the generator
/// records none) still carries the error its producers were allowed.
fn inherit_tolerances(calls: &[Call], links: &[Vec<Link>]) -> Vec<Call> {
    let mut out: Vec<Call> = calls.to_vec();
    for i in 0..out.len() {
        if out[i].tolerance.is_some() {
            continue;
        }
        let inherited = links[i]
            .iter()
            .filter_map(|l| out.get(l.call).and_then(|c| c.tolerance.clone()))
            .reduce(|a, b| ToleranceSpec {
                rtol: a.rtol.max(b.rtol),
                atol: a.atol.max(b.atol),
                why: String::new(),
            });
        out[i].tolerance = inherited.map(|t| ToleranceSpec {
            why: "inherited in the chain from the calls whose outputs it reads".into(),
            ..t
        });
    }
    out
}

/// The arguments of `call` that name an earlier call's output.
fn links_of(call: &Call) -> Vec<Link> {
    let link = |arg: usize, item: Option<usize>, r: &crate::spec::TensorRef| {
        r.from.as_ref().and_then(|f| match f.as_slice() {
            [c, o] => Some(Link {
                arg,
                item,
                call: *c,
                output: *o,
                output_item: None,
            }),
            [c, o, i] => Some(Link {
                arg,
                item,
                call: *c,
                output: *o,
                output_item: Some(*i),
            }),
            _ => None,
        })
    };
    let mut out = Vec::new();
    for (arg, v) in call.args.iter().enumerate() {
        match v {
            ValueSpec::Tensor(r) => out.extend(link(arg, None, r)),
            ValueSpec::Tensors(rs) => {
                for (i, r) in rs.iter().enumerate() {
                    if let Some(r) = r {
                        out.extend(link(arg, Some(i), r));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The result of one call: skipped (`Err(why)` from `supports`), or its outputs (or its
/// error) compared with the expected values (`meta`: dtypes and shapes only).
fn check_call(
    call: &Call,
    op_call: &OpCall<'_>,
    expected: &[Value],
    outcome: Result<Result<Vec<Value>, String>, String>,
    meta: bool,
) -> CallResult {
    let inputs = op_call.input_tensors();
    let mut result = CallResult {
        op: call.op.clone(),
        status: Status::Passed,
        reason: None,
        max_abs: 0.0,
        max_rel: 0.0,
        dtypes: inputs
            .iter()
            .map(|t| t.dtype().name().to_string())
            .collect(),
        shapes: inputs.iter().map(|t| t.shape().to_vec()).collect(),
    };
    let actual = match outcome {
        Err(why) => {
            result.status = Status::Skipped;
            result.reason = Some(why);
            return result;
        }
        Ok(Err(e)) if meta && e.starts_with(NEEDS_VALUES) => {
            result.status = Status::Skipped;
            result.reason = Some(e);
            return result;
        }
        Ok(Err(e)) => {
            result.status = Status::Failed;
            result.reason = Some(if e.starts_with("executor panicked") {
                e
            } else {
                format!("executor error: {e}")
            });
            return result;
        }
        Ok(Ok(values)) => values,
    };
    let tol = call.tolerance.as_ref().map(|t| Tolerance {
        rtol: t.rtol,
        atol: t.atol,
    });
    let how = if meta {
        CompareMode::Shape
    } else {
        call.compare
    };
    let mut cmp = compare_outputs(expected, &actual, how, tol);
    if !cmp.passed
        && how == CompareMode::Values
        && expected.len() == 2
        && actual.len() == 2
        && compare_outputs(&expected[..1], &actual[..1], how, tol).passed
        && crate::ties::indices_valid_among_ties(op_call, &actual)
    {
        // Values equal and every index points at an equal element: a tie broken otherwise.
        cmp = compare_outputs(&expected[..1], &actual[..1], how, tol);
    }
    if !cmp.passed
        && how == CompareMode::Values
        && let Some(aligned) = crate::signs::aligned_to_expected(op_call, expected, &actual)
    {
        // Eigen or singular vectors that differ from PyTorch's by sign only.
        cmp = compare_outputs(expected, &aligned, how, tol);
    }
    result.max_abs = cmp.max_abs;
    result.max_rel = cmp.max_rel;
    if !cmp.passed {
        result.status = Status::Failed;
        result.reason = cmp.reason;
    }
    result
}
