//! Checking a directory of cases without running them: every manifest parses, every case is
//! well-formed, every tensor it names exists and every view fits its storage. Also gathers what
//! the cases cover (overloads, dtypes), for tests and for `tpuemu golden check`-style tooling.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::GoldenError;
use crate::format::{Case, CaseEntry, IndexEntry, Manifest, load_manifest};
use crate::runner::manifest_paths;
use crate::store::TensorStore;

/// What a directory holds, and what is wrong with it.
#[derive(Clone, Debug, Default)]
pub struct Validation {
    /// Manifests read.
    pub files: usize,
    /// Valid cases.
    pub cases: usize,
    /// Everything wrong, one line each (`file: case: reason`).
    pub problems: Vec<String>,
    /// Calls per overload.
    pub calls_per_op: BTreeMap<String, usize>,
    /// Cases per dtype (the case's `dtype` field).
    pub cases_per_dtype: BTreeMap<String, usize>,
    /// The valid cases, with the file they came from (relative path).
    pub all_cases: Vec<(String, Case)>,
    /// The index entries found.
    pub index: Vec<IndexEntry>,
}

/// Loads and checks every case under `dir`.
pub fn validate_dir(dir: &Path) -> Result<Validation, GoldenError> {
    let mut v = Validation::default();
    for path in manifest_paths(dir)? {
        let rel = path
            .strip_prefix(dir)
            .unwrap_or(&path)
            .display()
            .to_string();
        v.files += 1;
        let file = match load_manifest(&path) {
            Ok(Manifest::Cases(f)) => f,
            Ok(Manifest::Index(ix)) => {
                v.index.extend(ix.entries);
                continue;
            }
            Err(e) => {
                v.problems.push(format!("{rel}: {e}"));
                continue;
            }
        };
        let store = match &file.tensors {
            Some(p) => match TensorStore::load(p) {
                Ok(s) => s,
                Err(e) => {
                    v.problems.push(format!("{rel}: {e}"));
                    continue;
                }
            },
            None => TensorStore::default(),
        };
        for entry in file.cases {
            let case = match entry {
                CaseEntry::Ok(c) => c,
                CaseEntry::Malformed { id, reason } => {
                    v.problems.push(format!("{rel}: {id}: {reason}"));
                    continue;
                }
            };
            let mut ok = true;
            for (i, call) in case.calls.iter().enumerate() {
                let schema = &file.ops[&call.op];
                let args = call
                    .args
                    .iter()
                    .zip(schema.arguments.iter().map(|a| a.ty.as_str()));
                let outs = call
                    .outputs
                    .iter()
                    .zip(schema.returns.iter().map(|r| r.ty.as_str()));
                for (spec, ty) in args.chain(outs) {
                    if let Err(e) = store.resolve(spec, ty) {
                        v.problems
                            .push(format!("{rel}: {}: call {i} ({}): {e}", case.id, call.op));
                        ok = false;
                    }
                }
                *v.calls_per_op.entry(call.op.clone()).or_default() += 1;
            }
            if ok {
                v.cases += 1;
                *v.cases_per_dtype
                    .entry(case.dtype.clone().unwrap_or_default())
                    .or_default() += 1;
                v.all_cases.push((rel.clone(), case));
            }
        }
    }
    Ok(v)
}
