//! Broken files and cases are failures with reasons, and the run goes on.

use std::path::PathBuf;

use tpuemu_golden::{RunOptions, Status, run_dir};

use crate::host::HostExec;

const OPS: &str = r#""ops":{"aten::neg":{"schema":"aten::neg(Tensor self) -> Tensor","arguments":[{"name":"self","type":"Tensor"}],"returns":[{"name":"","type":"Tensor"}]}}"#;

fn write_dir(name: &str, files: &[(&str, Vec<u8>)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tpuemu-golden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, bytes) in files {
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    dir
}

/// A safetensors file with f32 tensors `x` = [1, -2] and `y` = [-1, 2].
fn tensors() -> Vec<u8> {
    let header = br#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    for v in [1.0f32, -2.0, -1.0, 2.0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn case(id: &str, arg: &str, out: &str) -> String {
    format!(r#"{{"id":"{id}","calls":[{{"op":"aten::neg","args":[{arg}],"outputs":[{out}]}}]}}"#)
}

#[test]
fn broken_cases_fail_and_the_run_goes_on() {
    let cases = [
        case("good", r#"{"tensor":"x"}"#, r#"{"tensor":"y"}"#),
        case(
            "missing_tensor",
            r#"{"tensor":"nope"}"#,
            r#"{"tensor":"y"}"#,
        ),
        case("wrong_type", r#"{"ints":[1]}"#, r#"{"tensor":"y"}"#),
        r#"{"id":"no_calls","calls":[]}"#.to_string(),
        r#"{"id":"bad_op","calls":[{"op":"aten::nope","args":[],"outputs":[]}]}"#.to_string(),
        case(
            "bad_view",
            r#"{"tensor":"x","view":{"size":[3],"stride":[1],"offset":0}}"#,
            r#"{"tensor":"y"}"#,
        ),
        case("good", r#"{"tensor":"x"}"#, r#"{"tensor":"y"}"#),
    ];
    let manifest = format!(
        r#"{{"format":"tpuemu-golden/1","kind":"cases","tensors":"t.safetensors",{OPS},"cases":[{}]}}"#,
        cases.join(",")
    );
    let no_tensors = format!(
        r#"{{"format":"tpuemu-golden/1","kind":"cases","tensors":"absent.safetensors",{OPS},"cases":[{}]}}"#,
        case("orphan", r#"{"tensor":"x"}"#, r#"{"tensor":"y"}"#)
    );
    let dir = write_dir(
        "malformed",
        &[
            ("a.json", manifest.into_bytes()),
            ("t.safetensors", tensors()),
            ("b.json", b"{ not json".to_vec()),
            (
                "c.json",
                br#"{"format":"tpuemu-golden/0","kind":"cases"}"#.to_vec(),
            ),
            ("d.json", no_tensors.into_bytes()),
        ],
    );
    let report = run_dir(
        &dir,
        &mut HostExec,
        &RunOptions {
            filter: None,
            ..Default::default()
        },
    )
    .unwrap();
    let by_id = |id: &str| {
        report
            .cases
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no case {id}"))
    };
    assert_eq!(by_id("good").status, Status::Passed);
    let reason = |id: &str| {
        let c = by_id(id);
        assert_eq!(c.status, Status::Failed, "{id}");
        c.reason.clone().unwrap()
    };
    assert!(reason("missing_tensor").contains("tensor \"nope\" is not in t.safetensors"));
    assert!(reason("wrong_type").contains("a ints value for schema type Tensor"));
    assert!(reason("no_calls").contains("at least one call"));
    assert!(reason("bad_op").contains("not in the file's op table"));
    assert!(reason("bad_view").contains("view"));
    assert!(reason("b.json").contains("unreadable manifest"));
    assert!(reason("c.json").contains("tpuemu-golden/0"));
    assert!(reason("orphan").contains("absent.safetensors"));
    // The duplicate "good" is reported, not silently merged.
    assert!(report.cases.iter().any(|c| c.id == "good" && c.reason.as_deref().is_some_and(|r| r.contains("duplicate"))));
    assert!(!report.success());
}

#[test]
fn empty_or_missing_directory_is_an_error() {
    let dir = write_dir("empty", &[]);
    assert!(run_dir(&dir, &mut HostExec, &RunOptions::default()).is_err());
    assert!(run_dir(&dir.join("absent"), &mut HostExec, &RunOptions::default()).is_err());
}
