//! Lists every `#[aten]` operator function under `src/ops` for the registry.
//!
//! Writes `$OUT_DIR/aten_defs.rs` with `aten_defs()`, calling the `__aten_<function>()` that
//! `#[aten]` generates beside each function, by module path (`src/ops/nn/conv.rs` →
//! `crate::ops::nn::conv`). An attribute is a line whose text starts with `#[aten(`; the
//! function is the first `fn` after it. A function this scan missed would leave its generated
//! registration unused, which the build's `dead_code` lint (an error under clippy's
//! `-D warnings`) reports.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=src/ops");
    let root = Path::new("src/ops");
    let mut files = Vec::new();
    walk(root, &mut files);
    files.sort();
    let mut calls = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read an ops source file");
        let module = module_path(root, file);
        let mut pending = false;
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("#[aten(") {
                pending = true;
                continue;
            }
            if pending && let Some(name) = fn_name(t) {
                calls.push(format!("{module}::__aten_{name}()"));
                pending = false;
            }
        }
        assert!(
            !pending,
            "{}: #[aten] without a function after it",
            file.display()
        );
    }
    let mut out = String::from(
        "/// The registrations of every `#[aten]` function under `src/ops` (written by `build.rs`).\n\
         pub(crate) fn aten_defs() -> Vec<OpDef> {\n    vec![\n",
    );
    for c in &calls {
        writeln!(out, "        {c},").unwrap();
    }
    out.push_str("    ]\n}\n");
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(dest.join("aten_defs.rs"), out).expect("write aten_defs.rs");
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/ops") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/ops/nn/conv.rs` → `crate::ops::nn::conv`; `src/ops/nn/mod.rs` → `crate::ops::nn`.
fn module_path(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).expect("under src/ops");
    let mut parts = vec!["crate".to_string(), "ops".to_string()];
    for c in rel.with_extension("").components() {
        let c = c.as_os_str().to_string_lossy().into_owned();
        if c != "mod" {
            parts.push(c);
        }
    }
    parts.join("::")
}

/// The function's name if the line declares one (`pub(crate) fn add(` → `add`).
fn fn_name(line: &str) -> Option<&str> {
    let at = line.find("fn ")?;
    let before = &line[..at];
    let ok = before
        .split_whitespace()
        .all(|w| w.starts_with("pub") || matches!(w, "const" | "unsafe" | "async" | "extern"));
    if !ok {
        return None;
    }
    let rest = &line[at + 3..];
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}
