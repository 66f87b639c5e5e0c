//! Snapshot tests of every view, driven through egui_kittest's harness (clicks, keys, text)
//! and rendered by the crate's CPU rasterizer (no GPU): bounded lanes, the comparison of two
//! traces with its diff table, the op profile with a selected and expanded fusion group, the
//! HBM counter with its peak and ICI links as traffic, the Python lane with a search, and the
//! keyboard navigation, and merged distributed runs (`views/runs.rs`). Each test also checks facts it can derive by hand from the trace it
//! builds. Refresh the images with `UPDATE_SNAPSHOTS=1 cargo test -p tpuemu-visualizer --test
//! views` after an intended change, and look at them.

use eframe::egui::{self, Event, Key, Modifiers, TexturesDelta};
use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions, TestRenderer};
use serde_json::json;
use tpuemu_isa::trace::{Counter, Span, Trace, TraceEvent, TraceMeta, Track};
use tpuemu_visualizer::layout::Item;
use tpuemu_visualizer::profile::ProfileKind;
use tpuemu_visualizer::raster::{Canvas, Textures, rasterize};
use tpuemu_visualizer::view::{Selection, Tab};
use tpuemu_visualizer::{TraceModel, ViewOptions, Viewer, mode_pair, synthetic_trace};

#[path = "views/runs.rs"]
mod runs;

/// Renders a harness's frames with the crate's CPU rasterizer.
#[derive(Default)]
struct CpuRenderer {
    textures: Textures,
}

impl TestRenderer for CpuRenderer {
    fn handle_delta(&mut self, delta: &mut TexturesDelta) {
        self.textures.apply(delta);
    }

    fn render(
        &mut self,
        ctx: &egui::Context,
        output: &egui::FullOutput,
    ) -> Result<image::RgbaImage, String> {
        let ppp = output.pixels_per_point;
        let size = ctx.content_rect().size() * ppp;
        let (w, h) = (size.x.round() as usize, size.y.round() as usize);
        let bg = ctx.global_style().visuals.panel_fill;
        let mut canvas = Canvas::new(w, h, bg);
        let prims = ctx.tessellate(output.shapes.clone(), ppp);
        rasterize(&mut canvas, &prims, &self.textures, ppp);
        let rgba: Vec<u8> = canvas
            .to_rgb()
            .chunks_exact(3)
            .flat_map(|c| [c[0], c[1], c[2], 255])
            .collect();
        image::RgbaImage::from_raw(w as u32, h as u32, rgba).ok_or("image size".to_string())
    }
}

const W: f32 = 1200.0;
const H: f32 = 720.0;

fn harness(viewer: Viewer) -> Harness<'static, Viewer> {
    let mut h = Harness::builder()
        .with_size(egui::vec2(W, H))
        .renderer(CpuRenderer::default())
        .build_ui_state(
            |ui, v: &mut Viewer| {
                ui.ctx().set_theme(egui::Theme::Dark);
                v.ui(ui);
            },
            viewer,
        );
    h.run_steps(3);
    h
}

fn snapshot(h: &mut Harness<'_, Viewer>, name: &str) {
    h.run_steps(2);
    h.snapshot_options(name, &SnapshotOptions::new().threshold(2.0));
}

fn models(traces: Vec<Trace>) -> Vec<TraceModel> {
    traces
        .into_iter()
        .map(|t| {
            let label = t.meta.label.clone();
            TraceModel::new(t, &label)
        })
        .collect()
}

/// Every lane of chip 0 of every trace lies inside the lane area.
fn all_chip0_lanes_visible(v: &Viewer) {
    let layout = v.layout();
    for (t, m) in v.traces.iter().enumerate() {
        for (l, lane) in m.lanes.iter().enumerate() {
            if lane.group == tpuemu_visualizer::lanes::Group::Chip(0) {
                let p = layout
                    .find_lane(t, l)
                    .unwrap_or_else(|| panic!("{} hidden", lane.label));
                assert!(
                    p.y + p.h <= v.last_area_height() + 0.5,
                    "{}: lane {} ends at {} below {}",
                    m.label,
                    lane.label,
                    p.y + p.h,
                    v.last_area_height()
                );
            }
        }
    }
}

#[test]
fn overlapping_unit_spans_take_one_row() {
    let (strict, _) = mode_pair(30);
    let mut h = harness(Viewer::new(models(vec![strict]), ViewOptions::default()));
    let v = h.state();
    let valu = v.traces[0]
        .lanes
        .iter()
        .find(|l| l.label == "core0 valu")
        .unwrap();
    // Eight vector instructions are in flight at a time: one row of occupancy, not eight.
    assert_eq!(valu.rows.len(), 1);
    let lanes = v.traces[0].lanes.len();
    assert!(lanes >= 10, "{lanes} lanes");
    all_chip0_lanes_visible(v);
    snapshot(&mut h, "lanes_bounded");
}

#[test]
fn compare_shows_both_runs_and_the_diff_table() {
    let (strict, defer) = mode_pair(30);
    let mut h = harness(Viewer::new(
        models(vec![defer, strict]),
        ViewOptions::default(),
    ));
    {
        let v = h.state_mut();
        assert_eq!(v.tab, Tab::Compare);
        // 30 operators: 10 mm, 5 each of add, mul, softmax, relu, in both runs.
        let d = v.diff(ProfileKind::Operator).to_vec();
        let mm = d.iter().find(|r| r.name == "aten::mm").unwrap();
        assert_eq!((mm.a.unwrap().count, mm.b.unwrap().count), (10, 10));
        let k = v.diff(ProfileKind::Kernel).to_vec();
        let kernels = |side: usize| -> usize {
            k.iter()
                .filter_map(|r| if side == 0 { r.a } else { r.b })
                .map(|s| s.count)
                .sum()
        };
        assert_eq!((kernels(0), kernels(1)), (10, 30));
    }
    all_chip0_lanes_visible(h.state());
    // Both traces' headers are on screen.
    let layout = h.state().layout();
    let headers = layout
        .items
        .iter()
        .filter(|p| matches!(p.item, Item::TraceHeader { .. }))
        .count();
    assert_eq!(headers, 2);
    h.get_by_label("Fusion groups").click();
    h.run_steps(2);
    assert_eq!(h.state().tables.kind, ProfileKind::Group);
    h.get_by_label("Operators").click();
    snapshot(&mut h, "compare");
}

#[test]
fn profile_row_lights_up_its_spans_and_expands() {
    let (_, defer) = mode_pair(12);
    let mut h = harness(Viewer::new(models(vec![defer]), ViewOptions::default()));
    h.get_by_label("Fusion groups").click();
    h.run_steps(2);
    let name = "aten::mm + aten::add.Tensor + aten::mul.Tensor";
    {
        let v = h.state_mut();
        let p = v.profile(0, ProfileKind::Group);
        // Steps 0-2 and 6-8 fuse mm+add+mul: two instances.
        let row = p.row(name).unwrap();
        assert_eq!(row.count, 2);
        v.tables.expanded.insert(name.to_string());
        v.mark_row(ProfileKind::Group, Some(0), name);
        // Each instance: its kernel and its three operators.
        assert_eq!(v.marks.as_ref().unwrap().len(), 8);
    }
    // Enter steps to the first marked span and selects it.
    h.key_press(Key::Enter);
    h.run_steps(2);
    assert!(h.state().selection.is_some());
    snapshot(&mut h, "profile");
}

/// Two chips joined by links x+ and x-: chip 0 sends on x+ at 45 GB/s then at 15 GB/s,
/// chip 1 on x- at 30 GB/s; each chip's HBM rises to a peak and falls.
fn pod_trace() -> Trace {
    let mut events = Vec::new();
    for chip in 0..2u32 {
        let mut k = Span::new(Track::Kernel { chip, core: 0 }, "all_reduce", 0.0, 10_000.0);
        k.args.insert("hbm_bytes".into(), json!(1 << 20));
        events.push(TraceEvent::Span(k));
        for (i, (t, v)) in [(0.0, 1e8), (3000.0, 3e8), (6000.0, 2e8), (9000.0, 1.5e8)]
            .into_iter()
            .enumerate()
        {
            let bump = if chip == 1 && i == 2 { 2e8 } else { 0.0 };
            events.push(TraceEvent::Counter(Counter {
                chip: Some(chip),
                name: "hbm_bytes_in_use".into(),
                ns: t,
                value: v + bump,
            }));
        }
    }
    let link = |chip: u32, link: &str, s: f64, e: f64, gb_s: f64| {
        let mut sp = Span::new(
            Track::Link {
                chip,
                link: link.into(),
            },
            "rdma",
            s,
            e,
        );
        sp.args.insert("bytes".into(), json!((e - s) * gb_s));
        sp.args.insert("to_chip".into(), json!(1 - chip));
        TraceEvent::Span(sp)
    };
    for i in 0..10 {
        let s = f64::from(i) * 1000.0;
        let rate = if i < 5 { 45.0 } else { 15.0 };
        events.push(link(0, "x+", s, s + 800.0, rate));
        events.push(link(1, "x-", s + 100.0, s + 700.0, 30.0));
    }
    Trace {
        meta: TraceMeta {
            label: "pod all-reduce".into(),
            generation: "v5e".into(),
            chips: 2,
            hbm_bytes_per_s: 819e9,
            peak_bf16_flops: 197e12,
            clock_hz: 1.5e9,
            ..Default::default()
        },
        events,
    }
}

#[test]
fn memory_counter_peak_and_link_traffic() {
    let mut h = harness(Viewer::new(
        models(vec![pod_trace()]),
        ViewOptions::default(),
    ));
    {
        let v = h.state_mut();
        let m = &v.traces[0];
        let peaks: Vec<(f64, f64)> = m.series.iter().map(|s| s.peak).collect();
        assert_eq!(peaks, [(3000.0, 3e8), (6000.0, 4e8)]);
        // 45 GB/s = 45 bytes per ns, the fastest link span.
        assert!((m.link_peak_rate - 45.0).abs() < 1e-9);
        v.tab = Tab::Stats;
        let st = v.stats().to_vec();
        let x_plus = st[0].lanes.iter().find(|l| l.label == "link x+").unwrap();
        // 5 spans of 800 ns at 45 B/ns and 5 at 15 B/ns.
        assert!((x_plus.bytes - 5.0 * 800.0 * 60.0).abs() < 1e-6);
    }
    all_chip0_lanes_visible(h.state());
    snapshot(&mut h, "memory_ici");
}

#[test]
fn python_lane_search_and_flows() {
    let mut t = synthetic_trace(2500);
    t.meta.chips = 1;
    t.events.retain(|e| match e {
        TraceEvent::Span(s) => s.track.chip().is_none_or(|c| c == 0),
        TraceEvent::Flow(f) => f.to.chip() == Some(0),
        TraceEvent::Counter(c) => c.chip == Some(0),
    });
    let mut h = harness(Viewer::new(models(vec![t]), ViewOptions::default()));
    let python = h.state().traces[0]
        .lanes
        .iter()
        .position(|l| l.label == "python")
        .unwrap();
    // The Python lane is the first lane, above aten.
    assert_eq!(python, 0);
    // "/" focuses the search box; typing searches; Enter steps to the first match.
    h.key_press(Key::Slash);
    h.run_steps(2);
    h.event(Event::Text("softmax".into()));
    h.run_steps(2);
    let found = h.state().marks.as_ref().map_or(0, |m| m.len());
    let expected = h.state().traces[0]
        .spans
        .iter()
        .filter(|s| s.name.to_lowercase().contains("softmax"))
        .count();
    assert!(expected > 0);
    assert_eq!(found, expected);
    h.key_press(Key::Enter);
    h.run_steps(2);
    let sel = h.state().selection.expect("Enter selects the first match");
    let v = h.state();
    assert!(v.traces[0].spans[sel.span].name.contains("softmax"));
    snapshot(&mut h, "python_search");
}

#[test]
fn perfetto_keys_zoom_pan_focus_and_clear() {
    let mut h = harness(Viewer::new(
        models(vec![synthetic_trace(3000)]),
        ViewOptions::default(),
    ));
    let span_ns = |v: &Viewer| v.axis.right_ns() - v.axis.left_ns;
    let before = span_ns(h.state());
    h.key_press(Key::W);
    h.run_steps(2);
    let zoomed = span_ns(h.state());
    assert!((zoomed / before - 0.8).abs() < 1e-6, "{}", zoomed / before);
    h.key_press(Key::S);
    h.run_steps(2);
    assert!((span_ns(h.state()) / before - 1.0).abs() < 1e-6);
    let left = h.state().axis.left_ns;
    h.key_press(Key::D);
    h.run_steps(2);
    let moved = h.state().axis.left_ns - left;
    assert!((moved / span_ns(h.state()) - 0.15).abs() < 1e-3, "{moved}");
    // F zooms to the selection; M marks its range; Esc clears it, then the range.
    let kernel = h.state().traces[0]
        .lanes
        .iter()
        .find(|l| l.label == "core0 kernels")
        .unwrap()
        .spans
        .start;
    h.state_mut().selection = Some(Selection {
        trace: 0,
        span: kernel,
    });
    h.key_press(Key::F);
    h.key_press(Key::M);
    h.run_steps(2);
    let s = &h.state().traces[0].spans[kernel];
    let off = h.state().offsets()[0];
    assert_eq!(h.state().range, Some((s.start_ns + off, s.end_ns + off)));
    assert!((span_ns(h.state()) - s.duration_ns() * 1.2).abs() < s.duration_ns() * 0.01);
    // ] follows the kernel's flow back... forward from a kernel there is none; [ goes back.
    h.key_press(Key::OpenBracket);
    h.run_steps(2);
    let back = h.state().selection.unwrap();
    assert!(
        h.state().traces[0].spans[back.span]
            .name
            .starts_with("aten::")
    );
    h.key_press(Key::Escape);
    h.run_steps(1);
    assert!(h.state().selection.is_none() && h.state().range.is_some());
    h.key_press_modifiers(Modifiers::NONE, Key::Escape);
    h.run_steps(1);
    assert!(h.state().range.is_none());
}
