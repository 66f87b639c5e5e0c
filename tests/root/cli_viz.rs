//! `tpuemu viz` on run directories: a directory of rank traces (as `tpuemu.trace` writes under
//! `torchrun`) renders as one multi-chip timeline, two runs compare, and a directory that is
//! not one run is refused with exit status 1 and a message naming the files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tpuemu_isa::trace::chrome::to_chrome_json;
use tpuemu_visualizer::{mode_pair, rank_traces};

fn tpuemu(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(args)
        .output()
        .expect("the tpuemu binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh scratch directory under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Writes a run of two rank traces into `dir/name`; returns the directory and its spans.
fn write_run(dir: &Path, name: &str, defer: bool) -> (PathBuf, usize) {
    let run = dir.join(name);
    std::fs::create_dir_all(&run).unwrap();
    let ranks = rank_traces(2, 9, defer, "step");
    for (r, t) in ranks.iter().enumerate() {
        std::fs::write(run.join(format!("step.rank{r}.json")), to_chrome_json(t)).unwrap();
    }
    (run, ranks.iter().map(|t| t.spans().count()).sum())
}

/// Width and height of a PNG, from its header.
fn png_size(p: &Path) -> (u32, u32) {
    let b = std::fs::read(p).expect("the PNG was written");
    assert_eq!(&b[1..4], b"PNG");
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

#[test]
fn viz_screenshots_a_directory_of_rank_traces_as_one_run() {
    let dir = scratch("cli_viz_run");
    let (run, spans) = write_run(&dir, "run", false);
    let out = dir.join("out.png");
    let o = tpuemu(&[
        "viz".as_ref(),
        run.as_os_str(),
        "--screenshot".as_ref(),
        out.as_os_str(),
        "--width".as_ref(),
        "800".as_ref(),
        "--height".as_ref(),
        "500".as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // One trace holding both ranks' spans.
    let said = text(&o.stdout);
    assert!(
        said.contains(&format!("(800x500, {spans} spans)")),
        "{said}"
    );
    assert_eq!(png_size(&out), (800, 500));

    // Two runs compare.
    let (other, more) = write_run(&dir, "defer", true);
    let o = tpuemu(&[
        "viz".as_ref(),
        run.as_os_str(),
        other.as_os_str(),
        "--screenshot".as_ref(),
        out.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{} spans", spans + more)));
}

#[test]
fn viz_refuses_a_directory_that_is_not_one_run() {
    let dir = scratch("cli_viz_mixed");
    let (run, _) = write_run(&dir, "run", false);
    std::fs::write(run.join("strict.json"), to_chrome_json(&mode_pair(3).0)).unwrap();
    let out = dir.join("out.png");
    let o = tpuemu(&[
        "viz".as_ref(),
        run.as_os_str(),
        "--screenshot".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("strict.json: no rank"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());

    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = tpuemu(&[
        "viz".as_ref(),
        empty.as_os_str(),
        "--screenshot".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("no trace files"),
        "{}",
        text(&o.stderr)
    );
}
