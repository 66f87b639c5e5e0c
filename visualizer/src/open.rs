//! Opening a run: a trace file, or a directory holding a distributed run's rank traces.
//!
//! A file is read as Chrome trace JSON ([`load_trace`]). A directory ([`load_run`]) is read
//! file by file, every `*.json` in it in name order; when the traces carry `meta.rank` (one
//! per process of a `torchrun` job, `step.rank0.json`, `step.rank1.json`, ...) they are merged
//! with [`Trace::merge_ranks`] into one trace with a chip per rank. A directory with one plain
//! trace opens that trace. Anything else is a [`VizError`] naming the directory and the files:
//! no traces, an unreadable file, several traces without ranks, rank traces that do not merge
//! (plain traces among them, a rank twice, different runs).

use std::path::{Path, PathBuf};

use tpuemu_isa::trace::{Trace, chrome};

use crate::error::VizError;
use crate::model::TraceModel;

/// The largest trace file the viewer reads: 4 GiB (the demo's traces are about 50 MB).
pub const MAX_TRACE_BYTES: u64 = 4 << 30;

/// Reads a trace file (Chrome trace JSON).
pub fn load_trace(path: &Path) -> Result<Trace, VizError> {
    use std::io::Read;
    let read = |source| VizError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read)?
        .take(MAX_TRACE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(VizError::NotATrace {
            path: path.to_path_buf(),
            reason: format!("longer than {MAX_TRACE_BYTES} bytes, the most the viewer reads"),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| VizError::NotATrace {
        path: path.to_path_buf(),
        reason: format!("not UTF-8 text ({e})"),
    })?;
    chrome::from_chrome_json(&text).map_err(|e| VizError::NotATrace {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The trace files of a run directory: its `*.json` files, sorted by name.
pub fn run_files(dir: &Path) -> Result<Vec<PathBuf>, VizError> {
    let read = |source| VizError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        let json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if json && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads a run: a trace file as it is, or a directory's traces merged into one (see the
/// module docs). Returns the trace and the label to show when its meta has none.
pub fn load_run(path: &Path) -> Result<(Trace, String), VizError> {
    if !path.is_dir() {
        return Ok((load_trace(path)?, file_name(path)));
    }
    let files = run_files(path)?;
    if files.is_empty() {
        return Err(VizError::EmptyRun {
            dir: path.to_path_buf(),
        });
    }
    let traces = files
        .iter()
        .map(|f| load_trace(f))
        .collect::<Result<Vec<Trace>, VizError>>()?;
    let dir_name = dir_name(path);
    let ranked = traces.iter().filter(|t| t.meta.rank.is_some()).count();
    if ranked == 0 {
        // Plain traces: one opens as itself; several are not one run.
        if traces.len() > 1 {
            return Err(VizError::NotARun {
                dir: path.to_path_buf(),
                count: traces.len(),
                files: names(&files),
            });
        }
        let fallback = file_name(&files[0]);
        return Ok((traces.into_iter().next().unwrap_or_default(), fallback));
    }
    let ranks: Vec<Option<u32>> = traces.iter().map(|t| t.meta.rank).collect();
    let mut merged = Trace::merge_ranks(traces).map_err(|source| VizError::Merge {
        dir: path.to_path_buf(),
        files: describe(&files, &source.traces(), &ranks),
        source: Box::new(source),
    })?;
    // Runs compared side by side often share a label (`step`): say which directory.
    merged.meta.label = match merged.meta.label.as_str() {
        "" => dir_name.clone(),
        l => format!("{dir_name}/{l}"),
    };
    Ok((merged, dir_name))
}

/// Reads and indexes a trace file, or a run directory (see [`load_run`]); the label falls
/// back to the file or directory name.
pub fn open_trace(path: &Path) -> Result<TraceModel, VizError> {
    let (trace, fallback) = load_run(path)?;
    Ok(TraceModel::new(trace, &fallback))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A directory's name, also for `.` and paths ending in `..`.
fn dir_name(path: &Path) -> String {
    let name = file_name(path);
    if !name.is_empty() {
        return name;
    }
    std::fs::canonicalize(path)
        .ok()
        .map(|p| file_name(&p))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| path.display().to_string())
}

/// `a.json, b.json`.
fn names(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| file_name(f))
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` (step.rank0.json: rank 0, other.json: no rank)` for the files at `which`, or nothing.
fn describe(files: &[PathBuf], which: &[usize], ranks: &[Option<u32>]) -> String {
    let list: Vec<String> = which
        .iter()
        .filter_map(|&i| {
            let rank = match ranks.get(i)? {
                Some(r) => format!("rank {r}"),
                None => "no rank".to_string(),
            };
            Some(format!("{}: {rank}", file_name(files.get(i)?)))
        })
        .collect();
    if list.is_empty() {
        String::new()
    } else {
        format!(" ({})", list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::{Group, LaneKind};
    use crate::synthetic::mode_pair;
    use crate::synthetic_ranks::rank_traces;

    /// A fresh directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tpuemu-viz-open-{}-{name}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, name: &str, trace: &Trace) {
        std::fs::write(dir.join(name), chrome::to_chrome_json(trace)).unwrap();
    }

    fn write_ranks(dir: &Path, ranks: u32) {
        for (r, t) in rank_traces(ranks, 6, false, "step").iter().enumerate() {
            write(dir, &format!("step.rank{r}.json"), t);
        }
    }

    #[test]
    fn missing_and_malformed_files_are_errors() {
        let dir = scratch("files");
        let missing = dir.join("missing.json");
        assert!(matches!(open_trace(&missing), Err(VizError::Read { .. })));
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{ not json").unwrap();
        let err = open_trace(&bad).unwrap_err();
        assert!(matches!(err, VizError::NotATrace { .. }));
        assert!(err.to_string().contains("bad.json"));
        let binary = dir.join("bin.json");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(
            open_trace(&binary),
            Err(VizError::NotATrace { .. })
        ));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_directory_of_rank_traces_opens_as_one_run() {
        let dir = scratch("run");
        write_ranks(&dir, 3);
        std::fs::write(dir.join("notes.txt"), "not a trace").unwrap();
        let m = open_trace(&dir).unwrap();
        assert_eq!(m.chips(), 3);
        assert_eq!(m.meta.world_size, Some(3));
        assert_eq!(m.label, format!("{}/step", dir_name(&dir)));
        let aten: Vec<(Group, LaneKind)> = m
            .lanes
            .iter()
            .filter(|l| l.label.ends_with("/aten"))
            .map(|l| (l.group, l.kind))
            .collect();
        assert_eq!(
            aten,
            (0..3)
                .map(|c| (Group::Chip(c), LaneKind::HostOps))
                .collect::<Vec<_>>()
        );
        // Each all_reduce and all_gather is joined to the two other ranks.
        assert_eq!(m.flows.iter().filter(|f| f.name == "collective").count(), 4);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_directory_with_one_plain_trace_opens_it() {
        let dir = scratch("plain");
        write(&dir, "strict.json", &mode_pair(6).0);
        let m = open_trace(&dir).unwrap();
        assert_eq!(m.label, "step strict");
        assert_eq!(m.chips(), 1);
        assert!(
            m.lanes
                .iter()
                .any(|l| l.label == "aten" && l.group == Group::Host)
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn directories_that_are_not_one_run_are_errors_naming_the_files() {
        let dir = scratch("bad-runs");
        let e = open_trace(&dir).unwrap_err();
        assert!(matches!(e, VizError::EmptyRun { .. }), "{e}");
        assert!(e.to_string().contains("no trace files"), "{e}");

        let (strict, defer) = mode_pair(6);
        write(&dir, "strict.json", &strict);
        write(&dir, "defer.json", &defer);
        let e = open_trace(&dir).unwrap_err();
        assert!(matches!(e, VizError::NotARun { count: 2, .. }), "{e}");
        assert!(e.to_string().contains("defer.json, strict.json"), "{e}");

        std::fs::remove_file(dir.join("defer.json")).unwrap();
        write_ranks(&dir, 2);
        let e = open_trace(&dir).unwrap_err();
        assert!(matches!(e, VizError::Merge { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("(strict.json: no rank, step.rank0.json: rank 0)"),
            "{e}"
        );

        std::fs::remove_file(dir.join("strict.json")).unwrap();
        let mut again = rank_traces(2, 6, false, "step").remove(1);
        again.meta.label = "other".into();
        write(&dir, "other.rank1.json", &again);
        let e = open_trace(&dir).unwrap_err();
        assert!(e.to_string().contains("rank 1 appears twice"), "{e}");
        assert!(
            e.to_string()
                .contains("other.rank1.json: rank 1, step.rank1.json: rank 1"),
            "{e}"
        );

        std::fs::write(dir.join("other.rank1.json"), "[1, 2").unwrap();
        let e = open_trace(&dir).unwrap_err();
        assert!(matches!(e, VizError::NotATrace { .. }), "{e}");
        assert!(e.to_string().contains("other.rank1.json"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
