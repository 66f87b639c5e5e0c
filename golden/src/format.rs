//! The manifest format (`golden/README.md`): loading and validating `*.json` files.
//!
//! A manifest is either a case file (`"kind": "cases"`: an op table, cases of ATen calls, and the
//! name of the safetensors file holding their tensors) or an index (`"kind": "index"`: the OpInfo
//! entries the generator visited, for the coverage figure). A file that cannot be parsed at all is
//! a [`FormatError`]; a single broken case inside a good file becomes a [`CaseEntry::Malformed`]
//! so the rest of the file still runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value as Json;

use crate::error::FormatError;
use crate::spec::ValueSpec;

/// The `format` string this runner reads.
pub const FORMAT: &str = "tpuemu-golden/1";

/// One entry of a file's op table: the ATen schema of an overload its cases call.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OpSchema {
    /// PyTorch's schema string, e.g. `aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`.
    pub schema: String,
    /// Every argument, in schema order.
    pub arguments: Vec<ArgSchema>,
    /// Every return, in schema order (empty for `-> ()`).
    pub returns: Vec<ReturnSchema>,
}

/// One schema argument.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArgSchema {
    /// Argument name (`self`, `other`, `alpha`, ...).
    pub name: String,
    /// Type tag: the schema type without alias annotations and fixed list sizes
    /// (`Tensor`, `Tensor?`, `int[]?`, `SymInt[]`, `Scalar`, `ScalarType?`, ...).
    #[serde(rename = "type")]
    pub ty: String,
    /// The op writes to this argument (`Tensor(a!)`).
    #[serde(default)]
    pub mutable: bool,
    /// The argument is keyword-only (after `*` in the schema).
    #[serde(default)]
    pub kwarg_only: bool,
}

/// One schema return.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReturnSchema {
    /// Return name, often empty.
    #[serde(default)]
    pub name: String,
    /// Type tag, as for arguments.
    #[serde(rename = "type")]
    pub ty: String,
}

/// Where a case came from.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// `opinfo`, `explicit`, `model`, or anything a hand-written file chooses.
    pub kind: String,
    /// OpInfo entry name (`nn.functional.gelu`), or the explicit/model case's name.
    pub name: String,
    /// OpInfo variant (`trunc_rounding`), empty when none.
    #[serde(default)]
    pub variant: String,
    /// Index of the OpInfo sample.
    #[serde(default)]
    pub sample: Option<u64>,
}

impl Source {
    /// `name` or `name.variant`: the key OpInfo coverage counts by.
    pub fn entry(&self) -> String {
        if self.variant.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.variant)
        }
    }
}

/// How a call's outputs are compared.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CompareMode {
    /// Values within the tolerance (the default).
    #[default]
    Values,
    /// Only shapes and dtypes (outputs with uninitialised contents, e.g. `aten::empty`).
    Shape,
}

/// A per-call tolerance exception. `why` must say why the TPU legitimately differs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToleranceSpec {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// The justification (required, non-empty).
    pub why: String,
}

/// One ATen call of a case.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// Overload name as PyTorch prints it: `aten::add.Tensor`, `aten::mm` (default overload).
    pub op: String,
    /// One value per schema argument, in schema order.
    pub args: Vec<ValueSpec>,
    /// One value per schema return, in schema order.
    pub outputs: Vec<ValueSpec>,
    /// How outputs are compared.
    pub compare: CompareMode,
    /// Tolerance exception, when the dtype default does not apply.
    pub tolerance: Option<ToleranceSpec>,
}

/// One case: a sequence of ATen calls with their inputs and expected outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Unique id within the file, e.g. `add/float32/0`.
    pub id: String,
    /// Where it came from.
    pub source: Option<Source>,
    /// The dtype the case was generated for (informational).
    pub dtype: Option<String>,
    /// The seed it was generated with (informational).
    pub seed: Option<u64>,
    /// Human-readable description of the sample.
    pub description: Option<String>,
    /// The calls, in the order PyTorch made them.
    pub calls: Vec<Call>,
}

/// A case as loaded: valid, or broken with the reason.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseEntry {
    /// A valid case.
    Ok(Case),
    /// A case that does not follow the format; the run reports it as failed.
    Malformed {
        /// Its id, or `#N` (its position) when it has none.
        id: String,
        /// What is wrong.
        reason: String,
    },
}

/// A loaded case file.
#[derive(Clone, Debug)]
pub struct CaseFile {
    /// The manifest's path.
    pub path: PathBuf,
    /// The safetensors file (resolved next to the manifest), when the file names one.
    pub tensors: Option<PathBuf>,
    /// Op table by overload name.
    pub ops: BTreeMap<String, OpSchema>,
    /// The cases, in file order.
    pub cases: Vec<CaseEntry>,
}

/// One OpInfo entry in an index.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct IndexEntry {
    /// OpInfo name.
    pub name: String,
    /// OpInfo variant, empty when none.
    #[serde(default)]
    pub variant: String,
    /// `cases` or `skipped`.
    pub status: String,
    /// Why it has no cases.
    #[serde(default)]
    pub reason: Option<String>,
    /// How many cases it has.
    #[serde(default)]
    pub cases: usize,
}

impl IndexEntry {
    /// `name` or `name.variant`.
    pub fn entry(&self) -> String {
        if self.variant.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.variant)
        }
    }
}

/// A loaded index.
#[derive(Clone, Debug)]
pub struct IndexFile {
    /// The manifest's path.
    pub path: PathBuf,
    /// Every OpInfo entry the generator visited.
    pub entries: Vec<IndexEntry>,
}

/// A loaded manifest.
#[derive(Clone, Debug)]
pub enum Manifest {
    /// `"kind": "cases"`.
    Cases(CaseFile),
    /// `"kind": "index"`.
    Index(IndexFile),
}

#[derive(Deserialize)]
struct RawFile {
    format: String,
    kind: String,
    #[serde(default)]
    tensors: Option<String>,
    #[serde(default)]
    ops: BTreeMap<String, OpSchema>,
    #[serde(default)]
    cases: Vec<Json>,
    #[serde(default)]
    entries: Vec<IndexEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    id: String,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    description: Option<String>,
    calls: Vec<RawCall>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCall {
    op: String,
    args: Vec<Json>,
    outputs: Vec<Json>,
    #[serde(default)]
    compare: CompareMode,
    #[serde(default)]
    tolerance: Option<ToleranceSpec>,
}

/// Loads one manifest. Broken cases inside a readable file are kept as [`CaseEntry::Malformed`].
pub fn load_manifest(path: &Path) -> Result<Manifest, FormatError> {
    let text = std::fs::read_to_string(path).map_err(|source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_manifest(path, &text)
}

/// Parses manifest text; `path` names it in errors and locates its safetensors file.
pub fn parse_manifest(path: &Path, text: &str) -> Result<Manifest, FormatError> {
    let json_err = |message: String| FormatError::Json {
        path: path.to_path_buf(),
        message,
    };
    let raw: RawFile = serde_json::from_str(text).map_err(|e| json_err(e.to_string()))?;
    if raw.format != FORMAT {
        return Err(FormatError::Version {
            path: path.to_path_buf(),
            found: raw.format,
            expected: FORMAT,
        });
    }
    match raw.kind.as_str() {
        "index" => Ok(Manifest::Index(IndexFile {
            path: path.to_path_buf(),
            entries: raw.entries,
        })),
        "cases" => {
            let dir = path.parent().unwrap_or(Path::new("."));
            let mut seen = BTreeSet::new();
            let cases = raw
                .cases
                .into_iter()
                .enumerate()
                .map(|(i, json)| {
                    let fallback = json
                        .get("id")
                        .and_then(Json::as_str)
                        .map_or(format!("#{i}"), str::to_string);
                    match parse_case(json, &raw.ops) {
                        Ok(case) if !seen.insert(case.id.clone()) => CaseEntry::Malformed {
                            id: case.id,
                            reason: "duplicate case id in this file".into(),
                        },
                        Ok(case) => CaseEntry::Ok(case),
                        Err(reason) => CaseEntry::Malformed {
                            id: fallback,
                            reason,
                        },
                    }
                })
                .collect();
            Ok(Manifest::Cases(CaseFile {
                path: path.to_path_buf(),
                tensors: raw.tensors.map(|t| dir.join(t)),
                ops: raw.ops,
                cases,
            }))
        }
        other => Err(json_err(format!(
            "unknown kind {other:?} (expected \"cases\" or \"index\")"
        ))),
    }
}

fn parse_case(json: Json, ops: &BTreeMap<String, OpSchema>) -> Result<Case, String> {
    let raw: RawCase = serde_json::from_value(json).map_err(|e| format!("invalid case: {e}"))?;
    if raw.calls.is_empty() {
        return Err("a case needs at least one call".into());
    }
    let calls = raw
        .calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| parse_call(c, ops).map_err(|e| format!("call {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Case {
        id: raw.id,
        source: raw.source,
        dtype: raw.dtype,
        seed: raw.seed,
        description: raw.description,
        calls,
    })
}

fn parse_call(raw: RawCall, ops: &BTreeMap<String, OpSchema>) -> Result<Call, String> {
    let op = &raw.op;
    let schema = ops
        .get(op)
        .ok_or_else(|| format!("{op} is not in the file's op table"))?;
    if raw.args.len() != schema.arguments.len() {
        return Err(format!(
            "{op}: {} arguments, the schema has {}",
            raw.args.len(),
            schema.arguments.len()
        ));
    }
    if raw.outputs.len() != schema.returns.len() {
        return Err(format!(
            "{op}: {} outputs, the schema returns {}",
            raw.outputs.len(),
            schema.returns.len()
        ));
    }
    let args = raw
        .args
        .iter()
        .zip(&schema.arguments)
        .map(|(v, a)| {
            let spec = ValueSpec::from_json(v)?;
            spec.check_type(&a.ty)?;
            Ok(spec)
        })
        .enumerate()
        .map(|(i, r): (usize, Result<ValueSpec, String>)| {
            r.map_err(|e| format!("{op} argument {i} ({}): {e}", schema.arguments[i].name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = raw
        .outputs
        .iter()
        .zip(&schema.returns)
        .enumerate()
        .map(|(i, (v, r))| {
            let spec = ValueSpec::from_json(v).map_err(|e| format!("{op} output {i}: {e}"))?;
            spec.check_type(&r.ty)
                .map_err(|e| format!("{op} output {i}: {e}"))?;
            Ok(spec)
        })
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(t) = &raw.tolerance {
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !valid(t.rtol) || !valid(t.atol) {
            return Err(format!("{op}: tolerance rtol/atol must be finite and >= 0"));
        }
        if t.why.trim().is_empty() {
            return Err(format!(
                "{op}: a tolerance exception needs a non-empty \"why\""
            ));
        }
    }
    Ok(Call {
        op: raw.op,
        args,
        outputs,
        compare: raw.compare,
        tolerance: raw.tolerance,
    })
}
