//! End-to-end tests of the headless path: traces written with `to_chrome_json`, read back,
//! rendered to PNG without a window or GPU, and compared with a committed snapshot.

use std::path::{Path, PathBuf};

use tpuemu_isa::trace::chrome::to_chrome_json;
use tpuemu_visualizer::{VizError, screenshot, synthetic_trace};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tpuemu-viz-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_trace(dir: &Path, name: &str, spans: usize, label: &str) -> PathBuf {
    let mut t = synthetic_trace(spans);
    t.meta.label = label.into();
    let p = dir.join(name);
    std::fs::write(&p, to_chrome_json(&t)).unwrap();
    p
}

fn read_png(p: &Path) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(p).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn screenshot_of_one_trace_is_a_non_blank_png() {
    let dir = temp_dir("one");
    let trace = write_trace(&dir, "t.json", 3000, "strict");
    let out = dir.join("shot.png");
    let info = screenshot(&[trace], &out, 800, 500).unwrap();
    assert_eq!((info.width, info.height, info.traces), (800, 500, 1));
    assert!(info.spans > 2500 && info.triangles > 100);
    let (w, h, rgb) = read_png(&out);
    assert_eq!((w, h), (800, 500));
    // Many distinct colours: spans, text and panels were drawn.
    let mut colours: Vec<[u8; 3]> = rgb.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() > 50, "only {} colours", colours.len());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn screenshot_of_two_traces_stacks_them() {
    let dir = temp_dir("two");
    let a = write_trace(&dir, "a.json", 1500, "strict");
    let b = write_trace(&dir, "b.json", 800, "defer_and_fuse");
    let out = dir.join("two.png");
    let info = screenshot(&[a, b], &out, 640, 480).unwrap();
    assert_eq!(info.traces, 2);
    std::fs::remove_dir_all(&dir).ok();
}

/// A run directory of two rank traces renders as one two-chip timeline: the pixels of its
/// collective spans (named, in their name's colour) and of its kernels are in the image.
#[test]
fn screenshot_of_a_run_directory_draws_its_ranks_spans() {
    use tpuemu_visualizer::paint::name_color;
    use tpuemu_visualizer::rank_traces;

    let dir = temp_dir("run");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let ranks = rank_traces(2, 9, false, "step");
    for (r, t) in ranks.iter().enumerate() {
        std::fs::write(run.join(format!("step.rank{r}.json")), to_chrome_json(t)).unwrap();
    }
    let out = dir.join("run.png");
    let info = screenshot(std::slice::from_ref(&run), &out, 1000, 700).unwrap();
    assert_eq!(info.traces, 1);
    assert_eq!(
        info.spans,
        ranks.iter().map(|t| t.spans().count()).sum::<usize>()
    );
    let (_, _, rgb) = read_png(&out);
    let has = |name: &str| {
        let c = name_color(name);
        rgb.chunks_exact(3)
            .filter(|p| p == &[c.r(), c.g(), c.b()])
            .count()
    };
    // Both collectives (wide spans on each rank's collective lane) and a kernel.
    for name in [
        "all_reduce 64.0 MiB axes [0]",
        "all_gather 16.0 MiB axes [0]",
        "mm",
    ] {
        assert!(has(name) > 100, "{name}: {} pixels", has(name));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let dir = temp_dir("bad");
    let out = dir.join("x.png");
    let missing = dir.join("missing.json");
    assert!(matches!(
        screenshot(std::slice::from_ref(&missing), &out, 800, 500),
        Err(VizError::Read { .. })
    ));
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "[1, 2").unwrap();
    let err = screenshot(std::slice::from_ref(&bad), &out, 800, 500).unwrap_err();
    assert!(matches!(err, VizError::NotATrace { .. }), "{err}");
    let ok = write_trace(&dir, "ok.json", 100, "x");
    assert!(matches!(
        screenshot(std::slice::from_ref(&ok), &out, 10, 500),
        Err(VizError::BadSize { .. })
    ));
    assert!(matches!(
        screenshot(&[], &out, 800, 500),
        Err(VizError::TraceCount(0))
    ));
    let unwritable = dir.join("no-such-dir").join("x.png");
    assert!(matches!(
        screenshot(&[ok], &unwritable, 800, 500),
        Err(VizError::Write { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

/// Renders a small trace with a selected fused kernel (brackets, linked operators, flows) and
/// a selected range, and compares it with `tests/snapshots/selected_group.png`. Differences
/// of a few levels (float rounding in other libms) are tolerated; set `UPDATE_SNAPSHOTS=1`
/// to rewrite the snapshot.
#[test]
fn snapshot_of_a_selected_group() {
    use tpuemu_visualizer::screenshot::{render, write_png};
    use tpuemu_visualizer::view::Selection;
    use tpuemu_visualizer::{TraceModel, ViewOptions, Viewer};

    let mut trace = synthetic_trace(1500);
    trace.meta.label = "snapshot".into();
    let model = TraceModel::new(trace, "snapshot");
    let kernel_lane = model
        .lanes
        .iter()
        .position(|l| l.label == "core0 kernels")
        .unwrap();
    let span = model.lanes[kernel_lane].spans.start + 1;
    let (t0, t1) = model.time_range;
    let mut viewer = Viewer::new(vec![model], ViewOptions::default());
    viewer.selection = Some(Selection { trace: 0, span });
    viewer.range = Some((0.0, (t1 - t0) / 2.0));
    let (canvas, _) = render(&mut viewer, 900, 600).unwrap();

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let expected = dir.join("selected_group.png");
    let actual_path = temp_dir("snap").join("selected_group.png");
    write_png(&canvas, &actual_path).unwrap();
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() || !expected.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&actual_path, &expected).unwrap();
        return;
    }
    let (w, h, want) = read_png(&expected);
    let (_, _, got) = read_png(&actual_path);
    assert_eq!((w, h), (900, 600));
    let differing = want
        .chunks_exact(3)
        .zip(got.chunks_exact(3))
        .filter(|(a, b)| a.iter().zip(b.iter()).any(|(x, y)| x.abs_diff(*y) > 24))
        .count();
    let share = differing as f64 / (w * h) as f64;
    assert!(
        share < 0.002,
        "{:.3} % of pixels differ from {} (new image: {}); run with UPDATE_SNAPSHOTS=1 if the \
         change is intended",
        share * 100.0,
        expected.display(),
        actual_path.display()
    );
}
