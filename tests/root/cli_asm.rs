//! `tpuemu asm` and `tpuemu disasm`: the examples round-trip through the binary, and garbage is
//! refused with exit status 1, a message, and no panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tpuemu(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(args)
        .output()
        .expect("the tpuemu binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh scratch directory under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "s"))
        .collect();
    v.sort();
    v
}

#[test]
fn examples_round_trip_through_the_binary() {
    let dir = scratch("cli_asm_examples");
    let list = examples();
    assert!(list.len() >= 2);
    for src in list {
        let a = dir.join("a.bin");
        let o = tpuemu(&[
            "asm".as_ref(),
            src.as_os_str(),
            "-o".as_ref(),
            a.as_os_str(),
        ]);
        assert!(o.status.success(), "{}: {}", src.display(), stderr(&o));
        let o = tpuemu(&["disasm".as_ref(), a.as_os_str()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = dir.join("b.s");
        std::fs::write(&text, &o.stdout).expect("write");
        let c = dir.join("c.bin");
        let o = tpuemu(&[
            "asm".as_ref(),
            text.as_os_str(),
            "-o".as_ref(),
            c.as_os_str(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read(&a).ok(),
            std::fs::read(&c).ok(),
            "{}",
            src.display()
        );
    }
}

#[test]
fn default_output_is_next_to_the_input() {
    let dir = scratch("cli_asm_default");
    let src = dir.join("k.s");
    std::fs::write(&src, "halt\n").expect("write");
    let o = tpuemu(&["asm".as_ref(), src.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.join("k.bin").exists());
}

#[test]
fn bad_assembly_reports_file_line_column_and_caret() {
    let dir = scratch("cli_asm_bad");
    let src = dir.join("j.s");
    std::fs::write(&src, "vadd.f32 v1, v2,\nfoo bar\n").expect("write");
    let o = tpuemu(&[
        "asm".as_ref(),
        src.as_os_str(),
        "-o".as_ref(),
        dir.join("j.bin").as_os_str(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("j.s:1:17: error: expected"), "{err}");
    assert!(err.contains("1 | vadd.f32 v1, v2,"), "{err}");
    assert!(err.contains('^'), "{err}");
}

#[test]
fn garbage_binaries_are_refused() {
    let dir = scratch("cli_disasm_bad");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for (i, len) in [0usize, 7, 16, 4096].into_iter().enumerate() {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let f = dir.join(format!("g{i}.bin"));
        std::fs::write(&f, bytes).expect("write");
        let o = tpuemu(&["disasm".as_ref(), f.as_os_str()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let o = tpuemu(&["disasm".as_ref(), dir.join("missing.bin").as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn usage_errors_exit_2() {
    let o = tpuemu(&["asm".as_ref()]);
    assert_eq!(o.status.code(), Some(2));
}
