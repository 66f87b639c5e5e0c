//! Hostile golden inputs (issue 19): mutated manifests and safetensors files, and views whose
//! sizes or strides overflow. Nothing panics; sizes are checked before anything is allocated;
//! the runner turns whatever it cannot read into a failed case and goes on.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tpuemu_golden::format::parse_manifest;
use tpuemu_golden::store::TensorStore;
use tpuemu_golden::{DType, HostTensor, RunOptions, TensorError, run_dir};

use crate::host::HostExec;
use crate::runner::cases_dir;

fn seed() -> (String, Vec<u8>) {
    let dir = cases_dir().join("opinfo");
    (
        std::fs::read_to_string(dir.join("ceil.json")).unwrap(),
        std::fs::read(dir.join("ceil.safetensors")).unwrap(),
    )
}

#[test]
fn sizes_that_overflow_are_refused_before_allocating() {
    // 2^40 x 2^40 elements: more than 2^64 bytes; a product that wraps in 64 bits.
    for shape in [
        vec![1 << 40, 1 << 40],
        vec![usize::MAX, 2],
        vec![1 << 31, 1 << 31],
    ] {
        let e = HostTensor::new(DType::F32, shape.clone(), vec![0; 16]).unwrap_err();
        assert!(matches!(e, TensorError::TooLarge { .. }), "{shape:?}: {e}");
        assert!(e.to_string().contains("at most"), "{e}");
    }
    // A safetensors header declaring a huge shape over 8 bytes of data.
    let header = br#"{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0; 8]);
    assert!(TensorStore::from_bytes(Path::new("h.safetensors"), &bytes).is_err());
}

/// Text pieces that steer a manifest towards the interesting corners.
const JSON_FRAGMENTS: &[&str] = &[
    r#"{"tensor":"t0"}"#,
    r#"{"tensor":"t0","view":{"size":[4294967296,4294967296],"stride":[1,1],"offset":0}}"#,
    r#"{"tensor":"t0","view":{"size":[2],"stride":[9223372036854775807],"offset":18446744073709551615}}"#,
    r#"{"ints":[-1,18446744073709551616]}"#,
    r#"{"float":"nan"}"#,
    r#"{"float":1e400}"#,
    r#""tolerance":{"rtol":-1,"atol":"inf"}"#,
    "[",
    "]",
    "{",
    "}",
    ",",
    "\"",
    "null",
    "-1",
    "1e308",
    "\"aten::ceil\"",
    "\"aten::nope\"",
];

fn mutate(text: &str, edits: &[(prop::sample::Index, prop::sample::Index, u8)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, what, kind) in edits {
        if chars.is_empty() {
            break;
        }
        let i = at.index(chars.len());
        match kind % 3 {
            0 => {
                let frag = JSON_FRAGMENTS[what.index(JSON_FRAGMENTS.len())];
                chars.splice(i..i, frag.chars());
            }
            1 => {
                let end = (i + 1 + what.index(16)).min(chars.len());
                chars.drain(i..end);
            }
            _ => chars[i] = ['0', '9', '"', '-', '.', 'e'][what.index(6)],
        }
    }
    chars.into_iter().collect()
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tpuemu-golden-fuzz-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

proptest! {
    // Bounded for CI: about a second each.
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_manifests_parse_or_fail_never_panic(
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()),
            1..6,
        ),
    ) {
        let (text, _) = seed();
        let _ = parse_manifest(Path::new("ceil.json"), &mutate(&text, &edits));
    }

    #[test]
    fn mutated_safetensors_load_or_fail_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..6),
    ) {
        let (_, mut bytes) = seed();
        for (at, value, kind) in edits {
            if bytes.is_empty() { break; }
            // Mostly in the header (the first few hundred bytes), where sizes live.
            let i = at.index(bytes.len().min(600));
            match kind {
                0 => bytes[i] = value,
                1 => bytes[i] = b"0123456789"[value as usize % 10],
                2 => bytes.truncate(i),
                _ => bytes.insert(i, value),
            }
        }
        if let Ok(store) = TensorStore::from_bytes(Path::new("m.safetensors"), &bytes) {
            // Whatever loads holds exactly its shape's bytes.
            for name in ["t0", "t1", "t2"] {
                if let Some(t) = store.get(name) {
                    let numel: usize = t.shape().iter().product();
                    prop_assert_eq!(numel * t.dtype().size(), t.storage_bytes().len());
                }
            }
        }
    }
}

proptest! {
    // Bounded for CI: each case writes a directory and runs it (a few seconds in all).
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_runner_survives_mutated_manifests(
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()),
            1..6,
        ),
    ) {
        let (text, tensors) = seed();
        let dir = temp_dir("run");
        std::fs::write(dir.join("ceil.json"), mutate(&text, &edits)).unwrap();
        std::fs::write(dir.join("ceil.safetensors"), tensors).unwrap();
        let r = tpuemu_golden::quiet::catch(|| run_dir(&dir, &mut HostExec, &RunOptions::default()));
        let _ = std::fs::remove_dir_all(&dir);
        prop_assert!(r.is_ok(), "the runner panicked: {}", r.unwrap_err());
    }
}
