//! The backend's internal layers, checked on its source: the lower layers (the IR, kernel
//! generation, code generation, storages, layouts, dtypes, the schema table) never name the
//! layers above them (the runtime, operators, tensors, fusion, compilation, DTensor), so a kernel
//! can be generated and tested without a runtime and nothing forms an import cycle.

use std::path::{Path, PathBuf};

/// Each lower layer, and the modules above it that it must not name.
const RULES: &[(&str, &[&str])] = &[
    (
        "ir",
        &[
            "runtime", "tensor", "fusion", "compile", "dtensor", "foreign",
        ],
    ),
    (
        "kernels",
        &[
            "runtime", "ops", "tensor", "fusion", "compile", "dtensor", "foreign",
        ],
    ),
    (
        "codegen",
        &[
            "runtime", "ops", "tensor", "ir", "kernels", "fusion", "compile", "dtensor",
        ],
    ),
    ("storage.rs", &["runtime", "ops", "tensor", "ir", "kernels"]),
    ("layout.rs", &["runtime", "ops", "tensor", "ir", "kernels"]),
    ("dtype.rs", &["runtime", "ops", "tensor", "ir", "kernels"]),
    (
        "ops/schema",
        &["runtime", "tensor", "ir", "kernels", "fusion", "compile"],
    ),
];

fn files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            files(&e.unwrap().path(), out);
        }
    } else if p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

/// `crate::NAME` in code (doc comments may link upwards: they are not imports).
fn names_module(text: &str, module: &str) -> Option<String> {
    let needle = format!("crate::{module}");
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .find(|l| {
            l.match_indices(&needle).any(|(i, _)| {
                let next = l[i + needle.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .map(str::to_string)
}

#[test]
fn lower_layers_never_name_the_layers_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (layer, above) in RULES {
        let mut fs = Vec::new();
        files(&src.join(layer), &mut fs);
        assert!(!fs.is_empty(), "layer {layer} has no source files");
        for f in fs {
            let text = std::fs::read_to_string(&f).unwrap();
            for m in *above {
                if let Some(line) = names_module(&text, m) {
                    broken.push(format!(
                        "{}: names crate::{m}: {}",
                        f.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    assert!(names_module("use crate::runtime::Core;", "runtime").is_some());
    assert!(names_module("/// see [`crate::runtime`]", "runtime").is_none());
    assert!(names_module("use crate::runtime_x::A;", "runtime").is_none());
}
