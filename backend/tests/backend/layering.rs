//! The backend's internal layers, checked on its source. The lowest layers — errors, dtypes,
//! storages, layouts, code generation, the IR, kernels — are the `tpuemu-kernels` crate, so Cargo
//! keeps them from naming anything above (a kernel can be generated and tested without a
//! runtime); PyTorch's schemas are `tpuemu-schema`, and DTensor, above everything, is
//! `tpuemu-dtensor`. Inside each crate every top-level module names only the modules below it in
//! one order ([`KERNELS_ORDER`]; [`ORDER`]: the fusion planner, the runtime, tensors, the
//! foreign-framework interface, operators, compilation), so no import cycle can be written
//! between them; [`RULES`] keeps the fusion planner pure; DTensor's modules import one another
//! without a cycle; and inside `src/` and `kernels/src/` no two files import each other in a
//! circle (a file's `crate::` and `super::` paths resolved to the files that define them; a
//! module and its own parent or children are not counted), the matrix-product kernels' five
//! files excepted. No file of `src/` holds a test: the library's unit tests are not built
//! (`test = false` in `Cargo.toml`), so the backend's tests live in `tests/backend/`.

use std::path::{Path, PathBuf};

/// Each layer of `src/` (the backend crate) that must not name certain layers above it beyond
/// what [`ORDER`] already forbids. (The layers below — errors, dtypes, storages, layouts, code
/// generation, the IR, kernels — are the `tpuemu-kernels` crate: Cargo keeps them from naming
/// anything here.)
const RULES: &[(&str, &[&str])] = &[
    // The fusion planner is pure: nodes in, fused groups out; the runtime runs them.
    (
        "fusion",
        &["runtime", "ops", "tensor", "compile", "foreign"],
    ),
    // Binding values to a schema needs values, not a runtime.
    ("ops/schema", &["runtime", "tensor", "fusion", "compile"]),
];

fn files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            files(&e.unwrap().path(), out);
        }
    } else if p.extension().is_some_and(|e| e == "rs") && !p.ends_with("testing.rs") {
        // `testing.rs` files are test-only helpers (`#[cfg(test)] mod testing`): they build
        // runtimes to run what they test.
        out.push(p.to_path_buf());
    }
}

/// The lines of `text` before its inline test module (`#[cfg(test)]` then `mod NAME {`; a
/// `mod testing;` declaration is not one).
fn before_tests(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1].trim_start().starts_with("mod ")
                && w[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines.truncate(end);
    lines
}

/// `crate::NAME` in code (doc comments may link upwards: they are not imports; nor is a
/// file's `#[cfg(test)]` module, last in the file, whose tests build what they test on the
/// layers above).
fn names_module(text: &str, module: &str) -> Option<String> {
    let needle = format!("crate::{module}");
    before_tests(text)
        .iter()
        .filter(|l| !l.trim_start().starts_with("//"))
        .find(|l| {
            l.match_indices(&needle).any(|(i, _)| {
                let next = l[i + needle.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .map(|l| l.to_string())
}

/// Each line of `files` that names one of the modules `above`, with its file.
fn upward_imports(files: &[PathBuf], above: &[&str]) -> Vec<String> {
    let mut broken = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for m in above {
            if let Some(line) = names_module(&text, m) {
                broken.push(format!(
                    "{}: names crate::{m}: {}",
                    f.display(),
                    line.trim()
                ));
            }
        }
    }
    broken
}

#[test]
fn lower_layers_never_name_the_layers_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (layer, above) in RULES {
        let mut fs = Vec::new();
        files(&src.join(layer), &mut fs);
        assert!(!fs.is_empty(), "layer {layer} has no source files");
        broken.extend(upward_imports(&fs, above));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Every top-level module of the backend crate, bottom layer first: a module may name only the
/// modules before it (and the `tpuemu-kernels` crate's, re-exported under their own names), so
/// no import cycle can be written between them.
const ORDER: &[&str] = &["fusion", "runtime", "tensor", "foreign", "ops", "compile"];

/// The same rule inside `tpuemu-kernels` (`backend/kernels/src`).
const KERNELS_ORDER: &[&str] = &[
    "error", "dtype", "rng", "storage", "layout", "raw_view", "codegen", "ir", "kernels",
];

#[test]
fn every_module_names_only_the_modules_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, order) in [("src", ORDER), ("kernels/src", KERNELS_ORDER)] {
        check_order(&root.join(dir), order);
    }
}

fn check_order(src: &Path, order: &[&str]) {
    // The order lists every module, so a new one must be given its place.
    let mut modules: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            name.trim_end_matches(".rs").to_string()
        })
        .filter(|m| m != "lib")
        .collect();
    modules.sort();
    modules.dedup();
    let mut listed: Vec<String> = order.iter().map(|m| m.to_string()).collect();
    listed.sort();
    assert_eq!(
        modules,
        listed,
        "{} and the order list different modules",
        src.display()
    );
    let mut broken = Vec::new();
    for (i, module) in order.iter().enumerate() {
        let mut fs = Vec::new();
        for p in [src.join(module), src.join(format!("{module}.rs"))] {
            if p.exists() {
                files(&p, &mut fs);
            }
        }
        assert!(!fs.is_empty(), "module {module} has no source files");
        broken.extend(upward_imports(&fs, &order[i + 1..]));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    assert!(names_module("use crate::runtime::Core;", "runtime").is_some());
    assert!(names_module("/// see [`crate::runtime`]", "runtime").is_none());
    assert!(names_module("use crate::runtime_x::A;", "runtime").is_none());
    assert!(
        names_module(
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::runtime::Core;\n}",
            "runtime"
        )
        .is_none()
    );
}

/// The top-level module of `crate::dtensor` that a path in `file` (relative to `dtensor/`)
/// names, for `super::X`, `super::super::X` and `crate::X`.
fn dtensor_targets(file: &Path, text: &str) -> Vec<String> {
    let depth = file.components().count() - 1; // 0 for dtensor/x.rs, 1 for dtensor/p/y.rs
    let own = file
        .components()
        .next()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .unwrap_or_default();
    let prefixes = [
        ("super::".repeat(depth + 1), true),
        ("crate::".to_string(), true),
    ];
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (p, _) in &prefixes {
            for (i, _) in line.match_indices(p.as_str()) {
                let before = line[..i].chars().last();
                if before.is_some_and(|c| c == ':' || c.is_alphanumeric() || c == '_') {
                    continue; // `super::super::x` seen through its second `super::`
                }
                let rest = &line[i + p.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "super" && name != own {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// A cycle in the directed graph, if any (depth-first search).
fn find_cycle(edges: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &std::collections::BTreeMap<String, Vec<String>>,
        state: &mut std::collections::BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|p| p == n).unwrap();
                let mut c = path[at..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = std::collections::BTreeMap::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn dtensor_modules_import_one_another_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("dtensor/src");
    let mut fs = Vec::new();
    files(&root, &mut fs);
    let mut edges: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for f in fs {
        let rel = f.strip_prefix(&root).unwrap().to_path_buf();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue; // the crate root declares and re-exports its modules
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let e = edges.entry(module).or_default();
        for t in dtensor_targets(&rel, &text) {
            if !e.contains(&t) {
                e.push(t);
            }
        }
    }
    assert!(
        edges.len() >= 8,
        "dtensor modules found: {:?}",
        edges.keys()
    );
    assert_eq!(find_cycle(&edges), None, "import graph: {edges:?}");
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let a = Path::new("a.rs");
    assert_eq!(dtensor_targets(a, "use super::b::X;"), vec!["b"]);
    assert_eq!(
        dtensor_targets(Path::new("p/q.rs"), "use super::super::c::{Y, Z};"),
        vec!["c"]
    );
    assert!(dtensor_targets(a, "/// [`super::b`]").is_empty());
    let mut g = std::collections::BTreeMap::new();
    g.insert("a".to_string(), vec!["b".to_string()]);
    g.insert("b".to_string(), vec!["c".to_string()]);
    assert_eq!(find_cycle(&g), None);
    g.insert("c".to_string(), vec!["a".to_string()]);
    assert!(find_cycle(&g).is_some());
}

/// A file's module path inside its crate (`src/ops/binary/arith.rs` → `ops::binary::arith`; a
/// `mod.rs` names its folder).
fn module_of(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).unwrap().with_extension("");
    let mut m: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if m.last().is_some_and(|l| l == "mod" || l == "lib") {
        m.pop();
    }
    m
}

/// The file defining module path `m` or, failing that, its longest prefix that is a file.
fn file_of(src: &Path, m: &[String]) -> Option<PathBuf> {
    (1..=m.len()).rev().find_map(|k| {
        let dir: PathBuf = m[..k].iter().collect();
        [
            src.join(&dir).with_extension("rs"),
            src.join(&dir).join("mod.rs"),
        ]
        .into_iter()
        .find(|p| p.exists())
    })
}

/// The code of a file: comments and the trailing `#[cfg(test)]` module left out.
fn code_of(text: &str) -> String {
    before_tests(text)
        .iter()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The paths a `use` tree or an inline path names from `s` on (`a::b::{c, d::e}` gives
/// `a::b::c` and `a::b::d::e`), each as segments.
fn paths_at(s: &str) -> Vec<Vec<String>> {
    let mut segs: Vec<String> = Vec::new();
    let mut rest = s.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            return group_items(group)
                .into_iter()
                .flat_map(paths_at)
                .map(|p| [segs.clone(), p].concat())
                .collect();
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        segs.push(name);
        match rest.trim_start().strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    vec![segs]
}

/// The items of a `use` group whose text starts after its `{`: split at its top-level commas,
/// up to its `}`.
fn group_items(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(group[start..i].trim());
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.retain(|x| !x.is_empty());
    out
}

/// The module paths `text` (the code of module `module`) names through `crate::` and `super::`.
fn named_modules(module: &[String], text: &str) -> Vec<Vec<String>> {
    let code = code_of(text);
    let mut out = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        for (i, _) in code.match_indices(prefix) {
            let before = code[..i].chars().last();
            if before.is_some_and(|c| c == ':' || c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut base = base.clone();
            let mut rest = &code[i + prefix.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            out.extend(
                paths_at(rest)
                    .into_iter()
                    .map(|p| [base.clone(), p].concat()),
            );
        }
    }
    out
}

/// The file-level import graph of the crate at `src`: an edge from a file to each file whose
/// items it names, leaving out its own ancestors and descendants (a module and its parent name
/// each other by nature: `super::helper`, `child::Item`).
fn file_graph(src: &Path, skip: &[&str]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut fs = Vec::new();
    files(src, &mut fs);
    let mut edges: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for f in fs {
        let rel = f.strip_prefix(src).unwrap().to_string_lossy().to_string();
        if skip.iter().any(|s| rel.starts_with(s)) {
            continue;
        }
        let module = module_of(src, &f);
        let text = std::fs::read_to_string(&f).unwrap();
        let e = edges.entry(rel.clone()).or_default();
        for p in named_modules(&module, &text) {
            let Some(t) = file_of(src, &p) else { continue };
            let tm = module_of(src, &t);
            let related = tm.starts_with(&module) || module.starts_with(&tm);
            let t = t.strip_prefix(src).unwrap().to_string_lossy().to_string();
            if !related && !skip.iter().any(|s| t.starts_with(s)) && !e.contains(&t) {
                e.push(t);
            }
        }
    }
    edges
}

#[test]
fn no_two_files_import_each_other_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The matrix-product kernels are one design across five files (the pair kernel is the
    // streamed one plus a rider, the planner calls the pair planner): the one circle left.
    for (dir, skip) in [("src", &[][..]), ("kernels/src", &["kernels/matmul/"][..])] {
        let edges = file_graph(&root.join(dir), skip);
        assert!(edges.len() > 50, "{dir}: {} files", edges.len());
        assert_eq!(find_cycle(&edges), None, "{dir}: a circle of imports");
    }
}

#[test]
fn the_file_graph_reads_use_trees_and_relative_paths() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(
        paths_at("a::b::{c, d::{e, f}};"),
        vec![m("a::b::c"), m("a::b::d::e"), m("a::b::d::f")]
    );
    let got = named_modules(
        &m("ops::binary::arith"),
        "use super::{Guard, compute};\nuse crate::ops::helpers::map; // crate::x\nfn f() { super::super::wide::g() }",
    );
    assert!(got.contains(&m("ops::binary::Guard")), "{got:?}");
    assert!(got.contains(&m("ops::helpers::map")), "{got:?}");
    assert!(got.contains(&m("ops::wide::g")), "{got:?}");
    assert!(!got.iter().any(|p| p[0] == "x"), "{got:?}");
}

/// The lines of `text` that are a test (`#[test]`) or test-only code (`#[cfg(test)]`), comments
/// left out, with their line numbers.
fn test_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| l.contains("#[test]") || l.contains("#[cfg(test)]"))
        .map(|(i, l)| (i + 1, l.trim()))
        .collect()
}

#[test]
fn the_library_holds_no_unit_tests() {
    assert_eq!(
        test_lines("fn f() {}\n// #[test]\n#[cfg(test)]\nmod tests {\n    #[test]\n"),
        vec![(3, "#[cfg(test)]"), (5, "#[test]")]
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Every file, `testing.rs` helpers included (`files` leaves them out).
    let (mut dirs, mut found) = (vec![src], Vec::new());
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (n, l) in test_lines(&text) {
                    found.push(format!("{}:{n}: {l}", p.display()));
                }
            }
        }
    }
    found.sort();
    assert!(
        found.is_empty(),
        "the library's unit tests do not run (`test = false` in backend/Cargo.toml): move these \
         tests to backend/tests/backend/ (the backend's test binary, tests/backend.rs)\n{}",
        found.join("\n")
    );
}
